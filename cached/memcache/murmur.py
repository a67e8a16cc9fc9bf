"""MurmurHash3, x86 32-bit variant: the bucket hash of the memory cache (reference §2.3).

This is the standard algorithm (Austin Appleby's ``MurmurHash3_x86_32``): 4-byte blocks read
little-endian, the usual tail and finalisation. SSSD's ``murmurhash3()`` is the same function,
as are PyPI ``mmh3.hash(key, seed, signed=False)`` and ``pysss_murmur.murmurhash3``. The test
vectors in ``tests/unit/test_memcache.py`` were checked against ``mmh3``.

Keys are hashed *including* their trailing NUL, as the client does; that is the caller's job.
"""

from __future__ import annotations

import struct

__all__ = ["murmurhash3"]

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF


def murmurhash3(data: bytes, seed: int) -> int:
    """Return MurmurHash3_x86_32 of ``data`` with ``seed`` as an unsigned 32-bit int."""
    length = len(data)
    nblocks = length >> 2
    h = seed & _M32
    if nblocks:
        for (k,) in struct.iter_unpack("<I", data[: nblocks << 2]):
            k = (k * _C1) & _M32
            k = ((k << 15) | (k >> 17)) & _M32
            k = (k * _C2) & _M32
            h ^= k
            h = ((h << 13) | (h >> 19)) & _M32
            h = (h * 5 + 0xE6546B64) & _M32
    rest = length & 3
    if rest:
        tail = data[nblocks << 2 :]
        k = tail[0]
        if rest > 1:
            k |= tail[1] << 8
        if rest > 2:
            k |= tail[2] << 16
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h
