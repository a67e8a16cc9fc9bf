"""Time passing over a cache, for tests and perf/: every entry expired as its lifetime
running out expires it — not as ``cached cache -E`` does, which the backend treats
differently on AD (cached/ldap/stamps.py ``distrusted``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cached.cache import records as rec
from cached.cache.cache import READ_WHOLE, DomainCache
from cached.cache.store import Op


def _back(t: float, seconds: float) -> float:
    """A stored time ``seconds`` earlier; 0 (never) and records.EXPIRED (the mark of an
    invalidation) are marks, not times, and stay."""
    return t if t <= rec.EXPIRED else t - seconds


def age(cache: DomainCache, seconds: float) -> None:
    """Every time the timestamp store keeps, ``seconds`` earlier — lastUpdate, the
    expiries, when each group was last read whole — as if that much time had passed
    since; the stamps kept. One write; safe beside a running daemon (LMDB serialises
    writers across processes)."""
    ts = cache.ts
    assert ts is not None, "the timestamp store is not open"
    ops: list[Op] = []
    with ts.read() as txn:
        for table in ("users", "groups"):
            for k, v in txn.cursor(db=ts.tables[table]):
                t = rec.decode_times(v)
                t = dataclasses.replace(
                    t,
                    last_update=_back(t.last_update, seconds),
                    data_expire=_back(t.data_expire, seconds),
                    initgr_expire=_back(t.initgr_expire, seconds),
                )
                ops.append((table, bytes(k), rec.encode_times(t)))
        for k, v in txn.cursor(db=ts.tables["read_whole"]):
            (when,) = READ_WHOLE.unpack(v)
            ops.append(("read_whole", bytes(k), READ_WHOLE.pack(when - seconds)))
    ts.write(ops)


def expire_all(cache: DomainCache) -> None:
    """Age the cache by the longer of its entries' lifetimes (and a second): every
    user and group stored so far has expired, as it would have by then."""
    age(cache, max(cache.timeouts.user, cache.timeouts.group) + 1.0)


def expire_daemon(db_dir: Path, domain: str = "LDAP") -> None:
    """:func:`expire_all` on a running daemon's cache of ``domain`` with the default
    lifetimes (perf/ scripts: the refresh that expiry starts, as opposed to ``cached
    cache -E``)."""
    cache = DomainCache(str(db_dir), domain)
    try:
        expire_all(cache)
    finally:
        cache.close()
