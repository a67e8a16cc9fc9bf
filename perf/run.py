"""Benchmark cached (and, on request, real SSSD 2.8 and nslcd) on directories with
thousands of groups; write ``results.json``, PNG charts and ``report.md``.

    python -m perf.run                      # cached only: a few minutes (make bench)
    python -m perf.run --with-sssd          # + real SSSD, side by side (~30 min here)
    python -m perf.report perf/results/DIR  # re-render the report from results.json

Scenarios (``testing.gendir``): ``bigroupuser`` (a user in 2,000 direct groups, 2,086 at
nesting level 2; three groups of 5,000 members), and sweeps of the big user's direct
groups (250 … 4,000, large groups of 5,000) and of the large groups' size (1,000 …
20,000, 2,000 groups per user). The sweep point g2000-l5000 *is* bigroupuser (same
LDIF), so its figures are bigroupuser's.

Steps per daemon (``perf.results.STEPS``), every one through glibc and the real
``libnss_sss`` in a private mount namespace (``testing.nsenv``):

* an *id cycle*: start with an empty cache → cold ``id`` → warm ``id`` over the socket
  (``SSS_NSS_USE_MEMCACHE=NO``) → warm ``id`` with the memory cache allowed → ``cache
  -E`` → ``id`` again (server unchanged) → one of the user's direct groups gains a
  member on the server, ``cache -E``, ``id`` again (that group alone is fetched whole
  by cached), and the change is undone;
* an *initgroups cycle*: empty cache → ``getent initgroups``;
* a *group cycle*: empty cache → ``getent group large01`` → warm, socket only → warm,
  memory cache allowed.

Each cycle is repeated (``--reps``); the report gives median, min and max. Real SSSD
takes about a minute per cold ``id`` here, so it gets fewer repetitions and, in the
sweeps, one cycle per point by default (``--sssd-reps``, ``--sssd-sweep-reps``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perf.results import Results, Sample, ScenarioInfo
from perf.steps import (
    NO_MEMCACHE,
    QUIET_BUDGET,
    QUIET_BUSY_CORES,
    QUIET_MAX_WAIT,
    Outcome,
    QuietGate,
    check_group,
    check_id,
    check_initgroups,
    invalidate_step,
    measure,
    nss_step,
)
from perf.targets import DOMAIN_OPTIONS, CachedTarget, SssdTarget, Target, stop_quietly
from testing import gendir, install, nsenv, procstat, sssd
from testing.gendir import BIGROUPUSER, Expected, Scenario
from testing.slapd import Slapd

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "perf" / "results"
DATA_DIR = REPO / ".benchmarks" / "perf-data"
LEVEL = int(DOMAIN_OPTIONS["ldap_group_nesting_level"])
LARGE_GROUP = "large01"

SWEEP_USER_GROUPS = (250, 500, 1000, 2000, 4000)
SWEEP_LARGE_SIZES = (1000, 5000, 20000)


# -- the progress bar ------------------------------------------------------------
#
# A progress bar on stderr, with no dependency.
#
# Work is counted in *estimated seconds*, not in steps: one cold ``id`` through SSSD
# weighs as much as a thousand warm ones through cached, and a count of steps would give
# a useless ETA. The estimate is corrected as the run goes (elapsed / estimated-done).
# On a terminal the bar redraws in place; otherwise (``make bench`` in a log) one line is
# printed at most every :data:`LOG_INTERVAL` seconds.
LOG_INTERVAL = 15.0
WIDTH = 28


def _fmt(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, total: float, stream: TextIO | None = None) -> None:
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.tty = self.stream.isatty()
        self._last_log = 0.0
        self._label = ""

    def label(self, text: str) -> None:
        self._label = text
        self._draw()

    def advance(self, weight: float) -> None:
        self.done = min(self.total, self.done + weight)
        self._draw()

    def add_total(self, weight: float) -> None:
        self.total += weight

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        frac = self.done / self.total
        eta = elapsed * (1 - frac) / frac if frac > 0.02 else None
        filled = int(WIDTH * frac)
        bar = "#" * filled + "." * (WIDTH - filled)
        text = (
            f"[{bar}] {frac * 100:3.0f}% {_fmt(elapsed)}"
            f" eta {_fmt(eta) if eta is not None else '?'}  {self._label}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text[:160])
            self.stream.flush()
        elif force or now - self._last_log >= LOG_INTERVAL:
            self._last_log = now
            self.stream.write(text + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own above the bar."""
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._draw(force=not self.tty)

    def close(self) -> None:
        self.done = self.total
        self._draw(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(frozen=True)
class Plan:
    """How many cycles of each kind, and warm repetitions inside an id/group cycle."""

    id_cycles: int = 0
    warm_reps: int = 1
    inval: bool = False
    initgr_cycles: int = 0
    group_cycles: int = 0


@dataclass(frozen=True)
class Point:
    key: str  # "bigroupuser", "g250", "l20000"
    scenario: Scenario
    kind: str  # "full", "groups" (user-groups sweep), "large" (large-size sweep)


# Rough seconds per step at bigroupuser's size, for the progress bar only.
ESTIMATES: dict[str, dict[str, float]] = {
    "cached": {
        "fresh": 1.5,
        "id_cold": 1.0,
        "id_warm": 0.5,
        "inval": 1.2,
        "initgr": 0.8,
        "group_cold": 0.3,
        "group_warm": 0.1,
    },
    "sssd": {
        "fresh": 2.0,
        "id_cold": 60.0,
        "id_warm": 8.0,
        "inval": 30.0,
        "initgr": 29.0,
        "group_cold": 0.5,
        "group_warm": 0.05,
    },
}


def points(args: argparse.Namespace) -> list[Point]:
    out = [Point("bigroupuser", BIGROUPUSER, "full")]
    if args.no_sweep:
        return out
    for g in args.sweep_groups:
        if (g, BIGROUPUSER.large_size) != (BIGROUPUSER.user_groups, BIGROUPUSER.large_size):
            out.append(Point(f"g{g}", gendir.sweep(g, BIGROUPUSER.large_size), "groups"))
    for size in args.sweep_large:
        if (BIGROUPUSER.user_groups, size) != (BIGROUPUSER.user_groups, BIGROUPUSER.large_size):
            out.append(Point(f"l{size}", gendir.sweep(BIGROUPUSER.user_groups, size), "large"))
    return out


def plan_for(target: str, point: Point, args: argparse.Namespace) -> Plan:
    sssd_like = target != "cached"
    if point.kind == "full":
        reps = args.sssd_reps if sssd_like else args.reps
        warm = 1 if sssd_like else args.warm_reps
        return Plan(
            id_cycles=reps, warm_reps=warm, inval=True, initgr_cycles=reps, group_cycles=reps
        )
    if sssd_like and point.key not in args.sssd_points:
        return Plan()
    warm = 1 if sssd_like else args.warm_reps
    if point.kind == "groups":
        reps = args.sssd_sweep_reps if sssd_like else args.sweep_reps
        return Plan(id_cycles=reps, warm_reps=warm)
    # SSSD answers a cold getent group in well under a second (deref control): the
    # size sweep gets as many cycles as bigroupuser.
    reps = args.sssd_reps if sssd_like else args.sweep_reps
    return Plan(group_cycles=reps, warm_reps=warm)


def estimate(target: str, point: Point, plan: Plan) -> float:
    e = ESTIMATES.get(target, ESTIMATES["sssd"])
    g = point.scenario.user_groups / BIGROUPUSER.user_groups
    lg = point.scenario.large_size / BIGROUPUSER.large_size
    per_id = e["fresh"] + g * (e["id_cold"] + 2 * plan.warm_reps * e["id_warm"])
    if plan.inval:
        per_id += 2 * g * e["inval"]  # id after -E: server unchanged, one group changed
    return (
        plan.id_cycles * per_id
        + plan.initgr_cycles * (e["fresh"] + g * e["initgr"])
        + plan.group_cycles
        * (e["fresh"] + lg * (e["group_cold"] + 2 * plan.warm_reps * e["group_warm"]))
    )


# -- environment ----------------------------------------------------------------------------


def _cmd(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (p.stdout + p.stderr).strip()


def environment(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    slapd_v = _cmd(["/usr/sbin/slapd", "-VV"]).splitlines()
    dirty = _cmd(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    fs = _cmd(["df", "-T", str(workdir)]).splitlines()
    versions = {}
    for mod in ("ldap3", "lmdb", "msgpack", "matplotlib"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod)
        except Exception:
            versions[mod] = "?"
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "os": "Debian " + Path("/etc/debian_version").read_text().strip()
        if Path("/etc/debian_version").exists()
        else platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "filesystem": fs[-1] if fs else "",
        "python": sys.version.split()[0],
        "python_packages": versions,
        "slapd": slapd_v[0] if slapd_v else "",
        "libnss_sss": install.package_version("libnss-sss"),
        "sssd": install.package_version("sssd-common"),
        "nslcd": install.package_version("nslcd"),
        "cached_commit": _cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "cached_tree_dirty": bool(dirty),
        "cached_tree_changes": dirty.splitlines()[:40],
        "argv": ["python", "-m", "perf.run", *sys.argv[1:]],
        "loadavg_start": os.getloadavg(),
        "clk_tck": procstat.CLK_TCK,
    }


# -- one point, one target --------------------------------------------------------------------


class Runner:
    def __init__(self, args: argparse.Namespace, results: Results, progress: Progress) -> None:
        self.args = args
        self.results = results
        self.progress = progress
        self.gate = QuietGate(args.quiet_wait, args.quiet_budget)

    def record(
        self, target: Target, point: Point, step: str, sample: Sample, weight: float
    ) -> None:
        run = self.results.get_or_add(target.name, point.key, step)
        run.samples.append(sample)
        if not sample.ok:
            self.progress.message(
                f"  ! {target.name} {point.key} {step}: {sample.note or 'wrong answer'}"
            )
        self.progress.advance(weight)

    def snapshot_store(self, target: Target, point: Point, when: str) -> None:
        files = target.store_files()
        per = self.results.stores.setdefault(target.name, {})
        per[f"{point.key}: {when}"] = {k: [v.apparent, v.allocated] for k, v in files.items()}
        mem = self.results.meta.setdefault("peak_rss_kib", {}).setdefault(target.name, {})
        mem[f"{point.key}: {when}"] = {name: _vm_hwm(pid) for name, pid in target.pids().items()}

    def run(self, target: Target, point: Point, exp: Expected, slapd: Slapd, plan: Plan) -> None:
        e = ESTIMATES.get(target.name, ESTIMATES["sssd"])
        g = point.scenario.user_groups / BIGROUPUSER.user_groups
        lg = point.scenario.large_size / BIGROUPUSER.large_size
        user = exp.big_user
        label = f"{target.name} {point.key}"
        level = target.level

        def id_check(out: str) -> tuple[bool, str]:
            return check_id(exp, level, user, out)

        def step(name: str, action: Callable[[], Outcome], weight: float, rep: str) -> Sample:
            self.progress.label(f"{label} {name} {rep}")
            sample = measure(target, slapd, action, self.gate)
            self.record(target, point, name, sample, weight)
            return sample

        def fresh(rep: str) -> None:
            self.progress.label(f"{label} start with an empty cache {rep}")
            target.fresh()
            if target.name not in self.results.configs:
                self.results.configs[target.name] = target.config_text()
            self.progress.advance(e["fresh"])

        for c in range(plan.id_cycles):
            rep = f"(cycle {c + 1}/{plan.id_cycles})"
            fresh(rep)
            step("id_cold", nss_step(target, ["id", user], id_check), g * e["id_cold"], rep)
            for _ in range(plan.warm_reps):
                step(
                    "id_warm_socket",
                    nss_step(target, ["id", user], id_check, NO_MEMCACHE),
                    g * e["id_warm"],
                    rep,
                )
            for _ in range(plan.warm_reps):
                step("id_warm_mc", nss_step(target, ["id", user], id_check), g * e["id_warm"], rep)
            if c == 0:
                self.snapshot_store(target, point, f"after id {user}")
            if plan.inval:
                na: list[str] = []
                self.progress.label(f"{label} invalidate {rep}")
                sample = measure(target, slapd, invalidate_step(target, na), self.gate)
                if na:
                    for s in ("invalidate", "id_after_inval"):
                        self.results.get_or_add(target.name, point.key, s).na = na[0]
                    self.progress.advance(g * e["inval"])
                else:
                    self.record(target, point, "invalidate", sample, 0.0)
                    step(
                        "id_after_inval",
                        nss_step(target, ["id", user], id_check),
                        g * e["inval"],
                        rep,
                    )
                    self.one_group_changed(target, point, exp, slapd, step, g * e["inval"], rep)

        for c in range(plan.initgr_cycles):
            rep = f"(cycle {c + 1}/{plan.initgr_cycles})"
            fresh(rep)
            step(
                "initgr_cold",
                nss_step(
                    target,
                    ["getent", "initgroups", user],
                    lambda out: check_initgroups(exp, level, user, out),
                ),
                g * e["initgr"],
                rep,
            )

        def group_check(out: str) -> tuple[bool, str]:
            return check_group(exp, level, LARGE_GROUP, out)

        argv = ["getent", "group", LARGE_GROUP]
        for c in range(plan.group_cycles):
            rep = f"(cycle {c + 1}/{plan.group_cycles})"
            fresh(rep)
            step("group_cold", nss_step(target, argv, group_check), lg * e["group_cold"], rep)
            for _ in range(plan.warm_reps):
                step(
                    "group_warm_socket",
                    nss_step(target, argv, group_check, NO_MEMCACHE),
                    lg * e["group_warm"],
                    rep,
                )
            for _ in range(plan.warm_reps):
                step(
                    "group_warm_mc", nss_step(target, argv, group_check), lg * e["group_warm"], rep
                )
            if c == 0:
                self.snapshot_store(target, point, f"after getent group {LARGE_GROUP}")
        target.stop()

    def one_group_changed(
        self,
        target: Target,
        point: Point,
        exp: Expected,
        slapd: Slapd,
        step: Callable[[str, Callable[[], Outcome], float, str], Sample],
        weight: float,
        rep: str,
    ) -> None:
        """``id`` after ``-E`` with one of the user's direct groups changed on the
        server (a member added, another user: the user's answer stays the same and is
        checked exactly). The change is undone right after the step, so the
        directory every later step reads is the generated one again."""
        user = exp.big_user
        sc = exp.scenario
        direct = sorted(exp.direct_groups(user))
        group = next(g for g in direct if not exp.group(g).member_groups and g != LARGE_GROUP)
        other = next(u for u in exp.user_names() if u not in exp.members(group, 0))

        def change(op: str) -> None:
            slapd.ldap_modify(
                f"dn: {sc.group_dn(group)}\nchangetype: modify\n"
                f"{op}: member\nmember: {sc.user_dn(other)}\n\n"
            )

        change("add")
        try:
            self.progress.label(f"{target.name} {point.key} invalidate {rep}")
            timing, why = target.invalidate_all()  # not a step: measured just before
            if timing is None:
                self.results.get_or_add(target.name, point.key, "id_after_inval_1changed").na = why
                self.progress.advance(weight)
                return
            step(
                "id_after_inval_1changed",
                nss_step(target, ["id", user], lambda out: check_id(exp, target.level, user, out)),
                weight,
                rep,
            )
        finally:
            change("delete")


def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def scenario_info(point: Point, exp: Expected, ldif: Path) -> ScenarioInfo:
    s = point.scenario
    return ScenarioInfo(
        name=s.name,
        user_groups=s.user_groups,
        large_size=s.large_size,
        users=s.users + 1,
        groups=s.groups,
        big_user=s.big_user,
        large_group=LARGE_GROUP,
        expected_gids=len(exp.initgroups(exp.big_user, LEVEL)),
        expected_members=len(exp.members(LARGE_GROUP, LEVEL)),
        ldif_bytes=ldif.stat().st_size,
    )


def warm_slapd(slapd: Slapd) -> None:
    """Read every entry once, so the first measured daemon does not pay for cold
    database pages that the second one would find warm."""
    subprocess.run(
        [
            "ldapsearch",
            "-x",
            "-LLL",
            "-H",
            slapd.uri,
            "-b",
            slapd.base_dn,
            "-E",
            "pr=1000/noprompt",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=600,
    )


def make_targets(
    names: list[str], workdir: Path, slapd: Slapd, pure_defaults: bool = False
) -> list[Target]:
    out: list[Target] = []
    for name in names:
        if name == "cached":
            out.append(CachedTarget(workdir / "cached", slapd.uri, slapd.base_dn))
        elif name == "sssd":
            out.append(SssdTarget(workdir / "sssd", slapd.uri, slapd.base_dn, pure_defaults))
        elif name == "nslcd":
            from perf.nslcd import NslcdTarget

            out.append(NslcdTarget(workdir / "nslcd", slapd.uri, slapd.base_dn))
    return out


# -- main -----------------------------------------------------------------------------------------


def _csv_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m perf.run",
        description="Benchmark cached (and optionally real SSSD / nslcd) on generated "
        "directories with thousands of groups; write a Markdown report with charts.",
    )
    p.add_argument(
        "--with-sssd",
        action="store_true",
        help="also run real SSSD 2.8 (installs sssd-common, sssd-ldap, sssd-tools "
        "from Debian if missing; nothing is started or enabled on the host)",
    )
    p.add_argument(
        "--with-nslcd",
        action="store_true",
        help="also run nslcd (installs nslcd and libnss-ldapd if missing)",
    )
    p.add_argument(
        "--sssd-pure-defaults",
        action="store_true",
        help="run SSSD without the raised `timeout` and `client_idle_timeout` (see"
        " perf/targets.py): shows SSSD killing its own backend on 4,000 groups",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="output directory (default perf/results/<date>-<host>, with "
        "'-cached' appended when SSSD is not compared)",
    )
    p.add_argument("--reps", type=int, default=5, help="cached: cycles on bigroupuser (5)")
    p.add_argument(
        "--warm-reps", type=int, default=2, help="cached: warm repetitions inside each cycle (2)"
    )
    p.add_argument("--sweep-reps", type=int, default=3, help="cached: cycles per sweep point (3)")
    p.add_argument("--sssd-reps", type=int, default=3, help="SSSD/nslcd: cycles on bigroupuser (3)")
    p.add_argument(
        "--sssd-sweep-reps",
        type=int,
        default=2,
        help="SSSD/nslcd: cycles per point of the groups-per-user sweep (2); the"
        " large-group sweep uses --sssd-reps",
    )
    p.add_argument(
        "--sssd-points",
        default="g250,g500,g1000,g4000,l1000,l20000",
        help="sweep points SSSD/nslcd run (comma list of gN/lN; default all)",
    )
    p.add_argument(
        "--sweep-groups",
        type=_csv_ints,
        default=SWEEP_USER_GROUPS,
        help="groups per user of the sweep (default 250,500,1000,2000,4000)",
    )
    p.add_argument(
        "--sweep-large",
        type=_csv_ints,
        default=SWEEP_LARGE_SIZES,
        help="large-group sizes of the sweep (default 1000,5000,20000)",
    )
    p.add_argument("--no-sweep", action="store_true", help="bigroupuser only")
    p.add_argument(
        "--quick",
        action="store_true",
        help="one cycle of everything, sweep 250,1000 and 1000: a smoke test",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=QUIET_MAX_WAIT,
        metavar="S",
        help="before each step wait up to S seconds for the host to be idle "
        f"(< {QUIET_BUSY_CORES} cores busy); 0 = never wait (default {QUIET_MAX_WAIT:g})",
    )
    p.add_argument(
        "--quiet-budget",
        type=float,
        default=QUIET_BUDGET,
        metavar="S",
        help=f"wait for an idle host S seconds in all, then measure anyway (default"
        f" {QUIET_BUDGET:g})",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DATA_DIR,
        help="generated LDIF files, reused between runs (default .benchmarks/perf-data)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.reps = args.sssd_reps = args.sweep_reps = args.sssd_sweep_reps = 1
        args.warm_reps = 1
        args.sweep_groups = (250, 1000)
        args.sweep_large = (1000,)
    args.sssd_points = {x.strip() for x in args.sssd_points.split(",") if x.strip()}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = nsenv.skip_reason()
    if reason:
        print(f"perf.run: cannot run the NSS steps: {reason}", file=sys.stderr)
        return 2
    names = ["cached"]
    install_log: list[str] = []
    if args.with_sssd:
        try:
            install.ensure_packages(sssd.PACKAGES, ("sssd",), install_log)
        except install.InstallError as e:
            print(f"perf.run: {e}", file=sys.stderr)
            return 2
        why = sssd.skip_reason()
        if why:
            print(f"perf.run: cannot run SSSD: {why}", file=sys.stderr)
            return 2
        names.append("sssd")
    if args.with_nslcd:
        from perf import nslcd

        try:
            install.ensure_packages(nslcd.PACKAGES, ("nslcd",), install_log, nslcd.PROTECT)
        except install.InstallError as e:
            print(f"perf.run: {e}", file=sys.stderr)
            return 2
        names.append("nslcd")

    host = socket.gethostname()
    today = dt.date.today().isoformat()
    suffix = "" if args.with_sssd else "-cached"
    out = args.out or RESULTS_DIR / f"{today}-{host}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="perf-", dir="/tmp"))
    workdir.chmod(0o755)

    results = Results()
    results.meta = environment(args, workdir)
    results.meta["install_log"] = install_log
    results.meta["targets"] = names
    results.meta["level"] = LEVEL
    results.meta["quiet_gate"] = {
        "busy_cores_below": QUIET_BUSY_CORES,
        "max_wait_s": args.quiet_wait,
        "budget_s": args.quiet_budget,
    }
    if "sssd" in names:
        results.meta["sssd_version"] = sssd.SssdDaemon.version()
    if "nslcd" in names:
        from perf import nslcd as nslcd_mod

        results.meta["nslcd_version"] = nslcd_mod.version()

    pts = points(args)
    plans = {(t, p.key): plan_for(t, p, args) for t in names for p in pts}
    results.meta["plans"] = {f"{t} {k}": vars(v) for (t, k), v in plans.items()}
    total = sum(3.0 * p.scenario.users / 5000 for p in pts)  # generate + slapadd
    total += sum(estimate(t, p, plans[(t, p.key)]) for t in names for p in pts)
    progress = Progress(total)
    runner = Runner(args, results, progress)
    started = time.monotonic()
    status = 0
    try:
        for point in pts:
            progress.label(f"{point.key}: generating and loading the directory")
            gen = gendir.generate(point.scenario, args.data_dir, reuse=True)
            exp = gen.expected()
            info = scenario_info(point, exp, gen.ldif)
            results.scenarios[point.key] = info
            slapd_dir = workdir / f"slapd-{point.key}"
            with Slapd(slapd_dir, gen.ldif, point.scenario.base_dn) as server:
                warm_slapd(server)
                info.slapd_db_bytes = sum(
                    f.allocated for f in procstat.file_sizes(server.db_dir).values()
                )
                progress.advance(3.0 * point.scenario.users / 5000)
                for target in make_targets(names, workdir, server, args.sssd_pure_defaults):
                    plan = plans[(target.name, point.key)]
                    if plan == Plan():
                        continue
                    try:
                        runner.run(target, point, exp, server, plan)
                    except Exception as e:  # keep what was measured; say what failed
                        status = 1
                        msg = f"{target.name} {point.key}: {type(e).__name__}: {e}"
                        results.notes.append(msg)
                        progress.message("  ! " + msg)
                        traceback.print_exc()
                    finally:
                        stop_quietly(target)
            shutil.rmtree(slapd_dir, ignore_errors=True)
            results.save(out / "results.json")
    except KeyboardInterrupt:
        status = 130
        results.notes.append("interrupted (Ctrl-C): the figures are partial")
    finally:
        progress.close()
        results.meta["duration_s"] = round(time.monotonic() - started, 1)
        results.meta["quiet_waited_s"] = round(runner.gate.spent, 1)
        results.meta["loadavg_end"] = os.getloadavg()
        results.save(out / "results.json")
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"perf.run: work directory kept: {workdir}", file=sys.stderr)

    from perf import report

    path = report.write_report(out, results)
    print(f"perf.run: report {path}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
