"""A hung, slow, trickling, dropping or broken server never stalls a lookup: the whole
daemon, a real slapd, the fault proxy (testing/faultproxy.py) between them, and the real
libnss_sss through glibc.

"Within the bound" is shown by what the daemon did, not by a stopwatch: the responder
answered while the backend's request was still waiting on the server (its search
timeout is set far longer than the bound), the responder made no backend round trip
(its ``nss.backend`` counter), the proxy forwarded only part of an answer. Durations
are printed for the record (``pytest -s``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cached.counters import NSS_BACKEND, NSS_STALE
from testing.checks import (
    SOCKET_ONLY,
    backend_status,
    expected_answers,
    responder_status,
    served_answers,
    verify_entry_store,
    wait_for,
)
from testing.daemon import CachedDaemon
from testing.faultproxy import FaultProxy
from testing.marks import requires_nss
from testing.slapd import LiveDirectory

pytestmark = requires_nss

DOMAIN = "LDAP"


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[str, int], FaultProxy]]:
    proxies: list[FaultProxy] = []

    def make(host: str, port: int) -> FaultProxy:
        p = FaultProxy(host, port).start()
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        p.stop()


def count(d: CachedDaemon, name: str) -> int:
    return int(d.counters().get(name, [0])[0])


def domain_view(d: CachedDaemon) -> dict[str, Any]:
    """The responder's view of the domain (learned from the backend)."""
    return dict(responder_status(d)["domains"][DOMAIN])


def hung_primary_with_backup(
    daemon_factory: Callable[..., CachedDaemon],
    proxy_factory: Callable[[str, int], FaultProxy],
    directory: LiveDirectory,
    failover_primary_timeout: int,
) -> tuple[FaultProxy, CachedDaemon]:
    """A daemon whose preferred server accepts and never answers (a SIGSTOPped
    server: a stalled proxy) and whose ``ldap_backup_uri`` is the directory's slapd,
    every LDAP timeout 2 s."""
    hung = proxy_factory("127.0.0.1", directory.slapd.port)
    hung.set(stall=True)
    d = daemon_factory(
        directory, uris=[hung.uri], ldap_backup_uri=directory.slapd.uri,
        ldap_search_timeout=2, ldap_opt_timeout=2, ldap_network_timeout=2,
        failover_primary_timeout=failover_primary_timeout,
    )  # fmt: skip
    return hung, d


def getent(d: CachedDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return d.run_nss(["getent", *args], env=SOCKET_ONLY)


def test_hung_server_expired_entries_answer_from_the_cache_then_no_round_trips(
    daemon_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    # The backend waits on the hung server far longer than the responder's bound: an
    # answer before the backend gave up can only come from the bound.
    d = daemon_factory(
        slapd_small_fresh, nss={"cache_first_wait": 1},
        ldap_search_timeout=60, ldap_opt_timeout=60, ldap_network_timeout=2,
        offline_timeout=60, offline_timeout_max=120,
    )  # fmt: skip
    want = expected_answers(exp)
    assert served_answers(d, exp) == want  # fills the cache; the connection stays open
    user = sorted(want.passwd)[0]
    s.pause()  # SIGSTOP: the kernel accepts, nothing answers
    try:
        assert d.cli("cache", "-E").returncode == 0
        start = time.monotonic()
        r = getent(d, "passwd", user)
        first_s = time.monotonic() - start
        assert r.returncode == 0 and r.stdout.strip() == want.passwd[user]
        view = domain_view(d)
        # Answered while the backend still waits on the server (60 s search timeout).
        assert view["stalled"] and not view["offline"], view
        assert backend_status(d)["online"]
        assert "within cache_first_wait = 1 s; answering from the cache" in d.log_text()

        # Everything else expired: answered from the cache without waiting (the stuck
        # request tells the responder when it ends), and without a backend request
        # but one: the big user's groups, which refreshes every group of the user
        # (the getgrgid of each, asked alone once the stall ends, would not).
        before = count(d, NSS_BACKEND)
        stale_before = count(d, NSS_STALE)
        asked_before = responder_status(d)["inflight"]
        start = time.monotonic()
        assert served_answers(d, exp) == want
        rest_s = time.monotonic() - start
        assert count(d, NSS_BACKEND) == before  # none has ended: the server hangs
        assert responder_status(d)["inflight"] == asked_before + 1
        assert count(d, NSS_STALE) > stale_before
    finally:
        s.resume()
    print(f"\nhung slapd: first lookup {first_s:.2f} s, all 55 more + initgroups {rest_s:.2f} s")


def test_offline_domain_answers_expired_entries_without_a_backend_round_trip(
    daemon_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d = daemon_factory(
        slapd_small_fresh, nss={"cache_first_wait": 1},
        ldap_search_timeout=2, ldap_opt_timeout=2, ldap_network_timeout=2,
        offline_timeout=2, offline_timeout_max=4,
    )  # fmt: skip
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    user = sorted(want.passwd)[0]
    dn = exp.user(user).dn
    s.pause()
    try:
        assert d.cli("cache", "-E").returncode == 0
        assert getent(d, "passwd", user).stdout.strip() == want.passwd[user]
        # The backend gives up on the server (search timeout) and says so.
        wait_for(lambda: domain_view(d)["offline"], "responder learns offline", log=d.log_tail)
        st = backend_status(d)
        assert not st["online"] and "timed out" in st["last_error"], st
        assert st["offline_since"] > 0
        text = d.cli("status").stdout
        assert f"OFFLINE: {s.uri}" in text and "offline since:" in text, text
        assert "next attempt in" in text

        before = count(d, NSS_BACKEND)
        assert served_answers(d, exp) == want
        r = getent(d, "passwd", "nosuchuser-offline")
        assert r.returncode == 2  # unknown names fail at once
        assert count(d, NSS_BACKEND) == before  # not one backend round trip
    finally:
        s.resume()

    # Back: the next refresh after the retry time reaches the server and sees changes.
    s.ldap_modify(f"dn: {dn}\nchangetype: modify\nreplace: loginShell\nloginShell: /bin/zsh\n")
    assert d.cli("cache", "-E").returncode == 0

    def fresh() -> bool:
        return getent(d, "passwd", user).stdout.strip().endswith(":/bin/zsh")

    wait_for(fresh, "fresh data after the server came back", log=d.log_tail)
    assert backend_status(d)["online"]
    wait_for(lambda: not domain_view(d)["offline"], "responder learns online", log=d.log_tail)
    assert "domain LDAP back online via " + s.uri in d.log_text()


def test_hung_first_uri_fails_over_to_the_second_and_returns_to_the_primary(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    hung, d = hung_primary_with_backup(daemon_factory, proxy_factory, slapd_small_fresh, 2)
    want = expected_answers(exp)
    user = sorted(want.passwd)[0]
    start = time.monotonic()
    r = getent(d, "passwd", user)  # not cached: waits, for one timeout, then the backup
    first_s = time.monotonic() - start
    assert r.returncode == 0 and r.stdout.strip() == want.passwd[user]
    st = backend_status(d)
    assert st["online"] and st["server"] == s.uri, st
    log = d.log_text()
    assert f"server failed, trying the next one: {hung.uri}: " in log
    assert "timed out after ldap_opt_timeout = 2 s" in log
    assert hung.stats.connections == 1  # waited on once, never again
    assert served_answers(d, exp) == want
    assert hung.stats.connections == 1

    # The primary heals: after failover_primary_timeout the backend goes back to it.
    hung.heal()

    def on_primary() -> bool:
        assert d.cli("cache", "-u", user).returncode == 0
        getent(d, "passwd", user)
        return bool(backend_status(d)["server"] == hung.uri)

    wait_for(on_primary, "back on the primary", log=d.log_tail)
    assert served_answers(d, exp) == want
    print(f"\nhung first URI: first lookup via the second in {first_s:.2f} s")


def test_the_connection_is_made_at_the_start_and_the_first_lookup_uses_it(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    """The backend connects at the start, off the lookup path: the first lookup finds
    the connection (TCP, bind, root DSE) made instead of making it."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    d = daemon_factory(slapd_small_fresh, uris=[px.uri])
    wait_for(lambda: backend_status(d)["server"] == px.uri, "connected at the start",
             log=d.log_tail)  # fmt: skip
    assert px.stats.connections == 1
    want = expected_answers(exp)
    user = sorted(want.passwd)[0]
    r = getent(d, "passwd", user)
    assert r.returncode == 0 and r.stdout.strip() == want.passwd[user]
    assert px.stats.connections == 1  # the start's connection, not a second one


def test_a_server_down_at_the_start_is_tried_again_by_the_first_lookup(
    daemon_factory, slapd_small_fresh
):
    """A daemon started before its server (at boot): the start's failed attempt
    records nothing, so the first lookup once the server is up connects, rather
    than finding every server failed and going offline for offline_timeout."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    s.stop()
    d = daemon_factory(slapd_small_fresh, offline_timeout=600)
    wait_for(lambda: "no server answered at the start" in d.log_text(),
             "the start's attempt", log=d.log_tail)  # fmt: skip
    s.start()
    want = expected_answers(exp)
    user = sorted(want.passwd)[0]
    r = getent(d, "passwd", user)
    assert r.returncode == 0 and r.stdout.strip() == want.passwd[user]
    st = backend_status(d)
    assert st["online"] and st["server"] == s.uri, st


def test_server_dropping_mid_answer_leaves_no_half_written_entry(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    d = daemon_factory(
        slapd_small_fresh, uris=[px.uri], nss={"cache_first_wait": 5},
        ldap_search_timeout=5, ldap_opt_timeout=5, offline_timeout=60,
    )  # fmt: skip
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    before = verify_entry_store(d.db_dir)
    # Every connection now dies 300 bytes into an answer: the root DSE survives a new
    # connection's set-up only partly, the big user's groups never arrive whole.
    px.drop_all()
    px.set(drop_after=300)
    assert d.cli("cache", "-E").returncode == 0
    got = served_answers(d, exp)
    assert got == want  # from the cache
    st = backend_status(d)
    assert not st["online"], st
    assert px.stats.dropped >= 1
    after = verify_entry_store(d.db_dir)  # every record and index entry intact
    assert (after.users, after.groups, after.initgr) == (before.users, before.groups, before.initgr)
    assert "Traceback" not in d.log_text()


def test_17_6_trickling_server_takes_the_domain_offline_within_the_deadline(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    d = daemon_factory(
        slapd_small_fresh, uris=[px.uri], nss={"cache_first_wait": 1},
        ldap_search_timeout=2, ldap_opt_timeout=2, offline_timeout=60,
    )  # fmt: skip
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    full = px.stats.bytes_down
    # One byte every 0.2 s: far under the old per-read timeout (8 s), so ldap3's
    # per-read timeout never fired and a search took as long as the server liked.
    px.set(trickle=0.2)
    before = px.stats.bytes_down
    assert d.cli("cache", "-E").returncode == 0
    start = time.monotonic()
    assert served_answers(d, exp) == want  # from the cache, within the bound
    answered_s = time.monotonic() - start
    wait_for(lambda: not backend_status(d)["online"], "offline", log=d.log_tail)
    offline_s = time.monotonic() - start
    st = backend_status(d)
    assert "timed out" in st["last_error"], st
    # The deadline stopped the reading: a small part of what a refresh of everything
    # needs went through (about deadline / 0.2 s bytes per attempt).
    assert px.stats.bytes_down - before < full / 10, (px.stats.bytes_down - before, full)
    print(f"\ntrickling server: answers in {answered_s:.2f} s, offline after {offline_s:.2f} s")


def _break_paged_results_oid(data: bytes) -> bytes:
    # Same length, so the BER stays well-formed: only the value is not UTF-8.
    return data.replace(b"1.2.840.113556.1.4.319", b"1.2.840.113556.1.4.31\xff")


def test_17_11_non_utf8_root_dse_value_fails_the_server_cleanly(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    px.set(rewrite=_break_paged_results_oid)
    d = daemon_factory(slapd_small_fresh, uris=[px.uri], offline_timeout=1, offline_timeout_max=1)
    user = sorted(exp.user_names())[0]
    for _ in range(3):
        assert getent(d, "passwd", user).returncode == 2
    st = backend_status(d)
    assert not st["online"], st
    assert "root DSE attribute supportedControl is not valid UTF-8" in st["last_error"], st
    log = d.log_text()
    assert "Traceback" not in log
    assert log.count("root DSE attribute supportedControl is not valid UTF-8") <= 3
    # Every connection was closed: none is left open through the proxy.
    wait_for(lambda: px.open_connections == 0, "connections closed", log=d.log_tail)
    assert px.stats.connections >= 1

    px.set(rewrite=None)  # the server is fixed: back online at the next retry
    wait_for(lambda: getent(d, "passwd", user).returncode == 0, "online again", log=d.log_tail)
    assert backend_status(d)["online"]


def test_slow_server_cold_lookups_wait_for_the_whole_answer(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    """The bound is for entries the cache holds: a user seen by getpwnam whose groups
    were never fetched is a missing initgroups, and waits for the backend."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    d = daemon_factory(slapd_small_fresh, uris=[px.uri], nss={"cache_first_wait": 1})
    want = expected_answers(exp)
    user = exp.big_user
    assert getent(d, "passwd", user).returncode == 0  # the user only, no groups yet
    px.rtt(0.6)  # every search now takes longer than cache_first_wait
    r = getent(d, "initgroups", user)
    assert frozenset(int(g) for g in r.stdout.split()[1:]) == want.initgroups
    assert count(d, NSS_STALE) == 0


def test_a_retry_against_a_hung_server_never_holds_a_lookup(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    """Offline, the servers are tried again in the background (SSSD's check_if_online):
    while that attempt waits on a hung server — for ldap_opt_timeout, set far longer
    than the test — lookups the responder sends the backend are answered at once,
    cached names from the cache, unknown names NOTFOUND. Before, the first lookup past
    the retry time made the attempt itself and waited for it, and every lookup queued
    behind it (a helper's differential against SSSD 2.8.2: 8 s per backoff step)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    px = proxy_factory("127.0.0.1", s.port)
    d = daemon_factory(
        slapd_small_fresh, uris=[px.uri], nss={"cache_first_wait": 1},
        ldap_search_timeout=2, ldap_network_timeout=2, ldap_opt_timeout=600,
        offline_timeout=1, offline_timeout_max=1, offline_timeout_random_offset=0,
    )  # fmt: skip
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    user = sorted(want.passwd)[0]
    attempts = px.stats.connections
    px.set(stall=True)  # the open connection's answers and every new connection wait
    assert d.cli("cache", "-E").returncode == 0
    assert getent(d, "passwd", user).stdout.strip() == want.passwd[user]  # from the cache
    wait_for(lambda: not backend_status(d)["online"], "offline", log=d.log_tail)
    # The retry, one second later, in the background: a new connection to the proxy,
    # which holds it (ldap_opt_timeout = 600 s).
    wait_for(lambda: px.stats.connections > attempts, "the background retry", log=d.log_tail)
    assert "trying the servers now" in d.cli("status").stdout
    # The responder's offline period (the retry time it was told) is over: it asks the
    # backend again.
    wait_for(lambda: domain_view(d)["retry_in"] == 0, "retry time passed", log=d.log_tail)
    before = count(d, NSS_BACKEND)
    r = getent(d, "passwd", "nosuchuser-while-retrying")
    assert r.returncode == 2
    assert served_answers(d, exp) == want
    # The backend was asked (the responder saw the retry time pass) and answered while
    # the retry still waits: offline, the proxy still holding that connection.
    assert count(d, NSS_BACKEND) > before
    assert not backend_status(d)["online"] and px.open_connections >= 1
    assert px.stats.connections == attempts + 1  # one attempt at a time

    px.heal()  # the held connection goes through: its bind and root DSE succeed
    wait_for(lambda: backend_status(d)["online"], "online again", log=d.log_tail)
    wait_for(lambda: not domain_view(d)["offline"], "responder learns online", log=d.log_tail)
    assert getent(d, "passwd", user).stdout.strip() == want.passwd[user]
    assert "domain LDAP back online via " + px.uri in d.log_text()


def test_the_return_to_a_hung_preferred_server_never_holds_a_lookup(
    daemon_factory, proxy_factory, slapd_small_fresh
):
    """On a backup server, the preferred one is tried again after
    failover_primary_timeout in the background too: while that attempt waits on the
    hung preferred server, lookups go on over the backup. Before, the first lookup
    past the timeout made the attempt and waited ldap_opt_timeout (found in review)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    hung, d = hung_primary_with_backup(daemon_factory, proxy_factory, slapd_small_fresh, 1)
    want = expected_answers(exp)
    user = sorted(want.passwd)[0]
    assert getent(d, "passwd", user).stdout.strip() == want.passwd[user]  # via the backup
    assert backend_status(d)["server"] == s.uri
    assert hung.stats.connections == 1
    # The first return attempt times out (ldap_opt_timeout = 2 s) in the background;
    # the second one is held: long enough to look everything up meanwhile.
    wait_for(lambda: hung.stats.connections >= 2, "a return attempt", log=d.log_tail)
    assert d.cli("cache", "-E").returncode == 0
    before = count(d, NSS_BACKEND)
    assert served_answers(d, exp) == want
    assert count(d, NSS_BACKEND) > before  # refreshed over the backup, not from the cache
    assert count(d, NSS_STALE) == 0  # none waited out cache_first_wait
    st = backend_status(d)
    assert st["online"] and st["server"] == s.uri, st
    hung.heal()
    wait_for(lambda: backend_status(d)["server"] == hung.uri, "back on the primary",
             log=d.log_tail)  # fmt: skip
    assert served_answers(d, exp) == want


def test_a_slow_server_that_keeps_sending_is_not_failed(daemon_factory, proxy_factory, slapd_big):
    """A server answering slowly, its entries coming all along (a directory loaded by a
    fleet's cold start), is not a hung one: each search's ``ldap_search_timeout`` runs
    again from the entries that came, so a cold lookup whose searches take longer than
    it completes and the domain stays online (SSSD's timeout, per page, moves to the
    next server and takes a one-server domain offline)."""
    exp = slapd_big.expected
    px = proxy_factory("127.0.0.1", slapd_big.slapd.port)
    d = daemon_factory(
        slapd_big, uris=[px.uri], ldap_search_timeout=2, ldap_opt_timeout=10, offline_timeout=60
    )
    assert getent(d, "passwd", exp.big_user).returncode == 0  # connected, the user only
    # 1 MiB a second on each connection, 8 KiB at a time: entries every 8 ms, the
    # answer to the user's 2,085 groups (3.2 MB) several seconds.
    px.set(bandwidth=1024 * 1024, piece=8192)
    before = px.stats.bytes_down
    start = time.monotonic()
    r = getent(d, "initgroups", exp.big_user)
    took = time.monotonic() - start
    want = expected_answers(exp).initgroups
    assert frozenset(int(g) for g in r.stdout.split()[1:]) == want, d.log_tail()
    st = backend_status(d)
    assert st["online"], st
    moved = px.stats.bytes_down - before
    # Longer than the timeout at that rate (a lower bound, which load only raises).
    assert moved > 2 * 1024 * 1024 and took > 2, (took, moved)
    assert "timed out" not in d.log_text()
    print(f"\nslow server: {moved} bytes in {took:.2f} s, online")
