"""CPU time of processes (``/proc/<pid>/stat``) and sizes of store files.

``utime + stime`` of a process count all its threads, live and exited, so a
multi-threaded slapd or a backend with a worker pool is measured whole; the unit is the
clock tick (``SC_CLK_TCK``, 10 ms on Debian), which is the resolution of every CPU figure
in the report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    comm: str
    cpu: float  # seconds, user + system, all threads


def proc_info(pid: int) -> ProcInfo | None:
    """None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm is in parentheses and may itself contain spaces or parentheses.
    lpar, rpar = raw.index("("), raw.rindex(")")
    comm = raw[lpar + 1 : rpar]
    fields = raw[rpar + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15 (proc(5)).
    ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
    return ProcInfo(pid, ppid, comm, (utime + stime) / CLK_TCK)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of named processes; a process that is gone counts 0."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        info = proc_info(pid)
        out[name] = info.cpu if info else 0.0
    return out


def children(pid: int) -> list[ProcInfo]:
    """The live direct children of ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = proc_info(int(entry.name))
            if info is not None and info.ppid == pid:
                out.append(info)
    return sorted(out, key=lambda i: i.pid)


def pid_alive(pid: int) -> bool:
    return proc_info(pid) is not None


@dataclass(frozen=True)
class FileSize:
    apparent: int  # st_size
    allocated: int  # st_blocks * 512: what the (possibly sparse) file takes on disk


def file_sizes(directory: Path, names: Iterable[str] | None = None) -> dict[str, FileSize]:
    """Regular files directly in ``directory`` (or just ``names``), by name."""
    out: dict[str, FileSize] = {}
    if not directory.is_dir():
        return out
    for path in sorted(directory.iterdir()):
        if names is not None and path.name not in names:
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        if path.is_file():
            out[path.name] = FileSize(st.st_size, st.st_blocks * 512)
    return out


def terminate(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float,
              cont: bool = False) -> None:  # fmt: skip
    """End a child we started, by its pid: SIGTERM, then SIGKILL after ``timeout``.
    ``cont``: also SIGCONT it, since a stopped process keeps SIGTERM pending."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    if cont:
        proc.send_signal(signal.SIGCONT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def proc_kib(pid: int, field: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` memory field in KiB (VmRSS: now, VmHWM: peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"{field} of pid {pid}")


def gone(pid: int) -> bool:
    """The process is dead (a zombie waiting for its reaper counts as dead)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class MemorySampler:
    """VmRSS of some processes every ``interval`` seconds, on a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5) -> None:
        self.pids = pids
        self.interval = interval
        self.peak: dict[str, int] = dict.fromkeys(pids, 0)
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = {name: proc_kib(pid) for name, pid in self.pids.items()}
            self.samples.append(sample)
            for name, kib in sample.items():
                self.peak[name] = max(self.peak[name], kib)
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
