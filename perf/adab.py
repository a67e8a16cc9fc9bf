"""What perf.adrefresh and perf.adgroup share: A/B runs of cached's daemon on perf.adbig's
Samba DC (bigroupuser mapped to AD), the cache expired between steps as time passing
expires it (testing.cachetime), and per step the counters, the backend's and the DC's
CPU, medians written to ``results.json``.

``--ab CHECKOUT`` runs every cycle a second time with the daemon of another checkout
("other"; this one is "this"), other first, so the load of a shared machine falls on
both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import testing.daemon
from perf.adbig import SOCKET_ONLY, prepared_dc
from testing import addc
from testing.daemon import CachedDaemon
from testing.procstat import cpu_seconds

KEYS = ("wall", "ldap_bytes", "searches", "checked", "fetched", "be_cpu", "dc_cpu")
Row = dict[str, float]


def parse_args(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--ab", type=Path)
    ap.add_argument("--dc-pid", type=int)
    args = ap.parse_args()
    args.outdir.mkdir(parents=True)
    return args


def variants(args: argparse.Namespace) -> dict[str, Path]:
    """The checkouts to run, "other" (--ab) first."""
    out = {"other": args.ab.resolve()} if args.ab else {}
    out["this"] = testing.daemon.REPO
    return out


@contextlib.contextmanager
def dc_running(args: argparse.Namespace) -> Iterator[addc.SambaDC]:
    """perf.adbig's loaded DC, started here (and stopped after) unless ``--dc-pid``
    says it runs; ``args.dc_pid`` is its pid either way, for its CPU figures."""
    dc, _ = prepared_dc(args.workdir)
    started = args.dc_pid is None
    if started:
        dc.start()
        args.dc_pid = dc.pid
    try:
        yield dc
    finally:
        if started:
            dc.stop()


def daemon(outdir: Path, repo: Path, dc: addc.SambaDC) -> CachedDaemon:
    """The daemon of checkout ``repo`` on the DC. Stamps at expiry are an opt-in on AD
    (cached/config.py refresh_full_interval): what these scripts measure."""
    testing.daemon.REPO = repo
    return CachedDaemon(outdir, [dc.ldapi_uri], dc.base_dn, log_level="info",
                        nss={"cache_first_wait": 0}, ldap_schema="ad",
                        ldap_default_bind_dn=dc.admin_dn, ldap_default_authtok=dc.admin_pw,
                        refresh_full_interval=86400)  # fmt: skip


def _c(snap: dict[str, list[float]], name: str, i: int) -> float:
    return snap.get(name, [0, 0.0, 0])[i]


def step(
    d: CachedDaemon,
    dc_pid: int | None,
    argv: list[str],
    exact: Callable[[subprocess.CompletedProcess[str]], bool],
    checked: int,
) -> Row:
    """Run ``argv`` through libnss_sss (socket only) and measure it; ``exact`` checks
    its answer; ``checked``: which field of counter be.validate is reported (0: the
    validations run, 2: the groups checked)."""
    pids = {"be": d.child_pid("backend LDAP")} | ({"dc": dc_pid} if dc_pid else {})
    before, cpu0 = d.counters(), cpu_seconds(pids)
    t0 = time.monotonic()
    r = d.run_nss(argv, env=SOCKET_ONLY)
    wall = time.monotonic() - t0
    if not exact(r):
        raise RuntimeError(f"{argv[0]}: rc {r.returncode} {r.stdout[:300]!r}\n{d.log_tail()}")
    after, cpu1 = d.counters(), cpu_seconds(pids)
    return {
        "wall": wall,
        "ldap_bytes": _c(after, "ldap.bytes", 2) - _c(before, "ldap.bytes", 2),
        "searches": _c(after, "ldap.search", 0) - _c(before, "ldap.search", 0),
        "checked": _c(after, "be.validate", checked) - _c(before, "be.validate", checked),
        "fetched": _c(after, "be.validate.fetched", 2) - _c(before, "be.validate.fetched", 2),
        "be_cpu": cpu1["be"] - cpu0["be"],
        "dc_cpu": cpu1.get("dc", 0.0) - cpu0.get("dc", 0.0),
    }


def write_summary(
    outdir: Path,
    runs: dict[str, Path],
    samples: dict[str, dict[str, list[Row]]],
    summary: dict[str, Any],
) -> None:
    """Medians per checkout and step into ``summary``, written with the samples."""
    summary["variants"] = {}
    for v, repo in runs.items():
        rows: dict[str, Any] = {}
        for name, xs in samples[v].items():
            rows[name] = {k: statistics.median(x[k] for x in xs) for k in KEYS}
            rows[name]["n"] = len(xs)
        summary["variants"][v] = {"repo": str(repo), "medians": rows}
    (outdir / "results.json").write_text(
        json.dumps({"summary": summary, "samples": samples, "time": time.time()}, indent=1)
    )
    print(json.dumps(summary, indent=1))
