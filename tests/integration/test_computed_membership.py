"""Groups whose members the server computes (cached/ldap/computed.py), on a real slapd
with the dynlist overlay: a user's own entry changes so that she stops or starts
matching a dynamic group's memberURL, the group's entry is not written — its
modifyTimestamp and entryCSN stay — and the refresh by stamps must still answer what
a cold lookup on an empty cache answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ldap3
import pytest

from testing.cachetime import expire_all
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from tests.integration.test_refresh_shapes import (
    BASE,
    GROUPS,
    PEOPLE,
    Directory,
    answer,
    ask,
    g,
    group,
    invalidate,
    u,
)

DEPT = "42"


def person(name: str, number: int, dept: str) -> str:
    return (f"dn: uid={name},{PEOPLE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"cn: {name}\nsn: x\nuid: {name}\nuidNumber: {number}\ngidNumber: 5000\n"
            f"homeDirectory: /home/{name}\ndepartmentNumber: {dept}\n\n")  # fmt: skip


def dynamic(cn: str, gid: int, url: str = f"{PEOPLE}??one?(departmentNumber={DEPT})") -> str:
    """A POSIX group whose members are what ``url`` finds (by default the people of
    department DEPT), computed by dynlist at every read (testing/slapd.py
    DYNLIST_ATTRSET)."""
    return (f"dn: cn={cn},{GROUPS}\nobjectClass: groupOfURLs\nobjectClass: posixGroup\n"
            f"cn: {cn}\ngidNumber: {gid}\nmemberURL: ldap:///{url}\n\n")  # fmt: skip


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Any]:
    made: list[Directory] = []

    def make(ldif: str, **opts: Any) -> Directory:
        work = tmp_path / f"d{len(made)}"
        work.mkdir()
        made.append(Directory(work, ldif, dynlist=True, **opts))
        return made[-1]

    yield make
    for d in made:
        d.close()


def stamps(d: Directory, dn: str) -> tuple[list[bytes], list[bytes]]:
    """The group's modifyTimestamp and entryCSN, as the server has them now."""
    assert d.conn.search(dn, "(objectClass=*)", ldap3.BASE,
                         attributes=["modifyTimestamp", "entryCSN"]), d.conn.result  # fmt: skip
    got = d.conn.response[0]["raw_attributes"]
    return got["modifyTimestamp"], got["entryCSN"]


@pytest.mark.parametrize("expire", [invalidate, expire_all], ids=["-E", "expiry"])
@pytest.mark.parametrize("order", ["group-first", "initgroups-first"])
def test_a_dynamic_group_changed_by_its_members_entries_is_read_whole(directory, expire, order):
    """dyn lists the people of department 42 (alice, carol); parent lists dyn. alice
    moves to department 7 and bob to 42: dyn's members change, its stamps do not.
    Touched on its unchanged stamps, dyn and parent answered alice and carol, VALID,
    until refresh_full_interval; now dyn is read whole at every refresh, by a group
    lookup (refresh_group) or by the walk of bob's groups (refresh_initgroups).
    Unpaged (ldap_page_size = 0): slapd 2.5 matches no computed value under the
    paged results control, which the walk's first level carries (the last test)."""
    d = directory(person("alice", 1001, DEPT) + person("bob", 1002, "7")
                  + person("carol", 1003, DEPT) + dynamic("dyn", 3001)
                  + group("parent", 3002, [g("dyn")]), ldap_page_size=0)  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "group", "dyn") == ("dyn", 3001, ["alice", "carol"])
    assert ask(p, cache, "group", "parent") == ("parent", 3002, ["alice", "carol"])
    assert ask(p, cache, "init", "alice") == [3001, 3002, 5000]
    assert ask(p, cache, "init", "bob") == [5000]
    before = stamps(d, g("dyn"))
    d.modify(u("alice"), departmentNumber=[(ldap3.MODIFY_REPLACE, ["7"])])
    d.modify(u("bob"), departmentNumber=[(ldap3.MODIFY_REPLACE, [DEPT])])
    # The membership changed on the server, the group's entry did not.
    assert d.cold("group", "dyn") == ("dyn", 3001, ["bob", "carol"])
    assert stamps(d, g("dyn")) == before
    expire(cache)
    if order == "initgroups-first":
        # The walk up from bob finds dyn by its computed member value and its unchanged
        # stamps; dyn is fetched whole and stored VALID, answered from the cache.
        assert ask(p, cache, "init", "bob") == d.cold("init", "bob") == [3001, 3002, 5000]
        assert answer(cache, "group", "dyn")[0] == ("dyn", 3001, ["bob", "carol"])
    now = ("dyn", 3001, ["bob", "carol"])
    assert ask(p, cache, "group", "dyn") == d.cold("group", "dyn") == now
    assert ask(p, cache, "group", "parent") == d.cold("group", "parent")
    assert ask(p, cache, "group", "parent") == ("parent", 3002, ["bob", "carol"])
    assert ask(p, cache, "init", "alice") == d.cold("init", "alice") == [5000]
    assert ask(p, cache, "init", "bob") == d.cold("init", "bob") == [3001, 3002, 5000]


@requires_nss
def test_getent_group_answers_a_dynamic_groups_new_members(directory, tmp_path):
    """The same through the daemon and the real libnss_sss: `getent group` after
    `cached cache -E` lists the members the server computes now."""
    d = directory(person("alice", 1001, DEPT) + person("bob", 1002, "7")
                  + dynamic("dyn", 3001))  # fmt: skip
    with CachedDaemon(tmp_path / "cached", [d.slapd.uri], BASE) as daemon:
        got = daemon.run_nss(["getent", "group", "dyn"])
        assert (got.returncode, got.stdout) == (0, "dyn:*:3001:alice\n"), got.stderr
        before = stamps(d, g("dyn"))
        d.modify(u("bob"), departmentNumber=[(ldap3.MODIFY_REPLACE, [DEPT])])
        assert stamps(d, g("dyn")) == before
        assert daemon.cli("cache", "-E").returncode == 0
        got = daemon.run_nss(["getent", "group", "dyn"])
        assert (got.returncode, got.stdout) == (0, "dyn:*:3001:alice,bob\n"), got.stderr


def test_a_dynamic_groups_stamp_stored_before_the_rule_is_not_trusted(directory):
    """A cache written without the rule holds a dynamic group with its stamps (touched
    on them): the refresh's stamp searches see its memberURL too (they ask for
    labeledURI), so it is read whole rather than touched again on the old stamps."""
    d = directory(person("alice", 1001, DEPT) + person("bob", 1002, "7")
                  + dynamic("dyn", 3001))  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "group", "dyn") == ("dyn", 3001, ["alice"])
    modstamp, csn = (v[0].decode() for v in stamps(d, g("dyn")))
    with cache.write() as batch:
        cache.touch_group(batch, "dyn", modstamp, csn)
    assert cache.group_stamps(["dyn"])["dyn"][:2] == (modstamp, csn)
    d.modify(u("bob"), departmentNumber=[(ldap3.MODIFY_REPLACE, [DEPT])])
    assert stamps(d, g("dyn")) == ([modstamp.encode()], [csn.encode()])
    expire_all(cache)
    now = ("dyn", 3001, ["alice", "bob"])
    assert ask(p, cache, "group", "dyn") == d.cold("group", "dyn") == now


@pytest.mark.parametrize("url_attr", ["memberURL", "labeledURI"])
def test_a_group_of_another_class_with_an_ldap_url_is_computed(directory, url_attr):
    """dynlist can be configured on any class and any labeledURI subtype: an LDAP URL
    in one marks the group, whatever its class (here groupOfNames, the URL allowed by
    extensibleObject). This slapd expands groupOfURLs only, so the group's members
    are its static ones; it is stored without a stamp all the same, and read whole
    at every refresh."""
    d = directory(person("alice", 1001, DEPT) + person("bob", 1002, "7")
                  + f"dn: cn=mixed,{GROUPS}\nobjectClass: groupOfNames\nobjectClass: posixGroup\n"
                  f"objectClass: extensibleObject\ncn: mixed\ngidNumber: 3003\n"
                  f"member: {u('alice')}\n"
                  f"{url_attr}: ldap:///{PEOPLE}??one?(departmentNumber={DEPT})\n\n")  # fmt: skip
    p, cache = d.provider()
    assert ask(p, cache, "group", "mixed") == ("mixed", 3003, ["alice"])
    assert cache.group_stamps(["mixed"])["mixed"][0] == ""  # stored without a stamp
    expire_all(cache)
    assert ask(p, cache, "group", "mixed") == d.cold("group", "mixed")


def test_slapd_2_5_matches_no_computed_member_under_paged_results(directory):
    """What docs/compatibility.md ("Computed membership") says of initgroups: slapd
    2.5.13's dynlist matches a filter on a computed member value, but not in a search
    with the paged results control (RFC 2696), which the first level of the walk up
    from a user carries (ldap_page_size, 1,000 by default; SSSD pages it as well).
    Paged, alice's `id` lacks the dynamic group her entry puts her in; unpaged, it
    has it. "teams", a dynamic group of static groups, is found above her static
    group either way: the levels above the first are unpaged. A group lookup names
    its computed members either way."""
    ldif = (person("alice", 1001, DEPT) + dynamic("dyn", 3001)
            + group("team", 3005, [u("alice")])
            + dynamic("teams", 3006, f"{GROUPS}??one?(cn=team)"))  # fmt: skip
    paged, unpaged = directory(ldif), directory(ldif, ldap_page_size=0)
    assert paged.cold("init", "alice") == [3005, 3006, 5000]
    assert unpaged.cold("init", "alice") == [3001, 3005, 3006, 5000]
    assert paged.cold("group", "dyn") == unpaged.cold("group", "dyn") == ("dyn", 3001, ["alice"])
    assert paged.cold("group", "teams") == ("teams", 3006, ["alice"])
