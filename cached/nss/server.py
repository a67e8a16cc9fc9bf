"""The NSS responder process: SSSD's socket in ``pipes_dir``, answered from the cache.

The unchanged ``libnss_sss.so.2`` connects to ``<pipes_dir>/nss`` (reference §1.1),
keeps one connection per thread, and sends one request at a time. Each connection
here is a task running the sans-IO codec of ``protocol.py``; lookups go through the
one flow of ``lookup.py``.

The socket is open to every local user (reference §1.9), so each connection is
charged to its peer's uid (SO_PEERCRED) and no uid can take what the others need
(docs/threat-model.md):

* connections: ``max_clients`` in all, ``max_clients_per_uid`` per non-root uid, and the
  last ``root_reserved_clients`` for root (logins resolve names as root);
* time: ``client_idle_timeout`` (SSSD's, 60 s) counts from the last *complete*
  request, so trickling bytes does not keep a connection; a request must arrive
  whole within ``REQUEST_TIMEOUT`` of its first byte;
* memory: a connection has at most one reply in flight, a uid at most
  ``max_reply_buffer_per_uid`` MiB of replies its clients have not read (its next
  requests wait for room), and a reply not read within ``WRITE_TIMEOUT`` closes the
  connection;
* the event loop: a non-root uid has at most ``ANSWERS_PER_UID`` replies being
  written at once, and big group answers are kept encoded per cache snapshot;
* logs: refusals and failing requests are logged through a rate limiter.
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
from dataclasses import dataclass
from typing import Any

from cached import aiorpc, rpc
from cached.cache import DomainCache, GroupView, Initgroups, State, open_domain_cache
from cached.cache.records import join_members, split_members
from cached.config import Config
from cached.counters import COUNTERS, NSS_REQUEST
from cached.model import User
from cached.nss import protocol as p
from cached.nss.admin import Admin
from cached.nss.lookup import (
    CLIENT_UID,
    GETGRGID,
    GETGRNAM,
    GETPWNAM,
    GETPWUID,
    INITGR,
    Found,
    Kind,
    Lookups,
)
from cached.nss.mcfeed import MemcacheFeed
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# A client that has not read its reply after this long is stuck; drop it.
WRITE_TIMEOUT = 30.0
# A request must arrive whole within this many seconds of its first byte. libnss_sss
# writes header and body back to back (microseconds apart); 10 s is far beyond any
# scheduling delay, and short enough that trickling one byte at a time cannot keep a
# connection (docs/threat-model.md: one byte every 40 s kept 1,024 connections forever).
REQUEST_TIMEOUT = 10.0
# Group records of at least this many members are kept, encoded, per group and cache
# snapshot, and fed to the memory cache at most once per half record lifetime: a client
# asking for a huge group again and again then costs a dictionary lookup and a copy.
# Measured for a 200,000-member group: encoding 3.7 ms, the memory-cache store 1.9 ms,
# the reply 0.2 ms (docs/threat-model.md: one event loop answers every client).
MEMO_MEMBERS = 1000
MEMO_GROUPS = 64
# Replies of one non-root uid being written at once (writing and draining): the event
# loop's time goes round the uids, so 64 connections of one uid asking for a huge group
# cost another user what 4 of them cost, not 64. Not held while a lookup waits for the
# backend, so a slow server does not stop the uid's cached answers.
ANSWERS_PER_UID = 4
READ_CHUNK = 4096
# SSSD's listen backlog (reference §1.8).
BACKLOG = 128

BY_NAME = {p.Command.GETPWNAM: GETPWNAM, p.Command.GETGRNAM: GETGRNAM, p.Command.INITGR: INITGR}
BY_ID = {p.Command.GETPWUID: GETPWUID, p.Command.GETGRGID: GETGRGID}


class _Enum:
    """Per-connection enumeration state (SET/GET/END*ENT)."""

    def __init__(self) -> None:
        self.sent: set[int] = set()


class _Share:
    """What one client uid holds: its connections and its replies not yet read."""

    __slots__ = ("conns", "room", "slots", "unread")

    def __init__(self, uid: int | None) -> None:
        self.conns = 0
        self.unread = 0
        self.room = asyncio.Condition()
        # Root is not limited: its logins must not wait behind one of its stuck clients.
        self.slots = None if uid == 0 else asyncio.Semaphore(ANSWERS_PER_UID)


@dataclass
class _Record:
    """A big group's answer, kept while the cache hands out the same GroupView."""

    view: GroupView
    name: str
    count: int
    blob: bytes
    rec: bytes
    fed: float = -1e9  # when it was last stored in the memory cache (monotonic)


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
        self.shares: dict[int | None, _Share] = {}
        self.nonroot = 0  # connections of uids other than 0
        nss = config.nss
        self.reserved = min(nss.root_reserved_clients, nss.max_clients // 2)
        self.reply_budget = nss.max_reply_buffer_per_uid << 20
        self._records: dict[tuple[str, str], _Record] = {}  # (domain, group name)

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
        dom = found.domain
        if dom.ignore_group_members:
            return 0, b""
        blob, count = g.members, g.member_count
        lower = dom.case_sensitive == "false"
        # Users filtered out of group member lists (SSSD's filter_users_in_groups),
        # case-folded in a case-insensitive domain as every other name comparison.
        drop = self.lookups.policy.filter_names(dom, Kind.USER)
        fold = dom.case_insensitive
        hay = b"\0" + (blob.lower() if fold else blob)
        filtered = any(not n.isascii() or ("\0" + n + "\0").encode() in hay for n in drop)
        if filtered or lower:
            names = [n for n in split_members(blob) if (n.lower() if fold else n) not in drop]
            blob = join_members([n.lower() for n in names] if lower else names)
            count = blob.count(b"\0")
        return count, blob

    def _group_record(self, found: Found) -> tuple[str, int, bytes, bytes]:
        """(output name, member count, member blob, group record) of a found group."""
        r = self._big_record(found)
        if r is not None:
            return r.name, r.count, r.blob, r.rec
        g: GroupView = found.value
        name = found.output_name(g.name)
        count, blob = self._members(found, g)
        return name, count, blob, p.encode_group_record(g.gid, name, self.pwfield, count, blob)

    def _big_record(self, found: Found) -> _Record | None:
        """The kept answer of a big group (made now if needed); None for small ones."""
        g: GroupView = found.value
        if g.member_count < MEMO_MEMBERS:
            return None
        key = (found.domain.name, g.name)
        r = self._records.get(key)
        # The cache hands out the same GroupView object while its snapshot is unchanged.
        if r is None or r.view is not g:
            name = found.output_name(g.name)
            count, blob = self._members(found, g)
            rec = p.encode_group_record(g.gid, name, self.pwfield, count, blob)
            if len(self._records) >= MEMO_GROUPS:
                self._records.clear()
            r = self._records[key] = _Record(g, name, count, blob, rec)
        return r

    def _group(self, cmd: int, found: Found) -> bytes:
        r = self._big_record(found)
        if r is None:
            name, count, blob, rec = self._group_record(found)
            self.feed.group(name, found.value.gid, count, blob, self.pwfield)
            return p.group_reply(cmd, [rec])
        now = time.monotonic()
        if now - r.fed >= self._prefill_every:
            self.feed.group(r.name, r.view.gid, r.count, r.blob, self.pwfield)
            r.fed = now
        return p.group_reply(cmd, [r.rec])

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
        policy = self.lookups.policy
        for g in found.cache.groups_by_name(ig.groups):
            if not policy.group_ok(found.domain, g.name, g.gid):
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
        self._records.clear()
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
            served = self.lookups.policy.served
            # Never fed to the memory cache during enumeration (reference §2.1).
            if req.cmd == p.Command.GETPWENT:
                records = [
                    self._passwd_record(Found(domain, cache, u, State.VALID))[1]
                    for u in cache.iter_users()
                    if served(domain, u)
                ]
            else:
                records = [
                    self._group_record(Found(domain, cache, g, State.VALID))[3]
                    for g in cache.iter_groups()
                    if served(domain, g)
                ]
            if records:
                body = p.passwd_reply if req.cmd == p.Command.GETPWENT else p.group_reply
                return body(req.cmd, records)
        return p.not_found_reply(req.cmd)

    # -- connections -------------------------------------------------------------------

    def _admit(self, uid: int | None) -> str:
        """Why a new connection of ``uid`` is refused, or "" when it is admitted."""
        nss = self.config.nss
        if self.active >= nss.max_clients:
            return f"{self.active} connections (max_clients)"
        if uid == 0:
            return ""
        if self.nonroot >= nss.max_clients - self.reserved:
            return (
                f"{self.nonroot} connections of other users, the last {self.reserved} "
                "are kept for root (root_reserved_clients)"
            )
        share = self.shares.get(uid)
        if share is not None and share.conns >= nss.max_clients_per_uid:
            return f"uid {uid} holds {share.conns} connections (max_clients_per_uid)"
        return ""

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            uid = aiorpc.peer_uid(writer)
        except OSError:
            uid = None
        why = self._admit(uid)
        if why:
            self.refused += 1
            # Rate-limited per reason and uid: refusals are what an attacker causes.
            limited.log(("refused", uid, why.split(" ")[-1]), logging.WARNING,
                        "refusing an NSS client: %s", why)  # fmt: skip
            writer.close()
            return
        share = self.shares.get(uid)
        if share is None:
            share = self.shares[uid] = _Share(uid)
        share.conns += 1
        self.active += 1
        if uid != 0:
            self.nonroot += 1
        CLIENT_UID.set(uid)  # this connection's task: travels with its backend requests
        try:
            await self._serve(reader, writer, share)
        finally:
            self.active -= 1
            share.conns -= 1
            if uid != 0:
                self.nonroot -= 1
            if share.conns == 0 and share.unread == 0:
                self.shares.pop(uid, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _room(self, share: _Share) -> None:
        """Wait until this uid's unread replies leave room for one more."""
        if share.unread < self.reply_budget:
            return
        async with share.room:
            await asyncio.wait_for(
                share.room.wait_for(lambda: share.unread < self.reply_budget), WRITE_TIMEOUT
            )

    async def _send(self, writer: asyncio.StreamWriter, share: _Share, reply: bytes) -> None:
        # Counted from now: a reply waiting for its uid's turn to be written is memory
        # the uid holds as much as one its client does not read.
        share.unread += len(reply)
        try:
            async with share.slots or contextlib.nullcontext():
                writer.write(reply)
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        finally:
            share.unread -= len(reply)
            async with share.room:
                share.room.notify_all()

    async def _answer(
        self, req: p.Request, state: _Enum, writer: asyncio.StreamWriter, share: _Share
    ) -> None:
        await self._room(share)
        start = time.perf_counter()
        try:
            reply = await self.answer(req, state)
        except Exception as e:
            # One line per kind of failure and minute (the first with its traceback):
            # any local user can repeat a failing request.
            limited.log(("answer", req.cmd, type(e).__name__), logging.ERROR,
                        "answering %s failed: %s: %s", p.command_name(req.cmd),
                        type(e).__name__, e, exc_info=True)  # fmt: skip
            reply = p.error_reply(req.cmd, errno.EIO)
        COUNTERS.add(NSS_REQUEST, 1, time.perf_counter() - start)
        self.served += 1
        await self._send(writer, share, reply)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, share: _Share
    ) -> None:
        conn = p.ServerConnection()
        state = _Enum()
        idle = self.config.nss.client_idle_timeout
        loop = asyncio.get_running_loop()
        last_request = loop.time()  # the last complete request (or the connect)
        started = 0.0  # when the first byte of the request being received came
        try:
            while True:
                deadline = last_request + idle
                if conn.buffered_bytes:
                    deadline = min(deadline, started + REQUEST_TIMEOUT)
                try:
                    data = await asyncio.wait_for(
                        reader.read(READ_CHUNK), max(0.0, deadline - loop.time())
                    )
                except TimeoutError:
                    break  # idle or too slow: the client reconnects transparently (§1.8)
                if not data:
                    break
                if not conn.buffered_bytes:
                    started = loop.time()
                conn.receive_data(data)
                while not isinstance(req := conn.next_request(), p.NeedData):
                    await self._answer(req, state, writer, share)
                    last_request = started = loop.time()
        except p.ProtocolError as e:
            log.debug("closing NSS client: %s", e)
        except (ConnectionError, TimeoutError):
            pass

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "connections": self.active,
            "refused": self.refused,
            "served": self.served,
            "uids": len(self.shares),
            "unread_bytes": sum(sh.unread for sh in self.shares.values()),
            **self.lookups.counts(),
        }


async def _open_caches(config: Config) -> dict[str, DomainCache]:
    """Open every domain's cache read-only; the backends create the files first."""
    caches = {}
    for d in config.domains:
        for _ in range(100):
            try:
                caches[d.name] = open_domain_cache(
                    config.daemon.db_dir, d,
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
