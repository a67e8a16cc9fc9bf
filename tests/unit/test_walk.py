"""The nesting walk (cached/ldap/walk.py) driven with a fake searcher, as SSSD's
src/tests/cmocka/test_nested_groups.c drives sdap_nested_group_send with mocked
searches: a directory held in a dict answers each batched search the walk sends, so the
rules of the walk are checked on their own — members named by the deref control,
dangling members, the nesting-level budget, cycles — and which searches it needed.
Pure logic: no server; the cache is a real one in a temporary directory (empty: no
member is served from it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.counters import Counters
from cached.dn import normalize_dn
from cached.ldap import deref
from cached.ldap.batch import Answers, Job, Searcher
from cached.ldap.context import Context
from cached.ldap.entries import GROUP, USER, GroupEntry, Known, Member
from cached.ldap.exchange import Entry, Search, ServerInfo
from cached.ldap.provider import LdapProvider
from cached.ldap.walk import Walk
from testing.backend import make_backend, make_domain

BASE = "dc=walk,dc=test"
PEOPLE, GROUPS = f"ou=people,{BASE}", f"ou=groups,{BASE}"
_ASSERTION = re.compile(r"^\((\w+)=(.*)\)$")


def user(name: str, uid: int) -> tuple[str, dict[str, list[bytes]]]:
    return f"uid={name},{PEOPLE}", {
        "objectclass": [b"posixAccount"], "uid": [name.encode()],
        "uidnumber": [str(uid).encode()], "gidnumber": [b"5000"],
    }  # fmt: skip


def group(name: str, gid: int | None, *members: str) -> tuple[str, dict[str, list[bytes]]]:
    attrs = {"objectclass": [b"posixGroup"], "cn": [name.encode()],
             "member": [m.encode() for m in members]}  # fmt: skip
    if gid is not None:
        attrs["gidnumber"] = [str(gid).encode()]
    return f"cn={name},{GROUPS}", attrs


def dn_of(name: str) -> str:
    return f"cn={name},{GROUPS}" if not name.startswith("uid=") else name


class FakeSearcher(Searcher):
    """The directory ``entries`` answering the walk's batched searches: each job's
    items (schema kinds of Searcher.round_filter: ``u`` groups listing a DN, ``m`` an
    entry by its RDN value, ``g``/``s`` a group/user by it), with deref results for
    the groups of a job that asks for them, as slapd sends them (each DN once per
    walk, ``deref_seen``). Every job is recorded in ``jobs``."""

    def __init__(self, ctx: Context, entries: dict[str, dict[str, list[bytes]]]) -> None:
        super().__init__(ctx)
        self.entries = {normalize_dn(dn): (dn, attrs) for dn, attrs in entries.items()}
        self.jobs: list[list[tuple[str, str]]] = []

    def _matches(self, kind: str, assertion: str) -> list[str]:
        m = _ASSERTION.match(assertion)
        assert m is not None and kind in "umgs", (kind, assertion)
        attr, value = m.group(1).lower(), m.group(2)
        out = []
        for key, (_dn, attrs) in self.entries.items():
            ocs = attrs["objectclass"]
            if kind == "u":
                hit = b"posixGroup" in ocs and normalize_dn(value) in {
                    normalize_dn(v.decode()) for v in attrs.get(attr, [])
                }
            else:
                cls = {"g": [b"posixGroup"], "s": [b"posixAccount"]}.get(kind, ocs)
                hit = any(c in ocs for c in cls) and value.encode() in attrs.get(attr, [])
            if hit:
                out.append(key)
        return out

    def split(
        self,
        jobs: list[Job],
        build: Any,
        paged: bool | list[bool] = True,
        also: tuple[list[Search], Answers] | None = None,
        deref_seen: set[bytes] | None = None,
    ) -> list[list[Entry]]:
        assert also is None or not also[0]  # no sweep: the fake offers no paging
        out: list[list[Entry]] = []
        for _bases, items, _attrs, specs in jobs:
            self.jobs.append(list(items))
            keys = dict.fromkeys(k for kind, a in items for k in self._matches(kind, a))
            got = []
            for k in keys:
                dn, attrs = self.entries[k]
                e = Entry(dn, attrs)
                if specs and b"posixGroup" in attrs["objectclass"]:
                    results = [
                        deref.DerefResult("member", self.entries[mk][0], self.entries[mk][1])
                        for v in attrs.get("member", [])
                        if (mk := normalize_dn(v.decode())) in self.entries
                    ]
                    seen = deref_seen if deref_seen is not None else set()
                    e.deref = [r for r in results if r.dn.encode() not in seen]
                    seen.update(r.dn.encode() for r in results)
                    e.deref_total = len(results)
                got.append(e)
            out.append(got)
        return out

    def kinds(self) -> list[str]:
        """The kinds of every item searched, in order."""
        return [kind for items in self.jobs for kind, _a in items]


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[tuple[LdapProvider, Path]]:
    yield from _backend(tmp_path)


def _backend(tmp_path: Path, **opts: Any) -> Iterator[tuple[LdapProvider, Path]]:
    cfg = make_domain(["ldap://127.0.0.1:9"], BASE, **opts)
    p, _cache, _ = make_backend(tmp_path, cfg, Counters())
    yield p, tmp_path


def walk(
    p: LdapProvider, entries: list[tuple[str, dict[str, list[bytes]]]], deref_control: bool
) -> tuple[Walk, FakeSearcher]:
    # No paged results offered: no sweep; the deref control as asked.
    p.client.info = ServerInfo("fake://", controls={deref.DEREF_OID} if deref_control else set())
    searcher = FakeSearcher(p.ctx, dict(entries))
    return Walk(p.ctx, p.decoder, searcher, p.sweeps), searcher


def keys(*names: str) -> set[str]:
    return {normalize_dn(dn_of(n)) for n in names}


ALICE, BOB = user("alice", 1001), user("bob", 1002)


@pytest.mark.parametrize("deref_control", [True, False], ids=["deref", "look-ups"])
def test_members_named_by_deref_or_by_look_ups_alike(backend, deref_control: bool) -> None:
    """alice in g1, g1 and bob in g2: both groups found walking up, every member named
    by its entry; with the control, by the deref results, with no look-up at all."""
    p, _ = backend
    entries = [ALICE, BOB, group("g1", 7001, ALICE[0]), group("g2", 7002, dn_of("g1"), BOB[0])]
    w, searcher = walk(p, entries, deref_control)
    found: dict[str, GroupEntry] = {}
    known: Known = {}
    mine = w.closure(found, {}, known, [ALICE[0]])
    assert mine == keys("g1", "g2") == set(found)
    assert known[normalize_dn(ALICE[0])] == Member(USER, "alice")
    assert known[normalize_dn(BOB[0])] == Member(USER, "bob")
    lookups = [k for k in searcher.kinds() if k != "u"]
    assert (lookups == []) is deref_control, searcher.jobs
    assert not w.missing


@pytest.mark.parametrize("deref_control", [True, False], ids=["deref", "look-ups"])
def test_a_dangling_member_names_nothing_and_is_missing(backend, deref_control: bool) -> None:
    """A member DN in a user base that names no entry (deleted, no referential
    integrity) is no member, the group stays complete, and it is recorded missing
    (save.changed_since_read reads its group again); one outside every base is
    dropped without that."""
    p, _ = backend
    ghost, outside = f"uid=ghost,{PEOPLE}", "uid=far,dc=elsewhere"
    entries = [ALICE, group("g1", 7001, ALICE[0], ghost, outside)]
    w, _searcher = walk(p, entries, deref_control)
    known: Known = {}
    found: dict[str, GroupEntry] = {}
    assert w.closure(found, {}, known, [ALICE[0]]) == keys("g1")
    assert known[normalize_dn(ghost)] is None and known[normalize_dn(outside)] is None
    assert known[normalize_dn(ALICE[0])] == Member(USER, "alice")
    assert w.missing == {normalize_dn(ghost)}


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_walking_up_stops_at_the_nesting_level(tmp_path: Path, level: int) -> None:
    """A chain alice -> g1 -> g2 -> g3 -> g4: initgroups takes the direct groups and
    ``ldap_group_nesting_level`` levels of parents above them, and searches no level
    beyond (SSSD's ldap_group_nesting_level)."""
    p, _ = next(_backend(tmp_path, ldap_group_nesting_level=level))
    chain = [group("g1", 7001, ALICE[0])] + [
        group(f"g{i}", 7000 + i, dn_of(f"g{i - 1}")) for i in range(2, 5)
    ]
    w, searcher = walk(p, [ALICE, *chain], deref_control=True)
    mine = w.closure({}, {}, {}, [ALICE[0]])
    assert mine == keys(*(f"g{i}" for i in range(1, level + 2)))
    asked = {a for items in searcher.jobs for kind, a in items if kind == "u"}
    assert f"(member={dn_of(f'g{level + 2}')})" not in asked
    assert len([items for items in searcher.jobs if items]) == min(level + 1, 4)


def test_a_group_lookup_fetches_member_groups_to_its_budget(backend) -> None:
    """Down from a group looked up: member groups fetched with their members while
    levels are left, the one past the budget only named (a group lookup, §6.2)."""
    p, _ = backend  # nesting level 2
    entries = [ALICE, BOB, group("top", 7000, dn_of("mid"), ALICE[0]),
               group("mid", 7001, dn_of("low")), group("low", 7002, dn_of("deep"), BOB[0]),
               group("deep", 7003, ALICE[0])]  # fmt: skip
    w, _searcher = walk(p, entries, deref_control=False)
    top = w.group_entry(Entry(*entries[2]))
    assert top is not None
    found = {normalize_dn(entries[2][0]): top}
    known: Known = {}
    w.closure(found, {normalize_dn(entries[2][0]): 2}, known, [])
    assert set(found) == keys("top", "mid", "low")  # fetched with their members
    assert known[normalize_dn(dn_of("deep"))] == Member(GROUP, "deep")  # named only
    assert known[normalize_dn(BOB[0])] == Member(USER, "bob")


def test_a_cycle_of_groups_ends_the_walk(tmp_path: Path) -> None:
    """g1 and g2 list each other (a cycle no server forbids): the walk visits each
    once and ends, each group found once, well within a nesting level that would
    allow going round the cycle several times."""
    p, _ = next(_backend(tmp_path, ldap_group_nesting_level=10))
    entries = [ALICE, group("g1", 7001, ALICE[0], dn_of("g2")), group("g2", 7002, dn_of("g1"))]
    w, searcher = walk(p, entries, deref_control=True)
    found: dict[str, GroupEntry] = {}
    assert w.closure(found, {}, {}, [ALICE[0]]) == keys("g1", "g2") == set(found)
    ups = [a for items in searcher.jobs for kind, a in items if kind == "u"]
    assert len(ups) == len(set(ups)) == 3  # alice, g1, g2: each DN walked up from once


def test_each_request_has_a_walk_of_its_own(backend) -> None:
    """What one request learned (member values keyed, deref results seen, members
    missing) is a field of its walk: the next request's walk starts empty, nothing
    reset by hand."""
    p, _ = backend
    entries = [ALICE, group("g1", 7001, ALICE[0], f"uid=ghost,{PEOPLE}")]
    first, _searcher = walk(p, entries, deref_control=True)
    first.closure({}, {}, {}, [ALICE[0]])
    assert first.keys.memo and first.deref_seen and first.missing
    second = p._walk(0.0)
    assert not (second.keys.memo or second.deref_seen or second.missing or second.swept)
