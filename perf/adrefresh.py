"""`id bigroupuser` on a Samba AD DC once its cache expired: nothing changed, one group changed.

    python -m perf.adrefresh OUTDIR --workdir DIR [--cycles 3] [--ab CHECKOUT] [--dc-pid PID]

The DC is perf.adbig's (bigroupuser mapped to AD, kept loaded in ``DIR/dc``; started
here unless already running, when its pid may be given for its CPU figures). Per cycle,
with an empty cache: a cold ``id`` (through glibc and libnss_sss, memory cache off),
then the cache expired (testing.cachetime, as time passing expires it: after ``cached
cache -E`` AD reads whole, validate.distrusted) and ``id`` with nothing changed on the
DC, then one of bigroupuser's direct groups gains or loses a member (alternately), the
cache expired and ``id``. Recorded per step: the wall time of ``id``, the bytes received
from LDAP (counter ``ldap.bytes``), our searches, the groups checked and fetched whole
again (``be.validate``, ``be.validate.fetched``), the backend's CPU and the DC's.

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
from cached.ldap.ad import sid_assertion, sid_to_str
from perf.adbig import BIG, SOCKET_ONLY, _gids, prepared_dc
from testing import cachetime, gendir
from testing.addir import GROUPS, PEOPLE, _rdn_value
from testing.daemon import CachedDaemon
from testing.procstat import cpu_seconds

STEPS = ("id_cold", "id_after_expiry", "id_after_expiry_1changed")
KEYS = ("wall", "ldap_bytes", "searches", "checked", "fetched", "be_cpu", "dc_cpu")


def _c(snap: dict[str, list[float]], name: str, i: int) -> float:
    return snap.get(name, [0, 0.0, 0])[i]


def _step(d: CachedDaemon, dc_pid: int | None, want: set[int]) -> dict[str, float]:
    be = d.child_pid("backend LDAP")
    pids = {"be": be} | ({"dc": dc_pid} if dc_pid else {})
    before, cpu0 = d.counters(), cpu_seconds(pids)
    t0 = time.monotonic()
    r = d.run_nss(["id", BIG], env=SOCKET_ONLY)
    wall = time.monotonic() - t0
    if r.returncode != 0 or _gids(r.stdout) != want:
        raise RuntimeError(f"id: rc {r.returncode} {r.stdout[:300]!r}\n{d.log_tail()}")
    after, cpu1 = d.counters(), cpu_seconds(pids)
    return {
        "wall": wall,
        "ldap_bytes": _c(after, "ldap.bytes", 2) - _c(before, "ldap.bytes", 2),
        "searches": _c(after, "ldap.search", 0) - _c(before, "ldap.search", 0),
        "checked": _c(after, "be.validate", 2) - _c(before, "be.validate", 2),
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
    user_dn = {u.name: f"CN={_rdn_value(u.gecos)},{PEOPLE}" for u in d_.users}
    direct = sorted(g.name for g in d_.groups if BIG in g.members)
    target = next(g.name for g in d_.groups
                  if g.name in direct and not g.member_groups and g.name != "large01")  # fmt: skip
    members = next(g.members for g in d_.groups if g.name == target)
    other = next(u.name for u in d_.users if u.name not in members)
    target_dn = f"CN={target},{GROUPS}"
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
    try:
        conn = dc.connect()
        # The expected gids: every group of the token (tokenGroups is the closure).
        (u,) = [e for e in dc.search(PEOPLE, f"(sAMAccountName={BIG})", ["gidNumber"])]
        tok = dc.search(u["dn"], "(objectClass=*)", ["tokenGroups"], scope=ldap3.BASE)
        sids = tok[0]["raw_attributes"]["tokenGroups"]
        want = {int(u["raw_attributes"]["gidNumber"][0])}
        for i in range(0, len(sids), 500):
            filt = "(|" + "".join(
                sid_assertion("objectSid", sid_to_str(s)) for s in sids[i : i + 500]
            )
            filt += ")"
            for g in dc.search(dc.base_dn, filt, ["gidNumber"]):
                if g["raw_attributes"].get("gidNumber"):
                    want.add(int(g["raw_attributes"]["gidNumber"][0]))
        for cycle in range(args.cycles):
            for v, repo in variants.items():
                testing.daemon.REPO = repo
                with CachedDaemon(args.outdir / f"{v}{cycle}", [dc.ldapi_uri], dc.base_dn,
                                  log_level="info", nss={"cache_first_wait": 0},
                                  **opts) as d:  # fmt: skip
                    d.run_nss(["getent", "passwd", "perf-warmup-no-such-user"])
                    out = samples[v]
                    out["id_cold"].append(_step(d, args.dc_pid, want))
                    for _ in range(2):
                        cachetime.expire_daemon(d.db_dir)
                        out["id_after_expiry"].append(_step(d, args.dc_pid, want))
                    op = ldap3.MODIFY_DELETE if added else ldap3.MODIFY_ADD
                    assert conn.modify(target_dn, {"member": [(op, [user_dn[other]])]})
                    added = not added
                    cachetime.expire_daemon(d.db_dir)
                    out["id_after_expiry_1changed"].append(_step(d, args.dc_pid, want))
                print(f"cycle {cycle + 1}/{args.cycles} {v} done", file=sys.stderr, flush=True)
        if added:
            conn.modify(target_dn, {"member": [(ldap3.MODIFY_DELETE, [user_dn[other]])]})
        conn.unbind()
    finally:
        if started:
            dc.stop()
    summary: dict[str, Any] = {"changed_group": target, "variants": {}}
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
