"""Feeding the memory cache from the responder's positive answers (reference §2).

The stock libnss_sss reads ``<mc_dir>/{passwd,group,initgroups}`` before it opens the
socket, so every record written here is a lookup that never reaches this process.
Only positive answers are stored, never during enumeration (§2.1); a lookup that
finds an entry gone drops its record (§2.6); ``cached cache`` resets the files.
A failure to write the memory cache never fails the answer: the socket path still
works, the error is logged once.

A record the file refuses (too big for it, bytes that would read as another record's
start, a NUL in a name: ``StoreResult``) never reaches the memory cache, so every
lookup of it comes back through the socket and would be offered again: coreutils'
``id NAME`` asks getpwnam twice and getpwuid once, three stores of one refused record,
and an unprivileged client asking in a loop made one store and one log line per
request (20,571 lines, 6.1 MB in 5 s). :class:`_Refusals` remembers each refused
record with its content and file: it is not offered to that file again, and is logged
once, through the rate limiter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence

from cached.config import NssConfig
from cached.memcache import GroupWriter, McError, McWriter, MemoryCache, StoreResult
from cached.model import User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

# Refused records remembered at most: each a key and the content refused. Only
# directory data can be refused, so this many is far beyond a real directory's; when
# full the table starts again (at worst each record is offered and logged once more).
MAX_REFUSALS = 10_000


class _Refusals:
    """The records the memory-cache files refused, by (file kind, key): the content
    refused and the file's seed. A new file (a reset: a new seed) or new content is
    offered again; the same content to the same file is not."""

    def __init__(self) -> None:
        self._by: dict[Hashable, tuple[int, Hashable]] = {}
        self._log = RateLimitedLog(log)

    def __bool__(self) -> bool:
        return bool(self._by)

    def known(self, writer: McWriter, key: Hashable, content: Hashable) -> bool:
        return self._by.get((writer.KIND, key)) == (writer.seed, content)

    def note(
        self, writer: McWriter, key: Hashable, content: Hashable, what: str, reason: str
    ) -> None:
        if len(self._by) >= MAX_REFUSALS:
            self._by.clear()
        self._by[(writer.KIND, key)] = (writer.seed, content)
        # Once per record and file; and a directory of many such records (or a writer
        # changing one entry again and again) is one line per minute and file kind.
        self._log.log(("not stored", writer.KIND), logging.INFO,
                    "memory cache: %s not stored: %s", what, reason)  # fmt: skip

    def clear(self) -> None:
        self._by.clear()


class MemcacheFeed:
    def __init__(self, mc_dir: str, nss: NssConfig) -> None:
        self.mc: MemoryCache | None = None
        self._warned = False
        # A record stored again within half its lifetime would only be renewed: the
        # group records a user's initgroups answer has just stored (so that `id` finds
        # them in the memory cache) are skipped when the getgrgid answers of a client
        # that does not read the memory cache come next. Encoding a record to compare it
        # cost more than a third of the responder's time per getgrgid
        # (perf/warmsocket.py). gid -> (name, member blob, when stored, monotonic).
        self.refeed_every = max(nss.memcache_timeout / 2, 1.0)
        self._groups_fed: dict[int, tuple[str, bytes, float]] = {}
        self._refused = _Refusals()
        try:
            self.mc = MemoryCache.open(
                mc_dir,
                passwd_mb=nss.memcache_size_passwd,
                group_mb=nss.memcache_size_group,
                initgroups_mb=nss.memcache_size_initgroups,
                timeout=nss.memcache_timeout,
            )
        except (McError, OSError) as e:
            log.error("memory cache disabled: %s", e)

    def _failed(self, what: str, e: Exception) -> None:
        if not self._warned:
            log.error("memory cache: cannot store %s: %s (lookups use the socket)", what, e)
            self._warned = True

    def _offer(
        self,
        writer: McWriter,
        key: Hashable,
        content: Hashable,
        what: str,
        store: Callable[[], StoreResult],
    ) -> bool:
        """``store()`` the record ``content`` of ``key`` unless ``writer``'s file has
        refused that content already; whether it is stored. A record the file refuses
        (or cannot encode: ValueError) is noted; a file that cannot be written is
        logged once."""
        if self._refused and self._refused.known(writer, key, content):
            return False
        try:
            res = store()
        except ValueError as e:
            self._refused.note(writer, key, content, what, str(e))
            return False
        except (McError, OSError) as e:
            self._failed(what, e)
            return False
        if not res.stored:
            self._refused.note(writer, key, content, what, res.reason)
        return res.stored

    def user(self, name: str, user: User, pwfield: str) -> None:
        writer = None if self.mc is None else self.mc.passwd
        if writer is None or writer.closed:
            return
        u = user
        self._offer(
            writer, name, (u.uid, u.gid, u.gecos, u.home, u.shell, pwfield), f"user {name!r}",
            lambda: writer.store(name, u.uid, u.gid, u.gecos, u.home, u.shell, passwd=pwfield),
        )  # fmt: skip

    def group(self, name: str, gid: int, count: int, blob: bytes, pwfield: str) -> None:
        writer = None if self.mc is None else self.mc.group
        if writer is None or writer.closed:
            return
        now = time.monotonic()
        if self._fed_already(writer, name, gid, blob, now):
            return
        if not self._offer(
            writer, gid, (name, blob), f"group {name!r}",
            lambda: writer.store_blob(name, gid, count, blob, passwd=pwfield),
        ):  # fmt: skip
            return
        if len(self._groups_fed) >= 100_000:
            self._groups_fed.clear()
        self._groups_fed[gid] = (name, blob, now)

    def _fed_already(
        self, writer: GroupWriter, name: str, gid: int, blob: bytes, now: float
    ) -> bool:
        """Stored moments ago with the same content, and still there: not stored again."""
        last = self._groups_fed.get(gid)
        return (
            last is not None
            and now - last[2] < self.refeed_every
            and last[0] == name
            and last[1] == blob
            and writer.holds_gid(gid)  # not evicted for another record meanwhile
        )

    def groups(self, groups: Iterable[tuple[str, int, int, bytes]], pwfield: str) -> None:
        """:meth:`group` of many ``(name, gid, count, blob)`` at once (the prefill of a
        user's groups after its initgroups answer): the same records, written in one
        pass where they supersede nothing (``GroupWriter.store_blobs``)."""
        writer = None if self.mc is None else self.mc.group
        if writer is None or writer.closed:
            return
        now = time.monotonic()
        fed, refusals = self._groups_fed, self._refused
        if fed or refusals:
            todo = [
                g
                for g in groups
                if not self._fed_already(writer, g[0], g[1], g[3], now)
                and not (refusals and refusals.known(writer, g[1], (g[0], g[3])))
            ]
        else:
            todo = list(groups)  # a new responder's or file's: none stored yet by this feed
        try:
            _, bad = writer.store_blobs(todo, passwd=pwfield)
        except (McError, OSError) as e:
            self._failed(f"{len(todo)} groups", e)
            return
        refused = set()
        if bad:
            items = {g[0]: g for g in todo}
            for name, why in bad:
                _, gid, _, blob = items[name]
                refusals.note(writer, gid, (name, blob), f"group {name!r}", why)
                refused.add(name)
        if len(fed) + len(todo) >= 100_000:
            fed.clear()
        for name, gid, _count, blob in todo:
            if name not in refused:
                fed[gid] = (name, blob, now)

    def initgroups(self, raw_name: str, name: str, gids: bytes | Sequence[int]) -> None:
        writer = None if self.mc is None else self.mc.initgroups
        if writer is None or writer.closed:
            return
        content = (name, gids if isinstance(gids, bytes) else tuple(gids))
        self._offer(
            writer, raw_name, content, f"initgroups of {name!r}",
            lambda: writer.store(raw_name, name, gids),
        )  # fmt: skip

    @property
    def groups_enabled(self) -> bool:
        return self.mc is not None and self.mc.group is not None and not self.mc.group.closed

    def _open(self) -> MemoryCache | None:
        if self.mc is None or any(w.closed for w in self.mc.writers()):
            return None
        return self.mc

    # A name or id found missing drops its records (reference §2.6): a user's name drops
    # its passwd and initgroups records, a uid its passwd record.
    def forget_user_name(self, name: str) -> None:
        if (mc := self._open()) is not None:
            if mc.passwd is not None:
                mc.passwd.invalidate_name(name)
            if mc.initgroups is not None:
                mc.initgroups.invalidate_name(name)

    def forget_uid(self, uid: int) -> None:
        if (mc := self._open()) is not None and mc.passwd is not None:
            mc.passwd.invalidate_uid(uid)

    def forget_group_name(self, name: str) -> None:
        if self.mc is not None and self.mc.group is not None and not self.mc.group.closed:
            self.mc.group.invalidate_name(name)
            self._groups_fed.clear()  # by name: rare (a miss), not worth an index

    def forget_gid(self, gid: int) -> None:
        if self.mc is not None and self.mc.group is not None and not self.mc.group.closed:
            self.mc.group.invalidate_gid(gid)
            self._groups_fed.pop(gid, None)

    def retire(self) -> None:
        """Mark every file RECYCLED and unlink it: from their next lookup, clients use
        the socket (§2.6). ``reopen`` publishes new files."""
        self._groups_fed.clear()
        self._refused.clear()  # new files: a new generation, each refusal logged again
        if self.mc is None:
            return
        for w in self.mc.writers():
            if not w.closed:
                try:
                    w.retire()
                except (McError, OSError) as e:
                    log.error("memory cache: cannot retire %s: %s", w.path, e)

    def reopen(self) -> None:
        if self.mc is None:
            return
        for w in self.mc.writers():
            if w.closed:
                try:
                    w.reopen()
                except (McError, OSError) as e:
                    log.error("memory cache: cannot recreate %s: %s", w.path, e)

    def close(self) -> None:
        if self.mc is not None:
            self.mc.close()
            self.mc = None
