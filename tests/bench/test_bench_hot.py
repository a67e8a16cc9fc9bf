"""Benchmarks of the hot functions behind `id bigroupuser` and `getent group large01`.

Run by `make bench` (pytest-benchmark, ``--benchmark-autosave``), comparable across
commits with ``--benchmark-compare`` (see perf/results/*/report.md, "Commands"). Under
`make test` (``--benchmark-disable``) each runs once and its assertions make it a test.

Sizes are bigroupuser's (testing.gendir): 2,086 gids in the big user's initgroups reply,
5,000 members in a large group. The cache benchmarks cover what
tests/bench/test_bench_cache.py does not: the 2,086 getgrgid reads of a warm `id`, the
write of an initgroups result, a timestamp-only refresh (``touch_group``), and the
expansion of a group's members through nested groups.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from array import array

from cached.cache import DomainCache, State
from cached.cache.writer import BackendCache
from cached.counters import ENTRY_TXN, TS_WRITE, Counters
from cached.model import Group, User
from cached.nss import protocol as p

BASE = "dc=example,dc=test"
GIDS = [10000, *range(20001, 20001 + 2085)]  # bigroupuser: primary + 2,085 groups
MEMBERS = [f"user{i:05d}" for i in range(1, 5001)]  # large01


def new_cache(nesting_level: int = 2) -> BackendCache:
    return BackendCache(
        tempfile.mkdtemp(prefix="bench-hot-"),
        "LDAP",
        nesting_level=nesting_level,
        counters=Counters(),
        boot_id="b",
    )


def big_user() -> User:
    return User(
        "bigroupuser",
        15001,
        10000,
        "Big Group User",
        "/home/bigroupuser",
        "/bin/bash",
        f"uid=bigroupuser,ou=people,{BASE}",
    )


def nest_groups(n: int = 2085) -> list[Group]:
    return [
        Group(
            f"nest0-{i:04d}",
            20001 + i,
            f"cn=nest0-{i:04d},ou=groups,{BASE}",
            ("bigroupuser", *(f"user{(i * 7 + j * 13) % 5000:05d}" for j in range(20))),
        )
        for i in range(n)
    ]


# -- the NSS codec ------------------------------------------------------------------------


def test_encode_initgr_reply_2086_gids(benchmark):
    reply = benchmark(p.initgr_reply, GIDS)
    assert len(reply) == 16 + 8 + 4 * 2086
    assert p.decode_initgr(reply[16:]) == GIDS


def test_encode_initgr_reply_2086_packed_gids(benchmark):
    # The responder's path: the cache hands out the gids already packed.
    packed = array("I", GIDS).tobytes()
    reply = benchmark(p.initgr_reply, packed)
    assert reply[24:] == packed
    assert p.decode_initgr(reply[16:]) == GIDS


def test_encode_group_reply_5000_members_from_blob(benchmark):
    # The responder's path: the cache stores members NUL-joined, the reply is a concat.
    blob = p.members_blob(MEMBERS)

    def encode() -> bytes:
        record = p.encode_group_record(30001, "large01", "*", len(MEMBERS), blob)
        return p.group_reply(p.Command.GETGRNAM, [record])

    reply = benchmark(encode)
    (entry,) = p.decode_group(reply[16:])
    assert entry.name == "large01" and entry.gid == 30001
    assert list(entry.members) == MEMBERS


def test_encode_group_5000_members_from_names(benchmark):
    record = benchmark(p.encode_group, 30001, "large01", "*", MEMBERS)
    (entry,) = p.decode_group(p.group_reply(p.Command.GETGRGID, [record])[16:])
    assert len(entry.members) == 5000


# -- the cache ----------------------------------------------------------------------------


def test_warm_id_reads_2086_groups_by_gid(benchmark):
    """What the responder does for the getgrgid calls of a warm `id bigroupuser`."""
    c = new_cache()
    gs = nest_groups()
    with c.write() as b:
        for g in gs:
            c.put_group(b, g)
    gids = [g.gid for g in gs]

    def read_all() -> int:
        valid = 0
        for gid in gids:
            if c.group_by_gid(gid).state is State.VALID:
                valid += 1
        return valid

    assert benchmark(read_all) == len(gs)


def test_warm_id_reads_2085_nested_groups_after_a_commit(benchmark):
    """The reads of a warm `id` in the responder when the backend has committed since
    the last `id` (another group's timestamps): each kept lookup is checked against
    the records it was read from and given again, the same view, not read again."""
    c = new_cache()
    leaves = [Group(f"leaf-{i:03d}", 30001 + i, f"cn=leaf-{i:03d},ou=groups,{BASE}",
                    tuple(MEMBERS[i * 60 : i * 60 + 60])) for i in range(60)]  # fmt: skip
    gs = [
        Group(g.name, g.gid, g.dn, g.members, tuple(f"leaf-{(i + k) % 60:03d}" for k in (0, 7, 31)))
        for i, g in enumerate(nest_groups())
    ]
    with c.write() as b:
        for g in [*gs, *leaves, Group("unrelated", 40000, f"cn=unrelated,ou=groups,{BASE}")]:
            c.put_group(b, g)
    reader = DomainCache(os.path.dirname(c.entry_path), "LDAP", counters=Counters())
    gids = [g.gid for g in gs]
    first = {gid: reader.group_by_gid(gid).value for gid in gids}
    stamp = itertools.count()

    def commit_then_read_all() -> int:
        with c.write() as b:
            c.touch_group(b, "unrelated", modstamp=str(next(stamp)))
        return sum(reader.group_by_gid(gid).value is first[gid] for gid in gids)

    assert benchmark(commit_then_read_all) == len(gs)
    reader.close()


def test_store_initgroups_of_2086_groups(benchmark):
    """The write at the end of a cold initgroups: the user and its gid list (the groups
    themselves are covered by test_bench_cache.test_store_2000_groups_of_20_members)."""
    c = new_cache()
    user = big_user()
    names = [g.name for g in nest_groups()]
    rounds = itertools.count()

    def store() -> None:
        # A different gid list every round, so every round really writes.
        shift = next(rounds)
        with c.write() as b:
            c.put_user(b, user)
            c.put_initgroups(b, user.name, [10000, *(g + shift for g in GIDS[1:])], names)

    benchmark(store)
    got = c.initgroups(user.name)
    assert got.state is State.VALID and got.value is not None
    assert len(array("I", got.value.gids)) == 2086
    assert c.counters.get(ENTRY_TXN).count >= 1


def test_touch_2085_unchanged_groups(benchmark):
    """A refresh where the server says nothing changed (same modifyTimestamp):
    timestamps only, never the entry store (invariant 2)."""
    c = new_cache()
    gs = nest_groups()
    with c.write() as b:
        for g in gs:
            c.put_group(b, g, modstamp="20260101000000Z")
    txns = c.counters.get(ENTRY_TXN).count
    ts_before = c.counters.get(TS_WRITE).count

    def touch() -> None:
        with c.write() as b:
            for g in gs:
                c.touch_group(b, g.name, modstamp="20260101000000Z")

    benchmark(touch)
    assert c.counters.get(ENTRY_TXN).count == txns
    assert c.counters.get(TS_WRITE).count > ts_before


def test_read_group_of_5000_members_through_nesting(benchmark):
    """large01-like membership spread over 5 member groups: the nested expansion
    (level 2) that a getgrnam of a parent group pays."""
    c = new_cache(nesting_level=2)
    children = [
        Group(
            f"part{k}",
            31001 + k,
            f"cn=part{k},ou=groups,{BASE}",
            tuple(MEMBERS[k * 1000 : (k + 1) * 1000]),
        )
        for k in range(5)
    ]
    top = Group("parent", 31000, f"cn=parent,ou=groups,{BASE}", (), tuple(g.name for g in children))
    with c.write() as b:
        for g in [*children, top]:
            c.put_group(b, g)
    got = benchmark(c.group_by_name, "parent")
    assert got.value is not None and got.value.member_count == 5000
    assert set(p.members_blob(MEMBERS).split(b"\0")) == set(got.value.members.split(b"\0"))
