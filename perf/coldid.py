"""Cold ``id bigroupuser`` end to end, with and without slapd's deref overlay: glibc +
the real libnss_sss, a fresh ``cached serve`` and an empty cache per repetition, socket
only. Prints, per repetition, ``id``'s own wall time (perf.timecmd: the namespace set-up
is not counted), the CPU of cached's processes + slapd, the logical searches in slapd's
log (root DSE reads left out) and whether the answer is exact; then the medians.
With ``--group large01``: cold ``getent group large01`` instead of ``id``.

Each row also splits the CPU between the backend, the responder and slapd (``be``,
``rsp``, ``slapd``): the cached processes from ``/proc/<pid>/task/*/schedstat``
(nanoseconds, where ``/proc/<pid>/stat`` counts 10 ms ticks, coarser than the
responder's share), slapd from ``/proc/<pid>/stat`` (threads that exit are counted).
``--memcache``: the client reads the memory cache (production), where by default it
uses the socket only, as SSSD's comparisons do; perf.run's cold ``id`` is
``--memcache --log-level info``.

    python -m perf.coldid [--reps 3] [--group NAME] [--deref both|yes|no] [--memcache]
                          [--log-level debug|info|...]

Built to compare checkouts on a shared machine: run it alternately from each
(``cd checkout && PYTHONPATH=. python -m perf.coldid``) and compare medians; the CPU
figures move far less with other people's load than the wall times.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.cnpeople import DATA_DIR, SOCKET_ONLY, _gids, _searches
from perf.targets import TIMECMD
from perf.timecmd import parse
from testing import gendir, nsenv, procstat
from testing.daemon import CachedDaemon
from testing.slapd import Slapd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.coldid", description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--group", help="cold `getent group NAME` instead of `id bigroupuser`")
    ap.add_argument(
        "--deref",
        choices=("both", "yes", "no"),
        default="both",
        help="slapd with the deref overlay, without, or both (default)",
    )
    ap.add_argument(
        "--memcache",
        action="store_true",
        help="the client reads the memory cache (default: socket only)",
    )
    ap.add_argument(
        "--log-level",
        default="debug",
        help="cached's log level (default debug, as before; perf/targets.py runs info)",
    )
    args = ap.parse_args(argv)
    env: dict[str, Any] = {} if args.memcache else SOCKET_ONLY
    reason = nsenv.skip_reason()
    if reason:
        print(f"perf.coldid: {reason}", file=sys.stderr)
        return 2
    sc = gendir.BIGROUPUSER
    gen = gendir.generate(sc, DATA_DIR, reuse=True)
    exp = gen.expected()
    if args.group:
        cmd = ["getent", "group", args.group]
        want_members = exp.members(args.group, 2)

        def exact(out: str) -> bool:
            fields = out.strip().split(":")
            return len(fields) == 4 and set(filter(None, fields[3].split(","))) == want_members
    else:
        cmd = ["id", exp.big_user]
        want = exp.initgroups(exp.big_user, 2)

        def exact(out: str) -> bool:
            return _gids(out) == want

    derefs = {"both": (True, False), "yes": (True,), "no": (False,)}[args.deref]
    runs: dict[bool, list[Row]] = {d: [] for d in derefs}
    with tempfile.TemporaryDirectory(prefix="coldid-", dir="/tmp") as tmp:
        for deref in derefs:
            with Slapd(Path(tmp) / f"slapd-{deref}", gen.ldif, sc.base_dn, deref=deref) as server:
                for i in range(args.reps):
                    work = Path(tmp) / f"cached-{deref}-{i}"
                    row, out = cold_once(server, work, cmd, env, args.log_level)
                    runs[deref].append(row)
                    print(
                        f"deref={deref} rep={i} {cmd[0]}_wall={row[0]:.3f}"
                        f" cpu={row[1]:.3f} {_fmt(row[3])} searches={row[2]}"
                        f" exact={exact(out)}",
                        flush=True,
                    )
    for deref, rows in runs.items():
        walls, cpus, searches, splits = zip(*rows, strict=True)
        med = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
        print(
            f"deref={deref} median of {len(rows)}: {cmd[0]}_wall={statistics.median(walls):.3f}"
            f" cpu={statistics.median(cpus):.3f} {_fmt(med)}"
            f" searches={statistics.median(searches):g}"
        )
    return 0


Row = tuple[float, float, int, dict[str, float]]  # wall, CPU, searches, CPU by role


def cold_once(
    server: Slapd, work: Path, cmd: list[str], env: dict[str, Any], log_level: str
) -> tuple[Row, str]:
    """``cmd`` once through glibc and libnss_sss, against a fresh ``cached serve`` with
    an empty cache in ``work``: its wall time (perf.timecmd), the CPU of cached's
    processes and slapd, slapd's logical searches and the CPU by role; and its stdout."""
    with CachedDaemon(work, [server.uri], server.base_dn, log_level=log_level) as d:
        pids = {"cached": d.pid, "slapd": server.pid or 0}

        def cpu() -> float:
            kids = {f"{x.comm}.{x.pid}": x.pid for x in procstat.children(d.pid)}
            return sum(procstat.cpu_seconds({**pids, **kids}).values())

        d.run_nss(["true"], env=env, timeout=600)  # namespace warm
        roles = _roles(d.pid, server.pid or 0)
        offset, cpu0, split0 = server.log_offset(), cpu(), _split(roles)
        start = time.perf_counter()
        r = d.run_nss([*TIMECMD, *cmd], env=env, timeout=1800)
        wall = time.perf_counter() - start
        timing = parse(r.stderr)[0]
        split = {k: v - split0[k] for k, v in _split(roles).items()}
        row = (timing.wall if timing else wall, cpu() - cpu0, _searches(server, offset), split)
        return row, r.stdout


def _roles(monitor: int, slapd: int) -> dict[str, int]:
    """pid of the backend, the responder and slapd."""
    out = {"slapd": slapd}
    for kid in procstat.children(monitor):
        argv = Path(f"/proc/{kid.pid}/cmdline").read_bytes().split(b"\0")
        if b"_responder" in argv:
            out["rsp"] = kid.pid
        elif b"_backend" in argv:
            out["be"] = kid.pid
    return out


def _split(roles: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each role: its live threads' schedstat (ns) for cached's
    processes, /proc/<pid>/stat for slapd, whose worker threads come and go."""
    out = {}
    for role, pid in roles.items():
        if role == "slapd":
            out[role] = procstat.cpu_seconds({role: pid})[role]
            continue
        ns = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):  # a thread that just ended
                ns += int((task / "schedstat").read_text().split()[0])
        out[role] = ns / 1e9
    return out


def _fmt(split: dict[str, float]) -> str:
    return " ".join(f"{k}={split[k]:.3f}" for k in ("be", "rsp", "slapd") if k in split)


if __name__ == "__main__":
    sys.exit(main())
