"""The memory-cache file format, without I/O: constants, geometry, keys and payloads.

Everything here is reference §2.2 ("Layout") written as code, shared by the writer
(``mcfile.py``) and the reader (``reader.py``). All integers are host-endian (``=`` in
``struct``); the NSS client maps the file and reads it as native ``uint32_t``/``uint64_t``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from ..model import Kind
from .murmur import murmurhash3

__all__ = [
    "HEADER_SIZE",
    "INVALID32",
    "INVALID64",
    "MAJOR_VNO",
    "MINOR_VNO",
    "SLOTS_PER_MB",
    "SLOT_SIZE",
    "Geometry",
    "Kind",
    "PackedMembers",
    "Status",
    "check_members",
    "encode_group",
    "encode_group_item",
    "encode_group_keyed",
    "encode_initgroups",
    "encode_passwd",
    "id_key",
    "name_key",
    "next_barrier",
    "valid_barrier",
]

if sys.byteorder != "little":  # pragma: no cover - x86-64 / aarch64 only
    # The layout itself is host-endian and would be fine, but the memory-ordering argument in
    # mcfile.py (TSO) and the test vectors assume x86-64; refuse rather than guess.
    raise ImportError("cached.memcache supports little-endian hosts only")

#: 13 u32 header fields = 52 bytes, padded to 8 (``MC_HEADER_SIZE``).
HEADER_SIZE: Final = 56
#: Every record starts on a 40-byte slot and spans ceil(len/40) of them.
SLOT_SIZE: Final = 40
#: ``memcache_size_*`` is in MiB; SSSD turns it into slots as MB * (1 MiB / 40).
SLOTS_PER_MB: Final = 26214
MAJOR_VNO: Final = 1
MINOR_VNO: Final = 1
#: End of chain, empty bucket, and the fill of free space.
INVALID32: Final = 0xFFFFFFFF
INVALID64: Final = 0xFFFFFFFFFFFFFFFF

#: Header words: b1 major minor status seed dt_size ft_size ht_size dt ft ht reserved b2.
HEADER: Final = struct.Struct("=13I")
#: Record header: b1 len expire next1 next2 hash1 hash2 padding b2 (40 bytes).
REC_HEADER: Final = struct.Struct("=IIQIIIIII")
#: passwd/group payload prefix: name_off, uid|gid, gid|num_members, strs_len.
PW_GR_PREFIX: Final = struct.Struct("=4I")
#: initgroups payload prefix: unique_name_off, name_off, strs_off, strs_len, data_len, num_groups.
INITGR_PREFIX: Final = struct.Struct("=6I")

# Word (u32) indexes of header fields.
H_B1, H_MAJOR, H_MINOR, H_STATUS, H_SEED = 0, 1, 2, 3, 4
H_DT_SIZE, H_FT_SIZE, H_HT_SIZE, H_DT, H_FT, H_HT, H_RESERVED, H_B2 = range(5, 13)
# Word (u32) offsets of record header fields, relative to the record's first word.
R_B1, R_LEN, R_NEXT1, R_NEXT2, R_HASH1, R_HASH2, R_PADDING, R_B2 = 0, 1, 4, 5, 6, 7, 8, 9
#: Byte offset of the u64 ``expire`` inside a record.
R_EXPIRE_OFF: Final = 8


class Status(IntEnum):
    """Header ``status`` word (offset 12)."""

    UNINIT = 0
    ALIVE = 1
    RECYCLED = 2


# The three files libnss_sss reads, one per kind of object (``model.Kind``: its value is
# the file name under ``mc/``), and each one's default ``memcache_size_<kind>`` in MiB
# (§2.1).
_DEFAULT_MB: Final = {Kind.USER: 8, Kind.GROUP: 6, Kind.INITGR: 10}


def default_mb(kind: Kind) -> int:
    """Default ``memcache_size_<kind>`` in MiB (§2.1)."""
    return _DEFAULT_MB[kind]


def valid_barrier(value: int) -> bool:
    """A barrier word is valid iff its top byte is 0xf0 (§2.4)."""
    return (value & 0xFF000000) == 0xF0000000


def next_barrier(value: int) -> int:
    """The barrier value that follows ``value`` (``MC_NEXT_BARRIER``)."""
    return ((value + 1) & 0x00FFFFFF) | 0xF0000000


def _a8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True, slots=True)
class Geometry:
    """Sizes and offsets of one file. ``ht_elems`` is normally ``slots`` (§2.2)."""

    slots: int
    ht_elems: int

    def __post_init__(self) -> None:
        if self.slots < 8 or self.slots % 8:
            raise ValueError(f"slot count {self.slots} must be a positive multiple of 8")
        if self.ht_elems < 1:
            raise ValueError(f"hash table size {self.ht_elems} must be at least 1")
        if self.file_size > INVALID32:
            raise ValueError(
                f"{self.slots} slots make a {self.file_size}-byte file; the format's offsets "
                "are 32-bit, so the size must stay below 4 GiB"
            )

    @classmethod
    def from_mb(cls, mb: int) -> Geometry:
        """SSSD's sizing: slots = MB * 26214, rounded up to a multiple of 8 (§2.1)."""
        if mb <= 0:
            raise ValueError(f"memory-cache size {mb} MB must be positive (0 means disabled)")
        slots = mb * SLOTS_PER_MB
        return cls((slots + 7) & ~7, (slots + 7) & ~7)

    @classmethod
    def from_slots(cls, slots: int, ht_elems: int | None = None) -> Geometry:
        return cls(slots, slots if ht_elems is None else ht_elems)

    @property
    def dt_size(self) -> int:
        return self.slots * SLOT_SIZE

    @property
    def ft_size(self) -> int:
        return self.slots // 8

    @property
    def ht_size(self) -> int:
        return self.ht_elems * 4

    @property
    def data_table(self) -> int:
        return HEADER_SIZE

    @property
    def free_table(self) -> int:
        return self.data_table + _a8(self.dt_size)

    @property
    def hash_table(self) -> int:
        return self.free_table + _a8(self.ft_size)

    @property
    def file_size(self) -> int:
        return self.hash_table + _a8(self.ht_size)


# --- keys ------------------------------------------------------------------------------------


def _cstr(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if b"\0" in raw:
        raise ValueError(f"{what} {value!r} contains a NUL byte and cannot be stored")
    return raw + b"\0"


def name_key(name: str) -> bytes:
    """The hash1 key: the name as the client sends it, with its NUL (§2.3)."""
    return _cstr(name, "name")


def id_key(value: int) -> bytes:
    """The hash2 key of passwd/group records: decimal id plus NUL (``"10001\\0"``)."""
    return b"%d\0" % _u32(value, "id")


def bucket(key: bytes, seed: int, ht_elems: int) -> int:
    return murmurhash3(key, seed) % ht_elems


def _u32(value: int, what: str) -> int:
    if not 0 <= value <= INVALID32:
        raise ValueError(f"{what} {value} is outside 0..4294967295")
    return value


# --- payloads (§2.2) ------------------------------------------------------------------------

_STRS_OFF: Final = PW_GR_PREFIX.size  # name_off of passwd and group payloads = 16


def encode_passwd(
    name: str, passwd: str, uid: int, gid: int, gecos: str, home: str, shell: str
) -> bytes:
    """``name_off(16) uid gid strs_len`` then ``name\\0 passwd\\0 gecos\\0 dir\\0 shell\\0``."""
    strs = b"".join(
        (
            name_key(name),
            _cstr(passwd, "passwd field"),
            _cstr(gecos, "gecos"),
            _cstr(home, "home directory"),
            _cstr(shell, "shell"),
        )
    )
    prefix = PW_GR_PREFIX.pack(_STRS_OFF, _u32(uid, "uid"), _u32(gid, "gid"), len(strs))
    return prefix + strs


def check_members(blob: bytes, count: int) -> None:
    """Raise ValueError unless ``blob`` is exactly ``count`` NUL-terminated names."""
    if blob.count(b"\0") != count or (blob and blob[-1] != 0):
        raise ValueError(
            f"member blob of {len(blob)} bytes does not hold exactly {count} NUL-terminated names"
        )


@dataclass(frozen=True, slots=True)
class PackedMembers:
    """Group members already joined as ``m1\\0m2\\0…mn\\0`` (how the cache keeps them)."""

    blob: bytes
    count: int

    def __post_init__(self) -> None:
        check_members(self.blob, self.count)

    @classmethod
    def from_names(cls, names: Sequence[str]) -> PackedMembers:
        blob = b"".join(_cstr(n, "member name") for n in names)
        return cls(blob, len(names))


def encode_group(name: str, passwd: str, gid: int, members: PackedMembers) -> bytes:
    """``name_off(16) gid num_members strs_len`` then ``name\\0 passwd\\0 m1\\0 … mn\\0``."""
    pw = _cstr(passwd, "group passwd field")
    return encode_group_keyed(name_key(name), pw, gid, members.count, members.blob)


def encode_group_keyed(key: bytes, passwd: bytes, gid: int, count: int, blob: bytes) -> bytes:
    """:func:`encode_group` from the name's hash1 key (:func:`name_key`, which the writer
    computes anyway), the NUL-terminated passwd field and a checked member blob."""
    strs_len = len(key) + len(passwd) + len(blob)
    prefix = PW_GR_PREFIX.pack(_STRS_OFF, _u32(gid, "gid"), count, strs_len)
    return b"".join((prefix, key, passwd, blob))


def group_key(name: str, gid: int, count: int, blob: bytes) -> bytes:
    """``name_key(name)`` of a group whose gid is a u32 and whose ``blob`` holds exactly
    ``count`` names (:func:`check_members`), all checked at once (the responder's
    prefill checks 2,085 groups); raises what those functions raise."""
    key1 = name.encode("utf-8") + b"\0"
    if (
        key1.index(b"\0") != len(key1) - 1
        or not 0 <= gid <= INVALID32
        or blob.count(b"\0") != count
        or (blob and blob[-1])
    ):
        check_members(blob, count)  # each raises its own error
        name_key(name)
        _u32(gid, "id")
        raise AssertionError("unreachable")  # pragma: no cover
    return key1


def encode_group_item(
    name: str, gid: int, count: int, blob: bytes, passwd: bytes
) -> tuple[bytes, bytes, bytes]:
    """``(name_key(name), id_key(gid), encode_group_keyed(...))`` of a group whose
    ``blob`` must hold exactly ``count`` names (:func:`check_members`), checked and built
    in one call: the responder stores a user's 2,085 groups at once, and the five calls
    behind it were a third of the instructions of each store (valgrind, 13.8 K against
    9.2 K). ``passwd`` is NUL-terminated already. Raises what those functions raise."""
    key1 = group_key(name, gid, count, blob)
    strs_len = len(key1) + len(passwd) + len(blob)
    prefix = PW_GR_PREFIX.pack(_STRS_OFF, gid, count, strs_len)
    return key1, b"%d\0" % gid, b"".join((prefix, key1, passwd, blob))


def encode_initgroups(name: str, unique_name: str, gids: Sequence[int] | bytes) -> bytes:
    """§2.2 initgroups payload: prefix, the gids, then ``unique_name\\0 name\\0``.

    ``name`` is the raw name as the client asked (hash1 key), ``unique_name`` the canonical
    name (hash2 key). ``gids`` may be packed already (native u32, as the cache and the
    INITGR reply hold them): copied as they are instead of unpacked and packed again.
    """
    raw = name_key(name)
    unique = _cstr(unique_name, "unique name")
    if isinstance(gids, bytes):
        if len(gids) % 4:
            raise ValueError(f"packed gids are {len(gids)} bytes, not a multiple of 4")
        gid_bytes, n = gids, len(gids) // 4
    else:
        n = len(gids)
        try:
            gid_bytes = struct.pack(f"={n}I", *gids)
        except struct.error:
            bad = next(g for g in gids if not 0 <= g <= INVALID32)
            raise ValueError(f"gid {bad} is outside 0..4294967295") from None
    unique_off = INITGR_PREFIX.size + 4 * n
    strs_len = len(unique) + len(raw)
    prefix = INITGR_PREFIX.pack(
        unique_off,  # unique_name
        unique_off + len(unique),  # name
        unique_off,  # strs: both names, starting with unique_name
        strs_len,
        4 * n + strs_len,  # data_len: gids + names
        n,
    )
    return b"".join((prefix, gid_bytes, unique, raw))
