"""Cold initgroups of bigroupuser (rfc2307bis, uid people) through the backend alone —
or, with ``--group NAME``, a cold group lookup (``getent group large01``'s backend
work): wall, our CPU, slapd's CPU, searches and bytes received from LDAP per round,
and optionally a cProfile of one more round.

    python -m perf.readpath OUTDIR [--rounds 9] [--group large01] [--no-deref]
                                   [--profile FILE] [--cold-memos]

Every round starts from an empty cache and an open connection, but the process's
module-level memos (cached.dn's DN keys above all) are filled by the rounds before
it; ``--cold-memos`` empties them before each round, as for the first lookup of a
freshly started backend (perf.coldid: a fresh ``cached serve`` per repetition).

Built to compare two checkouts on a machine shared with other engineers: run it
alternately from each (``cd checkout && PYTHONPATH=. python -m perf.readpath ...``)
and compare the CPU figures (``time.process_time`` for this process, /proc for slapd),
which the load of others' tests moves far less than wall time; the minimum is the
least disturbed round. The cProfile's total call count does not depend on load at all.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import statistics
import time
from array import array
from pathlib import Path

from cached.cache.records import split_members
from cached.counters import COUNTERS, LDAP_BYTES, LDAP_SEARCH, Counters
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.gendir import BIGROUPUSER, generate
from testing.procstat import proc_info
from testing.slapd import Slapd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, help="a new directory for the data, slapd and caches")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--group", help="look this group up instead of bigroupuser's initgroups")
    ap.add_argument("--no-deref", action="store_true", help="slapd without the deref overlay")
    ap.add_argument("--profile", type=Path, help="write a cProfile of one extra round here")
    ap.add_argument(
        "--cold-memos",
        action="store_true",
        help="empty the module-level memos before each round (a fresh backend's first lookup)",
    )
    args = ap.parse_args()
    args.outdir.mkdir(parents=True)
    gen = generate(BIGROUPUSER.with_schema("rfc2307bis"), args.outdir / "gen")
    exp = gen.expected()
    walls: list[float] = []
    cpus: list[float] = []
    slapd_cpus: list[float] = []
    searches: list[int] = []
    received: list[float] = []
    with Slapd(args.outdir / "slapd", gen.ldif, exp.base_dn, deref=not args.no_deref) as s:
        cfg = make_domain([s.uri], s.base_dn)
        assert s.pid is not None
        for i in range(args.rounds + 1 + bool(args.profile)):
            counters = Counters()
            p, cache, _ = make_backend(args.outdir / f"round{i}", cfg, counters)
            p.client.connect()
            if args.cold_memos:
                _empty_memos()
            s0 = counters.get(LDAP_SEARCH).count
            b0 = COUNTERS.get(LDAP_BYTES).amount  # counted by the receive loop, globally
            prof = cProfile.Profile() if args.profile and i == args.rounds + 1 else None
            before = proc_info(s.pid)
            t0, c0 = time.perf_counter(), time.process_time()
            if prof:
                prof.enable()
            if args.group:
                outcome = p.group_by_name(args.group).outcome
            else:
                outcome = p.initgroups("bigroupuser").outcome
            if prof:
                prof.disable()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            after = proc_info(s.pid)
            assert outcome is Outcome.FOUND, outcome
            if args.group:
                got = cache.group_by_name(args.group).value
                answer = set(split_members(got.members)) if got else set()
                assert answer == exp.members(args.group, 2), "inexact answer"
            else:
                ig = cache.initgroups("bigroupuser").value
                gids = set(array("I", ig.gids)) if ig else set()
                assert gids == exp.initgroups("bigroupuser", 2), "inexact answer"
            if 0 < i <= args.rounds:  # round 0 warms slapd's caches
                walls.append(wall)
                cpus.append(cpu)
                searches.append(counters.get(LDAP_SEARCH).count - s0)
                received.append(COUNTERS.get(LDAP_BYTES).amount - b0)
                if before and after:
                    slapd_cpus.append(after.cpu - before.cpu)
            p.client.close()
            cache.close()
    print(
        f"rounds {len(walls)}  median: wall {statistics.median(walls):.3f} s, "
        f"cpu {statistics.median(cpus):.3f} s, slapd cpu {statistics.median(slapd_cpus):.3f} s, "
        f"searches {statistics.median(searches):g}, "
        f"received {statistics.median(received) / (1 << 20):.2f} MiB"
        f"  min: wall {min(walls):.3f} s, cpu {min(cpus):.3f} s"
    )
    if prof and args.profile:
        prof.dump_stats(args.profile)
        st = pstats.Stats(str(args.profile))
        print(f"profiled round: {st.total_calls} function calls")  # type: ignore[attr-defined]
        st.sort_stats("tottime").print_stats(25)


def _empty_memos() -> None:
    """The memos a backend fills as it reads, emptied (those this checkout has: the
    script also runs against older checkouts for A/B comparisons)."""
    for module, name in (
        ("cached.dn", "_KEYS"),
        ("cached.ldap.client", "_ATTR_NAMES"),
        ("cached.ldap.client", "_LOWER"),
        ("cached.ldap.exchange", "_ATTR_NAMES"),
        ("cached.ldap.exchange", "_LOWER"),
        ("cached.ldap.wire", "_EQ_ATTRS"),
    ):
        memo = getattr(importlib.import_module(module), name, None)
        if isinstance(memo, dict):
            memo.clear()


if __name__ == "__main__":
    main()
