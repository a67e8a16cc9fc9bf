"""Validation before transfer: the refresh of an expired initgroups asks for stamps first.

A refresh of a user's groups that the cache already holds (the next ``id`` after
``cached cache -E``, or the expiry of the entries) walks the same batched searches as a
cold initgroups (docs/ARCHITECTURE.md §4) but asks for no member values and no deref
control: each group comes with its name, gid, object class, ``modifyTimestamp`` and
``entryCSN`` (or the configured USN) only. The memberships found that way are exact —
the walk up from the user *is* the answer of initgroups — and only the groups whose
stamp differs from the stored one, or that the cache does not hold, are fetched again
with their members (by name, matched back by DN) and their member groups below them;
the others get fresh timestamps only — but a group whose answer is expanded from a
stored member group the walk did not see (one the user is not in) is touched only when
that group's stamp is unchanged too (``stale_below``). Groups the user left are re-read
as on the full path (``save.vanished``): removed memberships, deleted and
renamed groups.

A group lookup of a group the cache holds (``getent group X`` after ``-E``) is
validated likewise (``refresh_group``): the stamps of the group and of the stored
groups its answer is expanded from, in one round trip; all unchanged, all touched;
else the lookup fetches whole.

For a user in hundreds of groups, the walk above the first level is taken from one
stamps-only group sweep when a record shows that nothing there changed
(cached/ldap/above.py): no OR of group DNs.

The stamps are believed under the trust rule of cached/ldap/stamps.py.
"""

from __future__ import annotations

from cached.cache.cache import Stamped
from cached.counters import (
    LDAP_DECODE,
    NESTED_LEVELS,
    NESTED_RESOLVE,
    VALIDATE,
    VALIDATE_ABOVE,
    VALIDATE_FETCHED,
)
from cached.dn import normalize_dn
from cached.ldap import above, save
from cached.ldap.batch import Job
from cached.ldap.entries import WALK, GroupEntry, Known, entry_names
from cached.ldap.exchange import Entry
from cached.ldap.schema import BATCH, assertions
from cached.ldap.stamps import distrusted, due, stamp_attrs, unchanged
from cached.ldap.walk import Walk
from cached.model import User


def _level(
    p: Walk,
    items: list[tuple[str, str]],
    attrs: list[str],
    extra: list[Job],
    paged: bool,
    sweep: above.Pending | None = None,
) -> tuple[list[Entry], list[list[Entry]]]:
    """One level's searches under the group bases: ORs of up to BATCH walk-up
    assertions, split when a server limit cuts an answer (as the cold walk's), and
    the ``extra`` jobs (one entry each, never paged) in the same round trip, with the
    ``sweep`` (sent first; its answers put in it). Returns (the level's entries, the
    extra jobs' entries, each)."""
    jobs: list[Job] = [
        (p.ctx.schema.group_bases, items[i : i + BATCH], attrs, None)
        for i in range(0, len(items), BATCH)
    ]
    flags = [paged] * len(jobs) + [False] * len(extra)
    also = (sweep.searches, sweep.answers) if sweep is not None else None
    got = p.searcher.split(jobs + extra, p.searcher.round_filter, flags, also)
    return [e for entries in got[: len(jobs)] for e in entries], got[len(jobs) :]


def walk_stamps(
    p: Walk,
    user: User,
    primary: int | None = None,
    via: dict[str, list[set[str]]] | None = None,
) -> tuple[dict[str, GroupEntry], set[str], GroupEntry | None]:
    """The groups above ``user`` (rfc2307bis: level by level to the nesting level, as
    the full walk; rfc2307: the ``memberUid`` search), stamps only; with ``primary``,
    the stamp of the group of that gid too, searched alongside the first level (one
    round trip: ``search_many``), apart so that its entry is not taken for a
    membership. Returns ({DN key: group, POSIX or walked through}, keys of the POSIX
    ones, the primary group or None). ``via``, when given, gets for each group found
    above the first level the DN keys of each level's searched groups it was found
    by (it lists one of them at least: :func:`unexplained`)."""
    s = p.ctx.schema
    attrs = stamp_attrs(p.ctx.schema)
    found: dict[str, GroupEntry] = {}
    extra: list[Job] = []
    if primary is not None:
        extra.append((s.group_bases, [("x", p.hooks.group_by_gid_filter(primary))], attrs, None))
    if not s.bis:
        walk: list[Job] = [(s.group_bases, [("x", s.groups_with_members([user.name]))],
                             attrs, None)]  # fmt: skip
        got = p.searcher.split(walk + extra, p.searcher.round_filter, [True] + [False] * len(extra))
        for e in got[0]:
            g = p.group_entry(e)
            if g is not None:
                found.setdefault(normalize_dn(e.dn), g)
        return found, set(found), _primary(p, got[1:], primary)
    if via is None:
        via = {}
    mine: set[str] = set()
    user_key = normalize_dn(user.dn)
    walked = {user_key}
    up = [user.dn]
    level = 0
    prim: GroupEntry | None = None
    # The stamps-only group sweep, with the first level (cached/ldap/above.py); what
    # the walk finds above the first level, to record: level first found at, and
    # the levels whose searches returned each group.
    sweep = above.send(p, user.dn, user.name)
    live: dict[str, GroupEntry | None] | None = None
    first: dict[str, GroupEntry] = {}
    found_at: dict[str, int] = {}
    via_at: dict[str, list[int]] = {}
    with p.ctx.counters.timer(NESTED_RESOLVE):
        while up:
            nxt: list[str] = []
            items = [("u", a) for a in assertions(s.group_member, up)]
            # The first level (the user's direct groups: thousands for bigroupuser)
            # is paged; the levels above, the groups that hold those, are answers of
            # a few entries per batch: unpaged, the batches of a level go out
            # together instead of one after another (measured on bigroupuser: the
            # second batch of level 1 waited ~15 ms for the first). A size limit
            # cuts them as it cuts paged ones (slapd: size.prtotal follows the
            # hard limit), and the split handles it.
            entries, rest = _level(p, items, attrs, extra, level == 0, sweep if not level else None)
            if extra:
                prim, extra = _primary(p, rest, primary), []
            searched = {normalize_dn(dn) for dn in up} if level else None
            for e in entries:
                k = normalize_dn(e.dn)
                if searched is not None:
                    via.setdefault(k, []).append(searched)
                    via_at.setdefault(k, []).append(level)
                g = p.group_entry(e, WALK)
                if g is None:
                    continue
                found.setdefault(k, g)
                if g.posix:
                    mine.add(k)
                if k not in walked:
                    walked.add(k)
                    nxt.append(e.dn)
                    if level:
                        found_at[k] = level
                    else:
                        first[k] = g
            p.ctx.counters.add(NESTED_LEVELS, 1, 0.0, 1)
            level += 1
            up = nxt if level <= s.nesting_level else []
            if level == 1 and sweep is None and up:
                sweep = above.sweep_alone(p, user.dn, len(first))
            if sweep is not None and level == 1:
                live = above.read(p, user.name, sweep)
                same = above.replay(p, sweep, live, user_key, first) if live is not None else None
                if same is not None:
                    # Nothing above the first level can have changed: its groups are
                    # the sweep's, no OR searched.
                    for k, g in same[0].items():
                        found.setdefault(k, g)
                        if g.posix:
                            mine.add(k)
                    via.update(same[1])
                    p.ctx.counters.add(VALIDATE_ABOVE, 1, 0.0, len(same[0]))
                    return found, mine, prim
    if live is not None and sweep is not None:
        above.record(p, user.name, user_key, first, live, found_at,
                     {k: tuple(v) for k, v in via_at.items()})  # fmt: skip
    return found, mine, prim


def _primary(p: Walk, got: list[list[Entry]], gid: int | None) -> GroupEntry | None:
    """The first POSIX group of ``gid`` among the answers (as the full path's [:1])."""
    for entries in got:
        for e in entries:
            g = p.group_entry(e)
            if g is not None and g.gid == gid:
                return g
    return None


def refresh_initgroups(p: Walk, user: User, entries: list[Entry], primary: int | None) -> None:
    """initgroups of ``user`` whose groups the cache holds: validate, then fetch only
    what changed (module doc). Stores like the full path, in one write. ``primary``:
    the user's primary gid when its group is missing or expired in the cache (§6.3
    step 5), validated by stamp like the groups of the walk."""
    s = p.ctx.schema
    via: dict[str, list[set[str]]] = {}
    walk, mine, prim = walk_stamps(p, user, primary, via)
    posix = {k: g for k, g in walk.items() if g.posix}
    if prim is not None:
        # Validated like the others: `id` asks for it next, and finds it valid.
        posix.setdefault(normalize_dn(prim.entry.dn), prim)
    names = [g.name for g in posix.values()]
    stored = p.ctx.cache.group_stamps(names)
    late = due(p.ctx, names)
    p.from_entries = bool(late)  # a whole read names members from their entries
    stale = {k for k, g in posix.items()
             if not unchanged(g, stored.get(g.name)) or g.name in late}  # fmt: skip
    stale |= unexplained(p, walk, posix, stale, stored, via)
    stale |= stale_below(p, posix, stale, stored)

    p.ctx.counters.add(VALIDATE, 1, 0.0, len(posix))
    # The changed and new groups, whole, by name (a hint, matched back by DN), with
    # their member groups below them as a group lookup fetches them (§6.2).
    full: dict[str, GroupEntry] = {}
    known: Known = {}
    for g in p.groups_by_name(sorted({posix[k].name for k in stale})):
        k = normalize_dn(g.entry.dn)
        if k in stale:
            full.setdefault(k, g)
    if full and s.bis and not p.ctx.cfg.ignore_group_members:
        with p.ctx.counters.timer(NESTED_RESOLVE):
            p.closure(full, dict.fromkeys(full, s.nesting_level), known, [])
    # Groups fetched with their members: the changed and new ones and the member
    # groups below them.
    p.ctx.counters.add(VALIDATE_FETCHED, 0, 0.0, len(full))
    store_validated(p, user, entries, posix, stale, full, known, mine)


def unexplained(
    p: Walk,
    walk: dict[str, GroupEntry],
    posix: dict[str, GroupEntry],
    stale: set[str],
    stored: dict[str, Stamped],
    via: dict[str, list[set[str]]],
) -> set[str]:
    """The groups of a validated initgroups (by DN key) that the walk found above a
    level of groups none of which their stored record lists: found by a search for
    groups listing one of those DNs, they list one, so the record misses a member
    group — a value that named no group when it was stored and names one now (an
    entry made a group, or a group created at a dangling DN), which the group's own
    stamp does not see. Fetched whole, the parent names it; touched, it kept its old
    answer while ``id`` of a member, walking up through the new group, listed it.
    Local, no search; a group that also lists one of
    its stored member groups on that level is not seen (docs/compatibility.md §9.2)."""
    keyof = p.ctx.cache.key
    dn_of = {keyof(g.name): k for k, g in walk.items() if g.name}
    out = set()
    for k, levels in via.items():
        if k in stale or k not in posix or (t := stored.get(posix[k].name)) is None:
            continue
        below = {dn_of.get(keyof(n)) for n in t[4]}
        if any(below.isdisjoint(searched) for searched in levels):
            out.add(k)
    return out


def stale_below(
    p: Walk, posix: dict[str, GroupEntry], stale: set[str], stored: dict[str, Stamped]
) -> set[str]:
    """The groups of a validated initgroups (``posix``, by DN key; ``stale`` those to
    fetch already) whose answer is expanded from a stored member group the walk did
    not validate — one the user is not in — that changed, is gone, or cannot be gone
    by (no trusted stamp, due a whole read, distrusted): they are fetched whole too,
    with their member groups. A group's own stamp covers its member list only; its
    member groups' stamps cover theirs, as refresh_group validates a group lookup.
    Touched on its own stamp, a group listing a changed one stayed VALID with the
    old members (a member removed from a nested group still listed by its parent
    after ``-E``). One round trip, only when such member groups exist
    (none on bigroupuser: every member group of its groups is one of the user's)."""
    keyof = p.ctx.cache.key
    walked = {keyof(g.name) for g in posix.values()}
    above: dict[str, list[str]] = {}  # DN key -> the member groups the walk did not see
    for k, g in posix.items():
        t = stored.get(g.name)
        if k not in stale and t is not None and t[4]:
            extra = [m for m in t[4] if keyof(m) not in walked]
            if extra:
                above[k] = extra
    if not above:
        return set()
    # Each such member group with the stored groups below it, itself first (the
    # records its answer is expanded from; None: one is not stored).
    below = {m: p.ctx.cache.group_closure(m) for m in {m for ms in above.values() for m in ms}}
    names = sorted({n for c in below.values() if c for n in c if keyof(n) not in walked})
    bad = {keyof(n) for n in _not_unchanged(p, names)} if names else set()
    # Each member group judged once, however many groups list it (linear: 2,000
    # groups listing one with a closure of 500 took 0.35 s judged per parent).
    changed = {m: c is None or any(keyof(n) in bad for n in c) for m, c in below.items()}
    return {k for k, ms in above.items() if any(changed[m] for m in ms)}


def _not_unchanged(p: Walk, names: list[str]) -> set[str]:
    """Those of these stored groups a refresh may not touch on their stamps: no trusted
    stamp, due a whole read or distrusted, or changed, renamed or gone on the server
    (their stamps searched by name, in one round trip, as refresh_group's)."""
    stored = p.ctx.cache.group_stamps(names)
    out = {n for n in names if not (t := stored.get(n)) or not t[0]}
    out |= due(p.ctx, names) | distrusted(p.ctx, names)
    asked = [n for n in names if n not in out]
    got = (
        p.searcher.split(_by_name(p, asked), p.searcher.round_filter, paged=False) if asked else []
    )
    same = _unchanged_keys(p, got, {p.ctx.cache.key(n): stored[n] for n in asked})
    p.ctx.counters.add(VALIDATE, 1, 0.0, len(names))
    return {n for n in names if n in out or p.ctx.cache.key(n) not in same}


def _by_name(p: Walk, names: list[str]) -> list[Job]:
    """Stamp searches of these groups by name: unpaged, they go out together (one
    round trip), answers of one entry per name; a size limit cuts them as it cuts
    paged ones, and the split handles it."""
    return p.searcher.jobs_by_name(names, stamp_attrs(p.ctx.schema))


def _unchanged_keys(
    p: Walk, answers: list[list[Entry]], stored: dict[bytes, Stamped]
) -> set[bytes]:
    """Keys of the stored groups (``stored``, by key) that the entries of ``answers``
    show unchanged: by name, then the stored stamp, gid and DN (the entry the stored
    group was read from)."""
    same: set[bytes] = set()
    for e in (e for entries in answers for e in entries):
        g = p.group_entry(e)
        if g is not None and (t := stored.get(k := p.ctx.cache.key(g.name))) and unchanged(g, t):
            same.add(k)
    return same


def stored_closure(p: Walk, name: str | None, gid: int | None) -> list[str] | None:
    """The stored group a lookup by ``name`` or ``gid`` finds, and the stored groups
    below it its answer is expanded from (``DomainCache.group_closure``); None when
    it is not held whole."""
    if name is not None:
        view = p.ctx.cache.group_by_name(name).value
    else:
        view = p.ctx.cache.group_by_gid(gid).value if gid is not None else None
    return p.ctx.cache.group_closure(view.name) if view is not None else None


def refresh_group(p: Walk, filt: str, name: str | None, names: list[str]) -> bool:
    """A group lookup (by ``name`` or gid; ``filt`` is the lookup's filter) of a
    group the cache holds: validate it and the stored groups its answer is expanded
    from (``names``, from :func:`stored_closure`: its member groups down to the
    nesting level, §6.2) by their stamps, in one round trip, and touch the group when
    every one is unchanged — the group's own stamp covers its member list, each
    member group's covers its own. Only the group: a member group's own answer is
    expanded down to the nesting level from *it*, through groups below those
    validated here (touched, a member group would answer VALID with a member removed
    from a group one level below what was checked).
    Returns False when the caller must fetch whole
    (no member value was fetched): a stamp not stored under the trust rule, or a
    group changed, gone or renamed. Every entry is read through ``Walk.group_entry``,
    as the store reads it: on AD that qualifies ``uSNChanged`` with the answering
    DC's invocationId, or drops the stamp on a connection not identified
    (cached/ldap/ad.py), so only the same DC's stamp compares equal."""
    s = p.ctx.schema
    stored = p.ctx.cache.group_stamps(names)
    if any(not (t := stored.get(n)) or not t[0] for n in names) or distrusted(p.ctx, names):
        return False  # nothing trusted to compare with
    by_key = {p.ctx.cache.key(n): n for n in names}
    jobs: list[Job] = [(s.group_bases, [("x", filt)], stamp_attrs(p.ctx.schema), None)]
    jobs += _by_name(p, names[1:])  # in the same round trip
    got = p.searcher.split(jobs, p.searcher.round_filter, paged=False)
    p.ctx.counters.add(VALIDATE, 1, 0.0, len(names))
    # The group the lookup finds, picked as the full path picks it (provider._group).
    top = None
    for e in got[0]:
        g = p.group_entry(e)
        if g is not None and (
            name is None or p.ctx.cache.key(name) in {p.ctx.cache.key(n) for n in _names_of(p, e)}
        ):
            top = g
            break
    first = p.ctx.cache.key(names[0])
    same = _unchanged_keys(p, got[1:], {k: stored[n] for k, n in by_key.items() if k != first})
    if top is not None and p.ctx.cache.key(top.name) == first and unchanged(top, stored[names[0]]):
        same.add(first)
    if len(same) != len(by_key):
        p.ctx.counters.add(VALIDATE_FETCHED, 0, 0.0, 1)
        return False
    with p.ctx.cache.write() as batch:
        p.ctx.cache.touch_group(batch, names[0], stored[names[0]][0], stored[names[0]][1])
    return True


def _names_of(p: Walk, e: Entry) -> list[str]:
    """Every value of a group entry's name attribute (any of them finds it)."""
    return entry_names(e, p.ctx.schema.group_name)


def store_validated(
    p: Walk,
    user: User,
    entries: list[Entry],
    posix: dict[str, GroupEntry],
    stale: set[str],
    full: dict[str, GroupEntry],
    known: Known,
    mine: set[str],
) -> None:
    """Store a validated refresh of ``user``'s groups in one write
    (:func:`refresh_initgroups`, and the AD provider's tokenGroups refresh in
    cached/ldap/ad.py): ``posix``, the user's groups as the stamp searches read them (by
    DN key); ``stale``, those whose stamp did not match; ``full``, what was fetched
    whole for them (with the groups below them); ``mine``, the keys of ``posix`` that
    are the user's list. The groups neither stale nor fetched whole are touched; a stale
    group not found again (renamed or deleted since its stamp was read) stays one of the
    user's groups, nothing of it stored; the groups the user left are re-read
    (``save.vanished``)."""
    found = dict(full)
    stamp_only = {k for k in posix if k not in stale and k not in found}
    lost = {k for k in stale if k not in full}
    found.update((k, posix[k]) for k in stamp_only | lost)
    skip = stamp_only | lost
    gone = save.vanished(p, user.name, found, known)
    with p.ctx.counters.timer(LDAP_DECODE), p.ctx.cache.write() as batch:
        if entries:
            save.store_users(p, batch, entries)
        save.store_groups(p, batch, {k: g for k, g in found.items() if k not in skip}, known)
        for k in stamp_only:
            g = posix[k]
            p.ctx.cache.touch_group(batch, g.name, g.modstamp, g.usn)
        for g_name in gone:
            p.ctx.cache.delete_group(batch, g_name)
        # The version stored (``found`` holds every key of ``posix``): a group fetched
        # whole since its stamp was read (renamed in between) is listed under the name
        # it is stored under.
        listed = [found[k] for k in mine]
        gids = {user.gid} | {g.gid for g in listed}
        p.ctx.cache.put_initgroups(batch, user.name, gids, [g.name for g in listed])
