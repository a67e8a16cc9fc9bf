"""The NSS interface of the responder: SSSD's socket in ``pipes_dir``, answered from the cache.

The unchanged ``libnss_sss.so.2`` connects to ``<pipes_dir>/nss`` (reference §1.1),
keeps one connection per thread, and sends one request at a time. Each connection
here is an asyncio protocol (``_Client``) feeding the sans-IO codec of ``protocol.py``:
a request the cache answers at once is answered as its bytes arrive, one that must
wait (for the backend, for its uid's budget, for its client to read) runs as a task.
Lookups go through the one flow of ``cached.responder.flow``; each lookup command is a
row of ``COMMANDS`` (plugin, fill function, memory-cache forget), as in SSSD's
``get_nss_cmds()``.

The socket is open to every local user (reference §1.9), so each connection is
charged to its peer's uid (SO_PEERCRED) and no uid can take what the others need
(docs/threat-model.md):

* connections: ``max_clients`` in all, ``max_clients_per_uid`` per non-root uid, and the
  last ``root_reserved_clients`` for root (logins resolve names as root);
* time: ``client_idle_timeout`` (SSSD's, 60 s) counts from the last *complete*
  request, so trickling bytes does not keep a connection; a request must arrive
  whole within ``client_request_timeout`` of its first byte;
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
import contextvars
import errno
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, cast

from cached import gcpause
from cached.cache import DomainCache, GroupView, Initgroups, State
from cached.config import Config, ConfigError, DomainConfig, PrivateGroups
from cached.counters import COUNTERS, NSS_EARLY, NSS_REQUEST, NSS_SPARED
from cached.ipc import aio, framing
from cached.ipc.ops import GroupsStoredNote, Op
from cached.model import Netgroup, User
from cached.nss import protocol as p
from cached.nss.mcfeed import MemcacheFeed
from cached.ratelimit import RateLimitedLog
from cached.responder import admission
from cached.responder.flow import (
    CLIENT_UID,
    GETGRGID,
    GETGRNAM,
    GETPWNAM,
    GETPWUID,
    INITGR,
    NOT_NOW,
    SETNETGRENT,
    Found,
    K,
    Lookups,
    NegKey,
    Plugin,
    V,
)

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)


def _left_out(name: str, e: ValueError) -> None:
    """An entry no record can carry (a NUL in a field, in a cache written before such
    values were cut at it) is left out of an enumeration alone, not the whole batch
    (otherwise one user's gecos would empty ``getent passwd``)."""
    limited.log(("enumeration", type(e).__name__), logging.WARNING,
                "enumeration: %r left out: %s", name, e)  # fmt: skip


# A client that has not read its reply after this long is stuck; drop it.
WRITE_TIMEOUT = 30.0
# How long a group put in the memory cache on a backend's early commit counts as fed
# for the INITGR answer that follows it (prefill_stored). That answer ends the same
# request, milliseconds later (the backend runs one request at a time, so nothing
# stores the group again meanwhile); a note no answer used (the request failed) must
# not spare a later answer's prefill for long.
EARLY_FRESH = 10.0
# Group records of at least this many members are kept, encoded, per group and cache
# snapshot, and fed to the memory cache at most once per half record lifetime: a client
# asking for a huge group again and again then costs a dictionary lookup and a copy.
# Measured for a 200,000-member group: encoding 3.7 ms, the memory-cache store 1.9 ms,
# the reply 0.2 ms (docs/threat-model.md: one event loop answers every client).
MEMO_MEMBERS = 1000
MEMO_GROUPS = 64
# Smaller groups' answers are kept too (as long as the cache hands out an equal
# GroupView): the getgrgid calls of a warm `id` then skip the member filter and the
# encoding, a sixth of the responder's time per request (perf/warmsocket.py). A few
# hundred bytes each; the table is dropped when full, so no client can grow it.
MEMO_SMALL_GROUPS = 20_000
# Replies of one non-root uid being written at once (writing and draining): the event
# loop's time goes round the uids, so 64 connections of one uid asking for a huge group
# cost another user what 4 of them cost, not 64. Not held while a lookup waits for the
# backend, so a slow server does not stop the uid's cached answers.
ANSWERS_PER_UID = 4
# Bytes a connection buffers while one of its requests is being answered (waiting for
# the backend or for its client to read); beyond this it stops reading the socket.
PAUSE_READING_AT = p.MAX_REQUEST_SIZE * 4
# SSSD's listen backlog (reference §1.8).
BACKLOG = 128


class _Enum:
    """Per-connection enumeration state (SET/GET/END*ENT)."""

    def __init__(self) -> None:
        self.sent: set[int] = set()


class _Share:
    """What one client uid holds: its connections and its replies not yet read."""

    __slots__ = ("conns", "room", "slots", "unread", "waiting")

    def __init__(self, uid: int | None) -> None:
        self.conns = 0
        self.unread = 0
        self.room = asyncio.Condition()
        self.waiting = 0  # tasks waiting in _room: only then is there anyone to notify
        # Root is not limited: its logins must not wait behind one of its stuck clients.
        self.slots = None if uid == 0 else asyncio.Semaphore(ANSWERS_PER_UID)


@dataclass(slots=True)
class _Record:
    """A group's answer, kept while the cache hands out an equal GroupView."""

    view: GroupView
    name: str
    count: int
    blob: bytes
    # The socket's group record, encoded when first answered (NssResponder._encoded):
    # most records are built by the memory-cache prefill, and a client reading the
    # memory cache never asks for them (3.3 µs a group, a tenth of the prefill).
    rec: bytes | None = None
    fed: float = -1e9  # when it was last stored in the memory cache (monotonic)


@dataclass(frozen=True, slots=True)
class _Answer:
    """A small group's complete reply to one (command, key), given again while the
    cache hands out the very same GroupView object (a held lookup: neither store has
    committed since it was read, docs/ARCHITECTURE.md) still VALID, and the negative
    cache does not hide the domain. The flow would then find exactly ``found`` in the
    same, first admitting domain, and the reply would be the same bytes; only the
    memory-cache feed is done again. Kept under the request's bytes
    (``p.lookup_frame``), which the connection matches before parsing anything
    (``ServerConnection.take_known``)."""

    plugin: Plugin[Any, GroupView]
    found: Found[GroupView]
    nkey: NegKey
    record: _Record
    reply: bytes
    request: p.ById | p.ByName
    key: str | int


class _Watchdog:
    """Closes a connection whose client is idle (``client_idle_timeout`` since its last
    complete request, or the connect) or too slow to send a request (``request``,
    ``client_request_timeout``, from its first byte), counted only while the connection
    waits for the client.

    One timer per connection, moved when it fires or when a partial request brings the
    deadline closer, instead of a timeout around each read: that cost a task and a timer
    per request, a good part of the responder's time per getgrgid (perf/warmsocket.py).
    """

    __slots__ = ("conn", "handle", "idle", "last_request", "loop", "reading", "request",
                 "started", "transport")  # fmt: skip

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        idle: float,
        request: float,
        transport: asyncio.WriteTransport,
        conn: p.ServerConnection,
    ) -> None:
        self.loop = loop
        self.idle = idle
        self.request = request
        self.transport = transport
        self.conn = conn
        self.last_request = loop.time()  # the last complete request (or the connect)
        self.started = 0.0  # when the first byte of the request being received came
        self.reading = False
        self.handle = loop.call_at(self.deadline(), self._fire)

    def deadline(self) -> float:
        deadline = self.last_request + self.idle
        if self.conn.buffered_bytes:
            deadline = min(deadline, self.started + self.request)
        return deadline

    def _fire(self) -> None:
        now = self.loop.time()
        if not self.reading:
            # A request is being answered: the idle time counts from its end.
            self.handle = self.loop.call_at(now + self.idle, self._fire)
            return
        deadline = self.deadline()
        if now >= deadline:
            # The read in _serve returns EOF and the connection is closed there.
            self.transport.abort()
            return
        self.handle = self.loop.call_at(deadline, self._fire)

    def partial(self) -> None:
        """A request has begun and is not complete: its deadline may come sooner."""
        deadline = self.deadline()
        if deadline < self.handle.when():
            self.handle.cancel()
            self.handle = self.loop.call_at(deadline, self._fire)

    def cancel(self) -> None:
        self.handle.cancel()


class NssResponder:
    def __init__(self, config: Config, lookups: Lookups, feed: MemcacheFeed) -> None:
        self.config = config
        self.lookups = lookups
        self.feed = feed
        self._prefilled: dict[tuple[str, str], tuple[bytes, float, tuple[str, ...]]] = {}
        self._prefill_every = feed.refeed_every
        # Groups put in the memory cache on a backend's early commit (prefill_stored),
        # by (domain, the backend's serial of the request that committed them): (when,
        # names); the INITGR answer of that request does not do them again.
        self._early: dict[tuple[str, int], tuple[float, set[str]]] = {}
        self.pwfield = config.nss.pwfield
        self.active = 0
        self.refused = 0
        self.served = 0
        self.netgroups_served = 0  # SETNETGRENT answers of a netgroup found
        self.started = time.time()
        self.shares: dict[int | None, _Share] = {}
        self.nonroot = 0  # connections of uids other than 0
        nss = config.nss
        self.reply_budget = nss.max_reply_buffer_per_uid << 20
        self._records: dict[tuple[str, str], _Record] = {}  # (domain, group name)
        self._small: dict[tuple[str, str], _Record] = {}  # the same, smaller groups
        # Kept answers by the request's bytes (p.lookup_frame); see _Answer.
        self.answers: dict[bytes, _Answer] = {}

    # -- encoding ---------------------------------------------------------------------

    def _output_name(self, domain: DomainConfig, name: str) -> str:
        return self.lookups.policy.output_name(domain, name)

    def _passwd_record(self, domain: DomainConfig, u: User) -> tuple[User, bytes]:
        """(the user as answered, passwd record) of a user."""
        out = self.lookups.policy.output_user(domain, u)
        rec = p.encode_passwd_record(
            out.uid, out.gid, out.name, self.pwfield, out.gecos, out.home, out.shell
        )
        return out, rec

    def _group_record(self, domain: DomainConfig, g: GroupView) -> _Record:
        """The answer of a group: kept while the cache hands out an equal GroupView (for
        a big group the very same object, while its snapshot is unchanged)."""
        big = g.member_count >= MEMO_MEMBERS
        memo = self._records if big else self._small
        key = (domain.name, g.name)
        r = memo.get(key)
        if r is None or (r.view is not g and r.view != g):
            name = self._output_name(domain, g.name)
            count, blob = self.lookups.policy.members(domain, g)
            if len(memo) >= (MEMO_GROUPS if big else MEMO_SMALL_GROUPS):
                memo.clear()
            r = memo[key] = _Record(g, name, count, blob)
        return r

    def _encoded(self, r: _Record) -> bytes:
        """The socket's record of ``r``, encoded once."""
        if r.rec is None:
            r.rec = p.encode_group_record(r.view.gid, r.name, self.pwfield, r.count, r.blob)
        return r.rec

    # -- fill functions: a found value to its reply, stored in the memory cache ----------

    def _feedable(self, found: Found[Any]) -> bool:
        """May this answer go in the memory cache, where clients take it as valid for
        ``memcache_timeout``? Not an expired one while the domain is online: its
        backend request ended, yet the cache holds it expired — invalidated while the
        request ran (BackendCache.request), so it may predate the change invalidated
        for (such an answer would go in the memory cache `cached cache -E` had just
        emptied). Offline, or with the backend stuck, the cache's stale
        answer is the answer (invariant 4) and goes in as SSSD puts it."""
        return found.state is not State.EXPIRED or self._stale_ok(found.domain)

    def _stale_ok(self, domain: DomainConfig) -> bool:
        """Offline, or with the backend stuck: expired entries are the answer."""
        st = self.lookups.states.get(domain.name)
        return st is None or st.stalled or st.offline(self.lookups.clock())

    def fill_passwd(self, cmd: int, _key: str | int, found: Found[User]) -> bytes:
        u, rec = self._passwd_record(found.domain, found.value)
        if self._feedable(found) and self.lookups.owns(
            found.domain, GETPWNAM, u.name, GETPWUID, u.uid
        ):
            self.feed.user(u.name, u, self.pwfield)
        return p.passwd_reply(cmd, [rec])

    def fill_group(self, cmd: int, key: str | int, found: Found[GroupView]) -> bytes:
        g = found.value
        r = self._group_record(found.domain, g)
        lookups = self.lookups
        if (
            self._feedable(found)
            and lookups.owns(found.domain, GETGRNAM, r.name, GETGRGID, g.gid)
            and not self._shadowed_private(found)
        ):
            self._feed_group(r)
        reply = p.group_reply(cmd, [self._encoded(r)])
        if (
            g.member_count < MEMO_MEMBERS
            and found.state is State.VALID
            # Not a user's private group (auto_private_groups, no members): the kept
            # answer is checked against the group as the cache holds it.
            and (g.member_count or found.domain.auto_private_groups == PrivateGroups.FALSE)
        ):
            plugin: Plugin[Any, GroupView] = COMMANDS[cmd].plugin
            # Only an answer of the first domain that admits the key: an earlier one
            # skipped for a negative entry or offline could answer once that ends.
            if lookups.first_admitting(plugin, key) is found.domain:
                c = p.Command(cmd)
                req = p.ById(c, key) if isinstance(key, int) else p.ByName(c, key)
                if len(self.answers) >= MEMO_SMALL_GROUPS:
                    self.answers.clear()
                self.answers[p.lookup_frame(req)] = _Answer(
                    plugin, found, plugin.negative_key(key), r, reply, req, key
                )
        return reply

    @staticmethod
    def _shadowed_private(found: Found[GroupView]) -> bool:
        """A private group (auto_private_groups; found by its gid) whose name a real
        group of its domain has: getgrnam answers that group, so the memory cache,
        which clients read by name too, must not hold this one."""
        g = found.value
        if g.member_count or found.domain.auto_private_groups == PrivateGroups.FALSE:
            return False
        real = found.cache.group_by_name(g.name).value
        return real is not None and real.gid != g.gid

    def _answer_again(self, a: _Answer) -> bytes | None:
        """The kept reply ``a`` if the flow would give the same one now (see _Answer)."""
        f = a.found
        if self.lookups.negative.hit(f.domain.name, a.nkey):
            return None
        got = f.cache.kept_group(a.key)
        if got is None:
            got = a.plugin.read(f.cache, a.key)
        if got.value is not f.value or got.state is not State.VALID:
            return None
        self._feed_group(a.record)
        return a.reply

    def _feed_group(self, r: _Record) -> None:
        g = r.view
        if g.member_count < MEMO_MEMBERS:
            # The feed skips a record it stored moments ago with the same content.
            self.feed.group(r.name, g.gid, r.count, r.blob, self.pwfield)
            return
        now = time.monotonic()
        if now - r.fed >= self._prefill_every:
            self.feed.group(r.name, g.gid, r.count, r.blob, self.pwfield)
            r.fed = now

    def fill_initgr(self, _cmd: int, raw_name: str, found: Found[Initgroups]) -> bytes:
        ig = found.value
        gids = self.lookups.policy.initgroups_gids(found.domain, found.cache, ig)
        if self._feedable(found):
            if self.lookups.first_admitting(INITGR, raw_name) is found.domain:
                self.feed.initgroups(raw_name, self._output_name(found.domain, ig.user.name), gids)
            self._prefill_groups(found, gids)
            if found.domain.auto_private_groups == PrivateGroups.TRUE:
                self._prefill_primary(found)
        return p.initgr_reply(gids)

    def fill_netgroup(self, _cmd: int, _key: str, found: Found[Netgroup]) -> bytes:
        """Every entry at once, as SSSD 2.8.2: libnss_sss keeps the answer and glibc
        reads it entry by entry, asking for each member netgroup in turn."""
        ng = found.value
        self.netgroups_served += 1
        return p.netgroup_reply(ng.triples, ng.members)
    def _prefill_primary(self, found: Found[Initgroups]) -> None:
        """With auto_private_groups = true, the user's primary group (its private
        group, unless a real group has that gid) is in no group list: it goes in the
        memory cache with the others, so that `id` does not ask the socket for it."""
        if not self.feed.groups_enabled:
            return
        got = self.lookups.lookup_now(GETGRGID, found.value.user.uid)
        if isinstance(got, Found) and self._feedable(got):
            r = self._group_record(got.domain, got.value)
            if self.lookups.owns(got.domain, GETGRNAM, r.name, GETGRGID, got.value.gid):
                self._feed_group(r)

    def _prefill_groups(self, found: Found[Initgroups], gids: bytes) -> None:
        """Store every group of the user in the memory cache before the INITGR reply
        leaves, so the getgrgid calls `id` makes next never reach the socket. Done
        again only when the user's gids or group names changed, or half the record
        lifetime passed."""
        if not self.feed.groups_enabled:
            return
        ig, domain = found.value, found.domain
        key = (domain.name, ig.user.name)
        now = time.monotonic()
        # Fed moments ago from the cache this answer comes from (prefill_stored), by
        # the backend request this answer waited for (by the backend's serial, which
        # its answer names): no other answer uses them. Otherwise a background
        # refresh's notes (no answer waits for one) would spare another user's answer
        # a group that user's request had changed, and a note of a request begun
        # before an invalidation, read after it, would be taken for the request after.
        noted = self._early.pop((domain.name, found.early), None) if found.early else None
        # Not again for the same gids under the same names (a group renamed keeps its
        # gid: its old name would stay in the memory cache) within half
        # the record lifetime. Not for every commit to the entry store: on a busy
        # backend that refed all of bigroupuser's groups (~33 ms) at each `id`.
        names_now = tuple(ig.groups)
        last = self._prefilled.get(key)
        if (
            last is not None
            and last[0] == gids
            and last[2] == names_now
            and now - last[1] < self._prefill_every
        ):
            return
        names: Iterable[str] = ig.groups
        if noted is not None and now - noted[0] < EARLY_FRESH:
            names = [n for n in ig.groups if n not in noted[1]]
            COUNTERS.add(NSS_SPARED, 1, 0.0, len(ig.groups) - len(names))
        self._feed_groups(domain, found.cache, names)
        if len(self._prefilled) > 10_000:
            self._prefilled.clear()
        self._prefilled[key] = (gids, now, names_now)

    def _feed_groups(self, domain: DomainConfig, cache: DomainCache, names: Iterable[str]) -> None:
        """Put these groups, as the cache holds them, in the memory cache."""
        # The cyclic collector off meanwhile (cached/gcpause.py): the ~20,000 objects
        # built here (views, kept answers, the writer's notes) live until the end and
        # hold no cycles.
        with gcpause.paused():
            ok = self.lookups.policy.group_view_filter(domain)
            batch = []
            # Not an expired group while the domain is online (as _feedable), nor one
            # an earlier domain may answer by its name or gid (Lookups.owns).
            for g in cache.groups_by_name(names, expired=self._stale_ok(domain)):
                if ok(g):
                    r = self._group_record(domain, g)
                    batch.append((r.name, g.gid, r.count, r.blob))
            if len(self.lookups.config.domains) > 1:
                keys = [(b[0], b[1]) for b in batch]
                owned = self.lookups.owned(domain, GETGRNAM, GETGRGID, keys)
                batch = [b for b, o in zip(batch, owned, strict=True) if o]
            self.feed.groups(batch, self.pwfield)

    def prefill_stored(self, note: GroupsStoredNote) -> None:
        """A backend committed some of a user's groups ahead of the rest of its
        initgroups answer (BackendCache.commit_new_groups): they go in the memory
        cache now, while the backend stores the others, rather than all after its
        answer (docs/ARCHITECTURE.md §4, "Early prefill")."""
        if not self.feed.groups_enabled:
            return
        try:
            domain = self.config.domain(note.domain)
        except ConfigError:
            return  # not one of ours (a backend of an older configuration)
        if (domain.name, Op.INITGROUPS, note.user) not in self.lookups.inflight:
            # Its answer came first (the note travels on another socket), or it was
            # never asked for: the answer's own prefill does, or did, these groups.
            return
        request = (domain.name, note.request)
        self._feed_groups(domain, self.lookups.caches[domain.name], note.groups)
        COUNTERS.add(NSS_EARLY, 1, 0.0, len(note.groups))
        now = time.monotonic()
        # Notes no answer took (a background refresh, a failed request) go stale.
        for old in [r for r, (t, _n) in self._early.items() if now - t >= EARLY_FRESH]:
            del self._early[old]
        noted = self._early.get(request)
        if noted is None:
            self._early[request] = (now, set(note.groups))
        else:
            noted[1].update(note.groups)

    def reset_memcache(self) -> None:
        """Retire the memory-cache files now (no client is served an old record after
        this returns) and publish new ones once the caller has had its answer."""
        self.feed.retire()
        self._prefilled.clear()
        self._early.clear()
        for cache in self.lookups.caches.values():
            # A store the backend replaced (rebuilt) within the last second would be
            # read, and answered VALID, until the next identity check.
            cache.recheck_files()
        # The kept answers stay: each is used only while the cache hands out an equal
        # GroupView, so one kept across the invalidation is still exact, and re-encoding
        # all 2,085 of bigroupuser's groups was a seventh of the responder's CPU for `id`
        # after `cached cache -E` (py-spy). Only their record in the new file is gone.
        for memo in (self._records, self._small):
            for r in memo.values():
                r.fed = -1e9
        self.answers.clear()
        asyncio.get_running_loop().call_soon(self.feed.reopen)

    # -- answering ---------------------------------------------------------------------

    def answer_now(
        self, req: p.Request, state: _Enum, kept: _Answer | None = None
    ) -> bytes | None:
        """The reply, if it needs nothing to wait for (the cache has the answer, or the
        backend is known to be unreachable); None: :meth:`answer` must wait for it.
        ``kept``: the answer kept for these request bytes (``req`` is its request)."""
        if kept is not None:
            if (reply := self._answer_again(kept)) is not None:
                return reply
            return COMMANDS[req.cmd].now(self, req.cmd, kept.key)
        if isinstance(req, p.ById):
            key: str | int = req.id
        elif isinstance(req, p.ByName):
            key = req.name
        else:
            return self._answer_other(req, state)
        cmd = req.cmd
        if cmd in GROUP_COMMANDS and self.answers:
            # Not matched before parsing: a request that came with the next one's bytes.
            a = self.answers.get(p.lookup_frame(req))
            if a is not None and (reply := self._answer_again(a)) is not None:
                return reply
        return COMMANDS[cmd].now(self, cmd, key)

    async def answer(self, req: p.Request, state: _Enum) -> bytes:
        if isinstance(req, p.ByName | p.ById):
            key = req.name if isinstance(req, p.ByName) else req.id
            return await COMMANDS[req.cmd].run(self, req.cmd, key)
        return self._answer_other(req, state)

    def _answer_other(self, req: p.Request, state: _Enum) -> bytes:
        """Every request but a lookup: answered at once."""
        if isinstance(req, p.GetVersion):
            return p.version_reply()
        if isinstance(req, p.BadRequest):
            limited.log(("bad request",), logging.DEBUG,
                        "bad request %s: %s", p.command_name(req.cmd), req.reason)  # fmt: skip
            return p.error_reply(req.cmd, req.errno)
        if isinstance(req, p.SetEnt | p.EndEnt):
            state.sent.clear()
            return p.empty_reply(req.cmd)
        if isinstance(req, p.GetEnt):
            return self._getent(req, state)
        raise AssertionError(req)  # pragma: no cover - the codec returns nothing else

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
            records: list[bytes] = []
            if req.cmd == p.Command.GETPWENT:
                ok = GETPWUID.served
                for u in cache.iter_users():
                    if ok(self.lookups.policy, domain, u):
                        try:
                            records.append(self._passwd_record(domain, u)[1])
                        except ValueError as e:
                            _left_out(u.name, e)
                if records:
                    return p.passwd_reply(req.cmd, records)
            else:
                gok = GETGRGID.served
                policy = self.lookups.policy
                groups = [g for g in cache.iter_groups() if gok(policy, domain, g)]
                if domain.auto_private_groups == PrivateGroups.TRUE:
                    # SSSD enumerates the users as groups too (SYSDB_GRENT_MPG_FILTER),
                    # but for those a real group shadows (_lookup_groups).
                    taken = {g.gid for g in groups} | {g.name for g in groups}
                    for u in cache.iter_users():
                        pg = policy.private_group(u)
                        if (policy.user_ok(domain, u) and pg.gid not in taken
                                and pg.name not in taken and gok(policy, domain, pg)):  # fmt: skip
                            groups.append(pg)
                for g in groups:
                    try:
                        records.append(self._encoded(self._group_record(domain, g)))
                    except ValueError as e:
                        _left_out(g.name, e)
                if records:
                    return p.group_reply(req.cmd, records)
        return p.not_found_reply(req.cmd)

    # -- connections -------------------------------------------------------------------

    def _admit(self, uid: int | None) -> str:
        """Why a new connection of ``uid`` is refused, or "" when it is admitted."""
        share = self.shares.get(uid)
        conns = share.conns if share is not None else 0
        return admission.refusal(self.config.nss, self.active, self.nonroot, uid, conns)

    def _log_failure(self, req: p.Request, e: Exception) -> bytes:
        # One line per kind of failure and minute (the first with its traceback): any
        # local user can repeat a failing request.
        limited.log(("answer", req.cmd, type(e).__name__), logging.ERROR,
                    "answering %s failed: %s: %s", p.command_name(req.cmd),
                    type(e).__name__, e, exc_info=True)  # fmt: skip
        return p.error_reply(req.cmd, errno.EIO)

    async def _room(self, share: _Share) -> None:
        """Wait until this uid's unread replies leave room for one more."""
        if share.unread < self.reply_budget:
            return
        share.waiting += 1
        try:
            async with share.room:
                await asyncio.wait_for(
                    share.room.wait_for(lambda: share.unread < self.reply_budget), WRITE_TIMEOUT
                )
        finally:
            share.waiting -= 1

    async def _notify(self, share: _Share) -> None:
        if share.waiting:
            async with share.room:
                share.room.notify_all()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "connections": self.active,
            "refused": self.refused,
            "served": self.served,
            "netgroups_served": self.netgroups_served,
            "uids": len(self.shares),
            "unread_bytes": sum(sh.unread for sh in self.shares.values()),
            **self.lookups.counts(),
        }


class _Client(asyncio.Protocol):
    """One NSS connection.

    A request the cache answers at once is answered inside ``data_received``: no task,
    no stream reader, no await between the bytes and the reply. The stream-and-task
    loop this replaces cost about as much per getgrgid as the answer itself
    (perf/warmsocket.py). A request that must wait — for the backend, for room in its
    uid's reply budget or a writing slot, or for its client to read a big reply — is
    handed to a task, and no further request of the connection is read until it is
    done: one request at a time, as libnss_sss sends them (reference §1.1).

    The connection counts (``max_clients``, per uid) until it is closed *and* its task,
    if any, has ended, so a client cannot pile up waiting answers by hanging up.
    """

    def __init__(self, responder: NssResponder) -> None:
        self.r = responder
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.conn = p.ServerConnection()
        self.state = _Enum()
        self.share: _Share | None = None
        self.uid: int | None = None
        self.watch: _Watchdog | None = None
        self.task: asyncio.Task[None] | None = None
        # CLIENT_UID for everything this connection starts (backend requests carry it).
        self.ctx = contextvars.copy_context()
        self.write_paused: asyncio.Future[None] | None = None
        self.reading_paused = False
        self.send_now_max = 0
        self.eof = False
        self.lost = False

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = transport = cast(asyncio.Transport, transport)
        r = self.r
        try:
            uid = aio.peer_uid(transport)
        except OSError:
            uid = None
        why = r._admit(uid)
        if why:
            r.refused += 1
            # Rate-limited per reason and uid: refusals are what an attacker causes.
            limited.log(("refused", uid, why.split(" ")[-1]), logging.WARNING,
                        "refusing an NSS client: %s", why)  # fmt: skip
            transport.close()
            return
        share = r.shares.get(uid)
        if share is None:
            share = r.shares[uid] = _Share(uid)
        share.conns += 1
        r.active += 1
        if uid != 0:
            r.nonroot += 1
        self.share, self.uid = share, uid
        # Replies up to the transport's high-water mark are written at once; a bigger
        # one would fill its buffer and wait for the client.
        self.send_now_max = transport.get_write_buffer_limits()[1]
        self.ctx.run(CLIENT_UID.set, uid)
        nss = r.config.nss
        self.watch = _Watchdog(self.loop, nss.client_idle_timeout, nss.client_request_timeout,
                               transport, self.conn)  # fmt: skip
        self.watch.reading = True

    def data_received(self, data: bytes) -> None:
        if self.watch is None or self.conn.dead:
            return  # refused, or closing after a protocol error
        conn = self.conn
        if not conn.buffered_bytes:
            self.watch.started = self.loop.time()
        conn.receive_data(data)
        if self.task is not None:
            # Answering: the next requests wait in the buffer (the client sends none
            # before its answer; only a hostile one does, and it waits).
            if conn.buffered_bytes > PAUSE_READING_AT and not self.reading_paused:
                self.reading_paused = True
                assert self.transport is not None
                self.transport.pause_reading()
            return
        self.ctx.run(self._process)

    def eof_received(self) -> bool:
        if self.task is not None:
            self.eof = True  # answer what was asked, then close
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.write_paused is not None:
            self.write_paused.set_result(None)
            self.write_paused = None
        if self.watch is not None:
            self.watch.cancel()
        if self.task is None:
            self._release()

    def pause_writing(self) -> None:
        if self.write_paused is None:
            self.write_paused = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.write_paused is not None:
            self.write_paused.set_result(None)
            self.write_paused = None

    # -- requests ---------------------------------------------------------------------

    def _process(self) -> None:
        """Answer the complete requests buffered, at once while nothing needs waiting."""
        conn, watch, transport = self.conn, self.watch, self.transport
        assert watch is not None and transport is not None
        kept = self.r.answers
        try:
            # Nothing buffered: the loop ends without asking the codec (most answers).
            while conn.buffered_bytes:
                a = conn.take_known(kept) if kept else None
                got = a.request if a is not None else conn.next_request()
                if isinstance(got, p.NeedData):
                    break
                later = self._answer_now(got, a)
                if later is not None:
                    watch.reading = False
                    self.task = self.loop.create_task(later, context=self.ctx)
                    return
                watch.last_request = watch.started = self.loop.time()
        except p.ProtocolError as e:
            limited.log(("protocol error",), logging.DEBUG, "closing NSS client: %s", e)
            transport.close()
            return
        if self.eof:  # the client said it is done, before a request it did not finish
            transport.close()
        elif conn.buffered_bytes:
            watch.partial()

    def _answer_now(
        self, req: p.Request, kept: _Answer | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """Answer ``req`` if nothing needs waiting; else what must run as the task.
        ``kept``: the answer kept for its bytes (NssResponder.answer_now)."""
        r, share, transport = self.r, self.share, self.transport
        assert share is not None and transport is not None
        if (
            share.unread >= r.reply_budget
            or (share.slots is not None and share.slots.locked())
            or self.write_paused is not None
        ):
            return self._answer_later(req)
        start = time.perf_counter()
        try:
            reply = r.answer_now(req, self.state, kept)
        except Exception as e:
            reply = r._log_failure(req, e)
        if reply is None:
            return self._answer_later(req)
        COUNTERS.add(NSS_REQUEST, 1, time.perf_counter() - start)
        r.served += 1
        size = len(reply)
        if size > self.send_now_max:
            # A big group: written as a task, within the uid's writing slots, and
            # counted in its unread budget from now on (the next connection of the
            # uid sees it before this loop iteration ends).
            share.unread += size
            return self._sending(reply, size)
        transport.write(reply)
        if self.write_paused is not None:
            # Its client reads slowly: wait for it to read the reply before the next
            # request, the reply counted as unread meanwhile (WRITE_TIMEOUT).
            share.unread += size
            return self._sending(None, size)
        return None

    async def _answer_later(self, req: p.Request) -> None:
        r, share = self.r, self.share
        assert share is not None
        try:
            await r._room(share)
            start = time.perf_counter()
            try:
                reply = await r.answer(req, self.state)
            except Exception as e:
                reply = r._log_failure(req, e)
            COUNTERS.add(NSS_REQUEST, 1, time.perf_counter() - start)
            r.served += 1
            # Counted from now: a reply waiting for its uid's turn to be written is
            # memory the uid holds as much as one its client does not read.
            share.unread += len(reply)
            await self._send(reply, len(reply))
        except (ConnectionError, TimeoutError):
            self._abort()
        finally:
            self._task_done()

    async def _sending(self, reply: bytes | None, size: int) -> None:
        try:
            await self._send(reply, size)
        except (ConnectionError, TimeoutError):
            self._abort()
        finally:
            self._task_done()

    async def _send(self, reply: bytes | None, size: int) -> None:
        """Write ``reply`` (None: written already) within the uid's writing slots and
        wait while the client has not read it; its ``size`` bytes are counted in the
        uid's unread replies already and are released here."""
        share, transport = self.share, self.transport
        assert share is not None and transport is not None
        try:
            async with share.slots or contextlib.nullcontext():
                if reply is not None and not transport.is_closing():
                    transport.write(reply)
                if self.write_paused is not None:
                    await asyncio.wait_for(asyncio.shield(self.write_paused), WRITE_TIMEOUT)
        finally:
            share.unread -= size
            await self.r._notify(share)

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _task_done(self) -> None:
        self.task = None
        if self.lost:
            self._release()
            return
        assert self.transport is not None
        if self.transport.is_closing():
            return  # aborted: connection_lost comes next and releases it
        assert self.watch is not None and self.transport is not None
        self.watch.last_request = self.watch.started = self.loop.time()
        self.watch.reading = True
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        # Still in the task's step, so in self.ctx already.
        self._process()

    def _release(self) -> None:
        """The connection is closed and nothing of it runs any more."""
        share, r = self.share, self.r
        if share is None:
            return
        self.share = None
        r.active -= 1
        share.conns -= 1
        if self.uid != 0:
            r.nonroot -= 1
        if share.conns == 0 and share.unread == 0 and r.shares.get(self.uid) is share:
            r.shares.pop(self.uid, None)


@dataclass(frozen=True)
class NssCommand(Generic[K, V]):
    """One lookup command of the NSS socket (SSSD: a row of ``get_nss_cmds()``): the
    lookup plugin, the fill function that answers a found value (and stores it in the
    memory cache), and what a miss drops from the memory cache (reference §2.6)."""

    plugin: Plugin[K, V]
    fill: Callable[[NssResponder, int, K, Found[V]], bytes]
    forget: Callable[[MemcacheFeed, K], None]

    def now(self, responder: NssResponder, cmd: int, key: str | int) -> bytes | None:
        """The reply if the cache gives it without waiting; None: :meth:`run` it."""
        if not isinstance(key, self.plugin.key):  # pragma: no cover - the codec's job
            raise AssertionError(f"{self.plugin.name}: key {key!r}")
        found = responder.lookups.lookup_now(self.plugin, key)
        if found is NOT_NOW:
            return None
        if found is None:
            self.forget(responder.feed, key)
            return p.not_found_reply(cmd)
        return self.fill(responder, cmd, key, found)

    async def run(self, responder: NssResponder, cmd: int, key: str | int) -> bytes:
        if not isinstance(key, self.plugin.key):  # pragma: no cover - the codec's job
            raise AssertionError(f"{self.plugin.name}: key {key!r}")
        found = await responder.lookups.lookup(self.plugin, key)
        if found is None:
            self.forget(responder.feed, key)
            return p.not_found_reply(cmd)
        return self.fill(responder, cmd, key, found)


C = p.Command
# The commands whose answers are kept (_Answer).
GROUP_COMMANDS = frozenset((C.GETGRNAM, C.GETGRGID))
COMMANDS: dict[int, NssCommand[Any, Any]] = {
    C.GETPWNAM: NssCommand(GETPWNAM, NssResponder.fill_passwd, MemcacheFeed.forget_user_name),
    C.GETPWUID: NssCommand(GETPWUID, NssResponder.fill_passwd, MemcacheFeed.forget_uid),
    C.GETGRNAM: NssCommand(GETGRNAM, NssResponder.fill_group, MemcacheFeed.forget_group_name),
    C.GETGRGID: NssCommand(GETGRGID, NssResponder.fill_group, MemcacheFeed.forget_gid),
    C.INITGR: NssCommand(INITGR, NssResponder.fill_initgr, MemcacheFeed.forget_user_name),
    # No memory cache of netgroups (SSSD has none either): nothing to forget.
    C.SETNETGRENT: NssCommand(SETNETGRENT, NssResponder.fill_netgroup, lambda _f, _k: None),
}


async def serve_nss(config: Config, responder: NssResponder) -> asyncio.Server:
    """Listen on ``<pipes_dir>/nss``, open to every local user as SSSD's (§1.9)."""
    path = nss_socket(config)
    framing.prepare_socket_path(path)
    os.makedirs(config.daemon.pipes_dir, mode=0o755, exist_ok=True)
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: _Client(responder), path=path, backlog=BACKLOG)
    # Public, as SSSD's: NSS data is public and the client checks nothing (§1.9).
    os.chmod(path, 0o666)
    return server


def nss_socket(config: Config) -> str:
    return os.path.join(config.daemon.pipes_dir, "nss")
