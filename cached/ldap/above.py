"""The levels above a user's first level, revalidated by one stamps-only group sweep.

The revalidation by stamps (cached/ldap/refresh.py ``walk_stamps``) walks up level by
level with ORs of up to 1,000 ``(member=<group DN>)`` assertions; slapd tests each
candidate of such an OR term by term, ~19 ms of its CPU for bigroupuser's second level
against ~6 ms for the one group sweep of the cold walk
(perf/results/2026-12-07-cold-slapd-cost). Refresh ahead pays it on every host at
every interval.

The groups of the group bases are those listing the user (the first level, searched
anyway) and those that do not: the group sweep's (cached/ldap/sweep.py), here with
stamp attributes only, no member values, in the first level's round trip. The walk
above the first level reads the member lists of the second kind only (a first-level
group is walked from already), starting from the first level's DNs. So when

* the user's DN is the one a record was made for,
* the first level's groups (those the walk climbs through) are the same DNs with the
  same stamps, and
* the sweep returns the same DNs, the same of them groups to climb through, with the
  same stamps,

no member list the walk reads has changed since the record's snapshot, and the walk
finds what it found then: the same groups above the first level, each returned by the
same levels' searches (``via``, which refresh.unexplained reads; a first-level group is
returned again when it lists another walked group, hence its stamps are compared too).
The groups come from the sweep's entries, fresh. Any difference, no record, a stamp the
trust rule does not believe, a sweep past its bound or cut: the walk with ORs, as
before, and a new record from it.

Stamps are believed under the trust rule of cached/ldap/stamps.py: a record is made
only when every stamp it holds is trusted at its snapshot (CSN or USN; a
``modifyTimestamp`` older than the snapshot by ``STAMP_MARGIN``); a group the server
computes has none, so a directory holding one in reach gets no record.

Records come from a revalidation that walked with ORs (its sweep went out with the
first level, or alone after it when there was no record, before the walk's searches
above it: a change between the two shows as a difference next time) and from the cold
walk's group sweep (whole entries: the same walk replayed over their member lists, by
DN key, as Walk.parents_of finds parents). They live in the backend's memory, at most
``RECORDS`` users (the least recently used dropped), and are lost on restart: the next
revalidation walks with ORs and records.

A first-level group whose stamp moved (a member added to one of the user's 2,000
groups) also makes the walk search: its member list may now name a walked group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from cached.dn import normalize_dns
from cached.ldap.batch import Answers
from cached.ldap.entries import WALK, GroupEntry
from cached.ldap.exchange import Search
from cached.ldap.schema import assertions
from cached.ldap.stamps import stamp_attrs, trusted_stamp
from cached.ldap.sweep import Record
from cached.ldap.walk import Walk


@dataclass(eq=False)
class Pending:
    """A stamps-only group sweep sent with the first level: its searches, the list
    their answers go in, its bound, and the record it is for."""

    searches: list[Search]
    answers: Answers
    cap: int
    record: Record | None


def _digest(items: Iterable[tuple[str, bool, str, str]]) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    for item in sorted(items):
        h.update(repr(item).encode("utf-8", "surrogatepass"))
    return h.digest()


def _first_digest(first: dict[str, GroupEntry]) -> bytes:
    return _digest((k, True, g.modstamp, g.usn) for k, g in first.items())


def _swept_digest(live: dict[str, GroupEntry | None]) -> bytes:
    return _digest(
        (k, g is not None, g.modstamp if g else "", g.usn if g else "") for k, g in live.items()
    )


def _trusted(groups: Iterable[GroupEntry | None], at: float) -> bool:
    return all(g is None or trusted_stamp(g.modstamp, g.usn, at) for g in groups)


def send(p: Walk, user_dn: str, name: str) -> Pending | None:
    """The stamps-only group sweep to send with the first level of a revalidation
    of ``name``'s groups, when a record may vouch for the levels above it: bounded
    one past the record's count (more is a difference). None: no record."""
    sw = p.sweeps
    rec = sw.above.get(p.ctx.cache.key(name))
    if rec is None or not sw.groups_possible():
        return None
    return _pending(p, user_dn, rec.count + 1, rec)


def sweep_alone(p: Walk, user_dn: str, first: int) -> Pending | None:
    """Without a record: the stamps-only group sweep after a first level of
    ``first`` groups, when the cold walk would sweep (Sweeps.groups_due, its bound),
    searched now, before the walk's searches above the first level, so that the
    walk can be recorded with it. None: not due."""
    sw = p.sweeps
    if not sw.groups_due(first):
        return None
    pending = _pending(p, user_dn, sw.tunables.groups_factor * first, None)
    pending.answers += p.ctx.client.search_many(pending.searches)
    return pending


def _pending(p: Walk, user_dn: str, cap: int, rec: Record | None) -> Pending:
    s = p.ctx.schema
    first = assertions(s.group_member, [user_dn])
    return Pending(p.sweeps.groups_but(first, stamp_attrs(s), cap), [], cap, rec)


def read(p: Walk, name: str, pending: Pending) -> dict[str, GroupEntry | None] | None:
    """The sweep's entries by DN key (None: not a group the walk climbs through), or
    None when it gave up or was cut (Sweeps.read_groups): then the user's record is
    dropped, so that the next revalidation does not send it again (a sweep without
    a record goes out only when due)."""
    entries = p.sweeps.read_groups(pending.cap, pending.answers)
    if entries is None:
        p.sweeps.above.put(p.ctx.cache.key(name), None)
        return None
    keys = normalize_dns([e.dn for e in entries])
    return {k: p.group_entry(e, WALK) for k, e in zip(keys, entries, strict=True)}


def replay(
    p: Walk,
    pending: Pending,
    live: dict[str, GroupEntry | None],
    user_key: str,
    first: dict[str, GroupEntry],
) -> tuple[dict[str, GroupEntry], dict[str, list[set[str]]]] | None:
    """The walk above ``first`` (the first level's walked groups, as searched now),
    when the record still holds (module doc): {DN key: group} in the walk's order,
    and ``via`` as walk_stamps fills it. None: the walk must search."""
    rec = pending.record
    if (
        rec is None
        or rec.user != user_key
        or rec.count != len(live)
        or rec.first != _first_digest(first)
        or rec.swept != _swept_digest(live)
    ):
        return None
    found: dict[str, GroupEntry] = {}
    for k in rec.above:
        g = live.get(k)
        if g is None:
            return None  # not in this snapshot: the record does not describe it
        found[k] = g
    # Each level's searched groups: the first level, then those first found by the
    # level below.
    levels: dict[int, set[str]] = {1: set(first)}
    for k, at in rec.above.items():
        levels.setdefault(at + 1, set()).add(k)
    via = {k: [levels.get(i, set()) for i in at] for k, at in rec.via.items()}
    return found, via


def record(
    p: Walk,
    name: str,
    user_key: str,
    first: dict[str, GroupEntry],
    live: dict[str, GroupEntry | None],
    above: dict[str, int],
    via: dict[str, tuple[int, ...]],
) -> None:
    """Keep what a walk found above ``first`` with the snapshot it was found in: the
    sweep's ``live`` entries, taken no later than the walk's searches. Nothing kept
    (and an old record dropped) when a stamp is not trusted as of the request's start
    (before every search it made: the conservative side) or a group found is not one
    of the sweep's."""
    key = p.ctx.cache.key(name)
    ok = (
        _trusted(first.values(), p.started)
        and _trusted(live.values(), p.started)
        and all(live.get(k) is not None for k in above)
        and first.keys().isdisjoint(live.keys())
    )
    rec = Record(user_key, _first_digest(first), _swept_digest(live), len(live), above, via)
    p.sweeps.above.put(key, rec if ok else None)


def record_cold(p: Walk, name: str, user_key: str, found: dict[str, GroupEntry]) -> None:
    """A record from the cold walk's group sweep (Walk.group_sweep: whole entries):
    walk_stamps' walk above the first level replayed over the member lists of the
    first level's groups and the sweep's, by DN key, as Walk.parents_of finds
    parents."""
    swept, first_keys = p.group_sweep, p.first_level
    if swept is None or first_keys is None:
        return
    s = p.ctx.schema
    first = {k: found[k] for k in first_keys if k in found}
    keys = normalize_dns([e.dn for e in swept])
    live = {k: p.group_entry(e, WALK) for k, e in zip(keys, swept, strict=True)}
    # The parents of each group among the walked ones (first level and sweep).
    groups: dict[str, GroupEntry] = dict(first)
    groups.update((k, g) for k, g in live.items() if g is not None)
    parents: dict[str, list[str]] = {}
    for k, g in groups.items():
        for child in groups.keys() & set(g.member_keys):
            parents.setdefault(child, []).append(k)
    walked = {user_key, *first}
    above: dict[str, int] = {}
    via: dict[str, list[int]] = {}
    level = 1
    up = list(first) if level <= s.nesting_level else []
    while up:
        nxt: list[str] = []
        seen: set[str] = set()
        for child in up:
            for k in parents.get(child, ()):
                if k in seen:
                    continue
                seen.add(k)
                via.setdefault(k, []).append(level)
                if k not in walked:
                    walked.add(k)
                    above[k] = level
                    nxt.append(k)
        level += 1
        up = nxt if level <= s.nesting_level else []
    record(p, name, user_key, first, live, above, {k: tuple(v) for k, v in via.items()})
