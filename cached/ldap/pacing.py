"""The pace of the background's searches: at most a few a second.

A refresh-ahead run revalidates a user's groups with one request, the walk by change
stamps: ~6 searches, which the connection sends within a fraction of a second. A fleet
whose entries were filled together revalidates together; a second in which seven
hosts' runs begin then carries 42 searches (the 200-host fleet's busiest second in an
expiry wave, 21 per 100 hosts). Holding a background request's searches to
``rate`` a second spreads one host's revalidation over a few seconds, so that the
hosts' runs overlap instead of piling into one second.

Only background requests are paced (the backend sets :attr:`Pacer.active` while one
runs). A client's request never waits on the pace: one asked for while a paced
request holds the worker thread sets :attr:`Pacer.hurry`, and the rest of that request
goes at full speed, so the client waits behind at most one unpaced background request,
as it did before there was a pace.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Pacer:
    """At most ``rate`` searches a second while :attr:`active`: each search waits
    until ``1 / rate`` seconds after the previous one (one at once after a pause, no
    bursts). :meth:`wait` runs in the worker thread, before each logical search; the
    later pages of a paged search are not paced (the server holds its paging state
    meanwhile)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = 1.0 / rate
        self.clock = clock
        self.active = False
        # Set from the event loop when a client's request waits for the worker.
        self.hurry = threading.Event()
        self._next = -math.inf

    def begin(self, active: bool) -> None:
        """A request starts on the worker: paced or not (a client's)."""
        self.hurry.clear()
        self.active = active

    @property
    def paced(self) -> bool:
        return self.active and not self.hurry.is_set()

    def wait(self) -> float:
        """Wait for this search's turn while paced; the seconds waited."""
        if not self.active:
            return 0.0
        start = self.clock()
        while not self.hurry.is_set():
            left = self._next - self.clock()
            if left <= 0:
                break
            self.hurry.wait(left)
        now = self.clock()
        self._next = max(self._next, now) + self.interval
        return now - start
