"""The NSS responder process: SSSD's socket in ``pipes_dir``, answered from the cache.

The unchanged ``libnss_sss.so.2`` connects to ``<pipes_dir>/nss`` (reference §1.1),
keeps one connection per thread, and sends one request at a time. Each connection
here is a task running the sans-IO codec of ``protocol.py``; lookups go through the
one flow of ``lookup.py``. Limits: ``client_idle_timeout`` (SSSD's, 60 s) closes idle
connections, ``max_clients`` caps them, and a reply the client does not read within
``WRITE_TIMEOUT`` closes the connection so one stuck client cannot pin memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from cached import aiorpc, rpc
from cached.cache import DomainCache, GroupView, Initgroups, Role, State, open_domain_cache
from cached.cache.records import join_members, split_members
from cached.config import Config
from cached.counters import COUNTERS, NSS_REQUEST
from cached.model import User
from cached.nss import protocol as p
from cached.nss.admin import Admin
from cached.nss.lookup import GETGRGID, GETGRNAM, GETPWNAM, GETPWUID, INITGR, Found, Lookups
from cached.nss.mcfeed import MemcacheFeed

log = logging.getLogger(__name__)

# A client that has not read its reply after this long is stuck; drop it.
WRITE_TIMEOUT = 30.0
READ_CHUNK = 4096
# SSSD's listen backlog (reference §1.8).
BACKLOG = 128

BY_NAME = {p.Command.GETPWNAM: GETPWNAM, p.Command.GETGRNAM: GETGRNAM, p.Command.INITGR: INITGR}
BY_ID = {p.Command.GETPWUID: GETPWUID, p.Command.GETGRGID: GETGRGID}


class _Enum:
    """Per-connection enumeration state (SET/GET/END*ENT)."""

    def __init__(self) -> None:
        self.sent: set[int] = set()


class NssResponder:
    def __init__(self, config: Config, lookups: Lookups, feed: MemcacheFeed) -> None:
        self.config = config
        self.lookups = lookups
        self.feed = feed
        self._prefilled: dict[tuple[str, str], tuple[bytes, float]] = {}
        self._prefill_every = max(config.nss.memcache_timeout / 2, 1.0)
        self.pwfield = config.nss.pwfield
        self.active = 0
        self.refused = 0
        self.served = 0
        self.started = time.time()
        # Users filtered out of group member lists (SSSD's filter_users_in_groups).
        self._filtered_members = {n.encode() for n in config.nss.filter_users}

    # -- encoding ----------------------------------------------------------------------

    def _passwd_record(self, found: Found) -> tuple[str, bytes]:
        """(output name, passwd record) of a found user."""
        u: User = found.value
        name = found.output_name(u.name)
        rec = p.encode_passwd_record(u.uid, u.gid, name, self.pwfield, u.gecos, u.home, u.shell)
        return name, rec

    def _passwd(self, cmd: int, found: Found) -> bytes:
        name, rec = self._passwd_record(found)
        self.feed.user(name, found.value, self.pwfield)
        return p.passwd_reply(cmd, [rec])

    def _members(self, found: Found, g: GroupView) -> tuple[int, bytes]:
        if found.domain.ignore_group_members:
            return 0, b""
        blob, count = g.members, g.member_count
        lower = found.domain.case_sensitive == "false"
        filtered = self._filtered_members and any(
            b"\0" + n + b"\0" in b"\0" + blob for n in self._filtered_members
        )
        if filtered or lower:
            names = [n for n in split_members(blob) if n.encode() not in self._filtered_members]
            blob = join_members([n.lower() for n in names] if lower else names)
            count = blob.count(b"\0")
        return count, blob

    def _group_record(self, found: Found) -> tuple[str, int, bytes, bytes]:
        """(output name, member count, member blob, group record) of a found group."""
        g: GroupView = found.value
        name = found.output_name(g.name)
        count, blob = self._members(found, g)
        return name, count, blob, p.encode_group_record(g.gid, name, self.pwfield, count, blob)

    def _group(self, cmd: int, found: Found) -> bytes:
        name, count, blob, rec = self._group_record(found)
        self.feed.group(name, found.value.gid, count, blob, self.pwfield)
        return p.group_reply(cmd, [rec])

    def _initgr(self, raw_name: str, found: Found) -> bytes:
        ig: Initgroups = found.value
        gids = self.lookups.initgroups_gids(found)
        self.feed.initgroups(raw_name, found.output_name(ig.user.name), gids)
        self._prefill_groups(found, ig, gids)
        return p.initgr_reply(gids)

    def _prefill_groups(self, found: Found, ig: Initgroups, gids: bytes) -> None:
        """Store every group of the user in the memory cache before the INITGR reply
        leaves, so the getgrgid calls `id` makes next never reach the socket. Done
        again only when the group list changed or half the record lifetime passed."""
        if not self.feed.groups_enabled:
            return
        key = (found.domain.name, ig.user.name)
        now = time.monotonic()
        last = self._prefilled.get(key)
        if last is not None and last[0] == gids and now - last[1] < self._prefill_every:
            return
        for g in found.cache.groups_by_name(ig.groups):
            if g.name in self.lookups.filter_groups:
                continue
            gfound = Found(found.domain, found.cache, g, found.state)
            count, blob = self._members(gfound, g)
            self.feed.group(gfound.output_name(g.name), g.gid, count, blob, self.pwfield)
        if len(self._prefilled) > 10_000:
            self._prefilled.clear()
        self._prefilled[key] = (gids, now)

    def reset_memcache(self) -> None:
        """Retire the memory-cache files now (no client is served an old record after
        this returns) and publish new ones once the caller has had its answer."""
        self.feed.retire()
        self._prefilled.clear()
        asyncio.get_running_loop().call_soon(self.feed.reopen)

    # -- answering ---------------------------------------------------------------------

    async def answer(self, req: p.Request, state: _Enum) -> bytes:
        if isinstance(req, p.GetVersion):
            return p.version_reply()
        if isinstance(req, p.BadRequest):
            log.debug("bad request %s: %s", p.command_name(req.cmd), req.reason)
            return p.error_reply(req.cmd, req.errno)
        if isinstance(req, p.ByName):
            plugin = BY_NAME[req.cmd]
            found = await self.lookups.lookup(plugin, req.name)
        elif isinstance(req, p.ById):
            plugin = BY_ID[req.cmd]
            found = await self.lookups.lookup(plugin, req.id)
        elif isinstance(req, p.SetEnt | p.EndEnt):
            state.sent.clear()
            return p.empty_reply(req.cmd)
        elif isinstance(req, p.GetEnt):
            return self._getent(req, state)
        else:  # pragma: no cover - the codec returns nothing else
            raise AssertionError(req)
        if found is None:
            # An object found missing drops its memory-cache record (reference §2.6).
            key = req.name if isinstance(req, p.ByName) else req.id
            if plugin.kind.value == "group":
                self.feed.forget_group(key)
            else:
                self.feed.forget_user(key)
            return p.not_found_reply(req.cmd)
        if plugin is INITGR:
            assert isinstance(req, p.ByName)
            return self._initgr(req.name, found)
        if plugin in (GETPWNAM, GETPWUID):
            return self._passwd(req.cmd, found)
        return self._group(req.cmd, found)

    def _getent(self, req: p.GetEnt, state: _Enum) -> bytes:
        """Enumeration: the whole cache of each domain in one batch, then empty, as
        SSSD does (reference §1.6); empty at once unless ``enumerate = true``."""
        for i, domain in enumerate(self.config.domains):
            # `enumerate` is a domain option in sssd.conf; [nss] enumerate turns it on
            # for every domain.
            if i in state.sent or not (self.config.nss.enumerate or domain.enumerate):
                continue
            state.sent.add(i)
            cache = self.lookups.caches[domain.name]
            # Never fed to the memory cache during enumeration (reference §2.1).
            if req.cmd == p.Command.GETPWENT:
                records = [
                    self._passwd_record(Found(domain, cache, u, State.VALID))[1]
                    for u in cache.iter_users()
                    if u.name not in self.lookups.filter_users
                ]
            else:
                records = [
                    self._group_record(Found(domain, cache, g, State.VALID))[3]
                    for g in cache.iter_groups()
                    if g.name not in self.lookups.filter_groups
                ]
            if records:
                body = p.passwd_reply if req.cmd == p.Command.GETPWENT else p.group_reply
                return body(req.cmd, records)
        return p.not_found_reply(req.cmd)

    # -- connections -------------------------------------------------------------------

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.active >= self.config.nss.max_clients:
            self.refused += 1
            log.warning("refusing an NSS client: %d connections (max_clients)", self.active)
            writer.close()
            return
        self.active += 1
        conn = p.ServerConnection()
        state = _Enum()
        idle = self.config.nss.client_idle_timeout
        try:
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK), idle)
                except TimeoutError:
                    break  # idle: the client reconnects transparently (§1.8)
                if not data:
                    break
                conn.receive_data(data)
                while not isinstance(req := conn.next_request(), p.NeedData):
                    start = time.perf_counter()
                    try:
                        reply = await self.answer(req, state)
                    except Exception:
                        log.exception("answering %s failed", p.command_name(req.cmd))
                        reply = p.error_reply(req.cmd, errno.EIO)
                    COUNTERS.add(NSS_REQUEST, 1, time.perf_counter() - start)
                    self.served += 1
                    writer.write(reply)
                    await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except p.ProtocolError as e:
            log.debug("closing NSS client: %s", e)
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self.active -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "connections": self.active,
            "refused": self.refused,
            "served": self.served,
            **self.lookups.counts(),
        }


async def _open_caches(config: Config) -> dict[str, DomainCache]:
    """Open every domain's cache read-only; the backends create the files first."""
    caches = {}
    for d in config.domains:
        for _ in range(100):
            try:
                caches[d.name] = open_domain_cache(
                    config.daemon.db_dir, d, Role.RESPONDER,
                    nowait_percentage=config.nss.entry_cache_nowait_percentage,
                )  # fmt: skip
                break
            except FileNotFoundError:
                await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"domain {d.name}: no cache in {config.daemon.db_dir}")
    return caches


async def run_responder(config: Config, ready: Callable[[], None]) -> None:
    caches = await _open_caches(config)
    backends = {
        d.name: aiorpc.RpcClient(rpc.backend_socket(config.daemon.pipes_dir, d.name))
        for d in config.domains
    }
    lookups = Lookups(config, caches, backends)
    feed = MemcacheFeed(config.daemon.mc_dir, config.nss)
    responder = NssResponder(config, lookups, feed)

    path = os.path.join(config.daemon.pipes_dir, "nss")
    rpc.prepare_socket_path(path)
    os.makedirs(config.daemon.pipes_dir, mode=0o755, exist_ok=True)
    server = await asyncio.start_unix_server(
        responder.on_client, path=path, backlog=BACKLOG, limit=p.MAX_REQUEST_SIZE * 4
    )
    # Public, as SSSD's: NSS data is public and the client checks nothing (§1.9).
    os.chmod(path, 0o666)

    admin = Admin(lookups, responder.status, on_invalidate=responder.reset_memcache)
    ifp = None
    if config.daemon.dbus_address != "none":
        from cached.ifp import start_ifp

        ifp = await start_ifp(config, admin)

    async def handle(op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "counters":
            return admin.counters()
        if op == "status":
            return {"status": admin.status()}
        if op == "clear_negative":
            return {"cleared": lookups.clear_negative()}
        if op == "domain_state":  # a backend's announcement
            lookups.domain_state(
                str(args.get("domain")),
                bool(args.get("online")),
                float(args.get("retry_in") or 0.0),
                str(args.get("reason", "")),
            )
            return {}
        if op == "invalidate":
            n = admin.invalidate(str(args.get("kind")), str(args.get("name", "")),
                                 str(args.get("domain", "")))  # fmt: skip
            return {"matched": n}
        if op == "invalidated":
            admin.invalidated()
            return {}
        raise ValueError(f"unknown op {op!r}")

    control = await aiorpc.serve(rpc.responder_socket(config.daemon.pipes_dir), handle)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP (from the monitor): drop the negative cache, as SSSD's NSS responder does.
    loop.add_signal_handler(signal.SIGHUP, lookups.clear_negative)
    log.info("NSS responder ready on %s", path)
    ready()
    await stop.wait()
    if ifp is not None:
        await ifp.close()
    server.close()
    control.close()
    for client in backends.values():
        await client.close()
    for cache in caches.values():
        cache.close()
    feed.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
