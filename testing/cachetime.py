"""Time passing over a cache, for tests and perf/: every entry expired as its lifetime
running out expires it — not as ``cached cache -E`` does, which the backend treats
differently on AD (cached/ldap/validate.py ``distrusted``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cached.cache import records as rec
from cached.cache.cache import DomainCache
from cached.cache.store import Op

# A time long past that is not records.EXPIRED, the mark of an invalidation.
LONG_AGO = 2.0


def expire_all(cache: DomainCache) -> None:
    """Set every user's and group's expiries (data and initgroups) in the past,
    lastUpdate and stamps kept, in one write of the timestamp store. Safe beside a
    running daemon: LMDB serialises writers across processes."""
    ts = cache.ts
    assert ts is not None, "the timestamp store is not open"
    ops: list[Op] = []
    with ts.read() as txn:
        for table in ("users", "groups"):
            for k, v in txn.cursor(db=ts.tables[table]):
                t = rec.decode_times(v)
                t = dataclasses.replace(t, data_expire=LONG_AGO, initgr_expire=LONG_AGO)
                ops.append((table, bytes(k), rec.encode_times(t)))
    ts.write(ops)


def expire_daemon(db_dir: Path, domain: str = "LDAP") -> None:
    """:func:`expire_all` on a running daemon's cache of ``domain`` (perf/ scripts: the
    refresh that expiry starts, as opposed to ``cached cache -E``)."""
    cache = DomainCache(str(db_dir), domain)
    try:
        expire_all(cache)
    finally:
        cache.close()
