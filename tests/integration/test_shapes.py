"""Directory shapes found by fuzzing cached's answers against a model of the nesting
rules (docs/sssd-reference.md §6.2, §6.3, §9.5) on random small directories: each
answer must be the rules' whatever was looked up before. A real slapd per shape."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest

from cached.cache.records import split_members
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.slapd import Slapd

BASE = "dc=zoo,dc=t"
P = f"ou=people,{BASE}"
G = f"ou=groups,{BASE}"
HEAD = f"""dn: dc=t
objectClass: dcObject
objectClass: organization
dc: t
o: t

dn: {BASE}
objectClass: dcObject
objectClass: organization
dc: zoo
o: zoo

dn: {P}
objectClass: organizationalUnit
ou: people

dn: {G}
objectClass: organizationalUnit
ou: groups
"""


def _user(
    uid: str, number: int, where: str = P, classes: str = "", extra: str = "", gid: int = 5000
) -> str:
    return (f"\ndn: uid={uid},{where}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"{classes}cn: {uid}\nsn: x\nuid: {uid}\nuidNumber: {number}\ngidNumber: {gid}\n"
            f"homeDirectory: /h\n{extra}")  # fmt: skip


def _group(cn: str, gid: int | None, members: list[str], posix: bool = True) -> str:
    classes = "objectClass: groupOfNames\n" + ("objectClass: posixGroup\n" if posix else "")
    number = f"gidNumber: {gid}\n" if gid is not None else ""
    values = "".join(f"member: {m}\n" for m in members)
    return f"\ndn: cn={cn},{G}\n{classes}cn: {cn}\n{number}{values}"


def _answers(tmp: Path, ldif: str, lookups: list[str], **opts: Any) -> dict[str, Any]:
    """Each lookup ("g:name", "n:gid" or "i:user") in turn on one cache, its stored
    answer (a group by gid: its name and members); or ("c:name") a group as the cache
    holds it, asking nothing."""
    (tmp / "ldif").write_text(ldif)
    out: dict[str, Any] = {}
    with Slapd(tmp / "slapd", tmp / "ldif", "dc=t") as s:
        cfg = make_domain([s.uri], BASE, ldap_schema="rfc2307bis", **opts)
        p, cache, _ = make_backend(tmp / "db", cfg)
        try:
            for lk in lookups:
                kind, name = lk.split(":", 1)
                if kind == "i":
                    assert p.initgroups(name).outcome is Outcome.FOUND
                    v = cache.initgroups(name).value
                    assert v is not None
                    out[lk] = sorted(array("I", v.gids))
                elif kind == "n":
                    assert p.group_by_gid(int(name)).outcome is Outcome.FOUND, lk
                    g = cache.group_by_gid(int(name)).value
                    assert g is not None
                    out[lk] = (g.name, sorted(split_members(g.members)))
                else:
                    if kind == "g":
                        assert p.group_by_name(name).outcome is Outcome.FOUND, lk
                    g = cache.group_by_name(name).value
                    assert g is not None
                    out[lk] = sorted(split_members(g.members))
        finally:
            p.client.close()
            cache.close()
    return out


@pytest.mark.parametrize("first", [[], ["g:a"], ["i:deep"]], ids=["cold", "after a", "after deep"])
def test_nesting_stops_at_its_level_through_a_non_posix_group_whatever_came_before(
    tmp_path, first
):
    """top -> np (non-POSIX, walked through) -> a -> b -> deep, nesting level 2: a's
    members count, b's do not. Stored, top named a as a member group, expanded one
    level below top when read: once b was stored too, top listed deep."""
    ldif = HEAD + _user("deep", 1001) + _user("mid", 1002)
    ldif += _group("b", 3003, [f"uid=deep,{P}"])
    ldif += _group("a", 3002, [f"cn=b,{G}", f"uid=mid,{P}"])
    ldif += _group("np", None, [f"cn=a,{G}"], posix=False)
    ldif += _group("top", 3000, [f"cn=np,{G}"])
    got = _answers(tmp_path, ldif, [*first, "g:top"], ldap_group_nesting_level=2,
                   ldap_group_object_class="groupOfNames")  # fmt: skip
    assert got["g:top"] == ["mid"]


@pytest.mark.parametrize("first", [[], ["i:u"]], ids=["cold", "after initgroups"])
def test_users_below_a_walked_group_count_at_their_depth_from_each_parent(tmp_path, first):
    """P -> Q -> N (non-POSIX) -> x, nesting level 1: x is two levels below P. Q's
    record lists x (one level below Q, through N); once an initgroups had stored P and
    Q together, P's answer, expanded from Q's record, listed x too (found by fuzzing
    the cold path: the answer depended on what was looked up before)."""
    ldif = HEAD + _user("u", 1001) + _user("x", 1002)
    ldif += _group("N", None, [f"uid=x,{P}"], posix=False)
    ldif += _group("Q", 4002, [f"uid=u,{P}", f"cn=N,{G}"])
    ldif += _group("P", 4001, [f"cn=Q,{G}"])
    lookups = [*first, "c:P" if first else "g:P", "g:Q"]
    got = _answers(tmp_path, ldif, lookups, ldap_group_nesting_level=1,
                   ldap_group_object_class="groupOfNames")  # fmt: skip
    assert got[lookups[-2]] == ["u"]
    assert got["g:Q"] == ["u", "x"]


def test_getgrgid_answers_the_group_it_looked_up_whole(tmp_path):
    """A and B share gid 7000 (a directory's error) and B is A's member group: the
    lookup by gid fetched A and its closure, B stored below its level, incomplete,
    took the gid index last, and getgrgid answered B without C's member (found by
    fuzzing the cold path). Which of the two a gid names may depend on the order,
    as in SSSD; the answer must be whole."""
    ldif = HEAD + _user("v", 1001) + _user("w", 1002)
    ldif += _group("A", 7000, [f"cn=B,{G}"])  # first: slapd returns entries in this order
    ldif += _group("B", 7000, [f"uid=w,{P}", f"cn=C,{G}"])
    ldif += _group("C", 7002, [f"uid=v,{P}"])
    got = _answers(tmp_path, ldif, ["n:7000", "g:A", "g:B"], ldap_group_nesting_level=1,
                   ldap_deref_threshold=0)  # fmt: skip
    name, members = got["n:7000"]
    assert members == got[f"g:{name}"], got


def test_initgroups_never_climbs_through_an_entry_that_is_no_group(tmp_path):
    """Users and groups under one base: ux, a user with member values but not of the
    group class, came back with the walk's searches and was climbed through as a
    group, so alice got top's gid though top lists only ux."""
    ldif = HEAD + _user("alice", 1001)
    ldif += _user("ux", 1002, classes="objectClass: extensibleObject\n",
                  extra=f"member: cn=leaf,{G}\n")  # fmt: skip
    ldif += _group("leaf", 3001, [f"uid=alice,{P}"])
    ldif += _group("other", 3002, [f"uid=alice,{P}", f"uid=ux,{P}"])
    ldif += _group("top", 3000, [f"uid=ux,{P}"])
    got = _answers(tmp_path, ldif, ["i:alice", "g:top"])
    assert got["i:alice"] == [3001, 3002, 5000]
    assert got["g:top"] == ["ux"]


def test_an_entry_of_both_classes_under_the_group_bases_only_is_the_group(tmp_path):
    """svc is a posixAccount and a posixGroup under the group base, outside the user
    base: as a member of top it is the group (SSSD looks a DN up as a user only
    under the user bases), not dropped as a user outside them."""
    ldif = HEAD + _user("alice", 1001)
    ldif += _user("svc", 1500, where=G, gid=3500,
                  classes="objectClass: posixGroup\nobjectClass: extensibleObject\n",
                  extra=f"member: uid=alice,{P}\n")  # fmt: skip
    ldif += _group("top", 3000, [f"uid=svc,{G}"])
    got = _answers(tmp_path, ldif, ["g:top", "i:alice"],
                   ldap_user_search_base=P, ldap_group_search_base=G)  # fmt: skip
    assert got["g:top"] == ["alice"]
    assert got["i:alice"] == [3000, 3500, 5000]


def test_the_deref_control_names_an_entry_of_both_classes_as_the_group_too(tmp_path):
    """The same rule where the walk's deref control names the members (alice's g0 is
    in g1, which lists svc): the deref naming still took svc for a user outside the
    user bases, so g1's answer depended on the server's deref overlay."""
    ldif = HEAD + _user("alice", 1001) + _user("bob", 1002)
    ldif += _user("svc", 1500, where=G, gid=3500,
                  classes="objectClass: posixGroup\nobjectClass: extensibleObject\n",
                  extra=f"member: uid=bob,{P}\n")  # fmt: skip
    ldif += _group("g0", 3000, [f"uid=alice,{P}"])
    ldif += _group("g1", 3001, [f"cn=g0,{G}", f"uid=svc,{G}"])
    got = _answers(tmp_path, ldif, ["i:alice", "c:g1"],
                   ldap_user_search_base=P, ldap_group_search_base=G)  # fmt: skip
    assert got["c:g1"] == ["alice", "bob"]  # as the walk up stored it


@pytest.mark.parametrize("case", ["false", "preserving"])
@pytest.mark.parametrize(
    "order", [["u:Fay", "i:Fay"], ["i:Fay"], ["u:fay", "i:FAY"], ["i:fay", "u:Fay", "i:Fay"]]
)
def test_two_users_differing_only_in_case_answer_as_one_user_whole(tmp_path, case, order):
    """fay and Fay in a domain that folds case (a directory's error there): the name
    lookup stored every entry, the last taking the name, where initgroups took the
    first, so a login got one user's uid with the other's groups (found by a
    differential fuzz against SSSD 2.8.2, which answers the first). One user now, in
    every order: its uid and its own groups."""
    more = f"ou=more,{P}"
    ldif = HEAD + f"\ndn: {more}\nobjectClass: organizationalUnit\nou: more\n"
    ldif += _user("fay", 1001, gid=2001) + _user("Fay", 1002, where=more, gid=2002)
    ldif += _group("g1", 2001, [f"uid=fay,{P}"]) + _group("g2", 2002, [f"uid=Fay,{more}"])
    ldif += _group("g3", 2003, [f"uid=fay,{P}"]) + _group("g4", 2004, [f"uid=Fay,{more}"])
    own = {1001: [2001, 2003], 1002: [2002, 2004]}
    (tmp_path / "ldif").write_text(ldif)
    with Slapd(tmp_path / "slapd", tmp_path / "ldif", "dc=t") as s:
        cfg = make_domain([s.uri], BASE, ldap_schema="rfc2307bis", case_sensitive=case)
        p, cache, _ = make_backend(tmp_path / "db", cfg)
        try:
            for lk in order:
                kind, name = lk.split(":", 1)
                op = p.initgroups if kind == "i" else p.user_by_name
                assert op(name).outcome is Outcome.FOUND, lk
                user = cache.user_by_name(name).value
                assert user is not None and cache.user_by_name(name.swapcase()).value == user
                if kind == "i":
                    ig = cache.initgroups(name).value
                    assert ig is not None and ig.user == user
                    assert sorted(array("I", ig.gids)) == own[user.uid], (lk, user)
        finally:
            p.client.close()
            cache.close()
