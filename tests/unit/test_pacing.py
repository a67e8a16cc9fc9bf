"""The pace of background requests' searches (cached/ldap/pacing.py): pure logic, on a
virtual clock (the pace against a real slapd is tests/integration/test_refresh_ahead.py)."""

from __future__ import annotations

import threading

from cached.ldap.pacing import Pacer


class _Clock:
    """A clock that moves only when the pacer waits (Event.wait replaced)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pacer(rate: float) -> tuple[Pacer, _Clock, list[float]]:
    clock = _Clock()
    p = Pacer(rate, clock)
    waits: list[float] = []

    class _Hurry(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if self.is_set():
                return True
            assert timeout is not None
            waits.append(timeout)
            clock.now += timeout
            return False

    p.hurry = _Hurry()
    return p, clock, waits


def test_background_searches_go_at_the_rate() -> None:
    p, clock, _ = _pacer(2.0)
    p.begin(True)
    sent = []
    for _ in range(6):
        p.wait()
        sent.append(clock.now)
    # One at once, then one every half second: 6 searches over 2.5 s, at most 2 in
    # any second.
    assert sent == [100.0, 100.5, 101.0, 101.5, 102.0, 102.5]
    # A pause longer than the interval: the next goes at once (no burst saved up).
    clock.now += 10.0
    assert p.wait() == 0.0
    assert p.wait() == 0.5


def test_a_clients_request_is_never_paced() -> None:
    p, clock, waits = _pacer(2.0)
    p.begin(False)
    for _ in range(6):
        assert p.wait() == 0.0
    assert waits == [] and clock.now == 100.0


def test_a_waiting_client_hurries_the_paced_request() -> None:
    p, clock, _ = _pacer(2.0)
    p.begin(True)
    p.wait()
    assert p.paced
    p.hurry.set()  # a client's request queued meanwhile
    assert not p.paced
    assert [p.wait() for _ in range(4)] == [0.0] * 4
    assert clock.now == 100.0
    # The next background request is paced again.
    p.begin(True)
    assert p.paced
