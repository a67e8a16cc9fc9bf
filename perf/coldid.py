"""Cold ``id bigroupuser`` end to end, with and without slapd's deref overlay: glibc +
the real libnss_sss, a fresh ``cached serve`` and an empty cache per repetition, socket
only. Prints, per repetition, ``id``'s own wall time (perf.timecmd: the namespace set-up
is not counted), the CPU of cached's processes + slapd, the logical searches in slapd's
log (root DSE reads left out) and whether the answer is exact; then the medians.
With ``--group large01``: cold ``getent group large01`` instead of ``id``.

    python -m perf.coldid [--reps 3] [--group NAME] [--deref both|yes|no]

Built to compare checkouts on a shared machine: run it alternately from each
(``cd checkout && PYTHONPATH=. python -m perf.coldid``) and compare medians; the CPU
figures move far less with other people's load than the wall times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

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
    args = ap.parse_args(argv)
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
    runs: dict[bool, list[tuple[float, float, int]]] = {d: [] for d in derefs}
    with tempfile.TemporaryDirectory(prefix="coldid-", dir="/tmp") as tmp:
        for deref in derefs:
            with Slapd(Path(tmp) / f"slapd-{deref}", gen.ldif, sc.base_dn, deref=deref) as server:
                for i in range(args.reps):
                    work = Path(tmp) / f"cached-{deref}-{i}"
                    with CachedDaemon(work, [server.uri], server.base_dn) as d:
                        pids = {"cached": d.pid, "slapd": server.pid or 0}

                        def cpu(d: CachedDaemon = d, pids: dict[str, int] = pids) -> float:
                            kids = {f"{x.comm}.{x.pid}": x.pid for x in procstat.children(d.pid)}
                            return sum(procstat.cpu_seconds({**pids, **kids}).values())

                        d.run_nss(["true"], env=SOCKET_ONLY, timeout=600)  # namespace warm
                        offset, cpu0 = server.log_offset(), cpu()
                        start = time.perf_counter()
                        r = d.run_nss([*TIMECMD, *cmd], env=SOCKET_ONLY, timeout=1800)
                        wall = time.perf_counter() - start
                        timing = parse(r.stderr)[0]
                        row = (timing.wall if timing else wall, cpu() - cpu0,
                               _searches(server, offset))  # fmt: skip
                        runs[deref].append(row)
                        print(
                            f"deref={deref} rep={i} {cmd[0]}_wall={row[0]:.3f}"
                            f" cpu={row[1]:.3f} searches={row[2]} exact={exact(r.stdout)}",
                            flush=True,
                        )
    for deref, rows in runs.items():
        walls, cpus, searches = zip(*rows, strict=True)
        print(
            f"deref={deref} median of {len(rows)}: {cmd[0]}_wall={statistics.median(walls):.3f}"
            f" cpu={statistics.median(cpus):.3f} searches={statistics.median(searches):g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
