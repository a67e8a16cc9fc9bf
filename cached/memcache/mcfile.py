"""Writers of SSSD-compatible memory-cache files (reference §2), one class per file kind.

One writer owns one file (``/var/lib/sss/mc/passwd`` …) for its whole life: it creates it
(§2.1), holds the fcntl write lock on byte 0 so ``sss_cache``-style tools see a live
responder (§4), and changes it in place while any number of client processes read it
without locks (§2.4). The file's size never changes while it is live; :meth:`McWriter.reset`
replaces the whole file instead.

Memory ordering. The client relies on barrier words and on single aligned ``u32`` stores
for chain links. Every store here goes through ``memoryview.cast("I")``/``cast("Q")`` (one
native aligned store per element) or an mmap slice assignment (``memcpy``), in program
order. On x86-64 (TSO) stores become visible to other cores in program order, so ordered
stores are enough and no fence is needed (§2.7). On weakly ordered CPUs (aarch64, ppc64le)
this module would need real fences between the barrier stores and the data stores, which
Python cannot express; ``layout.py`` refuses big-endian hosts, and a port to arm64 must add
fences (for example through a tiny C helper) before relying on this writer there.

Barrier values (the ABA window). The client (``sss_nss_mc_get_record``) accepts a copy when
``b1`` read before the memcpy equals ``b2`` read after it and ``b2`` in the copy: it cannot
tell "unchanged" from "freed and rewritten with the same barrier value during the copy".
Every record written into a free slot used to get the same barrier (``0xF0000000``, as
SSSD's ``MC_NEXT_BARRIER(MC_INVALID_VAL)``), so a reader descheduled inside its memcpy
accepted the old record's header and tail with another record's middle (the soak's
``('soakg9', '**', …)``). Every barrier raised on a record (new record, batch, refresh)
therefore takes the next value of one per-file 24-bit counter: a slot never shows the same
valid barrier twice until 2**24 raises later. This also closes the stale-``len`` window
(the client copies ``rec_len`` read before it re-reads ``b1``).

No record's bytes read as another record's start. A client follows a record's ``next``
to a slot and takes whatever is there for a record if its ``b1`` is valid (top byte
0xF0, §2.4); a stale ``next`` (the chain changed while it walked) can land inside a
longer record written over the old one, and a directory value whose bytes put 0xF0 at
offset 3 of a slot there (any 4-byte UTF-8 character in a gecos can, and a gidNumber of
4,026,531,840 or more) would then be read as a record of the directory's making. SSSD's
writer stores such bytes; cached leaves such a record out of the memory cache (it is
answered through the socket): no slot but a record's first shows a valid barrier.

Replacement is make-before-break: the new record is written and linked at the chain tail
*before* the record it supersedes is unlinked and wiped, so a concurrent reader finds the old
or the new version, never a gap. SSSD instead rewrites a same-size record in place under
its barriers, during which readers fall back to the socket.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import secrets
import stat
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, NamedTuple, Self

from ..model import Group, User
from .layout import (
    H_B1,
    H_B2,
    H_STATUS,
    HEADER_SIZE,
    INVALID32,
    MAJOR_VNO,
    MINOR_VNO,
    PW_GR_PREFIX,
    R_B1,
    R_B2,
    R_EXPIRE_OFF,
    R_HASH1,
    R_HASH2,
    R_LEN,
    R_NEXT1,
    R_NEXT2,
    R_PADDING,
    REC_HEADER,
    SLOT_SIZE,
    Geometry,
    Kind,
    PackedMembers,
    Status,
    _cstr,
    default_mb,
    encode_group_item,
    encode_group_keyed,
    encode_initgroups,
    encode_passwd,
    group_key,
    id_key,
    name_key,
    next_barrier,
)
from .murmur import hash32

__all__ = [
    "DEFAULT_MODE",
    "DEFAULT_TIMEOUT",
    "GroupWriter",
    "InitgroupsWriter",
    "McBusyError",
    "McError",
    "McWriter",
    "PasswdWriter",
    "StoreResult",
]

#: ``memcache_timeout`` default: records expire 300 s after they are stored (§2.1).
DEFAULT_TIMEOUT: Final = 300
#: SSSD creates the files 0664 so the unprivileged ``sssd`` group can write them. cached's
#: responder owns the files it writes (root here), clients only read them, so group write
#: buys nothing: 0644.
DEFAULT_MODE: Final = 0o644

# struct flock on Linux x86-64: l_type, l_whence, l_start, l_len, l_pid, padding (32 bytes).
_FLOCK: Final = struct.Struct("@hhqqi4x")


class McError(Exception):
    """A memory-cache file cannot be created or is not in the state this writer left it."""


class McBusyError(McError):
    """Another live writer holds the file's lock (two responders on one ``mc`` directory)."""


@dataclass(slots=True)
class StoreResult:
    """What a ``store`` did. ``stored`` is False only when the file can never hold the
    record (too big for it, or bytes that would read as another record's start), and
    ``reason`` then says why; the writer logs nothing: every lookup of such a record
    comes back through the socket and stores it again, so the caller decides what is
    logged (``cached.nss.mcfeed``, once per record and file). Not frozen: a frozen
    dataclass's ``__init__`` cost 1.2 µs more per store, 5 % of the memory-cache prefill
    of bigroupuser's 2,085 groups."""

    stored: bool
    slot: int = -1
    #: Records evicted (FIFO) to make room.
    evicted: int = 0
    #: True when an identical record only had its expiry renewed.
    refreshed: bool = False
    reason: str = ""


class _Rec(NamedTuple):
    """The writer's own note of a live record (the file is the truth for readers).

    A tuple, so that a batch makes each with ``tuple.__new__(_Rec, fields)``, one C
    call: the slotted dataclass's ``__init__`` was ~3,000 instructions of each of the
    2,085 records of bigroupuser's prefill (valgrind). Its fields are read only when a
    record is superseded, evicted or invalidated."""

    start: int
    nslots: int
    length: int
    key1: bytes
    key2: bytes
    hash1: int
    hash2: int
    word: int  # the word index of its first slot (b1)


#: A group of a batch, checked: key1 (name + NUL), key2 (decimal gid + NUL), gid,
#: member count, member blob (GroupWriter.store_blobs).
_GroupItem = tuple[bytes, bytes, int, int, bytes]


def _lock_byte0(fd: int) -> None:
    """Take the write lock on byte 0, length 1, without waiting.

    An *open file description* lock (``F_OFD_SETLK``) rather than a classic POSIX one: it
    conflicts with the classic ``F_SETLK`` that ``sss_cache`` tries (§4), but unlike a POSIX
    lock it is not dropped when this process opens and closes the same file through another
    descriptor (a reader, a status command in-process).
    """
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise McBusyError("locked by another live writer") from exc
        raise


class McWriter:
    """Base writer: file lifecycle, slot allocator, chains, invalidation, eviction.

    One object per file, used from one thread (the responder's event loop): the writer
    keeps an in-memory index of its records and is not itself thread-safe.

    ``size_mb`` (default: the kind's SSSD default) or ``slots`` sizes the file;
    ``hash_elems`` overrides the hash-table size (normally = slots; small values force
    chain collisions in tests). ``clock`` returns unix time, for the record expiry.
    """

    KIND: ClassVar[Kind]

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        size_mb: int | None = None,
        slots: int | None = None,
        hash_elems: int | None = None,
        timeout: int = DEFAULT_TIMEOUT,
        mode: int = DEFAULT_MODE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if size_mb is not None and slots is not None:
            raise ValueError("give size_mb or slots, not both")
        if slots is not None:
            geo = Geometry.from_slots(slots, hash_elems)
        else:
            geo = Geometry.from_mb(default_mb(self.KIND) if size_mb is None else size_mb)
            if hash_elems is not None:
                geo = Geometry.from_slots(geo.slots, hash_elems)
        if timeout <= 0:
            raise ValueError(f"memcache_timeout {timeout} must be positive (0 disables the file)")
        self.path: Final = Path(path)
        self.geometry: Final = geo
        # Offsets used on every store, computed once.
        self._dt: Final = geo.data_table
        self._ft: Final = geo.free_table
        self._ht_word: Final = geo.hash_table >> 2
        self._ht_elems: Final = geo.ht_elems
        self.timeout: Final = timeout
        self.mode: Final = mode
        self._clock = clock
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._u32: memoryview | None = None
        self._u64: memoryview | None = None
        self._seed = 0
        self._zero_runs: dict[int, bytes] = {}
        #: Low 24 bits of the last record barrier raised in this file (see the module
        #: docstring: never reset while the file lives, so a reused slot gets a new value).
        self._gen = _GEN_MASK
        self._one_runs: dict[int, bytes] = {}
        self._reset_state()
        self._create()

    # --- public state --------------------------------------------------------------------

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def closed(self) -> bool:
        return self._mm is None

    @property
    def records(self) -> int:
        """Number of live records."""
        return len(self._recs)

    @property
    def used_slots(self) -> int:
        return self.geometry.slots - self._free

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.records} records, {self.used_slots} slots"
        return f"<{type(self).__name__} {self.path} {self.geometry.slots} slots: {state}>"

    # --- lifecycle (§2.1) ------------------------------------------------------------------

    def _reset_state(self) -> None:
        slots = self.geometry.slots
        # 1 = slot in use (mirror of the free table). Which record uses a slot is found
        # by walking back to the first slot that starts one (_allocate's eviction): a
        # slot -> record array cost a fifth of a fresh store to keep up (py-spy).
        self._used = bytearray(slots)
        # The same bytes as native (little-endian, layout.py) u64: 8 slots per item, a
        # multiple of 8 slots per file (Geometry).
        self._used_q = memoryview(self._used).cast("Q")
        self._recs: dict[int, _Rec] = {}
        self._by1: dict[bytes, _Rec] = {}
        self._by2: dict[bytes, _Rec] = {}
        self._free = slots
        self._cursor = 0

    def _create(self) -> None:
        geo = self.geometry
        self._recycle_old_file()
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(self.path, flags, self.mode)
        except FileExistsError:
            raise McBusyError(
                f"{self.path} was created by another process while this one replaced it; "
                "is a second responder using the same mc directory?"
            ) from None
        except OSError as exc:
            raise McError(
                f"cannot create memory cache {self.path}: {exc.strerror}; the directory must "
                "exist and be writable (mc_dir in [nss], systemd tmpfiles)"
            ) from exc
        try:
            os.fchmod(fd, self.mode)  # the umask must not decide who can read the cache
            _lock_byte0(fd)
            os.posix_fallocate(fd, 0, geo.file_size)
            mm = mmap.mmap(fd, geo.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            raise
        # The new file is all zeros: header b1 = b2 = 0 reads as invalid until ALIVE below.
        _fill_ff(mm, geo.data_table, geo.dt_size)
        _fill_ff(mm, geo.hash_table, geo.ht_size)
        self._fd = fd
        self._mm = mm
        self._u32 = memoryview(mm).cast("I")
        self._u64 = memoryview(mm).cast("Q")
        previous = self._seed
        while (seed := secrets.randbits(32)) == previous:  # a reset must change the seed
            pass
        self._seed = seed
        # A new file (new inode): no reader can see a barrier of the old one in it.
        self._gen = _GEN_MASK  # the first record barrier is 0xF0000000, as SSSD's
        self._update_header(
            MAJOR_VNO,
            MINOR_VNO,
            Status.ALIVE,
            self._seed,
            geo.dt_size,
            geo.ft_size,
            geo.ht_size,
            geo.data_table,
            geo.free_table,
            geo.hash_table,
            0,
        )
        self._reset_state()

    def _recycle_old_file(self) -> None:
        """Mark a file left at our path RECYCLED and unlink it, unless a live writer owns it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise McError(f"cannot open old memory cache {self.path}: {exc.strerror}") from exc
            os.unlink(self.path)  # a symlink at our path: never follow it, just remove it
            return
        try:
            try:
                _lock_byte0(fd)
            except McBusyError:
                raise McBusyError(
                    f"{self.path} is locked by another running responder; stop it before "
                    "starting a second one on the same mc directory"
                ) from None
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_size >= HEADER_SIZE:
                with mmap.mmap(fd, HEADER_SIZE, mmap.MAP_SHARED) as old:
                    words = memoryview(old).cast("I")
                    _barrier_store(words, H_STATUS, (Status.RECYCLED,))
                    words.release()
            os.unlink(self.path)
        finally:
            os.close(fd)

    def reset(self) -> None:
        """Publish a fresh, empty file with a new seed; the old one is RECYCLED (§2.6).

        Clients that still map the old file see RECYCLED (or ``st_nlink == 0``), use the
        socket once and map the new file on a later call.
        """
        self.retire()
        self.reopen()

    def retire(self) -> None:
        """The first half of :meth:`reset`: mark the file RECYCLED, unlink and close it.

        Cheap (a header write), so an invalidation can be acknowledged as soon as no
        client can be served the old records; :meth:`reopen` later publishes the new
        file (filling it costs tens of milliseconds for SSSD's default sizes).
        """
        self._require_open()
        self._update_header(status=Status.RECYCLED)
        try:
            if os.path.samestat(os.stat(self.path, follow_symlinks=False), os.fstat(self._fd)):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._unmap()

    def reopen(self) -> None:
        """Publish a fresh, empty file with a new seed (after :meth:`retire`)."""
        if self._mm is not None:
            raise McError(f"{self.path} is still open; retire() it first")
        self._create()

    def close(self) -> None:
        """Unmap and close; releases the lock. The file stays and clients keep using it
        until its records expire (as with SSSD); idempotent."""
        if self._mm is not None:
            self._unmap()

    def _unmap(self) -> None:
        assert self._mm is not None and self._u32 is not None and self._u64 is not None
        self._u32.release()
        self._u64.release()
        self._mm.close()
        os.close(self._fd)
        self._mm = self._u32 = self._u64 = None
        self._fd = -1

    def _require_open(self) -> tuple[mmap.mmap, memoryview]:
        if self._mm is None or self._u32 is None:
            raise McError(f"memory cache {self.path} is closed")
        return self._mm, self._u32

    def _update_header(self, *fields: int, status: Status | None = None) -> None:
        """Header words 1..11 (``fields``) or just the status word, under the barriers."""
        _, u32 = self._require_open()
        if status is not None:
            _barrier_store(u32, H_STATUS, (status,))
        else:
            _barrier_store(u32, H_B1 + 1, fields)

    # --- keys ----------------------------------------------------------------------------

    def _hash(self, key: bytes) -> int:
        # = layout.bucket, one call less: two per store, 4,170 per `id` after a reset.
        return hash32(key, self._seed, False) % self._ht_elems

    # --- store ---------------------------------------------------------------------------

    def _store(self, key1: bytes, key2: bytes, payload: bytes) -> StoreResult:
        mm, u32, u64 = self._mm, self._u32, self._u64
        if mm is None or u32 is None or u64 is None:
            raise McError(f"memory cache {self.path} is closed")
        length = SLOT_SIZE + len(payload)
        nslots = -(-length // SLOT_SIZE)
        if nslots > self.geometry.slots:
            reason = (
                f"{self.KIND.value} record for {key1[:-1]!r} is {length} bytes "
                f"({nslots} slots) but {self.path} has only {self.geometry.slots} slots; "
                f"raise memcache_size_{self.KIND.value} to cache it"
            )
            return StoreResult(False, reason=reason)
        if _FORGEABLE in payload[3::SLOT_SIZE]:
            reason = (
                f"{self.KIND.value} record for {key1[:-1]!r}: its bytes would read as "
                "the start of another record at a slot boundary (0xF0 at offset 3 of a "
                "slot); answered through the socket"
            )
            return StoreResult(False, reason=reason)
        expire = int(self._clock()) + self.timeout

        old1 = self._by1.get(key1)
        old2 = self._by2.get(key2)
        if old1 is not None and old1 is old2 and old1.length == length:
            start = self._dt + old1.start * SLOT_SIZE
            if mm[start + SLOT_SIZE : start + length] == payload:
                # Same content: renew the expiry in place, under the barriers.
                w = old1.word
                b = self._next_barrier()
                u32[w + R_B2] = b
                u64[(start + R_EXPIRE_OFF) >> 3] = expire
                u32[w + R_B1] = b
                return StoreResult(True, slot=old1.start, refreshed=True)

        hash1 = self._hash(key1)
        hash2 = self._hash(key2)
        start_slot, evicted = self._allocate(nslots)
        off = self._dt + start_slot * SLOT_SIZE
        w = off >> 2
        rec = _Rec(start_slot, nslots, length, key1, key2, hash1, hash2, w)
        # 1. Make the slot read as invalid (free slots already are: all 0xFF).
        u32[w + R_B2] = INVALID32
        u32[w + R_LEN] = length
        u32[w + R_NEXT1] = INVALID32
        u32[w + R_NEXT2] = INVALID32
        u32[w + R_PADDING] = INVALID32
        u32[w + R_B1] = INVALID32
        self._mark_used(rec)
        # 2. Raise b2 (a value this slot has not shown: the ABA window, module
        #    docstring), write header fields and payload, lower b1 = b2.
        b = self._next_barrier()
        u32[w + R_B2] = b
        u64[(off + R_EXPIRE_OFF) >> 3] = expire
        u32[w + R_HASH1] = hash1
        u32[w + R_HASH2] = hash2
        mm[off + SLOT_SIZE : off + length] = payload
        u32[w + R_B1] = b
        # 3. Only now make it reachable.
        self._reach(rec)
        # 4. Drop whatever the new record supersedes (same name or same id), unless the
        #    allocation already evicted it.
        for old in (old1, old2):
            if old is not None and self._recs.get(old.start) is old:
                self._invalidate(old)
        self._recs[start_slot] = rec
        self._by1[key1] = rec
        self._by2[key2] = rec
        return StoreResult(True, slot=start_slot, evicted=evicted)

    def _next_barrier(self) -> int:
        """A record barrier this file has not shown for 2**24 raises (the ABA window,
        module docstring); :meth:`GroupWriter._store_group_run` counts inline."""
        self._gen = g = (self._gen + 1) & _GEN_MASK
        return _VALID_TAG | g

    def _split_batch(
        self, items: Sequence[_GroupItem]
    ) -> tuple[list[_GroupItem], list[_GroupItem]]:
        """``items`` (each starting with its key1 and key2) as (those that supersede
        nothing: no live record and no other item has either key, the rest), both in
        order."""
        by1, by2 = self._by1, self._by2
        keys1 = {item[0] for item in items}
        keys2 = {item[1] for item in items}
        if (
            len(keys1) == len(keys2) == len(items)
            and keys1.isdisjoint(by1)
            and keys2.isdisjoint(by2)
        ):
            return list(items), []  # a new file's case: checked by set operations
        seen1: dict[bytes, int] = {}
        seen2: dict[bytes, int] = {}
        for item in items:
            seen1[item[0]] = seen1.get(item[0], 0) + 1
            seen2[item[1]] = seen2.get(item[1], 0) + 1
        fresh, rest = [], []
        for item in items:
            key1, key2 = item[0], item[1]
            if key1 in by1 or key2 in by2 or seen1[key1] > 1 or seen2[key2] > 1:
                rest.append(item)
            else:
                fresh.append(item)
        return fresh, rest

    def _free_run(self, total: int) -> int:
        """The first slot of ``total`` free slots in a row, next-fit from the cursor as
        :meth:`_allocate` looks, or -1 (then the records go one at a time, evicting)."""
        if total > self._free:
            return -1
        run = bytes(total)  # not kept as _zero_run's are: one size per batch
        cur = self._cursor if self._cursor + total <= self.geometry.slots else 0
        pos = self._used.find(run, cur)
        if pos < 0 and cur:
            pos = self._used.find(run, 0, cur + total - 1)
        return pos

    def _publish_run(self, pos: int, data: bytes, recs: list[_Rec]) -> None:
        """Write ``data``, the records ``recs`` laid out from slot ``pos`` with their
        ``b1`` still invalid (as a free slot's) and ``b2`` each its own barrier, then lower
        each ``b1`` and make it reachable: each is complete before a reader can reach
        it, as in :meth:`_store` (make-before-break needs no unlinking here: they
        supersede nothing). ``len(data)`` is a whole number of slots, all free."""
        mm, u32 = self._mm, self._u32
        assert mm is not None and u32 is not None
        total = len(data) // SLOT_SIZE
        start = self._dt + pos * SLOT_SIZE
        mm[start : start + len(data)] = data
        self._used[pos : pos + total] = b"\x01" * total
        self._free -= total
        self._write_free_bits(pos, pos + total)
        self._cursor = pos + total
        reach = self._reach
        recs_by_start, by1, by2 = self._recs, self._by1, self._by2
        for rec in recs:
            u32[rec.word + R_B1] = u32[rec.word + R_B2]  # its own barrier, written above
            reach(rec)  # only now, complete (see _store, step 3)
            recs_by_start[rec.start] = rec
            by1[rec.key1] = rec
            by2[rec.key2] = rec

    def _reach(self, rec: _Rec) -> None:
        """Make a complete record reachable: the tail of both its hash chains. An empty
        bucket (most of them in a file of SSSD's size) takes it without a call."""
        u32, ht = self._u32, self._ht_word
        assert u32 is not None
        h1, h2 = rec.hash1, rec.hash2
        if u32[ht + h1] == INVALID32:
            u32[ht + h1] = rec.start
        else:
            self._link(rec, h1)
        if h2 != h1:
            if u32[ht + h2] == INVALID32:
                u32[ht + h2] = rec.start
            else:
                self._link(rec, h2)

    def _zero_run(self, n: int) -> bytes:
        run = self._zero_runs.get(n)
        if run is None:
            run = self._zero_runs[n] = bytes(n)
        return run

    def _one_run(self, n: int) -> bytes:
        run = self._one_runs.get(n)
        if run is None:
            run = self._one_runs[n] = b"\x01" * n
        return run

    def _allocate(self, n: int) -> tuple[int, int]:
        """Find ``n`` consecutive slots: next-fit from the cursor, wrapping once; when no
        such run is free, evict every record in the ``n`` slots at the cursor (FIFO: the
        cursor points at the oldest allocations)."""
        total = self.geometry.slots
        cur = self._cursor if self._cursor + n <= total else 0
        pos = -1
        if self._free >= n:
            run = self._zero_run(n)
            pos = self._used.find(run, cur)
            if pos < 0 and cur:
                pos = self._used.find(run, 0, cur + n - 1)
        evicted = 0
        if pos < 0:
            pos = s = cur
            used, recs = self._used, self._recs
            while s < pos + n:
                if not used[s]:
                    s += 1
                    continue
                # Records are contiguous and never overlap: the first record start at
                # or before a used slot is the record that uses it.
                first = s
                while first not in recs:
                    first -= 1
                victim = recs[first]
                self._invalidate(victim)
                evicted += 1
                s = first + victim.nslots
        self._cursor = pos + n
        return pos, evicted

    def _mark_used(self, rec: _Rec) -> None:
        a, n = rec.start, rec.nslots
        if n == 1:
            self._used[a] = 1
        else:
            self._used[a : a + n] = self._one_run(n)
        self._free -= n
        self._write_free_bits(a, a + n)

    def _mark_free(self, rec: _Rec) -> None:
        a, b = rec.start, rec.start + rec.nslots
        self._used[a:b] = self._zero_run(rec.nslots)
        self._free += rec.nslots
        self._write_free_bits(a, b)

    def _write_free_bits(self, a: int, b: int) -> None:
        """Copy the used-slot mirror for slots [a, b) into the on-disk bitmap
        (slot s -> byte s/8, bit 0x80 >> s%8; 1 = used)."""
        mm = self._mm
        if mm is None:
            raise McError(f"memory cache {self.path} is closed")
        ft, q = self._ft, self._used_q
        lo, hi = a >> 3, ((b - 1) >> 3) + 1
        # Each bitmap byte is one u64 of the mirror, its eight low bits gathered by one
        # multiplication: no slice, no int.from_bytes (a tenth of a fresh store's CPU
        # with them, py-spy, 2,085 stores after a reset).
        if hi - lo == 1:
            mm[ft + lo] = ((q[lo] * _GATHER) >> 56) & 0xFF
            return
        mm[ft + lo : ft + hi] = bytes([((q[i] * _GATHER) >> 56) & 0xFF for i in range(lo, hi)])

    # --- chains (§2.3) -------------------------------------------------------------------

    def _next_with_hash(self, u32: memoryview, w: int, h: int) -> tuple[int, int]:
        """(next slot, word index of the link to follow) for the chain of bucket ``h``."""
        if u32[w + R_HASH1] == h:
            return u32[w + R_NEXT1], w + R_NEXT1
        if u32[w + R_HASH2] == h:
            return u32[w + R_NEXT2], w + R_NEXT2
        raise McError(
            f"{self.path}: record at word {w} is on the chain of bucket {h} "
            "without either of its hashes: file corrupted"
        )

    def _slot_word(self, slot: int) -> int:
        return (self._dt + slot * SLOT_SIZE) >> 2

    def _link(self, rec: _Rec, h: int) -> None:
        """Append at the tail of bucket ``h``; every link is one aligned u32 store."""
        _, u32 = self._require_open()
        ht_word = self._ht_word + h
        slot = u32[ht_word]
        if slot == INVALID32:
            u32[ht_word] = rec.start
            return
        for _ in range(self.geometry.slots):
            if slot == rec.start:
                return
            nxt, link_word = self._next_with_hash(u32, self._slot_word(slot), h)
            if nxt == INVALID32:
                u32[link_word] = rec.start
                return
            slot = nxt
        raise McError(f"{self.path}: chain of bucket {h} loops: file corrupted")

    def _unlink(self, rec: _Rec, h: int) -> None:
        _, u32 = self._require_open()
        ht_word = self._ht_word + h
        link_word = ht_word
        slot = u32[ht_word]
        for _ in range(self.geometry.slots):
            if slot == INVALID32:
                return
            nxt, next_word = self._next_with_hash(u32, self._slot_word(slot), h)
            if slot == rec.start:
                u32[link_word] = nxt
                return
            slot, link_word = nxt, next_word
        raise McError(f"{self.path}: chain of bucket {h} loops: file corrupted")

    # --- invalidation (§2.6) -------------------------------------------------------------

    def _invalidate(self, rec: _Rec) -> None:
        """Unlink from both chains, free the slots, then wipe under the barriers."""
        self._unlink(rec, rec.hash1)
        if rec.hash2 != rec.hash1:
            self._unlink(rec, rec.hash2)
        self._forget(rec)
        self._wipe(rec)

    def _forget(self, rec: _Rec) -> None:
        self._mark_free(rec)
        del self._recs[rec.start]
        if self._by1.get(rec.key1) is rec:
            del self._by1[rec.key1]
        if self._by2.get(rec.key2) is rec:
            del self._by2[rec.key2]

    def _wipe(self, rec: _Rec) -> None:
        mm, u32 = self._require_open()
        w = rec.word
        off = w << 2
        u32[w + R_B2] = INVALID32
        mm[off + SLOT_SIZE : off + rec.nslots * SLOT_SIZE] = b"\xff" * (
            rec.nslots * SLOT_SIZE - SLOT_SIZE
        )
        mm[off + 4 : off + 36] = b"\xff" * 32  # len, expire, next1/2, hash1/2, padding
        u32[w + R_B1] = INVALID32

    def _invalidate_key(self, index: dict[bytes, _Rec], key: bytes) -> bool:
        self._require_open()
        rec = index.get(key)
        if rec is None:
            return False
        self._invalidate(rec)
        return True

    def invalidate_all(self) -> int:
        """Drop every record, keeping the file and its seed; returns how many.

        Buckets are emptied first (each u32 store atomic), so no new lookup reaches a record;
        then each record is wiped under its barriers.
        """
        mm, _ = self._require_open()
        geo = self.geometry
        recs = list(self._recs.values())
        mm[geo.hash_table : geo.hash_table + geo.ht_size] = b"\xff" * geo.ht_size
        mm[geo.free_table : geo.free_table + geo.ft_size] = bytes(geo.ft_size)
        for rec in recs:
            self._wipe(rec)
        self._reset_state()
        return len(recs)


#: Multiplying a little-endian u64 of eight 0/1 bytes by this gathers byte k's bit into
#: bit 7 - k of the top byte: slot 8i+k -> bit 0x80 >> k of free-table byte i (§2.2).
_GATHER: Final = 0x8040201008040201

#: The top byte of a valid barrier (§2.4): a record's bytes must not show it at offset 3
#: of any slot but its first (module docstring).
_FORGEABLE: Final = 0xF0

#: Record barriers: 0xF0 tag | a 24-bit per-file counter (``McWriter._gen``).
_VALID_TAG: Final = 0xF0000000
_GEN_MASK: Final = 0x00FFFFFF

#: A passwd or group record's header and payload prefix (name_off, id, id|count,
#: strs_len) in one struct: :meth:`GroupWriter._store_group_run` packs both at once.
_RECORD_HEAD: Final = struct.Struct(REC_HEADER.format + PW_GR_PREFIX.format[1:])

#: The 0xFF fill from a record's end to its last slot's, by length (0 to 39 bytes).
_FF_PADS: Final = tuple(b"\xff" * n for n in range(SLOT_SIZE))

#: Chunk of 0xFF bytes a new file is filled with, through the mapping: assigning one
#: reused 1 MiB run at a time costs less than one file-sized ``b"\xff" * n`` (no
#: temporary buffer to allocate and fault in: 4.8 ms instead of 7.2 ms for SSSD's
#: default group file, median of 7). Through the mapping rather than pwrite(2) (2-3 ms):
#: the stores that follow then find their pages mapped writable, where after a pwrite
#: each first store to a page faults (ext4: page_mkwrite), inside the `id` that fills it.
_FF_CHUNK: Final = 1 << 20


def _fill_ff(mm: mmap.mmap, offset: int, size: int) -> None:
    """Write ``size`` bytes of 0xFF at ``offset`` (a new file, before it is ALIVE)."""
    chunk = b"\xff" * min(size, _FF_CHUNK)
    end = offset + size
    while offset < end:
        n = min(len(chunk), end - offset)
        mm[offset : offset + n] = chunk if n == len(chunk) else chunk[:n]
        offset += n


def _barrier_store(u32: memoryview, first: int, values: Sequence[int]) -> None:
    """Write header words ``first…`` under the header barriers (§2.4)."""
    b = next_barrier(u32[H_B1])
    u32[H_B2] = b
    for i, v in enumerate(values):
        u32[first + i] = v
    u32[H_B1] = b


class PasswdWriter(McWriter):
    """``mc/passwd``: hash1 = user name, hash2 = decimal uid (§2.2)."""

    KIND = Kind.USER

    def store(
        self,
        name: str,
        uid: int,
        gid: int,
        gecos: str = "",
        home: str = "",
        shell: str = "",
        *,
        passwd: str = "*",
    ) -> StoreResult:
        """Store one user; ``name`` is the output name sent on the socket. Supersedes any
        record with the same name or the same uid."""
        payload = encode_passwd(name, passwd, uid, gid, gecos, home, shell)
        return self._store(name_key(name), id_key(uid), payload)

    def store_user(self, user: User, *, passwd: str = "*") -> StoreResult:
        return self.store(
            user.name, user.uid, user.gid, user.gecos, user.home, user.shell, passwd=passwd
        )

    def invalidate_name(self, name: str) -> bool:
        return self._invalidate_key(self._by1, name_key(name))

    def invalidate_uid(self, uid: int) -> bool:
        return self._invalidate_key(self._by2, id_key(uid))


class GroupWriter(McWriter):
    """``mc/group``: hash1 = group name, hash2 = decimal gid (§2.2)."""

    KIND = Kind.GROUP

    def __init__(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        #: NUL-terminated passwd fields by value (one or two per responder).
        self._passwd_fields: dict[str, bytes] = {}
        super().__init__(path, **kwargs)

    def store(
        self,
        name: str,
        gid: int,
        members: Sequence[str] | PackedMembers = (),
        *,
        passwd: str = "*",
    ) -> StoreResult:
        """Store one group with its (already expanded) member names, given as names or as
        a :class:`PackedMembers` blob. Supersedes any record with the same name or gid."""
        packed = (
            members if isinstance(members, PackedMembers) else PackedMembers.from_names(members)
        )
        return self._store_group(name, gid, packed.count, packed.blob, passwd)

    def store_blob(
        self, name: str, gid: int, count: int, blob: bytes, *, passwd: str = "*"
    ) -> StoreResult:
        """:meth:`store` of ``count`` members joined as ``m1\\0…mn\\0`` (the cache's and
        the socket reply's form), without building a :class:`PackedMembers` per record:
        the responder stores thousands at once after a reset."""
        return self._store_group(name, gid, count, blob, passwd)

    def store_blobs(
        self, groups: Iterable[tuple[str, int, int, bytes]], *, passwd: str = "*"
    ) -> tuple[int, list[tuple[str, str]]]:
        """:meth:`store_blob` of many ``(name, gid, count, blob)``, in order: a reader
        then finds by every name and gid what one store each gives (in a new file, the
        very same bytes). Returns how many were stored and the groups that cannot be
        (a NUL in the name, a bad blob, a record the file refuses: see
        :class:`StoreResult`) with why; the others are stored all the same.

        The responder's prefill of a user's groups (nss/server.py, _prefill_groups):
        groups that supersede nothing (no live record and no other item has either
        key) are written together when a free run holds them all, each record's
        header, payload prefix and strings packed straight into one copy, with no
        payload built on its own (:meth:`McWriter._publish_run`). The others go
        through :meth:`_store`, one at a time. One store each took 11 µs a record,
        most of it bookkeeping of each record on its own (py-spy); a payload built
        first (encode_group_item) and then copied into its record, with the record
        noted by a dataclass, made it 31.3 K instructions a group, this 28.2 K
        (cachegrind, bigroupuser's 2,084 groups in a new file)."""
        pw = self._passwd_field(passwd)
        items: list[_GroupItem] = []
        bad: list[tuple[str, str]] = []
        for name, gid, count, blob in groups:
            try:
                key1 = group_key(name, gid, count, blob)
            except ValueError as e:
                bad.append((name, str(e)))
                continue
            items.append((key1, b"%d\0" % gid, gid, count, blob))
        fresh, rest = self._split_batch(items)
        pos = -1
        if len(fresh) > 1:
            extra = _RECORD_HEAD.size + len(pw) + SLOT_SIZE - 1
            total = sum([(extra + len(it[0]) + len(it[4])) // SLOT_SIZE for it in fresh])
            pos = self._free_run(total)
        stored = 0
        if pos >= 0 and self._store_group_run(pos, fresh, pw):
            stored = len(fresh)
        else:
            # No free run, or a record whose bytes read as a barrier: one at a time.
            rest = items
        for key1, key2, gid, count, blob in rest:
            res = self._store(key1, key2, encode_group_keyed(key1, pw, gid, count, blob))
            if res.stored:
                stored += 1
            else:
                bad.append((key1[:-1].decode(), res.reason))  # group_key encoded it
        return stored, bad

    def _store_group_run(self, pos: int, items: list[_GroupItem], pw: bytes) -> bool:
        """Lay ``items`` out from the free slot ``pos`` as :meth:`_store` writes each
        (``encode_group_keyed``'s payload), their ``b1`` invalid, and publish them;
        False, with nothing written, when a slot of the run other than a record's first
        would read as a record's start (module docstring: each is then stored alone,
        and that one left out). A first slot's ``b1`` is still invalid here."""
        expire = int(self._clock()) + self.timeout
        g, tag, gmask = self._gen, _VALID_TAG, _GEN_MASK
        pack, strs_off = _RECORD_HEAD.pack, _RECORD_HEAD.size - SLOT_SIZE
        base = _RECORD_HEAD.size + len(pw)
        hash_, seed, elems = hash32, self._seed, self._ht_elems
        pads, inv, new = _FF_PADS, INVALID32, tuple.__new__
        parts: list[bytes] = []
        recs: list[_Rec] = []
        slot = pos
        word = (self._dt + pos * SLOT_SIZE) >> 2
        for key1, key2, gid, count, blob in items:
            length = base + len(key1) + len(blob)
            nslots = -(-length // SLOT_SIZE)
            hash1 = hash_(key1, seed, False) % elems
            hash2 = hash_(key2, seed, False) % elems
            g = (g + 1) & gmask  # each record its own barrier, as _store gives it
            b = tag | g
            # b1 stays invalid (as the free slot's) until the whole run is written.
            parts += (
                pack(inv, length, expire, inv, inv, hash1, hash2, inv, b,
                     strs_off, gid, count, length - _RECORD_HEAD.size),
                key1, pw, blob, pads[nslots * SLOT_SIZE - length],
            )  # fmt: skip
            recs.append(new(_Rec, (slot, nslots, length, key1, key2, hash1, hash2, word)))
            slot += nslots
            word += nslots * (SLOT_SIZE >> 2)
        data = b"".join(parts)
        if _FORGEABLE in data[3::SLOT_SIZE]:
            return False
        self._gen = g
        self._publish_run(pos, data, recs)
        return True

    def _passwd_field(self, passwd: str) -> bytes:
        pw = self._passwd_fields.get(passwd)
        if pw is None:
            pw = self._passwd_fields[passwd] = _cstr(passwd, "group passwd field")
        return pw

    def _store_group(
        self, name: str, gid: int, count: int, blob: bytes, passwd: str
    ) -> StoreResult:
        return self._store(*encode_group_item(name, gid, count, blob, self._passwd_field(passwd)))

    def store_group(
        self,
        group: Group,
        members: Sequence[str] | PackedMembers | None = None,
        *,
        passwd: str = "*",
    ) -> StoreResult:
        """``members`` defaults to ``group.members`` (direct members only); pass the nested
        expansion the socket reply carries."""
        return self.store(
            group.name, group.gid, group.members if members is None else members, passwd=passwd
        )

    def invalidate_name(self, name: str) -> bool:
        return self._invalidate_key(self._by1, name_key(name))

    def invalidate_gid(self, gid: int) -> bool:
        return self._invalidate_key(self._by2, id_key(gid))

    def holds_gid(self, gid: int) -> bool:
        """Whether the file holds a record of ``gid`` (the writer's own index). The key
        formatted here, not by ``id_key``: asked for every warm getgrgid, and an id out
        of range is simply not held."""
        return b"%d\0" % gid in self._by2


class InitgroupsWriter(McWriter):
    """``mc/initgroups``: hash1 = the raw name as the client asked, hash2 = canonical name.

    The client looks up by raw name only, so ``alice`` and ``ALICE`` are two records. A
    store supersedes every record with the same raw name or the same canonical name: other
    spellings of the user would otherwise keep serving the previous group list.
    """

    KIND = Kind.INITGR

    def store(self, name: str, unique_name: str, gids: Sequence[int] | bytes) -> StoreResult:
        """``gids``: ints, or packed native u32 (see ``encode_initgroups``)."""
        payload = encode_initgroups(name, unique_name, gids)
        return self._store(name_key(name), name_key(unique_name), payload)

    def invalidate_name(self, name: str) -> bool:
        """Drop the record for this raw name."""
        return self._invalidate_key(self._by1, name_key(name))

    def invalidate_user(self, unique_name: str) -> bool:
        """Drop the record of this canonical user, whatever spelling stored it."""
        return self._invalidate_key(self._by2, name_key(unique_name))
