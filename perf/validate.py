"""`id bigroupuser` after `cached cache -E`: nothing changed, and one group changed.

    python -m perf.validate OUTDIR [--cycles 5] [--ab /work/main]

Per cycle, with an empty cache: a cold ``id`` (through glibc and libnss_sss, the
memory cache on, as perf.run's steps), then ``cached cache -E`` and ``id`` with nothing
changed on the server, then one of bigroupuser's direct groups gains or loses a member
(alternately, so the directory keeps two states), ``cached cache -E`` and ``id``.
Recorded per step: the wall time of ``id`` (perf.timecmd), the bytes received from
LDAP (counter ``ldap.bytes``), the groups checked and fetched whole again
(``be.validate``, ``be.validate.fetched``), our searches, and from slapd's log the
searches that asked for member values and the entries they returned.

``--ab CHECKOUT`` runs every cycle a second time with the daemon of another checkout
(its ``cached`` package first on the path), alternating A and B, so the load of a shared
machine falls on both alike. The figures are medians; the JSON has every sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import testing.daemon
from perf.steps import check_id, slapd_etime
from perf.targets import CACHED_NSS, DOMAIN_OPTIONS, TIMECMD
from perf.timecmd import parse
from testing.daemon import CachedDaemon
from testing.gendir import BIGROUPUSER, generate
from testing.procstat import cpu_seconds
from testing.slapd import Slapd

STEPS = ("id_cold", "id_after_inval", "id_after_inval_1changed")


def _counter(snap: dict[str, list[float]], name: str, i: int) -> float:
    return snap.get(name, [0, 0.0, 0])[i]


def _cpu(d: CachedDaemon) -> dict[str, float]:
    """CPU seconds so far of the responder and the backend (/proc, 10 ms ticks)."""
    return cpu_seconds({"resp": d.child_pid("responder"), "be": d.child_pid("backend LDAP")})


def _step(
    d: CachedDaemon, s: Slapd, argv: list[str], check: Any, since: dict[str, float] | None = None
) -> dict[str, Any]:
    """One timed command; ``since``: a CPU snapshot taken before the `cached cache -E`
    that precedes it (its CPU counted too, the file reset included)."""
    before = d.counters()
    cpu0 = _cpu(d)
    offset = s.log_offset()
    p = d.run_nss([*TIMECMD, *argv])
    timing, rest = parse(p.stderr)
    if timing is None or timing.rc != 0:
        raise RuntimeError(f"{argv}: {rest[-300:]}\n{d.log_tail()}")
    ok, note = check(p.stdout)
    if not ok:
        raise RuntimeError(f"{argv}: wrong answer: {note}")
    cpu1 = _cpu(d)
    after = d.counters()
    ops = s.searches(offset)
    start = since or cpu0
    whole = [op for op in ops if "member" in {a.lower() for a in op.attrs}]
    return {
        "wall": timing.wall,
        "ldap_bytes": _counter(after, "ldap.bytes", 2) - _counter(before, "ldap.bytes", 2),
        "searches": _counter(after, "ldap.search", 0) - _counter(before, "ldap.search", 0),
        "checked": _counter(after, "be.validate", 2) - _counter(before, "be.validate", 2),
        "fetched": _counter(after, "be.validate.fetched", 2)
        - _counter(before, "be.validate.fetched", 2),
        "resp_cpu": cpu1["resp"] - cpu0["resp"],
        "be_cpu": cpu1["be"] - cpu0["be"],
        "resp_cpu_with_inval": cpu1["resp"] - start["resp"],
        "be_cpu_with_inval": cpu1["be"] - start["be"],
        "slapd_searches": len(ops),
        "slapd_etime": slapd_etime(s, offset),
        "slapd_member_searches": len(whole),
        "slapd_member_entries": sum(op.nentries or 0 for op in whole),
        "slapd_filters_with_members": [op.filter[:160] for op in whole],
        "counters": {
            k: [round(v - _counter(before, k, i), 6) for i, v in enumerate(vals)]
            for k, vals in after.items()
            if vals != before.get(k)
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, help="a new directory for the data, slapd and caches")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--ab", type=Path, help="another checkout to compare with, alternately")
    args = ap.parse_args()
    args.outdir.mkdir(parents=True)
    gen = generate(BIGROUPUSER.with_schema("rfc2307bis"), args.outdir / "gen")
    exp = gen.expected()
    sc = exp.scenario
    user = exp.big_user
    level = DOMAIN_OPTIONS["ldap_group_nesting_level"]
    direct = sorted(exp.direct_groups(user))
    target = next(g for g in direct if not exp.group(g).member_groups and g != "large01")
    other = next(u for u in exp.user_names() if u not in exp.members(target, 0))
    variants = {"A": testing.daemon.REPO}
    if args.ab:
        variants["B"] = args.ab.resolve()
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        v: {step: [] for step in STEPS} for v in variants
    }
    added = False

    def check(out: str) -> tuple[bool, str]:
        return check_id(exp, level, user, out)

    with Slapd(args.outdir / "slapd", gen.ldif, exp.base_dn) as s:
        for cycle in range(args.cycles):
            for v, repo in variants.items():
                testing.daemon.REPO = repo  # the daemon's cwd: its `cached` comes first
                work = args.outdir / f"{v}{cycle}"
                # cache_first_wait = 0: `id` waits for the refresh it measures (with
                # the default 1 s, a slow refresh is answered from the cache and runs
                # on into the next step).
                with CachedDaemon(work, [s.uri], s.base_dn, log_level="info",
                                  nss={**CACHED_NSS, "cache_first_wait": 0},
                                  **DOMAIN_OPTIONS) as d:  # fmt: skip
                    d.run_nss(["getent", "passwd", "perf-warmup-no-such-user"])
                    out = samples[v]
                    out["id_cold"].append(_step(d, s, ["id", user], check))
                    for _ in range(2):
                        since = _cpu(d)
                        assert d.cli("cache", "-E").returncode == 0
                        out["id_after_inval"].append(_step(d, s, ["id", user], check, since))
                    s.ldap_modify(
                        f"dn: {sc.group_dn(target)}\nchangetype: modify\n"
                        f"{'delete' if added else 'add'}: member\nmember: {sc.user_dn(other)}\n\n"
                    )
                    added = not added
                    since = _cpu(d)
                    assert d.cli("cache", "-E").returncode == 0
                    res = _step(d, s, ["id", user], check, since)
                    out["id_after_inval_1changed"].append(res)
                print(f"cycle {cycle + 1}/{args.cycles} {v} done", file=sys.stderr, flush=True)

    summary: dict[str, Any] = {"changed_group": target, "variants": {}}
    for v, repo in variants.items():
        rows = {}
        for step in STEPS:
            xs = samples[v][step]
            rows[step] = {
                k: statistics.median(x[k] for x in xs)
                for k in ("wall", "resp_cpu", "be_cpu", "resp_cpu_with_inval",
                          "be_cpu_with_inval", "ldap_bytes", "searches", "checked", "fetched",
                          "slapd_searches", "slapd_etime", "slapd_member_searches",
                          "slapd_member_entries")
            }  # fmt: skip
            rows[step]["n"] = len(xs)
        summary["variants"][v] = {"repo": str(repo), "medians": rows}
    (args.outdir / "results.json").write_text(
        json.dumps({"summary": summary, "samples": samples, "time": time.time()}, indent=1)
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
