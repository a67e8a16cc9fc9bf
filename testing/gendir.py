"""Generate test directories: an LDIF file plus the answers a correct client must give.

One scenario describes a directory with one *big user* (``bigroupuser``) who is a direct
member of many groups, a nesting tree above those groups, a few very large groups and
filler groups; :func:`generate` writes

* ``<out>/<scenario>-<schema>.ldif`` — loadable with ``slapadd`` on a slapd that has
  ``core``, ``cosine``, ``inetorgperson``, ``namedobject`` and our
  ``contrib/rfc2307bis.schema``;
* ``<out>/<scenario>-<schema>.expected.json`` — the answers, computed from the
  generator's own graph (never from LDAP), read back with :class:`Expected`.

Nesting levels follow ``ldap_group_nesting_level`` as our tests use it:

* a user's groups at level N are the groups reachable from its direct groups by at most
  N upward hops (level 0 = the direct groups), always plus the primary group;
* a group's members at level N are the users directly in any group reachable from it by
  at most N downward hops (level 0 = its direct member users).

The primary group (``users``, gid 10000) lists no members: users belong to it through
their ``gidNumber``, as in every POSIX directory, so ``members("users", n)`` is empty while
every user's initgroups contains 10000.

rfc2307 variant: the same users, groups, gids and random members, but groups carry
``memberUid`` names and cannot contain groups, so every level equals level 0 and the
groups above the big user's direct groups hold only their own random members.

Run ``python -m testing.gendir --scenario bigroupuser --schema rfc2307bis OUTDIR``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO, TypeVar

from cached.model import Group, User

SCHEMAS = ("rfc2307bis", "rfc2307")
PEOPLE_RDNS = ("uid", "cn")

PRIMARY_GROUP = "users"
PRIMARY_GID = 10000
FIRST_UID = 10001
FIRST_GID = 20001
LARGEST_GROUP = "largest"
LOGIN_SHELL = "/bin/bash"
# Bump when the JSON layout changes, so a stale file is rejected, not misread.
EXPECTED_FORMAT = 1

_T = TypeVar("_T", int, str)


@dataclass(frozen=True)
class Scenario:
    """Parameters of one generated directory.

    ``users`` counts ordinary users; the big user comes on top.  ``groups`` is the total
    number of group entries, including the primary group and the large groups; whatever
    the nesting tree and the large groups leave over becomes filler groups.
    """

    name: str
    users: int
    groups: int
    user_groups: int  # direct groups of the big user (level 0 of the nesting tree)
    nest_fraction: float = 0.2  # share of each level's groups (rounded up) that get a parent
    children_per_parent: int = 5  # parents per level = ceil(children / this)
    depth: int = 3  # levels of parents above the direct groups
    random_members: int = 20  # ordinary users added to every tree and filler group
    large_groups: int = 3
    large_size: int = 5000  # user members of each large group (big user not among them)
    # One more group, ``largest``, of this many user members (0: none): the scale
    # directories' group of 100,000, five times their large groups.
    largest_size: int = 0
    seed: int = 2307
    base_dn: str = "dc=example,dc=test"
    schema: str = "rfc2307bis"
    big_user: str = "bigroupuser"
    # The RDN attribute of people entries: "uid" (uid=user0001,ou=people,...) or "cn",
    # the full name as Active Directory and many OpenLDAP sites spell it
    # (cn=User 0001,ou=people,...); the login name stays in `uid` either way (§9.5).
    people_rdn: str = "uid"

    def __post_init__(self) -> None:
        problems = []
        if self.schema not in SCHEMAS:
            problems.append(f"schema {self.schema!r} is not one of {', '.join(SCHEMAS)}")
        if self.people_rdn not in PEOPLE_RDNS:
            problems.append(
                f"people_rdn {self.people_rdn!r} is not one of {', '.join(PEOPLE_RDNS)}"
            )
        if not 0 < self.nest_fraction <= 1:
            problems.append(f"nest_fraction {self.nest_fraction} must be in (0, 1]")
        if self.children_per_parent < 1 or self.depth < 0 or self.user_groups < 0:
            problems.append("children_per_parent must be >= 1, depth and user_groups >= 0")
        if max(self.random_members, self.large_size, self.largest_size) > self.users:
            problems.append(
                f"random_members ({self.random_members}), large_size ({self.large_size})"
                f" and largest_size ({self.largest_size}) cannot exceed the number of"
                f" users ({self.users})"
            )
        if self.groups < self.required_groups:
            problems.append(
                f"groups={self.groups} is below the {self.required_groups} that the nesting"
                " tree, the large groups and the primary group need"
            )
        if not self.base_dn.lower().startswith(("dc=", "o=")):
            problems.append(f"base_dn {self.base_dn!r} must start with dc= or o=")
        if problems:
            raise ValueError(f"scenario {self.name!r}: " + "; ".join(problems))

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        """Group count per nesting level: the direct groups, then each parent level.

        bigroupuser: 2,000 → 20 % = 400 children / 5 = 80 → 16 / 5 = 4 → 1 / 5 = 1.
        """
        # Exact fraction: 0.2 * 15 is 3.0000000000000004 in floats, and ceil() would
        # turn that into 4.
        fraction = Fraction(self.nest_fraction).limit_denominator(10**6)
        sizes = [self.user_groups]
        for _ in range(self.depth):
            children = math.ceil(sizes[-1] * fraction)
            if children == 0:
                break
            sizes.append(math.ceil(children / self.children_per_parent))
        return tuple(sizes)

    @property
    def required_groups(self) -> int:
        return sum(self.tree_sizes) + self.large_groups + (self.largest_size > 0) + 1

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.schema}"

    @property
    def people_dn(self) -> str:
        return f"ou=people,{self.base_dn}"

    @property
    def groups_dn(self) -> str:
        return f"ou=groups,{self.base_dn}"

    def full_name(self, name: str) -> str:
        """A user's full name: its gecos and `cn`, and its RDN value with
        ``people_rdn="cn"``.  Unique, as an RDN value must be."""
        if name == self.big_user:
            return "Big Group User"
        return f"User {name.removeprefix('user')}"

    def user_dn(self, name: str) -> str:
        if self.people_rdn == "cn":
            return f"cn={self.full_name(name)},{self.people_dn}"
        return f"uid={name},{self.people_dn}"

    def group_dn(self, name: str) -> str:
        return f"cn={name},{self.groups_dn}"

    def with_schema(self, schema: str) -> Scenario:
        return dataclasses.replace(self, schema=schema)


SMALL = Scenario(
    name="small",
    users=30,
    groups=24,
    user_groups=10,
    # A bushier tree than bigroupuser's so that a few dozen entries still nest 3 deep:
    # 10 direct groups → 5 children under 3 parents → 2 under 1 → 1 under 1.
    nest_fraction=0.5,
    children_per_parent=2,
    depth=3,
    random_members=3,
    large_groups=2,
    large_size=12,
)

BIGROUPUSER = Scenario(name="bigroupuser", users=5000, groups=3000, user_groups=2000)

# The same directories with people named by their full name (cn=User 00001,ou=people,…),
# docs/compatibility.md §9.5: same groups, same members, same expected answers; only the user DNs
# (and so every member value) differ.
SMALL_CN = dataclasses.replace(SMALL, name="small-cn", people_rdn="cn")
BIGROUPUSER_CN = dataclasses.replace(BIGROUPUSER, name="bigroupuser-cn", people_rdn="cn")

PRESETS: dict[str, Scenario] = {s.name: s for s in (SMALL, BIGROUPUSER, SMALL_CN, BIGROUPUSER_CN)}

# The scale directories (perf.run --scale): bigroupuser at its 5,000 users, growing to
# SCALE_FULL at 200,000: 50,000 groups, the big user in 10,002 groups at
# nesting level 2 (3,334 direct groups, each under a chain of two parents), three
# groups of 20,000 users and one of 100,000.
SCALE_FULL_USERS = 200_000
SCALE_FULL = Scenario(
    name="scale-200000",
    users=SCALE_FULL_USERS,
    groups=50_000,
    user_groups=3334,
    nest_fraction=1.0,
    children_per_parent=1,
    depth=2,
    large_size=20_000,
    largest_size=100_000,
)


def scale(users: int) -> Scenario:
    """The directory of ``users`` ordinary users on the way from bigroupuser (5,000
    users) to SCALE_FULL (200,000): ``scale(5000)`` is bigroupuser itself, above it
    the SCALE_FULL shape with every count (groups, the big user's groups at level 2,
    the large groups' and the largest group's size) interpolated geometrically
    between the two ends, so that each grows by a fixed power of the user count and a
    cost's growth exponent can be read against the count that drives it."""
    low, high = BIGROUPUSER, SCALE_FULL
    if users == low.users:
        return low
    if not low.users < users <= high.users:
        raise ValueError(
            f"scale: {users} users is outside {low.users}..{high.users} (bigroupuser to"
            " the full scale directory)"
        )
    t = math.log(users / low.users) / math.log(high.users / low.users)

    def between(a: int, b: int) -> int:
        return round(a * math.pow(b / a, t))

    # The big user's groups at level 2: bigroupuser's 2,085 (2,000 + 80 + 4 + 1) up to
    # SCALE_FULL's 10,002; each direct group brings two parents.
    member_of = between(sum(low.tree_sizes), sum(high.tree_sizes))
    return dataclasses.replace(
        high,
        name=f"scale-{users}",
        users=users,
        groups=between(low.groups, high.groups),
        user_groups=-(-member_of // 3),
        large_size=between(low.large_size, high.large_size),
        largest_size=between(low.large_size, high.largest_size),
    )

# The sweep of the perf reports: how cost grows with a user's groups and a group's size.
SWEEP_USER_GROUPS = (250, 500, 1000, 2000, 4000)
SWEEP_LARGE_SIZES = (1000, 5000, 10000, 20000)


def sweep(user_groups: int, large_size: int = 5000, base: Scenario = BIGROUPUSER) -> Scenario:
    """A bigroupuser variant with ``user_groups`` direct groups and large groups of
    ``large_size`` members.  Users grow to fill the large groups; groups grow so that as
    many filler groups remain as in ``base``.  ``sweep(2000, 5000)`` equals ``base``
    apart from its name."""
    probe = dataclasses.replace(base, name="probe", user_groups=user_groups, groups=10**9)
    prefix = "sweep" if base == BIGROUPUSER else f"{base.name}-sweep"
    filler = base.groups - base.required_groups
    return dataclasses.replace(
        base,
        name=f"{prefix}-g{user_groups}-l{large_size}",
        user_groups=user_groups,
        users=max(base.users, large_size),
        large_size=large_size,
        groups=max(base.groups, probe.required_groups + filler),
    )


# --------------------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------------------


@dataclass
class _GroupNode:
    name: str
    gid: int
    users: list[str]  # direct member users, in LDIF order
    groups: list[str]  # direct member groups (empty for rfc2307)


@dataclass
class Directory:
    """The generated graph: users, groups and their direct memberships, in LDIF order."""

    scenario: Scenario
    users: list[User]
    groups: list[Group]

    def user_groups(self) -> dict[str, list[str]]:
        """Direct group names of every user (the primary group excluded)."""
        result: dict[str, list[str]] = {u.name: [] for u in self.users}
        for group in self.groups:
            for member in group.members:
                result[member].append(group.name)
        return result


def build(scenario: Scenario) -> Directory:
    """Build the membership graph.  Deterministic for a given scenario (and seed)."""
    s = scenario
    rng = random.Random(s.seed)
    width = max(5, len(str(s.users)))
    ordinary = [f"user{i:0{width}d}" for i in range(1, s.users + 1)]
    users = [
        User(
            name=name,
            uid=FIRST_UID + i,
            gid=PRIMARY_GID,
            gecos=s.full_name(name),
            home=f"/home/{name}",
            shell=LOGIN_SHELL,
            dn=s.user_dn(name),
        )
        for i, name in enumerate(ordinary)
    ]
    users.append(
        User(
            name=s.big_user,
            uid=FIRST_UID + s.users,
            gid=PRIMARY_GID,
            gecos=s.full_name(s.big_user),
            home=f"/home/{s.big_user}",
            shell=LOGIN_SHELL,
            dn=s.user_dn(s.big_user),
        )
    )

    nodes: list[_GroupNode] = [_GroupNode(PRIMARY_GROUP, PRIMARY_GID, [], [])]
    next_gid = FIRST_GID

    def new_group(name: str) -> _GroupNode:
        nonlocal next_gid
        node = _GroupNode(name, next_gid, [], [])
        next_gid += 1
        nodes.append(node)
        return node

    # The nesting tree: level 0 are the big user's direct groups; at each level a
    # random share of the groups becomes children, split in runs among the parents.
    levels: list[list[_GroupNode]] = []
    fraction = Fraction(s.nest_fraction).limit_denominator(10**6)
    for level, size in enumerate(s.tree_sizes):
        lw = max(4, len(str(size)))
        current = [new_group(f"nest{level}-{i:0{lw}d}") for i in range(1, size + 1)]
        if level == 0:
            for node in current:
                node.users.append(s.big_user)
        else:
            below = levels[-1]
            children = rng.sample(below, math.ceil(len(below) * fraction))
            for i, parent in enumerate(current):
                chunk = children[i * s.children_per_parent : (i + 1) * s.children_per_parent]
                parent.groups.extend(c.name for c in chunk)
        levels.append(current)
    large = [new_group(f"large{i:02d}") for i in range(1, s.large_groups + 1)]
    largest = [new_group(LARGEST_GROUP)] if s.largest_size else []
    filler_count = s.groups - len(nodes)  # nodes holds the primary, tree and large groups
    fw = max(4, len(str(filler_count)))
    filler = [new_group(f"grp{i:0{fw}d}") for i in range(1, filler_count + 1)]

    for node in [n for lvl in levels for n in lvl] + filler:
        picked = sorted(rng.sample(range(s.users), s.random_members))
        node.users.extend(ordinary[i] for i in picked)
    for node in large:
        picked = sorted(rng.sample(range(s.users), s.large_size))
        node.users.extend(ordinary[i] for i in picked)
    for node in largest:
        picked = sorted(rng.sample(range(s.users), s.largest_size))
        node.users.extend(ordinary[i] for i in picked)

    nesting = s.schema == "rfc2307bis"
    groups = [
        Group(
            name=n.name,
            gid=n.gid,
            dn=s.group_dn(n.name),
            members=tuple(n.users),
            member_groups=tuple(n.groups) if nesting else (),
        )
        for n in nodes
    ]
    assert len(groups) == s.groups, (len(groups), s.groups)
    return Directory(scenario=s, users=users, groups=groups)


# --------------------------------------------------------------------------------------
# Expected answers
# --------------------------------------------------------------------------------------


def _closure_by_level(
    start: dict[str, set[str]], edges: dict[str, list[str]], depth: int
) -> list[dict[str, set[str]]]:
    """For every node and level 0..depth: ``start[node]`` united with ``start`` of every
    node reachable over ``edges`` in at most that many hops.  Level by level, each
    reusing the level below (cycles are harmless: hops are bounded)."""
    tables = [{k: set(v) for k, v in start.items()}]
    for _ in range(depth):
        prev = tables[-1]
        tables.append(
            {
                node: own.union(*(prev[n] for n in edges.get(node, ())))
                for node, own in start.items()
            }
        )
    return tables


def _added(levels: list[set[_T]]) -> list[list[_T]]:
    """What each level 1..N adds to the level below it (levels only ever grow)."""
    return [sorted(levels[i] - levels[i - 1]) for i in range(1, len(levels))]


def expected_data(directory: Directory) -> dict[str, Any]:
    """The JSON document of expected answers, read back by :class:`Expected`.

    Per user: passwd fields, ``initgroups`` = the gids at level 0 (primary included),
    ``initgroups_added[N-1]`` = the gids level N adds.  Per group: gid, dn, direct
    ``members`` (user names, = level 0) and ``member_groups``, ``members_added[N-1]`` =
    the user names level N adds.  Storing increments rather than whole sets keeps the
    bigroupuser file at a few MB instead of ~10.  ``big_user_initgroups`` repeats the
    big user's full gid list per level, for people reading the file with jq.
    """
    s = directory.scenario
    gid_of = {g.name: g.gid for g in directory.groups}
    parents: dict[str, list[str]] = {}
    for g in directory.groups:
        for child in g.member_groups:
            parents.setdefault(child, []).append(g.name)
    children = {g.name: list(g.member_groups) for g in directory.groups}

    # Upward: groups reachable from each group (itself included) by <= N hops.
    up = _closure_by_level({g.name: {g.name} for g in directory.groups}, parents, s.depth)
    # Downward: users in each group or its sub-groups <= N hops down.
    down = _closure_by_level({g.name: set(g.members) for g in directory.groups}, children, s.depth)

    direct = directory.user_groups()
    users: dict[str, Any] = {}
    big_user_levels: list[list[int]] = []
    for u in directory.users:
        per_level: list[set[int]] = []
        for table in up:
            gids = {u.gid}
            for name in direct[u.name]:
                gids.update(gid_of[n] for n in table[name])
            per_level.append(gids)
        if u.name == s.big_user:
            big_user_levels = [sorted(level) for level in per_level]
        users[u.name] = {
            "uid": u.uid,
            "gid": u.gid,
            "gecos": u.gecos,
            "home": u.home,
            "shell": u.shell,
            "dn": u.dn,
            "initgroups": sorted(per_level[0]),
            "initgroups_added": _added(per_level),
        }
    groups: dict[str, Any] = {}
    for g in directory.groups:
        groups[g.name] = {
            "gid": g.gid,
            "dn": g.dn,
            "members": list(g.members),
            "member_groups": list(g.member_groups),
            "members_added": _added([table[g.name] for table in down]),
        }
    return {
        "format": EXPECTED_FORMAT,
        "scenario": dataclasses.asdict(s),
        "primary_group": PRIMARY_GROUP,
        # Also inside "users"; repeated at the top so a reader (or a person with jq)
        # finds the headline numbers without walking 5,000 users.
        "big_user_initgroups": big_user_levels,
        "users": users,
        "groups": groups,
    }


class Expected:
    """The answers of one generated directory, as :func:`generate` stored them.

    Levels above the scenario's depth give the same answer as the depth itself: the
    graph has no longer paths.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        if data.get("format") != EXPECTED_FORMAT:
            raise ValueError(
                f"expected-answers format {data.get('format')!r} is not {EXPECTED_FORMAT};"
                " regenerate the file with python -m testing.gendir"
            )
        self._data = data
        self.scenario = Scenario(**data["scenario"])
        self._users: dict[str, dict[str, Any]] = data["users"]
        self._groups: dict[str, dict[str, Any]] = data["groups"]
        self._direct: dict[str, set[str]] = {name: set() for name in self._users}
        for name, g in self._groups.items():
            for member in g["members"]:
                self._direct[member].add(name)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Expected:
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh))

    @property
    def depth(self) -> int:
        return self.scenario.depth

    @property
    def schema(self) -> str:
        return self.scenario.schema

    @property
    def base_dn(self) -> str:
        return self.scenario.base_dn

    @property
    def big_user(self) -> str:
        return self.scenario.big_user

    @property
    def primary_gid(self) -> int:
        return PRIMARY_GID

    def user_names(self) -> list[str]:
        return list(self._users)

    def group_names(self) -> list[str]:
        return list(self._groups)

    def user(self, name: str) -> User:
        u = self._users[name]
        return User(
            name=name,
            uid=u["uid"],
            gid=u["gid"],
            gecos=u["gecos"],
            home=u["home"],
            shell=u["shell"],
            dn=u["dn"],
        )

    def group(self, name: str) -> Group:
        g = self._groups[name]
        return Group(
            name=name,
            gid=g["gid"],
            dn=g["dn"],
            members=tuple(g["members"]),
            member_groups=tuple(g["member_groups"]),
        )

    def direct_groups(self, user: str) -> set[str]:
        """Names of the user's direct groups (the primary group is not one)."""
        return set(self._direct[user])

    def initgroups(self, user: str, level: int) -> set[int]:
        """Every gid of the user at nesting ``level``, the primary gid included."""
        u = self._users[user]
        return set(u["initgroups"]).union(*u["initgroups_added"][: self._level(level)])

    def initgroups_reply(self, user: str, level: int) -> set[int]:
        """The gids an INITGR reply (``getent initgroups``) lists at nesting ``level``:
        the user's memberships only.  SSSD adds the primary gid only when the user is
        also an explicit member of that group (docs/compatibility.md §9.5), and the generated
        primary group lists no members; glibc's initgroups()/``id`` add it themselves,
        as :meth:`initgroups` does."""
        return self.initgroups(user, level) - {self._users[user]["gid"]}

    def members(self, group: str, level: int) -> set[str]:
        """User names that are members of ``group`` at nesting ``level``."""
        g = self._groups[group]
        return set(g["members"]).union(*g["members_added"][: self._level(level)])

    def _level(self, level: int) -> int:
        if level < 0:
            raise ValueError(f"nesting level {level} is negative")
        return min(level, self.depth)


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def _safe(value: str) -> bool:
    """RFC 2849 SAFE-STRING: ASCII without NUL/LF/CR, not starting with space, ':' or
    '<'.  Trailing spaces are also base64-encoded, since LDIF readers may strip them."""
    return (
        value.isascii()
        and not any(c in value for c in "\0\n\r")
        and not value.startswith((" ", ":", "<"))
        and not value.endswith(" ")
    )


class LdifWriter:
    """Streams LDIF entries to a text file, one ``entry()`` call at a time.

    No ``version: 1`` line, though RFC 2849 puts one first: slapadd 2.5 reads it as an
    attribute of a first entry and fails ("str2ad(version): attribute type undefined").
    """

    def __init__(self, fh: TextIO) -> None:
        self._fh = fh
        self.entries = 0

    def entry(self, dn: str, attrs: Iterable[tuple[str, str]]) -> None:
        lines = [self._line("dn", dn)]
        lines.extend(self._line(a, v) for a, v in attrs)
        if self.entries:
            self._fh.write("\n")
        self._fh.write("\n".join(lines) + "\n")
        self.entries += 1

    @staticmethod
    def _line(attr: str, value: str) -> str:
        if _safe(value):
            return f"{attr}: {value}"
        return f"{attr}:: {base64.b64encode(value.encode()).decode()}"


def _ldif_entries(directory: Directory) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    s = directory.scenario
    rdn_attr, _, rdn_value = s.base_dn.split(",", 1)[0].partition("=")
    if rdn_attr.lower() == "dc":
        yield (
            s.base_dn,
            [
                ("objectClass", "top"),
                ("objectClass", "dcObject"),
                ("objectClass", "organization"),
                ("dc", rdn_value),
                ("o", rdn_value),
            ],
        )
    else:
        yield s.base_dn, [("objectClass", "top"), ("objectClass", "organization"), ("o", rdn_value)]
    for ou in ("people", "groups"):
        yield (
            f"ou={ou},{s.base_dn}",
            [
                ("objectClass", "top"),
                ("objectClass", "organizationalUnit"),
                ("ou", ou),
            ],
        )
    for u in directory.users:
        yield (
            u.dn,
            [
                ("objectClass", "top"),
                ("objectClass", "person"),
                ("objectClass", "organizationalPerson"),
                ("objectClass", "inetOrgPerson"),
                ("objectClass", "posixAccount"),
                ("cn", u.gecos),
                ("sn", u.name),
                ("uid", u.name),
                ("uidNumber", str(u.uid)),
                ("gidNumber", str(u.gid)),
                ("homeDirectory", u.home),
                ("loginShell", u.shell),
                ("gecos", u.gecos),
            ],
        )
    for g in directory.groups:
        attrs: list[tuple[str, str]] = [("objectClass", "top")]
        if s.schema == "rfc2307bis" and (g.members or g.member_groups):
            attrs.append(("objectClass", "groupOfNames"))
        else:
            # groupOfNames requires `member`; a group without members (the primary
            # group) and every rfc2307 group take namedObject as structural class,
            # posixGroup being auxiliary in contrib/rfc2307bis.schema.
            attrs.append(("objectClass", "namedObject"))
        attrs += [("objectClass", "posixGroup"), ("cn", g.name), ("gidNumber", str(g.gid))]
        if s.schema == "rfc2307bis":
            attrs += [("member", s.group_dn(c)) for c in g.member_groups]
            attrs += [("member", s.user_dn(m)) for m in g.members]
        else:
            attrs += [("memberUid", m) for m in g.members]
        yield g.dn, attrs


def write_ldif(directory: Directory, path: Path) -> int:
    """Write the directory as LDIF (base entry, ous, users, groups); returns the entry
    count.  Written to a temporary name and renamed, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii", buffering=1 << 20) as fh:
        writer = LdifWriter(fh)
        for dn, attrs in _ldif_entries(directory):
            writer.entry(dn, attrs)
    tmp.replace(path)
    return writer.entries


def write_expected(directory: Directory, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(expected_data(directory), fh, separators=(",", ":"))
    tmp.replace(path)


@dataclass(frozen=True)
class Generated:
    """Where :func:`generate` put a scenario's files."""

    scenario: Scenario
    ldif: Path
    expected_path: Path

    def expected(self) -> Expected:
        return Expected.load(self.expected_path)


def paths(scenario: Scenario, outdir: Path) -> Generated:
    return Generated(
        scenario=scenario,
        ldif=outdir / f"{scenario.stem}.ldif",
        expected_path=outdir / f"{scenario.stem}.expected.json",
    )


def generate(scenario: Scenario, outdir: str | os.PathLike[str], reuse: bool = False) -> Generated:
    """Write the scenario's LDIF and expected answers into ``outdir`` (created).

    With ``reuse``, files already there for the very same scenario are kept (the JSON
    records the scenario, so a changed parameter regenerates)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    result = paths(scenario, out)
    if reuse and result.ldif.exists() and result.expected_path.exists():
        try:
            with open(result.expected_path, encoding="utf-8") as fh:
                data = json.load(fh)
            if data.get("format") == EXPECTED_FORMAT and data.get("scenario") == (
                dataclasses.asdict(scenario)
            ):
                return result
        except (OSError, ValueError):
            pass  # unreadable: regenerate
    directory = build(scenario)
    write_ldif(directory, result.ldif)
    write_expected(directory, result.expected_path)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testing.gendir",
        description="Write <OUTDIR>/<scenario>-<schema>.ldif and .expected.json.",
    )
    parser.add_argument("outdir", type=Path, metavar="OUTDIR")
    parser.add_argument(
        "--scenario",
        default="bigroupuser",
        choices=sorted([*PRESETS, "zoo"]),
        help="zoo: the hand-written directory of the shapes of §9.5 (testing/zoo.py)",
    )
    parser.add_argument(
        "--schema", action="append", choices=SCHEMAS, help="repeatable; default: rfc2307bis"
    )
    parser.add_argument(
        "--user-groups",
        type=int,
        metavar="N",
        help="sweep variant: the big user's direct groups (e.g. 250..4000)",
    )
    parser.add_argument(
        "--large-size",
        type=int,
        metavar="N",
        help="sweep variant: members of each large group (e.g. 1000..20000)",
    )
    parser.add_argument(
        "--users",
        type=int,
        metavar="N",
        help=f"the scale directory of N users ({BIGROUPUSER.users}..{SCALE_FULL_USERS},"
        " instead of --scenario): see gendir.scale",
    )
    parser.add_argument("--seed", type=int, help="override the scenario's RNG seed")
    parser.add_argument(
        "--people-rdn",
        choices=PEOPLE_RDNS,
        help="RDN attribute of people entries (cn: full name, as in Active Directory);"
        " the scenario gets a -cn suffix",
    )
    args = parser.parse_args(argv)

    if args.scenario == "zoo":
        from testing import zoo  # imports this module: import here, not at the top

        for path in zoo.generate(args.outdir):
            print(path, flush=True)
        return 0
    try:
        scenario = PRESETS[args.scenario] if args.users is None else scale(args.users)
    except ValueError as exc:
        parser.error(str(exc))
    if args.user_groups is not None or args.large_size is not None:
        scenario = sweep(
            args.user_groups if args.user_groups is not None else scenario.user_groups,
            args.large_size if args.large_size is not None else scenario.large_size,
            base=scenario,
        )
    if args.seed is not None:
        scenario = dataclasses.replace(scenario, seed=args.seed)
    if args.people_rdn is not None and args.people_rdn != scenario.people_rdn:
        name = scenario.name.removesuffix("-cn")
        if args.people_rdn == "cn":
            name += "-cn"
        scenario = dataclasses.replace(scenario, name=name, people_rdn=args.people_rdn)
    for schema in args.schema or ["rfc2307bis"]:
        start = time.perf_counter()
        try:
            result = generate(scenario.with_schema(schema), args.outdir)
        except ValueError as exc:
            parser.error(str(exc))
        took = time.perf_counter() - start
        print(f"{result.ldif}\n{result.expected_path}", flush=True)
        print(f"gendir: {result.scenario.stem} written in {took:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
