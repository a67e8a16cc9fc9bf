"""Rate-limited logging: what any local user or any directory entry can trigger is
logged at most once per ``interval`` per kind, with the number of times it was left out.

Measured without it: one bad entry asked for in a loop by an
unprivileged user wrote 15 MB of tracebacks in 10 s, and refused connections wrote
15,000 warnings in 10 s. A log line must cost the attacker more than it costs us, so
each *kind* of event (a refused uid, a failing request, a skipped entry) logs its first
occurrence with full detail and then one summary line per interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

# One line per kind per minute: short enough that an administrator watching the log
# sees an attack continue, long enough that it cannot fill a disk (about 1,440 lines
# a day per kind).
DEFAULT_INTERVAL = 60.0
# Kinds are bounded: a client choosing new kinds (new names) cannot grow the table.
MAX_KINDS = 1024


class RateLimitedLog:
    """``log(kind, level, msg, *args)``: logs now, or counts it as suppressed."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        # kind -> (time of the last line logged, occurrences suppressed since)
        self._kinds: dict[Hashable, tuple[float, int]] = {}
        self.suppressed_total = 0
        # Kinds whose traceback was logged once already: later lines are one line each.
        self._traced: set[Hashable] = set()

    def allow(self, kind: Hashable) -> tuple[bool, int]:
        """(log it now?, how many of this kind were suppressed before it)."""
        now = self.clock()
        last = self._kinds.get(kind)
        if last is not None and now - last[0] < self.interval:
            self._kinds[kind] = (last[0], last[1] + 1)
            self.suppressed_total += 1
            return False, 0
        if last is None and len(self._kinds) >= MAX_KINDS:
            # Forget the old kinds rather than grow: at worst one more line each.
            self._kinds = {k: v for k, v in self._kinds.items() if now - v[0] < self.interval}
            if len(self._kinds) >= MAX_KINDS:
                self._kinds.clear()
        self._kinds[kind] = (now, 0)
        return True, 0 if last is None else last[1]

    def log(self, kind: Hashable, level: int, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Log ``msg`` unless this kind was logged within the interval. Returns whether
        it was logged. Only the first line of a kind carries a traceback."""
        ok, skipped = self.allow(kind)
        if not ok:
            return False
        if skipped:
            msg += " (%d more like this in the last %.0f s not logged)"
            args = (*args, skipped, self.interval)
        first = kind not in self._traced
        self.logger.log(level, msg, *args, exc_info=exc_info and first)
        if exc_info and first:
            if len(self._traced) >= MAX_KINDS:
                self._traced.clear()
            self._traced.add(kind)
        return True
