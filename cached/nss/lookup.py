"""One lookup flow for every kind of NSS lookup, in the shape of SSSD's cache_req.

negative cache -> cache read -> expiry classification -> (backend refresh) -> cache
re-read -> answer (reference §6.4). What differs per kind — how to read the cache,
which backend request refreshes it, which filter applies — is a row of ``PLUGINS``;
adding a lookup is adding a row, not copying the flow.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cached.cache import DomainCache, GroupView, Initgroups, Lookup, State
from cached.config import Config, DomainConfig
from cached.counters import COUNTERS, NSS_BACKEND, NSS_STALE
from cached.ipc import aio, framing
from cached.ipc.ops import BadMessage, DomainStateNote, LookupReply, LookupRequest, Op, Outcome
from cached.model import User

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    USER = "user"
    GROUP = "group"
    INITGR = "initgr"


@dataclass(frozen=True)
class Plugin:
    """What one kind of lookup needs (SSSD: ``struct cache_req_plugin``)."""

    name: str  # for logs: getpwnam, getgrgid, ...
    kind: Kind
    read: Callable[[DomainCache, Any], Lookup[Any]]
    backend_op: Op  # the backend request that refreshes it
    by_name: bool

    def negative_key(self, key: Any) -> tuple[str, str, Any]:
        return (self.kind.value, "name" if self.by_name else "id", key)


GETPWNAM = Plugin("getpwnam", Kind.USER, DomainCache.user_by_name, Op.USER_BY_NAME, True)
GETPWUID = Plugin("getpwuid", Kind.USER, DomainCache.user_by_uid, Op.USER_BY_UID, False)
GETGRNAM = Plugin("getgrnam", Kind.GROUP, DomainCache.group_by_name, Op.GROUP_BY_NAME, True)
GETGRGID = Plugin("getgrgid", Kind.GROUP, DomainCache.group_by_gid, Op.GROUP_BY_GID, False)
INITGR = Plugin("initgroups", Kind.INITGR, DomainCache.initgroups, Op.INITGROUPS, True)


@dataclass(frozen=True)
class Found:
    domain: DomainConfig
    cache: DomainCache
    value: Any  # User | GroupView | Initgroups
    state: State

    def output_name(self, name: str) -> str:
        # case_sensitive = false answers lower-case names, `preserving` the stored case
        # (sssd.conf(5)).
        return name.lower() if self.domain.case_sensitive == "false" else name


NegKey = tuple[str, tuple[str, str, Any]]  # (domain, plugin.negative_key(key))

# The uid of the NSS client whose request is being answered (SO_PEERCRED, set by the
# responder for each connection's task); it travels to the backend so that one uid's
# flood of cold lookups queues behind itself, not in front of the others (docs/threat-model.md).
CLIENT_UID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "cached_client_uid", default=None
)


class ServePolicy:
    """What may be *served*, checked every time an entry is answered, whatever the
    cache holds: a cache written by an older version or under an older configuration
    (``min_id = 0``, a shorter ``filter_users``) must not answer what the current one
    refuses, online or offline (docs/threat-model.md).

    * ids: ``DomainConfig.id_in_range`` (SSSD's OUT_OF_ID_RANGE: id 0 and (uid_t)-1
      never); a user whose primary gid is out of range is not served at all (SSSD:
      "filtered out! (primary gid out of range)"), and out-of-range gids are left out
      of initgroups answers;
    * names: ``filter_users``/``filter_groups``; an entry ``name@domain`` applies to
      that domain only (SSSD parses the domain), and in a case-insensitive domain the
      comparison is case-folded, as the domain compares every other name.
    """

    def __init__(self, config: Config) -> None:
        self.domains = {d.name.lower(): d for d in config.domains}
        self._filters: dict[tuple[str, Kind], frozenset[str]] = {}
        for d in config.domains:
            for kind, names in ((Kind.USER, config.nss.filter_users),
                                (Kind.GROUP, config.nss.filter_groups)):  # fmt: skip
                self._filters[(d.name, kind)] = frozenset(
                    self._fold(d, n) for n in self._names_for(d, names)
                )

    def _names_for(self, domain: DomainConfig, entries: list[str]) -> list[str]:
        out = []
        for entry in entries:
            name, sep, dom = entry.rpartition("@")
            if sep and name and dom.lower() in self.domains:
                if dom.lower() == domain.name.lower():
                    out.append(name)
            else:
                out.append(entry)  # no (known) domain: every domain
        return out

    @staticmethod
    def _fold(domain: DomainConfig, name: str) -> str:
        return name.lower() if domain.case_insensitive else name

    def filter_names(self, domain: DomainConfig, kind: Kind) -> frozenset[str]:
        """The filtered names of ``kind`` (USER or GROUP) in ``domain``, folded."""
        return self._filters[(domain.name, Kind.USER if kind is Kind.INITGR else kind)]

    def name_filtered(self, domain: DomainConfig, kind: Kind, name: str) -> bool:
        return self._fold(domain, name) in self.filter_names(domain, kind)

    def user_ok(self, domain: DomainConfig, u: User) -> bool:
        return (
            domain.id_in_range(u.uid)
            and domain.id_in_range(u.gid)
            and not self.name_filtered(domain, Kind.USER, u.name)
        )

    def group_ok(self, domain: DomainConfig, name: str, gid: int) -> bool:
        return domain.id_in_range(gid) and not self.name_filtered(domain, Kind.GROUP, name)

    def served(self, domain: DomainConfig, value: Any) -> bool:
        if isinstance(value, User):
            return self.user_ok(domain, value)
        if isinstance(value, GroupView):
            return self.group_ok(domain, value.name, value.gid)
        if isinstance(value, Initgroups):
            return self.user_ok(domain, value.user)
        return False


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
        self._until: dict[NegKey, float] = {}
        self._next_sweep = 0.0

    def hit(self, domain: str, key: tuple[str, str, Any]) -> bool:
        until = self._until.get((domain, key))
        if until is None:
            return False
        if until <= self.clock():
            del self._until[(domain, key)]
            return False
        return True

    def add(self, domain: str, key: tuple[str, str, Any]) -> None:
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


class Lookups:
    def __init__(
        self,
        config: Config,
        caches: dict[str, DomainCache],
        backends: dict[str, aio.RpcClient],
        backend_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self.caches = caches
        self.backends = backends
        self.backend_timeout = backend_timeout
        self.negative = NegativeCache(config.nss.entry_negative_timeout)
        self.inflight: dict[tuple[str, Op, Any], asyncio.Future[Outcome]] = {}
        self._waiting_uids: dict[tuple[str, Op, Any], set[int | None]] = {}
        self._extra: set[asyncio.Future[Outcome]] = set()  # referenced until done
        self.policy = ServePolicy(config)
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

    async def _call_backend(self, domain: str, op: Op, key: Any) -> Outcome:
        start = time.perf_counter()
        try:
            raw = await self.backends[domain].call(
                op, timeout=self.backend_timeout, **LookupRequest(key, CLIENT_UID.get()).args()
            )
            reply = LookupReply.parse(raw)
        except (framing.RpcError, BadMessage) as e:
            # A dead or restarting backend is like an offline server: serve the cache.
            log.warning("backend %s unavailable for %s %r: %s", domain, op, key, e)
            st = self.states.get(domain)
            if st is not None:
                st.stalled = False
            return Outcome.UNAVAILABLE
        finally:
            COUNTERS.add(NSS_BACKEND, 1, time.perf_counter() - start)
        online = reply.online and reply.outcome is not Outcome.OFFLINE
        self.domain_state(DomainStateNote(domain, online, reply.retry_in, reply.message))
        return reply.outcome

    def refresh(self, domain: str, op: Op, key: Any) -> asyncio.Future[Outcome]:
        """Ask the backend to refresh; concurrent lookups of one object share it."""
        ikey = (domain, op, key)
        fut = self.inflight.get(ikey)
        uid = CLIENT_UID.get()
        if fut is None:
            fut = asyncio.ensure_future(self._call_backend(domain, op, key))
            self.inflight[ikey] = fut
            self._waiting_uids[ikey] = {uid}
            fut.add_done_callback(lambda _f: self._forget(ikey))
        elif uid not in self._waiting_uids.setdefault(ikey, set()):
            # Another uid waits for this refresh too: the backend queues its one LDAP
            # request for this uid as well, so it runs at the earliest of their turns
            # (a flooding uid that asked first cannot keep it at the back of its queue).
            self._waiting_uids[ikey].add(uid)
            extra = asyncio.ensure_future(self._call_backend(domain, op, key))
            self._extra.add(extra)
            extra.add_done_callback(self._extra.discard)
        return fut

    def _forget(self, ikey: tuple[str, Op, Any]) -> None:
        self.inflight.pop(ikey, None)
        self._waiting_uids.pop(ikey, None)

    # -- filters (ServePolicy) -------------------------------------------------------

    def filtered(self, plugin: Plugin, value: Any, domain: DomainConfig) -> bool:
        """True when ``value`` of ``domain`` must not be served (ids, filters)."""
        return not self.policy.served(domain, value)

    def initgroups_gids(self, found: Found) -> bytes:
        """An INITGR answer's gids without out-of-range gids and without the groups of
        ``filter_groups`` (reference §1.6: SSSD omits filtered groups)."""
        gids: bytes = found.value.gids
        dom = found.domain
        drop = set()
        # SSSD lists the groups the user is a member of: the primary gid only when the
        # user is also an explicit member of that group (glibc adds it for `id`;
        # docs/compatibility.md §9.5). The cache keeps it in the list for offline answers.
        ig = found.value
        primary = found.cache.group_by_gid(ig.user.gid).value
        member_of = {found.cache.key(n) for n in ig.groups}
        if primary is None or found.cache.key(primary.name) not in member_of:
            drop.add(ig.user.gid)
        for name in self.policy.filter_names(dom, Kind.GROUP):
            g = found.cache.group_by_name(name).value
            if g is not None:
                drop.add(g.gid)
        ids = array("I", gids)
        if not drop and all(dom.id_in_range(g) for g in ids):
            return gids
        return array("I", [g for g in ids if g not in drop and dom.id_in_range(g)]).tobytes()

    # -- the flow ----------------------------------------------------------------------

    async def lookup(self, plugin: Plugin, key: Any) -> Found | None:
        """The cached answer of ``plugin`` for ``key`` in the first domain that has it."""
        nkey = plugin.negative_key(key)
        for domain in self.config.domains:
            if plugin.by_name:
                if self.policy.name_filtered(domain, plugin.kind, key):
                    continue
            elif not domain.id_in_range(key):
                continue
            if self.negative.hit(domain.name, nkey):
                continue
            found = await self._lookup_domain(plugin, domain, key, nkey)
            if found is not None:
                if self.filtered(plugin, found.value, domain):
                    return None
                return found
        return None

    async def _lookup_domain(
        self, plugin: Plugin, domain: DomainConfig, key: Any, nkey: tuple[str, str, Any]
    ) -> Found | None:
        cache = self.caches[domain.name]
        got = plugin.read(cache, key)
        if got.state is State.VALID:
            return Found(domain, cache, got.value, got.state)
        st = self.states[domain.name]
        offline = st.offline(self.clock())
        if got.state is State.MIDPOINT:
            # Answer now, refresh out of band (reference §6.4); offline, the refresh
            # would fail at once ("MIDPOINT refreshes fail quietly"), and a stalled
            # backend gets no more work piled on.
            # The task stays referenced in self.inflight until it is done.
            if not offline and not st.stalled:
                self.refresh(domain.name, plugin.backend_op, key)
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
        stale = got.value
        if isinstance(stale, Initgroups) and not stale.fetched:
            stale = None
        if stale is not None and st.stalled:
            # Another lookup's bounded wait ran out and the backend has not answered
            # since: do not wait again, nor pile refreshes onto a stuck backend.
            COUNTERS.add(NSS_STALE)
            return Found(domain, cache, got.value, got.state)
        fut = self.refresh(domain.name, plugin.backend_op, key)
        if stale is not None and self.first_wait > 0:
            # Bounded wait (cache_first_wait, a deliberate difference from SSSD): the
            # refresh goes on in the background, the cached entry is answered now.
            try:
                outcome = await asyncio.wait_for(asyncio.shield(fut), self.first_wait)
            except TimeoutError:
                if not fut.done():
                    st.stalled = True
                    log.info(
                        "domain %s: no refresh of %s %r within cache_first_wait = %.0f s; "
                        "answering from the cache",
                        domain.name, plugin.name, key, self.first_wait,
                    )  # fmt: skip
                COUNTERS.add(NSS_STALE)
                return Found(domain, cache, got.value, got.state)
        else:
            outcome = await fut
        again = plugin.read(cache, key)
        if again.value is not None:
            # Even still expired: after a failed or offline refresh, stale data is the
            # answer (invariant 4).
            return Found(domain, cache, again.value, again.state)
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
