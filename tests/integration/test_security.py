"""Issue 17: nobody becomes root through the directory, no local user starves the others.

One test per finding of the adversarial review, named ``test_17_<n>_...``, through the
real parts: a slapd loaded with a hostile LDIF (the small directory plus the entries
below), ``cached serve``, glibc + libnss_sss in a mount namespace, and the attacker
running as uid 65534 (``testing.attacker``) on the real socket.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cached.cache import open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.config import parse_config
from cached.model import User
from cached.nss import protocol as p
from testing import attacker
from testing.attacker import attack, finish
from testing.checks import (
    SOCKET_ONLY,
    backend_status,
    closed_by_server,
    getgrnam_seconds,
    nss_socket,
    read_reply,
    responder_status,
    wait_for,
)
from testing.daemon import CachedDaemon, config_text
from testing.ldif import BASE, GROUPS, PEOPLE, b64, group_entry, minimal_user, user_entry
from testing.marks import requires_nss
from testing.nsenv import NssProbe
from testing.procstat import proc_kib
from testing.slapd import Dataset, LiveDirectory, Slapd, free_port

pytestmark = requires_nss

# The responder's counter of nested member-list expansions (cached.counters).
GROUP_EXPAND = "cache.group.expand"
WIDE = 50_000  # members of `wide` (the 200,000 of the review, scaled for a test)
LONG_NAME = "g" * 600  # above LMDB's 511-byte key limit
DEEP = 40  # groups in a nesting chain
ROOT_PW = "Pw-17-zq8Xk"  # the hostile slapd's rootdn password: must never reach a log


def hostile_ldif() -> str:
    """The review's hostile entries (each named after the finding it reproduces)."""
    u = lambda n: f"uid={n},{PEOPLE}"  # noqa: E731
    g = lambda n: f"cn={n},{GROUPS}"  # noqa: E731
    chain = lambda i: g(f"deep{i + 1:02d}") if i < DEEP - 1 else u("carol")  # noqa: E731
    entries = [
        # 1: primary gid 0 and (gid_t)-1
        user_entry(u("eve"), 30001, 0, "eve"),
        user_entry(u("eve2"), 30002, 4294967295, "eve2"),
        # 2: uid 0
        user_entry(u("toor"), 0, 10000, "toor"),
        # 8: bob is in one good group and two the cache cannot store
        user_entry(u("bob"), 30010, 10000, "bob"),
        group_entry(g("bobgroup"), "bobgroup", 30100, [u("bob")]),
        group_entry(g("biggid"), "biggid", 4294967296, [u("bob")]),
        group_entry(f"gidNumber=30101,{GROUPS}", LONG_NAME, 30101, [u("bob")]),
        # 9: a directory `Root` (case-insensitive domains fold it to root)
        user_entry(u("Root"), 30020, 10000, "Root"),
        # 10: a user whose gid no reply can carry (2^32)
        user_entry(u("wrapgid"), 30050, 4294967296, "wrapgid"),
        # 13: forged fields, a NUL inside a member value, non-UTF-8 names (`audio` is
        # an octet string: the only way to get such bytes past slapd's syntax checks)
        user_entry(f"cn=forge,{PEOPLE}", 30040, 10000, "x\nroot2::0:0::/root:/bin/sh"),
        user_entry(f"cn=forge2,{PEOPLE}", 30041, 10000, "evil:0:0"),
        group_entry(g("nulgrp"), "nulgrp", 30200, ["user00001\0user00002"], attr="memberUid"),
        user_entry(u("bad1"), 30030, 10000, "bad1", extra=f"audio:: {b64(b'bad' + bytes([255]))}"),
        user_entry(u("bad2"), 30031, 10000, "bad2", extra=f"audio:: {b64(b'bad' + bytes([254]))}"),
        # a NUL in the fields a user often writes himself (gecos is IA5String: slapd
        # takes 0x00); found in the review of 2026-12-02
        user_entry(u("nulgecos"), 30070, 10000, "nulgecos",
                   extra=f"gecos:: {b64(b'Bob' + bytes(1) + b'/root' + bytes(1) + b'/bin/sh')}\n"
                         f"loginShell:: {b64(b'/bin/false' + bytes(1) + b'/bin/sh')}"),
        # held: cycles, self-membership and a deep chain (carol is in the deepest)
        user_entry(u("carol"), 30060, 10000, "carol"),
        group_entry(g("cyc1"), "cyc1", 30400, [g("cyc2"), u("carol")]),
        group_entry(g("cyc2"), "cyc2", 30401, [g("cyc1")]),
        group_entry(g("selfgrp"), "selfgrp", 30402, [g("selfgrp"), u("carol")]),
        *(group_entry(g(f"deep{i:02d}"), f"deep{i:02d}", 30500 + i, [chain(i)])
          for i in range(DEEP)),
        # 4/5: a wide group and a parent whose only member it is
        # (members are real entries: a member DN naming nothing is no member, §9.5)
        group_entry(g("wide"), "wide", 30300, [u(f"w{i:06d}") for i in range(WIDE)]),
        group_entry(g("hugeparent"), "hugeparent", 30301, [g("wide")]),
        *(minimal_user(u(f"w{i:06d}"), f"w{i:06d}", 100_000 + i) for i in range(WIDE)),
    ]
    return "\n".join(entries)


@pytest.fixture(scope="module")
def slapd_hostile(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset
) -> Iterator[LiveDirectory]:
    work = tmp_path_factory.mktemp("hostile")
    ldif = work / "hostile.ldif"
    ldif.write_text(small_2307bis.ldif.read_text().rstrip("\n") + "\n\n" + hostile_ldif())
    with Slapd(work / "slapd", ldif, BASE, root_pw=ROOT_PW) as server:
        yield LiveDirectory(slapd=server, expected=small_2307bis.expected)


def nss(d: CachedDaemon, *argv: str) -> subprocess.CompletedProcess[str]:
    return d.run_nss(list(argv), env=SOCKET_ONLY)


# == directory data =======================================================================


def test_17_1_primary_gid_zero_is_not_served(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile)
    for name in ("eve", "eve2"):
        r = nss(d, "getent", "passwd", name)
        assert (r.returncode, r.stdout) == (2, ""), (name, r.stdout)
        r = nss(d, "id", name)
        assert r.returncode == 1 and "gid=0" not in r.stdout, (name, r.stdout)
    for uid in ("30001", "30002"):
        assert nss(d, "getent", "passwd", uid).returncode == 2
    # Nothing else lost: an ordinary user of the same directory resolves.
    assert nss(d, "id", "user00001").stdout.startswith("uid=10001(user00001) gid=10000")


def test_17_2_uid_zero_never_comes_from_the_directory(daemon_factory, slapd_hostile):
    # min_id = 0 is accepted (SSSD's files use it), but id 0 is out of range anyway.
    d = daemon_factory(slapd_hostile, min_id=0)
    for key in ("toor", "0"):
        r = nss(d, "getent", "passwd", key)
        assert (r.returncode, r.stdout) == (2, ""), (key, r.stdout)
    assert nss(d, "getent", "group", "0").returncode == 2
    assert nss(d, "id", "eve").returncode == 1


def test_17_2_a_cache_written_before_is_not_served_offline(tmp_path):
    """A cache that holds uid 0 and gid 0 (written by an older version or under
    ``min_id = 0``) is not served once the configuration is fixed: offline, after
    ``cached cache -E``, by name, by id, in initgroups, in the memory cache."""
    work = tmp_path / "d"
    port = free_port()  # nothing listens: the domain is offline
    text = config_text([f"ldap://127.0.0.1:{port}"], BASE, work,
                       ldap_network_timeout=1, offline_timeout=60)  # fmt: skip
    dom = parse_config(text).domains[0]
    (work / "db").mkdir(parents=True)
    (work / "db").chmod(0o700)
    cache = open_backend_cache(str(work / "db"), dom)
    with cache.write() as batch:
        cache.put_user(batch, User("toor", 0, 0, "", "/root", "/bin/sh", f"uid=toor,{PEOPLE}"))
        cache.put_user(batch, User("eve", 30001, 0, "", "/h", "/bin/sh", f"uid=eve,{PEOPLE}"))
        cache.put_user(batch, User("ok", 30003, 10000, "", "/h", "/bin/sh", f"uid=ok,{PEOPLE}"))
        cache.put_initgroups(batch, "eve", [0, 30100], [])
        cache.put_initgroups(batch, "ok", [10000, 0, 30100], [])
    cache.close()
    with CachedDaemon(work, [f"ldap://127.0.0.1:{port}"], BASE, ldap_network_timeout=1,
                      offline_timeout=60) as d:  # fmt: skip
        assert d.cli("cache", "-E").returncode == 0
        for key in ("toor", "0", "eve", "30001"):
            r = d.run_nss(["getent", "passwd", key])  # memory cache on: it must not learn them
            assert (r.returncode, r.stdout) == (2, ""), (key, r.stdout)
        r = d.run_nss(["getent", "passwd", "ok"])
        assert r.stdout.startswith("ok:*:30003:10000:"), r.stdout
        r = d.run_nss(["id", "ok"])
        groups = r.stdout.strip().split("groups=")[1].split(",")
        assert r.returncode == 0 and [g.split("(")[0] for g in groups] == ["10000", "30100"]
        # getent initgroups lists the groups the user is a member of, as SSSD: not the
        # primary gid 10000 (no group entry lists ok), never gid 0 (docs/compatibility.md §9.5).
        assert nss(d, "getent", "initgroups", "ok").stdout.split() == ["ok", "30100"]


def test_17_8_one_unstorable_group_does_not_strip_the_others(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile)
    r = nss(d, "id", "bob")
    assert r.returncode == 0, r.stderr
    assert "30100(bobgroup)" in r.stdout, r.stdout
    assert "biggid" not in r.stdout and "ggggg" not in r.stdout
    # One line for the skipped group, saying why.
    assert d.log_text().count("above LMDB's 511-byte key limit; ignoring it") == 1
    # Asked again: still complete, no new line (rate-limited, and the skip is stable).
    before = d.log_text().count("failed to store group")
    assert d.cli("cache", "-E").returncode == 0
    assert "30100(bobgroup)" in nss(d, "id", "bob").stdout
    assert d.log_text().count("failed to store group") == before


def test_17_9_filters_fold_case_and_honour_the_domain(daemon_factory, slapd_hostile):
    d = daemon_factory(
        slapd_hostile,
        case_sensitive="false",
        nss={"filter_users": "root, user00003@LDAP, user00004@OTHER",
             "filter_groups": "root, nest0-0001@ldap"},
    )  # fmt: skip
    # `Root` in the directory is `root` in a case-insensitive domain: filtered.
    for key in ("root", "Root", "ROOT", "30020"):
        r = nss(d, "getent", "passwd", key)
        assert (r.returncode, r.stdout) == (2, ""), (key, r.stdout)
    # name@domain: that domain only (the domain name compared case-insensitively).
    assert nss(d, "getent", "passwd", "user00003").returncode == 2
    assert nss(d, "getent", "group", "nest0-0001").returncode == 2
    # An unknown domain is not a domain part: user00004 is not filtered here.
    assert nss(d, "getent", "passwd", "user00004").returncode == 0
    # Filtered users are left out of member lists.
    exp = slapd_hostile.expected
    group = next(g for g in exp.group_names() if "user00003" in exp.members(g, 2))
    members = nss(d, "getent", "group", group).stdout.strip().split(":")[3].split(",")
    assert "user00003" not in members and len(members) == len(exp.members(group, 2)) - 1


def test_17_13_cached_getent_refuses_forged_fields(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile)
    for uid in ("30040", "30041"):
        r = d.cli("getent", "passwd", uid)
        assert "root2" not in r.stdout and ":0:0:" not in r.stdout, r.stdout
        assert r.returncode == 1 and "not printed" in r.stderr, (r.returncode, r.stderr)
    assert d.cli("getent", "passwd", "user00001").stdout.startswith("user00001:*:10001:")


def test_17_13_a_nul_in_a_member_value_does_not_split_it(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile, ldap_schema="rfc2307")  # reads memberUid
    r = nss(d, "getent", "group", "nulgrp")
    assert r.returncode == 0 and r.stdout.strip() == "nulgrp:*:30200:", r.stdout


def test_a_nul_in_gecos_or_shell_ends_the_value_as_in_sssd(daemon_factory, slapd_hostile):
    """Found in review: kept whole, the NUL made the user's record unencodable (not
    found; with enumeration on, ``getent passwd`` empty for the whole domain). SSSD
    reads these attributes as C strings: the value ends at the NUL, no field shifts."""
    d = daemon_factory(slapd_hostile)
    r = nss(d, "getent", "passwd", "nulgecos")
    assert (r.returncode, r.stdout) == (0, "nulgecos:*:30070:10000:Bob:/home/x:/bin/false\n")
    assert nss(d, "getent", "passwd", "30070").stdout == r.stdout


def test_17_13_non_utf8_names_are_refused_not_replaced(daemon_factory, slapd_hostile):
    # ldap_user_name = audio (an octet string): the only way past slapd's syntax checks.
    d = daemon_factory(slapd_hostile, ldap_user_name="audio")
    for uid in ("30030", "30031"):
        r = nss(d, "getent", "passwd", uid)
        assert (r.returncode, r.stdout) == (2, ""), r.stdout
    assert "is not UTF-8 text; user ignored" in d.log_text()
    d.stop()
    # Never turned into U+FFFD: two directory names never share a cache key.
    dom = parse_config(d.config_path.read_text()).domains[0]
    cache = open_domain_cache(str(d.db_dir), dom)
    try:
        assert not [u.name for u in cache.iter_users() if "\ufffd" in u.name]
    finally:
        cache.close()


# == local users ==========================================================================


def test_17_3_one_uid_cannot_take_every_connection(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile, nss={
        "max_clients": 20, "max_clients_per_uid": 8, "root_reserved_clients": 4,
        "client_idle_timeout": 10, "client_request_timeout": 4,
    })  # fmt: skip
    with attack(d, "hold", 30) as (_, a), attack(d, "hold", 30, uid=65533) as (_, b), \
            attack(d, "hold", 30, uid=65532) as (_, c):  # fmt: skip
        # Each uid its share; together they leave root's reserve free.
        assert (a["kept"], b["kept"], c["kept"]) == (8, 8, 0), (a, b, c)
        assert responder_status(d)["connections"] == 16
        r = nss(d, "getent", "passwd", "user00001")  # root, while they hold theirs
        assert r.returncode == 0, r.stderr
    log = d.log_text()
    # Refusals are logged, rate-limited: 22 + 22 + 30 refusals, a handful of lines.
    assert "(max_clients_per_uid)" in log and "(root_reserved_clients)" in log
    assert log.count("refusing an NSS client") <= 4, log.count("refusing an NSS client")
    wait_for(lambda: responder_status(d)["connections"] == 0, "the holders gone")
    # Trickling bytes (one every 2 s) does not keep a connection: a started request
    # must finish within client_request_timeout (4 s here), idleness counts from the
    # last complete request.
    with attack(d, "trickle", 40) as (proc, _):
        out = finish(proc)
    assert out["closed_after"] is not None, out  # main: never closed within 40 s
    print(f"\ntrickling client closed after {out['closed_after']:.1f} s ({out['sent']} bytes)")


def test_17_4_a_huge_nested_group_is_expanded_once_per_cache_state(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile)
    r = nss(d, "getent", "group", "hugeparent")  # cold: fetched and stored
    assert r.returncode == 0 and len(r.stdout.split(":")[3].split(",")) == WIDE
    base = d.counters().get(GROUP_EXPAND, [0, 0.0, 0])
    times = getgrnam_seconds(d, "hugeparent", 20, timeout=60)
    after = d.counters()[GROUP_EXPAND]
    # Not one expansion per request: at most the one of a new snapshot.
    assert after[0] - base[0] <= 1, (base, after)
    times.sort()
    print(f"\ngetgrnam hugeparent ({WIDE} members), 20 warm requests: median "
          f"{times[10] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")  # fmt: skip


def test_17_5_unread_replies_are_bounded_per_uid(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile, nss={"max_reply_buffer_per_uid": 4,
                                           "max_clients_per_uid": 300})  # fmt: skip
    assert nss(d, "getent", "group", "wide").returncode == 0  # cached
    responder = d.child_pid("responder")
    rss_before = proc_kib(responder)
    # 300 connections of uid 65534, each asking for the 50,000-member group (~0.5 MB
    # a reply) 20 times and never reading: 3 GB asked for.
    with attack(d, "unread", 300, "wide", 20) as (_, ready):
        assert ready["connections"] == 300
        wait_for(lambda: responder_status(d)["connections"] >= 300, "300 connections")
        # Until the responder's memory stops growing (it buffers what it will buffer).
        samples = [proc_kib(responder)]

        def stable() -> bool:
            time.sleep(0.5)  # the sampling period; stability is the condition
            samples.append(proc_kib(responder))
            return len(samples) > 4 and max(samples[-4:]) - min(samples[-4:]) < 2048

        wait_for(stable, "the responder's memory stable", timeout=120, log=d.log_tail)
        st = responder_status(d)
        grown = max(samples) - rss_before
        # Root is served meanwhile, the big group included.
        r = nss(d, "getent", "group", "wide")
        assert r.returncode == 0 and len(r.stdout.split(":")[3].split(",")) == WIDE
    budget = 4 << 20
    reply_size = WIDE * 8  # names of 7 characters + NUL
    assert st.get("unread_bytes", 0) <= budget + reply_size, st
    # RSS: the budget, the replies being encoded and ~300 connections' buffers; without
    # the bound it is one reply per connection (~150 MB here, 2.9 GB in the review).
    assert grown < 32 * 1024, f"responder grew {grown} KiB"
    print(f"\n300 unread connections: unread {st.get('unread_bytes', 0) >> 10} KiB, "
          f"responder +{grown} KiB")  # fmt: skip


def test_17_10_bad_entries_and_refusals_do_not_flood_the_log(daemon_factory, slapd_hostile):
    d = daemon_factory(slapd_hostile, nss={"max_clients": 4})
    # A user no reply can carry (gid 2^32): asked 50 times by anyone.
    with nss_socket(d) as sock:
        for _ in range(50):
            sock.sendall(p.encode_request(p.Command.GETPWNAM, p.name_body("wrapgid")))
            reply = read_reply(sock)
            assert reply is not None
    log = d.log_text()
    assert log.count("Traceback") <= 1, log.count("Traceback")
    # 200 refused connections: a few lines, not 200.
    wait_for(lambda: responder_status(d)["connections"] == 0, "the first client gone")
    held = [nss_socket(d) for _ in range(4)]
    try:
        for s in held:
            s.sendall(p.encode_request(p.Command.GET_VERSION, p.version_body()))
            assert read_reply(s) is not None
        for _ in range(200):
            with nss_socket(d) as extra:
                assert closed_by_server(extra)
    finally:
        for s in held:
            s.close()
    assert responder_status(d)["refused"] == 200
    assert d.log_text().count("refusing an NSS client") <= 2


def test_17_12_one_uid_flooding_the_backend_does_not_delay_another(daemon_factory, slapd_hostile):
    s = slapd_hostile.slapd
    d = daemon_factory(slapd_hostile)
    with attack(d, "flood", 64, "flood") as (proc, _):
        start = s.log_offset()
        # The flood's queue full: 64 requests always waiting for the one worker.
        wait_for(lambda: sum("flood" in op.filter for op in s.searches(start)) > 200,
                 "the flood reaching slapd", timeout=60)  # fmt: skip
        with NssProbe(d.pipes_dir, d.mc_dir, env=SOCKET_ONLY) as probe:
            assert probe.call("getpwnam", "user00001").ok  # the probe is up and connected
            offset = s.log_offset()
            assert probe.call("getpwnam", "user00007").ok  # root, cold
        out = finish(proc)
    ops = s.searches(offset)
    mine = next(i for i, op in enumerate(ops) if "user00007" in op.filter)
    ahead = sum(1 for op in ops[:mine] if "flood" in op.filter)
    # Round-robin per uid: the attacker's request running, its one turn, and what ran
    # while the request crossed the probe's pipe and the responder (~1 ms a search).
    # One FIFO (main): every request the flood had queued, ~64.
    assert ahead <= 8, f"{ahead} flood searches ran before the victim's"
    print(f"\nflood of {out.get('requests')} unique names from uid 65534: {ahead} of its "
          "searches ran before root's cold lookup")  # fmt: skip


def test_17_12_a_uid_joining_a_queued_refresh_is_not_kept_behind_the_queue(
    daemon_factory, slapd_hostile
):
    """The attacker asks for the victim's name first, at the back of its own long
    queue; the victim's lookup joins that refresh and still runs at its own turn."""
    s = slapd_hostile.slapd
    d = daemon_factory(slapd_hostile, ldap_search_timeout=120, ldap_opt_timeout=120)

    def queued() -> int:
        return int(backend_status(d).get("queued", -1))

    with attack(d, "flood", 32, "flood") as (flood, _), \
            NssProbe(d.pipes_dir, d.mc_dir, env=SOCKET_ONLY) as probe:  # fmt: skip
        assert probe.call("getpwnam", "user00001").ok  # the probe is up
        s.pause()  # the worker gets stuck in one search: the queue fills and holds still
        try:
            # Each flood connection has one request outstanding: one runs, 31 wait.
            wait_for(lambda: queued() >= 31, "the whole flood queued", timeout=60,
                     log=lambda: str(backend_status(d)))  # fmt: skip
            before = queued()
            offset = s.log_offset()
            with attack(d, "ask", "user00009") as (ask, _):
                wait_for(lambda: queued() == before + 1, "the attacker's ask queued")
                result: list[bool] = []
                t = threading.Thread(
                    target=lambda: result.append(probe.call("getpwnam", "user00009").ok)
                )
                t.start()
                # The victim's lookup is queued for uid 0 too (one job, two queues).
                wait_for(lambda: queued() == before + 2, "the victim's turn queued")
                s.resume()
                t.join(timeout=120)
                assert result == [True]
                assert finish(ask)["status"] == 0
        finally:
            s.resume()  # SIGCONT again is harmless
        finish(flood)
    ops = s.searches(offset)
    mine = [i for i, op in enumerate(ops) if "user00009" in op.filter]
    assert len(mine) == 1, [op.filter for op in ops if "user00009" in op.filter]  # shared
    ahead = sum(1 for op in ops[: mine[0]] if "flood" in op.filter)
    # The search stuck at the pause, then the victim's turn (uids take turns). Without
    # the join it waits behind the ~32 flood requests queued before the attacker's ask.
    assert ahead <= 3, f"{ahead} flood searches ran before the shared one"


# == what held (kept tested) ==============================================================


def test_17_held_nss_socket_is_public_and_private_sockets_refuse_nobody(
    daemon_factory, slapd_hostile
):
    d = daemon_factory(slapd_hostile)
    # uid 65534 is a client of the NSS socket like anyone (reference §1.9)...
    nobody = attacker.argv("hold", 1)[:4]
    r = d.run_nss([*nobody, "getent", "passwd", "user00001"])
    assert r.returncode == 0, r.stderr
    # ...but not of the backend's or the responder's private RPC sockets.
    for name in ("be_LDAP", "responder"):
        code = (
            "import socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect('/var/lib/sss/pipes/private/{name}'); print('connected')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
        )
        r = d.run_nss([*nobody, attacker.PYTHON, "-c", code])
        assert r.stdout.startswith("refused"), (name, r.stdout, r.stderr)


def test_17_held_connection_share_has_no_effect_on_root(daemon_factory, slapd_hostile):
    # Root is never held to max_clients_per_uid: its daemons' threads need many.
    d = daemon_factory(slapd_hostile, nss={"max_clients_per_uid": 2, "max_clients": 12})
    socks = [nss_socket(d) for _ in range(12)]
    try:
        for sk in socks:
            sk.sendall(p.encode_request(p.Command.GET_VERSION, p.version_body()))
            assert read_reply(sk) is not None
        with socket.socket(socket.AF_UNIX) as extra:
            extra.connect(str(d.pipes_dir / "nss"))
            assert closed_by_server(extra)  # max_clients still holds for root
    finally:
        for sk in socks:
            sk.close()


def test_17_held_cycles_self_membership_and_deep_chains_terminate(daemon_factory, slapd_hostile):
    for level, deep in ((2, 3), (100, DEEP)):
        d = daemon_factory(slapd_hostile, ldap_group_nesting_level=level)
        r = d.run_nss(["id", "-Gn", "carol"], env=SOCKET_ONLY, timeout=60)
        groups = set(r.stdout.split())
        assert r.returncode == 0 and {"users", "cyc1", "cyc2", "selfgrp"} <= groups, r
        # The chain is followed up to the nesting level, no further.
        assert {x for x in groups if x.startswith("deep")} == {
            f"deep{i:02d}" for i in range(DEEP - deep, DEEP)
        }, (level, sorted(groups))
        for group in ("cyc1", "cyc2", "selfgrp", "deep00" if level == 100 else "deep39"):
            r = nss(d, "getent", "group", group)
            assert r.returncode == 0 and r.stdout.strip().endswith(":carol"), (group, r.stdout)


def test_17_held_the_bind_password_never_reaches_the_log(daemon_factory, slapd_hostile):
    s = slapd_hostile.slapd
    good = daemon_factory(slapd_hostile, ldap_default_bind_dn=s.root_dn,
                          ldap_default_authtok=ROOT_PW)  # fmt: skip
    assert nss(good, "id", "user00001").returncode == 0
    bad = daemon_factory(slapd_hostile, ldap_default_bind_dn=s.root_dn,
                         ldap_default_authtok="Wrong-17-pw", ldap_opt_timeout=1)  # fmt: skip
    assert nss(bad, "getent", "passwd", "user00001").returncode == 2
    for d, pw in ((good, ROOT_PW), (bad, "Wrong-17-pw")):
        assert "debug" in d.log_text().lower()  # the daemons log at debug level
        assert pw not in d.log_text()


def test_17_held_a_refused_starttls_never_binds_in_plaintext(daemon_factory, slapd_hostile):
    # This slapd has no TLS material: it refuses StartTLS.
    s = slapd_hostile.slapd
    offset = s.log_offset()
    d = daemon_factory(slapd_hostile, ldap_id_use_start_tls="true", ldap_default_bind_dn=s.root_dn,
                       ldap_default_authtok=ROOT_PW, ldap_opt_timeout=1,
                       ldap_network_timeout=1)  # fmt: skip
    r = nss(d, "getent", "passwd", "user00001")
    assert r.returncode == 2, r.stdout
    log = s._log_since(offset)
    assert "EXT oid=1.3.6.1.4.1.1466.20037" in log  # StartTLS was asked for...
    assert " BIND dn=" not in log  # ...and, refused, no bind followed


# == units: the pure logic behind the above ==============================================


def test_rate_limited_log_one_line_per_kind_per_interval(caplog):
    import logging

    from cached.ratelimit import RateLimitedLog

    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t17"), interval=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t17"):
        for _ in range(100):
            limited.log("a", logging.WARNING, "refused %s", "a")
        limited.log("b", logging.WARNING, "refused %s", "b")
        now[0] = 61.0
        limited.log("a", logging.WARNING, "refused %s", "a")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a",
        "refused b",
        "refused a (99 more like this in the last 60 s not logged)",
    ]
    assert limited.suppressed_total == 99


def test_fair_queue_takes_one_job_per_uid_in_turn():
    import asyncio

    from cached.ipc.ops import Op
    from cached.ldap.service import FairQueue, _Job

    async def run() -> list[str | int]:
        loop = asyncio.get_running_loop()
        q = FairQueue()
        jobs = {}
        for name, uid in [("a1", 1), ("a2", 1), ("a3", 1), ("b1", 2), ("c1", 3), ("a4", 1)]:
            jobs[name] = _Job(Op.USER_BY_NAME, name, loop.create_future())
            q.put(uid, jobs[name])
        q.put(2, jobs["a3"])  # uid 2 waits for a3 too: it runs at uid 2's turn
        order = []
        while q.waiting():
            job = await q.get()
            job.started = True
            order.append(job.key)
        return order

    assert asyncio.run(run()) == ["a1", "b1", "c1", "a2", "a3", "a4"]


def test_serve_policy_ids_filters_and_domains():
    from cached.model import Kind
    from cached.responder.policy import ServePolicy

    text = config_text(["ldap://127.0.0.1:1"], BASE, Path("/nonexistent"), min_id=0,
                       case_sensitive="false",
                       nss={"filter_users": "root, alice@ldap, bob@ELSEWHERE"})  # fmt: skip
    cfg = parse_config(text)
    policy, dom = ServePolicy(cfg), cfg.domains[0]
    assert not dom.id_in_range(0) and not dom.id_in_range(4294967295)
    assert dom.id_in_range(1) and dom.id_in_range(4294967294)
    assert not policy.user_ok(dom, User("x", 1000, 0))  # primary gid 0
    assert not policy.user_ok(dom, User("x", 0, 1000))
    assert policy.user_ok(dom, User("x", 1000, 1000))
    assert policy.name_filtered(dom, Kind.USER, "ROOT")  # case-insensitive domain
    assert policy.name_filtered(dom, Kind.USER, "Alice")  # alice@ldap: this domain
    # No configured domain called ELSEWHERE: the whole entry is a name, in every domain.
    assert policy.name_filtered(dom, Kind.USER, "bob@elsewhere")
    assert not policy.name_filtered(dom, Kind.USER, "bob")
    assert policy.name_filtered(dom, Kind.GROUP, "root")  # filter_groups default
