"""The revalidation above the first level by the stamps-only group sweep
(cached/ldap/above.py) through the whole path: ``id`` through glibc and libnss_sss, a
real ``cached serve``, a real slapd whose directory changes above the user's first
level between two ``cached cache -E``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cached.counters import VALIDATE_ABOVE, VALIDATE_FETCHED
from cached.ldap.sweep import SweepTunables
from testing.daemon import CachedDaemon
from testing.gendir import SMALL, Expected, generate
from testing.marks import requires_nss
from testing.slapd import Slapd

# Just over the first level at which the group sweep goes out (SweepTunables.groups_min):
# 260 direct groups under 11 -> 1 -> 1 parents (nest_fraction 0.2, 5 children each),
# and 30 groups that do not list the user, the sweep's answer (its bound: 260).
ABOVE = dataclasses.replace(
    SMALL,
    name="above",
    users=20,
    groups=290,
    user_groups=260,
    nest_fraction=0.2,
    children_per_parent=5,
    depth=3,
    random_members=3,
    large_groups=0,
    large_size=3,
)
NESTING = 2  # ldap_group_nesting_level's default: two levels above the direct groups
NO_MEMCACHE = {"SSS_NSS_USE_MEMCACHE": "NO"}


def _truth(exp: Expected, user: str, member_groups: dict[str, set[str]]) -> set[int]:
    """The user's gids as the directory says, with ``member_groups`` (group -> its
    member groups) in place of the generated edges: the direct groups, the groups
    within NESTING hops above them, the primary group."""
    parents: dict[str, set[str]] = {}
    for g, children in member_groups.items():
        for c in children:
            parents.setdefault(c, set()).add(g)
    reached = set(exp.direct_groups(user))
    level = set(reached)
    for _hop in range(NESTING):
        level = {p for g in level for p in parents.get(g, ())} - reached
        reached |= level
    return {exp.group(g).gid for g in reached} | {exp.primary_gid}


def _count(d: CachedDaemon, name: str, field: int = 0) -> float:
    return d.counters().get(name, [0, 0, 0])[field]


@requires_nss
def test_id_sees_changes_above_the_first_level_through_the_stamp_sweep(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A user of 260 direct groups (the group sweep goes out: groups_min 250). After
    ``cached cache -E`` an unchanged directory is revalidated above the first level
    by the stamp sweep alone (``be.validate.above``, no member value asked of
    slapd); a nesting edge added (a group gained two levels up) and one removed (a
    group lost) make the sweep differ from the record: ``id`` answers the new set
    exactly, and the walk's new record serves the revalidation after it."""
    assert ABOVE.user_groups >= SweepTunables().groups_min
    gen = generate(ABOVE, tmp_path_factory.mktemp("gen"))
    exp = gen.expected()
    sc, user = exp.scenario, exp.big_user
    edges = {g: set(exp.group(g).member_groups) for g in exp.group_names()}
    want = _truth(exp, user, edges)
    assert len(want) == 260 + 11 + 1 + 1  # two levels above, and the primary group

    with (
        Slapd(tmp_path_factory.mktemp("s"), gen.ldif, sc.base_dn) as s,
        CachedDaemon(tmp_path / "d", [s.uri], sc.base_dn) as d,
    ):

        def gids() -> set[int]:
            r = d.run_nss(["id", "-G", user], env=NO_MEMCACHE)
            assert r.returncode == 0, r.stderr + d.log_tail()
            return {int(g) for g in r.stdout.split()}

        def revalidated() -> tuple[set[int], int, list[str]]:
            """``id`` after ``cached cache -E``: its gids, how many revalidations took
            the sweep's record, and the searches that asked slapd for member values."""
            assert d.cli("cache", "-E").returncode == 0
            above, offset = _count(d, VALIDATE_ABOVE), s.log_offset()
            got = gids()
            members = [op.filter for op in s.searches(offset) if "member" in op.attrs]
            return got, int(_count(d, VALIDATE_ABOVE) - above), members

        assert gids() == want  # cold: the walk's group sweep recorded what it found
        fetched = _count(d, VALIDATE_FETCHED, 2)
        assert revalidated() == (want, 1, [])
        assert _count(d, VALIDATE_FETCHED, 2) == fetched  # nothing fetched whole

        # Gained: a level-1 group (above the first level) put into a group the user
        # does not reach, which it now reaches two levels up. Lost: a level-1 group's
        # member groups removed, so that the user no longer reaches it.
        nest1 = sorted(g for g in exp.group_names() if g.startswith("nest1-"))
        gained = next(g for g in sorted(exp.group_names()) if exp.group(g).gid not in want)
        lost = nest1[-1]
        s.ldap_modify(
            f"dn: {sc.group_dn(gained)}\nchangetype: modify\nadd: member\n"
            f"member: {sc.group_dn(nest1[0])}\n\n"
            f"dn: {sc.group_dn(lost)}\nchangetype: modify\ndelete: member\n"
            + "".join(f"member: {sc.group_dn(c)}\n" for c in sorted(edges[lost]))
            + "\n"
        )
        edges[gained].add(nest1[0])
        edges[lost] = set()
        now = _truth(exp, user, edges)
        assert exp.group(gained).gid in now and exp.group(lost).gid not in now
        got, above, members = revalidated()
        assert got == now, sorted(got ^ now)
        assert above == 0  # the sweep differed from the record: the walk searched
        assert members  # the two changed groups, fetched whole
        # Recorded again by that walk: the next revalidation is the sweep's alone.
        assert revalidated() == (now, 1, [])
