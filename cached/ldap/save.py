"""Storing what a request read: users, groups with their members named, a user's
initgroups list and the groups a user left, each request in one cache write.

A group whose stamp (modifyTimestamp and CSN/USN) matches a stored, trusted one is
only touched (the shortcut of §3.4); stamps are stored under the trust rule of
cached/ldap/stamps.py. A group whose member could not be named because the group
changed while the request ran makes the request run again (ChangedDuringRequest).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from itertools import filterfalse

from cached.cache.cache import Stamped
from cached.cache.records import EXPIRED
from cached.cache.writer import WriteBatch
from cached.config import SearchBase
from cached.counters import LDAP_DECODE, NESTED_COMPARE, NESTED_RESOLVE
from cached.dn import normalize_dn
from cached.ldap import stamps
from cached.ldap.entries import (
    GROUP,
    UNSEEN,
    USER,
    GroupEntry,
    Known,
    entry_names,
    group_aliases,
    limited,
    names_each,
)
from cached.ldap.exchange import Entry
from cached.ldap.schema import first
from cached.ldap.walk import Walk
from cached.model import User

log = logging.getLogger(__name__)

# Groups per early commit of an initgroups answer (early_commits): the responder's
# prefill of one chunk takes about as long as the backend's encoding of the next.
EARLY_CHUNK = 512


@dataclass(slots=True)
class Scan:
    """One fetched group's member list, read once for storing (scan)."""

    users: dict[str, None] = field(default_factory=dict)  # direct member users' names
    groups: dict[str, None] = field(default_factory=dict)  # direct member POSIX groups
    children: list[str] = field(default_factory=list)  # keys of the member groups
    walk: list[str] = field(default_factory=list)  # fetched non-POSIX member groups
    unknown: bool = False  # a member was never looked up
    through: bool = False  # a non-POSIX member group: walked through, as SSSD


class ChangedDuringRequest(Exception):
    """A group read by this request changed before its members were all named: the
    request runs again (LdapProvider._runs)."""


# Times a request runs again for a group that changed under it (changed_since_read);
# the last run stores such a group incomplete (expired, no stamp) rather than fail.
CHANGED_RETRIES = 2


def changed_since_read(w: Walk, found: dict[str, GroupEntry]) -> set[str]:
    """The fetched groups, among those listing a member the look-ups found nowhere
    (``p.missing``), whose entry changed since this request read it.

    Such a member was looked up after its group was read. When it was renamed or
    moved in between, a server with referential integrity moved the group's value
    along: the old DN names nothing, yet the member is in both of the group's
    versions, and dropping it stores a member list the group never had. Read again,
    the group tells: unchanged, the value dangles (deleted member, no referential
    integrity) and dropping it is right. Compared by CSN/USN where the server has
    one, else by member values: AD keeps ``member`` in step with a renamed member
    without moving the group's ``uSNChanged``, and ``modifyTimestamp`` has one-second
    resolution. One round trip, by name in batches, matched back by DN (a group
    renamed or deleted since counts as changed); nothing when no member was missing."""
    missing = w.missing
    suspects = {k: g for k, g in found.items() if not missing.isdisjoint(g.member_keys)}
    if not suspects:
        return set()
    s = w.ctx.schema
    by_values = s.ad or not all(g.usn for g in suspects.values())
    attrs = stamps.stamp_attrs(s) + ([s.group_member] if by_values else [])
    jobs = w.searcher.jobs_by_name(sorted({g.name for g in suspects.values() if g.name}), attrs)
    # A non-POSIX group without a name (walked through): its own base search.
    jobs += [((SearchBase(g.entry.dn, "base"),), [("x", "(objectClass=*)")], attrs, None)
             for g in suspects.values() if not g.name]  # fmt: skip
    again: dict[str, Entry] = {}
    for entries in w.searcher.split(jobs, w.searcher.round_filter, paged=False):
        for got in entries:
            again.setdefault(normalize_dn(got.dn), got)
    changed = set()
    for k, g in suspects.items():
        now = again.get(k)
        if now is None:
            changed.add(k)  # renamed or deleted since
        elif by_values:
            if set(w.keys.of(now.get(s.group_member))) != set(g.member_keys):
                changed.add(k)
        elif (first(now.get(s.group_modstamp)), first(now.get(s.group_usn))) != (g.modstamp, g.usn):
            changed.add(k)
    return changed


def store_users(w: Walk, batch: WriteBatch, entries: list[Entry]) -> User | None:
    found = None
    s = w.ctx.schema
    keys: set[bytes] = set()
    for e in entries:
        u = w.decoder.to_user(e)
        if u is None:
            continue
        key = w.ctx.cache.key(u.name)
        if key in keys:
            # Two users whose names differ only in case, in a domain that folds
            # case: the first in the server's answer is the user, as for
            # the initgroups' user (as SSSD 2.8.2, which answers the first too; the
            # last stored taking the name, a login would get one user's uid with the
            # other's groups).
            limited.log(("same-name-user", key), logging.WARNING,
                        "%s: another user of this answer is named %r too (names "
                        "differing only in case); the first is used", e.dn, u.name)  # fmt: skip
            continue
        keys.add(key)
        usn = first(e.get(s.user_usn)) if s.user_usn else ""
        w.ctx.cache.put_user(
            batch, u, first(e.get(s.user_modstamp)), usn, aliases=entry_names(e, s.user_name)
        )
        if found is None:
            found = u
    return found


def scan(found: dict[str, GroupEntry], known: Known) -> dict[str, Scan]:
    """Read every fetched group's member list once (bigroupuser: 44,000 member
    values) into what storing needs: the direct member users and POSIX groups, the
    member groups, whether a member is still unknown, and the non-POSIX member
    groups walked through. A member fetched as a group counts as that
    group, whatever else named it. Four passes over the lists were 20 % of a cold
    initgroups's storing (py-spy, perf.readpath). The member users, most of the
    values, are named in C (a map over a dict of the users); the loop reads the
    rest, usually none."""
    out: dict[str, Scan] = {}
    get, fget = known.get, found.get
    users = {mk: m.name for mk, m in known.items() if m is not None and m.kind is USER}
    for mk in found.keys() & users.keys():
        del users[mk]  # fetched as a group: counts as the group
    is_user, user_name = users.__contains__, users.__getitem__
    for k, g in found.items():
        sc = Scan()
        keys = g.member_keys
        try:
            # Every member a user (bigroupuser's 2,000 direct groups): one pass.
            sc.users = dict.fromkeys(map(user_name, keys))
            out[k] = sc
            continue
        except KeyError:
            rest = list(filterfalse(is_user, keys))
            sc.users = dict.fromkeys(map(user_name, filter(is_user, keys)))
        for mk in rest:
            f = fget(mk)
            if f is not None:
                sc.children.append(mk)
                if f.posix:
                    sc.groups[f.name] = None
                else:
                    sc.through = True
                    sc.walk.append(mk)
                continue
            m = get(mk, UNSEEN)
            if m is None:
                continue  # names nothing: not a member
            if m is UNSEEN:
                sc.unknown = True
            elif m.kind is USER:
                sc.users[m.name] = None
            else:
                sc.children.append(mk)
                if m.kind is GROUP:
                    sc.groups[m.name] = None
                else:
                    sc.through = True  # walked through, not fetched: adds nothing
        out[k] = sc
    return out


def members(
    w: Walk, k: str, g: GroupEntry, scans: dict[str, Scan]
) -> tuple[Collection[str], Collection[str], list[list[str]]]:
    """(member user names, member POSIX group names) of ``g``. A non-POSIX member
    group is walked through: its members count one level deeper (as SSSD), each
    walked group at the depth it is first reached. The scan's own dicts when
    nothing is walked through (the caller only reads them): a dict is unique,
    so the record's encoding sorts it with no set built (encode_group_of). Third:
    the users reached only through walked groups, by depth (deep[0]: one level
    down): a parent that expands this group from levels above must leave the
    deeper ones out (records._pack_group, cache._expand)."""
    s = w.ctx.schema
    if w.ctx.cfg.ignore_group_members:
        return (), (), []
    if not s.bis:
        return names_each(g.entry.get(s.group_member)), (), []
    levels = s.nesting_level
    sc = scans[k]
    if levels <= 0:
        return sc.users, (), []
    if not sc.walk:
        return sc.users, sc.groups, []
    users, groups = dict(sc.users), dict(sc.groups)
    # Through a walked group, the POSIX groups below count at their depth too,
    # flattened here: named in the record, a member group is expanded as one
    # level below this group, and the walked levels above it are lost (once a
    # lookup of such a group stored its own member groups, this group would list
    # members past the nesting level). Breadth first, so each
    # group counts at the depth it is first reached.
    seen = {k}
    queue: deque[tuple[str, int]] = deque()
    for child in sc.walk:
        if child not in seen:
            seen.add(child)
            queue.append((child, 1))
    # Each user at the depth it is first reached (breadth first: its least), so
    # that a parent expanding this group from ``hop`` levels above keeps only
    # those within its own nesting level (after an initgroups stored both, a parent
    # would list a walked group's users one level past the nesting level, where a
    # cold lookup of it does not).
    deep: list[list[str]] = [[] for _ in range(levels)]
    while queue:
        cur, depth = queue.popleft()
        cs = scans[cur]
        layer = deep[depth - 1]
        for u in cs.users:
            if u not in users:
                users[u] = None
                layer.append(u)
        if depth < levels:
            for child in cs.children:
                if child not in seen and child in scans:
                    seen.add(child)
                    queue.append((child, depth + 1))
    return list(users), list(groups), deep


def complete(w: Walk, found: dict[str, GroupEntry], scans: dict[str, Scan]) -> set[str]:
    """Groups whose member groups, down to the nesting level, were all fetched,
    so their expanded member list is exact. The others are stored already
    expired, as SSSD stores the incomplete groups of initgroups (§6.3 step 4):
    a direct lookup refreshes them first. A member that names nothing (deleted,
    outside the bases, neither user nor group) leaves a group complete."""
    levels = w.ctx.schema.nesting_level
    complete = set()
    for k in found:
        ok, seen, frontier = not scans[k].unknown, {k}, [k]
        for _ in range(levels):
            nxt = []
            for f in frontier:
                for child in scans[f].children if f in scans else ():
                    if child not in found or scans[child].unknown:
                        ok = False
                    elif child not in seen:
                        seen.add(child)
                        nxt.append(child)
            if not ok or not nxt:
                break
            frontier = nxt
        if ok:
            complete.add(k)
    return complete


def store_groups(
    w: Walk,
    batch: WriteBatch,
    found: dict[str, GroupEntry],
    known: Known,
    early: Callable[[WriteBatch], None] | None = None,
) -> None:
    """Store every fetched POSIX group. A group whose stamp (modifyTimestamp and
    CSN/USN) matches a stored, trusted one is only touched (the shortcut of §3.4);
    stamps are stored under stamps.py's trust rule, and a group `cached cache -E`
    expired is always written again (SSSD resets the stamp instead, #5596), and so
    is a group not read whole within refresh_full_interval (stamps.py)."""
    posix = {k: g for k, g in found.items() if g.posix}
    if not posix:
        return
    changed = changed_since_read(w, found) if w.missing else set()
    if changed and not w.last_run:
        raise ChangedDuringRequest(
            f"{len(changed)} group(s) changed while their members were named, e.g. "
            f"{found[next(iter(changed))].entry.dn}"
        )
    stored = w.ctx.cache.times("group", [g.name for g in posix.values()])
    scans = scan(found, known) if w.ctx.schema.bis else {}
    for k in changed:
        scans[k].unknown = True  # still changing: stored incomplete (expired)
    done = complete(w, found, scans) if w.ctx.schema.bis else set(posix)
    with w.ctx.counters.timer(NESTED_COMPARE):
        # Only a stamp stored under the trust rule matches (stamps.py); and not
        # for a group `cached cache -E` expired: its members are here anyway, so
        # they are named again (what SSSD's reset of the stamp does, #5596).
        same = [
            g
            for k, g in posix.items()
            if g.modstamp
            and k in done
            and (t := stored.get(g.name)) is not None
            and t.data_expire != EXPIRED
            and (t.modstamp, t.usn) == (g.modstamp, g.usn)
        ]
        touch: set[str] = set()
        if same:
            # Touched only with the stored gid and DN too (stamps.unchanged): the
            # same stamp can map to another gid (ID mapping, or ldap_group_gid_number
            # changed before a restart), and not when due a whole
            # read. One read of each store for all of them, none on a cold fetch.
            names = [g.name for g in same]
            idents, late = w.ctx.cache.group_stamps(names), stamps.due(w.ctx, names)
            unchanged = stamps.unchanged
            # And only when the member groups named now are the stored ones: the
            # group's stamp covers its member values, not what each value names.
            # A member group deleted or renamed without referential integrity, no
            # longer of the group class, or an entry become a group, leaves the
            # stamp alone, and touched, the record kept expanding the old member
            # groups though this read named the new ones (a deleted member group's
            # users listed after expiry).
            key, keys = w.ctx.cache.key, {g.name: k for k, g in posix.items()}

            def same_below(g: GroupEntry, held: Stamped) -> bool:
                named = members(w, keys[g.name], g, scans)[1]
                return {key(n) for n in held[4]} == {key(n) for n in named}

            touch = {g.name for g in same
                     if g.name not in late and unchanged(g, held := idents.get(g.name))
                     and held is not None and same_below(g, held)}  # fmt: skip
        put, name_attr = w.ctx.cache.put_group_of, w.ctx.schema.group_name
        trusted, started = stamps.trusted_stamp, w.started
        if early is not None:
            # Every group this batch may get, before the first is put
            # (BackendCache.plan_early: what two of them write goes in the last commit).
            w.ctx.cache.plan_early(batch, [
                (g.name, g.gid, k, group_aliases(g, name_attr) if g.several_names else ())
                for k, g in posix.items()
            ])  # fmt: skip
        for i, (k, g) in enumerate(posix.items()):
            if early is not None and i and not i % EARLY_CHUNK:
                early(batch)  # each EARLY_CHUNK groups, while more follow
            ok = k in done
            if g.name in touch:
                w.ctx.cache.touch_group(batch, g.name, g.modstamp, g.usn)
                continue
            users, groups, deep = members(w, k, g, scans)
            stamp = ""
            # A non-POSIX member group's members count as the group's own (walked
            # through): its stamp does not cover them (stamps.py).
            if ok and not (k in scans and scans[k].through):
                stamp = trusted(g.modstamp, g.usn, started)
            # Every posix GroupEntry passed storable_group in Decoder.group_entry with
            # this name, gid and DN: not checked again (checked=True).
            put(batch, g.name, g.gid, g.entry.dn, users, groups, stamp, g.usn, ok,
                group_aliases(g, name_attr), checked=True, whole=True,
                deep=deep)  # fmt: skip


def store_initgroups(
    w: Walk,
    name: str,
    user: User,
    entries: list[Entry],
    found: dict[str, GroupEntry],
    known: Known,
    mine: set[str],
    on_stored: Callable[[str, list[str]], None] | None = None,
) -> None:
    """Store an initgroups answer in one write: the user when it was searched, every
    fetched group, the groups the user left (re-read, or deleted when gone) and the
    user's list of ``mine`` (the LDAP and AD providers share it)."""
    gone = vanished(w, name, found, known)
    with w.ctx.counters.timer(LDAP_DECODE), w.ctx.cache.write() as batch:
        if entries:
            store_users(w, batch, entries)
        store_groups(w, batch, found, known, early_commits(w, name, found, mine, on_stored))
        for g_name in gone:
            w.ctx.cache.delete_group(batch, g_name)
        gids = {user.gid} | {found[k].gid for k in mine}
        w.ctx.cache.put_initgroups(batch, user.name, gids, [found[k].name for k in mine])


def early_commits(
    w: Walk,
    name: str,
    found: dict[str, GroupEntry],
    mine: set[str],
    hook: Callable[[str, list[str]], None] | None,
) -> Callable[[WriteBatch], None] | None:
    """What store_groups calls after each EARLY_CHUNK groups of a big answer:
    the groups new to the cache are committed at once, and the user's among
    them told to on_groups_stored, so the responder puts them in the memory
    cache while the rest are encoded (BackendCache.commit_new_groups)."""
    if hook is None or len(mine) < 2 * EARLY_CHUNK:
        return None
    key = w.ctx.cache.key
    names = {key(found[k].name): found[k].name for k in mine}

    def commit(batch: WriteBatch) -> None:
        ours = [names[k] for k in w.ctx.cache.commit_new_groups(batch) if k in names]
        if ours:
            hook(name, ours)

    return commit


def vanished(w: Walk, name: str, found: dict[str, GroupEntry], known: Known) -> list[str]:
    """Groups the user was in at the last refresh but not now: the membership was
    removed or the group deleted. Re-read them into ``found``, their members
    named like any fetched group's, so the change is stored valid and exact;
    return the names of those that no longer exist (§7, PR #543)."""
    old = w.ctx.cache.initgroups(name).value
    if old is None or not old.groups:
        return []
    now = {w.ctx.cache.key(g.name) for g in found.values()}
    vanished = [g for g in old.groups if w.ctx.cache.key(g) not in now]
    present = set()
    s = w.ctx.schema
    reread: dict[str, int] = {}
    for g in w.groups_by_name(vanished):
        k = normalize_dn(g.entry.dn)
        if k not in found:
            found[k] = g
            reread[k] = s.nesting_level
        present.add(w.ctx.cache.key(g.name))
    if reread and s.bis and not w.ctx.cfg.ignore_group_members:
        with w.ctx.counters.timer(NESTED_RESOLVE):
            w.closure(found, reread, known, [])
    return [g for g in vanished if w.ctx.cache.key(g) not in present]
