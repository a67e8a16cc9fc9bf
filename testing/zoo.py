"""The zoo: one small directory with every awkward shape of §9.5, and its answers.

Where :mod:`testing.gendir` generates big regular directories (every user ``uid=<name>,
ou=people``, every member DN spelled like its entry), the zoo is written by hand, one or a
few entries per class of the zoo's classes (docs/compatibility.md §9.5):

1. people named ``cn=<full name>`` under a base shared by users and groups, and a real
   group with the same cn as a user (``cn=Jane Doe``);
2. member DNs spelled in other case (``UID=Alice,OU=People,…``, ``uid=MÜLLER`` for the
   entry ``müller``), escaped (``cn=Smith\\, John`` / ``cn=Smith\\2C John``), with a
   multi-valued RDN in either order (``uid=mvx+cn=…`` / ``cn=…+uid=mvx``) and with ``"``;
3. members outside the search bases (``ou=contractors,dc=test`` is outside the zoo base
   ``dc=zoo,dc=test``), dangling members (entries that do not exist);
4. a 600-member group and a user in 901 groups, for a server with ``sizelimit 500``;
5. a user whose primary gid has no group, a group reached only through it, members
   without uidNumber (no posixAccount) or gidNumber (no posixGroup), a nesting chain five
   deep (level by level);
6. names in mixed case (``CaseUser``, ``DevOps``) spelled otherwise in member DNs and
   lookups, for ``case_sensitive = true | false | preserving``;
7. sssd.conf search-base syntax (``base?scope?filter``, several bases);
8. a ``groupOfNames`` without gidNumber between POSIX groups;
9. a multi-valued ``cn`` (group) and ``uid`` (user);
10. an alias entry inside the base pointing outside it;
11. ``getent initgroups`` of users who are, and are not, explicit members of their
    primary group.

Expected answers are computed **by construction**: every member value is written
together with the entry it designates (or none), and :func:`expected` decides from the
model which entries a view (a client configuration) can see, never by parsing DNs or
asking a server.  The rules are SSSD 2.8.2's (reference §6.2, §6.3, checked by
``make compat`` against the real SSSD), except where §9.5 decides otherwise; those
places say so.

Lookups run through glibc and libnss_sss: :func:`script` writes one shell script of
``getent``/``id`` commands for a list of lookups, :func:`parse` turns its output into the
same normalised strings :func:`expected` produces, so a comparison is a dict equality.

``python -m testing.zoo OUTDIR`` writes ``zoo.ldif`` and ``zoo.expected.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testing.gendir import LdifWriter

# slapd serves SUFFIX; clients are configured with BASE, so ou=contractors is a real
# entry outside every search base of every view.
SUFFIX = "dc=test"
BASE = "dc=zoo,dc=test"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"
TEAMS = f"ou=teams,{BASE}"
ARCHIVE = f"ou=archive,{BASE}"
NEST = f"ou=nest,{BASE}"
CONTRACTORS = f"ou=contractors,{SUFFIX}"
# Debian's default slapd.conf (docs/compatibility.md §9.5).
SIZELIMIT = 500
DEFAULT_NESTING = 2  # ldap_group_nesting_level's default (reference §6.1)

STAFF_GID = 40000
ORPHAN_GID = 49999  # no group has it
BIG_GROUP_SIZE = 600  # > SIZELIMIT
# joiner: 300 direct groups, each in two parents (600 at level 1), one of those in a
# grandparent: 901 groups at level 2.  Every search SSSD makes (one per group) finds at
# most two; an OR of the level's 300 member DNs finds 600 > SIZELIMIT, and a client
# that does not split it answers 300 + 500 + 1 = 801 (docs/compatibility.md §9.5).
JOINER_DIRECT = 300
JOINER_GROUPS = JOINER_DIRECT * 3 + 1
# hugejoiner: direct member of more groups than the size limit lets one search return:
# a single `(member=<dn>)` search is cut for every client (the server's limit); the
# answer must be complete or a loud failure, never the first 500 (tests/integration/test_zoo.py).
HUGE_GROUPS = SIZELIMIT + 20
NOTFOUND = "NOTFOUND"
DOMAIN = "LDAP"  # the domain both clients are configured with (testing.sssd, testing.daemon)


@dataclass
class Entry:
    """One LDIF entry of the zoo, with what the model needs to know about it."""

    key: str  # model identity (never shown)
    dn: str  # as written in the LDIF
    container: str  # the DN of the ou it lives in
    kind: str  # "user" (posixAccount), "group", "person" (no posixAccount), "alias"
    attrs: list[tuple[str, str]] = field(default_factory=list)
    # users
    names: tuple[str, ...] = ()  # uid values in LDIF order; for groups: cn values
    name: str = ""  # the canonical name: the RDN value when it is a name value
    number: int | None = None  # uidNumber / gidNumber (None: no gidNumber)
    gid: int = 0  # users: primary gid
    gecos: str = ""
    employee_type: str = "staff"
    # groups: (member value as written, key of the entry it designates or None)
    members: list[tuple[str, str | None]] = field(default_factory=list)
    classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class View:
    """One client configuration of the zoo: domain options both cached and SSSD take.

    ``user_bases``/``group_bases``: (container DN, employeeType the filter demands or
    None) as the model reads the options.  ``lookups`` lists what the view checks."""

    name: str
    options: dict[str, Any]
    user_bases: tuple[tuple[str, str | None], ...]
    group_bases: tuple[str, ...]
    group_class: str = "posixGroup"
    case: str = "true"
    nesting: int = DEFAULT_NESTING
    lookups: tuple[tuple[str, str], ...] = ()
    note: str = ""
    # sssd.conf's name, home/shell and id options the view sets (both clients read
    # them from ``options``; the model from these): use_fully_qualified_names
    # (names answered and asked as ``name@DOMAIN``), override_homedir (a template of
    # %u and %d), override_shell, auto_private_groups = true.
    qualified: bool = False
    homedir: str = ""
    shell: str = ""
    vetoed_shells: tuple[str, ...] = ()
    shell_fallback: str = "/bin/sh"
    private_groups: str = "false"  # auto_private_groups: true, false or hybrid


# --------------------------------------------------------------------------------------
# The entries
# --------------------------------------------------------------------------------------


def _user(
    key: str,
    rdn: str,
    number: int,
    *,
    names: Sequence[str] | None = None,
    container: str = PEOPLE,
    gecos: str | None = None,
    gid: int = STAFF_GID,
    employee_type: str = "staff",
) -> Entry:
    names = tuple(names or (key,))
    # The canonical name: the RDN's uid value when the RDN has one (SSSD's
    # sysdb_attrs_primary_name with several values), else the only uid value.
    rdn_uid = [v for a, v in _rdn_avas(rdn) if a.lower() == "uid"]
    name = rdn_uid[0] if rdn_uid and rdn_uid[0] in names else names[0]
    gecos = gecos if gecos is not None else f"Zoo {key}"
    cns = [v for a, v in _rdn_avas(rdn) if a.lower() == "cn"] or [gecos]
    attrs = [
        ("objectClass", "top"),
        ("objectClass", "person"),
        ("objectClass", "organizationalPerson"),
        ("objectClass", "inetOrgPerson"),
        ("objectClass", "posixAccount"),
        *(("cn", c) for c in cns),
        ("sn", key),
        *(("uid", n) for n in names),
        ("uidNumber", str(number)),
        ("gidNumber", str(gid)),
        ("homeDirectory", f"/home/{name}"),
        ("loginShell", "/bin/sh"),
        ("gecos", gecos),
        ("employeeType", employee_type),
    ]
    return Entry(
        key=key,
        dn=f"{rdn},{container}",
        container=container,
        kind="user",
        attrs=attrs,
        names=names,
        name=name,
        number=number,
        gid=gid,
        gecos=gecos,
        employee_type=employee_type,
    )


def _rdn_avas(rdn: str) -> list[tuple[str, str]]:
    """The attribute/value pairs of an RDN *as the zoo writes them* (plain values,
    ``+`` between AVAs, ``\\,`` and ``\\"`` escapes only): the model's own spelling,
    so it can say which cn values an entry needs, not a DN parser."""
    out = []
    for ava in rdn.split("+"):
        attr, _, value = ava.partition("=")
        out.append((attr, value.replace("\\,", ",").replace('\\"', '"')))
    return out


def _group(
    key: str,
    number: int | None,
    members: Sequence[tuple[str, str | None]],
    *,
    container: str = GROUPS,
    cns: Sequence[str] | None = None,
    posix: bool = True,
) -> Entry:
    cns = tuple(cns or (key,))
    classes = ["top", "groupOfNames" if members else "namedObject"]
    if posix:
        classes.append("posixGroup")
    attrs = [("objectClass", c) for c in classes]
    attrs += [("cn", c) for c in cns]
    if number is not None:
        attrs.append(("gidNumber", str(number)))
    attrs += [("member", value) for value, _target in members]
    return Entry(
        key=key,
        dn=f"cn={key},{container}",
        container=container,
        kind="group",
        attrs=attrs,
        names=cns,
        name=key,  # the RDN value (SSSD names a multi-valued-cn group by it)
        number=number,
        members=list(members),
        classes=tuple(classes),
    )


def _ou(dn: str) -> tuple[str, list[tuple[str, str]]]:
    value = dn.split(",", 1)[0].split("=", 1)[1]
    return dn, [("objectClass", "top"), ("objectClass", "organizationalUnit"), ("ou", value)]


@dataclass
class Zoo:
    entries: dict[str, Entry]

    def __getitem__(self, key: str) -> Entry:
        return self.entries[key]

    def dn(self, key: str) -> str:
        return self.entries[key].dn


def build() -> Zoo:
    """The zoo's entries.  Member values are written next to the key of the entry they
    designate, so the answers never depend on how a DN is spelled."""
    e: dict[str, Entry] = {}

    def add(entry: Entry) -> Entry:
        assert entry.key not in e, entry.key
        e[entry.key] = entry
        return entry

    uid = iter(range(40101, 40200))
    # -- people (item 1, 2, 5, 6, 9, 10) --
    add(_user("alice", "uid=alice", next(uid)))
    add(_user("bob", "cn=Bob Builder", next(uid), names=["bob"], gecos="Bob Builder"))
    add(_user("jdoe", "cn=Jane Doe", next(uid), gecos="Jane Doe"))
    add(_user("müller", "uid=müller", next(uid), gecos="Hans Müller"))
    add(_user("jsmith", "cn=Smith\\, John", next(uid), gecos="John Smith"))
    add(_user("mvx", "uid=mvx+cn=Max Mustermann", next(uid), gecos="Max Mustermann"))
    add(_user("sstone", 'cn=Sam \\"Hammer\\" Stone', next(uid), gecos="Sam Stone"))
    # Multi-valued uid, the alias first: the name is the RDN value, whatever was asked.
    add(_user("mvuser", "uid=mvuser", next(uid), names=["mvalias", "mvuser"]))
    add(_user("CaseUser", "uid=CaseUser", next(uid)))
    add(_user("orphan", "uid=orphan", next(uid), gid=ORPHAN_GID))
    add(_user("deepuser", "uid=deepuser", next(uid)))
    add(_user("temp", "uid=temp", next(uid), employee_type="temp"))
    add(_user("nester", "uid=nester", next(uid), gid=45000))
    add(_user("joiner", "uid=joiner", next(uid)))
    add(_user("hugejoiner", "uid=hugejoiner", next(uid)))
    add(_user("carl", "uid=carl", next(uid), container=CONTRACTORS))
    # gidNumber = uidNumber, as a user-private-group directory writes them: the
    # private group auto_private_groups = hybrid makes; and one whose gid a real
    # group also has, which that group shadows.
    upg = next(uid)
    add(_user("upg", "uid=upg", upg, gid=upg))
    upgshadow = next(uid)
    add(_user("upgshadow", "uid=upgshadow", upgshadow, gid=upgshadow))
    bulk = [add(_user(f"bulk{i:03d}", f"uid=bulk{i:03d}", 42000 + i)) for i in range(1, 601)]
    # Not posixAccount: no uidNumber, so not a user for anybody (item 5).
    e["nouid"] = Entry(
        key="nouid",
        dn=f"uid=nouid,{PEOPLE}",
        container=PEOPLE,
        kind="person",
        attrs=[
            ("objectClass", "top"),
            ("objectClass", "person"),
            ("objectClass", "organizationalPerson"),
            ("objectClass", "inetOrgPerson"),
            ("cn", "No Uid"),
            ("sn", "nouid"),
            ("uid", "nouid"),
            ("employeeType", "staff"),
        ],
    )
    # An alias inside the base to a user outside it (item 10): SSSD never dereferences.
    e["carlalias"] = Entry(
        key="carlalias",
        dn=f"uid=carlalias,{PEOPLE}",
        container=PEOPLE,
        kind="alias",
        attrs=[
            ("objectClass", "top"),
            ("objectClass", "alias"),
            ("objectClass", "extensibleObject"),
            ("uid", "carlalias"),
            ("aliasedObjectName", e["carl"].dn),
        ],
    )

    def m(key: str) -> tuple[str, str | None]:
        """A member value spelled exactly like the entry's DN."""
        return (e[key].dn, key)

    # -- groups --
    add(_group("staff", STAFF_GID, [m("bob")]))  # bob is an explicit member (item 11)
    # A group with the same cn as a user (item 1).
    add(_group("Jane Doe", 40001, [m("alice")]))
    add(_group("projects", 40002, [m("jdoe"), m("bob"), m("alice")]))
    add(_group("cnonly", 40003, [m("bob"), m("jdoe")]))
    # Other spellings of the same DNs (item 2).
    spelled = [
        ("UID=Alice,OU=People,DC=zoo,DC=test", "alice"),
        (f"uid=MÜLLER,{PEOPLE}", "müller"),
        (f"cn=Smith\\2C John,{PEOPLE}", "jsmith"),
        (f"cn=Max Mustermann+uid=mvx,{PEOPLE}", "mvx"),
        (f"cn=Sam \\22Hammer\\22 Stone,{PEOPLE}", "sstone"),
    ]
    add(_group("spelling", 40004, spelled))
    add(_group("plain", 40005, [m("alice"), m("müller"), m("jsmith"), m("mvx"), m("sstone")]))
    # Members that are not users: outside the bases, dangling, not POSIX, an alias
    # (items 3, 5, 10); temp is outside the filtered user base of the "bases" view.
    add(
        _group(
            "mixed",
            40006,
            [
                m("alice"),
                m("carl"),
                (f"uid=ghost,{PEOPLE}", None),
                (f"cn=gone,{GROUPS}", None),
                m("nouid"),
                m("carlalias"),
                m("temp"),
                (f"cn=nmiddle,{NEST}", "nmiddle"),
            ],
        )
    )
    # The same, in a group large enough for the deref path (more than SSSD's and our
    # ldap_deref_threshold, 10, members to fetch): it must check bases and spellings too.
    add(
        _group(
            "bigmixed",
            40008,
            [
                *(m(u.key) for u in bulk[:10]),
                m("carl"),
                (f"uid=ghost,{PEOPLE}", None),
                (f"cn=gone,{GROUPS}", None),
                m("nouid"),
                m("carlalias"),
                (f"cn=nmiddle,{NEST}", "nmiddle"),
                spelled[0],
                spelled[2],
                spelled[3],
            ],
        )
    )
    add(_group("orphanclub", 40007, [m("orphan")]))  # reached only through orphan
    # A chain five deep (item 5): d0 ∋ deepuser, d(i+1) ∋ d(i).
    add(_group("d0", 40010, [m("deepuser")]))
    for i in range(1, 5):
        add(_group(f"d{i}", 40010 + i, [m(f"d{i - 1}")]))
    # Multi-valued cn, the RDN value second (item 9).
    add(_group("eng", 40020, [m("mvuser"), m("CaseUser")], cns=["engineering", "eng"]))
    add(_group("engparent", 40021, [m("eng")]))
    # Mixed-case names, member DNs spelled in other case (item 6).
    add(
        _group(
            "DevOps",
            40022,
            [(f"uid=caseuser,{PEOPLE}", "CaseUser"), (f"uid=ALICE,{PEOPLE}", "alice")],
        )
    )
    # Search-base syntax (item 7): teams is a second group base, archive none.
    add(_group("teamx", 40030, [m("alice")], container=TEAMS))
    add(_group("oldgroup", 40031, [m("alice")], container=ARCHIVE))
    # Server size limit (item 4).
    add(_group("big600", 40040, [m(u.key) for u in bulk]))
    for i in range(1, JOINER_DIRECT + 1):
        add(_group(f"many{i:03d}", 41000 + i, [m("joiner")]))
    for i in range(1, 2 * JOINER_DIRECT + 1):
        add(_group(f"up{i:03d}", 43000 + i, [m(f"many{(i + 1) // 2:03d}")]))
    add(_group("uptop", 43999, [m("up001")]))
    for i in range(1, HUGE_GROUPS + 1):
        add(_group(f"huge{i:03d}", 46000 + i, [m("hugejoiner")]))
    # A groupOfNames without gidNumber between POSIX groups (item 8).
    add(_group("shadowgrp", upgshadow, [m("upg")]))
    add(_group("nprimary", 45000, [m("nester")], container=NEST))
    add(_group("nbottom", 45001, [m("nester")], container=NEST))
    add(_group("nmiddle", None, [m("nbottom")], container=NEST, posix=False))
    add(_group("ntop", 45002, [m("nmiddle")], container=NEST))
    # The dangling group member above names this DN; no such entry.
    assert "gone" not in e and "ghost" not in e
    return Zoo(entries=e)


def ldif_entries(zoo: Zoo) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    yield (
        SUFFIX,
        [("objectClass", "top"), ("objectClass", "dcObject"), ("objectClass", "organization"),
         ("dc", "test"), ("o", "test")],
    )  # fmt: skip
    yield (
        BASE,
        [("objectClass", "top"), ("objectClass", "dcObject"), ("objectClass", "organization"),
         ("dc", "zoo"), ("o", "zoo")],
    )  # fmt: skip
    for ou in (PEOPLE, GROUPS, TEAMS, ARCHIVE, NEST, CONTRACTORS):
        yield _ou(ou)
    # Users first, so that every group's members exist when slapadd -q adds it (it
    # does not check, but a reader of the file does).
    for entry in sorted(zoo.entries.values(), key=lambda x: x.kind == "group"):
        yield entry.dn, entry.attrs


def write_ldif(zoo: Zoo, path: Path) -> int:
    with open(path, "w", encoding="ascii") as fh:
        writer = LdifWriter(fh)
        for dn, attrs in ldif_entries(zoo):
            writer.entry(dn, attrs)
    return writer.entries


# --------------------------------------------------------------------------------------
# Views (client configurations) and their lookups
# --------------------------------------------------------------------------------------

_STD_PASSWD = (
    "alice", "bob", "jdoe", "müller", "jsmith", "mvx", "sstone", "mvuser", "mvalias",
    "CaseUser", "orphan", "deepuser", "temp", "nester", "joiner", "bulk001",
    "carl", "nouid", "carlalias", "ghost", "Jane Doe", "caseuser", "ALICE", "MÜLLER",
)  # fmt: skip
_STD_GROUPS = (
    "staff", "Jane Doe", "projects", "cnonly", "spelling", "plain", "mixed", "bigmixed",
    "orphanclub",
    "d0", "d1", "d2", "d3", "d4", "eng", "engineering", "engparent", "DevOps", "teamx",
    "oldgroup", "big600", "many001", "many300", "up600", "uptop", "nprimary", "nbottom",
    "nmiddle", "ntop", "Bob Builder", "gone", "devops",
)  # fmt: skip
_STD_USERS = (
    "alice", "bob", "jdoe", "müller", "jsmith", "mvx", "sstone", "mvuser", "CaseUser",
    "orphan", "deepuser", "temp", "nester", "joiner", "bulk600", "caseuser", "mvalias",
)  # fmt: skip


def _lookups(
    passwd: Iterable[str] = (),
    uids: Iterable[int] = (),
    groups: Iterable[str] = (),
    gids: Iterable[int] = (),
    users: Iterable[str] = (),
) -> tuple[tuple[str, str], ...]:
    out = [("passwd", n) for n in passwd]
    out += [("passwd", str(n)) for n in uids]
    out += [("group", n) for n in groups]
    out += [("group", str(n)) for n in gids]
    out += [("initgroups", n) for n in users]
    out += [("id", n) for n in users]
    return tuple(out)


def views(zoo: Zoo) -> dict[str, View]:
    std_lookups = _lookups(
        _STD_PASSWD,
        [zoo["alice"].number or 0, zoo["carl"].number or 0, zoo["mvuser"].number or 0],
        _STD_GROUPS,
        [40001, 40020, ORPHAN_GID],
        _STD_USERS,
    )
    case_lookups = _lookups(
        ["alice", "ALICE", "CaseUser", "caseuser", "CASEUSER", "müller", "MÜLLER", "mvalias"],
        [zoo["CaseUser"].number or 0],
        ["DevOps", "devops", "DEVOPS", "spelling", "plain", "eng", "ENG", "staff"],
        [40022],
        ["CaseUser", "caseuser", "alice", "ALICE", "müller", "MÜLLER"],
    )
    base = {"ldap_search_base": BASE}
    all_views = [
        View(
            "std",
            base,
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            lookups=std_lookups,
            note="one search base shared by users and groups; case_sensitive = true",
        ),
        View(
            "case-false",
            {**base, "case_sensitive": "false"},
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            case="false",
            lookups=case_lookups,
        ),
        View(
            "case-preserving",
            {**base, "case_sensitive": "preserving"},
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            case="preserving",
            lookups=case_lookups,
        ),
        View(
            "bases",
            {
                **base,
                "ldap_user_search_base": f"{PEOPLE}?subtree?(employeeType=staff)",
                "ldap_group_search_base": f"{GROUPS}?subtree??{TEAMS}?subtree?",
            },
            user_bases=((PEOPLE, "staff"),),
            group_bases=(GROUPS, TEAMS),
            lookups=_lookups(
                ["alice", "temp", "carl", "nester"],
                [zoo["temp"].number or 0],
                ["mixed", "teamx", "oldgroup", "projects", "d2", "ntop"],
                [40031],
                ["alice", "temp", "deepuser"],
            ),
            note="sssd.conf base?scope?filter syntax, several group bases",
        ),
        View(
            "nonposix",
            {**base, "ldap_group_search_base": NEST, "ldap_group_object_class": "groupOfNames"},
            user_bases=((BASE, None),),
            group_bases=(NEST,),
            group_class="groupOfNames",
            lookups=_lookups(
                ["nester"],
                [],
                ["nprimary", "nbottom", "nmiddle", "ntop"],
                [45002],
                ["nester"],
            ),
            note="groups are groupOfNames; one of them has no gidNumber",
        ),
        View(
            "names",
            {**base, "use_fully_qualified_names": "true", "override_homedir": "/home/%d/%u",
             "override_shell": "/bin/bash", "auto_private_groups": "true"},
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            # upgshadow's uid is shadowgrp's gid: SSSD's answers for the three depend
            # on which it stored first (compat.py SSSD_REASONS, "mpg-collision").
            lookups=_lookups(
                [f"{n}@{DOMAIN}" for n in ("alice", "bob", "jdoe", "müller", "mvalias",
                                           "orphan", "nester", "nouid", "upgshadow")]
                + ["alice", "alice@OTHER", "ALICE@ldap"],
                [zoo["alice"].number or 0, zoo["orphan"].number or 0],
                [f"{n}@{DOMAIN}" for n in ("staff", "Jane Doe", "projects", "d2", "eng",
                                           "alice", "orphan", "jdoe", "Bob Builder",
                                           "shadowgrp")]
                + ["staff", "alice"],
                [STAFF_GID, 40020, ORPHAN_GID, zoo["alice"].number or 0,
                 zoo["jdoe"].number or 0, zoo["upgshadow"].number or 0],
                [f"{n}@{DOMAIN}" for n in ("alice", "bob", "orphan", "nester", "deepuser",
                                           "mvuser", "upgshadow")] + ["alice"],
            ),
            qualified=True,
            homedir="/home/%d/%u",
            shell="/bin/bash",
            private_groups="true",
            note="qualified names, home and shell templates, auto_private_groups = true",
        ),
        View(
            "hybrid",
            # [nss]'s options go to both daemons' nss= (testing.daemon, testing.sssd).
            {**base, "auto_private_groups": "hybrid",
             "nss": {"vetoed_shells": "/bin/sh", "shell_fallback": "/bin/bash"}},
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            lookups=_lookups(
                ["upg", "upgshadow", "alice"],
                [zoo["upg"].number or 0],
                ["upg", "upgshadow", "shadowgrp", "alice", "staff"],
                [zoo["upg"].number or 0, zoo["upgshadow"].number or 0,
                 zoo["alice"].number or 0, STAFF_GID],
                ["upg", "upgshadow", "alice", "bob"],
            ),
            vetoed_shells=("/bin/sh",),
            shell_fallback="/bin/bash",
            private_groups="hybrid",
            note="auto_private_groups = hybrid; a vetoed shell",
        ),
        View(
            "nest1",
            {**base, "ldap_group_nesting_level": 1},
            user_bases=((BASE, None),),
            group_bases=(BASE,),
            nesting=1,
            lookups=_lookups(
                [], [], ["d0", "d1", "d2", "engparent", "ntop"], [], ["deepuser", "mvuser"]
            ),
            note="ldap_group_nesting_level = 1",
        ),
    ]
    return {v.name: v for v in all_views}


# --------------------------------------------------------------------------------------
# Expected answers
# --------------------------------------------------------------------------------------


class Model:
    """What one view sees of the zoo, computed from the entries' keys and containers."""

    def __init__(self, zoo: Zoo, view: View) -> None:
        self.zoo = zoo
        self.view = view
        e = zoo.entries
        self.users = {k for k, x in e.items() if self._user_visible(x)}
        self.groups = {k for k, x in e.items() if self._group_visible(x)}
        # Direct members, by key: a member value counts when it designates a visible
        # user or group.  Issue 12: a value designating nothing (dangling, outside the
        # bases, not POSIX) is dropped and the rest of the group kept; SSSD 2.8.2 drops
        # it too for these shapes (noSuchObject and out-of-base DNs are skipped, §6.2).
        self.member_users: dict[str, set[str]] = {}
        self.member_groups: dict[str, set[str]] = {}
        for g in self.groups:
            targets = {t for _v, t in e[g].members if t is not None}
            self.member_users[g] = targets & self.users
            self.member_groups[g] = (targets & self.groups) - {g}
        self.parents: dict[str, set[str]] = {g: set() for g in self.groups}
        for g, kids in self.member_groups.items():
            for k in kids:
                self.parents[k].add(g)

    def _in(self, entry: Entry, container: str) -> bool:
        return entry.container == container or entry.container.endswith("," + container)

    def _user_visible(self, x: Entry) -> bool:
        # Aliases are never dereferenced (SSSD's ldap_deref default: never; item 10):
        # the alias entry is not a posixAccount, and its target is outside the bases.
        if x.kind != "user":
            return False
        return any(
            self._in(x, b) and (want is None or x.employee_type == want)
            for b, want in self.view.user_bases
        )

    def _group_visible(self, x: Entry) -> bool:
        if x.kind != "group" or self.view.group_class not in x.classes:
            return False
        return any(self._in(x, b) for b in self.view.group_bases)

    def posix(self, g: str) -> bool:
        return self.zoo[g].number is not None

    # -- names --------------------------------------------------------------------

    def short(self, name: str) -> str:
        """A name as the client prints it unqualified: lower case with
        case_sensitive = false."""
        return name.lower() if self.view.case == "false" else name

    def out(self, name: str) -> str:
        """A name as the client prints it: ``name@DOMAIN`` in a qualified view."""
        short = self.short(name)
        return f"{short}@{DOMAIN}" if self.view.qualified else short

    def _matches(self, asked: str, names: Iterable[str]) -> bool:
        if self.view.qualified:
            # Only name@DOMAIN (the domain part in any case, SSSD's re_expression).
            asked, at, dom = asked.rpartition("@")
            if not at or dom.lower() != DOMAIN.lower():
                return False
        if self.view.case == "true":
            return asked in names
        return asked.lower() in {n.lower() for n in names}

    def find_user(self, asked: str) -> str | None:
        """getpwnam: every uid value is a lookup key (SSSD stores the others as
        aliases), the answer carries the canonical name."""
        for k in sorted(self.users):
            if self._matches(asked, self.zoo[k].names):
                return k
        return None

    def find_group(self, asked: str) -> str | None:
        for k in sorted(self.groups):
            if self.posix(k) and self._matches(asked, self.zoo[k].names):
                return k
        return None

    # -- nesting ------------------------------------------------------------------

    def members(self, g: str) -> set[str]:
        """User keys of a group down to the view's nesting level: users directly in any
        group at most ``nesting`` hops below (non-POSIX groups are hops too)."""
        seen, frontier = {g}, {g}
        users = set(self.member_users[g])
        for _ in range(self.view.nesting):
            frontier = {c for f in frontier for c in self.member_groups[f]} - seen
            seen |= frontier
            for f in frontier:
                users |= self.member_users[f]
        return users

    def user_groups(self, u: str) -> set[str]:
        """Group keys of a user: the direct groups, then ``nesting`` rounds of parents
        (reference §6.3); POSIX ones only (non-POSIX ones are walked through)."""
        found = {g for g in self.groups if u in self.member_users[g]}
        frontier = set(found)
        for _ in range(self.view.nesting):
            frontier = {p for f in frontier for p in self.parents[f]} - found
            found |= frontier
        return {g for g in found if self.posix(g)}

    def group_name_of_gid(self, gid: int) -> str | None:
        for k in self.groups:
            if self.zoo[k].number == gid:
                return self.out(self.zoo[k].name)
        for u in self.users:
            if self.zoo[u].number == gid and self.has_private_group(u):
                return self.out(self.zoo[u].name)
        return None

    def has_private_group(self, u: str) -> bool:
        """auto_private_groups: every user with ``true``; with ``hybrid`` a user whose
        gidNumber is its uid and no real group has (nss_get_object.c)."""
        x = self.zoo[u]
        if self.view.private_groups == "true":
            return True
        return (
            self.view.private_groups == "hybrid"
            and x.gid == x.number
            and not any(self.zoo[g].number == x.gid for g in self.groups)
        )

    def primary_gid(self, u: str) -> int:
        """The user's answered gid: its uid with auto_private_groups = true."""
        x = self.zoo[u]
        return x.number or 0 if self.view.private_groups == "true" else x.gid

    def private_group_line(self, u: str) -> str:
        """A user's private group: its name, gid = uid, no members (SSSD's
        mpg_convert of the user's entry)."""
        x = self.zoo[u]
        return f"{self.out(x.name)}:*:{x.number}:"

    # -- answers ------------------------------------------------------------------

    def passwd_line(self, u: str) -> str:
        x = self.zoo[u]
        home = f"/home/{x.name}"
        if self.view.homedir:
            # %u is the short name as answered, %d the domain (sss_nss.c
            # expand_homedir_template): the only sequences the views use.
            home = self.view.homedir.replace("%u", self.short(x.name)).replace("%d", DOMAIN)
        shell = self.view.shell or "/bin/sh"
        if shell in self.view.vetoed_shells:
            shell = self.view.shell_fallback
        return f"{self.out(x.name)}:*:{x.number}:{self.primary_gid(u)}:{x.gecos}:{home}:{shell}"

    def group_line(self, g: str) -> str:
        x = self.zoo[g]
        names = sorted(self.out(self.zoo[u].name) for u in self.members(g))
        return f"{self.out(x.name)}:*:{x.number}:{','.join(names)}"

    def answer(self, kind: str, key: str) -> str:
        if kind == "passwd":
            if key.isdigit():
                found = [u for u in self.users if self.zoo[u].number == int(key)]
                return self.passwd_line(found[0]) if found else NOTFOUND
            u = self.find_user(key)
            return self.passwd_line(u) if u else NOTFOUND
        if kind == "group":
            if key.isdigit():
                gs = [g for g in self.groups if self.zoo[g].number == int(key)]
                if gs:
                    return self.group_line(gs[0])
                us = [u for u in self.users if self.zoo[u].number == int(key)]
                if us and self.has_private_group(us[0]):
                    return self.private_group_line(us[0])
                return NOTFOUND
            g = self.find_group(key)
            if g:
                return self.group_line(g)
            # No real group of that name: a user's private group (no user of the zoo
            # has a name a real group has; a gid is checked by has_private_group).
            u = self.find_user(key)
            return self.private_group_line(u) if u and self.has_private_group(u) else NOTFOUND
        u = self.find_user(key)
        if u is None:
            # glibc's getent initgroups prints the name and exits 0 for an unknown
            # user (getgrouplist finds no group): the same as a user without groups.
            return format_initgroups(key, []) if kind == "initgroups" else NOTFOUND
        gids = sorted(self.zoo[g].number or 0 for g in self.user_groups(u))
        x = self.zoo[u]
        if self.view.private_groups == "true" and x.gid not in gids and x.gid != x.number:
            # The directory's gidNumber is one more group of the user, whether or not
            # a group has it (nss_protocol_grent.c, orig_gid).
            gids = sorted([*gids, x.gid])
        if kind == "initgroups":
            # SSSD's initgroups lists the groups the user is a member of; the primary
            # gid only when the user is also an explicit member (item 11; glibc's
            # initgroups()/id add it themselves).  getent prints the name as asked.
            return format_initgroups(key, gids)
        primary = self.primary_gid(u)
        all_gids = sorted({primary, *gids})
        return format_id(
            x.number or 0,
            self.out(x.name),
            primary,
            [(g, self.group_name_of_gid(g)) for g in all_gids],
            self.group_name_of_gid(primary),
        )


def format_initgroups(name: str, gids: Iterable[int]) -> str:
    return " ".join([name, *(str(g) for g in sorted(gids))])


def format_id(
    uid: int, name: str, gid: int, groups: Iterable[tuple[int, str | None]], gname: str | None
) -> str:
    def one(number: int, label: str | None) -> str:
        return f"{number}({label})" if label is not None else str(number)

    items = ",".join(one(g, n) for g, n in sorted(groups))
    return f"uid={uid}({name}) gid={one(gid, gname)} groups={items}"


def expected(zoo: Zoo, view: View) -> dict[str, str]:
    """The answer of every lookup of ``view``, keyed ``"<kind> <key>"``."""
    model = Model(zoo, view)
    return {f"{kind} {key}": model.answer(kind, key) for kind, key in view.lookups}


# --------------------------------------------------------------------------------------
# Running the lookups through glibc, and reading the answers back
# --------------------------------------------------------------------------------------

_MARK = "@@zoo@@"


def script(lookups: Iterable[tuple[str, str]]) -> str:
    """A shell script running every lookup with getent/id (through glibc and whatever
    nsswitch.conf says), each answer framed by marker lines carrying its exit status."""
    lines = []
    for kind, key in lookups:
        q = shlex.quote(key)
        cmd = f"id -- {q}" if kind == "id" else f"getent {kind} -- {q}"
        lines.append(
            f"printf '%s\\n' {shlex.quote(f'{_MARK} {kind} {key}')}; {cmd} 2>/dev/null;"
            f" printf '{_MARK} rc=%d\\n' $?"
        )
    return "\n".join(lines) + "\n"


def parse(output: str) -> dict[str, str]:
    """The normalised answers of :func:`script`'s output (what :func:`expected` gives)."""
    answers: dict[str, str] = {}
    label: str | None = None
    body: list[str] = []
    for line in output.splitlines():
        if line.startswith(_MARK + " rc="):
            assert label is not None, "rc line before a lookup line"
            answers[label] = _normalise(label.split(" ", 1)[0], body, int(line.split("=")[1]))
            label, body = None, []
        elif line.startswith(_MARK + " "):
            label, body = line[len(_MARK) + 1 :], []
        else:
            body.append(line)
    return answers


def _normalise(kind: str, body: list[str], rc: int) -> str:
    if rc != 0 or not body:
        return NOTFOUND if rc in (1, 2) and not body else f"rc={rc} {' | '.join(body)}"
    if len(body) != 1:
        return f"{len(body)} lines: {' | '.join(body)}"
    line = body[0]
    if kind == "group":
        name, pw, gid, members = line.split(":", 3)
        return f"{name}:{pw}:{gid}:{','.join(sorted(filter(None, members.split(','))))}"
    if kind == "initgroups":
        # getent prints the name padded, then " gid" per group.
        name, *gids = line.split()
        return format_initgroups(name, sorted(int(g) for g in gids))
    if kind == "id":
        return _normalise_id(line)
    return line


def _normalise_id(line: str) -> str:
    """``uid=1(a) gid=2(b) groups=2(b),3`` with the groups sorted by number."""
    head, _, groups = line.partition(" groups=")
    items = groups.split(",") if groups else []
    items.sort(key=lambda item: int(item.split("(", 1)[0]))
    return f"{head} groups={','.join(items)}"


def diff(want: dict[str, str], got: dict[str, str]) -> list[str]:
    """Human-readable differences, one per lookup, in ``want``'s order; long lists
    (members, gids) are shown as what is missing and what is extra."""
    out = []
    for label, w in want.items():
        g = got.get(label, "(not run)")
        if g != w:
            out.append(f"{label}: expected {short(w)}, got {short(g)}{delta(w, g)}")
    return out


def _items(answer: str) -> tuple[str, set[str]] | None:
    """(head, items) of a list-valued answer: group members, initgroups gids, id groups."""
    if answer.startswith("uid="):
        head, _, groups = answer.partition(" groups=")
        return head, set(filter(None, groups.split(",")))
    if answer.count(":") == 3:
        head, _, members = answer.rpartition(":")
        return head, set(filter(None, members.split(",")))
    if answer != NOTFOUND and " " in answer and ":" not in answer:
        head, *gids = answer.split()
        return head, set(gids)
    return None


def delta(want: str, got: str) -> str:
    w, g = _items(want), _items(got)
    if w is None or g is None:
        return ""
    parts = []
    if w[0] != g[0]:
        parts.append(f"head {g[0]!r} for {w[0]!r}")
    if w[1] - g[1]:
        parts.append(f"{len(w[1] - g[1])} missing ({short(','.join(sorted(w[1] - g[1])), 120)})")
    if g[1] - w[1]:
        parts.append(f"{len(g[1] - w[1])} extra ({short(','.join(sorted(g[1] - w[1])), 120)})")
    return f" [{'; '.join(parts)}]" if parts else ""


def short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def ordered(lookups: Iterable[tuple[str, str]], order: str) -> list[tuple[str, str]]:
    """The lookups in one of the :data:`ORDERS`: ``groups-first`` (getent group, then
    passwd, then initgroups and id), ``id-first`` (id and initgroups, then group, then
    passwd) or ``users-first``.  SSSD's answers depend on it; ours must not."""
    rank = ORDERS[order]
    items = list(lookups)
    return sorted(items, key=lambda lk: rank.index(lk[0]))


# The passes every client makes over a view's lookups: a fresh cache with groups first,
# then after expiring the whole cache (`cached cache -E` / `sss_cache -E`) id first and
# users first, then a fresh cache again with id first.
# Users first is where SSSD drops members spelled otherwise than their entry's DN (seen
# in the first compat runs).  Two fresh starts per view: a start is most of a small
# view's time.
PASSES: tuple[tuple[str, str], ...] = (
    ("fresh", "groups-first"),
    ("expire", "id-first"),
    ("expire", "users-first"),
    ("fresh", "id-first"),
)
# The clients are asked over the socket only: the answers are the daemon's, not the
# memory cache's.
SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}
PASS_TIMEOUT = 1800.0  # SSSD resolves the 901 groups one by one


class Client(Protocol):
    """What :func:`run_passes` needs of a daemon under test (cached or SSSD)."""

    def fresh(self) -> None:
        """Stop, wipe the cache, start."""

    def expire(self) -> None:
        """Mark every cached entry expired (sss_cache -E)."""

    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float = ...
    ) -> subprocess.CompletedProcess[str]: ...


def run_passes(client: Client, view: View) -> list[dict[str, str]]:
    """The answers of every pass of :data:`PASSES`, in order."""
    results = []
    for how, order in PASSES:
        if how == "fresh":
            client.fresh()
        else:
            client.expire()
        r = client.run_nss(
            ["sh", "-c", script(ordered(view.lookups, order))],
            env=SOCKET_ONLY,
            timeout=PASS_TIMEOUT,
        )
        results.append(parse(r.stdout))
    return results


ORDERS: dict[str, tuple[str, ...]] = {
    "groups-first": ("group", "passwd", "initgroups", "id"),
    "id-first": ("id", "initgroups", "group", "passwd"),
    "users-first": ("passwd", "group", "initgroups", "id"),
}


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def expected_data(zoo: Zoo) -> dict[str, Any]:
    return {
        "suffix": SUFFIX,
        "base": BASE,
        "sizelimit": SIZELIMIT,
        "views": {
            name: {
                "options": v.options,
                "note": v.note,
                "answers": expected(zoo, v),
            }
            for name, v in views(zoo).items()
        },
    }


def generate(outdir: str | Path) -> tuple[Path, Path]:
    """Write ``zoo.ldif`` and ``zoo.expected.json`` into ``outdir``."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    zoo = build()
    ldif, exp = out / "zoo.ldif", out / "zoo.expected.json"
    write_ldif(zoo, ldif)
    exp.write_text(json.dumps(expected_data(zoo), indent=1, ensure_ascii=False))
    return ldif, exp


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testing.zoo", description="Write OUTDIR/zoo.ldif and zoo.expected.json."
    )
    parser.add_argument("outdir", type=Path, metavar="OUTDIR")
    args = parser.parse_args(argv)
    for path in generate(args.outdir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
