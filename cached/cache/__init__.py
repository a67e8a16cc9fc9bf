"""The split cache ("sysdb"): a durable entry store and a no-sync timestamp store."""

from cached.cache.cache import (
    DomainCache,
    GroupView,
    Initgroups,
    Lookup,
    Role,
    Timeouts,
    WriteBatch,
    WriteResult,
    cache_paths,
    open_domain_cache,
)
from cached.cache.expiry import State, classify
from cached.cache.records import Times
from cached.cache.store import StoreWriteError

__all__ = [
    "DomainCache",
    "GroupView",
    "Initgroups",
    "Lookup",
    "Role",
    "State",
    "StoreWriteError",
    "Timeouts",
    "Times",
    "WriteBatch",
    "WriteResult",
    "cache_paths",
    "classify",
    "open_domain_cache",
]
