"""The sweep: every user of the user bases in one bounded search, in place of
thousands of member look-ups, and what it learns of the servers and the directory.

A group of thousands of members not in the cache names them by one search of the user
bases for every user, when that search is bounded by the answer: it runs only for at
least ``min_wanted`` unknown members, once per request, and stops (its own sizeLimit,
or :class:`LdapTooMany` when paged) once it passes ``factor`` times their number,
leaving them to the batched look-ups. A directory of 500,000 users thus costs at most
twice the names wanted, never the whole directory. Measured on bigroupuser: see
perf/readpath.py (LDAP) and perf/results/2026-11-30-adbig (Samba, where it took
0.68-0.81 s of DC CPU in one search against 1.3 s in 20 batches).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

from cached.dn import normalize_dns
from cached.ldap.batch import Answers
from cached.ldap.context import Context
from cached.ldap.controls import PAGED_RESULTS_OID
from cached.ldap.entries import USER, Decoder, Known, Member, MemberKind, int_id, new_member
from cached.ldap.exchange import Entry, LdapLimitExceeded, LdapTooMany, Row, Search

try:
    from cached.ldap import _ber
except ImportError:  # not built: the reference
    _ber = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepTunables:
    # The sweep runs for at least ``min_wanted`` unknown members, worth it in place of
    # a thousand member look-ups; it gives up past ``factor`` times the users wanted.
    min_wanted: int = 1000
    factor: int = 2
    # Members of the first level still unnamed after the sweep (or without one) from
    # which its search runs again with deref: look-up batches of n RDN values cost
    # slapd ~n²/2 comparisons (schema.MEMBER_BATCH), 250 of them ~10 ms.
    deref_again_min: int = 250
    # A big group's members: swept before the deref control is asked (LDAP: large01's
    # 5,000 users for 0.6x our CPU and the same slapd CPU, perf/readpath.py --group);
    # Samba's ASQ costs the DC less than its sweep (cached/ldap/ad.py).
    before_deref: bool = True
    # The group sweep (Walk.closure): a walk up from at least ``groups_min`` groups of
    # the first level reads the groups of the group bases the user is not a direct
    # member of, at most ``groups_factor`` times as many as the first level found,
    # and finds every level's parents among them. slapd tests each candidate of a
    # walk-up search against its OR until a term matches, an access check per term:
    # bigroupuser's level 2 (two ORs of 1,000 group DNs, 154 parents) took 17.5 ms
    # of slapd CPU, its 1,000 other groups in one search 6.0 ms
    # (perf/results/2026-12-07-cold-slapd-cost). Under ~250 DNs an OR costs slapd
    # ~2 ms or less, less than a sweep that may give up at its bound.
    groups_min: int = 250
    groups_factor: int = 1


# Users whose records are kept (each: two digests and the keys found above the first
# level, ~100 for bigroupuser): users of hundreds of groups are few on a host.
RECORDS = 256


@dataclass(frozen=True, slots=True)
class Record:
    """What a revalidation's walk found above a user's first level, and the snapshot
    of the groups it holds for (cached/ldap/above.py)."""

    user: str  # the user's DN key (the sweep's filter names it)
    first: bytes  # digest of the first level's walked groups and their stamps
    swept: bytes  # digest of the sweep: every entry, walked or not, and the stamps
    count: int  # the sweep's entries
    # Each group found above the first level -> the level whose search found it first.
    above: dict[str, int]
    # Each group returned by a search above the first level -> those levels.
    via: dict[str, tuple[int, ...]]


@dataclass(eq=False)
class Records:
    """The records of one domain, by user key, the least recently used dropped."""

    size: int = RECORDS
    _map: OrderedDict[bytes, Record] = field(default_factory=OrderedDict)

    def get(self, user: bytes) -> Record | None:
        rec = self._map.get(user)
        if rec is not None:
            self._map.move_to_end(user)
        return rec

    def put(self, user: bytes, rec: Record | None) -> None:
        self._map.pop(user, None)
        if rec is not None:
            self._map[user] = rec
            while len(self._map) > self.size:
                self._map.popitem(last=False)


@dataclass(eq=False)
class Sweeps:
    """The sweeps of one domain: their tunables and what they learned, kept for the
    backend's life."""

    ctx: Context
    decoder: Decoder
    tunables: SweepTunables = SweepTunables()
    # The users a sweep had passed when it gave up at its bound (0: none did): the
    # user bases hold at least that many, so a sweep whose bound is below it is
    # not tried (a lower bound: a directory that shrank costs a sweep not tried).
    users_at_least: int = 0
    # A server size limit cut a sweep: it caps every search of the user bases
    # (Debian's slapd: sizelimit 500, paged searches included), so no sweep is
    # tried again and the first level keeps the deref control (Walk.deref_walk).
    cut: bool = False
    # Servers (URIs) whose own size limit cut an unpaged sweep: paged sweeps there.
    paged: set[str] = field(default_factory=set)
    # The groups a group sweep had passed when it gave up at its bound (a lower bound
    # of the group bases' groups, as users_at_least), and whether a server limit cut
    # one (then no group sweep is tried again: the walk's batched searches split).
    groups_at_least: int = 0
    groups_cut: bool = False
    # What revalidations found above the first level of users of many groups, and
    # the stamps-only group sweep that vouches for it (cached/ldap/above.py).
    above: Records = field(default_factory=Records)

    def possible(self) -> bool:
        """Paged results: the paged sweep is the one that runs where a server's own
        limit cuts the unpaged one (unpaged), and AD's."""
        info = self.ctx.client.info
        return (
            not self.cut
            and self.ctx.cfg.ldap_page_size > 0
            and info is not None
            and PAGED_RESULTS_OID in info.controls
        )

    def name(self, swept: dict[str, Row], lookup: dict[str, tuple[str, int]], known: Known) -> None:
        """Name the members of ``lookup`` the sweep returned, taking them out of it;
        the members it does not return (groups, users outside the bases or without
        the class, deleted entries) are left to the look-ups, which apply the naming
        rules of docs/compatibility.md §9.5."""
        hits = list(filter(swept.__contains__, lookup))
        if len(hits) == len(lookup):
            lookup.clear()  # the usual: every member wanted is a swept user
        else:
            for k in hits:
                del lookup[k]
        if self.ctx.schema.ad:  # ids mapped from SIDs (cached/ldap/ad.py)
            for k in hits:
                known[k] = self.swept_member(swept[k])
            return
        lo, hi = self.ctx.cfg.id_bounds()
        if name_rows is not None and lo >= 0 and hi < 2**63 - 1:
            # In C: a Python loop per user was 6.6 % of a cold initgroups of
            # bigroupuser (5,000 users, py-spy of testing.replay).
            name_rows(hits, swept, lo, hi, known, Member, USER, self.swept_member)
        else:
            name_rows_py(hits, swept, lo, hi, known, Member, USER, self.swept_member)

    def swept_member(self, row: Row) -> Member | None:
        """A swept user as a member: named by its entry, with ids, as _user_member
        (in a user base: the sweep searched only those)."""
        dn, values = row
        d = self.decoder
        if self.ctx.schema.ad:  # ids mapped from SIDs (cached/ldap/ad.py)
            attrs = [a.lower() for a in d.member_user_attrs()]
            return d.user_member(Entry(dn, dict(zip(attrs, values, strict=True))), "", False)
        named = d.name_ids(dn, values[0], int_id(values[1]), int_id(values[2]))
        return Member(USER, named[0]) if named is not None else None

    def due(self, wanted: int) -> bool:
        """A sweep is worth trying for this many unknown members, in a request that
        has not swept yet."""
        t = self.tunables
        return (
            wanted >= t.min_wanted and t.factor * wanted >= self.users_at_least and self.possible()
        )

    def ahead(self, values: int, from_entries: bool) -> tuple[int, list[Search]]:
        """The unpaged sweep that ``values`` member values just read call for, sent
        before they are read (a looked-up group's; a walk's round, Walk.closure):
        the server sends the user bases while the member DNs are keyed and checked
        against the cache. Sent when at least ``min_wanted`` of them cannot be stored
        members (more values than DNs the cache holds, or members not taken from
        it: Walk.unknown), so a group whose members are cached costs no sweep. Returns
        the sweep's bound and searches, read by the search_many that asks for them
        (read_unpaged); (0, []) when none went out. Cold ``getent group
        large01`` (5,000 members): the sweep goes out 3.1 ms earlier (the keying
        and Walk.unknown it now overlaps), and the lookup took 20 ms instead of 28:
        docs/compatibility.md §9.3."""
        s = self.ctx.schema
        if (
            not (s.bis and self.tunables.before_deref)
            or self.ctx.cfg.ignore_group_members
            or not self.due(values)  # at most this many unknown: no cache read
        ):
            return 0, []
        unknown = values if from_entries else values - self.ctx.cache.dn_count()
        if not (self.due(unknown) and self.unpaged()):
            return 0, []
        cap, searches = self.bound(values)
        self.ctx.client.send_ahead(searches)
        return cap, searches

    def bound(self, wanted: int) -> tuple[int, list[Search]]:
        """The unpaged sweep for ``wanted`` names: its bound and its searches."""
        cap = self.tunables.factor * wanted
        return cap, self.searches(cap)

    def unpaged(self) -> bool:
        """The sweep as one unpaged search per user base, bounded by the request's own
        sizeLimit (RFC 4511 §4.5.1): no page round trips (bigroupuser: 6 pages of
        1,000 one after the other), and it can go out with a round's paged searches
        (Walk.closure). Not on an AD DC (``ldap_schema = ad`` or the root DSE's AD
        capability: Windows' MaxPageSize caps unpaged answers at 1,000 where paged
        ones go on, Samba ignores the request's sizeLimit), nor on a server whose
        own size limit cut it once (Debian's slapd: ``sizelimit 500``) or that sent
        more than it asked: there the paged sweep decides (run)."""
        info = self.ctx.client.info
        return info is not None and not self.ctx.ad_dc() and info.uri not in self.paged

    def searches(self, cap: int) -> list[Search]:
        """The unpaged sweep's searches: every user of each user base, as rows, at
        most ``cap + 1`` (one more than the cap shows the bases pass it)."""
        s = self.ctx.schema
        # No objectClass asked for: the filter admits users of the class only.
        # Rows: name, uid, gid (then AD's SIDs), no Entry per user (Search.rows).
        attrs = self.decoder.member_user_attrs()
        filt = f"(objectClass={s.user_oc})"
        return [
            Search(
                b.dn, s.with_base(filt, b), attrs, b.scope, paged=False, size_limit=cap + 1, rows=[]
            )
            for b in s.user_bases
        ]

    def read_unpaged(
        self, cap: int, searches: list[Search], answers: Answers
    ) -> dict[str, Row] | None:
        """What the unpaged sweep's answers name, as :meth:`run`'s; None when the server's
        own size limit cut it below what was asked (the paged sweep is to run)."""
        rows: list[Row] = []
        for sp, got in zip(searches, answers, strict=True):
            if isinstance(got, LdapLimitExceeded):
                if got.code == "sizeLimitExceeded" and got.partial > cap:
                    return self._gave_up(cap)  # our own sizeLimit: past the cap
                if got.code == "sizeLimitExceeded":
                    uri = self.ctx.client.info.uri if self.ctx.client.info else ""
                    self.paged.add(uri)
                    log.info("unpaged sweep of the user bases cut by %s's size limit after "
                             "%d entries: paged sweeps from now on", uri, got.partial)  # fmt: skip
                    return None
                return self._cut_by(got)
            assert sp.rows is not None
            if len(sp.rows) > sp.size_limit:
                # The server ignored the request's sizeLimit (as Samba does): this
                # answer is past the cap, given up as below, and nothing would bound
                # the next one: paged sweeps on this server from now on.
                uri = self.ctx.client.info.uri if self.ctx.client.info else ""
                self.paged.add(uri)
                log.info("%s ignored the unpaged sweep's size limit (%d entries for %d): "
                         "paged sweeps from now on", uri, len(sp.rows), sp.size_limit)  # fmt: skip
            rows += sp.rows
        # One base answered in full with cap + 1 rows (its sizeLimit, not exceeded:
        # RFC 4511 §4.5.1, slapd returns success) holds just that many users, every
        # one read: naming from them costs nothing more. Discarding them sent the
        # members to deref instead (a group of 100,000 of 200,001 users: the sweep
        # read them all, then the deref control sent them again, perf.run --scale).
        # Several bases, each under the cap, pass it together: given up.
        if len(rows) > cap + (len(searches) == 1):
            return self._gave_up(cap)
        return dict(zip(normalize_dns(list(map(itemgetter(0), rows))), rows, strict=True))

    def _gave_up(self, cap: int) -> dict[str, Row]:
        log.debug("the user bases passed %d entries: member users left to batched look-ups", cap)
        # It passed the cap: the bases hold more than ``cap`` users, so a request
        # with as many unknown members would give up again.
        self.users_at_least = max(self.users_at_least, cap + 1)
        return {}

    def _cut_by(self, cut: LdapLimitExceeded) -> dict[str, Row]:
        # Not an error of the lookup: the members are named as without a sweep
        # (deref, or the look-ups, which split under a limit: §9.5).
        if cut.code == "sizeLimitExceeded":
            self.cut = True
        log.info("sweep of the user bases cut by the server (%s after %d entries): "
                 "members named by deref or look-ups", cut.code, cut.partial)  # fmt: skip
        return {}

    def run(self, wanted: int) -> dict[str, Row]:
        """Every user of the user bases by DN key, or none past the bound."""
        s = self.ctx.schema
        cap = self.tunables.factor * wanted
        if self.unpaged():
            searches = self.searches(cap)
            swept = self.read_unpaged(cap, searches, self.ctx.client.search_many(searches))
            if swept is not None:
                return swept
        attrs = self.decoder.member_user_attrs()
        entries: list[Row] = []
        try:
            for b in s.user_bases:
                left = cap - len(entries)  # > 0: max_entries=0 would mean no bound
                if left <= 0:
                    raise LdapTooMany(f"the user bases passed {cap} entries")
                entries += self.ctx.client.search_rows(
                    b.dn, s.with_base(f"(objectClass={s.user_oc})", b), attrs, scope=b.scope,
                    max_entries=left,
                )  # fmt: skip
        except LdapTooMany:
            return self._gave_up(cap)
        except LdapLimitExceeded as cut:
            return self._cut_by(cut)
        return dict(zip(normalize_dns([r[0] for r in entries]), entries, strict=True))

    # -- the group sweep ----------------------------------------------------------------

    def groups_due(self, walked_up: int) -> bool:
        """A group sweep is worth trying for a walk up from ``walked_up`` groups of the
        first level (rfc2307bis member DNs; not on an AD DC, whose walk is
        ad_initgroups' and whose Samba ignores a request's sizeLimit: ad_dc)."""
        t = self.tunables
        return (
            walked_up >= t.groups_min
            and t.groups_factor * walked_up >= self.groups_at_least
            and self.groups_possible()
        )

    def groups_possible(self) -> bool:
        """A group sweep may go out on this domain (groups_due, whatever its size)."""
        s = self.ctx.schema
        return (
            not self.groups_cut
            and s.bis
            and not s.ad
            and not self.ctx.cfg.ignore_group_members
            and self.ctx.client.info is not None
            and not self.ctx.ad_dc()
        )

    def group_searches(self, walked_up: int, first: list[str]) -> tuple[int, list[Search]]:
        """The group sweep's bound and searches: every group of the class under each
        group base that lists none of ``first`` (the first level's walk-up
        assertions: those groups the request has already), whole, unpaged, at most
        ``cap`` of them (the request's own sizeLimit, RFC 4511 §4.5.1.4)."""
        cap = self.tunables.groups_factor * walked_up
        return cap, self.groups_but(first, self.ctx.schema.group_attrs(members=True), cap)

    def groups_but(self, first: list[str], attrs: list[str], cap: int) -> list[Search]:
        """The searches of a group sweep: every group of the class under each group
        base that matches none of ``first``, with ``attrs``, unpaged, at most ``cap``
        of them. With stamp attributes only, a revalidation's (cached/ldap/above.py)."""
        s = self.ctx.schema
        none_of = first[0] if len(first) == 1 else "(|" + "".join(first) + ")"
        filt = f"(&(objectClass={s.group_oc})(!{none_of}))"
        return [
            Search(b.dn, s.with_base(filt, b), attrs, b.scope, paged=False, size_limit=cap)
            for b in s.group_bases
        ]

    def read_groups(self, cap: int, answers: Answers) -> list[Entry] | None:
        """The group sweep's entries, or None when it gave up (past its bound, or cut
        by a server limit): the walk then searches for parents as before."""
        out: list[Entry] = []
        for got in answers:
            if isinstance(got, LdapLimitExceeded):
                if got.code == "sizeLimitExceeded" and got.partial >= cap:
                    self.groups_at_least = max(self.groups_at_least, cap + 1)
                    log.debug("the group bases passed %d entries: the walk up searches", cap)
                elif got.code == "sizeLimitExceeded":
                    self.groups_cut = True
                    log.info("group sweep cut by the server's size limit after %d entries: "
                             "the walk up searches from now on", got.partial)  # fmt: skip
                return None
            if len(got) > cap:
                # The server ignored the request's sizeLimit: nothing would bound the
                # next one either (as the user sweep on such a server, read_unpaged).
                self.groups_cut = True
                log.info("the server ignored the group sweep's size limit (%d entries for "
                         "%d): the walk up searches from now on", len(got), cap)  # fmt: skip
                return None
            out += got
        if len(out) > cap:  # several bases together past the bound
            self.groups_at_least = max(self.groups_at_least, cap + 1)
            return None
        return out


def name_rows_py(
    hits: list[str],
    swept: dict[str, Row],
    lo: int,
    hi: int,
    known: Known,
    member_type: type[Member],
    kind: MemberKind,
    slow: Callable[[Row], Member | None],
) -> None:
    """Name each key of ``hits`` from its swept row, in order: the usual user (one
    name, UTF-8 without NUL, uid and gid numbers in ``[lo, hi]``) as ``(kind, name)``
    made a ``member_type``, what ``Decoder.swept_member`` gives without its five calls
    per user; any other row by ``slow``, which says why it names nothing. The
    reference of ``_ber.name_rows`` (cached/ldap/_ber.c), which gives the same
    (tests/unit/test_name_rows_c.py) and is what Sweeps.name calls where it was built."""
    # Whether each gidNumber value met is a number in range: users share a few
    # primary groups, so their 5,000 values are read a handful of times.
    gid_ok: dict[bytes, bool] = {}
    for k, row in zip(hits, map(swept.__getitem__, hits), strict=True):
        names, uids, gids = row[1]
        if len(names) == 1 and uids and gids:
            ok = gid_ok.get(gids[0])
            if ok is None:
                # int_id's rule (ASCII digits only); else swept_member says why.
                ok = gid_ok[gids[0]] = gids[0].isdigit() and lo <= int(gids[0]) <= hi
            if ok and uids[0].isdigit():
                try:
                    name, uid = names[0].decode("utf-8"), int(uids[0])
                except ValueError:
                    pass  # not UTF-8: swept_member says why
                else:
                    if lo <= uid <= hi and "\0" not in name:
                        known[k] = new_member(member_type, (kind, name))
                        continue
        known[k] = slow(row)


name_rows = _ber.name_rows if _ber is not None else None
