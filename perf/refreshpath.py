"""The backend's part of `id bigroupuser` after `cached cache -E`, nothing changed on
the server: getpwnam, initgroups (validation by stamps, cached/ldap/validate.py) and
getgrgid of the user's primary group when still expired, through the provider alone.
Wall, our CPU and slapd's CPU per round.

    python -m perf.refreshpath OUTDIR [--rounds 15] [--profile FILE]
    python -m perf.refreshpath OUTDIR --ab OTHER_CHECKOUT [--rounds 40]

``--ab`` compares this checkout (A) with another (B) on a shared machine: one slapd,
one backend process per checkout (its ``cached`` first on the path, this script's
``--serve`` mode), and the rounds alternate A, B, A, B … so that both see the same
load. It prints each one's median and minimum CPU (``time.process_time``, which the
load of others moves far less than wall time) and the median of the paired ratios B/A.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from cached.cache import State
from cached.counters import Counters
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.gendir import BIGROUPUSER, generate
from testing.procstat import proc_info
from testing.slapd import Slapd

USER = BIGROUPUSER.big_user
_RUN_FILE = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


class Rounds:
    """A backend with its own cache, bigroupuser resolved cold; ``round()`` is one
    `cached cache -E` and what `id` then asks of the backend."""

    def __init__(self, db: Path, uri: str, base: str) -> None:
        self.counters = Counters()
        self.p, self.cache, _ = make_backend(db, make_domain([uri], base), self.counters)
        assert self.p.initgroups(USER).outcome is Outcome.FOUND  # cold
        u = self.cache.user_by_name(USER).value
        assert u is not None
        self.gid = u.gid
        # The daemon's backend holds no model of the directory: keep the caller's
        # (gen, exp) out of the collector's work, as it is out of the daemon's.
        gc.collect()
        gc.freeze()

    def round(self, prof: cProfile.Profile | None = None) -> tuple[float, float]:
        p, cache = self.p, self.cache
        cache.invalidate_all()  # `cached cache -E`
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        # What `id` asks of the backend after -E: the user, its primary group (id
        # prints it first), its groups.
        outcomes = [p.user_by_name(USER).outcome]
        if cache.group_by_gid(self.gid).state is not State.VALID:
            outcomes.append(p.group_by_gid(self.gid).outcome)
        outcomes.append(p.initgroups(USER).outcome)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert set(outcomes) == {Outcome.FOUND}, outcomes
        return wall, cpu

    def close(self) -> None:
        self.p.client.close()
        self.cache.close()


def serve(args: argparse.Namespace) -> None:
    """One round per line on stdin, one JSON line out: the --ab driver's worker."""
    r = Rounds(args.outdir, args.uri, args.base)
    print("ready", flush=True)
    for _ in sys.stdin:
        wall, cpu = r.round()
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)
    r.close()


def _ask(proc: subprocess.Popen[str]) -> dict[str, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"worker {proc.pid} ended")
    out: dict[str, float] = json.loads(line)
    return out


def ab(args: argparse.Namespace, s: Slapd) -> None:
    here = Path(__file__).resolve()
    variants = {"A": here.parent.parent, "B": args.ab.resolve()}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for v, repo in variants.items():
            env = {**os.environ, "PYTHONPATH": str(repo)}
            # Run as a file, not as a module of this checkout, with the other
            # checkout's directory (cwd) first on the path and not perf/.
            cmd = [sys.executable, "-c", _RUN_FILE, str(here), str(args.outdir / f"db-{v}"),
                   "--serve", "--uri", s.uri, "--base", s.base_dn]  # fmt: skip
            proc = subprocess.Popen(cmd, cwd=repo, env=env, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
            procs[v] = proc
            out: IO[str] | None = proc.stdout
            assert out is not None and out.readline().strip() == "ready"
        samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for i in range(args.rounds + 1):
            order = ("A", "B") if i % 2 else ("B", "A")
            got = {v: _ask(procs[v]) for v in order}
            if i:  # round 0 warms slapd's caches
                for v in variants:
                    samples[v].append(got[v])
        for v, repo in variants.items():
            cpus = [x["cpu"] for x in samples[v]]
            walls = [x["wall"] for x in samples[v]]
            print(f"{v} {repo}: cpu median {statistics.median(cpus) * 1000:.1f} ms, "
                  f"min {min(cpus) * 1000:.1f} ms; wall median "
                  f"{statistics.median(walls) * 1000:.1f} ms")  # fmt: skip
        for what in ("cpu", "wall"):
            pairs = zip(samples["A"], samples["B"], strict=True)
            ratios = [b[what] / a[what] for a, b in pairs]
            print(f"paired {what} ratio B/A: median {statistics.median(ratios):.3f} "
                  f"over {len(ratios)} rounds")  # fmt: skip
    finally:
        for proc in procs.values():
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, help="a new directory for the data, slapd and caches")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--profile", type=Path, help="write a cProfile of one extra round here")
    ap.add_argument("--ab", type=Path, help="another checkout to compare with, round by round")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args)
        return
    args.outdir.mkdir(parents=True)
    gen = generate(BIGROUPUSER.with_schema("rfc2307bis"), args.outdir / "gen")
    exp = gen.expected()
    with Slapd(args.outdir / "slapd", gen.ldif, exp.base_dn) as s:
        assert s.pid is not None
        if args.ab:
            ab(args, s)
            return
        walls: list[float] = []
        cpus: list[float] = []
        slapd_cpus: list[float] = []
        r = Rounds(args.outdir / "db", s.uri, s.base_dn)
        prof: Any = None
        try:
            for i in range(args.rounds + 1 + bool(args.profile)):
                last = bool(args.profile) and i == args.rounds + 1
                prof = cProfile.Profile(time.process_time) if last else None
                before = proc_info(s.pid)
                wall, cpu = r.round(prof)
                after = proc_info(s.pid)
                if 0 < i <= args.rounds:  # round 0 warms slapd's caches
                    walls.append(wall)
                    cpus.append(cpu)
                    if before and after:
                        slapd_cpus.append(after.cpu - before.cpu)
        finally:
            r.close()
    print(
        f"rounds {len(walls)}  median: wall {statistics.median(walls) * 1000:.1f} ms, "
        f"cpu {statistics.median(cpus) * 1000:.1f} ms, "
        f"slapd cpu {statistics.median(slapd_cpus) * 1000:.0f} ms"
        f"  min: wall {min(walls) * 1000:.1f} ms, cpu {min(cpus) * 1000:.1f} ms"
    )
    if prof and args.profile:
        prof.dump_stats(args.profile)
        st = pstats.Stats(str(args.profile))
        print(f"profiled round: {st.total_calls} function calls")  # type: ignore[attr-defined]
        st.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
