"""One lookup flow for every kind of lookup, NSS and D-Bus alike, in the shape of
SSSD's cache_req.

negative cache -> cache read -> expiry classification -> (backend refresh) -> cache
re-read -> answer (reference §6.4). What differs per kind — the key type, how to read
the cache, which backend request refreshes it, which filter applies, whether a stale
value is worth answering — is a typed row, :class:`Plugin`; adding a lookup is adding a
row, not copying the flow. How a found value is answered (the NSS reply, the memory
cache, a D-Bus property) is the caller's: ``nss/server.py`` binds each command to a
plugin and its fill function, as SSSD's ``get_nss_cmds()`` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from cached.cache import DomainCache, GroupView, Initgroups, Lookup, State
from cached.config import Config, DomainConfig, PrivateGroups
from cached.counters import COUNTERS, NSS_BACKEND, NSS_SOON, NSS_STALE, NSS_WAIT
from cached.ipc import framing
from cached.ipc.ops import BadMessage, DomainStateNote, LookupReply, LookupRequest, Op, Outcome
from cached.model import Kind, Netgroup, User
from cached.ratelimit import RateLimitedLog
from cached.responder.policy import ServePolicy

log = logging.getLogger(__name__)
# Lines any local user's lookups can cause, one per request (a dead backend, a stuck
# one): one per kind and minute (cached/ratelimit.py).
limited = RateLimitedLog(log)

K = TypeVar("K", str, int)
V = TypeVar("V", User, GroupView, Initgroups, Netgroup)


@dataclass(frozen=True)
class Plugin(Generic[K, V]):
    """What one kind of lookup needs (SSSD: ``struct cache_req_plugin``)."""

    name: str  # for logs: getpwnam, getgrgid, ...
    kind: Kind
    key: type[K]
    # Called on the domain's cache object (not DomainCache's function), so the flow's
    # unit tests can hand it a fake cache.
    read: Callable[[DomainCache, K], Lookup[V]]
    backend_op: Op  # the backend request that refreshes it
    # Whether the policy lets a domain answer the key at all (a filtered name, an id
    # out of range: no cache read, no backend request), and a found value.
    admits: Callable[[ServePolicy, DomainConfig, K], bool]
    served: Callable[[ServePolicy, DomainConfig, V], bool]
    # Whether an expired value may be answered without the backend (offline, stalled,
    # within cache_first_wait): not a user's groups that were never fetched.
    stale_ok: Callable[[V], bool] = lambda _v: True

    def negative_key(self, key: K) -> NegKey:
        return (self.name, key)


NegKey = tuple[Hashable, ...]  # (plugin name, key)


def _name_admitted(kind: Kind) -> Callable[[ServePolicy, DomainConfig, str], bool]:
    return lambda policy, domain, name: not policy.name_filtered(domain, kind, name)


def _id_admitted(_policy: ServePolicy, domain: DomainConfig, key: int) -> bool:
    return domain.id_in_range(key)


GETPWNAM: Plugin[str, User] = Plugin(
    "getpwnam", Kind.USER, str, lambda c, k: c.user_by_name(k), Op.USER_BY_NAME,
    _name_admitted(Kind.USER), ServePolicy.user_ok,
)  # fmt: skip
GETPWUID: Plugin[int, User] = Plugin(
    "getpwuid", Kind.USER, int, lambda c, k: c.user_by_uid(k), Op.USER_BY_UID,
    _id_admitted, ServePolicy.user_ok,
)  # fmt: skip
GETGRNAM: Plugin[str, GroupView] = Plugin(
    "getgrnam", Kind.GROUP, str, lambda c, k: c.group_by_name(k), Op.GROUP_BY_NAME,
    _name_admitted(Kind.GROUP), ServePolicy.group_view_ok,
)  # fmt: skip
GETGRGID: Plugin[int, GroupView] = Plugin(
    "getgrgid", Kind.GROUP, int, lambda c, k: c.group_by_gid(k), Op.GROUP_BY_GID,
    _id_admitted, ServePolicy.group_view_ok,
)  # fmt: skip
INITGR: Plugin[str, Initgroups] = Plugin(
    "initgroups", Kind.INITGR, str, lambda c, k: c.initgroups(k), Op.INITGROUPS,
    _name_admitted(Kind.INITGR), ServePolicy.initgroups_ok,
    stale_ok=lambda ig: ig.fetched,
)  # fmt: skip


# SSSD's filter_users and filter_groups do not apply to netgroups, nor id ranges.
SETNETGRENT: Plugin[str, Netgroup] = Plugin(
    "setnetgrent", Kind.NETGROUP, str, lambda c, k: c.netgroup_by_name(k), Op.NETGROUP_BY_NAME,
    lambda _p, _d, _k: True, lambda _p, _d, _v: True,
)  # fmt: skip


def _private(got: Lookup[User], hybrid: bool) -> Lookup[GroupView]:
    """A user lookup as the lookup of its private group (auto_private_groups): with
    ``hybrid``, only a user whose gid is its uid has one (SSSD's
    hybrid_domain_user_to_group); another is no group, whatever its state."""
    u = got.value
    if u is None:
        return Lookup(got.state, None, got.times)
    if hybrid and u.gid != u.uid:
        # A user, and no group: VALID with no value (Lookups._cached) while the user
        # needs no refresh.
        state = State.VALID if got.state is State.MIDPOINT else got.state
        return Lookup(state, None, got.times)
    return Lookup(got.state, ServePolicy.private_group(u), got.times)


def _private_plugins(hybrid: bool) -> tuple[Plugin[int, GroupView], Plugin[str, GroupView]]:
    """The lookups of private groups by gid and by name: the user by uid or name, its
    refresh the user's (SSSD's LDAP provider, finding no group, looks for the user:
    ldap_id.c groups_get_mpg_done)."""
    tag = "hybrid" if hybrid else "private"
    return (
        Plugin(f"getgrgid ({tag})", Kind.GROUP, int,
               lambda c, k: _private(c.user_by_uid(k), hybrid), Op.USER_BY_UID,
               _id_admitted, ServePolicy.group_view_ok),
        Plugin(f"getgrnam ({tag})", Kind.GROUP, str,
               lambda c, k: _private(c.user_by_name(k), hybrid), Op.USER_BY_NAME,
               _name_admitted(Kind.GROUP), ServePolicy.group_view_ok),
    )  # fmt: skip


PRIVATE_BY_GID, PRIVATE_BY_NAME = _private_plugins(hybrid=False)
HYBRID_BY_GID, HYBRID_BY_NAME = _private_plugins(hybrid=True)


@dataclass(frozen=True)
class Found(Generic[V]):
    domain: DomainConfig
    cache: DomainCache
    value: V
    state: State
    # The backend's serial of the request this answer waited for, when that request
    # sent notes ahead of its answer (NssResponder.prefill_stored): they belong to
    # this answer alone. 0: none.
    early: int = 0


def groups_of(found: Found[Initgroups]) -> list[str]:
    """The names of a resolved user's groups, nesting included, and of its primary
    group (by its gid, from the cache) when stored, once each: what SSSD matches group
    rules against (the simple access provider's lists, ``sysdb_get_sudo_user_info``)."""
    ig = found.value
    groups = list(ig.groups)
    primary = found.cache.group_by_gid(ig.user.gid).value
    if primary is not None and primary.name not in groups:
        groups.append(primary.name)
    return groups


# The uid of the NSS client whose request is being answered (SO_PEERCRED, set by the
# responder for each connection's task); it travels to the backend so that one uid's
# flood of cold lookups queues behind itself, not in front of the others (docs/threat-model.md).
CLIENT_UID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "cached_client_uid", default=None
)


class Backend(Protocol):
    """What the flow needs of a backend connection (``ipc.aio.RpcClient``)."""

    async def call(self, op: Op, timeout: float = 30.0, **args: Any) -> dict[str, Any]: ...


@dataclass
class DomainState:
    """What the responder knows of a domain's backend, learned from its answers and
    announcements, never asked per object.

    ``offline_until``: the backend said it is offline and will not try a server before
    then (monotonic); until then expired entries are answered from the cache with no
    backend round trip and missing ones fail at once. ``stalled``: a bounded wait
    (``cache_first_wait``) ran out; until the backend answers anything, other expired
    lookups of the domain do not wait (and do not queue refreshes) either.
    """

    offline_until: float = 0.0
    stalled: bool = False
    reason: str = ""
    since: float = 0.0  # wall-clock time it went offline
    soon_next: float = 0.0  # monotonic: no note of entries past their midpoint before

    def offline(self, now: float) -> bool:
        return now < self.offline_until


class NegativeCache:
    """Names and ids recently found not to exist (``entry_negative_timeout``).

    The NSS socket is open to every local user, so the table is bounded: expired
    entries are swept at most once per timeout period, and beyond ``MAX_ENTRIES``
    the whole table is dropped (it is only a shortcut; the backend answers again).
    """

    MAX_ENTRIES = 100_000

    def __init__(self, timeout: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self._until: dict[tuple[str, NegKey], float] = {}
        self._next_sweep = 0.0

    def hit(self, domain: str, key: NegKey) -> bool:
        until = self._until.get((domain, key))
        if until is None:
            return False
        if until <= self.clock():
            del self._until[(domain, key)]
            return False
        return True

    def add(self, domain: str, key: NegKey) -> None:
        if self.timeout <= 0:
            return
        now = self.clock()
        if now >= self._next_sweep:
            self._until = {k: t for k, t in self._until.items() if t > now}
            self._next_sweep = now + self.timeout
        if len(self._until) >= self.MAX_ENTRIES:
            self._until.clear()
        self._until[(domain, key)] = now + self.timeout

    def clear(self) -> None:
        self._until.clear()

    def __len__(self) -> int:
        return len(self._until)


RefreshKey = tuple[str, Op, str | int]  # (domain, backend op, key)

# At most one note a second to a domain's backend that entries were answered past their
# midpoint (Lookups.refresh_soon): the backend keeps one flag, however many come.
SOON_NOTE_INTERVAL = 1.0


class NotNow(enum.Enum):
    """:meth:`Lookups.lookup_now`: the answer needs the backend."""

    NOT_NOW = "not now"


NOT_NOW: Final = NotNow.NOT_NOW


class Lookups:
    def __init__(
        self,
        config: Config,
        caches: dict[str, DomainCache],
        backends: dict[str, Backend],
        backend_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self.caches = caches
        self.backends = backends
        self.backend_timeout = backend_timeout
        self.negative = NegativeCache(config.nss.entry_negative_timeout)
        self.inflight: dict[RefreshKey, asyncio.Future[Outcome]] = {}
        # A backend request (the task of _call_backend) -> its answer's serial, when
        # it sent notes (LookupReply.early); gone with the task.
        self.early_of: weakref.WeakKeyDictionary[asyncio.Future[Outcome], int] = (
            weakref.WeakKeyDictionary()
        )
        self._waiting_uids: dict[RefreshKey, set[int | None]] = {}
        self._extra: set[asyncio.Future[Outcome]] = set()  # referenced until done
        self._notes: set[asyncio.Future[None]] = set()  # refresh_soon's, until done
        self.policy = ServePolicy(config)
        # Domains with auto_private_groups: their group lookups take _lookup_groups.
        self._private_domains = [d for d in config.domains
                                 if d.auto_private_groups != PrivateGroups.FALSE]  # fmt: skip
        self._hybrid_domains = [d for d in self._private_domains
                                if d.auto_private_groups == PrivateGroups.HYBRID]  # fmt: skip
        self.states = {d.name: DomainState() for d in config.domains}
        self.first_wait = float(config.nss.cache_first_wait)
        self.clock = time.monotonic

    # -- the backend -----------------------------------------------------------------

    def domain_state(self, note: DomainStateNote) -> None:
        """Record the backend's view of a domain (from an answer or an announcement)."""
        domain, online, retry_in, reason = note.domain, note.online, note.retry_in, note.reason
        st = self.states.get(domain)
        if st is None:
            return
        st.stalled = False
        if online:
            if st.offline_until:
                log.info("domain %s online again", domain)
            st.offline_until, st.reason, st.since = 0.0, "", 0.0
        else:
            if not st.offline_until:
                st.since = time.time()
            # At least a moment: "offline, retry now" must not turn every lookup into
            # a round trip that only repeats it.
            st.offline_until = self.clock() + max(retry_in, 1.0)
            st.reason = reason

    async def _call_backend(self, domain: str, op: Op, key: str | int) -> Outcome:
        start = time.perf_counter()
        try:
            raw = await self.backends[domain].call(
                op, timeout=self.backend_timeout, **LookupRequest(key, CLIENT_UID.get()).args()
            )
            reply = LookupReply.parse(raw)
        except (framing.RpcError, BadMessage) as e:
            # A dead or restarting backend is like an offline server: serve the cache.
            limited.log(("unavailable", domain, type(e).__name__), logging.WARNING,
                        "backend %s unavailable for %s %r: %s", domain, op, key, e)  # fmt: skip
            st = self.states.get(domain)
            if st is not None:
                st.stalled = False
            return Outcome.UNAVAILABLE
        finally:
            COUNTERS.add(NSS_BACKEND, 1, time.perf_counter() - start)
        task = asyncio.current_task()
        if reply.early and task is not None:
            self.early_of[task] = reply.early
        online = reply.online and reply.outcome is not Outcome.OFFLINE
        self.domain_state(DomainStateNote(domain, online, reply.retry_in, reply.message))
        return reply.outcome

    def refresh(self, domain: str, op: Op, key: str | int) -> asyncio.Future[Outcome]:
        """Ask the backend to refresh; concurrent lookups of one object share it."""
        ikey = (domain, op, key)
        fut = self.inflight.get(ikey)
        uid = CLIENT_UID.get()
        if fut is None:
            fut = asyncio.ensure_future(self._call_backend(domain, op, key))
            self.inflight[ikey] = fut
            self._waiting_uids[ikey] = {uid}
            fut.add_done_callback(lambda f: self._forget(ikey, f))
        elif uid not in self._waiting_uids.setdefault(ikey, set()):
            # Another uid waits for this refresh too: the backend queues its one LDAP
            # request for this uid as well, so it runs at the earliest of their turns
            # (a flooding uid that asked first cannot keep it at the back of its queue).
            self._waiting_uids[ikey].add(uid)
            extra = asyncio.ensure_future(self._call_backend(domain, op, key))
            self._extra.add(extra)
            extra.add_done_callback(self._extra.discard)
        return fut

    def refresh_soon(self, domain: DomainConfig, op: Op, key: str | int) -> None:
        """An entry answered past its midpoint (``entry_cache_nowait_percentage``): have
        it refreshed in the background. With refresh ahead on, a note to the backend,
        at most one a second per domain, whose early run refreshes whatever is past its
        midpoint together (a user's groups with one walk by stamps, not one search per
        ``getgrgid``: docs/compatibility.md §9.7); with it off, and for netgroups,
        which early runs leave to the scheduled ones, a request of its own, as SSSD's."""
        if domain.refresh_expired_interval <= 0 or op is Op.NETGROUP_BY_NAME:
            self.refresh(domain.name, op, key)
            return
        st = self.states[domain.name]
        now = self.clock()
        if now < st.soon_next:
            return
        st.soon_next = now + SOON_NOTE_INTERVAL
        COUNTERS.add(NSS_SOON)
        note = asyncio.ensure_future(self._note_soon(domain.name))
        self._notes.add(note)
        note.add_done_callback(self._notes.discard)

    async def _note_soon(self, domain: str) -> None:
        try:
            await self.backends[domain].call(Op.REFRESH_SOON, timeout=self.backend_timeout)
        except framing.RpcError as e:
            # Not up or restarting: the next answer past the midpoint notes again.
            log.debug("backend %s: note of entries past their midpoint: %s", domain, e)

    def _forget(self, ikey: RefreshKey, fut: asyncio.Future[Outcome]) -> None:
        if self.inflight.get(ikey) is fut:  # not a request begun after an invalidation
            del self.inflight[ikey]
            self._waiting_uids.pop(ikey, None)

    def invalidated(self) -> None:
        """Entries were expired: a lookup asked from now on starts its own backend
        request rather than join one begun before (whose answer may predate the
        change invalidated for; the backend runs such a lookup again too,
        BackendService.request). Those begun before still answer their own
        waiters. Were the old request shared, the backend would never see the
        second."""
        self.inflight.clear()
        self._waiting_uids.clear()
        self.negative.clear()

    # -- the flow ----------------------------------------------------------------------

    def servable(self, plugin: Plugin[K, V], domain: DomainConfig, value: V) -> bool:
        """Whether ``value`` of ``domain`` may be answered (ids, filters)."""
        return plugin.served(self.policy, domain, value)

    async def lookup(self, plugin: Plugin[K, V], key: K, hybrid: bool = True) -> Found[V] | None:
        """The cached answer of ``plugin`` for ``key`` in the first domain that has one
        it may serve. A domain whose entry is filtered (by name, or out of its id
        range) answers nothing and the next domain is asked, as SSSD's cache_req does:
        a uid of a user filtered in the first domain is another domain's user's (as a
        differential of several domains against SSSD 2.8.2 shows).

        A group in a domain with ``auto_private_groups = true`` is a real group, else
        the private group of a user (``_lookup_private``); when no domain has either,
        a domain with ``hybrid`` is asked for a private group (``_hybrid``)."""
        if self._private_domains and plugin.kind is Kind.GROUP:
            return await self._lookup_groups(plugin, key, hybrid)
        for domain, dkey, nkey in self._domains(plugin, key):
            found = await self._lookup_domain(plugin, domain, dkey, nkey)
            if found is not None and self.servable(plugin, domain, found.value):
                return found
        return None

    def lookup_now(
        self, plugin: Plugin[K, V], key: K, hybrid: bool = True
    ) -> Found[V] | NotNow | None:
        """:meth:`lookup` where it needs no backend answer (the warm path: valid,
        midpoint, offline or stalled); :data:`NOT_NOW` where it would wait, and then
        :meth:`lookup` does it all again (a cache read; nothing was started)."""
        if self._private_domains and plugin.kind is Kind.GROUP:
            return self._lookup_groups_now(plugin, key, hybrid)
        for domain, dkey, _nkey in self._domains(plugin, key):
            found = self._cached(plugin, domain, self.caches[domain.name], dkey)
            if isinstance(found, Lookup):
                return NOT_NOW
            if found is not None and self.servable(plugin, domain, found.value):
                return found
        return None

    # -- private groups (auto_private_groups) -------------------------------------------

    def _group_steps(
        self, plugin: Plugin[K, V], domain: DomainConfig
    ) -> tuple[Plugin[Any, Any], ...]:
        """The lookups that may answer a group of ``domain``, each in turn (its cache,
        then its backend) until one answers: the real group, then (auto_private_groups
        = true) a user's private group. SSSD's cache holds one or the other under a
        name or gid (sysdb_add_user and sysdb_add_group refuse the second), so its
        answer depends on which it stored first; here the real group always comes
        first, as SSSD's provider searches groups first (docs/compatibility.md,
        "Private groups")."""
        if domain.auto_private_groups != PrivateGroups.TRUE:
            return (plugin,)
        return (plugin, PRIVATE_BY_GID if plugin.key is int else PRIVATE_BY_NAME)

    def _group_keys(self, plugin: Plugin[K, V], key: K) -> Iterator[tuple[DomainConfig, K]]:
        """The domains whose filters and id ranges admit ``key``, with the key there."""
        if isinstance(key, str):
            for domain, dkey in self._candidates(key):
                if plugin.admits(self.policy, domain, dkey):
                    yield domain, dkey
        else:
            for domain in self.config.domains:
                if plugin.admits(self.policy, domain, key):
                    yield domain, key

    def _hybrid_steps(
        self, plugin: Plugin[K, V], key: K
    ) -> Iterator[tuple[Plugin[Any, GroupView], DomainConfig, K, NegKey]]:
        """SSSD's second pass (nss_get_object.c sss_nss_get_hybrid_object_step), once
        no domain has a real group: the hybrid domains, to be asked for a user, with
        the lookup, the key there and its negative-cache key (not a negative one)."""
        if not self._hybrid_domains:
            return
        step: Plugin[Any, GroupView] = HYBRID_BY_GID if plugin.key is int else HYBRID_BY_NAME
        for domain, dkey in self._group_keys(plugin, key):
            nkey = step.negative_key(dkey)
            if domain.auto_private_groups == PrivateGroups.HYBRID and not self.negative.hit(
                domain.name, nkey
            ):
                yield step, domain, dkey, nkey

    async def _lookup_groups(self, plugin: Plugin[K, V], key: K, hybrid: bool) -> Found[V] | None:
        for domain, dkey in self._group_keys(plugin, key):
            for step in self._group_steps(plugin, domain):
                nkey = step.negative_key(dkey)
                if self.negative.hit(domain.name, nkey):
                    continue
                found = await self._lookup_domain(step, domain, dkey, nkey)
                if found is not None:
                    if self.servable(step, domain, found.value):
                        return cast(Found[V], found)
                    break  # found, and filtered: no answer from this domain
        if not hybrid:
            return None
        for step, domain, dkey, nkey in self._hybrid_steps(plugin, key):
            found = await self._lookup_domain(step, domain, dkey, nkey)
            if found is not None and self.servable(step, domain, found.value):
                if isinstance(key, str):
                    # By name: not when a real group has its gid (it would shadow
                    # it, sss_nss_get_hybrid_gid_verify_done).
                    real = await self.lookup(GETGRGID, found.value.gid, hybrid=False)
                    if real is not None:
                        return None
                return cast(Found[V], found)
        return None

    def _lookup_groups_now(
        self, plugin: Plugin[K, V], key: K, hybrid: bool
    ) -> Found[V] | NotNow | None:
        """:meth:`_lookup_groups` without waiting for a backend."""
        for domain, dkey in self._group_keys(plugin, key):
            cache = self.caches[domain.name]
            for step in self._group_steps(plugin, domain):
                if self.negative.hit(domain.name, step.negative_key(dkey)):
                    continue
                got = self._cached(step, domain, cache, dkey)
                if isinstance(got, Lookup):
                    return NOT_NOW
                if got is not None:
                    if self.servable(step, domain, got.value):
                        return cast(Found[V], got)
                    break
        if not hybrid:
            return None
        for step, domain, dkey, _nkey in self._hybrid_steps(plugin, key):
            got = self._cached(step, domain, self.caches[domain.name], dkey)
            if isinstance(got, Lookup):
                return NOT_NOW
            if got is not None and self.servable(step, domain, got.value):
                if isinstance(key, str):
                    real = self.lookup_now(GETGRGID, got.value.gid, hybrid=False)
                    if real is NOT_NOW:
                        return NOT_NOW
                    if real is not None:
                        return None
                return cast(Found[V], got)
        return None

    def owns(self, domain: DomainConfig, by_name: Plugin[str, V], name: str,
             by_id: Plugin[int, V], ident: int) -> bool:  # fmt: skip
        """Whether a record of ``domain``'s entry in the memory cache, which clients read
        by name and by id alike, is what the flow answers for both (one domain:
        always). Not when an earlier domain admits the id (its id range, or none: it
        may hold that id), nor when an earlier domain that admits the name holds an
        entry of that name in its cache: those are answered over the socket only (a
        differential of several domains against SSSD 2.8.2: after `id` of a later
        domain's user, the memory cache answered an earlier domain's gid and group
        name with the later domain's groups). A name is not held against a later
        domain merely because an earlier one admits it, which every domain without
        filters does: with disjoint min_id/max_id each domain's entries go in.
        ``name`` is the output name, the memory cache's key."""
        if len(self.config.domains) == 1:
            return True  # the usual case, on every answer: no list built
        return self.owned(domain, by_name, by_id, [(name, ident)])[0]

    def owned(self, domain: DomainConfig, by_name: Plugin[str, V], by_id: Plugin[int, V],
              entries: list[tuple[str, int]]) -> list[bool]:  # fmt: skip
        """:meth:`owns` of each (output name, id) of ``domain``'s entries, each earlier
        domain's cache read once for all (the prefill's 2,085 groups)."""
        if len(self.config.domains) == 1:
            return [True] * len(entries)
        if domain not in self.config.domains:
            return [False] * len(entries)
        ok = [self.first_admitting(by_id, ident) is domain for _name, ident in entries]
        held: set[str] = set()
        admits = by_name.admits
        for earlier in self.config.domains:
            if earlier is domain:
                break
            names = [n for (n, _i), o in zip(entries, ok, strict=True)
                     if o and n not in held and admits(self.policy, earlier, n)]  # fmt: skip
            if names:
                held |= self.caches[earlier.name].holds(by_name.kind, names)
        return [o and n not in held for (n, _i), o in zip(entries, ok, strict=True)]

    def _candidates(self, key: str) -> Iterator[tuple[DomainConfig, str]]:
        """The domains a name may name an entry of, with the name to look up there:
        ``name@DOMAIN`` of a configured domain is ``name`` in that domain only (with a
        non-default re_expression: as ``ServePolicy.parse_name`` splits it); an
        unqualified name is default_domain_suffix's domain's when it is set; any other
        name is looked up as given in the domains without qualified names (SSSD's
        cache_req: a domain with use_fully_qualified_names answers qualified names
        only)."""
        if self.policy.parses_names:
            parsed = self.policy.parse_name(key)
            if parsed is None:
                return
            name, only = parsed
            key = name  # looked up as the expression's name group gives it
        else:
            name, only = self.policy.lookup_name(key)
        if only is not None:
            yield only, name
            return
        for domain in self.config.domains:
            if not self.policy.qualified(domain):
                yield domain, key

    def first_admitting(self, plugin: Plugin[K, V], key: K) -> DomainConfig | None:
        """The first domain whose filters and id range admit ``key``: the one whose
        answer the flow gives for it whenever that domain has one it may serve."""
        candidates = (
            self._candidates(key)
            if isinstance(key, str)
            else ((d, key) for d in self.config.domains)
        )
        for domain, dkey in candidates:
            if plugin.admits(self.policy, domain, dkey):
                return domain
        return None

    def _domains(self, plugin: Plugin[K, V], key: K) -> Iterator[tuple[DomainConfig, K, NegKey]]:
        """The domains to ask for ``key``, in order, with the key to look up there
        (``_candidates``): those whose filters and id ranges admit it and whose
        negative cache does not hold it."""
        admits, hit = plugin.admits, self.negative.hit
        if not isinstance(key, str):
            # An id: every domain, the warm path of getgrgid (no name to parse).
            nkey = plugin.negative_key(key)
            for domain in self.config.domains:
                if admits(self.policy, domain, key) and not hit(domain.name, nkey):
                    yield domain, key, nkey
            return
        for domain, dkey in self._candidates(key):
            nkey = plugin.negative_key(dkey)
            if admits(self.policy, domain, dkey) and not hit(domain.name, nkey):
                yield domain, dkey, nkey

    def _cached(
        self, plugin: Plugin[K, V], domain: DomainConfig, cache: DomainCache, key: K
    ) -> Found[V] | Lookup[V] | None:
        """What the cache answers without waiting for the backend: the value, None
        (offline and not cached: no answer from this domain), or the cache's Lookup
        when the backend must be asked (nothing has been asked yet)."""
        got = plugin.read(cache, key)
        if got.state is State.VALID:
            if got.value is not None:
                return Found(domain, cache, got.value, got.state)
            return None  # an entry that answers nothing here (a hybrid user: _private)
        st = self.states[domain.name]
        offline = st.offline(self.clock())
        if got.state is State.MIDPOINT and got.value is not None:
            # Answer now, refresh out of band (reference §6.4); offline, the refresh
            # would fail at once ("MIDPOINT refreshes fail quietly"), and a stalled
            # backend gets no more work piled on.
            # The task stays referenced in self.inflight until it is done.
            if not offline and not st.stalled:
                self.refresh_soon(domain, plugin.backend_op, key)
            return Found(domain, cache, got.value, got.state)
        if offline:
            # Offline costs nothing per object: the stale entry is the answer
            # (§6.4), a missing one is "not found" without a negative-cache entry.
            if got.value is not None:
                COUNTERS.add(NSS_STALE)
                return Found(domain, cache, got.value, got.state)
            return None
        # A stored answer worth giving without the backend: not a user's groups that
        # were never fetched (that is a missing entry, it waits).
        stale = got.value if got.value is not None and plugin.stale_ok(got.value) else None
        if stale is not None and st.stalled:
            # Another lookup's bounded wait ran out and the backend has not answered
            # since: do not wait again, nor pile refreshes onto a stuck backend. Save
            # a user's groups: that one request refreshes every group of the user,
            # which the getgrgid of each that `id` sends next would otherwise ask for
            # alone once an answer ends the stall (2,085 searches for bigroupuser: the
            # fleet benchmark's expiry phase, a host whose getgrgid of the primary
            # group had run out of cache_first_wait).
            if plugin.kind is Kind.INITGR:
                self.refresh(domain.name, plugin.backend_op, key)
            COUNTERS.add(NSS_STALE)
            return Found(domain, cache, stale, got.state)
        return got

    async def _lookup_domain(
        self, plugin: Plugin[K, V], domain: DomainConfig, key: K, nkey: NegKey
    ) -> Found[V] | None:
        cache = self.caches[domain.name]
        got = self._cached(plugin, domain, cache, key)
        if not isinstance(got, Lookup):
            return got
        st = self.states[domain.name]
        stale = got.value if got.value is not None and plugin.stale_ok(got.value) else None
        fut = self.refresh(domain.name, plugin.backend_op, key)
        waited = time.perf_counter()
        if stale is not None and self.first_wait > 0:
            # Bounded wait (cache_first_wait, a deliberate difference from SSSD): the
            # refresh goes on in the background, the cached entry is answered now.
            try:
                outcome = await asyncio.wait_for(asyncio.shield(fut), self.first_wait)
            except TimeoutError:
                if not fut.done():
                    st.stalled = True
                    limited.log(
                        ("first_wait", domain.name), logging.INFO,
                        "domain %s: no refresh of %s %r within cache_first_wait = %.0f s; "
                        "answering from the cache",
                        domain.name, plugin.name, key, self.first_wait,
                    )  # fmt: skip
                COUNTERS.add(NSS_STALE)
                COUNTERS.add(NSS_WAIT, 1, time.perf_counter() - waited)
                return Found(domain, cache, stale, got.state)
        else:
            outcome = await fut
        COUNTERS.add(NSS_WAIT, 1, time.perf_counter() - waited)
        again = plugin.read(cache, key)
        if again.value is not None:
            # Even still expired: after a failed or offline refresh, stale data is the
            # answer (invariant 4).
            return Found(domain, cache, again.value, again.state, self.early_of.get(fut, 0))
        if outcome is Outcome.NOT_FOUND:
            # Only a successful backend answer of "no such entry" is remembered;
            # offline misses are not (reference §6.4).
            self.negative.add(domain.name, nkey)
        return None

    def clear_negative(self) -> int:
        n = len(self.negative)
        self.negative.clear()
        return n

    def counts(self) -> dict[str, Any]:
        return {
            "negative_entries": len(self.negative),
            "inflight": len(self.inflight),
            "domains": {
                name: {
                    "offline": st.offline(self.clock()),
                    "since": st.since,
                    "reason": st.reason,
                    "retry_in": max(0.0, st.offline_until - self.clock()),
                    "stalled": st.stalled,
                }
                for name, st in self.states.items()
            },
            "cache_reads": COUNTERS.get("cache.read").count,
        }
