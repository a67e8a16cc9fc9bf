"""The generated directories, served by a real slapd, are what their answer files say.

Every answer here is computed from LDAP data with code of its own (walking up with
membership searches on the server, walking down over a dump of the groups), never with
testing.gendir's graph, and then compared with the expected-answers file.  Also tests the
slapd fixture itself: search counting, restart, pause, ldapmodify, ldapi and ldaps.
"""

from __future__ import annotations

import dataclasses
import filecmp
import socket
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ldap3
import pytest
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars

from cached.model import User
from testing.gendir import (
    BIGROUPUSER,
    BIGROUPUSER_CN,
    LARGEST_GROUP,
    SCALE_FULL,
    SCALE_FULL_USERS,
    SMALL,
    SMALL_CN,
    SWEEP_LARGE_SIZES,
    SWEEP_USER_GROUPS,
    Expected,
    Scenario,
    generate,
    main,
    scale,
    sweep,
)
from testing.slapd import DEREF_CONTROL, PAGED_RESULTS_CONTROL, LiveDirectory, Slapd, SlapdError

PAGE = 1000
# Members per OR filter when walking up a level: keeps filters far below slapd's
# default 256 KiB request limit (sockbuf_max_incoming_auth) even with long DNs.
OR_CHUNK = 200


# --------------------------------------------------------------------------------------
# Reading the server
# --------------------------------------------------------------------------------------


def search_all(
    conn: ldap3.Connection, base: str, filt: str, attrs: list[str]
) -> list[dict[str, Any]]:
    """Every entry, with the paged-results control (RFC 2696)."""
    entries: list[dict[str, Any]] = []
    cookie: bytes | None = None
    while True:
        conn.search(base, filt, attributes=attrs, paged_size=PAGE, paged_cookie=cookie)
        entries.extend(e for e in conn.response if e["type"] == "searchResEntry")
        cookie = conn.result["controls"][PAGED_RESULTS_CONTROL]["value"]["cookie"]
        if not cookie:
            return entries


def one(attrs: dict[str, Any], name: str) -> str:
    values = attrs[name]
    assert len(values) == 1, (name, values)
    return str(values[0])


def ldap_user(entry: dict[str, Any]) -> User:
    a = entry["attributes"]
    return User(
        name=one(a, "uid"),
        uid=int(one(a, "uidNumber")),
        gid=int(one(a, "gidNumber")),
        gecos=one(a, "gecos"),
        home=one(a, "homeDirectory"),
        shell=one(a, "loginShell"),
        dn=entry["dn"],
    )


USER_ATTRS = ["uid", "uidNumber", "gidNumber", "gecos", "homeDirectory", "loginShell"]
GROUP_ATTRS = ["cn", "gidNumber", "member", "memberUid"]


def ldap_users(conn: ldap3.Connection, base: str) -> dict[str, User]:
    entries = search_all(conn, f"ou=people,{base}", "(objectClass=posixAccount)", USER_ATTRS)
    users = {u.name: u for u in map(ldap_user, entries)}
    assert len(users) == len(entries), "duplicate uid"
    return users


def ldap_groups(conn: ldap3.Connection, base: str) -> dict[str, dict[str, Any]]:
    entries = search_all(conn, f"ou=groups,{base}", "(objectClass=posixGroup)", GROUP_ATTRS)
    return {one(e["attributes"], "cn"): e for e in entries}


def walk_up(conn: ldap3.Connection, live: LiveDirectory, user: str, depth: int) -> list[set[int]]:
    """The user's gids at levels 0..depth, asking the server level by level which
    groups have a member among the last level's new groups (SSSD's rfc2307bis
    initgroups, reference §6.3); rfc2307: one memberUid search, no nesting."""
    base = live.base_dn
    conn.search(
        f"ou=people,{base}",
        f"(&(objectClass=posixAccount)(uid={escape_filter_chars(user)}))",
        attributes=["gidNumber"],
    )
    (entry,) = [e for e in conn.response if e["type"] == "searchResEntry"]
    primary = int(one(entry["attributes"], "gidNumber"))

    def groups_where(filters: Iterable[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        flist = list(filters)
        for i in range(0, len(flist), OR_CHUNK):
            chunk = "".join(flist[i : i + OR_CHUNK])
            filt = f"(&(objectClass=posixGroup)(|{chunk}))"
            for e in search_all(conn, f"ou=groups,{base}", filt, ["gidNumber"]):
                found[e["dn"].lower()] = int(one(e["attributes"], "gidNumber"))
        return found

    if live.expected.schema == "rfc2307":
        direct = groups_where([f"(memberUid={escape_filter_chars(user)})"])
        return [{primary, *direct.values()}] * (depth + 1)

    seen: dict[str, int] = {}
    frontier = [entry["dn"]]
    levels = []
    for _level in range(depth + 1):
        found = groups_where(f"(member={escape_filter_chars(dn)})" for dn in frontier)
        frontier = [dn for dn in found if dn not in seen]
        seen.update(found)
        levels.append({primary, *seen.values()})
    return levels


def walk_down(
    groups: dict[str, dict[str, Any]], users: dict[str, User], schema: str, depth: int
) -> dict[str, list[set[str]]]:
    """Every group's member user names at levels 0..depth, from a dump of the groups:
    breadth-first over member groups, one hop per level."""
    user_by_dn = {u.dn.lower(): u.name for u in users.values()}
    group_by_dn = {e["dn"].lower(): name for name, e in groups.items()}
    direct_users: dict[str, set[str]] = {}
    direct_groups: dict[str, set[str]] = {}
    for name, e in groups.items():
        a = e["attributes"]
        if schema == "rfc2307":
            direct_users[name] = set(a.get("memberUid", []))
            direct_groups[name] = set()
            assert not a.get("member"), name
            continue
        dns = [dn.lower() for dn in a.get("member", [])]
        unknown = [dn for dn in dns if dn not in user_by_dn and dn not in group_by_dn]
        assert not unknown, (name, unknown)
        direct_users[name] = {user_by_dn[dn] for dn in dns if dn in user_by_dn}
        direct_groups[name] = {group_by_dn[dn] for dn in dns if dn in group_by_dn}
        assert not a.get("memberUid"), name

    result: dict[str, list[set[str]]] = {}
    for name in groups:
        members = set(direct_users[name])
        visited = {name}
        frontier = {name}
        levels = [set(members)]
        for _level in range(depth):
            frontier = {c for g in frontier for c in direct_groups[g]} - visited
            visited |= frontier
            for g in frontier:
                members |= direct_users[g]
            levels.append(set(members))
        result[name] = levels
    return result


def group_member_names(entry: dict[str, Any], users: dict[str, User]) -> set[str]:
    """Member names of a group entry: memberUid values, or the `uid` of the user entries
    its member DNs name (people may be named uid= or cn=)."""
    a = entry["attributes"]
    names = set(a.get("memberUid", []))
    by_dn = {u.dn.lower(): u.name for u in users.values()}
    names.update(by_dn[dn.lower()] for dn in a.get("member", []) if dn.lower() in by_dn)
    return names


# --------------------------------------------------------------------------------------
# The small scenario, both schemas: every user and every group at every level
# --------------------------------------------------------------------------------------

SMALL_FIXTURES = ["slapd_small", "slapd_small_2307", "slapd_small_cn"]


@pytest.fixture(params=SMALL_FIXTURES)
def small(request: pytest.FixtureRequest) -> LiveDirectory:
    live: LiveDirectory = request.getfixturevalue(request.param)
    return live


def test_small_users_and_groups_match(small: LiveDirectory) -> None:
    exp = small.expected
    with small.slapd.connect() as conn:
        users = ldap_users(conn, small.base_dn)
        groups = ldap_groups(conn, small.base_dn)
    assert sorted(users) == sorted(exp.user_names())
    assert len(users) == SMALL.users + 1
    for name, user in users.items():
        assert user == exp.user(name)
    assert sorted(groups) == sorted(exp.group_names())
    assert len(groups) == SMALL.groups
    for name, entry in groups.items():
        g = exp.group(name)
        assert int(one(entry["attributes"], "gidNumber")) == g.gid
        assert entry["dn"] == g.dn
        assert group_member_names(entry, users) == set(g.members)


def test_small_initgroups_every_user_every_level(small: LiveDirectory) -> None:
    exp = small.expected
    depth = exp.depth
    with small.slapd.connect() as conn:
        for user in exp.user_names():
            levels = walk_up(conn, small, user, depth)
            for level in range(depth + 1):
                assert levels[level] == exp.initgroups(user, level), (user, level)
    # The tree is really nested (rfc2307bis) or really flat (rfc2307).
    sizes = [len(exp.initgroups(exp.big_user, n)) for n in range(depth + 1)]
    if exp.schema == "rfc2307bis":
        assert sizes == [11, 14, 15, 16]
    else:
        assert sizes == [11] * (depth + 1)


def test_small_group_members_every_group_every_level(small: LiveDirectory) -> None:
    exp = small.expected
    with small.slapd.connect() as conn:
        users = ldap_users(conn, small.base_dn)
        groups = ldap_groups(conn, small.base_dn)
    computed = walk_down(groups, users, exp.schema, exp.depth)
    for name, levels in computed.items():
        for level, members in enumerate(levels):
            assert members == exp.members(name, level), (name, level)
        assert set(exp.group(name).member_groups) <= set(exp.group_names())
    # A group at the top of the tree gains members with every level (rfc2307bis).
    top = computed["nest3-0001"]
    if exp.schema == "rfc2307bis":
        assert len(top[0]) < len(top[1]) < len(top[2]) < len(top[3])
    else:
        assert top[0] == top[3]
    assert computed["users"] == [set()] * (exp.depth + 1)


# --------------------------------------------------------------------------------------
# bigroupuser, both schemas
# --------------------------------------------------------------------------------------


def test_big_2307bis_counts_and_bigroupuser(slapd_big: LiveDirectory) -> None:
    exp, s = slapd_big.expected, slapd_big.slapd
    with s.connect() as conn:
        offset = s.log_offset()
        users = ldap_users(conn, s.base_dn)
        # 5,001 entries in pages of 1,000: six search operations on the server, one
        # logical search for the client.
        assert s.count_searches(offset) == 6
        (pages,) = s.logical_searches(offset)
        assert [p.nentries for p in pages] == [1000] * 5 + [1]
        assert {p.attrs for p in pages} == {tuple(USER_ATTRS)}
        assert s.count_logical_searches(offset, page_size=500) == 6
        assert len(users) == 5001
        assert all(u.gid == 10000 for u in users.values())
        for name in ("user00001", "user05000", "bigroupuser"):
            assert users[name] == exp.user(name)

        # Without paging too: the server's size limits let 5,000+ entries through.
        conn.search(f"ou=people,{s.base_dn}", "(objectClass=posixAccount)", attributes=["uid"])
        assert len(conn.response) == 5001

        groups = ldap_groups(conn, s.base_dn)
        assert len(groups) == 3000

        levels = walk_up(conn, slapd_big, "bigroupuser", 3)
    assert [len(gids) for gids in levels] == [2001, 2081, 2085, 2086]
    assert len(levels[2]) == 2085 and len(levels[3]) == 2086
    for level in range(4):
        assert levels[level] == exp.initgroups("bigroupuser", level)

    for name in ("large01", "large02", "large03"):
        members = group_member_names(groups[name], users)
        assert len(members) == 5000
        assert "bigroupuser" not in members
        for level in range(4):
            assert members == exp.members(name, level)

    computed = walk_down(groups, users, "rfc2307bis", 3)
    for name in ("nest3-0001", "nest2-0001", "nest1-0001", "nest0-0001", "grp0001"):
        for level in range(4):
            assert computed[name][level] == exp.members(name, level), (name, level)


def test_big_2307_counts_and_bigroupuser(slapd_big_2307: LiveDirectory) -> None:
    exp, s = slapd_big_2307.expected, slapd_big_2307.slapd
    with s.connect() as conn:
        users = ldap_users(conn, s.base_dn)
        groups = ldap_groups(conn, s.base_dn)
        levels = walk_up(conn, slapd_big_2307, "bigroupuser", 3)
    assert len(users) == 5001
    assert len(groups) == 3000
    assert all(not e["attributes"].get("member") for e in groups.values())
    # rfc2307 has no nesting: the direct groups plus the primary group, at every level.
    assert len(levels[0]) == 2001
    for level in range(4):
        assert levels[level] == exp.initgroups("bigroupuser", level) == levels[0]
    large = set(groups["large01"]["attributes"]["memberUid"])
    assert len(large) == 5000
    assert large == exp.members("large01", 3)


def test_big_expected_file_numbers(big_2307bis, big_2307) -> None:
    """The headline numbers of the brief, straight from the answer files."""
    bis: Expected = big_2307bis.expected
    assert len(bis.initgroups("bigroupuser", 2)) == 2085
    assert len(bis.initgroups("bigroupuser", 3)) == 2086
    assert len(bis.initgroups("bigroupuser", 9)) == 2086  # no deeper paths exist
    assert len(bis.direct_groups("bigroupuser")) == 2000
    assert 10000 in bis.initgroups("bigroupuser", 0)
    assert len(bis.user_names()) == 5001 and len(bis.group_names()) == 3000
    assert bis.members("users", 3) == set()
    flat: Expected = big_2307.expected
    assert flat.initgroups("bigroupuser", 3) == flat.initgroups("bigroupuser", 0)
    assert len(flat.initgroups("bigroupuser", 3)) == 2001
    with pytest.raises(ValueError):
        bis.initgroups("bigroupuser", -1)


# --------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------


def test_scenario_shapes() -> None:
    assert BIGROUPUSER.tree_sizes == (2000, 80, 4, 1)
    assert BIGROUPUSER.required_groups == 2000 + 80 + 4 + 1 + 3 + 1
    assert SMALL.tree_sizes == (10, 3, 1, 1)
    # Float rounding must not round 0.2 * 15 = 3.0000000000000004 up to 4.
    assert dataclasses.replace(BIGROUPUSER, user_groups=15).tree_sizes[1] == 1
    assert sweep(2000, 5000) == dataclasses.replace(BIGROUPUSER, name="sweep-g2000-l5000")
    for groups in SWEEP_USER_GROUPS:
        for size in SWEEP_LARGE_SIZES:
            variant = sweep(groups, size)
            assert variant.users >= size and variant.groups >= variant.required_groups
    with pytest.raises(ValueError, match="groups=100"):
        dataclasses.replace(BIGROUPUSER, groups=100)
    with pytest.raises(ValueError, match="schema"):
        BIGROUPUSER.with_schema("ad")


def test_scale_directories_grow_from_bigroupuser_to_the_full_size() -> None:
    assert scale(BIGROUPUSER.users) is BIGROUPUSER
    full = scale(SCALE_FULL_USERS)
    assert full == SCALE_FULL
    # The full scale directory: 200,000 users, 50,000 groups, the big user in 10,000 groups
    # at nesting level 2, groups of 20,000 and of 100,000 users.
    assert (full.users, full.groups, sum(full.tree_sizes)) == (200_000, 50_000, 10_002)
    assert (full.large_size, full.largest_size) == (20_000, 100_000)
    mid = scale(32_000)
    for field in ("groups", "large_size", "largest_size"):
        low, here, high = (getattr(s, field) or 5000 for s in (BIGROUPUSER, mid, full))
        assert low < here < high, field
    assert sum(BIGROUPUSER.tree_sizes) < sum(mid.tree_sizes) < sum(full.tree_sizes)
    assert mid.groups >= mid.required_groups
    for users in (4999, 200_001):
        with pytest.raises(ValueError, match="outside"):
            scale(users)


def test_the_largest_group_has_its_size_in_members(tmp_path: Path) -> None:
    scenario = dataclasses.replace(SMALL, name="small-largest", groups=25, largest_size=20)
    exp = generate(scenario, tmp_path).expected()
    assert len(exp.members(LARGEST_GROUP, 0)) == 20
    assert exp.group(LARGEST_GROUP).gid not in {exp.group(g).gid for g in exp.group_names()
                                                 if g != LARGEST_GROUP}  # fmt: skip
    with pytest.raises(ValueError, match="largest_size"):
        dataclasses.replace(SMALL, largest_size=SMALL.users + 1)


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = generate(SMALL, tmp_path / "a")
    b = generate(SMALL, tmp_path / "b")
    assert filecmp.cmp(a.ldif, b.ldif, shallow=False)
    assert filecmp.cmp(a.expected_path, b.expected_path, shallow=False)
    other = generate(dataclasses.replace(SMALL, seed=SMALL.seed + 1), tmp_path / "c")
    assert not filecmp.cmp(a.ldif, other.ldif, shallow=False)


def test_cli_writes_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "small", "--schema", "rfc2307", str(tmp_path)]) == 0
    out = capsys.readouterr().out.split()
    assert out == [
        str(tmp_path / "small-rfc2307.ldif"),
        str(tmp_path / "small-rfc2307.expected.json"),
    ]
    assert Expected.load(out[1]).scenario == SMALL.with_schema("rfc2307")


def test_scenario_roundtrips_through_expected(small_2307bis) -> None:
    scenario: Scenario = small_2307bis.expected.scenario
    assert scenario == SMALL.with_schema("rfc2307bis")


def test_cn_people_variant_differs_only_in_user_dns(small_2307bis, small_cn) -> None:
    """people_rdn="cn": users are cn=<full name>,ou=people (login name still `uid`),
    and every answer but the user DNs is the uid variant's (docs/compatibility.md §9.5)."""
    uid_exp, cn_exp = small_2307bis.expected, small_cn.expected
    assert cn_exp.user_names() == uid_exp.user_names()
    assert cn_exp.group_names() == uid_exp.group_names()
    for name in uid_exp.user_names():
        a, b = uid_exp.user(name), cn_exp.user(name)
        assert b.dn == f"cn={a.gecos},ou=people,{SMALL.base_dn}"
        assert a.dn == f"uid={name},ou=people,{SMALL.base_dn}"
        assert dataclasses.replace(a, dn=b.dn) == b
        for level in range(uid_exp.depth + 1):
            assert cn_exp.initgroups(name, level) == uid_exp.initgroups(name, level)
    for name in uid_exp.group_names():
        assert cn_exp.group(name) == uid_exp.group(name)
        for level in range(uid_exp.depth + 1):
            assert cn_exp.members(name, level) == uid_exp.members(name, level)
    cn_variant = dataclasses.replace(BIGROUPUSER, name="bigroupuser-cn", people_rdn="cn")
    assert cn_variant == BIGROUPUSER_CN
    assert SMALL_CN.user_dn("bigroupuser") == f"cn=Big Group User,ou=people,{SMALL.base_dn}"
    with pytest.raises(ValueError, match="people_rdn"):
        dataclasses.replace(SMALL, people_rdn="sAMAccountName")


def test_cli_people_rdn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "small", "--people-rdn", "cn", str(tmp_path)]) == 0
    out = capsys.readouterr().out.split()
    assert out[0] == str(tmp_path / "small-cn-rfc2307bis.ldif")
    assert Expected.load(out[1]).scenario == SMALL_CN
    assert "member: cn=User 000" in Path(out[0]).read_text()


# --------------------------------------------------------------------------------------
# The slapd fixture itself
# --------------------------------------------------------------------------------------


def test_sizelimit_cuts_plain_and_paged_searches(tmp_path: Path, small_2307bis) -> None:
    """sizelimit=N as Debian's slapd.conf: N entries, then sizeLimitExceeded (4) for
    anonymous clients, paged searches included; the rootdn is not limited.  Without
    deref=False the deref control is advertised, with it not (Debian's default)."""
    limit = 7
    with Slapd(
        tmp_path / "s", small_2307bis.ldif, SMALL.base_dn, sizelimit=limit, deref=False
    ) as s:
        assert DEREF_CONTROL not in s.root_dse.get("supportedControl", [])
        people = f"ou=people,{SMALL.base_dn}"
        with s.connect() as conn:
            conn.raise_exceptions = False
            conn.search(people, "(objectClass=posixAccount)", attributes=["uid"])
            assert conn.result["result"] == 4, conn.result
            assert len(conn.response) == limit
            got, cookie = 0, None
            while True:
                conn.search(
                    people,
                    "(objectClass=posixAccount)",
                    attributes=["uid"],
                    paged_size=3,
                    paged_cookie=cookie,
                )
                got += len(conn.response)
                if conn.result["result"] != 0:
                    break
                cookie = conn.result["controls"][PAGED_RESULTS_CONTROL]["value"]["cookie"]
                assert cookie, f"all {got} entries came back despite sizelimit {limit}"
            assert conn.result["result"] == 4 and got == limit, (conn.result, got)
        with s.connect(bind=True) as conn:
            conn.bind()
            conn.search(people, "(objectClass=posixAccount)", attributes=["uid"])
            assert len(conn.response) == SMALL.users + 1
    with pytest.raises(SlapdError, match="sizelimit 0"):
        Slapd(tmp_path / "t", small_2307bis.ldif, SMALL.base_dn, sizelimit=0)


def test_count_searches_counts_exactly_the_searches_made(slapd_small: LiveDirectory) -> None:
    s = slapd_small.slapd
    offset = s.log_offset()
    with s.connect() as conn:  # the bind is logged too, and must not count
        for name in ("user00001", "user00002", "bigroupuser"):
            conn.search(s.base_dn, f"(uid={name})", attributes=["uidNumber", "gidNumber"])
            assert len(conn.response) == 1
    assert s.count_searches(offset) == 3
    ops = s.searches(offset)
    assert [op.filter for op in ops] == ["(uid=user00001)", "(uid=user00002)", "(uid=bigroupuser)"]
    assert [(op.base, op.scope, op.err, op.nentries) for op in ops] == [(s.base_dn, 2, 0, 1)] * 3

    later = s.log_offset()
    assert s.count_searches(later) == 0
    with s.connect() as conn:
        conn.search("", "(objectClass=*)", search_scope=ldap3.BASE)  # a root DSE read counts
        conn.search(s.base_dn, "(uid=nosuchuser)")  # and so does a search finding nothing
    assert s.count_searches(later) == 2
    assert s.count_searches(offset) == 5
    # Not paged: every search is a logical search, even two identical ones in a row.
    assert s.count_logical_searches(offset) == 5
    again = s.log_offset()
    with s.connect() as conn:
        for _ in range(2):
            conn.search(s.base_dn, "(uid=user00001)", attributes=["uid"])
    assert s.count_logical_searches(again) == s.count_searches(again) == 2


def test_logical_searches_group_the_pages_of_a_paged_search(slapd_small: LiveDirectory) -> None:
    s = slapd_small.slapd
    offset = s.log_offset()
    with s.connect() as conn:
        # 31 users in pages of 10: pages of 10, 10, 10 and 1 entries.
        cookie = None
        for _ in range(4):
            conn.search(
                s.base_dn,
                "(objectClass=posixAccount)",
                attributes=["uid"],
                paged_size=10,
                paged_cookie=cookie,
            )
            cookie = conn.result["controls"][PAGED_RESULTS_CONTROL]["value"]["cookie"]
        assert not cookie
        conn.search(s.base_dn, "(uid=user00001)", attributes=["uid"])
    assert s.count_searches(offset) == 5
    runs = s.logical_searches(offset, page_size=10)
    assert [[p.nentries for p in run] for run in runs] == [[10, 10, 10, 1], [1]]
    assert s.count_logical_searches(offset, page_size=10) == 2


def test_root_dse_advertises_deref_and_paging(slapd_small: LiveDirectory) -> None:
    controls = slapd_small.slapd.root_dse["supportedControl"]
    assert DEREF_CONTROL in controls
    assert PAGED_RESULTS_CONTROL in controls


def test_restart_keeps_data_ports_and_counts(slapd_small_fresh: LiveDirectory) -> None:
    s = slapd_small_fresh.slapd
    uri, pid = s.uri, s.pid
    with s.connect() as conn:
        before = ldap_users(conn, s.base_dn)
    offset = s.log_offset()
    s.restart()
    assert s.uri == uri
    assert s.pid not in (None, pid)
    with s.connect() as conn:
        after = ldap_users(conn, s.base_dn)
    assert after == before
    assert len(after) == SMALL.users + 1
    # Counting spans the restart, and leaves out the readiness probe's search.
    assert s.count_searches(offset) == 1
    assert s.count_searches(offset, include_probes=True) == 2


def test_ldap_modify_changes_the_server(slapd_small_fresh: LiveDirectory) -> None:
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    dn = exp.user("user00001").dn
    group = exp.group("grp0001")
    s.ldap_modify(
        f"dn: {dn}\nchangetype: modify\nreplace: loginShell\nloginShell: /bin/zsh\n\n"
        f"dn: {group.dn}\nchangetype: modify\nadd: member\nmember: {dn}\n\n"
        f"dn: cn=extra,ou=groups,{s.base_dn}\nobjectClass: namedObject\n"
        "objectClass: posixGroup\ncn: extra\ngidNumber: 29999\n"
    )
    with s.connect() as conn:
        conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=["loginShell"])
        assert conn.response[0]["attributes"]["loginShell"] == ["/bin/zsh"]
        conn.search(group.dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=["member"])
        assert "user00001" in group_member_names(
            conn.response[0], {"user00001": exp.user("user00001")}
        )
        assert "user00001" not in group.members
        conn.search(s.base_dn, "(gidNumber=29999)", attributes=["cn"])
        assert conn.response[0]["attributes"]["cn"] == ["extra"]
    with pytest.raises(RuntimeError, match="ldapmodify failed"):
        s.ldap_modify(f"dn: {dn}\nchangetype: modify\nreplace: noSuchAttribute\nx: y\n")


def test_pause_freezes_and_resume_thaws(slapd_small_fresh: LiveDirectory) -> None:
    s = slapd_small_fresh.slapd
    pid = s.pid
    s.pause()
    assert s.pid == pid
    # The kernel still completes the TCP handshake; the search gets no answer.
    with pytest.raises(LDAPException), s.connect(receive_timeout=1) as conn:
        conn.search(s.base_dn, "(uid=user00001)")
    s.resume()
    with s.connect() as conn:
        conn.search(s.base_dn, "(uid=user00001)")
        assert len(conn.response) == 1
    assert s.pid == pid


def test_ldapi_ldaps_and_starttls(slapd_small_tls: LiveDirectory) -> None:
    s = slapd_small_tls.slapd
    for uri in (s.ldapi_uri, s.ldaps_uri):
        with s.connect(uri) as conn:
            conn.search(s.base_dn, "(uid=bigroupuser)", attributes=["uidNumber"])
            assert conn.response[0]["attributes"]["uidNumber"] == [
                str(slapd_small_tls.expected.user("bigroupuser").uid)
            ]
    server = ldap3.Server(
        s.uri,
        get_info=ldap3.NONE,
        tls=ldap3.Tls(
            ca_certs_file=str(s.tls.ca_cert) if s.tls else None, validate=ssl.CERT_REQUIRED
        ),
    )
    with ldap3.Connection(server, raise_exceptions=True) as conn:
        assert conn.start_tls()
        conn.search(s.base_dn, "(uid=bigroupuser)")
        assert len(conn.response) == 1


def test_ldaps_needs_tls_material(slapd_small: LiveDirectory) -> None:
    with pytest.raises(RuntimeError, match="TLS"):
        _ = slapd_small.slapd.ldaps_uri


def test_stop_is_idempotent_and_context_manager_stops(tmp_path: Path, small_2307bis) -> None:
    with Slapd(tmp_path / "s", small_2307bis.ldif, SMALL.base_dn) as s:
        assert s.running
        port = s.port
    assert s.pid is None and not s.running
    s.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass


def test_searches_with_filters_longer_than_a_log_line(slapd_small: LiveDirectory) -> None:
    """slapd cuts a log message at ~4 KiB and glues the next message to it; such a
    search and the messages after it must still be counted."""
    s, exp = slapd_small.slapd, slapd_small.expected
    names = exp.user_names()
    long_filter = "(|" + "".join(f"(uid={n})(uid={n}-no-such-user)" for n in names * 4) + ")"
    assert len(long_filter) > 5000
    offset = s.log_offset()
    with s.connect() as conn:
        conn.search(s.base_dn, long_filter, attributes=["uid", "uidNumber"])
        assert len(conn.response) == len(names)
        conn.search(s.base_dn, "(uid=user00001)", attributes=["uid"])
    first, second = s.searches(offset)
    assert first.filter_cut and long_filter.startswith(first.filter)
    assert (first.attrs, first.nentries) == (("uid", "uidNumber"), len(names))
    assert not second.filter_cut and second.filter == "(uid=user00001)"
    assert s.count_logical_searches(offset) == 2


def test_initgroups_reply_leaves_out_the_primary_gid(small_2307bis) -> None:
    """An INITGR reply lists memberships only (docs/compatibility.md §9.5); id's list adds the
    primary gid, which no generated user is an explicit member of."""
    exp = small_2307bis.expected
    for name in exp.user_names():
        for level in range(exp.depth + 1):
            full = exp.initgroups(name, level)
            assert exp.initgroups_reply(name, level) == full - {exp.primary_gid}
            assert exp.primary_gid in full
    assert not exp.members("users", exp.depth)
