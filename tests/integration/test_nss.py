"""The daemon through the real glibc and libnss_sss (private mount namespace)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

import pytest

from cached.counters import ENTRY_TXN, LDAP_CONNECT, NSS_EARLY, NSS_SPARED
from cached.ldap.save import EARLY_CHUNK
from cached.memcache import McReader
from cached.nss import protocol as p
from testing.marks import requires_nss

pytestmark = requires_nss

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}


def id_groups(output: str) -> set[int]:
    """The gids of `id` output: ``uid=... gid=... groups=10000(users),20001(x),...``."""
    groups = output.strip().split("groups=", 1)[1]
    return {int(item.split("(", 1)[0]) for item in groups.split(",")}


# -- bigroupuser through glibc ---------------------------------------------------------


def test_id_bigroupuser_equals_the_expected_answer(cached_big, slapd_big):
    exp = slapd_big.expected
    r = cached_big.run_nss(["id", "bigroupuser"], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    assert id_groups(r.stdout) == exp.initgroups("bigroupuser", 2)
    assert len(id_groups(r.stdout)) == 2085
    u = exp.user("bigroupuser")
    assert r.stdout.startswith(f"uid={u.uid}(bigroupuser) gid={u.gid}(users) groups=")


def test_a_cold_id_puts_groups_stored_early_in_the_memory_cache(daemon_factory, slapd_big):
    """The backend commits bigroupuser's groups new to the cache in chunks ahead of the
    rest of its answer and tells the responder, which puts them in the memory cache
    while the others are stored (docs/ARCHITECTURE.md §4, "Early prefill"): when `id`
    reads the memory cache, every group is there, as its answer says."""
    exp = slapd_big.expected
    d = daemon_factory(slapd_big)
    # INITGR alone (`id` would put each group in with its getgrgid over the socket).
    r = d.run_nss(["getent", "initgroups", "bigroupuser"])
    assert r.returncode == 0, r.stderr
    counters = d.counters()
    notes, _seconds, noted = counters[NSS_EARLY]
    # The answer's own prefill left them out: its request's notes (by its serial).
    assert counters[NSS_SPARED][0] == 1 and counters[NSS_SPARED][2] == noted
    # 2,085 groups and a few stored that are not the user's (its primary group, which
    # does not list it, and member groups): four chunks of EARLY_CHUNK go early, nearly
    # all the user's, the last few with the answer.
    assert notes == 4 and 3 * EARLY_CHUNK < noted <= 4 * EARLY_CHUNK
    gids = exp.initgroups_reply("bigroupuser", 2)
    with McReader(d.mc_dir / "group") as mc:
        assert mc.verify() == []
        for gid in gids:
            e = mc.group(gid)
            assert e is not None, gid
            if gid % 97 == 0 or e.name.startswith("nest1"):
                assert set(e.members) == exp.members(e.name, 2), e.name
    # What glibc reads from it is the same as the socket's answer.
    sample = [str(gid) for gid in sorted(gids)[::200]]
    by_mc = d.run_nss(["getent", "group", *sample])
    by_socket = d.run_nss(["getent", "group", *sample], env=SOCKET_ONLY)
    assert by_mc.stdout == by_socket.stdout and by_mc.stdout.count("\n") == len(sample)
    r = d.run_nss(["id", "bigroupuser"])
    assert id_groups(r.stdout) == exp.initgroups("bigroupuser", 2)


def test_without_a_group_memory_cache_the_answer_is_stored_in_one_transaction(
    daemon_factory, slapd_big
):
    """Early commits serve the memory cache only: with ``memcache_timeout = 0`` the
    backend tells nobody and stores the whole answer in one write, as before."""
    d = daemon_factory(slapd_big, nss={"memcache_timeout": 0})
    r = d.run_nss(["getent", "initgroups", "bigroupuser"], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    c = d.counters()
    assert c.get(NSS_EARLY, [0])[0] == 0
    assert c[ENTRY_TXN][0] == 1


def test_getent_passwd_group_initgroups(cached_big, slapd_big):
    exp = slapd_big.expected
    u = exp.user("bigroupuser")
    want = f"bigroupuser:*:{u.uid}:{u.gid}:{u.gecos}:{u.home}:{u.shell}\n"
    for key in ("bigroupuser", str(u.uid)):
        r = cached_big.run_nss(["getent", "passwd", key], env=SOCKET_ONLY)
        assert (r.returncode, r.stdout) == (0, want)
    other = exp.user("user00042")
    r = cached_big.run_nss(["getent", "passwd", str(other.uid)], env=SOCKET_ONLY)
    assert r.stdout.split(":")[0] == "user00042"

    r = cached_big.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)
    name, pw, gid, members = r.stdout.rstrip("\n").split(":")
    assert (name, pw, int(gid)) == ("large01", "*", exp.group("large01").gid)
    assert set(members.split(",")) == exp.members("large01", 2) and len(members.split(",")) == 5000

    r = cached_big.run_nss(["getent", "initgroups", "bigroupuser"], env=SOCKET_ONLY)
    name, *gids = r.stdout.split()
    assert name == "bigroupuser"
    # As SSSD: the groups the user is a member of; not the primary gid, of a group
    # ("users") that does not list it (docs/compatibility.md §9.5).
    assert {int(g) for g in gids} == exp.initgroups_reply("bigroupuser", 2)


def test_unknown_user_exits_2(cached_big):
    r = cached_big.run_nss(["getent", "passwd", "nosuchuser"], env=SOCKET_ONLY)
    assert (r.returncode, r.stdout) == (2, "")
    r = cached_big.run_nss(["getent", "group", "nosuchgroup"], env=SOCKET_ONLY)
    assert r.returncode == 2


def test_root_is_filtered_by_default(cached_small):
    # filter_users = root (SSSD's default): never answered, so `files` keeps root.
    r = cached_small.run_nss(["getent", "passwd", "root"], env=SOCKET_ONLY)
    assert r.returncode == 2


def test_python_client_cached_id_and_getent(cached_small, slapd_small):
    exp = slapd_small.expected
    r = cached_small.cli("id", exp.big_user)
    assert r.returncode == 0, r.stderr
    assert id_groups(r.stdout) == exp.initgroups(exp.big_user, 2)
    r = cached_small.cli("getent", "group", "large01")
    assert set(r.stdout.strip().split(":")[3].split(",")) == exp.members("large01", 2)
    assert cached_small.cli("getent", "passwd", "nosuchuser").returncode == 2


# -- concurrency -----------------------------------------------------------------------


def _load(daemon, lookups, threads, seconds, processes=1):
    r = daemon.run_nss(
        [sys.executable, "-m", "testing.nssload", "--threads", str(threads),
         "--processes", str(processes), "--seconds", str(seconds)],
        env=SOCKET_ONLY, timeout=seconds + 120, input=json.dumps({"lookups": lookups}),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _mixed_lookups(exp, groups=300):
    names = sorted(exp.group_names())[:groups]
    lookups = [["getgrgid", exp.group(g).gid, g] for g in names]
    lookups += [["getgrnam", g, g] for g in names[:50]]
    lookups += [["getpwnam", u, u] for u in sorted(exp.user_names())[:50]]
    lookups += [["getpwnam", "nosuchuser", None], ["getgrgid", 999999, None]]
    return lookups


LOAD_SECONDS = float(os.environ.get("CACHED_LOAD_SECONDS", "5"))


def test_200_concurrent_clients_zero_errors(cached_big, slapd_big):
    result = _load(cached_big, _mixed_lookups(slapd_big.expected), 200, LOAD_SECONDS)
    assert result["requests"] > 200
    assert result["errors"] == 0, result["error_samples"]


@pytest.mark.slow
def test_200_concurrent_clients_for_30_seconds(cached_big, slapd_big):
    result = _load(cached_big, _mixed_lookups(slapd_big.expected, 3000), 200, 30)
    print("200 threads x 30 s:", result)
    assert result["errors"] == 0, result["error_samples"]


# -- faults -------------------------------------------------------------------------------


def test_backend_killed_during_a_cold_id(daemon_factory, slapd_big):
    exp = slapd_big.expected
    d = daemon_factory(slapd_big)
    backend = d.child_pid("backend LDAP")
    offset = slapd_big.slapd.log_offset()
    proc = d.start_nss(["id", "bigroupuser"], env=SOCKET_ONLY)
    # Wait for the initgroups walk to reach the server (a real signal, not a delay):
    # the search for the user's direct groups.
    deadline = time.monotonic() + 60
    while not any(
        "member=uid=bigroupuser" in op.filter
        for op in slapd_big.slapd.searches(offset, settle_timeout=0)
    ):
        assert time.monotonic() < deadline, "the backend never searched"
        time.sleep(0.005)
    os.kill(backend, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    # The daemon kept answering: `id` got the user (its groups may be incomplete).
    assert out.startswith(f"uid={exp.user('bigroupuser').uid}(bigroupuser)"), err
    assert d.run_nss(["getent", "passwd", "bigroupuser"], env=SOCKET_ONLY).returncode == 0
    # The monitor restarts the backend; the next id is complete.
    deadline = time.monotonic() + 60
    while True:
        try:
            new = d.child_pid("backend LDAP")
            if new != backend:
                break
        except LookupError:
            pass
        assert time.monotonic() < deadline, d.log_tail()
        time.sleep(0.05)
    r = d.run_nss(["id", "bigroupuser"], env=SOCKET_ONLY)
    assert id_groups(r.stdout) == exp.initgroups("bigroupuser", 2)
    assert "died: signal 9" in d.log_text()


def test_server_stopped_cached_users_resolve_unknown_fail_fast(daemon_factory, slapd_small_fresh):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d = daemon_factory(slapd_small_fresh, ldap_network_timeout=1)
    users = sorted(exp.user_names())[:5]
    for u in users:
        assert d.run_nss(["getent", "passwd", u], env=SOCKET_ONLY).returncode == 0
    s.stop()
    assert d.cli("cache", "-E").returncode == 0  # every entry expired: needs the server
    for u in users:
        r = d.run_nss(["getent", "passwd", u], env=SOCKET_ONLY)
        assert r.returncode == 0 and r.stdout.startswith(f"{u}:"), r.stderr
    before = d.counters()
    for n in range(20):
        r = d.run_nss(["getent", "passwd", f"unknown{n}"], env=SOCKET_ONLY)
        assert r.returncode == 2
    after = d.counters()
    # Offline: no connection attempt per lookup, so unknown names fail at once.
    assert after.get(LDAP_CONNECT, [0])[0] - before.get(LDAP_CONNECT, [0])[0] <= 1
    status = d.cli("status").stdout
    assert "OFFLINE" in status and s.uri in status


# -- malformed packets --------------------------------------------------------------------


def _connect(d) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(d.pipes_dir / "nss"))
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    "packet,expect",
    [
        (b"\x10\x00", "closed-after-eof"),  # short header, then EOF from us
        (struct.pack("=4I", 8, 0x11, 0, 0), "closed"),  # length below the header
        (struct.pack("=4I", 2000, 0x11, 0, 0) + b"x" * 1984, "closed"),  # oversize
        (struct.pack("=4I", 16, 0x7777, 0, 0), "closed"),  # unknown command
        (p.encode_request(0x11, b"\xff\xfe\0"), "EINVAL"),  # bad UTF-8
        (p.encode_request(0x11, b"noterminator"), "EINVAL"),
        (p.encode_request(0x12, b"\x01\x02"), "EINVAL"),  # uid body of 2 bytes
    ],
)
def test_malformed_packets_get_sssds_behaviour(cached_small, packet, expect):
    sock = _connect(cached_small)
    try:
        sock.sendall(packet)
        if expect == "EINVAL":
            head = sock.recv(16)
            length, _cmd, status, _ = struct.unpack("=4I", head)
            assert (length, status) == (16, 22)
        elif expect == "closed":
            assert _closed(sock)
        else:
            sock.shutdown(socket.SHUT_WR)
            assert _closed(sock)
    finally:
        sock.close()
    # The daemon keeps serving.
    r = cached_small.run_nss(["getent", "passwd", "user00001"], env=SOCKET_ONLY)
    assert r.returncode == 0


# -- the lookup flow ---------------------------------------------------------------------


def test_concurrent_lookups_of_one_expired_object_share_one_backend_request(
    daemon_factory, slapd_big
):
    d = daemon_factory(slapd_big)
    # 2,085 gids less the primary one, which "users" does not list (docs/compatibility.md §9.5).
    result = _load(d, [["initgroups", "bigroupuser", 2084]], threads=20, seconds=2)
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] >= 20
    # 20 clients asked at once while the cache was cold: one initgroups request.
    assert d.counters()["be.req.initgr"][0] == 1


def test_negative_cache_then_sighup_drops_it(daemon_factory, slapd_small_fresh):
    s = slapd_small_fresh.slapd
    d = daemon_factory(slapd_small_fresh, nss={"entry_negative_timeout": 3600})
    assert d.run_nss(["getent", "passwd", "latecomer"], env=SOCKET_ONLY).returncode == 2
    s.ldap_modify(
        f"dn: uid=latecomer,ou=people,{s.base_dn}\n"
        "objectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n"
        "objectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        "uid: latecomer\ncn: Late Comer\nsn: Comer\nuidNumber: 19999\ngidNumber: 10000\n"
        "homeDirectory: /home/latecomer\nloginShell: /bin/sh\n"
    )
    searches = d.counters()["be.req.user"][0]
    # Still "not found": the negative cache answers without asking the backend.
    assert d.run_nss(["getent", "passwd", "latecomer"], env=SOCKET_ONLY).returncode == 2
    assert d.counters()["be.req.user"][0] == searches
    os.kill(d.pid, signal.SIGHUP)  # the monitor passes it on; the responder forgets
    deadline = time.monotonic() + 30
    while d.run_nss(["getent", "passwd", "latecomer"], env=SOCKET_ONLY).returncode != 0:
        assert time.monotonic() < deadline, d.log_tail()
        time.sleep(0.05)


def test_case_insensitive_domain(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d = daemon_factory(slapd_small, case_sensitive="false")
    r = d.run_nss(["getent", "passwd", exp.big_user.upper()], env=SOCKET_ONLY)
    assert r.returncode == 0 and r.stdout.startswith(f"{exp.big_user}:")
    r = d.run_nss(["getent", "group", "LARGE01"], env=SOCKET_ONLY)
    assert r.stdout.startswith("large01:")


def test_case_sensitive_domain(cached_small, slapd_small):
    # case_sensitive = true (the default): another spelling is another name.
    name = slapd_small.expected.big_user.upper()
    assert cached_small.run_nss(["getent", "passwd", name], env=SOCKET_ONLY).returncode == 2


def test_enumeration_answers_only_when_enabled(daemon_factory, cached_small, slapd_small):
    exp = slapd_small.expected
    assert cached_small.run_nss(["getent", "passwd"], env=SOCKET_ONLY).stdout == ""
    d = daemon_factory(slapd_small, enumerate="true")
    for u in sorted(exp.user_names())[:3]:
        d.run_nss(["getent", "passwd", u], env=SOCKET_ONLY)
    listed = {line.split(":")[0] for line in d.run_nss(["getent", "passwd"], env=SOCKET_ONLY)
              .stdout.splitlines()}  # fmt: skip
    assert set(sorted(exp.user_names())[:3]) <= listed


def test_warm_socket_answers_see_invalidation_and_the_backend_write_at_once(
    daemon_factory, slapd_small_fresh
):
    """Group answers kept by the responder (per state of both stores, docs/ARCHITECTURE.md)
    are never served after `cached cache` expired them, nor after the backend wrote a
    new member list: by name and by gid, through libnss_sss on the socket only."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d = daemon_factory(slapd_small_fresh)
    name = next(g for g in sorted(exp.group_names()) if exp.members(g, 2))
    gid = str(exp.group(name).gid)
    newcomer = next(u for u in sorted(exp.user_names()) if u not in exp.members(name, 2))

    def members(key: str) -> set[str]:
        r = d.run_nss(["getent", "group", key], env=SOCKET_ONLY)
        assert r.returncode == 0, r.stderr + d.log_tail()
        return set(r.stdout.rstrip("\n").split(":")[3].split(","))

    before = members(name)
    assert before == exp.members(name, 2)
    for _ in range(3):  # warm: kept answers, by name and by gid
        assert members(gid) == before and members(name) == before
    s.ldap_modify(
        f"dn: {exp.scenario.group_dn(name)}\nchangetype: modify\nadd: member\n"
        f"member: {exp.scenario.user_dn(newcomer)}\n\n"
    )
    # Still valid in the cache: the cached answer, as before the change.
    assert members(gid) == before
    assert d.cli("cache", "-g", name).returncode == 0
    # Expired: the lookup by gid refreshes and answers the new member list, and the
    # lookup by name (kept separately) sees the backend's write at once.
    assert members(gid) == before | {newcomer}
    assert members(name) == before | {newcomer}
    # And the other way round: a refresh by name, then the answer by gid.
    s.ldap_modify(
        f"dn: {exp.scenario.group_dn(name)}\nchangetype: modify\ndelete: member\n"
        f"member: {exp.scenario.user_dn(newcomer)}\n\n"
    )
    assert d.cli("cache", "-G").returncode == 0
    assert members(name) == before
    assert members(gid) == before
