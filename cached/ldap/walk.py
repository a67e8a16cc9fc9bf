"""The nesting walk of one request, in rounds of batched searches (SSSD's
``sdap_async_nested_groups.c``, whose ``sdap_nested_group_ctx`` is :class:`Walk`).

Where SSSD walks nesting one group at a time and then looks each group up again
(2,089 searches for a cold initgroups of a user in 2,086 groups, §9.3), the walk asks
for whole levels at once:

* up (initgroups, rfc2307bis): the user's direct groups in one search, then each level
  of parents with OR-filters of up to ``schema.BATCH`` group DNs, until a level finds
  nothing new or ``ldap_group_nesting_level`` is reached (reference §6.3). Member lists
  come with the groups, so every group is stored complete;
* down (a group lookup): the group's member groups level by level, to the nesting
  level (§6.2), batched the same way;
* member DN -> name from the member's *entry* (docs/compatibility.md §9.5): its name
  attribute (the value its RDN spells when several, as SSSD), its kind from its
  objectClass, its existence and base membership from the server; the DN's spelling
  is never the answer. Users already cached serve by DN (the cache's DN index);
  thousands of unknown members are named by one bounded sweep of the user bases
  (cached/ldap/sweep.py; unpaged, sent ahead as soon as an answer calls for it and
  read with the next searches); where the server has the deref control (and no base
  has a filter), the walk's group searches carry it — not on the first level when a
  sweep is possible, nor after one (:meth:`Walk.deref_walk`) — so every group comes
  with its members' names and classes; the rest are looked up by RDN value — a hint
  to batch by, matched back by DN — folded into the walk's searches where users and
  groups share a base. A member that exists nowhere, lies outside every search base,
  is neither user nor group of the configured classes or has no ids is dropped, and
  the group stays complete.

Everything one request learns (the member values keyed, the sweep's users, the groups
settled, the members found nowhere) is a field of its :class:`Walk`, made new for each
run of a request: nothing is reset by hand.
"""

from __future__ import annotations

import logging
from itertools import filterfalse, repeat

from cached.counters import NESTED_LEVELS
from cached.dn import normalize_dn, normalize_dns
from cached.ldap import deref
from cached.ldap.batch import Answers, Job, Searcher, chunks
from cached.ldap.context import Context
from cached.ldap.entries import (
    GROUP,
    USER,
    WALK,
    Decoder,
    GroupEntry,
    Known,
    Member,
    MemberKeys,
    MemberKind,
    names_each,
    new_member,
)
from cached.ldap.exchange import Entry, Row, Search
from cached.ldap.schema import BATCH, assertions
from cached.ldap.sweep import Sweeps

log = logging.getLogger(__name__)

Lookup = dict[str, tuple[str, int]]  # DN key -> (a spelling, levels still to fetch below)


class Walk:
    """One running request's walk: the state SSSD keeps in ``sdap_nested_group_ctx``,
    made new for each run, so that nothing of one request is seen by the next."""

    def __init__(
        self, ctx: Context, decoder: Decoder, searcher: Searcher, sweeps: Sweeps,
        last_run: bool = False,
    ) -> None:  # fmt: skip
        self.ctx = ctx
        self.decoder = decoder
        self.hooks = decoder.hooks
        self.searcher = searcher
        self.sweeps = sweeps
        # This request's last run (save.CHANGED_RETRIES): a group changed under it is
        # stored incomplete rather than read again.
        self.last_run = last_run
        # When the request began: every entry it stores was read after (stamps.trusted_stamp).
        self.started = 0.0
        # Member values read (value -> DN key), and a spelling of each key.
        self.keys = MemberKeys()
        # DNs dereferenced in this walk: later copies are not decoded again.
        self.deref_seen: set[bytes] = set()
        # The users of this request's sweep of the user bases (once at most), by DN
        # key, as rows of Decoder.member_user_attrs(): members of later rounds are
        # named from it; None: not swept.
        self.swept: dict[str, Row] | None = None
        # unknown's groups that need nothing more, at their budget, for one ``known``.
        self.settled: dict[str, int] = {}
        self.settled_known: Known | None = None
        # This request reads groups whole because they were due (stamps.due): their
        # members are named from entries fetched now, never from the users the cache
        # holds. A member renamed where the name attribute is not in the DN changes
        # no group's stamp, and its cached user entry, refreshed by a login before
        # the rename, would name it the old way and reset the group's clock: the
        # blind spot refresh_full_interval bounds would go on past it.
        self.from_entries = False
        # Members the look-ups found nowhere (closure): save.changed_since_read.
        self.missing: set[str] = set()
        # The group sweep of this request (Sweeps.group_searches): the parents of each
        # group among the groups of the group bases (those the first level did not
        # return, swept, and those it did), by child key; the walk up reads each
        # level's parents from it (parents_of). None: not swept (not due, or it gave up).
        self.groups: dict[str, list[tuple[str, Entry]]] | None = None
        # That sweep's entries when it went out from the first level, and the first
        # level's DN keys: a revalidation's record is made from them (cached/ldap/above.py).
        self.group_sweep: list[Entry] | None = None
        self.first_level: list[str] | None = None

    def group_entry(self, e: Entry, want: MemberKind | None = None) -> GroupEntry | None:
        return self.decoder.group_entry(e, want, self.keys)

    def deref_walk(
        self, level: int, again: bool = False, sweeping: bool = False
    ) -> list[tuple[str, list[str]]] | None:
        """The deref control for the walk's searches, where the server has it and no
        base has a filter (which a dereferenced entry could not be checked against,
        as SSSD decides, §6.2): every group found comes with its members' names and
        classes, so members need no look-up of their own.

        Not on the first level when the user bases could be swept, nor after a
        sweep: slapd returns one deref result per member *value*, not per member —
        bigroupuser's 2,000 direct groups came with 42,000 results for 5,000
        distinct users (245 bytes each, 0.2 s of slapd CPU to build, 39 % of ours to
        read). Its groups without the control and one sweep of the user bases name
        the same members for a third of slapd's CPU and a quarter of the bytes
        (perf/readpath.py). A user in few groups has few unknown members: no sweep,
        and they are looked up with the next level's searches; when hundreds are
        left unnamed (no sweep, or it gave up at its bound in a big directory), the
        first level's search runs again with deref (closure), rather than look-up
        batches whose cost on slapd grows with the square of their size."""
        s = self.ctx.schema
        info = self.ctx.client.info
        if not again and (
            self.swept  # named by the sweep (empty: it gave up at its bound)
            or sweeping  # the sweep goes out with this round's searches
            or (level == 0 and self.sweeps.possible())
        ):
            return None
        if (
            self.ctx.cfg.ldap_deref_threshold <= 0
            or self.ctx.cfg.ignore_group_members
            or info is None
            or deref.DEREF_OID not in info.controls
            or any(b.filter for b in s.user_bases + s.group_bases)
        ):
            return None
        return [(s.group_member, s.deref_attrs)]

    def search_groups(self, filt: str) -> list[GroupEntry]:
        entries = self.search_group_bases(filt)
        return [g for e in entries if (g := self.group_entry(e)) is not None]

    def search_group_bases(self, filt: str) -> list[Entry]:
        s = self.ctx.schema
        return self.searcher.search(
            s.group_bases, filt, s.group_attrs(members=not self.ctx.cfg.ignore_group_members)
        )

    def groups_by_name(self, names: list[str]) -> list[GroupEntry]:
        """POSIX groups by name, whole; an answer a server's size limit cuts is split
        (Searcher.split), as the walk's are: the refresh's fetch of changed groups
        and the re-read of groups a user left (save.vanished), with more of them than
        the limit, fail at every lookup otherwise where a cold one succeeds (slapd
        ``sizelimit 5``)."""
        attrs = self.ctx.schema.group_attrs(members=not self.ctx.cfg.ignore_group_members)
        got = self.searcher.split(
            self.searcher.jobs_by_name(names, attrs), self.searcher.round_filter
        )
        return [g for entries in got for e in entries if (g := self.group_entry(e)) is not None]

    def unknown(self, found: dict[str, GroupEntry], budget: dict[str, int], known: Known) -> Lookup:
        """Members of fetched groups still to look up: {key: (dn, levels still to
        fetch below it)}. A member group is fetched, with its members, while its
        parent has levels left; beyond, it is only named (§6.2)."""
        out: Lookup = {}
        # Groups whose every member was found or named at their budget need nothing
        # from any later round (``found`` and ``known`` only grow, a name never
        # changes): skipped, instead of reading all their members again each round
        # (bigroupuser: 42,000 member values a round, 8 % of a cold initgroups).
        if self.settled_known is not known:
            self.settled, self.settled_known = {}, known
        settled = self.settled
        # Members needing nothing: found, or named (below a group with levels left, a
        # member group not yet found is still to be fetched). Set look-ups, so a
        # settled group is checked at C speed.
        named = found.keys() | known.keys()
        deep = found.keys() | {mk for mk, m in known.items() if m is None or m.kind is USER}
        # The members of the groups with something left, pooled by the group's budget,
        # then each distinct member taken once, at the highest budget, in C where it
        # can be (bigroupuser's first round: 44,000 values, 5,000 distinct).
        pools: dict[int, list[str]] = {}
        for k, g in found.items():
            b = budget.get(k, -1)
            if b < 0 or settled.get(k) == b:
                continue
            done = deep if b >= 1 else named
            if done.issuperset(g.member_keys):
                settled[k] = b
                continue
            pool = pools.get(b)
            if pool is None:
                pool = pools[b] = []
            pool += g.member_keys
        spelled = self.keys.spelled
        for b in sorted(pools, reverse=True):
            done = deep if b >= 1 else named
            # Each new key with its spelling and budget, built in C (a loop per
            # member here, and resolve_dns below, cost a cold large01 213 M -> 205 M
            # instructions, perf.replay).
            fresh = filterfalse(done.__contains__, dict.fromkeys(pools[b]))
            new = list(filterfalse(out.__contains__, fresh))
            out.update(zip(new, zip(map(spelled.__getitem__, new), repeat(b - 1)), strict=True))
        if out and not self.from_entries:
            # Users already cached serve by DN (the cache's DN index), no search; by
            # the keys at hand (each spelling normalized again, and each DN found
            # normalized back, were 5,000 normalize_dn calls in a cold large01).
            for k, member in self.ctx.cache.resolve_keys(out.keys()).items():
                if member[0] == USER:
                    known[k] = new_member(Member, (USER, member[1]))
                    del out[k]
        return out

    def closure(
        self,
        found: dict[str, GroupEntry],
        budget: dict[str, int],
        known: Known,
        up: list[str],
        primary_gid: int | None = None,
    ) -> set[str]:
        """Fetch, in rounds of batched searches: the groups above ``up`` level by
        level (initgroups, §6.3), the member groups of every fetched group down to
        its level budget (§6.2), and the entry of every member, so each member is
        named by its entry or dropped (docs/compatibility.md §9.5). The walk up and the
        member look-ups share each round's searches, so naming members costs no
        extra round trip. Returns the keys of the POSIX groups found walking up."""
        s = self.ctx.schema
        self.deref_seen = set()
        mine: set[str] = set()
        walked = {normalize_dn(dn) for dn in up}
        # The first level's walk-up assertions: a group sweep reads the groups that
        # match none of them (the first level has those).
        first = assertions(s.group_member, up) if up else []
        group_sweep_tried = False
        level = 0
        lookup = self.unknown(found, budget, known)
        extra = self.hooks.group_by_gid_filter(primary_gid) if primary_gid is not None else ""
        # The first level goes without deref for a sweep (deref_walk): its search
        # runs again with it when hundreds of its members are left unnamed.
        first_up = up if up and self.deref_walk(0) is None else []
        # The sweep sent ahead when a round's answer called for it (sweep_ahead):
        # the next round reads it as the sweep it would have sent.
        ahead: tuple[int, list[Search]] = (0, [])
        while up or lookup or extra:
            # The sweep, when due, goes out unpaged with this round's searches: slapd
            # streams it on one thread while it works on the walk-up on another. The
            # members it could name (in a user base) wait for it; those it does not
            # name are looked up in the next round. Cold initgroups of bigroupuser on
            # an idle 2-core machine (n=20 each, medians): backend 318 -> 281 ms, LDAP
            # wait 65 -> 27 ms; the unpaged sweep alone, before the round, 321 ms. On
            # a machine loaded 3-7x over its cores the overlap gained nothing.
            sweep: list[Search] = []
            later: Lookup = {}
            if ahead[1] or (
                self.swept is None and self.sweeps.due(len(lookup)) and self.sweeps.unpaged()
            ):
                cap, sweep = ahead if ahead[1] else self.sweeps.bound(len(lookup))
                ahead = (0, [])
                in_users = self.decoder.user_base_keys()
                for k in [k for k in lookup if in_users(k)]:
                    later[k] = lookup.pop(k)
            else:
                self.sweep_users(lookup, known)
                if (
                    level == 1
                    and not self.swept
                    and len(lookup) >= self.sweeps.tunables.deref_again_min
                ):
                    self.first_level_again(first_up, lookup, known)
            up_keys = {normalize_dn(dn) for dn in up}
            up_next: list[str] = []
            named: set[str] = set()
            swept: Answers = []
            with_round = sweep
            if up and level >= 1 and not group_sweep_tried and self.sweeps.groups_due(len(up)):
                # The group sweep goes out with the user sweep (read here rather than
                # with the round's searches, which need its answer first).
                group_sweep_tried = True
                cap_g, gs = self.sweeps.group_searches(len(up), first)
                answers = self.ctx.client.search_many(sweep + gs)
                swept += answers[: len(sweep)]
                with_round = []
                pool = self.sweeps.read_groups(cap_g, answers[len(sweep) :])
                if pool is not None:
                    self.groups = self.group_pool(pool, found)
                    if level == 1:
                        self.group_sweep, self.first_level = pool, list(up_keys)
            local = self.parents_of(up_keys) if up and self.groups is not None else None
            got = self.round(
                up if local is None else [], lookup, extra, level, sweep=(with_round, swept)
            )
            if local:
                got += [(e, True, True) for e in local]
            groups = [e for e, f, _o in got if f]
            new_values = self.keys.new_values(groups, self.decoder.gkeys().member)
            # Whether any of the round's groups has its members read: walked up to,
            # or looked up with levels left (budget -1: named only, members never
            # read, so a sweep for them would go unread).
            expands = bool(up or extra) or any(b >= 0 for _dn, b in lookup.values())
            if not sweep and expands and not any(e.deref is not None for e in groups):
                # Their members are named by neither a sweep nor deref: when they
                # call for one, the sweep goes out now, read by the next round, as
                # the entries are keyed and classified (cold initgroups of
                # bigroupuser: the user's 2,000 groups, 17 ms of reading them).
                ahead = self.sweep_ahead(len(new_values))
            if sweep:
                wanted = len(lookup) + len(later)
                self.swept = self.sweeps.read_unpaged(cap, sweep, swept)
                if self.swept is None:
                    self.swept = self.sweeps.run(wanted)  # the paged sweep: a server limit
                self.sweep_users(later, known)
                if (
                    level == 1
                    and not self.swept
                    and len(later) >= self.sweeps.tunables.deref_again_min
                ):
                    self.first_level_again(first_up, later, known)
            # The entries' DN keys at once (normalize_dns): a group's DN is new to
            # the memo when its parents' member lists come later (bigroupuser: the
            # 2,000 groups of the first level), and parsing each was 4 % of a cold
            # initgroups (valgrind, perf.readpath's walk replayed). So are the
            # member values of the round's groups, read below (group_entry).
            keys = normalize_dns([e.dn for e, _from_groups, _only_up in got])
            self.keys.of(new_values)
            for (e, from_groups, only_up), k in zip(got, keys, strict=True):
                # A member waiting for the sweep is named by an entry the round found
                # all the same (a member group walked up to).
                want = lookup.get(k) or later.get(k)
                if want is not None:
                    m = self.decoder.classify(e, k, from_groups, self.keys)
                    if m is None and k in named:
                        continue  # found as a user or group by another of the searches
                    named.add(k)
                    if isinstance(m, GroupEntry):
                        if want[1] >= 0:
                            found.setdefault(k, m)
                            budget[k] = max(budget.get(k, -1), want[1])
                        known[k] = new_member(Member, (GROUP if m.posix else WALK, m.name))
                    else:
                        known[k] = m
                if e.deref is not None:
                    self.named_by_deref(e, known)
                if not from_groups or not (up_keys or extra):
                    continue
                g = found.get(k) or self.group_entry(e, WALK)
                if g is None:
                    continue
                if up_keys and (only_up or not up_keys.isdisjoint(g.member_keys)):
                    found.setdefault(k, g)
                    budget[k] = s.nesting_level
                    if g.posix:
                        mine.add(k)
                    if k not in walked:
                        walked.add(k)
                        up_next.append(e.dn)
                if extra and g.posix and g.gid == primary_gid:
                    found.setdefault(k, g)
                    budget[k] = max(budget.get(k, -1), s.nesting_level)
            for k, (dn, _b) in lookup.items():
                if k not in known:
                    known[k] = None  # exists nowhere we may look: not a member
                    # ... unless renamed since its group was read (a DN in a base:
                    # one that never named an entry there is dropped whatever).
                    if self.hooks.member_assertion(dn) is not None and self.decoder.in_bases(
                        k, s.user_bases + s.group_bases
                    ):
                        self.missing.add(k)
            self.ctx.counters.add(NESTED_LEVELS, 1, 0.0, 1)
            level += 1
            up = up_next if level <= s.nesting_level else []
            extra = ""
            lookup = self.unknown(found, budget, known)
        return mine

    def group_pool(
        self, entries: list[Entry], found: dict[str, GroupEntry]
    ) -> dict[str, list[tuple[str, Entry]]]:
        """The parents of each group, from the group sweep's entries and the groups
        the request has found (the first level's, which the sweep leaves out): child
        key -> [(parent key, parent entry)]. Built once, as each group's member keys
        that are group keys (a set intersection in C per group: testing each group
        against each level's keys was 16 ms for bigroupuser's 3,000 groups)."""
        member = self.decoder.gkeys().member
        self.keys.of(self.keys.new_values(entries, member))
        keys = normalize_dns([e.dn for e in entries])
        groups = set(keys) | found.keys()
        # Every value is keyed now; one that names nothing has no key (None, which is
        # no group's key). Each entry's keys as new_values read them in C, where it
        # did: a memo look-up per value again was a third of this (35,000 values of
        # bigroupuser's group sweep, three groups of 5,000 users among them).
        key_of, ready = self.keys.memo.get, self.keys.ready
        parents: dict[str, list[tuple[str, Entry]]] = {}
        for k, e in zip(keys, entries, strict=True):
            values = e.attrs.get(member, ())
            got = ready.get(id(values))
            of_e = got[1] if got is not None and got[0] is values else map(key_of, values)
            for child in groups.intersection(of_e):
                parents.setdefault(child, []).append((k, e))
        swept = set(keys)
        for k, g in found.items():
            if k not in swept:
                for child in groups.intersection(g.member_keys):
                    parents.setdefault(child, []).append((k, g.entry))
        return parents

    def parents_of(self, up_keys: set[str]) -> list[Entry]:
        """The walk up's answer from the group sweep, with no search: the groups that
        list any of ``up_keys``. A member value names a group by DN equality, as the
        server's ``(member=DN)`` assertion matches it (normalize_dn: the keys the
        folded searches already match parents by)."""
        assert self.groups is not None
        out: dict[str, Entry] = {}
        for k in up_keys:
            for pk, e in self.groups.get(k, ()):
                out.setdefault(pk, e)
        return list(out.values())

    def first_level_again(self, up: list[str], lookup: Lookup, known: Known) -> None:
        """The first level went without deref for a sweep that did not name its
        members (too few for one, or it gave up at its bound): its search again,
        with the control, names them (a no-op without it, where the look-ups do)."""
        if not up or self.deref_walk(0, again=True) is None:
            return
        for e, _from_groups, _only_up in self.round(up, {}, "", 0, again=True):
            if e.deref is not None:
                self.named_by_deref(e, known)
        for k in [k for k in lookup if k in known]:
            del lookup[k]

    def named_by_deref(self, e: Entry, known: Known) -> None:
        """Name the members of a group entry from the deref control's answer: users
        by their entry (in a user base, with ids), groups of the class by name (a
        group to expand is still looked up with its members); a member value the
        server did not dereference names no entry. Each DN comes once per walk (the
        first copy the client read, whichever entry it came in: see
        deref.decode_counted), so naming does not depend on the order of entries."""
        s = self.ctx.schema
        group_oc = s.group_oc.lower().encode()
        for r in e.deref or ():
            k = normalize_dn(r.dn)
            if k in known:
                continue
            ocs = {v.lower() for v in r.values.get("objectclass", [])}
            entry = Entry(r.dn, r.values)
            if self.decoder.as_user(ocs, k):
                known[k] = self.decoder.user_member(entry, k, False)
            elif group_oc in ocs and self.decoder.in_bases(k, s.group_bases):
                g = self.group_entry(entry, WALK)
                kind = GROUP if g is not None and g.posix else WALK
                known[k] = None if g is None else new_member(Member, (kind, g.name))
            else:
                known[k] = None
        members = e.get(s.group_member)
        if e.deref_total >= len(members) or e.deref_raw is None:
            return  # every value was dereferenced (the common case: no dangling DN)
        # Some member names no entry the server could dereference: read this
        # entry's results again, copies included, to find which (rare: dangling or
        # unreadable members).
        returned = {normalize_dn(r.dn) for r in deref.decode_response(e.deref_raw)}
        for dn in names_each(members):
            k = normalize_dn(dn)
            if k not in returned:
                known.setdefault(k, None)

    def sweep_users(self, lookup: Lookup, known: Known) -> None:
        """Name thousands of unknown members with one sweep of the user bases
        (cached/ldap/sweep.py), once per request and only when due: the users it
        returns name the later rounds' members too, with no look-up."""
        if self.swept is None:
            if not self.sweeps.due(len(lookup)):
                return
            self.swept = self.sweeps.run(len(lookup))
        self.sweeps.name(self.swept, lookup, known)

    def sweep_ahead(self, values: int) -> tuple[int, list[Search]]:
        """Sweeps.ahead, in a request that has not swept yet."""
        if self.swept is not None:
            return 0, []
        return self.sweeps.ahead(values, self.from_entries)

    def round(
        self,
        up: list[str],
        lookup: Lookup,
        extra: str,
        level: int,
        again: bool = False,
        sweep: tuple[list[Search], Answers] | None = None,
    ) -> list[tuple[Entry, bool, bool]]:
        """One round's searches: (entry, found under the group bases, the search
        had only walk-up assertions). Member look-ups go by RDN value — a hint to
        batch by, never the answer: entries are matched back by DN. ``sweep``:
        searches sent first with the round's, and the list their answers go in."""
        s = self.ctx.schema
        rdn: list[str] = []
        seen: set[str] = set()
        for dn, _ in lookup.values():
            a = self.hooks.member_assertion(dn)
            if a is None:
                continue  # not a DN: names nothing
            if a not in seen:
                seen.add(a)
                rdn.append(a)
        ups = assertions(s.group_member, up)
        members = not self.ctx.cfg.ignore_group_members
        out: list[tuple[Entry, bool, bool]] = []
        specs = self.deref_walk(level, again, sweeping=bool(sweep and sweep[0])) if ups else None
        # The searches of one round are independent: sent together (several message
        # ids outstanding), so a round costs one round trip, not one per search.
        jobs: list[Job] = []
        tags: list[tuple[bool, bool]] = []  # per job: (under the group bases, only up)
        if s.fold and members:
            # Users and groups under one base: one search finds both (docs/compatibility.md §9.5:
            # names at no extra round trip).
            n = max(
                -(-len(ups) // BATCH), -(-len(rdn) // self.hooks.member_batch), 1 if extra else 0
            )
            for i in range(n):
                part_up, part_rdn = ups[i::n], rdn[i::n]
                items = [("u", a) for a in part_up] + [("m", a) for a in part_rdn]
                if i == 0 and extra:
                    items.append(("x", extra))
                with_specs = specs if part_up else None
                jobs.append((s.group_bases, items, s.member_attrs(), with_specs))
                tags.append((True, False))
        else:
            # Users and groups apart: member look-ups under each kind's bases. Without
            # member lists (ignore_group_members) a group is a parent because the search
            # that found it asked only for parents.
            attrs = s.group_attrs(members)
            batches = [([("u", a) for a in chunk], True) for chunk in chunks(ups, BATCH)]
            if extra:
                batches.append(([("x", extra)], False))
            for items, only_up in batches:
                jobs.append((s.group_bases, items, attrs, specs))
                tags.append((True, only_up and not members))
            uattrs = [*self.decoder.member_user_attrs(), "objectClass"]
            for chunk in chunks(rdn, self.hooks.member_batch):
                jobs.append((s.group_bases, [("g", a) for a in chunk], attrs, None))
                tags.append((True, False))
                jobs.append((s.user_bases, [("s", a) for a in chunk], uattrs, None))
                tags.append((False, False))
        # Past the first level the walk's answers are small (bigroupuser's level 2:
        # two ORs of 1,000 DNs, 78 entries each, 20 ms of slapd each): unpaged, they go
        # out together and slapd works on them on two threads. The first level (the
        # user's own groups: 2,000 there) stays paged, as AD does throughout: its
        # MaxPageSize cuts an unpaged answer at 1,000, where pages go on (so on any AD
        # DC). A size limit that cuts an unpaged answer splits it (Searcher.split),
        # as a paged one, and makes the walk paged on that server (Context.walk_paged).
        info = self.ctx.client.info
        paged = (
            level == 0
            or again
            or info is None
            or self.ctx.ad_dc()
            or info.uri in self.ctx.walk_paged
        )
        for (from_groups, only_up), entries in zip(
            tags,
            self.searcher.split(jobs, self.searcher.round_filter, paged, sweep, self.deref_seen),
            strict=True,
        ):
            out += [(e, from_groups, only_up) for e in entries]
        return out

    def by_deref(
        self,
        g: GroupEntry,
        lookup: Lookup,
        known: Known,
    ) -> None:
        """Name the members of one big group with the deref control (one base search,
        §6.2 step 3), checking each member's search base and object class as a
        search would. Member groups that must be expanded are left to the look-ups."""
        s = self.ctx.schema
        info = self.ctx.client.info
        threshold = self.ctx.cfg.ldap_deref_threshold
        if (
            threshold <= 0
            or len(lookup) <= threshold
            or info is None
            or deref.DEREF_OID not in info.controls
            or any(b.filter for b in s.user_bases + s.group_bases)  # as SSSD: no filters
        ):
            return
        # The member values come along: this search reads the group again, later than
        # the search that found it, and only a member it still lists and did not
        # dereference names nothing. One replaced in between is left to the look-ups
        # (dropping it stored the old and new versions' intersection: the kill soak).
        entries = self.ctx.client.search(
            g.entry.dn, "(objectClass=*)", [s.group_member], scope="base",
            deref_specs=[(s.group_member, s.deref_attrs)],
        )  # fmt: skip
        results = entries[0].deref if entries else None
        if results is None:
            return
        for r in results:
            k = normalize_dn(r.dn)
            if k not in lookup:
                continue
            e = Entry(r.dn, r.values)
            ocs = {v.lower() for v in r.values.get("objectclass", [])}
            m: Member | None
            if self.decoder.as_user(ocs, k):
                m = self.decoder.user_member(e, k, False)
            elif self.decoder.in_bases(k, s.group_bases):  # a group, if of the class (classify)
                grp = self.group_entry(e, WALK)
                if grp is None or lookup[k][1] >= 0:
                    continue  # to be fetched with its members
                m = new_member(Member, (GROUP if grp.posix else WALK, grp.name))
            else:
                m = None
            known[k] = m
            del lookup[k]
        returned = {normalize_dn(r.dn) for r in results}
        listed = set(self.keys.of(entries[0].get(s.group_member)))
        for k in [k for k in lookup if k not in returned and k in listed]:
            known[k] = None  # the server dereferences only entries that exist
            del lookup[k]

    # -- groups: storing -----------------------------------------------------------
