"""The administrator's tools: ``cached cache`` (sss_cache, ``cache.py``), ``cached status``
(``status.py``), ``cached perf`` (the id_perf breakdown, ``perf.py``).

They talk to a running daemon over its root-only control socket and work where no
D-Bus bus exists. ``cached cache`` also works when the daemon is stopped: it writes
the timestamp stores directly (reference §4: sss_cache opens the caches itself).
Imports are kept light on purpose: ``cached cache -E`` is meant to take well under
SSSD's 0.8 s (perf/README.md), and importing asyncio or ldap3 alone would cost a large
part of that; what only one path needs is imported on that path.
"""

from __future__ import annotations


class ToolError(Exception):
    """A failure to report to the administrator; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
