"""One lookup flow for every kind of NSS lookup, in the shape of SSSD's cache_req.

negative cache -> cache read -> expiry classification -> (backend refresh) -> cache
re-read -> answer (reference §6.4). What differs per kind — how to read the cache,
which backend request refreshes it, which filter applies — is a row of ``PLUGINS``;
adding a lookup is adding a row, not copying the flow.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cached import aiorpc, rpc
from cached.cache import DomainCache, GroupView, Initgroups, Lookup, State
from cached.config import Config, DomainConfig
from cached.counters import COUNTERS
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
    backend_op: str  # the backend request that refreshes it
    by_name: bool

    def negative_key(self, key: Any) -> tuple[str, str, Any]:
        return (self.kind.value, "name" if self.by_name else "id", key)


GETPWNAM = Plugin("getpwnam", Kind.USER, DomainCache.user_by_name, "user_by_name", True)
GETPWUID = Plugin("getpwuid", Kind.USER, DomainCache.user_by_uid, "user_by_uid", False)
GETGRNAM = Plugin("getgrnam", Kind.GROUP, DomainCache.group_by_name, "group_by_name", True)
GETGRGID = Plugin("getgrgid", Kind.GROUP, DomainCache.group_by_gid, "group_by_gid", False)
INITGR = Plugin("initgroups", Kind.INITGR, DomainCache.initgroups, "initgroups", True)


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
        backends: dict[str, aiorpc.RpcClient],
        backend_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self.caches = caches
        self.backends = backends
        self.backend_timeout = backend_timeout
        self.negative = NegativeCache(config.nss.entry_negative_timeout)
        self.inflight: dict[tuple[str, str, Any], asyncio.Future[str]] = {}
        self.filter_users = set(config.nss.filter_users)
        self.filter_groups = set(config.nss.filter_groups)

    # -- the backend -----------------------------------------------------------------

    async def _call_backend(self, domain: str, op: str, key: Any) -> str:
        try:
            reply = await self.backends[domain].call(op, timeout=self.backend_timeout, key=key)
        except rpc.RpcError as e:
            # A dead or restarting backend is like an offline server: serve the cache.
            log.warning("backend %s unavailable for %s %r: %s", domain, op, key, e)
            return "unavailable"
        return str(reply.get("outcome"))

    def refresh(self, domain: str, op: str, key: Any) -> asyncio.Future[str]:
        """Ask the backend to refresh; concurrent lookups of one object share it."""
        ikey = (domain, op, key)
        fut = self.inflight.get(ikey)
        if fut is None:
            fut = asyncio.ensure_future(self._call_backend(domain, op, key))
            self.inflight[ikey] = fut
            fut.add_done_callback(lambda _f: self.inflight.pop(ikey, None))
        return fut

    # -- filters -----------------------------------------------------------------------

    def filtered(self, plugin: Plugin, value: Any) -> bool:
        if isinstance(value, User):
            return value.name in self.filter_users
        if isinstance(value, GroupView):
            return value.name in self.filter_groups
        if isinstance(value, Initgroups):
            return value.user.name in self.filter_users
        return False

    def initgroups_gids(self, found: Found) -> bytes:
        """An INITGR answer's gids without the groups of ``filter_groups`` (reference
        §1.6: SSSD omits filtered groups)."""
        gids: bytes = found.value.gids
        drop = set()
        # SSSD lists the groups the user is a member of: the primary gid only when the
        # user is also an explicit member of that group (glibc adds it for `id`; issue
        # 12 item 11). The cache keeps it in the list for offline answers.
        ig = found.value
        primary = found.cache.group_by_gid(ig.user.gid).value
        member_of = {found.cache.key(n) for n in ig.groups}
        if primary is None or found.cache.key(primary.name) not in member_of:
            drop.add(ig.user.gid)
        for name in self.filter_groups:
            g = found.cache.group_by_name(name).value
            if g is not None:
                drop.add(g.gid)
        if not drop:
            return gids
        return array("I", [g for g in array("I", gids) if g not in drop]).tobytes()

    def filtered_key(self, plugin: Plugin, key: Any) -> bool:
        if not plugin.by_name:
            return False
        names = self.filter_groups if plugin.kind is Kind.GROUP else self.filter_users
        return key in names

    # -- the flow ----------------------------------------------------------------------

    async def lookup(self, plugin: Plugin, key: Any) -> Found | None:
        """The cached answer of ``plugin`` for ``key`` in the first domain that has it."""
        if self.filtered_key(plugin, key):
            return None
        nkey = plugin.negative_key(key)
        for domain in self.config.domains:
            if not plugin.by_name and not domain.id_in_range(key):
                continue
            if self.negative.hit(domain.name, nkey):
                continue
            found = await self._lookup_domain(plugin, domain, key, nkey)
            if found is not None:
                if self.filtered(plugin, found.value):
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
        if got.state is State.MIDPOINT:
            # Answer now, refresh out of band (reference §6.4).
            # The task stays referenced in self.inflight until it is done.
            self.refresh(domain.name, plugin.backend_op, key)
            return Found(domain, cache, got.value, got.state)
        outcome = await self.refresh(domain.name, plugin.backend_op, key)
        again = plugin.read(cache, key)
        if again.value is not None:
            # Even still expired: after a failed or offline refresh, stale data is the
            # answer (invariant 4).
            return Found(domain, cache, again.value, again.state)
        if outcome == "not-found":
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
            "cache_reads": COUNTERS.get("cache.read").count,
        }
