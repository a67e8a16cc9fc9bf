"""Benchmarks of the split cache. Run by `make bench`.

Under `make test` (--benchmark-disable) each runs once, as a test of the path.
"""

from __future__ import annotations

import itertools
import tempfile
from array import array

from cached.cache import State
from cached.cache.writer import BackendCache
from cached.counters import ENTRY_TXN, Counters
from cached.model import Group, User

BASE = "dc=example,dc=test"


def users(n: int) -> list[User]:
    return [
        User(
            f"user{i:05d}",
            10001 + i,
            10000,
            f"User {i}",
            f"/home/user{i:05d}",
            "/bin/bash",
            f"uid=user{i:05d},ou=people,{BASE}",
        )
        for i in range(n)
    ]


def groups(n: int, members: int = 20, salt: str = "") -> list[Group]:
    return [
        Group(
            f"group{i:05d}",
            20001 + i,
            f"cn=group{i:05d},ou=groups,{BASE}",
            tuple(f"user{(i * 7 + j * 13) % 5000:05d}{salt}" for j in range(members)),
        )
        for i in range(n)
    ]


def new_cache() -> BackendCache:
    return BackendCache(
        tempfile.mkdtemp(prefix="bench-"),
        "LDAP",
        counters=Counters(),
        boot_id="b",
    )


def test_refresh_2000_unchanged_groups(benchmark):
    c = new_cache()
    gs = groups(2000)
    with c.write() as b:
        for g in gs:
            c.put_group(b, g)
    txns = c.counters.get(ENTRY_TXN).count

    def refresh() -> None:
        with c.write() as b:
            for g in gs:
                c.put_group(b, g)

    benchmark(refresh)
    assert c.counters.get(ENTRY_TXN).count == txns


def test_store_2000_groups_of_20_members(benchmark):
    salts = (f"-{i}" for i in itertools.count())
    c = new_cache()

    def setup():
        return (groups(2000, salt=next(salts)),), {}

    def store(gs: list[Group]) -> None:
        with c.write() as b:
            for g in gs:
                c.put_group(b, g)

    benchmark.pedantic(store, setup=setup, rounds=10)
    assert c.counts()["groups"] == 2000


def test_initgroups_read_of_2086_groups(benchmark):
    c = new_cache()
    gs = groups(2085)
    with c.write() as b:
        c.put_user(b, users(1)[0])
        c.put_initgroups(b, "user00000", [10000] + [g.gid for g in gs], [g.name for g in gs])
    got = benchmark(c.initgroups, "user00000")
    assert got.state is State.VALID and got.value is not None
    assert len(array("I", got.value.gids)) == 2086


def test_invalidate_everything_10000_entries(benchmark):
    c = new_cache()
    with c.write() as b:
        for u in users(5000):
            c.put_user(b, u)
        for g in groups(5000):
            c.put_group(b, g)
    assert benchmark(c.invalidate_all) == 10000


def test_read_one_group_of_5000_members(benchmark):
    c = new_cache()
    with c.write() as b:
        c.put_group(
            b,
            Group(
                "large01", 30001, f"cn=large01,ou=groups,{BASE}", tuple(u.name for u in users(5000))
            ),
        )
    got = benchmark(c.group_by_name, "large01")
    assert got.value is not None and got.value.member_count == 5000
