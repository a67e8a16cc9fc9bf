"""BackendCache.commit_new_groups: the groups of a big initgroups answer that only add
to the store are committed ahead of the rest, so the responder can put them in the
memory cache while the backend stores the others (docs/ARCHITECTURE.md §4, "Early
prefill"). What the store holds in the end must be what one commit gives, and a
reader between the commits must see nothing it held before change. Real LMDB stores."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cached.cache import State
from cached.cache.writer import BackendCache
from cached.counters import ENTRY_RECORDS, TS_RECORDS, Counters
from cached.model import Group, User

BASE = "dc=example,dc=test"
NOW = 1_800_000_000.0


def _user(i: int) -> User:
    name = f"user{i:05d}"
    dn = f"uid={name},ou=people,{BASE}"
    return User(name, 10001 + i, 10000, "", f"/home/{name}", "/bin/sh", dn)


def _group(name: str, gid: int, members: int = 3, dn: str = "") -> Group:
    dn = dn or f"cn={name},ou=groups,{BASE}"
    return Group(name, gid, dn, tuple(f"user{j:05d}" for j in range(members)))


def _store(path: Path) -> BackendCache:
    path.mkdir()
    return BackendCache(str(path), "LDAP", counters=Counters(), boot_id="boot-1")


def _dump(c: BackendCache) -> dict[str, list[tuple[bytes, bytes]]]:
    out = {}
    for store, prefix in ((c.entries, "entry"), (c.ts, "ts")):
        assert store is not None
        with store.read() as txn:
            for name, db in store.tables.items():
                if name == "meta":
                    continue  # each store's own id
                out[f"{prefix}.{name}"] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    return out


def _held_before(c: BackendCache) -> None:
    """What the store holds before the request: a group the request changes, and two
    whose gid and DN new groups of the request take."""
    with c.write() as b:
        c.put_user(b, _user(1))
        c.put_group(b, _group("changed", 30001, members=9))
        c.put_group(b, _group("oldgid", 40000))
        c.put_group(b, _group("olddn", 40001, dn=f"cn=taken,ou=groups,{BASE}"))
        c.put_group(b, _group("aliased", 40002), aliases=["nick", "nick2"])
        c.put_group(b, _group("renumbered", 40005))


ALIASES = {"new05": ["other-name"], "newalias": ["nick2"]}


def _request(c: BackendCache, early: list[int]) -> list[list[bytes]]:
    """One request's answer, with commit_new_groups after each count of groups put in
    ``early``; returns the keys each committed."""
    plan = [
        *(_group(f"new{i:02d}", 20000 + i) for i in range(12)),
        _group("changed", 30001, members=4),  # held: its new record waits for the rest
        _group("newgid", 40000),  # the gid of "oldgid"
        _group("newdn", 40003, dn=f"cn=Taken,ou=groups,{BASE}"),  # the DN of "olddn"
        _group("twin", 20003),  # the gid of new03, in a later early commit
        _group("nick", 40004),  # a name that is an alias of "aliased"
        _group("newalias", 40006),  # with an alias of "aliased" (below)
        _group("renumbered", 40007, dn=f"cn=renumbered,ou=other,{BASE}"),  # held: new gid and DN
    ]
    committed = []
    with c.request(), c.write() as b:
        c.put_user(b, _user(2))
        for n, g in enumerate(plan):
            if n in early:
                committed.append(c.commit_new_groups(b))
            c.put_group(b, g, aliases=ALIASES.get(g.name, ()))
        c.put_initgroups(b, "user00002", [g.gid for g in plan], [g.name for g in plan])
    return committed


@pytest.mark.parametrize("held", [False, True], ids=["empty store", "store in use"])
def test_early_commits_leave_what_one_commit_leaves(tmp_path, monkeypatch, held):
    monkeypatch.setattr(time, "time", lambda: NOW)
    one, split = _store(tmp_path / "one"), _store(tmp_path / "split")
    for c in (one, split):
        if held:
            _held_before(c)
    _request(one, [])
    committed = _request(split, [6, 12, 16, 18])
    assert _dump(split) == _dump(one)
    # Each record written once: what an early commit wrote left the batch.
    for stat in (ENTRY_RECORDS, TS_RECORDS):
        assert split.counters.get(stat).amount == one.counters.get(stat).amount, stat
    new = [split.key(f"new{i:02d}") for i in range(12)]
    # Only groups new to the store, and each once.
    assert committed[0] == new[:6]
    assert committed[1] == new[6:]
    if held:
        # Not the held groups, nor those taking a held gid, DN, name of an alias or
        # alias; "twin" takes new03's gid, which the early commit put in the index:
        # left for the end too.
        assert committed[2:] == [[], []]
    else:
        # An index empty at the first early commit holds only this request's own
        # groups: "twin" goes early too, and the end is the same (checked above).
        assert committed[2:] == [
            [split.key(n) for n in ("changed", "newgid", "newdn", "twin")],
            [split.key(n) for n in ("nick", "newalias")],
        ]


def test_a_request_looks_up_the_indexes_its_early_commits_did_not_fill(tmp_path):
    """An index found empty at a request's first early commit is not looked up again in
    that request; the next request finds it filled (by the first) and looks."""
    c = _store(tmp_path / "c")
    with c.request(), c.write() as b:
        c.put_group(b, _group("first", 20000))
        assert c.commit_new_groups(b) == [c.key("first")]
    with c.request(), c.write() as b:
        c.put_group(b, _group("second", 20000))  # first's gid
        assert c.commit_new_groups(b) == []


def test_a_reader_between_early_commits_sees_old_entries_unchanged(tmp_path):
    c = _store(tmp_path / "c")
    _held_before(c)
    with c.request(), c.write() as b:
        for g in (_group("fresh", 20000, members=7), _group("changed", 30001, members=4),
                  _group("newgid", 40000),
                  _group("renumbered", 40007, dn=f"cn=renumbered,ou=other,{BASE}")):  # fmt: skip
            c.put_group(b, g)
        assert c.commit_new_groups(b) == [c.key("fresh")]
        renumbered = c.group_by_name("renumbered").value
        assert renumbered is not None and renumbered.gid == 40005
        # Committed: the new group, whole and valid; what the store held, as it was.
        fresh = c.group_by_name("fresh")
        assert fresh.state is State.VALID and fresh.value is not None
        assert fresh.value.member_count == 7
        assert c.group_by_gid(20000).value == fresh.value
        changed = c.group_by_name("changed").value
        assert changed is not None and changed.member_count == 9
        held = c.group_by_gid(40000).value
        assert held is not None and held.name == "oldgid"
        assert c.group_by_name("newgid").state is State.MISSING
    changed = c.group_by_name("changed").value
    assert changed is not None and changed.member_count == 4
    moved = c.group_by_gid(40000).value
    assert moved is not None and moved.name == "newgid"


def test_an_invalidation_between_the_commits_stores_the_rest_expired(tmp_path):
    """An invalidation between the commits (`cached cache -G`) expires the groups
    committed early, as any stored group; the final commit, which checks for one
    since the request began (ARCHITECTURE.md §5), stores the rest expired: none is
    served as fresh past the invalidation."""
    c = _store(tmp_path / "c")
    with c.request(), c.write() as b:
        c.put_group(b, _group("first", 20000))
        assert c.commit_new_groups(b) == [c.key("first")]
        assert c.invalidate_groups() == 1  # `cached cache -G` meanwhile
        c.put_group(b, _group("second", 20001))
    assert c.group_by_name("first").state is State.EXPIRED
    assert c.group_by_name("second").state is State.EXPIRED
