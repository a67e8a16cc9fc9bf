"""A distant or hung directory server: cached beside SSSD 2.8.2 and nslcd, one run.

    python -m perf.wan --with-sssd --with-nslcd --out perf/results/2026-11-30-wan

Every daemon talks to the same slapd through the fault proxy (``testing.faultproxy``) and
is asked through glibc and the real NSS client libraries (``perf.steps``):

* **cold `id bigroupuser` at 0, 5 and 20 ms round-trip time**: an empty cache, the
  proxy adding half the RTT each way. The number of searches times the RTT is the
  whole story for a daemon that searches a lot. SSSD makes ~5,840 searches for this
  user, so at 20 ms one cold `id` takes minutes: it and nslcd get ``--other-reps``
  cycles (default 1) per RTT; cached gets ``--reps``.
* **server hung: first `id`, second `id`**: the cache filled by one `id`, everything
  expired (``cached cache -E`` / ``sss_cache -E``), then the proxy stalls (connections
  accepted, nothing forwarded either way: what a SIGSTOPped slapd looks like) and
  `id` runs twice, then a third time over the socket only (``SSS_NSS_USE_MEMCACHE=NO``:
  every lookup reaches the responder). nslcd has no cache to answer from; each command is capped at
  ``--hung-cap`` seconds and a capped one is reported as such.

Every daemon runs with its defaults for timeouts (cached: ``ldap_search_timeout`` 6 s,
``ldap_opt_timeout`` 8 s, ``cache_first_wait`` 1 s; SSSD: the same LDAP timeouts).
Answers are checked against the generator's expected answers. The report
(``report.md``, ``wan.png``, ``results.json``) goes into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import signal
import sys
import tempfile
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perf.report import _plt, md_table
from perf.results import Sample
from perf.run import DATA_DIR, RESULTS_DIR, environment, warm_slapd
from perf.steps import (
    NO_GATE,
    NO_MEMCACHE,
    Outcome,
    QuietGate,
    check_id,
    measure,
    nss_step,
)
from perf.targets import CachedTarget, SssdTarget, Target, stop_quietly
from testing import gendir, install, nsenv, sssd
from testing.faultproxy import FaultProxy
from testing.gendir import BIGROUPUSER
from testing.slapd import Slapd

RTTS_MS = (0, 5, 20)
TARGETS_ORDER = ("cached", "sssd", "nslcd")
HUNG_STEPS = {"first": "first `id`", "second": "second `id`", "third_socket": "third, socket only"}


def make_target(name: str, workdir: Path, uri: str, base: str) -> Target:
    if name == "cached":
        return CachedTarget(workdir / "cached", uri, base)
    if name == "sssd":
        return SssdTarget(workdir / "sssd", uri, base)
    from perf.nslcd import NslcdTarget

    return NslcdTarget(workdir / "nslcd", uri, base)


def capped(argv: list[str], cap: float) -> list[str]:
    # coreutils timeout: a client stuck on a hung server is killed after `cap` seconds
    # (exit 137), and the step records that instead of stalling the run.
    return ["timeout", "-s", "KILL", str(int(cap)), *argv]


def run(args: argparse.Namespace, names: list[str], out: Path) -> dict[str, Any]:
    gen = gendir.generate(BIGROUPUSER, args.data_dir, reuse=True)
    exp = gen.expected()
    user = exp.big_user
    workdir = Path(tempfile.mkdtemp(prefix="perf-wan-", dir="/tmp"))
    workdir.chmod(0o755)
    data: dict[str, Any] = {
        "meta": environment(args, workdir),
        "rtt_ms": list(RTTS_MS),
        "cold": {},  # target -> rtt -> [Sample]
        "hung": {},  # target -> {"first": Sample, "second": Sample}
        "notes": [],
    }
    data["meta"]["argv"] = ["python", "-m", "perf.wan", *sys.argv[1:]]
    data["meta"]["expected_gids"] = len(exp.initgroups(user, 2))
    try:
        with Slapd(workdir / "slapd", gen.ldif, BIGROUPUSER.base_dn) as server:
            warm_slapd(server)
            proxy = FaultProxy("127.0.0.1", server.port).start()
            # Wait for a quiet host before each cold step, as perf.run does (this
            # machine is shared); not before the hung steps, where waiting changes
            # what is measured (the backend's own timeouts run meanwhile).
            gate = QuietGate()
            try:
                for name in names:
                    target = make_target(name, workdir, proxy.uri, server.base_dn)
                    level = target.level

                    def id_check(text: str, level: int = level) -> tuple[bool, str]:
                        return check_id(exp, level, user, text)

                    reps = args.reps if name == "cached" else args.other_reps
                    try:
                        for rtt in RTTS_MS:
                            proxy.heal()
                            proxy.rtt(rtt / 1000)
                            for r in range(reps):
                                print(f"{name}: cold id at {rtt} ms ({r + 1}/{reps})", flush=True)
                                target.fresh()
                                argv = capped(["id", user], args.cold_cap)
                                action = nss_step(target, argv, id_check)
                                s = measure(target, server, action, gate)
                                data["cold"].setdefault(name, {}).setdefault(str(rtt), []).append(
                                    asdict(s)
                                )
                                print(f"  {s.wall:.2f} s ok={s.ok} {s.note}", flush=True)
                        proxy.heal()
                        data["hung"][name] = hung(args, target, server, proxy, user, id_check)
                    except Exception as e:  # keep what was measured; say what failed
                        traceback.print_exc()
                        data["notes"].append(f"{name}: {type(e).__name__}: {e}")
                    finally:
                        stop_quietly(target)
                        proxy.heal()
                        proxy.drop_all()
            finally:
                proxy.stop()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return data


def hung(
    args: argparse.Namespace,
    target: Target,
    server: Slapd,
    proxy: FaultProxy,
    user: str,
    id_check: Any,
) -> dict[str, Any]:
    print(f"{target.name}: server hung", flush=True)
    target.fresh()
    fill = nss_step(target, capped(["id", user], args.cold_cap), id_check)()
    res: dict[str, Any] = {"fill_ok": fill.ok}
    timing, why = target.invalidate_all()
    res["invalidated"] = timing is not None
    if timing is None:
        res["invalidate_note"] = why
    proxy.set(stall=True)
    try:
        for step, env in (("first", None), ("second", None), ("third_socket", NO_MEMCACHE)):
            argv = capped(["id", user], args.hung_cap)
            action = nss_step(target, argv, id_check, env)

            def noted(action: Any = action) -> Outcome:
                o: Outcome = action()
                if o.timing is not None and o.timing.rc == 137:
                    return Outcome(o.timing, False, f"no answer within {args.hung_cap:.0f} s")
                return o

            s: Sample = measure(target, server, noted, NO_GATE)
            res[step] = asdict(s)
            print(f"  {step}: {s.wall:.2f} s ok={s.ok} {s.note}", flush=True)
    finally:
        proxy.set(stall=False)
    return res


# -- report ---------------------------------------------------------------------------------


def _median(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    good = sorted((s for s in samples if s["ok"]), key=lambda s: s["wall"])
    return good[len(good) // 2] if good else None


def _fmt(s: dict[str, Any] | None, n: int = 0) -> str:
    if s is None:
        return "failed"
    extra = f" (median of {n})" if n > 1 else ""
    return f"{s['wall']:.2f} s{extra}"


def chart(data: dict[str, Any], out: Path) -> str:
    plt = _plt()
    names = [n for n in TARGETS_ORDER if n in data["cold"] or n in data["hung"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, rtt in enumerate(data["rtt_ms"]):
            m = _median(data["cold"].get(name, {}).get(str(rtt), []))
            if m is not None:
                xs.append(j + i * width)
                ys.append(m["wall"])
        ax1.bar(xs, ys, width, label=name)
        for x, y in zip(xs, ys, strict=True):
            ax1.text(x, y, f"{y:.3g}", ha="center", va="bottom", fontsize=7)
    ax1.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(data["rtt_ms"]))])
    ax1.set_xticklabels([f"{r} ms RTT" for r in data["rtt_ms"]])
    ax1.set_yscale("log")
    ax1.set_ylabel("seconds (log scale)")
    ax1.set_title("cold `id bigroupuser`")
    ax1.legend(loc="upper left", fontsize=8)
    for i, name in enumerate(names):
        h = data["hung"].get(name, {})
        ys = [h.get(k, {}).get("wall", 0.0) if h.get(k) else 0.0 for k in HUNG_STEPS]
        xs = [j + i * width for j in range(len(HUNG_STEPS))]
        ax2.bar(xs, ys, width, label=name)
        for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
            ok = h.get(list(HUNG_STEPS)[k], {}).get("ok", False)
            ax2.text(x, y, f"{y:.2g}" + ("" if ok else "✗"), ha="center", va="bottom", fontsize=7)
    ax2.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(HUNG_STEPS))])
    ax2.set_xticklabels(list(HUNG_STEPS.values()))
    ax2.set_yscale("log")
    ax2.set_title("server hung, everything expired (✗: no answer)")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = out / "wan.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _load(samples: list[dict[str, Any]]) -> str:
    loads = sorted(s.get("other_load", 0.0) for s in samples)
    return f"{loads[len(loads) // 2]:.1f}" if loads else "?"


def targets_section(data: dict[str, Any]) -> list[str]:
    """The targets set for this benchmark, met or not, from cached's figures."""
    cold20 = _median(data["cold"].get("cached", {}).get("20", []))
    h = data["hung"].get("cached", {})
    rows = []

    def row(what: str, target: float, s: dict[str, Any] | None) -> None:
        if s is None:
            rows.append([what, f"≤ {target} s", "not measured", ""])
            return
        met = s["ok"] and s["wall"] <= target
        rows.append([what, f"≤ {target} s", f"{s['wall']:.2f} s", "met" if met else "NOT met"])

    row("frozen server, all expired: first `id`", 2.0, h.get("first"))
    row("frozen server: later `id` (memory cache allowed)", 0.5, h.get("second"))
    row("frozen server: later `id`, socket only", 0.5, h.get("third_socket"))
    row("cold `id` at 20 ms RTT (median)", 1.5, cold20)
    cold = [s for per in data["cold"].get("cached", {}).values() for s in per]
    return [
        "## Targets (cached)",
        "",
        md_table(["what", "target", "measured", ""], rows),
        "",
        "Other processes on the host (other engineers' test runs) used a median of"
        f" {_load(cold)} cores during cached's cold steps (`other_load` in results.json);"
        " the host has 2.",
        "",
    ]


def write_report(data: dict[str, Any], out: Path) -> Path:
    names = [n for n in TARGETS_ORDER if n in data["cold"] or n in data["hung"]]
    lines = [
        "# A distant or hung directory server: cached, SSSD 2.8.2 and nslcd",
        "",
        f"Run {data['meta']['date']} on {data['meta']['cpu']} ({data['meta']['cores']} cores,"
        f" shared with other engineers' test runs), cached {data['meta']['cached_commit']}."
        f" `{' '.join(data['meta']['argv'])}`. Method: `perf/wan.py` (module docstring).",
        "",
        f"![cold id and hung server]({chart(data, out)})",
        "",
        "## Cold `id bigroupuser` (empty cache) through the latency proxy",
        "",
        f"Every answer is checked: {data['meta']['expected_gids']} gids with names.",
        "",
    ]
    rows = []
    for name in names:
        row = [name]
        for rtt in data["rtt_ms"]:
            samples = data["cold"].get(name, {}).get(str(rtt), [])
            m = _median(samples)
            searches = f", {m['searches_slapd']} searches" if m else ""
            bad = [s["note"] for s in samples if not s["ok"]]
            row.append(_fmt(m, len(samples)) + searches + (f" ✗ {bad[0]}" if bad else ""))
        rows.append(row)
    lines += [md_table(["daemon", *(f"{r} ms RTT" for r in data["rtt_ms"])], rows), ""]
    lines += [
        "## Server hung (proxy stalls every connection), everything expired",
        "",
        "The cache was filled by one `id`, then expired (`cached cache -E`, `sss_cache -E`);"
        " then the proxy stopped forwarding and `id` ran twice, then once more without the"
        " memory cache (every lookup through the daemon's socket).",
        "",
    ]
    rows = []
    for name in names:
        h = data["hung"].get(name, {})
        row = [name]
        for k in HUNG_STEPS:
            s = h.get(k)
            row.append(
                "not run"
                if s is None
                else f"{s['wall']:.2f} s" + ("" if s["ok"] else f" ✗ {s['note']}")
            )
        rows.append(row)
    lines += [md_table(["daemon", *HUNG_STEPS.values()], rows), ""]
    lines += targets_section(data)
    big = out / "bigentry.json"
    if big.exists():
        b = json.loads(big.read_text())
        med = {k: sorted(v)[len(v) // 2] for k, v in b["seconds"].items()}
        lines += [
            f"## One {b['mb']} MB entry from slapd (perf/README.md, retired scripts)",
            "",
            f"`LdapClient.search` of one user whose `gecos` is {b['mb']} MB, median of"
            f" {len(b['seconds']['cached'])}: cached's receive loop {med['cached']:.3f} s,"
            f" ldap3 2.9.1's loop {med['ldap3']:.3f} s"
            f" ({med['ldap3'] / med['cached']:.0f}x). One message over 64 MiB is refused.",
            "",
        ]
    if data["notes"]:
        lines += ["## Notes", "", *(f"* {n}" for n in data["notes"]), ""]
    reading = out / "reading.md"  # the hand-written reading of this run's figures
    if reading.exists():
        lines += [reading.read_text()]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _interrupt(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.wan", description=__doc__.split("\n")[0])
    p.add_argument("--with-sssd", action="store_true")
    p.add_argument("--with-nslcd", action="store_true")
    p.add_argument("--reps", type=int, default=3, help="cached: cold id cycles per RTT (3)")
    p.add_argument(
        "--other-reps", type=int, default=1, help="SSSD/nslcd: cold id cycles per RTT (1)"
    )
    p.add_argument("--cold-cap", type=float, default=1200, help="seconds a cold id may take")
    p.add_argument("--hung-cap", type=float, default=120, help="seconds an id may hang")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--render", type=Path, help="only re-render the report of this directory")
    args = p.parse_args(argv)
    if args.render:
        data = json.loads((args.render / "results.json").read_text())
        print(f"perf.wan: report {write_report(data, args.render)}", file=sys.stderr)
        return 0
    # SIGTERM ends the run like Ctrl-C: the `finally` blocks stop every daemon we began.
    signal.signal(signal.SIGTERM, _interrupt)
    reason = nsenv.skip_reason()
    if reason:
        print(f"perf.wan: cannot run the NSS steps: {reason}", file=sys.stderr)
        return 2
    names = ["cached"]
    log: list[str] = []
    if args.with_sssd:
        install.ensure_packages(sssd.PACKAGES, ("sssd",), log)
        names.append("sssd")
    if args.with_nslcd:
        from perf import nslcd

        install.ensure_packages(nslcd.PACKAGES, ("nslcd",), log, nslcd.PROTECT)
        names.append("nslcd")
    out = args.out or RESULTS_DIR / f"{dt.date.today().isoformat()}-wan"
    out.mkdir(parents=True, exist_ok=True)
    data = run(args, names, out)
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    print(f"perf.wan: report {write_report(data, out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
