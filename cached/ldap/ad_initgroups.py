"""Initgroups on Active Directory as its own request: tokenGroups, and ASQ for a big
group's members (SSSD's ``sdap_async_initgroups_ad.c``).

One base search on the user returns the SIDs of every group it is in, transitively, as
the DC computes them; batched ``(|(objectSid=…)…)`` searches (objectSid is indexed)
fetch those groups with their members. The primary group, which ``member`` never
lists, is the domain SID + ``primaryGroupID``. BUILTIN SIDs (S-1-5-32-*) have no POSIX
id and are skipped, as SSSD skips them; so are groups without a gid. A refresh of an
initgroups the cache holds asks for the token's groups with their stamps only and
fetches whole only what changed (cached/ldap/ad.py's module doc, "validation before
transfer"). SIDs are read through a :class:`Sids` object (the AD hooks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cached.counters import NESTED_RESOLVE, VALIDATE, VALIDATE_FETCHED
from cached.dn import normalize_dn
from cached.ldap import refresh, save, stamps
from cached.ldap.batch import Job
from cached.ldap.controls import ASQ_OID
from cached.ldap.entries import GROUP, WALK, GroupEntry, Known, Member
from cached.ldap.exchange import Entry
from cached.ldap.sid import primary_group_sid
from cached.ldap.walk import Lookup, Walk
from cached.model import User

# Groups per (|(objectSid=…)…) search, whole or stamps only: Samba evaluates an OR of
# equality assertions in time growing faster than its length. bigroupuser's 2,086
# token groups on Samba (perf/adrefresh.py's DC, CPU seconds of the DC, two runs
# each): stamps only in ORs of 1,000 0.69-0.77 s, of 250 0.37-0.43, of 100 0.34-0.37;
# whole (cold), of 1,000 2.8-4.2 s, of 250 2.0-2.5.
SID_BATCH = 250


class Sids(Protocol):
    """How SIDs are read and asked for (cached/ldap/ad.py's AdHooks)."""

    builtin_prefix: str
    member_batch: int

    def sid(self, values: list[bytes]) -> str | None: ...
    def assertion(self, attr: str, sid: str) -> str: ...


def initgroups(
    w: Walk,
    sids: Sids,
    user: User,
    entries: list[Entry],
    on_stored: Callable[[str, list[str]], None] | None,
) -> bool:
    """initgroups of ``user`` (``entries``: its entry when searched) by tokenGroups,
    stored in one write; False when the user's entry is gone."""
    s = w.ctx.schema
    # One base search: every group the user is in, transitively, plus the primary
    # group by RID (AD's member attribute never lists it).
    tok = w.ctx.client.search(
        user.dn, "(objectClass=*)", ["tokenGroups", s.user_sid, s.user_primary_group],
        scope="base",
    )  # fmt: skip
    if not tok:
        return False
    got = {sid for v in tok[0].get("tokenGroups") if (sid := sids.sid([v])) is not None}
    user_sid = sids.sid(tok[0].get(s.user_sid))
    if user_sid is not None:
        primary = primary_group_sid(user_sid, tok[0].get(s.user_primary_group))
        if primary is not None:
            got.add(primary)
    # BUILTIN groups (S-1-5-32-545 Users, ...) have no POSIX id: skipped, as SSSD.
    wanted = sorted(sid for sid in got if not sid.startswith(sids.builtin_prefix))

    stored = w.ctx.cache.initgroups(user.name).value
    if not w.ctx.cfg.ignore_group_members and stored is not None and stored.fetched:
        # A refresh: stamps first, whole entries only for what changed (refresh.py;
        # the AD rule in cached/ldap/ad.py's module doc).
        refresh_token_groups(w, sids, user, entries, wanted)
        return True
    known: Known = {}
    with w.ctx.counters.timer(NESTED_RESOLVE):
        found = token_groups(w, sids, wanted)
        mine = {k for k, g in found.items() if g.posix}
        name_members(w, sids, found, known)
    save.store_initgroups(w, user.name, user, entries, found, known, mine, on_stored)
    return True


def asq_usable(w: Walk, unknown: int) -> bool:
    """ASQ for a group with ``unknown`` members to name: when the root DSE lists
    it (never sent critical otherwise), past ``ldap_deref_threshold`` (0 turns it
    off, as SSSD), and no base has a filter (an entry ASQ returns could not be
    checked against it, as on the deref path)."""
    s = w.ctx.schema
    info = w.ctx.client.info
    threshold = w.ctx.cfg.ldap_deref_threshold
    return (
        0 < threshold < unknown
        and info is not None
        and ASQ_OID in info.controls
        and not any(b.filter for b in s.user_bases + s.group_bases)
    )


def by_asq(
    w: Walk,
    g: GroupEntry,
    lookup: Lookup,
    known: Known,
) -> None:
    """AD has no deref control but ASQ: one base search on a big group returns the
    entries its ``member`` values name (SSSD uses it the same way, past
    ``ldap_deref_threshold``; measured in :meth:`_asq_big_groups`). Member groups
    to expand are left to the look-ups, which fetch their members too, and so are
    the members ASQ does not return: it reads the group's values again, later than
    the search that found it, so one replaced in between is missing from its answer
    yet named a user when the group was read (taking it for a dangling DN stored the
    old and new versions intersected; a dangling one costs a look-up, rare)."""
    s = w.ctx.schema
    if not asq_usable(w, len(lookup)):
        return
    entries = w.ctx.client.search(
        g.entry.dn, "(objectClass=*)", s.deref_attrs, scope="base", asq=s.group_member
    )
    for e in entries:
        k = normalize_dn(e.dn)
        if k not in lookup:
            continue
        # ASQ ignores the search bases: each entry is checked against them here.
        m = w.decoder.classify(e, k, True, w.keys)
        if isinstance(m, GroupEntry) and not w.decoder.in_bases(k, s.group_bases):
            known[k] = None
        elif isinstance(m, GroupEntry):
            if lookup[k][1] >= 0:
                continue  # to be fetched with its members
            known[k] = Member(GROUP if m.posix else WALK, m.name)
        else:
            known[k] = m
        del lookup[k]


def asq_big_groups(
    w: Walk, sids: Sids, found: dict[str, GroupEntry], budget: dict[str, int], known: Known
) -> None:
    """Name the members of the groups with the most unknown members by ASQ, one
    base search each, biggest first: a group qualifies while at least
    ``member_batch`` of its members (one batched search's worth) and half of them
    are still unknown, since ASQ returns every member, known or not. Measured on
    bigroupuser (Samba's CPU seconds, medians of 3 in two runs): ASQ over large01
    named its 5,000 members in 0.49-0.57 s, against 1.3 s for 20 batches of
    (name=…) and 0.68-0.81 s for a paged search of every user of the domain (whose
    cost grows with the directory: cached/ldap/sweep.py bounds it)."""
    lookup = w.unknown(found, budget, known)
    if len(lookup) < sids.member_batch:
        return
    unknown = {k: [mk for mk in g.member_keys if mk in lookup] for k, g in found.items()}
    for k in sorted(unknown, key=lambda k: len(unknown[k]), reverse=True):
        g = found[k]
        mine = {mk: lookup[mk] for mk in unknown[k] if mk in lookup}
        if len(mine) < sids.member_batch:
            break  # sorted: no later group qualifies either
        if 2 * len(mine) < len(g.member_keys):
            continue
        if not asq_usable(w, len(mine)):
            return
        by_asq(w, g, mine, known)
        for mk in unknown[k]:
            if mk in known:
                lookup.pop(mk, None)


# -- initgroups ------------------------------------------------------------------


def token_groups(w: Walk, sids: Sids, wanted: list[str]) -> dict[str, GroupEntry]:
    """The groups of these SIDs, whole (by DN key), in batched ``(objectSid=…)``
    searches: every one, POSIX or not, since a POSIX group's members are expanded
    through the non-POSIX groups between (walked through, as SSSD)."""
    s = w.ctx.schema
    found: dict[str, GroupEntry] = {}
    attrs = s.group_attrs(members=not w.ctx.cfg.ignore_group_members)
    n = SID_BATCH
    for i in range(0, len(wanted), n):
        part = "".join(sids.assertion(s.group_sid, sid) for sid in wanted[i : i + n])
        filt = f"(&(objectClass={s.group_oc})(|{part}))"
        for e in w.searcher.search(s.group_bases, filt, attrs):
            g = w.group_entry(e, WALK)
            if g is not None:
                found.setdefault(normalize_dn(e.dn), g)
    return found


def name_members(w: Walk, sids: Sids, found: dict[str, GroupEntry], known: Known) -> None:
    """Name every member of the fetched token groups (budget 0: member groups
    outside the token are named, not fetched; their parents are stored expired,
    §6.3 step 4): the big groups' by ASQ, the rest in batches (the closure sweeps
    the user bases first when thousands remain)."""
    if w.ctx.cfg.ignore_group_members:
        return
    budget = {k: 0 for k in found}
    asq_big_groups(w, sids, found, budget, known)
    w.closure(found, budget, known, [])


def token_stamps(w: Walk, sids: Sids, wanted: list[str]) -> dict[str, GroupEntry]:
    """The groups of these SIDs with their stamps only (stamps.stamp_attrs: no
    member value), by DN key, POSIX or not; the batches unpaged, so that they go
    out together (answers of one small entry per SID; a size limit cuts them as
    it cuts paged ones, and the split handles it). Windows caps an unpaged answer
    at MaxPageSize (1,000 by default); Samba 4.17 caps none by count (measured:
    all 1,609 users of an unpaged search with MaxPageSize=5 set and the DC
    restarted, and with a request sizeLimit of 5), only a reply past 256 MiB, so
    the split is tested on slapd's sizelimit (tests/integration/test_refresh.py,
    test_exactness.py), not here."""
    s = w.ctx.schema
    attrs = stamps.stamp_attrs(s)
    items = [("g", sids.assertion(s.group_sid, sid)) for sid in wanted]
    n = SID_BATCH
    jobs: list[Job] = [
        (s.group_bases, items[i : i + n], attrs, None) for i in range(0, len(items), n)
    ]
    out: dict[str, GroupEntry] = {}
    for entries in w.searcher.split(jobs, w.searcher.round_filter, paged=False):
        for e in entries:
            g = w.group_entry(e, WALK)
            if g is not None:
                out.setdefault(normalize_dn(e.dn), g)
    return out


def refresh_token_groups(
    w: Walk, sids: Sids, user: User, entries: list[Entry], wanted: list[str]
) -> None:
    """initgroups of ``user`` whose groups the cache holds, validated before
    transfer (refresh.py, the AD rule in the module doc): the token's groups
    with their stamps only; the POSIX ones whose stamp differs from the stored one
    (or that are new, or due a whole read) fetched whole by SID with the
    non-POSIX token groups they list, and their members named as the cold path
    names them; the rest touched. Stored in one write (refresh.store_validated)."""
    s = w.ctx.schema
    with w.ctx.counters.timer(NESTED_RESOLVE):
        held = token_stamps(w, sids, wanted)
    posix = {k: g for k, g in held.items() if g.posix}
    names = [g.name for g in posix.values()]
    stored = w.ctx.cache.group_stamps(names)
    # One read of the timestamp store each for all: due a whole read, or `-E`
    # invalidated (stamps.distrusted: AD's stamps miss a deleted member).
    due = stamps.due(w.ctx, names)
    w.from_entries = bool(due)  # a whole read names members from their entries
    late = due | stamps.distrusted(w.ctx, names)
    stale = {
        k for k, g in posix.items() if not stamps.unchanged(g, stored.get(g.name)) or g.name in late
    }
    stale |= refresh.stale_below(w, posix, stale, stored)
    w.ctx.counters.add(VALIDATE, 1, 0.0, len(posix))
    full: dict[str, GroupEntry] = {}
    known: Known = {}
    if stale:
        with w.ctx.counters.timer(NESTED_RESOLVE):
            want = [held[k] for k in sorted(stale)]
            while want:
                got = token_groups(
                    w, sids, [sid for g in want if (sid := sids.sid(g.entry.get(s.group_sid)))]
                )
                full.update((k, g) for k, g in got.items() if k not in full)
                # A token group a fetched group lists, fetched whole too, as the cold
                # path fetches every token group: a non-POSIX one's members count as
                # the lister's (walked through), and a POSIX one only named would leave
                # the lister stored incomplete (expired, no stamp: §6.3 step 4), to be
                # fetched again at every refresh.
                listed = {mk for g in got.values() for mk in g.member_keys}
                want = [held[k] for k in sorted(listed)
                        if k in held and k not in full]  # fmt: skip
            name_members(w, sids, full, known)
    w.ctx.counters.add(VALIDATE_FETCHED, 0, 0.0, len(full))
    refresh.store_validated(w, user, entries, posix, stale, full, known, set(posix))
