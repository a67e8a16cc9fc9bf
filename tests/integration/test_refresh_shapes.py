"""The refresh (validation by stamps, cached/ldap/refresh.py) on small hand-made
directories, each against a cold lookup on an empty cache after the same changes: the
bugs a differential fuzzer of the refresh found (2026-12-02), one test each, on a real
slapd. The rule every test checks: what a refreshed cache answers is what an empty one
fetching now answers."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ldap3
import pytest

from cached.cache import State
from cached.cache.records import split_members
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.cachetime import age, expire_all
from testing.slapd import Slapd

BASE = "dc=rs,dc=test"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"
HEAD = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: rs\no: rs\n\n"
    f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n"
    f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n\n"
)


def user(rdn: str, uid: str, number: int) -> str:
    cn = rdn.split("=", 1)[1].replace("\\,", ",") if rdn.startswith("cn=") else uid
    return (f"dn: {rdn},{PEOPLE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"cn: {cn}\nsn: x\nuid: {uid}\nuidNumber: {number}\ngidNumber: 5000\n"
            f"homeDirectory: /home/{uid}\n\n")  # fmt: skip


def group(cn: str, gid: int | None, members: list[str]) -> str:
    """A group; without a gid, a groupOfNames only: no group under the default
    ldap_group_object_class (posixGroup)."""
    posix = f"objectClass: posixGroup\ngidNumber: {gid}\n" if gid is not None else ""
    return (f"dn: cn={cn},{GROUPS}\nobjectClass: groupOfNames\n{posix}cn: {cn}\n"
            + "".join(f"member: {m}\n" for m in members) + "\n")  # fmt: skip


def u(name: str) -> str:
    return f"uid={name},{PEOPLE}"


def g(name: str) -> str:
    return f"cn={name},{GROUPS}"


class Directory:
    """A slapd of its own, providers on fresh caches, and the responder's rule: a VALID
    entry is the answer, else the backend runs and the cache is read again."""

    def __init__(self, work: Path, ldif: str, **opts: Any) -> None:
        self.work, self.opts, self.made = work, opts, 0
        (work / "d.ldif").write_text(HEAD + ldif)
        sizelimit, dynlist = opts.pop("sizelimit", None), opts.pop("dynlist", False)
        self.slapd = Slapd(work / "slapd", work / "d.ldif", BASE, sizelimit=sizelimit,
                           dynlist=dynlist)  # fmt: skip
        self.slapd.start()
        self.conn = ldap3.Connection(ldap3.Server(self.slapd.uri), self.slapd.root_dn,
                                     self.slapd.root_pw, auto_bind=True)  # fmt: skip
        self.caches: list[Any] = []

    def close(self) -> None:
        for p, cache in self.caches:
            p.client.close()
            cache.close()
        self.conn.unbind()
        self.slapd.stop()

    def provider(self) -> tuple[Any, Any]:
        self.made += 1
        db = self.work / f"db{self.made}"
        db.mkdir()
        p, cache, _ = make_backend(db, make_domain([self.slapd.uri], BASE, **self.opts))
        self.caches.append((p, cache))
        return p, cache

    def modify(self, dn: str, **changes: list[tuple[str, list[str]]]) -> None:
        assert self.conn.modify(dn, changes), self.conn.result

    def cold(self, kind: str, key: str) -> Any:
        p, cache = self.provider()
        return ask(p, cache, kind, key)


def answer(cache: Any, kind: str, key: str) -> tuple[Any, State]:
    if kind == "init":
        got = cache.initgroups(key)
        return (None if got.value is None else sorted(array("I", got.value.gids))), got.state
    got = cache.group_by_name(key) if kind == "group" else cache.group_by_gid(int(key))
    v = got.value
    return (None if v is None else (v.name, v.gid, sorted(split_members(v.members)))), got.state


def ask(p: Any, cache: Any, kind: str, key: str) -> Any:
    got, state = answer(cache, kind, key)
    if state is State.VALID and got is not None:
        return got
    lookup = {"init": p.initgroups, "group": p.group_by_name,
              "gid": lambda k: p.group_by_gid(int(k))}[kind]  # fmt: skip
    r = lookup(key)
    assert r.outcome in (Outcome.FOUND, Outcome.NOT_FOUND), r
    return answer(cache, kind, key)[0]


def invalidate(cache: Any) -> None:
    """What `cached cache -E` does to the stores."""
    cache.invalidate_users()
    cache.invalidate_groups()


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Any]:
    made: list[Directory] = []

    def make(ldif: str, **opts: Any) -> Directory:
        work = tmp_path / f"d{len(made)}"
        work.mkdir()
        made.append(Directory(work, ldif, **opts))
        return made[-1]

    yield make
    for d in made:
        d.close()


@pytest.mark.parametrize("expire", [invalidate, expire_all], ids=["-E", "expiry"])
def test_a_group_lookup_leaves_its_member_groups_to_their_own_validation(directory, expire):
    """T lists M, M lists N, N lists alice and bob (nesting level 1). The refresh of
    `getent group T` validates T and M; touching M too made M's own answer, which
    reaches N, VALID with N unchecked: alice stayed in M after she left N."""
    d = directory(user("uid=alice", "alice", 1001) + user("uid=bob", "bob", 1002)
                  + group("N", 3003, [u("alice"), u("bob")]) + group("M", 3002, [g("N")])
                  + group("T", 3001, [g("M")]), ldap_group_nesting_level=1)  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "group", "T") == ("T", 3001, [])
    assert ask(p, cache, "group", "M") == ("M", 3002, ["alice", "bob"])
    d.modify(g("N"), member=[(ldap3.MODIFY_DELETE, [u("alice")])])
    expire(cache)
    assert ask(p, cache, "group", "T") == d.cold("group", "T")
    assert ask(p, cache, "group", "M") == d.cold("group", "M") == ("M", 3002, ["bob"])


@pytest.mark.parametrize("rename", ["rg1", "G2"], ids=["new-name", "case-only"])
def test_a_group_renamed_on_the_server_is_still_found_by_gid(directory, rename):
    """The refresh stores the new name and deletes the old one in one write; the
    delete took the gid entry the new name had just written, for good."""
    d = directory(user("uid=alice", "alice", 1001) + group("g2", 3002, [u("alice")]))
    p, cache = d.provider()
    assert ask(p, cache, "init", "alice") == [3002, 5000]  # 5000: her primary gid
    assert ask(p, cache, "gid", "3002") == ("g2", 3002, ["alice"])
    assert d.conn.modify_dn(g("g2"), f"cn={rename}", delete_old_dn=True), d.conn.result
    invalidate(cache)
    assert ask(p, cache, "init", "alice") == d.cold("init", "alice") == [3002, 5000]
    assert ask(p, cache, "gid", "3002") == d.cold("gid", "3002") == (rename, 3002, ["alice"])


def test_a_user_renamed_where_the_name_is_not_in_the_dn_keeps_its_uid_entry(directory):
    d = directory(user("cn=Doe\\, John", "jdoe", 1005))
    p, cache = d.provider()
    assert p.user_by_name("jdoe").outcome is Outcome.FOUND
    d.modify(f"cn=Doe\\, John,{PEOPLE}", uid=[(ldap3.MODIFY_REPLACE, ["john"])])
    assert p.user_by_name("john").outcome is Outcome.FOUND
    assert p.user_by_name("jdoe").outcome is Outcome.NOT_FOUND  # the old name deleted
    got = cache.user_by_uid(1005)
    assert got.value is not None and got.value.name == "john"


@pytest.mark.parametrize("change", ["added", "removed"])
def test_a_refresh_past_the_servers_size_limit_is_split_as_a_cold_lookup_is(directory, change):
    """alice in 8 groups, slapd's sizelimit 5: the changed groups, or the ones she
    left, were fetched in one OR of names, unsplit; the refresh failed at every
    lookup, where a cold one succeeds."""
    names = [f"g{i}" for i in range(8)]
    d = directory(user("uid=alice", "alice", 1001) + user("uid=bob", "bob", 1002)
                  + "".join(group(n, 3000 + i, [u("alice")]) for i, n in enumerate(names)),
                  sizelimit=5, ldap_group_entry_usn="entryCSN")  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "init", "alice") == [*(3000 + i for i in range(8)), 5000]
    for n in names:
        if change == "added":
            d.modify(g(n), member=[(ldap3.MODIFY_ADD, [u("bob")])])
        else:
            d.modify(g(n), member=[(ldap3.MODIFY_REPLACE, [u("bob")])])
    invalidate(cache)
    assert p.initgroups("alice").outcome is Outcome.FOUND
    assert answer(cache, "init", "alice")[0] == d.cold("init", "alice")


def test_a_rfc2307_user_in_more_groups_than_the_size_limit_is_split(directory):
    names = [f"g{i}" for i in range(8)]
    d = directory(user("uid=alice", "alice", 1001) + "".join(
        f"dn: cn={n},{GROUPS}\nobjectClass: namedObject\nobjectClass: posixGroup\n"
        f"cn: {n}\ngidNumber: {3000 + i}\nmemberUid: alice\n\n" for i, n in enumerate(names)),
        sizelimit=5, ldap_schema="rfc2307")  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "init", "alice") == [*(3000 + i for i in range(8)), 5000]


def test_a_due_whole_read_names_members_from_their_entries(directory):
    """A member renamed where the name attribute is not in its DN moves no group's
    stamp; the read due after refresh_full_interval must see it. It named the member
    from the cached user entry, which a login just before the rename had refreshed,
    and reset the group's clock: the old name went on for another interval."""
    d = directory(user("cn=Doe\\, John", "jdoe", 1005)
                  + group("G", 3001, [f"cn=Doe\\, John,{PEOPLE}"]))  # fmt: skip
    p, cache = d.provider()
    interval = p.cfg.refresh_full_interval
    assert ask(p, cache, "group", "G") == ("G", 3001, ["jdoe"])
    age(cache, interval - 400)
    assert p.user_by_name("jdoe").outcome is Outcome.FOUND  # a login
    age(cache, 100)
    d.modify(f"cn=Doe\\, John,{PEOPLE}", uid=[(ldap3.MODIFY_REPLACE, ["john"])])
    age(cache, 400)  # G is due: read more than refresh_full_interval ago
    assert ask(p, cache, "group", "G") == d.cold("group", "G") == ("G", 3001, ["john"])


@pytest.mark.parametrize("change", ["deleted", "non-POSIX"])
def test_a_member_group_gone_is_seen_though_its_parents_stamp_did_not_move(directory, change):
    """top -> g9 -> u8 (nesting 2). g9 deleted without referential integrity, or no
    longer a POSIX group: top's entry, and so its stamp, is unchanged. After expiry
    the lookup reads top whole (validation saw g9 change) but stored it by its stamp
    alone, keeping g9 as its member group: u8 stayed in top (found by fuzzing the
    refresh)."""
    d = directory(user("uid=u8", "u8", 1008) + group("top", 104, [g("g9")])
                  + group("g9", 3009, [u("u8")]), ldap_group_nesting_level=2)  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "group", "top") == ("top", 104, ["u8"])
    if change == "deleted":
        assert d.conn.delete(g("g9")), d.conn.result
    else:
        d.modify(g("g9"), objectClass=[(ldap3.MODIFY_DELETE, ["posixGroup"])],
                 gidNumber=[(ldap3.MODIFY_DELETE, [])])  # fmt: skip
    expire_all(cache)
    assert ask(p, cache, "group", "top") == d.cold("group", "top") == ("top", 104, [])


@pytest.mark.parametrize("expire", [invalidate, expire_all], ids=["-E", "expiry"])
def test_an_entry_that_becomes_a_group_below_a_parent_is_seen_by_the_walk(directory, expire):
    """g5 -> g1 -> g2 -> u7 (nesting 2), g2 an entry of no group class until it is made
    a POSIX group: no stamp of g1 or g5 moves. The refresh of u7's groups finds g1
    above g2, which g1's stored record does not list: g1 is read whole (before, it was
    touched, and g1 and g5 answered without u7 while `id u7` listed them; found by
    fuzzing the refresh)."""
    d = directory(user("uid=u7", "u7", 1007) + group("g5", 3005, [g("g1")])
                  + group("g1", 3001, [g("g2")]) + group("g2", None, [u("u7")]),
                  ldap_group_nesting_level=2)  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "init", "u7") == [5000]
    assert ask(p, cache, "gid", "3005") == ("g5", 3005, [])
    assert ask(p, cache, "group", "g1") == ("g1", 3001, [])
    d.modify(g("g2"), objectClass=[(ldap3.MODIFY_ADD, ["posixGroup"])],
             gidNumber=[(ldap3.MODIFY_ADD, ["3002"])])  # fmt: skip
    expire(cache)
    assert ask(p, cache, "init", "u7") == d.cold("init", "u7") == [3001, 3002, 3005, 5000]
    assert ask(p, cache, "gid", "3005") == d.cold("gid", "3005") == ("g5", 3005, ["u7"])
    assert ask(p, cache, "group", "g1") == d.cold("group", "g1") == ("g1", 3001, ["u7"])
