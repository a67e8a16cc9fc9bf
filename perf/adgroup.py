"""`getent group large01` on a Samba AD DC once its cache expired: nothing changed, one
member changed.

    python -m perf.adgroup OUTDIR --workdir DIR [--cycles 3] [--ab CHECKOUT] [--dc-pid PID]

The DC is perf.adbig's (bigroupuser mapped to AD, kept loaded in ``DIR/dc``; started
here unless already running, when its pid may be given for its CPU figures); large01 has
5,000 members. Per cycle, with an empty cache: a cold ``getent group large01`` (through
glibc and libnss_sss, memory cache off), then the cache expired (testing.cachetime, as
time passing expires it: after ``cached cache -E`` AD reads whole, validate.distrusted)
and the lookup with nothing changed on the DC (by name, then by gid), then large01 gains
or loses a member (alternately), the cache expired and the lookup by name. Recorded per
step: the wall time of ``getent``, the bytes received from LDAP (counter
``ldap.bytes``), our searches, the lookups validated by stamps and those fetched whole
after one (``be.validate``, ``be.validate.fetched``), the backend's CPU and the DC's.

``--ab CHECKOUT`` runs every cycle a second time with the daemon of another checkout
("other"; this one is "this"), alternating, so the load of a shared machine falls on
both alike; medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ldap3

import testing.daemon
from perf.adbig import SOCKET_ONLY, prepared_dc
from perf.adrefresh import KEYS, _c
from testing import cachetime, gendir
from testing.addir import GROUPS, PEOPLE, _rdn_value
from testing.daemon import CachedDaemon
from testing.procstat import cpu_seconds

GROUP = "large01"
STEPS = ("group_cold", "group_after_expiry", "gid_after_expiry", "group_after_expiry_1changed")


def _step(d: CachedDaemon, dc_pid: int | None, key: str, want: tuple[int, int]) -> dict[str, float]:
    be = d.child_pid("backend LDAP")
    pids = {"be": be} | ({"dc": dc_pid} if dc_pid else {})
    before, cpu0 = d.counters(), cpu_seconds(pids)
    t0 = time.monotonic()
    r = d.run_nss(["getent", "group", key], env=SOCKET_ONLY)
    wall = time.monotonic() - t0
    fields = r.stdout.rstrip("\n").split(":")
    got = (int(fields[2]), len(fields[3].split(","))) if r.returncode == 0 else None
    if got != want:
        raise RuntimeError(f"getent: rc {r.returncode} {r.stdout[:300]!r}\n{d.log_tail()}")
    after, cpu1 = d.counters(), cpu_seconds(pids)
    return {
        "wall": wall,
        "ldap_bytes": _c(after, "ldap.bytes", 2) - _c(before, "ldap.bytes", 2),
        "searches": _c(after, "ldap.search", 0) - _c(before, "ldap.search", 0),
        "checked": _c(after, "be.validate", 0) - _c(before, "be.validate", 0),
        "fetched": _c(after, "be.validate.fetched", 2) - _c(before, "be.validate.fetched", 2),
        "be_cpu": cpu1["be"] - cpu0["be"],
        "dc_cpu": cpu1.get("dc", 0.0) - cpu0.get("dc", 0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--ab", type=Path)
    ap.add_argument("--dc-pid", type=int)
    args = ap.parse_args()
    args.outdir.mkdir(parents=True)
    d_ = gendir.build(gendir.BIGROUPUSER)
    g = next(g for g in d_.groups if g.name == GROUP)
    assert not g.member_groups
    other = next(u for u in d_.users if u.name not in g.members)
    other_dn = f"CN={_rdn_value(other.gecos)},{PEOPLE}"
    target_dn = f"CN={GROUP},{GROUPS}"
    dc, _ = prepared_dc(args.workdir)
    started = False
    if args.dc_pid is None:
        dc.start()
        started = True
        args.dc_pid = dc.pid
    # "other" (--ab) first in each cycle, then this checkout.
    variants = {"other": args.ab.resolve()} if args.ab else {}
    variants["this"] = testing.daemon.REPO
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        v: {s: [] for s in STEPS} for v in variants
    }
    added = False
    opts = {"ldap_schema": "ad", "ldap_default_bind_dn": dc.admin_dn,
            "ldap_default_authtok": dc.admin_pw,
            # Stamps at expiry, an opt-in on AD (cached/config.py refresh_full_interval).
            "refresh_full_interval": 86400}  # fmt: skip
    n = len(g.members)
    try:
        conn = dc.connect()
        for cycle in range(args.cycles):
            for v, repo in variants.items():
                testing.daemon.REPO = repo
                with CachedDaemon(args.outdir / f"{v}{cycle}", [dc.ldapi_uri], dc.base_dn,
                                  log_level="info", nss={"cache_first_wait": 0},
                                  **opts) as d:  # fmt: skip
                    d.run_nss(["getent", "passwd", "perf-warmup-no-such-user"])
                    out = samples[v]
                    want = (g.gid, n + (1 if added else 0))
                    out["group_cold"].append(_step(d, args.dc_pid, GROUP, want))
                    for _ in range(2):
                        cachetime.expire_daemon(d.db_dir)
                        out["group_after_expiry"].append(_step(d, args.dc_pid, GROUP, want))
                        cachetime.expire_daemon(d.db_dir)
                        out["gid_after_expiry"].append(_step(d, args.dc_pid, str(g.gid), want))
                    op = ldap3.MODIFY_DELETE if added else ldap3.MODIFY_ADD
                    assert conn.modify(target_dn, {"member": [(op, [other_dn])]}), conn.result
                    added = not added
                    want = (g.gid, n + (1 if added else 0))
                    cachetime.expire_daemon(d.db_dir)
                    out["group_after_expiry_1changed"].append(_step(d, args.dc_pid, GROUP, want))
                print(f"cycle {cycle + 1}/{args.cycles} {v} done", file=sys.stderr, flush=True)
        if added:
            conn.modify(target_dn, {"member": [(ldap3.MODIFY_DELETE, [other_dn])]})
        conn.unbind()
    finally:
        if started:
            dc.stop()
    summary: dict[str, Any] = {"group": GROUP, "members": n, "variants": {}}
    for v, repo in variants.items():
        rows: dict[str, Any] = {}
        for step in STEPS:
            xs = samples[v][step]
            rows[step] = {k: statistics.median(x[k] for x in xs) for k in KEYS}
            rows[step]["n"] = len(xs)
        summary["variants"][v] = {"repo": str(repo), "medians": rows}
    (args.outdir / "results.json").write_text(
        json.dumps({"summary": summary, "samples": samples, "time": time.time()}, indent=1)
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
