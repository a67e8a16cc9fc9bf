"""Expiry classification of a cached entry (reference §6.4, SSSD's cache_req).

Pure logic: the caller passes the clock.
"""

from __future__ import annotations

import enum
import math

# Reference §6.4: the midpoint is lastUpdate + (expire - lastUpdate) * p / 100, but
# never earlier than 10 s after lastUpdate, so a burst of lookups right after a
# refresh does not start another one.
MIDPOINT_MIN_SECONDS = 10.0


class State(enum.Enum):
    VALID = "valid"  # answer from the cache
    MIDPOINT = "midpoint"  # answer from the cache now, refresh in the background
    EXPIRED = "expired"  # ask the backend, wait, answer from the cache
    MISSING = "missing"  # not cached at all


def classify(last_update: float, expire: float, now: float, nowait_percentage: int) -> State:
    """Classify an entry that exists in the entry store.

    ``expire`` of 0 means no timestamp record (the store was rebuilt, or the entry
    was never refreshed): expired, never missing — losing the timestamp store loses
    no data (docs/ARCHITECTURE.md, invariant 3).
    """
    if expire <= now:
        return State.EXPIRED
    mid = midpoint(last_update, expire, nowait_percentage)
    return State.VALID if mid >= now else State.MIDPOINT


def midpoint(last_update: float, expire: float, nowait_percentage: int) -> float:
    """When an unexpired entry stops being VALID and becomes MIDPOINT (infinity when
    ``nowait_percentage`` is 0: it stays VALID until it expires)."""
    if nowait_percentage <= 0:
        return math.inf
    mid = last_update + (expire - last_update) * nowait_percentage / 100.0
    return max(mid, last_update + MIDPOINT_MIN_SECONDS)
