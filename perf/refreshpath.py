"""The backend's part of `id bigroupuser` after `cached cache -E`, nothing changed on
the server: getpwnam, initgroups (validation by stamps, cached/ldap/validate.py) and
getgrgid of the user's primary group, through the provider alone. Wall, our CPU and
slapd's CPU per round.

    python -m perf.refreshpath OUTDIR [--rounds 15] [--profile FILE]

Like perf.readpath, built to compare two checkouts on a shared machine: run it
alternately from each (``cd checkout && PYTHONPATH=. python -m perf.refreshpath ...``)
and compare the CPU medians (``time.process_time``; /proc for slapd), which the load of
others moves far less than wall time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import time
from pathlib import Path

from cached.cache import State
from cached.counters import Counters
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.gendir import BIGROUPUSER, generate
from testing.procstat import proc_info
from testing.slapd import Slapd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, help="a new directory for the data, slapd and caches")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--profile", type=Path, help="write a cProfile of one extra round here")
    args = ap.parse_args()
    args.outdir.mkdir(parents=True)
    gen = generate(BIGROUPUSER.with_schema("rfc2307bis"), args.outdir / "gen")
    exp = gen.expected()
    user = exp.big_user
    walls: list[float] = []
    cpus: list[float] = []
    slapd_cpus: list[float] = []
    with Slapd(args.outdir / "slapd", gen.ldif, exp.base_dn) as s:
        assert s.pid is not None
        counters = Counters()
        p, cache, _ = make_backend(args.outdir / "db", make_domain([s.uri], s.base_dn), counters)
        try:
            assert p.initgroups(user).outcome is Outcome.FOUND  # cold
            u = cache.user_by_name(user).value
            assert u is not None
            # The daemon's backend holds no model of the directory: keep this
            # script's (gen, exp) out of the collector's work, as it is out of the
            # daemon's.
            gc.collect()
            gc.freeze()
            for i in range(args.rounds + 1 + bool(args.profile)):
                cache.invalidate_all()  # `cached cache -E`
                last = bool(args.profile) and i == args.rounds + 1
                prof = cProfile.Profile(time.process_time) if last else None
                before = proc_info(s.pid)
                t0, c0 = time.perf_counter(), time.process_time()
                if prof:
                    prof.enable()
                # What `id` asks of the backend after -E: the user, its groups, and
                # its primary group (not among the groups it is a member of) when the
                # responder finds it still expired.
                outcomes = [p.user_by_name(user).outcome, p.initgroups(user).outcome]
                if cache.group_by_gid(u.gid).state is not State.VALID:
                    outcomes.append(p.group_by_gid(u.gid).outcome)
                if prof:
                    prof.disable()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                after = proc_info(s.pid)
                assert set(outcomes) == {Outcome.FOUND}, outcomes
                if 0 < i <= args.rounds:  # round 0 warms slapd's caches
                    walls.append(wall)
                    cpus.append(cpu)
                    if before and after:
                        slapd_cpus.append(after.cpu - before.cpu)
        finally:
            p.client.close()
            cache.close()
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
