"""BackendCache.commit_new_groups: the groups of a big initgroups answer that only add
to the store are committed ahead of the rest, so the responder can put them in the
memory cache while the backend stores the others (docs/ARCHITECTURE.md §4, "Early
prefill"). What the store holds in the end must be what one commit gives, and a
reader between the commits must see nothing it held before change. Real LMDB stores."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from cached.cache import State
from cached.cache.writer import BackendCache, WriteBatch
from cached.counters import ENTRY_COMMIT, ENTRY_RECORDS, TS_RECORDS, Counters
from cached.dn import normalize_dn
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


def _plan(c: BackendCache, b: WriteBatch, *groups: Group, later: Iterable[Group] = ()) -> None:
    """plan_early for ``groups`` and ``later``, then put ``groups``."""
    c.plan_early(b, [(g.name, g.gid, normalize_dn(g.dn), ()) for g in (*groups, *later)])
    for g in groups:
        c.put_group(b, g)


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
        c.plan_early(b, [(g.name, g.gid, normalize_dn(g.dn), ALIASES.get(g.name, ()))
                         for g in plan])  # fmt: skip
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
    # Only groups new to the store, and each once; not new03 and "twin", which write
    # the same gid: the last commit decides between them, as one commit does.
    assert committed[0] == new[:3] + new[4:6]
    assert committed[1] == new[6:]
    if held:
        # Not the held groups, nor those taking a held gid, DN, name of an alias or
        # alias.
        assert committed[2:] == [[], []]
    else:
        assert committed[2:] == [
            [split.key(n) for n in ("changed", "newgid", "newdn")],
            [split.key(n) for n in ("nick", "newalias")],
        ]


def test_without_a_plan_nothing_goes_early(tmp_path):
    c = _store(tmp_path / "c")
    with c.request(), c.write() as b:
        c.put_group(b, _group("first", 20000))
        assert c.commit_new_groups(b) == []
    assert c.group_by_name("first").value is not None


def test_a_request_looks_up_the_indexes_its_early_commits_did_not_fill(tmp_path):
    """An index found empty at a request's first early commit is not looked up again in
    that request; the next request finds it filled (by the first) and looks."""
    c = _store(tmp_path / "c")
    with c.request(), c.write() as b:
        _plan(c, b, _group("first", 20000))
        assert c.commit_new_groups(b) == [c.key("first")]
    with c.request(), c.write() as b:
        _plan(c, b, _group("second", 20000))  # first's gid
        assert c.commit_new_groups(b) == []


def test_a_reader_between_early_commits_sees_old_entries_unchanged(tmp_path):
    c = _store(tmp_path / "c")
    _held_before(c)
    with c.request(), c.write() as b:
        _plan(c, b, _group("fresh", 20000, members=7), _group("changed", 30001, members=4),
              _group("newgid", 40000),
              _group("renumbered", 40007, dn=f"cn=renumbered,ou=other,{BASE}"))  # fmt: skip
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
        first, second = _group("first", 20000), _group("second", 20001)
        _plan(c, b, first, later=[second])
        assert c.commit_new_groups(b) == [c.key("first")]
        assert c.invalidate_groups() == 1  # `cached cache -G` meanwhile
        c.put_group(b, second)
    assert c.group_by_name("first").state is State.EXPIRED
    assert c.group_by_name("second").state is State.EXPIRED


def _nested(name: str, gid: int, members: tuple[str, ...], below: tuple[str, ...]) -> Group:
    return Group(name, gid, f"cn={name},ou=groups,{BASE}", members, below)


def _members(c: BackendCache, name: str) -> set[str] | None:
    """The expanded member list a reader gets for ``name`` (None: not stored)."""
    g = c.group_by_name(name).value
    return None if g is None else set(g.members.decode().split("\0")) - {""}


def test_a_group_waits_for_the_member_groups_it_expands_to(tmp_path):
    """Found in review: a new parent committed ahead of its member group, which the
    request changed, was read — and put in the memory cache — without the new
    members; a kill between the commits left it stored valid and incomplete."""
    c = _store(tmp_path / "c")
    with c.write() as b:
        c.put_group(b, _nested("inner", 30000, ("x",), ()))
    inner = _nested("inner", 30000, ("alice", "x"), ())  # changed: the last commit's
    outer = _nested("outer", 30001, ("y",), ("inner",))  # new, expands to inner
    leaf = _nested("leaf", 30003, ("z",), ())  # new, put after its parent
    top = _nested("top", 30002, ("w",), ("leaf",))
    lone = _nested("lone", 30004, ("v",), ())
    with c.request(), c.write() as b:
        upper = _nested("upper", 30005, ("u",), ("top", "lone"))
        _plan(c, b, inner, outer, top, lone, later=[leaf, upper])
        # outer: its member group is still to be written; top: its member group is
        # not even put yet. Only the group that expands to nothing goes.
        assert c.commit_new_groups(b) == [c.key("lone")]
        assert _members(c, "outer") is None and _members(c, "top") is None
        c.put_group(b, leaf)
        # Its member group goes now, so top goes with it: read whole at once.
        assert sorted(c.commit_new_groups(b)) == sorted([c.key("top"), c.key("leaf")])
        assert _members(c, "top") == {"w", "z"}
        # A group whose member groups went in earlier early commits goes too.
        c.put_group(b, _nested("upper", 30005, ("u",), ("top", "lone")))
        assert c.commit_new_groups(b) == [c.key("upper")]
        assert _members(c, "upper") == {"u", "w", "z", "v"}
    assert _members(c, "outer") == {"alice", "x", "y"}


def test_a_cycle_of_new_groups_goes_together(tmp_path):
    c = _store(tmp_path / "c")
    a, b_ = _nested("a", 30000, ("x",), ("b",)), _nested("b", 30001, ("y",), ("a",))
    with c.request(), c.write() as b:
        _plan(c, b, a, b_)
        assert sorted(c.commit_new_groups(b)) == sorted([c.key("a"), c.key("b")])
        assert _members(c, "a") == {"x", "y"}


def test_what_two_entries_of_the_request_write_waits_for_the_last_commit(tmp_path):
    """Found in review: a gid, name or DN that two entries of one request write was
    decided by the early commit, where one commit lets the later write win."""
    c = _store(tmp_path / "c")
    with c.write() as b:
        c.put_group(b, _group("r", 100))
    devs_a = _group("devs", 104, dn=f"cn=devs,ou=a,{BASE}")
    devs_b = _group("devs", 105, dn=f"cn=devs,ou=b,{BASE}")  # the same name again
    user = _user(7)
    as_user = _group("sameasuser", 106, dn=user.dn)  # a group at the user's DN
    with c.request(), c.write() as b:
        c.put_user(b, user)
        groups = [_group("q", 200), _group("alpha", 104), devs_a, as_user, _group("solo", 300),
                  # one DN in two spellings; one alias for two groups
                  _group("dn1", 500, dn=f"cn=shared,ou=groups,{BASE}"),
                  _group("dn2", 501, dn=f"CN=Shared,ou=groups,{BASE}"),
                  _group("nick1", 600), _group("nick2", 601)]  # fmt: skip
        def nick(g: Group) -> list[str]:
            return ["nick"] if g.name.startswith("nick") else []

        c.plan_early(b, [(g.name, g.gid, normalize_dn(g.dn), nick(g))
                         for g in [*groups, _group("r", 200), devs_b]])  # fmt: skip
        for g in groups:
            c.put_group(b, g, aliases=nick(g))
        # nick1 holds no alias any more (the later put took it, as in one commit).
        assert c.commit_new_groups(b) == [c.key("solo"), c.key("nick1")]
        c.put_group(b, _group("r", 200))  # r renumbered to q's gid
        c.put_group(b, devs_b)
    g200 = c.group_by_gid(200).value
    assert g200 is not None and g200.name == "r"  # the later write, as one commit
    g104 = c.group_by_gid(104).value
    assert g104 is not None and g104.name == "alpha"
    by_alias = c.group_by_name("nick").value
    assert by_alias is not None and by_alias.name == "nick2"


Aliased = list[tuple[Group, list[str]]]


def _random_request(seed: int) -> tuple[Aliased, Aliased, list[int], list[str]]:
    """Held groups, a request's groups (nested, with colliding names, gids, DNs
    and aliases), where it commits early, and the groups it deletes."""
    rnd = random.Random(seed)
    names = [f"g{i}" for i in range(9)]

    def group() -> tuple[Group, list[str]]:
        n = rnd.choice(names)
        dn = f"cn={n},ou={rnd.choice('ab')},{BASE}"
        below = tuple(rnd.sample(names, rnd.choice((0, 0, 1, 2))))
        members = tuple(f"u{rnd.randint(0, 3)}" for _ in range(rnd.randint(1, 3)))
        aliases = [rnd.choice(names)] if rnd.random() < 0.2 else []
        return Group(n, 100 + rnd.randint(0, 9), dn, members, below), aliases

    held = [group() for _ in range(rnd.randint(0, 4))]
    plan = [group() for _ in range(rnd.randint(2, 10))]
    points = sorted(rnd.sample(range(1, len(plan) + 1), rnd.randint(1, len(plan))))
    gone = [n for n in rnd.sample(names, 2) if n not in {g.name for g, _ in plan}]
    return held, plan, points, gone


def _run(c: BackendCache, seed: int, early: bool) -> list[dict[str, set[str] | None]]:
    """_random_request on ``c``; with ``early``, for each early commit, what a reader got
    for each group it committed."""
    held, plan, points, gone = _random_request(seed)
    with c.write() as b:
        for g, al in held:
            c.put_group(b, g, aliases=al)
    seen = []
    with c.request(), c.write() as b:
        if early:
            c.plan_early(b, [(g.name, g.gid, normalize_dn(g.dn), al) for g, al in plan])
        for i, (g, al) in enumerate(plan):
            c.put_group(b, g, aliases=al)
            if early and i + 1 in points:
                keys = c.commit_new_groups(b)
                names = {g.name for g, _ in plan if c.key(g.name) in keys}
                seen.append({n: _members(c, n) for n in names})
        for n in gone:
            c.delete_group(b, n)
    return seen


@pytest.mark.parametrize("seeds", [range(0, 60), range(60, 120)], ids=["0-59", "60-119"])
def test_random_requests_end_as_one_commit_and_early_groups_read_as_in_the_end(
    tmp_path, monkeypatch, seeds
):
    """Random held stores and requests (nested groups, two groups of one name, gid,
    DN or alias, deletions), committed early at random points: the stores end byte
    for byte as one commit leaves them, and every group a reader got between the
    commits read as it does in the end (so the memory cache a note fills holds it)."""
    monkeypatch.setattr(time, "time", lambda: NOW)
    went = 0
    for seed in seeds:
        one, split = _store(tmp_path / f"one{seed}"), _store(tmp_path / f"split{seed}")
        _run(one, seed, early=False)
        seen = _run(split, seed, early=True)
        assert _dump(split) == _dump(one), seed
        for got in seen:
            for name, members in got.items():
                went += 1
                assert members == _members(one, name), (seed, name)
        one.close()
        split.close()
    assert went  # the requests did commit groups early


def test_a_user_put_after_the_plan_still_keeps_a_group_at_its_dn_back(tmp_path):
    c = _store(tmp_path / "c")
    user = _user(8)
    with c.request(), c.write() as b:
        _plan(c, b, _group("atuser", 700, dn=user.dn), _group("other", 701))
        c.put_user(b, user)
        assert c.commit_new_groups(b) == [c.key("other")]


class _CountingSyncs:
    """A store's LMDB environment, counting its flushes (Environment.sync)."""

    def __init__(self, env: object) -> None:
        self._env, self.syncs = env, 0

    def sync(self, force: bool = False) -> None:
        self.syncs += 1
        self._env.sync(force)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._env, name)


def test_only_the_last_commit_of_a_request_waits_for_its_meta_page(tmp_path):
    """The entry store leaves the meta page's flush to Store.write_built: a durable
    commit (every ordinary write) flushes it before returning, an early commit does
    not, so a request of five commits pays six fsyncs rather than ten; the last
    commit's flush carries the early ones' meta pages, before the answer leaves."""
    c = _store(tmp_path / "c")
    assert c.entries.env.flags()["sync"] and not c.entries.env.flags()["metasync"]
    env = _CountingSyncs(c.entries.env)
    c.entries.env = env  # type: ignore[assignment]
    _held_before(c)
    assert env.syncs == 1  # an ordinary write: durable when it returns
    before = c.counters.get(ENTRY_COMMIT).count
    committed = _request(c, [6, 12])
    assert all(committed)
    assert c.counters.get(ENTRY_COMMIT).count - before == 3
    assert env.syncs == 2  # the request's last commit alone
