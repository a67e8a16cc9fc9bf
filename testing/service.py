"""What every server the harness starts shares (slapd, the Samba DC, ``cached serve``,
SSSD): ``with`` starts and stops it, and whatever is still running when the interpreter
exits is stopped, the last started first (a daemon before the directory it uses), so no
test run leaves a process behind."""

from __future__ import annotations

import atexit
import contextlib
from types import TracebackType
from typing import Self


class Service:
    """A process the harness runs: subclasses define :meth:`start` and :meth:`stop`, and
    call :meth:`_started` / :meth:`_stopped` once the process exists / is gone."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _started(self) -> None:
        _running[self] = None

    def _stopped(self) -> None:
        _running.pop(self, None)


_running: dict[Service, None] = {}  # an ordered set: start order


@atexit.register
def _stop_all() -> None:
    for service in reversed(list(_running)):
        # Best effort at interpreter exit: one failure must not keep the others running.
        with contextlib.suppress(Exception):
            service.stop()
