"""Time one command from inside the client namespace: ``python -m perf.timecmd -- ARGV``.

The command's stdout and stderr pass through unchanged; one last stderr line
``PERF-TIMECMD {"wall": s, "user": s, "sys": s, "rc": n}`` carries the wall-clock time
from spawn to exit and the child's own CPU time (``wait4`` rusage), so that neither the
interpreter's start-up nor ``unshare``/``mount`` of the namespace wrapper is counted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

MARKER = "PERF-TIMECMD "


@dataclass(frozen=True)
class Timing:
    wall: float
    user: float
    sys: float
    rc: int

    @property
    def cpu(self) -> float:
        return self.user + self.sys


def run(argv: Sequence[str]) -> Timing:
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], list(argv), os.environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return Timing(wall, usage.ru_utime, usage.ru_stime, os.waitstatus_to_exitcode(status))


def parse(stderr: str) -> tuple[Timing | None, str]:
    """The timing line of a ``perf.timecmd`` run and the rest of its stderr."""
    timing = None
    rest = []
    for line in stderr.splitlines():
        if line.startswith(MARKER):
            timing = Timing(**json.loads(line[len(MARKER) :]))
        else:
            rest.append(line)
    return timing, "\n".join(rest)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m perf.timecmd -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    sys.stdout.flush()
    t = run(args)
    print(MARKER + json.dumps(t.__dict__), file=sys.stderr, flush=True)
    return t.rc if t.rc >= 0 else 128 - t.rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
