"""The backend process of one domain: the RPC server around the LDAP provider.

One process per domain, started by the monitor (``cached serve``), the only writer
of the domain's cache. Requests from the responder arrive on
``<pipes_dir>/private/be_<domain>``; identical requests in flight share one LDAP
request; LDAP work runs on one worker thread (ldap3's synchronous connection is
not shared between threads), so the event loop stays free to answer status and
counter requests while a 2,000-group initgroups runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cached import aiorpc, rpc
from cached.cache import Role, StoreWriteError, open_domain_cache
from cached.config import Config, DomainConfig
from cached.counters import COUNTERS, format_profile
from cached.ldap.ad import AdProvider
from cached.ldap.client import LdapClient
from cached.ldap.provider import LdapProvider, Outcome, Result

log = logging.getLogger(__name__)

# op -> (provider method name, key type)
REQUESTS: dict[str, tuple[str, type]] = {
    "user_by_name": ("user_by_name", str),
    "user_by_uid": ("user_by_uid", int),
    "group_by_name": ("group_by_name", str),
    "group_by_gid": ("group_by_gid", int),
    "initgroups": ("initgroups", str),
}

# Request kinds as the profile lines and `cached perf` name them (reference §5.2).
PROFILE_KIND = {
    "user_by_name": "USER",
    "user_by_uid": "USER",
    "group_by_name": "GROUP",
    "group_by_gid": "GROUP",
    "initgroups": "INITGR",
}


class BackendService:
    def __init__(self, config: Config, domain: DomainConfig) -> None:
        self.config = config
        self.domain = domain
        self.cache = open_domain_cache(
            config.daemon.db_dir,
            domain,
            Role.BACKEND,
            nowait_percentage=config.nss.entry_cache_nowait_percentage,
        )
        if self.cache.ts_rebuilt_reason:
            log.warning("timestamp store rebuilt: %s", self.cache.ts_rebuilt_reason)
        self.client = LdapClient(domain)
        provider = AdProvider if domain.ldap_schema == "ad" else LdapProvider
        self.provider = provider(domain, self.client, self.cache)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"ldap-{domain.name}")
        self.inflight: dict[tuple[str, Any], asyncio.Future[Result]] = {}
        self.started = time.time()
        self.last_success = 0.0
        self.requests = 0

    async def _in_worker(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def _do(self, op: str, key: Any) -> Result:
        method = getattr(self.provider, REQUESTS[op][0])
        with COUNTERS.request(PROFILE_KIND[op], str(key)) as scope:
            result: Result = method(key)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", format_profile(scope, result.outcome.value))
        return result

    async def request(self, op: str, key: Any) -> Result:
        fut = self.inflight.get((op, key))
        if fut is None:
            fut = asyncio.ensure_future(self._in_worker(lambda: self._do(op, key)))
            self.inflight[(op, key)] = fut
            fut.add_done_callback(lambda _f: self.inflight.pop((op, key), None))
        result: Result = await asyncio.shield(fut)
        self.requests += 1
        if result.outcome in (Outcome.FOUND, Outcome.NOT_FOUND):
            self.last_success = time.time()
        return result

    async def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op in REQUESTS:
            key = args.get("key")
            if not isinstance(key, REQUESTS[op][1]) or isinstance(key, bool):
                raise ValueError(f"{op}: bad key {key!r}")
            result = await self.request(op, key)
            return {"outcome": result.outcome.value, "message": result.message}
        if op == "counters":
            return {"counters": COUNTERS.snapshot(), "pid": os.getpid()}
        if op == "status":
            return {"status": self.status()}
        if op == "reset_offline":
            await self._in_worker(self.client.reset_offline)
            return {}
        raise ValueError(f"unknown op {op!r}")

    def status(self) -> dict[str, Any]:
        client = self.client
        sizes = {}
        for path in (self.cache.entry_path, self.cache.ts_path):
            with contextlib.suppress(OSError):
                sizes[os.path.basename(path)] = os.path.getsize(path)
        return {
            "domain": self.domain.name,
            "pid": os.getpid(),
            "online": client.online,
            "server": client.info.uri if client.info else "",
            "last_error": client.last_error,
            "retry_in": max(0.0, client.retry_at - client.clock()) if client.retry_at else 0.0,
            "last_success": self.last_success,
            "started": self.started,
            "requests": self.requests,
            "entries": self.cache.counts(),
            "store_bytes": sizes,
            "ts_rebuilt": self.cache.ts_rebuilt_reason,
            "limit_error": self.provider.limit_error,
            "limit_time": self.provider.limit_time,
        }

    async def _sync_timestamps(self) -> None:
        # The timestamp store is no-sync (reference §3.1); flush it on a timer so a
        # crash of the machine loses at most this many seconds of expiry times.
        while True:
            await asyncio.sleep(self.config.daemon.ts_sync_interval)
            try:
                await self._in_worker(self.cache.sync_timestamps)
            except StoreWriteError as e:
                log.error("%s", e)

    def refresh_schedule(self) -> tuple[float, float]:
        """(interval, random offset) of the background refresh, as SSSD computes them
        (reference §6.1): an interval that would outlast the entries shrinks to 70 % of
        the shortest entry lifetime, the offset to 10 % of the interval."""
        d = self.domain
        interval = float(d.refresh_expired_interval)
        offset = interval * 0.1
        lifetime = min(d.entry_cache_user_timeout, d.entry_cache_group_timeout)
        if lifetime and interval + offset > lifetime:
            interval = 0.7 * lifetime
            offset = 0.1 * interval
        return interval, offset

    async def _refresh_expired(self) -> None:
        """Refresh entries before they expire (``refresh_expired_interval``, §6.4).

        Initgroups first: one such request refreshes the user's groups as well, so
        the groups still due afterwards are the ones no refreshed user is in."""
        interval, offset = self.refresh_schedule()
        # The first run 30 s after start-up, as SSSD's be_refresh.
        await asyncio.sleep(min(30.0, interval))
        rng = random.Random()
        while True:
            if self.client.online or self.client.retry_at <= self.client.clock():
                horizon = time.time() + interval
                users, groups, initgr = self.cache.expiring(horizon)
                for name in initgr:
                    await self.request("initgroups", name)
                for op, names in (("user_by_name", users), ("group_by_name", groups)):
                    due = self.cache.times("user" if op == "user_by_name" else "group", names)
                    for name in names:
                        t = due.get(name)
                        if t is None or t.data_expire <= horizon:
                            await self.request(op, name)
                log.info(
                    "background refresh: %d initgroups, %d users, %d groups due",
                    len(initgr),
                    len(users),
                    len(groups),
                )
            await asyncio.sleep(interval + rng.uniform(0, offset))

    async def run(self, ready: Callable[[], None]) -> None:
        path = rpc.backend_socket(self.config.daemon.pipes_dir, self.domain.name)
        server = await aiorpc.serve(path, self.handle)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)  # logs go to stderr
        syncer = asyncio.create_task(self._sync_timestamps())
        refresher = (
            asyncio.create_task(self._refresh_expired())
            if self.domain.refresh_expired_interval > 0
            else None
        )
        log.info("backend %s ready on %s", self.domain.name, path)
        ready()
        await stop.wait()
        log.info("backend %s stopping", self.domain.name)
        server.close()
        syncer.cancel()
        if refresher is not None:
            refresher.cancel()
        # Let the request in progress finish its transaction, then close cleanly:
        # the clean marker lets the next start trust the timestamp store (§3.5).
        await self._in_worker(lambda: None)
        self.executor.shutdown(wait=True)
        self.client.close()
        self.cache.close(clean=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
