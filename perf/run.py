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
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from cached import counters as C
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
from perf.timecmd import Timing
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



# -- the scale of one host (--scale) --------------------------------------------------------------
#
# The same daemon on ever bigger directories (testing.gendir.scale: bigroupuser's 5,000
# users up to 200,000 users and 50,000 groups): cold and warm `id` of the big user and
# `getent group` of the biggest group, `cache -E` and the lookups after it, every
# process's memory, the stores on disk, a restart with the full cache, and what the
# memory cache does when a record or the users outgrow it. Each figure's growth is an
# exponent, log(t2/t1)/log(n2/n1), against the count that drives it (SCALE_DRIVERS).

# The steps of one scale cycle, in order, each measured with steps.measure.
SCALE_STEPS: dict[str, str] = {
    "id_cold": "cold `id {user}` (empty cache)",
    "id_warm_socket": "warm `id {user}`, socket only",
    "id_warm_mc": "warm `id {user}`, memory cache allowed",
    "group_cold": "cold `getent group {group}`",
    "group_warm_socket": "warm `getent group {group}`, socket only",
    "group_warm_mc": "warm `getent group {group}`, memory cache allowed",
    "invalidate": "`{inval}` (everything cached expired)",
    "id_after_inval": "`id {user}` after it (server unchanged: revalidation)",
    "group_after_inval": "`getent group {group}` after it",
    "restart": "start with the full cache (until ready)",
    "id_after_restart": "`id {user}` after the restart, socket only",
}
# What each step's cost grows with: the big user's gids (level 2, primary included),
# the biggest group's members, or the entries the cache holds after the cycle.
SCALE_DRIVERS: dict[str, str] = {
    "id_cold": "gids",
    "id_warm_socket": "gids",
    "id_warm_mc": "gids",
    "group_cold": "members",
    "group_warm_socket": "members",
    "group_warm_mc": "members",
    "invalidate": "entries",
    "id_after_inval": "gids",
    "group_after_inval": "members",
    "restart": "entries",
    "id_after_restart": "gids",
}
SCALE_DRIVER_LABELS = {
    "gids": "the big user's gids",
    "members": "the biggest group's members",
    "entries": "users + groups in the directory",
}


def biggest_group(exp: Expected) -> str:
    """The group with the most members (``largest`` in the scale directories, the
    first large group in bigroupuser)."""
    sc = exp.scenario
    return gendir.LARGEST_GROUP if sc.largest_size else LARGE_GROUP


def _restart(target: Target) -> Outcome:
    """Stop the daemon and start it on the stores it left; the start is timed."""
    if not isinstance(target, CachedTarget | SssdTarget):
        return Outcome(None, False, f"{target.name} cannot be restarted here")
    return Outcome(Timing(target.restart(), 0.0, 0.0, 0), True)


def _memory(target: Target) -> dict[str, list[int]]:
    """VmRSS and VmHWM (KiB) of each of the target's processes."""
    return {
        name: [procstat.proc_kib(pid, "VmRSS"), procstat.proc_kib(pid, "VmHWM")]
        for name, pid in target.pids().items()
    }


def _stores(target: Target) -> dict[str, list[int]]:
    return {k: [v.apparent, v.allocated] for k, v in target.store_files().items()}


class ScaleRunner:
    """One target through the scale cycle at one size; figures into ``out``."""

    def __init__(self, out: dict[str, Any], gate: QuietGate, deadline: float = math.inf) -> None:
        """``deadline``: time.monotonic() after which no step starts (a size whose
        steps would hold the benchmark lock too long is left unfinished, and says so)."""
        self.out = out
        self.gate = gate
        self.deadline = deadline

    def cycle(self, target: Target, exp: Expected, slapd: Slapd, rep: int) -> None:
        user, group = exp.big_user, biggest_group(exp)
        level = target.level
        steps: dict[str, list[dict[str, Any]]] = self.out.setdefault("steps", {})

        def id_check(out: str) -> tuple[bool, str]:
            return check_id(exp, level, user, out)

        def group_check(out: str) -> tuple[bool, str]:
            return check_group(exp, level, group, out)

        def step(name: str, action: Callable[[], Outcome]) -> Sample:
            print(f"perf.run --scale: {target.name} {exp.scenario.name} {name} #{rep}",
                  file=sys.stderr, flush=True)  # fmt: skip
            try:
                if time.monotonic() > self.deadline:
                    raise TimeoutError("not started: past the run's time budget")
                sample = measure(target, slapd, action, self.gate)
            except TimeoutError as e:
                sample = Sample(wall=0.0, ok=False, note=str(e))
            except subprocess.TimeoutExpired as e:
                sample = Sample(wall=float(e.timeout), ok=False, note=f"not within {e.timeout} s")
            steps.setdefault(name, []).append(asdict(sample))
            if not sample.ok:
                print(f"  ! {name}: {sample.note}", file=sys.stderr, flush=True)
            return sample

        id_argv, group_argv = ["id", user], ["getent", "group", group]
        target.fresh()
        self.out.setdefault("config", target.config_text())
        if not step("id_cold", nss_step(target, id_argv, id_check)).ok:
            return  # the rest would measure a cold lookup again, or wait as long
        step("id_warm_socket", nss_step(target, id_argv, id_check, NO_MEMCACHE))
        step("id_warm_mc", nss_step(target, id_argv, id_check))
        if not step("group_cold", nss_step(target, group_argv, group_check)).ok:
            return
        step("group_warm_socket", nss_step(target, group_argv, group_check, NO_MEMCACHE))
        step("group_warm_mc", nss_step(target, group_argv, group_check))
        if rep == 0:
            self.out["memory_kib"] = _memory(target)
            self.out["stores"] = _stores(target)
        na: list[str] = []
        step("invalidate", invalidate_step(target, na))
        if not na:
            step("id_after_inval", nss_step(target, id_argv, id_check))
            step("group_after_inval", nss_step(target, group_argv, group_check))
        step("restart", lambda: _restart(target))
        step("id_after_restart", nss_step(target, id_argv, id_check, NO_MEMCACHE))
        if rep == 0:
            self.out["memory_after_restart_kib"] = _memory(target)


def memcache_capacity(
    workdir: Path, slapd: Slapd, exp: Expected, mib: int = 1, users: int = 20_000
) -> dict[str, Any]:
    """What the memory cache does when it is too small, with ``memcache_size_group``
    and ``memcache_size_passwd`` at ``mib``: the biggest group (its record does not
    fit: the log line, and the answer through the socket), and ``users`` users looked
    up twice (more than the passwd file holds: how many of the second pass reached
    the responder, from its request counter, and so were not in the memory cache)."""
    group = biggest_group(exp)
    sizes = {"memcache_size_group": mib, "memcache_size_passwd": mib}
    t = CachedTarget(workdir, slapd.uri, slapd.base_dn, sizes)
    out: dict[str, Any] = {**sizes, "group": group}
    try:
        t.fresh()
        d = t._d()
        p = t.run_nss(["getent", "group", group])
        ok, note = check_group(exp, t.level, group, p.stdout)
        out["group_answer_ok"] = ok and p.returncode == 0
        out["group_note"] = note
        names = exp.user_names()[:users]
        out["users"] = len(names)
        served = []
        for attempt in range(2):
            before = d.counters()
            for i in range(0, len(names), 5000):  # getent takes many keys per run
                p = t.run_nss(["getent", "passwd", *names[i : i + 5000]])
                if p.returncode != 0:
                    raise RuntimeError(f"getent passwd (pass {attempt + 1}): {p.stderr[-300:]}")
            served.append(C.diff(d.counters(), before)[C.NSS_REQUEST].count)
        out["socket_requests_per_pass"] = served
        logged = [line for line in d.log_text().splitlines() if "memory cache" in line]
        out["log_lines"] = logged[:3]
        out["log_lines_count"] = len(logged)
        out["files"] = _stores(t)
    finally:
        stop_quietly(t)
    return out


def _exponent(v1: float, v2: float, n1: float, n2: float) -> float | None:
    if min(v1, v2, n1, n2) <= 0 or n1 == n2:
        return None
    return math.log(v2 / v1) / math.log(n2 / n1)


def _median(samples: list[dict[str, Any]], key: str = "wall") -> float | None:
    good = [s[key] for s in samples if s.get("ok")]
    return statistics.median(good) if good else None


def scale_report(out_dir: Path, data: dict[str, Any]) -> Path:
    """report.md of a scale run: the table per target with exponents."""
    sizes = [str(n) for n in data["sizes"] if str(n) in data["scenarios"]]
    lines = ["# The scale of one host", "", "Runs (each under `flock /work/perf.lock`):", ""]
    for m in data.get("runs", [data["meta"]]):
        start = ", ".join(f"{x:.2f}" for x in m["loadavg_start"])
        end = ", ".join(f"{x:.2f}" for x in m.get("loadavg_end") or ())
        lines.append(
            f"- `{' '.join(m['argv'])}`: {m['date']}, commit {m['cached_commit']}"
            f"{' (+ local changes)' if m.get('cached_tree_dirty') else ''}, load average"
            f" {start} at the start, {end or '?'} at the end"
        )
    lines += [
        "",
        "## The directories",
        "",
        "| users | groups | entries | the big user's gids (level 2) | biggest group |"
        " LDIF MB | slapadd s | slapd DB MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        i = data["scenarios"][n]
        lines.append(
            f"| {i['users']:,} | {i['groups']:,} | {i['entries']:,} | {i['gids']:,} |"
            f" {i['group']} ({i['members']:,}) | {i['ldif_bytes'] / 1e6:.0f} |"
            f" {i['slapadd_s']:.1f} | {i['slapd_db_bytes'] / 1e6:.0f} |"
        )
    for target, per_size in data["targets"].items():
        done = [n for n in sizes if n in per_size]
        lines += [
            "",
            f"## {target}",
            "",
            "Median wall seconds (runs in brackets); exponent = log(t2/t1)/log(n2/n1)"
            " between neighbouring sizes, n the count in the last column.",
            "",
            "| step | " + " | ".join(f"{int(n):,} users" for n in done)
            + " | exponents | n |",
            "|---|" + "---:|" * len(done) + "---|---|",
        ]
        for step, label in SCALE_STEPS.items():
            driver = SCALE_DRIVERS[step]
            cells: list[str] = []
            vals: list[float | None] = []
            for n in done:
                samples = per_size[n].get("steps", {}).get(step, [])
                med = _median(samples)
                vals.append(med)
                if med is None:
                    note = next((s["note"] for s in samples if s.get("note")), "")
                    cells.append(f"— {note[:60]}" if note else "—")
                else:
                    cells.append(f"{med:.3f} ({len([s for s in samples if s['ok']])})")
            exps = []
            for a, b, na, nb in zip(vals, vals[1:], done, done[1:], strict=False):
                e = None
                if a is not None and b is not None:
                    e = _exponent(a, b, data["scenarios"][na][driver],
                                  data["scenarios"][nb][driver])  # fmt: skip
                exps.append("—" if e is None else f"{e:.2f}")
            text = label.format(user="bigroupuser", group="<biggest>", inval=data["inval"][target])
            lines.append(
                f"| {text} | " + " | ".join(cells)
                + f" | {', '.join(exps)} | {SCALE_DRIVER_LABELS[driver]} |"
            )
        lines += [
            "",
            "What each step cost beyond its wall time (medians): entries slapd returned,"
            " slapd's CPU seconds, the daemon's CPU seconds (all its processes); the"
            " exponent of the wall time against the entries returned:",
            "",
            "| step | " + " | ".join(f"{int(n):,}: entries / slapd / daemon" for n in done)
            + " | exponents (entries) |",
            "|---|" + "---:|" * len(done) + "---|",
        ]
        for step in SCALE_STEPS:
            cells = []
            walls: list[float | None] = []
            entries: list[float | None] = []
            for n in done:
                samples = [s for s in per_size[n].get("steps", {}).get(step, []) if s["ok"]]
                if not samples:
                    cells.append("—")
                    walls.append(None)
                    entries.append(None)
                    continue
                ent = statistics.median(s["entries"] for s in samples)
                scpu = statistics.median(s["slapd_cpu"] for s in samples)
                dcpu = statistics.median(sum(s["daemon_cpu"].values()) for s in samples)
                cells.append(f"{ent:,.0f} / {scpu:.2f} / {dcpu:.2f}")
                walls.append(statistics.median(s["wall"] for s in samples))
                entries.append(ent)
            exps = []
            for i in range(len(done) - 1):
                a, b, ea, eb = walls[i], walls[i + 1], entries[i], entries[i + 1]
                e = None
                if a is not None and b is not None and ea is not None and eb is not None:
                    e = _exponent(a, b, ea, eb)
                exps.append("—" if e is None else f"{e:.2f}")
            lines.append(f"| {step} | " + " | ".join(cells) + f" | {', '.join(exps)} |")
        lines += ["", "Memory (VmRSS / VmHWM, MiB) after the lookups, and after the restart:", ""]
        lines += ["| process | " + " | ".join(f"{int(n):,}" for n in done) + " |",
                  "|---|" + "---:|" * len(done)]  # fmt: skip
        names = sorted({k for n in done for k in per_size[n].get("memory_kib", {})})
        for name in names:
            cells = []
            for n in done:
                m = per_size[n].get("memory_kib", {}).get(name)
                r = per_size[n].get("memory_after_restart_kib", {}).get(name)
                cell = f"{m[0] / 1024:.0f} / {m[1] / 1024:.0f}" if m else "—"
                if r:
                    cell += f"; {r[0] / 1024:.0f} after restart"
                cells.append(cell)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "Stores on disk after the lookups (MB allocated; apparent size):", ""]
        lines += ["| file | " + " | ".join(f"{int(n):,}" for n in done) + " |",
                  "|---|" + "---:|" * len(done)]  # fmt: skip
        files = sorted({k for n in done for k in per_size[n].get("stores", {})})
        for f in files:
            cells = []
            for n in done:
                v = per_size[n].get("stores", {}).get(f)
                cells.append(f"{v[1] / 1e6:.1f} ({v[0] / 1e6:.1f})" if v else "—")
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
    mc = data.get("memcache")
    if mc:
        lines += ["", "## The memory cache when it is too small", "", "```json",
                  json.dumps(mc, indent=1), "```"]  # fmt: skip
    lines += ["", "Raw figures: `results.json`."]
    if (out_dir / "notes.md").exists():
        lines.append("Why each step grows as it does: [notes.md](notes.md).")
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def scale_main(args: argparse.Namespace) -> int:
    """``--scale``: the scale table (see the section comment)."""
    out = args.out or RESULTS_DIR / f"{dt.date.today().isoformat()}-scale-one-host"
    if args.scale_render:
        data = json.loads((out / "results.json").read_text())
        print(f"perf.run --scale: report {scale_report(out, data)}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="scale-", dir="/tmp"))
    workdir.chmod(0o755)
    data = {
        "meta": environment(args, workdir),
        "sizes": list(args.scale),
        "scenarios": {},
        "targets": {},
        "inval": {"cached": "cached cache -E", "sssd": "sss_cache -E"},
    }
    path = out / "results.json"
    if path.exists() and args.scale_resume:
        old = json.loads(path.read_text())
        data["scenarios"] = old.get("scenarios", {})
        data["targets"] = old.get("targets", {})
        data["memcache"] = old.get("memcache")
        data["sizes"] = sorted({*old.get("sizes", []), *args.scale})
        data["runs"] = old.get("runs", [old["meta"]])
    data.setdefault("runs", []).append(data["meta"])
    names = ["cached", *(["sssd"] if args.scale_sssd else [])]
    gate = QuietGate(args.quiet_wait, args.quiet_budget)

    def save() -> None:
        data["meta"]["loadavg_end"] = list(os.getloadavg())
        path.write_text(json.dumps(data, indent=1))

    status = 0
    try:
        for n in args.scale:
            sc = gendir.scale(n)
            gen = gendir.generate(sc, args.data_dir, reuse=True)
            exp = gen.expected()
            group = biggest_group(exp)
            t0 = time.monotonic()
            with Slapd(workdir / f"slapd-{n}", gen.ldif, sc.base_dn) as server:
                info = {
                    "users": sc.users + 1,
                    "groups": sc.groups,
                    "entries": sc.users + 1 + sc.groups,
                    "gids": len(exp.initgroups(exp.big_user, LEVEL)),
                    "group": group,
                    "members": len(exp.members(group, LEVEL)),
                    "ldif_bytes": gen.ldif.stat().st_size,
                    "slapadd_s": round(time.monotonic() - t0, 1),
                }
                warm_slapd(server)
                info["slapd_db_bytes"] = sum(
                    f.allocated for f in procstat.file_sizes(server.db_dir).values()
                )
                data["scenarios"][str(n)] = info
                for name in names:
                    if name == "sssd" and n not in args.scale_sssd:
                        continue
                    if name == "cached" and args.scale_reps < 1:
                        continue  # SSSD alone, added to cached's figures (--scale-resume)
                    per: dict[str, Any] = {}
                    data["targets"].setdefault(name, {})[str(n)] = per
                    (target,) = make_targets([name], workdir, server)
                    if isinstance(target, SssdTarget):
                        target.client_timeout = args.scale_sssd_timeout
                    reps = args.scale_reps if name == "cached" else 1
                    deadline = time.monotonic() + args.scale_budget
                    try:
                        for rep in range(reps):
                            ScaleRunner(per, gate, deadline).cycle(target, exp, server, rep)
                            save()
                    except Exception as e:  # keep what was measured; say what failed
                        status = 1
                        per["error"] = f"{type(e).__name__}: {e}"
                        traceback.print_exc()
                    finally:
                        stop_quietly(target)
                if args.scale_memcache and n == max(args.scale):
                    data["memcache"] = memcache_capacity(workdir / "mc-small", server, exp)
                save()
            shutil.rmtree(workdir / f"slapd-{n}", ignore_errors=True)
    finally:
        save()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"perf.run --scale: report {scale_report(out, data)}", file=sys.stderr)
    return status

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
    p.add_argument(
        "--scale",
        type=_csv_ints,
        metavar="N,N,…",
        help="instead: the scale of one host, on the directories of N users"
        " (testing.gendir.scale; 5000 is bigroupuser; e.g. 5000,32000,200000)",
    )
    p.add_argument(
        "--scale-reps",
        type=int,
        default=3,
        help="--scale: cycles per size for cached (3; 0: cached not run)",
    )
    p.add_argument(
        "--scale-sssd",
        type=_csv_ints,
        default=(),
        metavar="N,N,…",
        help="--scale: the sizes SSSD 2.8.2 runs too (one cycle each)",
    )
    p.add_argument(
        "--scale-sssd-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="--scale: SSSD's lookups are given up after S seconds (600)",
    )
    p.add_argument(
        "--scale-memcache",
        action="store_true",
        help="--scale: at the largest size, the memory cache too small (1 MiB group and"
        " passwd files: the biggest group, 20,000 users looked up twice)",
    )
    p.add_argument(
        "--scale-budget",
        type=float,
        default=math.inf,
        metavar="S",
        help="--scale: no step starts later than S seconds after a target's first at a"
        " size (the steps left are marked not started)",
    )
    p.add_argument(
        "--scale-render",
        action="store_true",
        help="--scale: only render report.md again from the results.json in --out",
    )
    p.add_argument(
        "--scale-resume",
        action="store_true",
        help="--scale: add to the results.json in --out (other sizes or targets)",
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
    if args.scale or args.scale_render:
        if args.scale_sssd:
            try:
                install.ensure_packages(sssd.PACKAGES, ("sssd",), [])
            except install.InstallError as e:
                print(f"perf.run: {e}", file=sys.stderr)
                return 2
        return scale_main(args)
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
