"""The backend's requests: user, group and initgroups, each ending in one cache write.

The entry points of one domain, as SSSD's ``sdap_async_users.c``, ``sdap_async_groups.c``
and ``sdap_async_initgroups.c`` are: each request runs with a :class:`~cached.ldap.walk.Walk`
of its own (the nesting walk and everything the request learns), decodes entries with
cached/ldap/entries.py, batches its searches with cached/ldap/batch.py, names thousands
of members with cached/ldap/sweep.py and stores with cached/ldap/save.py; a request for
what the cache holds is validated by stamps first (cached/ldap/refresh.py).

Measured on bigroupuser, cold ``id`` through the socket (searches counted by slapd,
root DSE and getpwnam included; see perf/results/2026-11-30-compat for wall times): uid-named
people 7 searches; cn-named people 7 (4,264 when members were named by their DN's
spelling). Without the deref control (Debian's slapd) the look-ups add two searches
(batches of 1,000 RDN values: slapd tests each candidate entry against the whole OR,
so bigger batches cost quadratically more server time).

rfc2307 has no nesting: one search answers initgroups (``memberUid=<name>``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from cached import gcpause
from cached.cache import State, StoreWriteError
from cached.cache.writer import BackendCache
from cached.config import DomainConfig
from cached.counters import (
    COUNTERS,
    LDAP_DECODE,
    NESTED_RESOLVE,
    REQ_GROUP,
    REQ_INITGR,
    REQ_NETGROUP,
    REQ_USER,
    Counters,
)
from cached.dn import normalize_dn
from cached.ipc.ops import Outcome as Outcome  # re-exported: the provider returns it
from cached.ldap import above, netgroups, refresh, save, stamps
from cached.ldap.batch import Job, Searcher
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.context import Context
from cached.ldap.entries import Decoder, GroupEntry, Hooks, Known, entry_names
from cached.ldap.entry import intern_clear
from cached.ldap.exchange import Entry, LdapError, LdapLimitExceeded
from cached.ldap.schema import SchemaMap
from cached.ldap.sweep import Sweeps, SweepTunables
from cached.ldap.walk import Lookup, Walk
from cached.model import User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
# A failing request is logged through the rate limiter, by the kind of failure: a
# local user looping a lookup that fails (a group over the message cap) would
# otherwise write one line per request (docs/threat-model.md).
failed = RateLimitedLog(log)


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    message: str = ""


class LdapProvider:
    def __init__(
        self,
        cfg: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        counters: Counters = COUNTERS,
        tunables: SweepTunables | None = None,
        hooks: Callable[[Context], Hooks] = Hooks,
    ) -> None:
        self.ctx = Context(cfg, client, cache, counters, SchemaMap.from_config(cfg))
        self.hooks = hooks(self.ctx)
        self.decoder = Decoder(self.ctx, self.hooks)
        self.searcher = Searcher(self.ctx)
        self.sweeps = Sweeps(self.ctx, self.decoder, tunables or SweepTunables())
        self._bases_known = bool(self.ctx.schema.user_bases and self.ctx.schema.group_bases)
        # The last lookup a server limit cut beyond splitting (shown by `cached status`
        # until the same lookup succeeds: the limit was raised or the data shrank).
        self.limit_error = ""
        self._limit_lookup: tuple[str, str] | None = None
        self.limit_time = 0.0
        # Told the names of a user's groups stored ahead of the rest of an initgroups
        # answer (save.store_initgroups; the service tells the responder): None, nobody.
        self.on_groups_stored: Callable[[str, list[str]], None] | None = None
        # Work a request leaves for after its answer (after_answer).
        self._after: list[Callable[[], None]] = []

    # The long-lived parts every request shares (cached/ldap/context.py).
    @property
    def cfg(self) -> DomainConfig:
        return self.ctx.cfg

    @property
    def cache(self) -> BackendCache:
        return self.ctx.cache

    @property
    def counters(self) -> Counters:
        return self.ctx.counters

    @property
    def schema(self) -> SchemaMap:
        return self.ctx.schema

    @property
    def client(self) -> LdapClient:
        return self.ctx.client

    @client.setter
    def client(self, client: LdapClient) -> None:
        self.ctx.client = client

    # -- plumbing ------------------------------------------------------------------

    def _prepare(self) -> SchemaMap:
        """Connect, and fill unset search bases from the root DSE (as SSSD does)."""
        ctx = self.ctx
        ctx.client.connect()
        if not self._bases_known:
            base = ctx.client.naming_context("ldap_search_base")
            ctx.schema = ctx.schema.with_default_base(base)
            self._bases_known = True
        self.hooks.prepare()
        return ctx.schema

    @property
    def after_pending(self) -> bool:
        """Whether a request left work for after its answer (:meth:`after_answer`)."""
        return bool(self._after)

    def after_answer(self) -> None:
        """Run the work requests left for after their answers: the record of the levels
        above a big first level (cached/ldap/above.py ``record_cold``, 19 ms of a cold
        initgroups of bigroupuser's 113 ms, replayed) and, with the walk it holds, the
        freeing of the request's objects. The service runs it once the answer is on
        its way (the responder and the client work meanwhile, on the other core);
        every request runs it first in any case, so the next one finds the record."""
        with gcpause.paused():
            while self._after:
                self._after.pop(0)()

    def _walk(self, started: float, last_run: bool = False) -> Walk:
        """The state of one run of a request: new for each, so nothing carries over."""
        w = Walk(self.ctx, self.decoder, self.searcher, self.sweeps, last_run)
        w.started = started
        return w

    def _run(self, stat: str, kind: str, key: str, fn: Callable[[Walk], Result]) -> Result:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            # Not a name any directory can hold (the NSS codec already refuses such
            # bytes; this guards other callers).
            return Result(Outcome.NOT_FOUND, "name is not valid UTF-8")
        # cache.request(): what this request stores is stored expired if an invalidation
        # commits while it runs (docs/ARCHITECTURE.md §5, "Invalidation and the
        # backend's writes").
        self.after_answer()
        with self.counters.timer(stat), gcpause.paused(), self.cache.request():
            # Every entry this request stores was read after this moment (the stamp
            # trust rule, cached/ldap/stamps.py).
            started = time.time()
            try:
                result = self._runs(fn, started)
                if self._limit_lookup == (kind, key):
                    self.limit_error, self._limit_lookup = "", None
                return result
            except LdapOffline as e:
                return Result(Outcome.OFFLINE, str(e))
            except StoreWriteError as e:
                # The cache could not be written (full filesystem): one line, and the
                # responder serves what the cache holds.
                failed.log(type(e).__name__, logging.ERROR, "%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            except LdapLimitExceeded as e:
                # A truncated answer is never stored: the request fails, loudly, and
                # `cached status` shows the last such failure (docs/compatibility.md §9.5).
                self.limit_error = f"{kind} {key}: {e}"
                self._limit_lookup = (kind, key)
                self.limit_time = time.time()
                failed.log(type(e).__name__, logging.ERROR, "%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            except LdapError as e:
                failed.log(type(e).__name__, logging.ERROR, "%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            finally:
                # A sweep sent ahead and not read (Walk.sweep_ahead): its answer is read
                # and dropped before the request ends, so no server thread is left
                # writing to a connection nobody reads.
                self.client.drop_ahead()
                # The member values the C reader interned for this request let go (the
                # walk keeps those it holds).
                intern_clear()

    def _runs(self, fn: Callable[[Walk], Result], started: float) -> Result:
        """``fn`` again when a group changed under it (save.changed_since_read), at
        most CHANGED_RETRIES times, each run with a walk of its own; the last run
        stores such groups incomplete."""
        for _ in range(save.CHANGED_RETRIES):
            try:
                return fn(self._walk(started))
            except save.ChangedDuringRequest as e:
                log.info("%s; reading again", e)
        return fn(self._walk(started, last_run=True))

    # -- ids and filters (the AD provider, cached/ldap/ad.py, maps SIDs instead) ----

    # -- users ---------------------------------------------------------------------

    def user_by_name(self, name: str) -> Result:
        def run(w: Walk) -> Result:
            s = self._prepare()
            entries = self.searcher.search(s.user_bases, s.user_by_name(name), s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                user = save.store_users(w, batch, entries)
                if user is None:
                    self.cache.delete_user(batch, name)
                    return Result(Outcome.NOT_FOUND)
            # case_sensitive = true and the server matched another case: not this name.
            # Another value of a multi-valued name finds the user (SSSD's nameAlias).
            if self.cache.key(name) not in {
                self.cache.key(n) for e in entries for n in entry_names(e, s.user_name)
            }:
                return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", name, run)

    def user_by_uid(self, uid: int) -> Result:
        def run(w: Walk) -> Result:
            s = self._prepare()
            if not self.cfg.id_in_range(uid):
                return Result(Outcome.NOT_FOUND)
            filt = self.hooks.user_by_uid_filter(uid)
            entries = self.searcher.search(s.user_bases, filt, s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                if save.store_users(w, batch, entries) is None:
                    old = self.cache.user_by_uid(uid).value
                    if old is not None:
                        self.cache.delete_user(batch, old.name)
                    return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", str(uid), run)

    # -- netgroups -----------------------------------------------------------------

    def netgroup_by_name(self, name: str) -> Result:
        def run(_w: Walk) -> Result:
            s = self._prepare()
            with self.counters.timer(LDAP_DECODE):
                ng, modstamp = netgroups.fetch(self.searcher, s, name)
            self.cache.store_netgroup(name, ng, modstamp)
            return Result(Outcome.NOT_FOUND if ng is None else Outcome.FOUND)

        return self._run(REQ_NETGROUP, "netgroup", name, run)

    # -- groups --------------------------------------------------------------------

    def _group(self, w: Walk, filt: str, name: str | None, gid: int | None) -> Result:
        s = self._prepare()
        # The stored group and the groups below it its answer is expanded from.
        held = refresh.stored_closure(w, name, gid)
        w.from_entries = bool(held and stamps.due(self.ctx, held))
        if (
            held
            and not w.from_entries
            and not self.cfg.ignore_group_members
            and refresh.refresh_group(w, filt, name, held)
        ):
            # Held, and unchanged with every group below it: validated by stamps, no
            # member value fetched (cached/ldap/refresh.py).
            return Result(Outcome.FOUND)
        entries = w.search_group_bases(filt)
        member = self.decoder.gkeys().member
        cap, sweep = w.sweep_ahead(max((len(e.attrs.get(member, ())) for e in entries),
                                       default=0))  # fmt: skip
        top = None
        for g in [g for e in entries if (g := w.group_entry(e)) is not None]:
            if name is None or self.cache.key(name) in {
                self.cache.key(n) for n in entry_names(g.entry, s.group_name)
            }:
                top = g
                break
        if top is None:
            with self.cache.write() as batch:
                old = (
                    name
                    if gid is None
                    else getattr(self.cache.group_by_gid(gid).value, "name", None)
                )
                if old is not None:
                    self.cache.delete_group(batch, old)
            return Result(Outcome.NOT_FOUND)
        key = normalize_dn(top.entry.dn)
        found = {key: top}
        known: Known = {}
        if s.bis and not self.cfg.ignore_group_members:
            budget = {key: s.nesting_level}
            with self.counters.timer(NESTED_RESOLVE):
                first_round = w.unknown(found, budget, known)
                if sweep:  # its answer read now (None: a server limit cut it, paged)
                    w.swept = self.sweeps.read_unpaged(cap, sweep, self.client.search_many(sweep))
                # Deref names what a sweep did not (groups, or all when not swept).
                if self.sweeps.tunables.before_deref:
                    w.sweep_users(first_round, known)
                self._name_big_group(w, top, first_round, known)
                w.closure(found, budget, known, [])
        with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
            save.store_groups(w, batch, found, known)
            if gid is not None and top.posix:
                # Another group of the closure may share the gid (stored below its
                # level, incomplete): the answer is the group looked up.
                self.cache.own_gid(batch, top.name, top.gid)
        return Result(Outcome.FOUND)

    def _name_big_group(self, w: Walk, g: GroupEntry, lookup: Lookup, known: Known) -> None:
        """Name the members of the group looked up in one base search where the server
        can (the deref control here; ASQ on AD, cached/ldap/ad_initgroups.py)."""
        w.by_deref(g, lookup, known)

    def group_by_name(self, name: str) -> Result:
        def run(w: Walk) -> Result:
            s = self._prepare()
            return self._group(w, s.group_by_name(name), name, None)

        return self._run(REQ_GROUP, "group", name, run)

    def group_by_gid(self, gid: int) -> Result:
        def run(w: Walk) -> Result:
            self._prepare()
            if not self.cfg.id_in_range(gid):
                return Result(Outcome.NOT_FOUND)
            return self._group(w, self.hooks.group_by_gid_filter(gid), None, gid)

        return self._run(REQ_GROUP, "group", str(gid), run)

    # -- initgroups ----------------------------------------------------------------

    def initgroups(self, name: str) -> Result:
        return self._run(REQ_INITGR, "initgroups", name, lambda w: self._initgroups(w, name))

    def _initgroups_user(self, w: Walk, name: str) -> tuple[User | None, list[Entry]]:
        """The user of an initgroups: from the cache when it was stored within
        ``stamps.USER_JUST_STORED`` seconds (the getpwnam that `id` or a login makes
        first), else one search; (None, []) and the cached entry deleted when the server
        has no such user."""
        s = self.schema
        cached = self.cache.user_by_name(name)
        user = cached.value if cached.state is State.VALID else None
        if (
            user is not None
            and user.dn
            and time.time() - cached.times.last_update < stamps.USER_JUST_STORED
        ):
            return user, []
        entries = self.searcher.search(s.user_bases, s.user_by_name(name), s.user_attrs)
        key = self.cache.key(name)
        # Any value of a multi-valued name finds the user (SSSD's nameAlias); the
        # groups are stored under its primary name (docs/compatibility.md §9.5).
        user = next(
            (
                u
                for e in entries
                if key in {self.cache.key(n) for n in entry_names(e, s.user_name)}
                and (u := self.decoder.to_user(e))
            ),
            None,
        )
        if user is None:
            with self.cache.write() as batch:
                self.cache.delete_user(batch, name)
            return None, []
        return user, entries

    def _initgroups(self, w: Walk, name: str) -> Result:
        s = self._prepare()
        user, entries = self._initgroups_user(w, name)
        if user is None:
            return Result(Outcome.NOT_FOUND)

        found: dict[str, GroupEntry] = {}
        known: Known = {}
        # The primary group, when the cache does not hold it (§6.3 step 5): asked in
        # the first search of the walk, not in a search of its own.
        # gid 0: none (auto_private_groups = true and no gidNumber).
        primary_state = self.cache.group_by_gid(user.gid).state if user.gid else State.VALID
        primary = user.gid if primary_state is State.MISSING else None
        stored = self.cache.initgroups(user.name).value
        if not s.ad and not self.cfg.ignore_group_members and stored and stored.fetched:
            # A refresh: stamps first, whole entries only for what changed (refresh.py).
            # The primary group expired too (`cached cache -E`) is validated in the same
            # round trip, so `id`'s getgrgid of it is answered from the cache.
            expired = primary_state in (State.MISSING, State.EXPIRED)
            refresh.refresh_initgroups(w, user, entries, user.gid if expired else None)
            return Result(Outcome.FOUND)
        if s.bis:
            with self.counters.timer(NESTED_RESOLVE):
                mine = w.closure(found, {}, known, [user.dn], primary)
            # What the revalidation by stamps will find above the first level, from
            # the group sweep's entries (when it went out), once the answer is sent.
            user_key = normalize_dn(user.dn)
            self._after.append(lambda: above.record_cold(w, user.name, user_key, found))
        else:
            # Split where a size limit cuts it, as the refresh's search of the same
            # filter (refresh.walk_stamps) is: a user in more groups than the limit.
            attrs = s.group_attrs(members=not self.cfg.ignore_group_members)
            walk: list[Job] = [(s.group_bases, [("x", s.groups_with_members([user.name]))],
                                attrs, None)]  # fmt: skip
            for e in self.searcher.split(walk, self.searcher.round_filter)[0]:
                if (g := w.group_entry(e)) is not None:
                    found[normalize_dn(e.dn)] = g
            mine = set(found)
            if primary is not None and not any(g.gid == primary for g in found.values()):
                for g in w.search_groups(self.hooks.group_by_gid_filter(primary))[:1]:
                    found[normalize_dn(g.entry.dn)] = g
        save.store_initgroups(w, name, user, entries, found, known, mine, self.on_groups_stored)
        return Result(Outcome.FOUND)
