"""The responder's negative cache (pure logic)."""

from __future__ import annotations

from cached.responder.flow import NegativeCache


def test_negative_cache_is_swept_and_bounded():
    now = [0.0]
    neg = NegativeCache(10, clock=lambda: now[0])
    for i in range(100):
        neg.add("D", ("user", "name", f"u{i}"))
    assert len(neg) == 100 and neg.hit("D", ("user", "name", "u1"))
    now[0] = 11.0  # all expired; the next add sweeps them
    neg.add("D", ("user", "name", "late"))
    assert len(neg) == 1
    neg.MAX_ENTRIES = 5
    for i in range(7):
        neg.add("D", ("user", "name", f"v{i}"))
    assert len(neg) <= 5
