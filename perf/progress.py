"""A progress bar on stderr, with no dependency.

Work is counted in *estimated seconds*, not in steps: one cold ``id`` through SSSD
weighs as much as a thousand warm ones through cached, and a count of steps would give
a useless ETA. The estimate is corrected as the run goes (elapsed / estimated-done).
On a terminal the bar redraws in place; otherwise (``make bench`` in a log) one line is
printed at most every :data:`LOG_INTERVAL` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_INTERVAL = 15.0
WIDTH = 28


def _fmt(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, total: float, stream: TextIO | None = None) -> None:
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.tty = self.stream.isatty()
        self._last_log = 0.0
        self._label = ""

    def label(self, text: str) -> None:
        self._label = text
        self._draw()

    def advance(self, weight: float) -> None:
        self.done = min(self.total, self.done + weight)
        self._draw()

    def add_total(self, weight: float) -> None:
        self.total += weight

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        frac = self.done / self.total
        eta = elapsed * (1 - frac) / frac if frac > 0.02 else None
        filled = int(WIDTH * frac)
        bar = "#" * filled + "." * (WIDTH - filled)
        text = (
            f"[{bar}] {frac * 100:3.0f}% {_fmt(elapsed)}"
            f" eta {_fmt(eta) if eta is not None else '?'}  {self._label}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text[:160])
            self.stream.flush()
        elif force or now - self._last_log >= LOG_INTERVAL:
            self._last_log = now
            self.stream.write(text + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own above the bar."""
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._draw(force=not self.tty)

    def close(self) -> None:
        self.done = self.total
        self._draw(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
