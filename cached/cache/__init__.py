"""The split cache ("sysdb"): a durable entry store and a no-sync timestamp store.

As in SSSD's sysdb, three parts: ``integrity`` (check and repair when the backend opens
the files), ``cache`` (:class:`DomainCache`: reading, nesting expanded, and invalidation)
and ``writer`` (:class:`~cached.cache.writer.BackendCache`, a DomainCache that writes:
the backend's alone, imported from ``cached.cache.writer`` and not re-exported here).
"""

from cached.cache.cache import (
    DamagedStore,
    DomainCache,
    GroupView,
    Initgroups,
    Lookup,
    Timeouts,
    open_domain_cache,
)
from cached.cache.expiry import State, classify
from cached.cache.integrity import cache_paths
from cached.cache.records import Times
from cached.cache.store import StoreWriteError

__all__ = [
    "DamagedStore",
    "DomainCache",
    "GroupView",
    "Initgroups",
    "Lookup",
    "State",
    "StoreWriteError",
    "Timeouts",
    "Times",
    "cache_paths",
    "classify",
    "open_domain_cache",
]
