"""Refresh ahead by default, per-host offsets, and the persistent cache across restarts
(cached/jitter.py, BackendService._refresh_expired; reference §6.4)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from cached.cache import State, open_domain_cache
from cached.cache.integrity import cache_paths, remove_store
from cached.config import parse_config
from cached.counters import (
    LDAP_SEARCH,
    NSS_SOON,
    NSS_WAIT,
    REFRESH_CATCH_UP,
    REFRESH_EARLY,
    REFRESH_LEFT,
    REFRESH_PACED,
    REQ_GROUP,
    REQ_INITGR,
    REQ_USER,
    VALIDATE,
    VALIDATE_FETCHED,
)
from cached.jitter import CONNECTION_EXPIRE, OFFLINE_RETRY, REFRESH_AHEAD
from cached.ldap.service import REFRESH_SEARCHES_PER_SECOND, BackendService
from testing.backend import config_text
from testing.checks import backend_status
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

ID_A = "6b1d0c4e2f3a4b5c8d9e0f1a2b3c4d5e\n"
ID_B = "e5d4c3b2a1f04e9d8c7b6a5f4e3d2c1b\n"
# A host whose share of the early run's delay (cached.jitter.REFRESH_SOON) is 2 %:
# 1.2 s of the 60 s spread, where ID_A's is 53 % (32 s).
ID_EARLY = "38b3eff8baf56627478ec76a704e9b52\n"
# A host whose catch-up delay (cached.jitter.CATCH_UP) is 1.7 % (1 s of the 60 s
# spread) and whose scheduled runs start late: 95 % of its offset (the first run 70 s
# after the start at a 600 s lifetime).
ID_CATCH_UP = "0ff39bbbf981ac0151d340c9aa40e63e\n"
TIMEOUT = 120.0  # generous: a loaded 2-core machine


def _service(tmp_path: Path, name: str, machine_id: Path, **opts) -> BackendService:
    cfg = parse_config(
        config_text(
            ["ldap://127.0.0.1:1"],
            "dc=x",
            daemon={"db_dir": tmp_path / name, "machine_id_file": machine_id},
            **{"refresh_expired_interval": None, **opts},
        )
    )
    return BackendService(cfg, cfg.domains[0])


def test_backends_of_hosts_with_different_machine_ids_differ(tmp_path: Path) -> None:
    a, b = tmp_path / "machine-id-a", tmp_path / "machine-id-b"
    a.write_text(ID_A)
    b.write_text(ID_B)
    services = [_service(tmp_path, n, m) for n, m in (("a1", a), ("a2", a), ("b", b))]
    try:
        lifetimes = [s.client.connection_lifetime() for s in services]
        fractions = [[s.jitter.fraction(p) for p in (REFRESH_AHEAD, OFFLINE_RETRY)]
                     for s in services]  # fmt: skip
        # The same machine-id (a restart, another backend of the host): the same.
        assert lifetimes[0] == lifetimes[1] and fractions[0] == fractions[1]
        assert lifetimes[0] != lifetimes[2] and fractions[0] != fractions[2]
        # Defaults: 900 s plus up to 900 s; refresh ahead on (SSSD's rule's values).
        assert 900 <= lifetimes[0] < 1800
        assert lifetimes[0] == 900 + services[0].jitter.offset(CONNECTION_EXPIRE, 900)
        assert services[0].refresh_schedule() == (3780.0, 378.0)
        # The scheduled runs after the first: at the host's own point of the interval
        # on the wall clock, whenever the host started; the same host the same point.
        now = time.time()
        runs = [s.next_refresh(now, 3780.0) for s in services]
        assert all(now + 378.0 <= r < now + 378.0 + 3780.0 for r in runs)
        assert runs[0] == runs[1] and runs[0] != runs[2]
        later = services[0].next_refresh(now + 1000.0, 3780.0)
        assert abs(later % 3780.0 - runs[0] % 3780.0) < 1e-6
    finally:
        for s in services:
            s.cache.close()


def test_refresh_ahead_defaults_follow_the_entry_lifetime(tmp_path: Path) -> None:
    mid = tmp_path / "machine-id"
    mid.write_text(ID_A)

    def schedule(**opts) -> tuple[float, float]:
        s = _service(tmp_path, f"db{len(list(tmp_path.iterdir()))}", mid, **opts)
        try:
            return s.refresh_schedule()
        finally:
            s.cache.close()

    assert schedule(entry_cache_timeout=1000) == (700.0, 70.0)
    assert schedule(entry_cache_timeout=5400, entry_cache_group_timeout=600) == (420.0, 42.0)
    assert schedule(refresh_expired_interval=0) == (0.0, 0.0)  # off, as asked
    assert schedule(refresh_expired_interval=600, refresh_expired_interval_offset=5) == (
        600.0,
        5.0,
    )


def _wait(what: str, cond: Callable[[], bool], d: CachedDaemon) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        assert time.monotonic() < deadline, f"{what}:\n{d.log_tail()}"
        time.sleep(0.2)


def _valid(d: CachedDaemon, user: str) -> bool:
    domain = parse_config(d.config_path.read_text()).domains[0]
    cache = open_domain_cache(str(d.db_dir), domain)
    try:
        return {cache.initgroups(user).state, cache.user_by_name(user).state} == {State.VALID}
    finally:
        cache.close()


def _amount(d: CachedDaemon, name: str) -> float:
    return d.counters().get(name, [0, 0, 0])[2]


def _requests(d: CachedDaemon) -> float:
    c = d.counters()
    return sum(c.get(k, [0])[0] for k in (REQ_USER, REQ_GROUP, REQ_INITGR))


def _member_searches(s: Slapd, offset: int) -> list[str]:
    return [op.filter for op in s.searches(offset) if "member" in {a.lower() for a in op.attrs}]


@requires_nss
def test_refresh_ahead_validates_by_stamps_and_never_while_offline(
    daemon_factory, slapd_small_fresh, tmp_path: Path
) -> None:
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    user = exp.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_A)
    d = daemon_factory(
        slapd_small_fresh,
        daemon={"machine_id_file": mid},
        refresh_expired_interval=1,
        offline_timeout=1,
        offline_timeout_max=2,
    )
    assert d.run_nss(["id", user]).returncode == 0
    ran = "background refresh: 1 initgroups, 1 users"

    # Everything expired: the background run revalidates it by stamps, no lookup asked.
    offset = s.log_offset()
    assert d.cli("cache", "-E").returncode == 0
    _wait("refreshed ahead", lambda: _valid(d, user) and ran in d.log_text(), d)
    assert _amount(d, VALIDATE) > 0
    assert _amount(d, VALIDATE_FETCHED) == 0  # nothing changed: no group fetched whole
    assert _member_searches(s, offset) == []  # and no member value asked for

    # The directory goes away; the next run finds it gone and stops, and the runs
    # after it are skipped: no request while offline.
    s.stop()
    try:
        assert d.cli("cache", "-E").returncode == 0
        skipped = "background refresh skipped: domain LDAP offline"
        _wait("a run skipped", lambda: d.log_text().count(skipped) >= 1, d)
        before = _requests(d)
        _wait("three runs skipped", lambda: d.log_text().count(skipped) >= 4, d)
        assert _requests(d) == before
        assert "(went offline)" in d.log_text()
        assert not _valid(d, user)
    finally:
        s.start()
    # Back online (the server check), the next run revalidates, again by stamps only.
    offset = s.log_offset()
    _wait("refreshed after the outage", lambda: _valid(d, user), d)
    assert _amount(d, VALIDATE_FETCHED) == 0
    assert _member_searches(s, offset) == []


@requires_nss
def test_restart_with_a_full_cache_answers_without_a_search(daemon_factory, slapd_small) -> None:
    s, exp = slapd_small.slapd, slapd_small.expected
    user = exp.big_user
    d = daemon_factory(slapd_small)
    want = d.run_nss(["id", user])
    assert want.returncode == 0, want.stderr

    def after_restart() -> tuple[str, list[str]]:
        d.stop()
        d.start()
        offset = s.log_offset()
        got = d.run_nss(["id", user])
        assert got.returncode == 0, got.stderr
        # The start's connection reads the root DSE (base ""): not a lookup's search.
        return got.stdout, [op.filter for op in s.searches(offset) if op.base]

    out, searches = after_restart()
    assert out == want.stdout
    assert searches == []
    # The same restart with the timestamp store lost (a crash of the machine): the
    # entries count as expired, and the lookup asks the server.
    d.stop()
    remove_store(cache_paths(str(d.db_dir), "LDAP")[1])
    out, searches = after_restart()
    assert out == want.stdout
    assert searches


@requires_nss
def test_connection_is_replaced_after_its_lifetime(daemon_factory, slapd_small) -> None:
    s, exp = slapd_small.slapd, slapd_small.expected
    d = daemon_factory(
        slapd_small, ldap_connection_expire_timeout=2, ldap_connection_expire_offset=0
    )

    def conns_of(name: str) -> set[int]:
        offset = s.log_offset()
        assert d.run_nss(["getent", "passwd", name]).returncode == 0
        return {op.conn for op in s.searches(offset) if op.base}

    users = sorted(exp.user_names())
    first = conns_of(users[0])
    assert len(first) == 1
    renewed = "connection to ldap://"
    _wait("the connection renewed", lambda: d.log_text().count(renewed) >= 1, d)
    # The server check made the new connection; the next lookup searches on it.
    second = conns_of(users[1])
    assert len(second) == 1 and second != first
    # Replaced again after another lifetime: not once only.
    _wait("renewed again", lambda: d.log_text().count(renewed) >= 2, d)
    assert conns_of(users[2]) not in (first, second)


@requires_nss
def test_no_lookup_waits_on_expiry_over_several_lifetimes(
    daemon_factory, slapd_small, tmp_path: Path
) -> None:
    """Refresh ahead at its default schedule (70 % of the entry lifetime, this host's
    offset up to 10 % of that): entries are revalidated before they expire, so over
    several lifetimes no lookup waits on the backend (``nss.wait``) once the cold lookup
    has filled the cache; every lookup reaches the responder (no memory cache). The
    lookups go on past the entries' midpoint (``entry_cache_nowait_percentage`` 50 %,
    the default) and are noted to the backend, which makes no early run: the next
    scheduled run refreshes those entries before they expire
    (BackendService.early_horizon), so the user's groups are revalidated once per
    interval, not twice (a scheduled run and an early one)."""
    user = slapd_small.expected.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_A)
    # 20 s: the interval is 14 s (70 %, in whole seconds) and the offset 1 (10 % of
    # that, in whole seconds), so a run begins 14 s after the previous one and
    # refreshes what expires before the next: each entry is revalidated about 6 s
    # before it expires, which leaves a run the ~2 s its searches take at the
    # background's pace (REFRESH_SEARCHES_PER_SECOND). The entries pass their
    # midpoint 10 s after each run (the midpoint is never sooner than 10 s after a
    # refresh, expiry.MIDPOINT_MIN_SECONDS), 4 s before the next. Two lifetimes hold
    # the first run (14 s and the offset after the start) and the second (at this
    # host's point of the interval, at most 15.4 s later), and at least two such 4 s.
    lifetime, interval = 20, 14
    d = daemon_factory(
        slapd_small,
        daemon={"machine_id_file": mid},
        refresh_expired_interval=None,
        entry_cache_timeout=lifetime,
    )
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}
    want = d.run_nss(["id", user], env=env)
    assert want.returncode == 0, want.stderr
    before = d.counters()
    cold = before[NSS_WAIT][0]
    assert cold > 0  # the cold lookup itself waited: the counter counts waits

    # Lookups for two lifetimes of the cold lookup's entries, none waiting.
    lookups = 0
    start = time.monotonic()
    while time.monotonic() < start + 2 * lifetime:
        got = d.run_nss(["id", user], env=env)
        assert got.stdout == want.stdout
        lookups += 1
        assert d.counters()[NSS_WAIT][0] == cold, f"lookup {lookups} waited:\n{d.log_tail()}"
    elapsed = time.monotonic() - start
    after = d.counters()

    def delta(name: str) -> float:
        return float(after.get(name, [0])[0] - before.get(name, [0])[0])

    # The entries were revalidated in the background meanwhile (at least once per
    # lifetime), by their stamps: nothing changed, nothing fetched whole.
    assert d.log_text().count("background refresh: 1 initgroups") >= 2
    assert _amount(d, VALIDATE_FETCHED) == 0
    # Lookups past the midpoint were noted, and left to the scheduled runs: the user's
    # groups revalidated by those runs only, once per interval begun (and once more
    # where the second run, at this host's point of the interval, follows the first
    # closely: BackendService.next_refresh).
    assert delta(REFRESH_EARLY) == 0, d.log_text()
    assert 1 <= delta(REQ_INITGR) <= elapsed // interval + 2, (elapsed, after)
    assert delta(NSS_SOON) >= 1 and delta(REFRESH_LEFT) >= 1, after


@requires_nss
def test_restart_answers_from_the_stores_and_revalidates_in_the_background(
    daemon_factory, slapd_small, tmp_path: Path
) -> None:
    """The persistent cache as the storm shield: a host restarted with a full cache
    answers from its stores, with no search before the answer and no wait on the
    backend, and the refresh ahead revalidates the entries afterwards, by stamps, with
    no lookup asking."""
    s, user = slapd_small.slapd, slapd_small.expected.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_A)
    # The first background run 8 s (70 % of the lifetime, in whole seconds; the
    # offset, 10 % of that, is 0) after the start: the lookup after the restart comes
    # long before it.
    d = daemon_factory(
        slapd_small,
        daemon={"machine_id_file": mid},
        refresh_expired_interval=None,
        entry_cache_timeout=12,
        nss={"entry_cache_nowait_percentage": 0},
    )
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}
    want = d.run_nss(["id", user], env=env)
    assert want.returncode == 0, want.stderr
    d.stop()
    d.start()
    offset = s.log_offset()
    got = d.run_nss(["id", user], env=env)
    assert got.stdout == want.stdout
    # No search of a lookup before the answer (the start's root DSE read has base "")
    # and no lookup waited on the backend.
    assert [op.filter for op in s.searches(offset) if op.base] == []
    assert d.counters().get(NSS_WAIT, [0])[0] == 0
    # Then the background run revalidates what would expire, by stamps.
    ran = "background refresh: 1 initgroups, 1 users"
    _wait("revalidated in the background", lambda: ran in d.log_text(), d)
    assert _amount(d, VALIDATE) > 0 and _amount(d, VALIDATE_FETCHED) == 0
    assert _member_searches(s, offset) == []
    assert d.counters().get(NSS_WAIT, [0])[0] == 0


def _states(d: CachedDaemon, gids: list[int], user: str | None = None) -> set[State]:
    """The states of the groups of ``gids`` (and of ``user``'s initgroups), with the
    daemon's midpoint."""
    cfg = parse_config(d.config_path.read_text())
    cache = open_domain_cache(
        str(d.db_dir), cfg.domains[0], nowait_percentage=cfg.nss.entry_cache_nowait_percentage
    )
    try:
        got = {cache.group_by_gid(g).state for g in gids}
        return got if user is None else got | {cache.initgroups(user).state}
    finally:
        cache.close()


@requires_nss
def test_lookups_past_the_midpoint_refresh_together_in_the_background(
    daemon_factory, slapd_big, tmp_path: Path
) -> None:
    """entry_cache_nowait_percentage with refresh ahead on, for entries the scheduled
    runs would not refresh before they expire: 2,085 getgrgid of entries past their
    midpoint are answered at once (no lookup waits) and refreshed in the background by
    one early refresh-ahead run, which revalidates the user's groups with its walk by
    stamps: a bounded number of searches, not one per group (which SSSD's rule, a
    refresh request per entry, makes: 2,085). Entries the scheduled runs refresh in
    time make no early run (test_no_lookup_waits_on_expiry_over_several_lifetimes)."""
    user = slapd_big.expected.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_EARLY)
    # A 30 s lifetime with the midpoint at 20 % (but at least 10 s after the refresh,
    # expiry.MIDPOINT_MIN_SECONDS): 10 s after the cold lookup its entries are past
    # their midpoint. The daemon restarted then runs its first scheduled run 23 s
    # after its start (the 21 s interval, 70 % of the lifetime, plus this host's
    # offset, up to 2 s): after the entries expire, so only an early run refreshes
    # them in time.
    d = daemon_factory(
        slapd_big,
        daemon={"machine_id_file": mid},
        refresh_expired_interval=None,
        entry_cache_timeout=30,
        nss={"entry_cache_nowait_percentage": 20},
    )
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}
    cold = d.run_nss(["id", user], env=env)
    assert cold.returncode == 0, cold.stderr
    gids = sorted({int(g) for g in re.findall(r"(\d+)\(", cold.stdout.split("groups=")[1])})
    assert len(gids) > 2000
    _wait("past the midpoint", lambda: _states(d, gids, user) == {State.MIDPOINT}, d)
    d.stop()
    d.start()

    before = d.counters()
    got = d.run_nss(["getent", "group", *map(str, gids)], env=env)
    assert got.returncode == 0, got.stderr
    assert len(got.stdout.splitlines()) == len(gids)
    _wait("refreshed in the background", lambda: _states(d, gids) == {State.VALID}, d)
    after = d.counters()

    def delta(name: str) -> float:
        return float(after.get(name, [0])[0] - before.get(name, [0])[0])

    # The walk by stamps of the user's groups (a paged first level, the levels above,
    # the user), once or twice (a run, and one for notes that came during it).
    assert delta(LDAP_SEARCH) <= 30
    assert delta(NSS_WAIT) == 0  # every answer at once
    assert delta(NSS_SOON) >= 1
    assert delta(REFRESH_EARLY) >= 1
    assert _amount(d, VALIDATE_FETCHED) == 0


@requires_nss
def test_back_online_a_catch_up_run_revalidates_what_expired_meanwhile(
    daemon_factory, slapd_small_fresh, tmp_path: Path
) -> None:
    """After an outage longer than the entries' lifetime, the domain coming back online
    revalidates what expired meanwhile with a catch-up run at this host's delay, by
    stamps, with no lookup asking, so that the next lookup does not wait; nothing runs
    while the domain is still offline. SSSD's refresh task runs next at its interval
    after the return, and until then every lookup of an expired entry waits."""
    s, user = slapd_small_fresh.slapd, slapd_small_fresh.expected.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_CATCH_UP)
    # A 600 s lifetime: the first scheduled run comes 70 s after the start (30 s plus
    # this host's offset), after the test; the catch-up 1 s after the return.
    d = daemon_factory(
        slapd_small_fresh,
        daemon={"machine_id_file": mid},
        refresh_expired_interval=None,
        entry_cache_timeout=600,
        offline_timeout=1,
        offline_timeout_max=2,
    )
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}
    want = d.run_nss(["id", user], env=env)
    assert want.returncode == 0, want.stderr

    s.stop()
    try:
        # A name the cache lacks takes the domain offline; the entries then expire
        # while it is (`cache -E`: an outage longer than their lifetime).
        d.run_nss(["getent", "passwd", "nosuchuser"], env=env)
        _wait("offline", lambda: not backend_status(d)["online"], d)
        assert d.cli("cache", "-E").returncode == 0
        before = _requests(d)
        # The server check tries the servers (every 1-2 s) and fails: no run, no request.
        probes = d.log_text().count(" offline: ")
        _wait("the servers tried again", lambda: d.log_text().count(" offline: ") >= probes + 2, d)
        assert _requests(d) == before
        assert _amount(d, REFRESH_CATCH_UP) == 0 and d.counters().get(REFRESH_CATCH_UP) is None
        assert not _valid(d, user)
    finally:
        s.start()
    offset = s.log_offset()
    ran = "background refresh: 1 initgroups, 1 users"
    _wait("caught up", lambda: _valid(d, user), d)
    caught = [line for line in d.log_text().splitlines() if "(catch-up, back online)" in line]
    assert len(caught) == 1 and ran in caught[0], caught
    assert d.counters()[REFRESH_CATCH_UP][0] == 1
    assert _amount(d, VALIDATE_FETCHED) == 0  # by stamps: nothing fetched whole
    assert _member_searches(s, offset) == []
    # The next lookup is answered from the revalidated entries: it does not wait.
    waits = d.counters().get(NSS_WAIT, [0])[0]
    got = d.run_nss(["id", user], env=env)
    assert got.stdout == want.stdout
    assert d.counters().get(NSS_WAIT, [0])[0] == waits


@requires_nss
def test_a_background_revalidation_goes_at_its_pace(
    daemon_factory, slapd_big, tmp_path: Path
) -> None:
    """A refresh-ahead run's searches go at most REFRESH_SEARCHES_PER_SECOND a second
    (cached/ldap/pacing.py), by slapd's own timestamps: a revalidation by stamps of a
    user in 2,085 groups spreads over seconds instead of arriving within one, which
    is what piles a fleet's revalidations into one second of an expiry wave. A
    client's lookup is not paced."""
    s, user = slapd_big.slapd, slapd_big.expected.big_user
    mid = tmp_path / "machine-id"
    mid.write_text(ID_A)
    d = daemon_factory(
        slapd_big, daemon={"machine_id_file": mid}, refresh_expired_interval=1,
    )  # fmt: skip
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}
    assert d.run_nss(["id", user], env=env).returncode == 0
    assert d.counters().get(REFRESH_PACED) is None  # the client's lookup: not paced

    ran = "background refresh: 1 initgroups, 1 users"
    offset = s.log_offset()
    assert d.cli("cache", "-E").returncode == 0
    _wait("revalidated in the background", lambda: _valid(d, user) and ran in d.log_text(), d)
    assert _amount(d, VALIDATE_FETCHED) == 0
    # The logical searches (the pages of one paged search go as the server asks for
    # them, unpaced), each at its first page's time.
    ops = [pages[0] for pages in s.logical_searches(offset) if pages[0].base]
    assert len(ops) >= 4, ops
    # In any second, at most the rate's searches (one more for a request that slapd
    # logs late and its successor on time: the pace is the client's sending).
    busiest = max(sum(1 for o in ops if op.at <= o.at < op.at + 1.0) for op in ops)
    assert busiest <= REFRESH_SEARCHES_PER_SECOND + 1, [
        (round(o.at - ops[0].at, 2), o.filter[:40], o.nentries) for o in ops
    ]
    assert d.counters()[REFRESH_PACED][0] >= len(ops) - 2
