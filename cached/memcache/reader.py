"""A pure-Python reader of memory-cache files, following the NSS client's rules (§2.4, §2.5).

The product uses it for ``cached status`` (fill level, record count, consistency check of a
live file from another process); the tests use it to read back what the writer wrote.
Lookups do what ``libnss_sss`` does: hash the key with the file's seed, walk the chain while
the slot is inside the data table, copy each record under its barriers (5 tries), compare
``hash1`` + name or ``hash2`` + id. Unlike the client, which silently falls back to the
socket, the reader raises :class:`McFormatError` for anything the client would reject as
inconsistent, so tests see it.
"""

from __future__ import annotations

import mmap
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from ..model import GroupEntry, PasswdEntry
from .layout import (
    HEADER,
    HEADER_SIZE,
    INITGR_PREFIX,
    INVALID32,
    MAJOR_VNO,
    MINOR_VNO,
    PW_GR_PREFIX,
    REC_HEADER,
    SLOT_SIZE,
    Kind,
    Status,
    bucket,
    id_key,
    name_key,
    valid_barrier,
)

__all__ = [
    "InitgroupsEntry",
    "McFormatError",
    "McGroupEntry",
    "McHeader",
    "McPasswdEntry",
    "McReader",
    "McStats",
    "RawRecord",
]

#: The client gives up on a header or record after this many inconsistent copies.
_TRIES: Final = 5


class McFormatError(Exception):
    """The file or a record is not what a client would accept."""


@dataclass(frozen=True, slots=True)
class McHeader:
    major: int
    minor: int
    status: int
    seed: int
    dt_size: int
    ft_size: int
    ht_size: int
    data_table: int
    free_table: int
    hash_table: int

    @property
    def slots(self) -> int:
        return self.dt_size // SLOT_SIZE

    @property
    def ht_elems(self) -> int:
        return self.ht_size // 4


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record copied out of the data table; ``data`` is the payload."""

    slot: int
    length: int
    expire: int
    next1: int
    next2: int
    hash1: int
    hash2: int
    data: bytes

    @property
    def nslots(self) -> int:
        return -(-self.length // SLOT_SIZE)

    def next_with_hash(self, h: int) -> int:
        """The client's ``sss_nss_mc_next_slot_with_hash``."""
        if self.hash1 == h:
            return self.next1
        if self.hash2 == h:
            return self.next2
        return INVALID32


@dataclass(frozen=True, slots=True)
class McPasswdEntry(PasswdEntry):
    """A passwd record of the memory cache: the entry, its expiry and its first slot."""

    expire: int
    slot: int


@dataclass(frozen=True, slots=True)
class McGroupEntry(GroupEntry):
    """A group record of the memory cache: the entry, its expiry and its first slot."""

    expire: int
    slot: int


@dataclass(frozen=True, slots=True)
class InitgroupsEntry:
    name: str
    unique_name: str
    gids: tuple[int, ...]
    expire: int
    slot: int


Entry = McPasswdEntry | McGroupEntry | InitgroupsEntry


@dataclass(frozen=True, slots=True)
class McStats:
    """Fill level for ``cached status``."""

    kind: Kind
    status: Status
    slots: int
    used_slots: int
    records: int

    @property
    def fill(self) -> float:
        return self.used_slots / self.slots


def _strings(buf: bytes, count: int, what: str) -> tuple[str, ...]:
    parts = buf.split(b"\0")
    if len(parts) != count + 1 or parts[-1]:
        raise McFormatError(f"{what}: expected {count} NUL-terminated strings")
    try:
        return tuple(p.decode("utf-8") for p in parts[:-1])
    except UnicodeDecodeError as exc:
        raise McFormatError(f"{what}: not UTF-8: {exc}") from None


def _ident(entry: Entry) -> int:
    if isinstance(entry, PasswdEntry):
        return entry.uid
    if isinstance(entry, GroupEntry):
        return entry.gid
    raise ValueError("initgroups records have no id key")


class McReader:
    """Read one memory-cache file. ``kind`` defaults to the file's name."""

    def __init__(self, path: str | os.PathLike[str], kind: Kind | None = None) -> None:
        self.path: Final = Path(path)
        if kind is None:
            try:
                kind = Kind(self.path.name)
            except ValueError:
                raise ValueError(
                    f"cannot tell the kind of {self.path} from its name: pass kind="
                ) from None
        self.kind: Final = kind
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_SIZE:
                raise McFormatError(f"{self.path}: {size} bytes, shorter than the header")
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self.size: Final = size
        self.header: Final = self.read_header()
        h = self.header
        if (
            h.data_table + h.dt_size > size
            or h.hash_table + h.ht_size > size
            or h.free_table + h.ft_size > size
            or h.ht_size < 4
        ):
            raise McFormatError(f"{self.path}: tables outside the {size}-byte file")

    def close(self) -> None:
        self._mm.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- header --------------------------------------------------------------------------

    def read_header(self) -> McHeader:
        """Copy the header under its barriers, like the client (§2.5 step 3)."""
        for _ in range(_TRIES):
            w = HEADER.unpack_from(self._mm, 0)
            if valid_barrier(w[0]) and w[0] == w[12]:
                return McHeader(*w[1:11])
        raise McFormatError(f"{self.path}: header barriers inconsistent")

    def usable(self) -> bool:
        """Would the client use this file at all? (version 1.1, not RECYCLED)"""
        h = self.read_header()
        return h.major == MAJOR_VNO and h.minor == MINOR_VNO and h.status != Status.RECYCLED

    def _ht(self, h: int) -> int:
        (slot,) = struct.unpack_from("=I", self._mm, self.header.hash_table + 4 * h)
        return int(slot)

    def _nonempty_buckets(self) -> Iterator[int]:
        h = self.header
        table = array("I", self._mm[h.hash_table : h.hash_table + h.ht_size])
        return (b for b, slot in enumerate(table) if slot != INVALID32)

    # --- records -------------------------------------------------------------------------

    def get_record(self, slot: int) -> RawRecord:
        """Copy the record at ``slot`` under its barriers (``sss_nss_mc_get_record``)."""
        h = self.header
        base = h.data_table + slot * SLOT_SIZE
        mm = self._mm
        for _ in range(_TRIES):
            b1, length = struct.unpack_from("=II", mm, base)
            (b2,) = struct.unpack_from("=I", mm, base + 36)
            if not valid_barrier(b1) or b1 != b2:
                continue
            if length < HEADER_SIZE or length == INVALID32 or length > h.dt_size - slot * 40:
                raise McFormatError(f"{self.path}: slot {slot}: bad record length {length}")
            copy = mm[base : base + length]
            _, _, expire, next1, next2, hash1, hash2, _, copy_b2 = REC_HEADER.unpack_from(copy)
            if copy_b2 == b1:
                return RawRecord(slot, length, expire, next1, next2, hash1, hash2, copy[SLOT_SIZE:])
        raise McFormatError(f"{self.path}: slot {slot}: record barriers inconsistent")

    def _chain(self, h: int) -> Iterator[RawRecord]:
        slot = self._ht(h)
        seen = 0
        while slot < self.header.slots:
            rec = self.get_record(slot)
            yield rec
            slot = rec.next_with_hash(h)
            seen += 1
            if seen > self.header.slots:
                raise McFormatError(f"{self.path}: chain of bucket {h} loops")

    # --- decoding (with the client's integrity checks) -----------------------------------

    def decode(self, rec: RawRecord) -> Entry:
        d = rec.data
        where = f"{self.path}: slot {rec.slot}"
        if self.kind is Kind.INITGR:
            if len(d) < INITGR_PREFIX.size:
                raise McFormatError(f"{where}: short initgroups record")
            uniq_off, name_off, strs_off, strs_len, data_len, num = INITGR_PREFIX.unpack_from(d)
            if (
                name_off < INITGR_PREFIX.size
                or name_off >= strs_off + strs_len
                or strs_len > data_len
                or data_len > rec.length
                or strs_off + strs_len > len(d)
                or INITGR_PREFIX.size + 4 * num > strs_off
                or uniq_off != strs_off
            ):
                raise McFormatError(f"{where}: initgroups offsets inconsistent")
            gids = struct.unpack_from(f"={num}I", d, INITGR_PREFIX.size)
            unique, name = _strings(d[strs_off : strs_off + strs_len], 2, where)
            return InitgroupsEntry(name, unique, gids, rec.expire, rec.slot)
        if len(d) < PW_GR_PREFIX.size:
            raise McFormatError(f"{where}: short record")
        name_off, a, b, strs_len = PW_GR_PREFIX.unpack_from(d)
        strs_off = PW_GR_PREFIX.size
        if (
            name_off < strs_off
            or name_off >= strs_off + strs_len
            or strs_len > rec.length
            or strs_off + strs_len > len(d)
        ):
            raise McFormatError(f"{where}: string offsets inconsistent")
        strs = d[strs_off : strs_off + strs_len]
        if self.kind is Kind.USER:
            name, pw, gecos, home, shell = _strings(strs, 5, where)
            return McPasswdEntry(name, pw, a, b, gecos, home, shell, rec.expire, rec.slot)
        name, pw, *members = _strings(strs, b + 2, where)
        return McGroupEntry(name, pw, a, tuple(members), rec.expire, rec.slot)

    def keys(self, entry: Entry) -> tuple[bytes, bytes]:
        """The (hash1, hash2) keys the writer must have hashed for this entry."""
        if isinstance(entry, InitgroupsEntry):
            return name_key(entry.name), name_key(entry.unique_name)
        return name_key(entry.name), id_key(_ident(entry))

    # --- lookups (§2.5) ------------------------------------------------------------------

    def _bucket(self, key: bytes) -> int:
        return bucket(key, self.header.seed, self.header.ht_elems)

    def _lookup(self, key: bytes, by_name: bool, ident: int, now: float | None) -> Entry | None:
        if not self.usable():
            return None
        h = self._bucket(key)
        for rec in self._chain(h):
            if (rec.hash1 if by_name else rec.hash2) != h:
                continue
            entry = self.decode(rec)
            if entry.name == key[:-1].decode("utf-8") if by_name else _ident(entry) == ident:
                if now is not None and entry.expire < now:
                    return None  # the client returns EINVAL and asks the socket
                return entry
        return None

    def by_name(self, name: str, now: float | None = None) -> Entry | None:
        """Lookup by hash1 name (for initgroups: the raw name). ``now``: apply expiry."""
        return self._lookup(name_key(name), True, 0, now)

    def by_id(self, ident: int, now: float | None = None) -> Entry | None:
        """Lookup by uid (passwd) or gid (group), as getpwuid/getgrgid do."""
        if self.kind is Kind.INITGR:
            raise ValueError("initgroups records have no id key")
        return self._lookup(id_key(ident), False, ident, now)

    def passwd(self, key: str | int, now: float | None = None) -> McPasswdEntry | None:
        e = self.by_name(key, now) if isinstance(key, str) else self.by_id(key, now)
        assert e is None or isinstance(e, McPasswdEntry)
        return e

    def group(self, key: str | int, now: float | None = None) -> McGroupEntry | None:
        e = self.by_name(key, now) if isinstance(key, str) else self.by_id(key, now)
        assert e is None or isinstance(e, McGroupEntry)
        return e

    def initgroups(self, name: str, now: float | None = None) -> InitgroupsEntry | None:
        e = self.by_name(name, now)
        assert e is None or isinstance(e, InitgroupsEntry)
        return e

    # --- whole-file views ----------------------------------------------------------------

    def records(self) -> Iterator[RawRecord]:
        """Every record reachable through its hash1 chain, once each."""
        for h in self._nonempty_buckets():
            for rec in self._chain(h):
                if rec.hash1 == h:
                    yield rec

    def used_slots(self) -> int:
        h = self.header
        ft = self._mm[h.free_table : h.free_table + h.ft_size]
        return int.from_bytes(ft, "big").bit_count()

    def stats(self) -> McStats:
        h = self.read_header()
        return McStats(
            self.kind, Status(h.status), h.slots, self.used_slots(), sum(1 for _ in self.records())
        )

    def verify(self) -> list[str]:
        """Check every invariant the writer keeps; returns the problems found (none = [])."""
        problems: list[str] = []
        h = self.header
        if not self.usable():
            problems.append(f"header not usable: {h}")
        chains: dict[int, set[int]] = {}  # slot -> buckets whose chain reaches it
        recs: dict[int, RawRecord] = {}
        for b in self._nonempty_buckets():
            try:
                for rec in self._chain(b):
                    if b not in (rec.hash1, rec.hash2):
                        problems.append(f"slot {rec.slot} on chain {b} without that hash")
                    if b in chains.setdefault(rec.slot, set()):
                        problems.append(f"slot {rec.slot} twice on chain {b}")
                    chains[rec.slot].add(b)
                    recs[rec.slot] = rec
            except McFormatError as exc:
                problems.append(str(exc))
        used = bytearray(h.slots)
        for slot, rec in recs.items():
            if {rec.hash1, rec.hash2} != chains[slot]:
                problems.append(
                    f"slot {slot}: hashes {rec.hash1},{rec.hash2} "
                    f"but on chains {sorted(chains[slot])}"
                )
            try:
                entry = self.decode(rec)
            except McFormatError as exc:
                problems.append(str(exc))
                continue
            k1, k2 = self.keys(entry)
            if (self._bucket(k1), self._bucket(k2)) != (rec.hash1, rec.hash2):
                problems.append(f"slot {slot}: hashes do not match keys {k1!r} {k2!r}")
            if any(used[slot : slot + rec.nslots]):
                problems.append(f"slot {slot}: overlaps another record")
            used[slot : slot + rec.nslots] = b"\x01" * rec.nslots
            # Inside a record, no slot reads as a record's start (a client following a
            # stale next would take it for one: mcfile.py's module docstring).
            base = h.data_table + slot * SLOT_SIZE
            for k in range(1, rec.nslots):
                (word,) = struct.unpack_from("=I", self._mm, base + k * SLOT_SIZE)
                if valid_barrier(word):
                    problems.append(f"slot {slot + k}, inside the record at {slot}, "
                                    f"reads as a record's start ({word:#010x})")  # fmt: skip
        ft = self._mm[h.free_table : h.free_table + h.ft_size]
        expect = bytes(
            ((int.from_bytes(used[i : i + 8], "big") * 0x0102040810204080) >> 56) & 0xFF
            for i in range(0, h.slots, 8)
        )
        if ft != expect:
            bad = [i * 8 for i in range(len(ft)) if ft[i] != expect[i]]
            problems.append(f"free table differs from the records' spans at slots {bad[:10]}")
        free_fill = b"\xff" * SLOT_SIZE
        dt = self._mm[h.data_table : h.data_table + h.dt_size]
        s = used.find(0)
        while s >= 0:
            if dt[s * SLOT_SIZE : (s + 1) * SLOT_SIZE] != free_fill:
                problems.append(f"slot {s}: free but not 0xFF")
            s = used.find(0, s + 1)
        return problems
