"""Exact answers on awkward directory shapes (§9.5), against a real slapd serving a
small hand-written LDIF: names from entries whatever the member DN spelling, members
outside the bases or dangling dropped (the group still complete), SSSD's search-base
syntax, size limits split or refused, non-POSIX groups walked through, multi-valued
names, aliases never followed, and the same answer whatever was looked up before."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cached.cache import State
from cached.config import ConfigError, SearchBase, parse_search_bases
from cached.counters import VALIDATE, VALIDATE_ABOVE, VALIDATE_FETCHED
from cached.dn import in_scope, normalize_dn
from cached.ldap.exchange import Search
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_config, make_domain, stored_gids, stored_members
from testing.slapd import Slapd

BASE = "dc=zoo,dc=test"


def _user(rdn: str, uid: str, n: int, extra: str = "") -> str:
    return (
        f"dn: {rdn},ou=people,{BASE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        f"cn: {uid} full\nsn: x\nuid: {uid}\n{extra}uidNumber: {n}\ngidNumber: 5000\n"
        f"homeDirectory: /home/{uid}\n\n"
    )


def _group(cn: str, gid: int | None, members: list[str], ou: str = "groups") -> str:
    ocs = "objectClass: groupOfNames\n" + (
        f"objectClass: posixGroup\ngidNumber: {gid}\n" if gid is not None else ""
    )
    return (
        f"dn: cn={cn},ou={ou},{BASE}\n{ocs}cn: {cn}\n"
        + "".join(f"member: {m}\n" for m in members)
        + "\n"
    )


P = f"ou=people,{BASE}"


def _ou(ou: str) -> str:
    return f"dn: ou={ou},{BASE}\nobjectClass: organizationalUnit\nou: {ou}\n\n"


LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: zoo\no: zoo\n\n"
    + "".join(_ou(ou) for ou in ("people", "groups", "contractors", "other"))
    + _user("uid=alice", "alice", 6001)
    + _user("cn=Bob Builder", "bob", 6002)  # cn-named person (AD style)
    + _user("uid=m\\c3\\bcller", "müller", 6003)
    + _user("cn=Smith\\, John", "jsmith", 6004)
    + _user("uid=mvx+cn=Max V", "mvx", 6005, "uid: maxv\n")  # multi-valued RDN and uid
    + _user("uid=noids", "noids", 6006)
    .replace("uidNumber: 6006\n", "")
    .replace("objectClass: posixAccount\n", "")
    .replace("gidNumber: 5000\n", "")
    .replace("homeDirectory: /home/noids\n", "")
    + f"dn: uid=carl,ou=contractors,{BASE}\nobjectClass: inetOrgPerson\n"
    f"objectClass: posixAccount\ncn: carl\nsn: c\nuid: carl\nuidNumber: 6007\n"
    f"gidNumber: 5000\nhomeDirectory: /home/carl\n\n"
    + f"dn: cn=printer,ou=other,{BASE}\nobjectClass: device\ncn: printer\n\n"
    # An alias inside the user base pointing outside it (item 10).
    + f"dn: uid=carlalias,{P}\nobjectClass: alias\nobjectClass: extensibleObject\n"
    f"uid: carlalias\naliasedObjectName: uid=carl,ou=contractors,{BASE}\n\n"
    + _group("users", 5000, [f"uid=alice,{P}"])
    # Every spelling of the same members, a dangling one, an out-of-base one, a
    # device, a user without ids.
    + _group(
        "spell",
        7001,
        [
            "UID=Alice,OU=People,DC=zoo,DC=test",
            f"cn=bob builder,{P}",
            f"uid=MÜLLER,{P}",
            f'cn="Smith, John",{P}',
            f"CN=Max V+UID=MVX,{P}",
            f"uid=ghost,{P}",
            f"uid=carl,ou=contractors,{BASE}",
            f"cn=printer,ou=other,{BASE}",
            f"uid=noids,{P}",
        ],
    )
    # Bob (a cn= person) in a group, with a real group of the same cn around.
    + _group("Bob Builder", 7002, [f"uid=alice,{P}"])
    + _group("bobs", 7003, [f"cn=Bob Builder,{P}"])
    # POSIX top -> non-POSIX middle -> POSIX leaf holding bob.
    + _group("leaf", 7004, [f"cn=Bob Builder,{P}"])
    + _group("middle", None, [f"cn=leaf,ou=groups,{BASE}"])
    + _group("top", 7005, [f"cn=middle,ou=groups,{BASE}"])
    # A multi-valued cn: named by its RDN value "eng", found by "engineering" too.
    + _group("eng", 7006, [f"uid=alice,{P}"]).replace("cn: eng\n", "cn: engineering\ncn: eng\n")
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("zoo")
    (d / "zoo.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "zoo.ldif", BASE) as s:
        yield s








def backend(tmp_path: Path, s: Slapd, **opts):
    opts.setdefault("ldap_user_search_base", P)  # ou=contractors lies outside it
    cfg = make_domain([s.uri], BASE, ldap_schema="rfc2307bis", **opts)
    p, cache, _ = make_backend(tmp_path, cfg)
    return p, cache


# -- pure parts ----------------------------------------------------------------------


def test_dn_keys_agree_on_every_spelling():
    same = [
        ("UID=Alice,OU=People,DC=zoo", "uid=alice,ou=people,dc=zoo"),
        ("uid=alice , ou=people,dc=zoo", "uid=alice,ou=people,dc=zoo"),
        ("uid=M\\c3\\9cLLER,dc=zoo", "uid=müller,dc=zoo"),
        ("uid=MÜLLER,dc=zoo", "uid=müller,dc=zoo"),
        ('cn="Smith, John",dc=zoo', "cn=Smith\\, John,dc=zoo"),
        ("cn=Smith\\2c John,dc=zoo", "cn=Smith\\, John,dc=zoo"),
        ("CN=Max V+UID=MVX,dc=zoo", "uid=mvx+cn=Max V,dc=zoo"),
        ("commonName=x,dc=zoo", "cn=x,dc=zoo"),
    ]
    for a, b in same:
        assert normalize_dn(a) == normalize_dn(b), (a, b)
    assert normalize_dn("cn=a\\,b,dc=zoo") != normalize_dn("cn=a,cn=b,dc=zoo")
    assert normalize_dn("uid=mvx+cn=a,dc=zoo") != normalize_dn("uid=mvx+cn=b,dc=zoo")


def test_scopes():
    b = normalize_dn("ou=people,dc=zoo")
    assert in_scope(normalize_dn("uid=a,ou=people,dc=zoo"), b, "one")
    assert not in_scope(normalize_dn("uid=a,ou=x,ou=people,dc=zoo"), b, "one")
    assert in_scope(normalize_dn("uid=a,ou=x,ou=people,dc=zoo"), b, "sub")
    assert not in_scope(normalize_dn("uid=a,ou=people,dc=zoo"), b, "base")


def test_search_base_syntax_as_sssd():
    assert parse_search_bases("dc=x") == (SearchBase("dc=x"),)
    assert parse_search_bases("ou=a,dc=x?subtree?(f=1)?ou=b,dc=x?onelevel?") == (
        SearchBase("ou=a,dc=x", "sub", "(f=1)"),
        SearchBase("ou=b,dc=x", "one", ""),
    )
    assert parse_search_bases("dc=x?base?f=2") == (SearchBase("dc=x", "base", "(f=2)"),)
    for bad, why in (
        ("dc=x?subtree", "multiple of 3"),
        ("dc=x?deep?", "unknown scope"),
        ("dc=x?sub?(a=1", "unbalanced"),
        ("?sub?", "not a DN"),
    ):
        with pytest.raises(ConfigError) as e:
            make_config(["ldap://127.0.0.1:1"], "dc=x", ldap_user_search_base=bad)
        assert "ldap_user_search_base" in str(e.value) and why in str(e.value)


def test_rdn_shortcut_is_deprecated_and_ignored():
    cfg = make_config(["ldap://127.0.0.1:1"], "dc=x", ldap_member_rdn_shortcut="true")
    assert any("ldap_member_rdn_shortcut is deprecated" in w for w in cfg.warnings)


# -- against slapd ---------------------------------------------------------------------


EXPECTED = {
    "spell": {"alice", "bob", "müller", "jsmith", "mvx"},
    "Bob Builder": {"alice"},
    "bobs": {"bob"},
    "leaf": {"bob"},
    "top": set(),  # "middle" is no posixGroup: not a group of this configuration
}


@pytest.mark.parametrize("sweep", ["looked-up", "swept", "groups-swept"])
@pytest.mark.parametrize("order", ["groups-first", "users-first"])
def test_members_named_by_their_entries_in_any_order(tmp_path, zoo, order, sweep):
    p, cache = backend(tmp_path, zoo)
    _sweep_all(p, sweep)
    if order == "users-first":
        for u in ("alice", "bob", "jsmith", "mvx", "carl"):
            p.user_by_name(u)
        assert p.initgroups("bob").outcome is Outcome.FOUND
    for g, want in EXPECTED.items():
        assert p.group_by_name(g).outcome is Outcome.FOUND
        assert stored_members(cache, g) == want, g
        # Unresolvable members do not make the group incomplete (stored expired).
        assert cache.group_by_name(g).state is State.VALID, g
    assert p.group_by_name("middle").outcome is Outcome.NOT_FOUND  # non-POSIX


def _sweep_all(p: Any, sweep: str) -> None:
    """``swept``: members named by one sweep of the user base; ``groups-swept``: the
    walk up's parents found among the groups of one group sweep too (a user in
    hundreds of groups in a real directory): the same rules, the same answers."""
    if sweep != "looked-up":
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    if sweep == "groups-swept":
        p.sweeps.tunables = replace(p.sweeps.tunables, groups_min=1, groups_factor=100)


@pytest.mark.parametrize("sweep", ["looked-up", "swept", "groups-swept"])
def test_initgroups_through_a_non_posix_group(tmp_path, zoo, sweep):
    p, cache = backend(tmp_path / "posix", zoo)
    _sweep_all(p, sweep)
    assert p.initgroups("bob").outcome is Outcome.FOUND
    assert stored_gids(cache, "bob") == {5000, 7001, 7003, 7004}
    # Groups are groupOfNames: "middle", without a gidNumber, is walked through (as
    # SSSD) and never answered; "top" is reached at level 2.
    p, cache = backend(tmp_path / "gon", zoo, ldap_group_object_class="groupOfNames")
    _sweep_all(p, sweep)
    assert p.initgroups("bob").outcome is Outcome.FOUND
    assert stored_gids(cache, "bob") == {5000, 7001, 7003, 7004, 7005}
    assert p.group_by_name("top").outcome is Outcome.FOUND
    assert stored_members(cache, "top") == {"bob"}
    assert p.group_by_name("middle").outcome is Outcome.NOT_FOUND


def test_a_refresh_through_a_non_posix_group_from_the_stamp_sweep(tmp_path, zoo):
    """groupOfNames: "middle" (no gidNumber) is walked through; after ``-E`` the
    levels above bob's first come from the stamp sweep's record, "top" among them
    (reached through "middle"), as the cold walk found them."""
    p, cache = backend(tmp_path, zoo, ldap_group_object_class="groupOfNames")
    _sweep_all(p, "groups-swept")
    assert p.initgroups("bob").outcome is Outcome.FOUND
    cache.invalidate_all()
    assert p.user_by_name("bob").outcome is Outcome.FOUND
    assert p.initgroups("bob").outcome is Outcome.FOUND
    assert p.counters.get(VALIDATE_ABOVE).count == 1
    assert stored_gids(cache, "bob") == {5000, 7001, 7003, 7004, 7005}
    assert cache.initgroups("bob").state is State.VALID


def test_multi_valued_names_answer_under_the_rdn_value(tmp_path, zoo):
    p, cache = backend(tmp_path, zoo)
    assert p.user_by_name("maxv").outcome is Outcome.FOUND  # the other uid value
    assert cache.user_by_name("maxv").value.name == "mvx"
    assert cache.user_by_name("mvx").value.name == "mvx"
    assert p.group_by_name("engineering").outcome is Outcome.FOUND
    for name in ("engineering", "eng"):
        got = cache.group_by_name(name).value
        assert got is not None and got.name == "eng", name


def test_initgroups_by_another_name_value(tmp_path, zoo):
    # SSSD answers initgroups under any value of a multi-valued uid (its nameAlias);
    # the groups are stored under the RDN value and read back by either name.
    p, cache = backend(tmp_path, zoo)
    assert p.initgroups("maxv").outcome is Outcome.FOUND
    assert stored_gids(cache, "maxv") == stored_gids(cache, "mvx")
    assert cache.initgroups("maxv").value.user.name == "mvx"
    assert cache.initgroups("maxv").state is State.VALID


def test_search_base_with_filter_and_scope(tmp_path, zoo):
    p, cache = backend(
        tmp_path, zoo,
        ldap_user_search_base=f"{P}?onelevel?(!(uid=alice))",
        ldap_group_search_base=f"ou=groups,{BASE}?subtree?",
    )  # fmt: skip
    assert p.user_by_name("bob").outcome is Outcome.FOUND
    assert p.user_by_name("alice").outcome is Outcome.NOT_FOUND
    assert p.group_by_name("spell").outcome is Outcome.FOUND
    assert stored_members(cache, "spell") == EXPECTED["spell"] - {"alice"}


def _limited(tmp_path: Path, limit: int) -> Slapd:
    users = "".join(_user(f"uid=u{i}", f"u{i}", 8000 + i) for i in range(30))
    ldif = (
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: zoo\no: zoo\n\n"
        + "".join(_ou(ou) for ou in ("people", "groups"))
        + users
        + _group("big", 9000, [f"uid=u{i},{P}" for i in range(30)])
        + "".join(_group(f"g{i}", 9001 + i, [f"uid=u0,{P}"]) for i in range(12))
        # Names no prefix can tell apart past "x": a part that cannot be split.
        + "".join(_group(f"x-{i}", 9101 + i, [f"uid=u1,{P}"]) for i in range(12))
    )
    (tmp_path / "l.ldif").write_text(ldif)
    return Slapd(tmp_path / "s", tmp_path / "l.ldif", BASE, sizelimit=limit, deref=False)


def test_size_limit_is_split_or_refused(tmp_path):
    with _limited(tmp_path, 10) as s:
        p, cache = backend(tmp_path / "db", s)
        # 30 member look-ups in one batch: cut at 10, split, exact.
        assert p.group_by_name("big").outcome is Outcome.FOUND
        assert stored_members(cache, "big") == {f"u{i}" for i in range(30)}
        # u0 is in 13 groups: its direct-groups search, one assertion, is split by
        # group name prefix (g0..g11 and big), exact.
        assert p.initgroups("u0").outcome is Outcome.FOUND
        assert stored_gids(cache, "u0") == {5000, 9000} | {9001 + i for i in range(12)}
        # u1's 12 groups x-0..x-11 share the prefix "x-": the part cannot be split,
        # the request fails loudly and nothing is stored as complete.
        r = p.initgroups("u1")
        assert r.outcome is Outcome.ERROR
        assert "size limit" in r.message and "limits" in r.message
        got = cache.initgroups("u1")
        assert got.value is None or got.state is not State.VALID
        assert p.limit_error.startswith("initgroups u1: ")
        # Another lookup leaves the error shown; the same lookup succeeding clears it
        # (here the directory shrank below the limit: u1 keeps 8 groups).
        assert p.initgroups("u0").outcome is Outcome.FOUND and p.limit_error
        s.ldap_modify("".join(f"dn: cn=x-{i},ou=groups,{BASE}\nchangetype: delete\n\n"
                              for i in range(5)))  # fmt: skip
        assert p.initgroups("u1").outcome is Outcome.FOUND
        assert stored_gids(cache, "u1") == {5000, 9000} | {9101 + i for i in range(5, 12)}
        assert p.limit_error == ""


def test_a_group_left_is_stored_complete(tmp_path):
    # initgroups re-reads a group the user was in and is no longer (§7): its members
    # are named like any fetched group's, so it is stored valid and exact, not
    # expired with the members it had no name for yet.
    ldif = (
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: zoo\no: zoo\n\n"
        + "".join(_ou(ou) for ou in ("people", "groups"))
        + _user("uid=u0", "u0", 8000)
        + "".join(_user(f"cn=Person {i}", f"p{i}", 8001 + i) for i in range(3))
        + _group("team", 9000, [f"uid=u0,{P}"] + [f"cn=Person {i},{P}" for i in range(3)])
        + _group("stay", 9001, [f"uid=u0,{P}"])
    )
    (tmp_path / "l.ldif").write_text(ldif)
    with Slapd(tmp_path / "s", tmp_path / "l.ldif", BASE) as s:
        # entryCSN tells a change in the same second as the first fetch apart.
        p, cache = backend(tmp_path / "db", s, ldap_group_entry_usn="entryCSN")
        assert p.initgroups("u0").outcome is Outcome.FOUND
        assert stored_gids(cache, "u0") == {5000, 9000, 9001}
        s.ldap_modify(
            f"dn: cn=team,ou=groups,{BASE}\nchangetype: modify\n"
            f"delete: member\nmember: uid=u0,{P}\n\n"
        )
        assert p.initgroups("u0").outcome is Outcome.FOUND
        assert stored_gids(cache, "u0") == {5000, 9001}
        team = cache.group_by_name("team")
        assert team.state is State.VALID
        assert stored_members(cache, "team") == {"p0", "p1", "p2"}


def test_refresh_by_stamps_under_a_size_limit(tmp_path):
    # After `cached cache -E` the refresh asks for stamps only (refresh.py), with the
    # same batches the cold walk uses: the server's limit splits them the same way,
    # and a group changed in the same second as the fetch is the one fetched again.
    with _limited(tmp_path, 10) as s:
        p, cache = backend(tmp_path / "db", s)
        assert p.initgroups("u0").outcome is Outcome.FOUND
        s.ldap_modify(
            f"dn: cn=g3,ou=groups,{BASE}\nchangetype: modify\nadd: member\nmember: uid=u5,{P}\n\n"
        )
        before = p.counters.get(VALIDATE_FETCHED).amount
        cache.invalidate_all()
        assert p.user_by_name("u0").outcome is Outcome.FOUND
        assert p.initgroups("u0").outcome is Outcome.FOUND
        assert p.counters.get(VALIDATE_FETCHED).amount - before == 1
        assert stored_gids(cache, "u0") == {5000, 9000} | {9001 + i for i in range(12)}
        assert stored_members(cache, "g3") == {"u0", "u5"}
        assert cache.initgroups("u0").state is State.VALID


@pytest.mark.parametrize("sweep", ["looked-up", "groups-swept"])
def test_refresh_by_stamps_keeps_names_from_entries(tmp_path, zoo, sweep):
    # The zoo's cn-named, escaped and other-case member spellings: what a refresh after
    # `-E` stores equals the cold answer, every group valid. ``groups-swept``: the
    # levels above the first from the stamp sweep's record (cached/ldap/above.py).
    p, cache = backend(tmp_path, zoo)
    _sweep_all(p, sweep)
    for user in ("bob", "jsmith", "mvx"):
        assert p.initgroups(user).outcome is Outcome.FOUND
    cold = {u: stored_gids(cache, u) for u in ("bob", "jsmith", "mvx")}
    spell = stored_members(cache, "spell")
    cache.invalidate_all()
    for user in ("bob", "jsmith", "mvx"):
        assert p.user_by_name(user).outcome is Outcome.FOUND
        assert p.initgroups(user).outcome is Outcome.FOUND
        assert stored_gids(cache, user) == cold[user]
    assert p.counters.get(VALIDATE).amount > 0
    assert stored_members(cache, "spell") == spell == EXPECTED["spell"]
    assert cache.group_by_name("spell").state is State.VALID
    assert (p.counters.get(VALIDATE_ABOVE).count > 0) is (sweep == "groups-swept")
    # A group lookup after `-E` is validated by stamps too, its answer unchanged.
    cache.invalidate_all()
    validated = p.counters.get(VALIDATE).amount
    assert p.group_by_name("spell").outcome is Outcome.FOUND
    assert p.counters.get(VALIDATE).amount > validated
    assert stored_members(cache, "spell") == EXPECTED["spell"]
    assert cache.group_by_name("spell").state is State.VALID


def test_status_shows_a_lookup_cut_by_the_size_limit(tmp_path):
    from testing.daemon import CachedDaemon

    with (
        _limited(tmp_path, 10) as s,
        CachedDaemon(tmp_path / "d", [s.uri], BASE, ldap_schema="rfc2307bis") as d,
    ):
        r = d.run_nss(["id", "u1"], env={"SSS_NSS_USE_MEMCACHE": "NO"})
        st = d.cli("status").stdout
        assert "LOOKUP CUT BY A SERVER LIMIT" in st, st
        assert "initgroups u1" in st and "size=unlimited" in st
        # id still answers the user (passwd), without the groups a cut search lost.
        assert "uid=8001(u1)" in r.stdout
        assert "size limit" in d.log_text()


def test_aliases_are_never_followed(tmp_path, zoo):
    # With alias dereferencing in searching, a search under ou=people would find carl
    # through uid=carlalias; SSSD never dereferences (ldap_deref unset).
    p, _cache = backend(tmp_path, zoo)
    assert p.user_by_name("carl").outcome is Outcome.NOT_FOUND
    assert p.user_by_name("carlalias").outcome is Outcome.NOT_FOUND
    assert p.user_by_name("alice").outcome is Outcome.FOUND


@pytest.mark.parametrize("bases", ["shared", "apart"])
def test_members_a_sweep_does_not_name_are_looked_up(tmp_path, bases):
    """The sweep names the users of the user bases only; the other members of the
    groups it was sent for — a member group, in the user base when users and groups
    share one, a person that is no POSIX user, a dangling DN — wait for its answer
    and are looked up in the next round, as without a sweep: the member group is
    expanded and the others dropped, so the group's members are exact. (Apart, the
    member group lies outside the user bases and is looked up with the sweep.)"""
    users = "".join(_user(f"uid=u{i}", f"u{i}", 8000 + i) for i in range(15))
    ou = "people" if bases == "shared" else "groups"
    odd = [f"cn=child,ou={ou},{BASE}", f"cn=Not Posix,{P}", f"uid=gone,{P}"]
    ldif = (
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: zoo\no: zoo\n\n"
        + "".join(_ou(o) for o in ("people", "groups"))
        + users
        + f"dn: cn=Not Posix,{P}\nobjectClass: inetOrgPerson\ncn: Not Posix\nsn: x\n\n"
        + _group("child", 9001, [f"uid=u{i},{P}" for i in range(10, 15)], ou=ou)
        + _group("team", 9000, [f"uid=u{i},{P}" for i in range(10)] + odd)
    )
    (tmp_path / "l.ldif").write_text(ldif)
    opts = {"ldap_user_search_base": BASE} if bases == "shared" else {}
    with Slapd(tmp_path / "s", tmp_path / "l.ldif", BASE, deref=False) as s:
        p, cache = backend(tmp_path / "db", s, **opts)
        # a sweep for any unknown member
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
        p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)  # never past its bound: 15 users
        offset = s.log_offset()
        assert p.initgroups("u0").outcome is Outcome.FOUND
        swept = [op for op in s.searches(offset) if op.filter == "(objectClass=posixAccount)"]
        assert len(swept) == 1 and swept[0].err == 0  # the sweep named the users
        assert stored_gids(cache, "u0") == {5000, 9000}
        assert stored_members(cache, "team") == {f"u{i}" for i in range(15)}
        assert cache.group_by_name("team").state is State.VALID


@pytest.mark.parametrize("group_sweep", [False, True], ids=["searched", "group-sweep-cut"])
def test_a_walk_cut_unpaged_goes_paged_on_that_server(tmp_path, group_sweep):
    """Past the first level the walk's searches go unpaged (they go out together);
    a server whose limit cut one (here slapd's sizelimit 10: 12 parent groups at
    level 2) still gives the exact answer by splitting, and its walks go paged from
    then on."""
    users = "".join(_user(f"uid=u{i}", f"u{i}", 8000 + i) for i in range(2))
    ldif = (
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: zoo\no: zoo\n\n"
        + "".join(_ou(o) for o in ("people", "groups"))
        + users
        + _group("g", 9000, [f"uid=u0,{P}", f"uid=u1,{P}"])
        + "".join(_group(f"p{i}", 9100 + i, [f"cn=g,ou=groups,{BASE}"]) for i in range(12))
    )
    (tmp_path / "l.ldif").write_text(ldif)
    want = {5000, 9000} | {9100 + i for i in range(12)}
    with Slapd(tmp_path / "s", tmp_path / "l.ldif", BASE, sizelimit=10, deref=False) as s:
        p, cache = backend(tmp_path / "db", s)
        if group_sweep:
            # A group sweep for the one group of the first level, its bound past the
            # 12 parents: the server's limit cuts it (10), the walk searches as
            # without it, and no group sweep is tried again on this domain.
            p.sweeps.tunables = replace(p.sweeps.tunables, groups_min=1, groups_factor=100)
        sent: list[Search] = []
        real = p.client.search_many

        def spy(specs: list[Search], *args: Any, **kw: Any) -> Any:
            sent.extend(specs)
            return real(specs, *args, **kw)

        p.client.search_many = spy
        for name in ("u0", "u1"):
            sent.clear()
            assert p.initgroups(name).outcome is Outcome.FOUND
            assert stored_gids(cache, name) == want, name
            level2 = [sp for sp in sent if f"member=cn=g,ou=groups,{BASE}" in sp.filt]
            # u0: sent unpaged, cut and split (the same filter again, halves); u1:
            # paged at once.
            assert level2 and all(sp.paged is (name == "u1") for sp in level2), level2
            group_sweeps = [sp for sp in sent if "(!(member=" in sp.filt]
            assert len(group_sweeps) == (group_sweep and name == "u0"), group_sweeps
        assert p.sweeps.groups_cut is group_sweep
