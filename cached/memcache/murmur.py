"""MurmurHash3, x86 32-bit variant: the bucket hash of the memory cache (reference §2.3).

SSSD's ``murmurhash3()`` is Austin Appleby's ``MurmurHash3_x86_32``, as are PyPI
``mmh3.hash(key, seed, signed=False)`` and ``pysss_murmur.murmurhash3``. cached calls
``mmh3`` (C): the pure-Python function it replaced took 2.2 µs per key against 0.07 µs,
a quarter of storing a group record, and `id` after `cached cache -E` stores 2,085 of
them with two keys each (perf/results/2026-12-01-bigroupuser). The test vectors in
``tests/unit/test_memcache.py`` pin it to the values SSSD's client computes.

Keys are hashed *including* their trailing NUL, as the client does; that is the caller's job.
"""

from __future__ import annotations

import mmh3

__all__ = ["hash32", "murmurhash3"]


def murmurhash3(data: bytes, seed: int) -> int:
    """Return MurmurHash3_x86_32 of ``data`` with ``seed`` as an unsigned 32-bit int."""
    return mmh3.hash(data, seed & 0xFFFFFFFF, signed=False)


#: :func:`murmurhash3` for a seed known to fit 32 bits (a memory-cache file's), called as
#: ``hash32(key, seed, False)``: without the Python call around it, 0.15 µs a key against
#: 0.43 (timeit), and the prefill of bigroupuser's groups hashes 4,170 keys.
hash32 = mmh3.hash
