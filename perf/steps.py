"""Measuring one step: the command, its answer, and what it cost everywhere.

:func:`measure` takes, around one client command, the daemon's counters (cached), the
CPU time of every daemon process, of slapd and of the whole host (``/proc``), and the
searches slapd logged (its stats log: logical searches, operations, entries, and the
sum of slapd's own ``etime``). Client commands run through glibc and the real
``libnss_sss`` (``Target.run_nss``) wrapped in :mod:`perf.timecmd`, so the wall time is
the command's own, without the namespace set-up.

Every answer is checked against the generator's expected answers (``testing.gendir``):
a fast wrong answer is not a result.
"""

from __future__ import annotations

import re
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cached import counters as C
from perf.results import Sample
from perf.targets import TIMECMD, Target
from perf.timecmd import Timing, parse
from testing import procstat
from testing.gendir import Expected
from testing.slapd import SearchOp, Slapd, _messages

NO_MEMCACHE = {"SSS_NSS_USE_MEMCACHE": "NO"}
_RESULT_ETIME = re.compile(r"conn=\d+ op=\d+ SEARCH RESULT .*?etime=([0-9.]+)")

# The id_perf-style breakdown of a step (reference §5.2), from cached's counter diff,
# and the rest of the wall time split by the CPU each process used (/proc): what the
# counters do not time — the backend's own Python (walk, validation, filters), the
# responder (cache reads, NSS replies), the client — and what is left: waiting and IPC.
BREAKDOWN = (
    "ldap_wait",
    "ber_decode",
    "entry_txn",
    "ts_write",
    "backend_cpu",
    "responder_cpu",
    "client_cpu",
    "other",
)
BREAKDOWN_LABELS = {
    "ldap_wait": "LDAP wait (server, network, receive loop)",
    "ber_decode": "BER decoding",
    "entry_txn": "entry-store transactions",
    "ts_write": "timestamp writes",
    "backend_cpu": "backend CPU, the rest (walk, validation, filters)",
    "responder_cpu": "responder CPU (cache reads, replies)",
    "client_cpu": "client CPU (id, glibc, libnss_sss)",
    "other": "other (waiting, IPC, scheduling)",
}


@dataclass(frozen=True)
class Outcome:
    timing: Timing | None
    ok: bool
    note: str = ""


def _own_cpu() -> float:
    """CPU of this process and of every child it has reaped."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def host_busy_seconds() -> float:
    """CPU-seconds the whole host has spent busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / procstat.CLK_TCK


# Other engineers' test runs share this 2-core machine. Before each step we wait (up to
# QUIET_MAX_WAIT seconds) until the host has been nearly idle for a short window, and
# every sample records what the whole host used meanwhile (Sample.host_busy), so the
# report can tell a slow daemon from a busy machine.
QUIET_BUSY_CORES = 0.3
QUIET_WINDOW = 0.1  # 20 clock ticks of 2 cores: enough to tell idle from busy
QUIET_MAX_WAIT = 10.0
# A run waits at most this long in all (then it measures whatever the load): a busy
# shared machine must not turn `make bench` into an hour.
QUIET_BUDGET = 300.0


def speed_probe(rounds: int = 3) -> float:
    """Seconds a fixed piece of pure-Python work takes on this host now, the best of
    ``rounds``: dict and list work like the daemons' (about 10 ms on an idle 2-core
    test machine). The host's other tenants move this machine's speed by half between
    minutes and by 40 % between seconds (a loop timed back to back: 0.93 s, then
    0.65 s), which its own load figures do not show; a step's time compares across
    runs only next to the probe taken before it (report: "host speed probe")."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        d: dict[int, int] = {}
        for i in range(20_000):
            d[i] = i * 2
        out = [d[i] + 1 for i in range(20_000) if i % 3]
        best = min(best, time.perf_counter() - t0)
        del out
    return best


class QuietGate:
    """Waits before each step until the host is nearly idle, within a total budget."""

    def __init__(self, max_wait: float = QUIET_MAX_WAIT, budget: float = QUIET_BUDGET) -> None:
        self.max_wait = max_wait
        self.budget = budget
        self.spent = 0.0

    def wait(self) -> float:
        """Seconds waited: until the host used less than QUIET_BUSY_CORES over
        QUIET_WINDOW, or the step's or the run's allowance is used up."""
        allowance = min(self.max_wait, self.budget - self.spent)
        if allowance <= 0:
            return 0.0
        start = time.monotonic()
        while True:
            b0 = host_busy_seconds()
            time.sleep(QUIET_WINDOW)  # a measurement window, not a readiness wait
            busy = (host_busy_seconds() - b0) / QUIET_WINDOW
            waited = time.monotonic() - start
            if busy < QUIET_BUSY_CORES or waited >= allowance:
                self.spent += waited
                return waited


NO_GATE = QuietGate(0.0, 0.0)


def slapd_etime(slapd: Slapd, offset: int) -> float:
    """Sum of ``etime`` (slapd's time per operation) over the search results logged
    after ``offset``."""
    try:
        with open(slapd.log_path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except FileNotFoundError:
        return 0.0
    total = 0.0
    for message in _messages(text.splitlines()):
        m = _RESULT_ETIME.search(message)
        if m:
            total += float(m.group(1))
    return total


_VALUE = re.compile(r"=([^()]*)")
_REPEATED = re.compile(r"(\([^()]*\))\1+")
SCOPES = {0: "base", 1: "one", 2: "sub"}
MAX_SHAPES = 8


def search_shape(op: SearchOp) -> str:
    """A search with its values blanked out: ``sub (&(member=…)(objectClass=…))``.
    Runs of identical terms (a batched OR of 200 DNs) collapse to ``(member=…)×n``."""
    filt = _VALUE.sub(lambda m: "=*" if m.group(1) == "*" else "=…", op.filter)
    filt = _REPEATED.sub(lambda m: m.group(1) + "×n", filt)
    return f"{SCOPES.get(op.scope, op.scope)} {filt}{'…' if op.filter_cut else ''}"


def search_shapes(searches: list[list[SearchOp]]) -> dict[str, int]:
    """How many logical searches of each shape, the most frequent first."""
    counts = Counter(search_shape(pages[0]) for pages in searches)
    top = counts.most_common(MAX_SHAPES)
    rest = sum(counts.values()) - sum(n for _, n in top)
    out = dict(top)
    if rest:
        out["(other shapes)"] = rest
    return out


def breakdown(sample: Sample) -> dict[str, float] | None:
    """Seconds per category of :data:`BREAKDOWN` (None without counters).

    ``ldap.wait`` is the receive loop's time without our BER decoding (``ldap.ber``,
    shown apart; cached/ldap/client.py reads the answers itself since it stopped using
    ldap3's response objects). The backend's CPU (/proc) beyond what the counters
    timed (BER decoding and the store writes, all CPU-bound) is its Python; the
    responder's (with the monitor's, ~0) and the client's CPU come next; ``other`` is
    what remains of the wall time (waiting for each other, IPC). The receive loop's own
    CPU (framing) counts in both LDAP wait and backend CPU, and the processes may
    overlap a little on the 2 cores: the parts can then add up to a little more than
    the wall time, and ``other`` is 0. /proc's CPU has a 10 ms resolution.
    """
    d = sample.counters
    if d is None:
        return None

    def sec(name: str) -> float:
        return float(d.get(name, [0, 0.0, 0])[1])

    ber = sec(C.LDAP_BER)
    parts = {
        "ldap_wait": sec(C.LDAP_WAIT),
        "ber_decode": ber,
        "entry_txn": sec(C.ENTRY_TXN),
        "ts_write": sec(C.TS_WRITE),
    }
    backend = sum(v for k, v in sample.daemon_cpu.items() if "backend" in k)
    parts["backend_cpu"] = max(0.0, backend - ber - parts["entry_txn"] - parts["ts_write"])
    parts["responder_cpu"] = sum(
        v for k, v in sample.daemon_cpu.items() if "backend" not in k
    )
    parts["client_cpu"] = sample.client_cpu
    parts["other"] = max(0.0, sample.wall - sum(parts.values()))
    return parts


def measure(
    target: Target, slapd: Slapd, action: Callable[[], Outcome], gate: QuietGate = NO_GATE
) -> Sample:
    waited = gate.wait()
    probe = speed_probe()
    before = target.counters()
    pids = target.pids()
    slapd_pid = slapd.pid or 0
    cpu0 = procstat.cpu_seconds(pids)
    s0 = procstat.cpu_seconds({"slapd": slapd_pid})["slapd"]
    ours0 = _own_cpu()
    h0 = host_busy_seconds()
    t0 = time.monotonic()
    offset = slapd.log_offset()

    outcome = action()

    elapsed = time.monotonic() - t0
    # A process that is gone now was killed or restarted during the step (SSSD's
    # watchdog does that to sssd_be); say so next to the figure.
    gone = [f"{name} (pid {pid})" for name, pid in pids.items() if not procstat.pid_alive(pid)]
    h1 = host_busy_seconds()
    ours = _own_cpu() - ours0
    s1 = procstat.cpu_seconds({"slapd": slapd_pid})["slapd"]
    cpu1 = procstat.cpu_seconds(pids)
    logical = slapd.logical_searches(offset)
    after = target.counters()

    sample = Sample(
        wall=outcome.timing.wall if outcome.timing else 0.0,
        client_cpu=outcome.timing.cpu if outcome.timing else 0.0,
        daemon_cpu={k: round(max(0.0, cpu1[k] - cpu0.get(k, 0.0)), 3) for k in cpu1},
        slapd_cpu=round(s1 - s0, 3),
        host_busy=round(h1 - h0, 3),
        searches_slapd=len(logical),
        search_ops=sum(len(pages) for pages in logical),
        entries=sum(op.nentries or 0 for pages in logical for op in pages),
        slapd_etime=round(slapd_etime(slapd, offset), 6),
        ok=outcome.ok,
        note="; ".join(
            filter(None, [outcome.note, *(f"{g} exited during the step" for g in gone)])
        ),
        waited=round(waited, 2),
        search_shapes=search_shapes(logical),
        probe=round(probe, 6),
    )
    # Everything else the host ran meanwhile, in cores: the host's busy time minus the
    # daemon, slapd, and our own process tree (this script, the namespace wrapper, the
    # timing interpreter and the client command, all reaped by us: RUSAGE_CHILDREN).
    accounted = sample.daemon_cpu_total + sample.slapd_cpu + ours
    sample.other_load = round(max(0.0, sample.host_busy - accounted) / max(elapsed, 1e-3), 3)
    if before is not None and after is not None:
        diff = C.diff(after, before)
        sample.counters = {
            k: [v.count, round(v.seconds, 6), v.amount]
            for k, v in diff.items()
            if v.count or v.seconds or v.amount
        }
        sample.searches_daemon = diff[C.LDAP_SEARCH].count if C.LDAP_SEARCH in diff else 0
    return sample


# -- commands and their answers ------------------------------------------------------------


def timed_nss(
    target: Target, argv: list[str], env: dict[str, str] | None = None
) -> tuple[Timing | None, str, str]:
    """Run ``argv`` through libnss_sss, timed; (timing, stdout, other stderr)."""
    p = target.run_nss([*TIMECMD, *argv], env=env)
    timing, rest = parse(p.stderr)
    return timing, p.stdout, rest


_ID_GROUP = re.compile(r"(\d+)(?:\(([^)]*)\))?")


def parse_id(text: str) -> tuple[int, int, list[tuple[int, str | None]]] | None:
    """``uid=…(n) gid=…(n) groups=g(n),g,…`` → (uid, gid, [(gid, name or None)])."""
    m = re.match(r"uid=(\d+)\S* gid=(\d+)\S*(?: groups=(\S+))?", text.strip())
    if not m:
        return None
    groups = [(int(g), name) for g, name in _ID_GROUP.findall(m.group(3) or "")]
    return int(m.group(1)), int(m.group(2)), groups


def check_id(exp: Expected, level: int, user: str, stdout: str) -> tuple[bool, str]:
    parsed = parse_id(stdout)
    if parsed is None:
        return False, f"unparsable id output: {stdout[:200]!r}"
    _, _, groups = parsed
    want = exp.initgroups(user, level)
    got = {g for g, _ in groups}
    unnamed = sum(1 for _, name in groups if not name)
    if got != want:
        return False, (
            f"id: {len(got)} gids, expected {len(want)}"
            f" (missing {len(want - got)}, extra {len(got - want)})"
        )
    if unnamed:
        return False, f"id: {unnamed} of {len(groups)} gids without a group name"
    return True, ""


def check_initgroups(exp: Expected, level: int, user: str, stdout: str) -> tuple[bool, str]:
    parts = stdout.split()
    if not parts or parts[0] != user:
        return False, f"unexpected getent initgroups output: {stdout[:200]!r}"
    got = {int(x) for x in parts[1:]}
    # getent initgroups prints the supplementary gids; the primary gid may be absent.
    want = exp.initgroups(user, level)
    missing = want - got - {exp.user(user).gid}
    extra = got - want
    if missing or extra:
        return False, f"initgroups: missing {len(missing)}, extra {len(extra)} of {len(want)}"
    return True, ""


def check_group(exp: Expected, level: int, group: str, stdout: str) -> tuple[bool, str]:
    line = stdout.strip()
    fields = line.split(":")
    if len(fields) != 4 or fields[0] != group:
        return False, f"unexpected getent group output: {line[:200]!r}"
    got = set(filter(None, fields[3].split(",")))
    want = exp.members(group, level)
    if int(fields[2]) != exp.group(group).gid:
        return False, f"group {group}: gid {fields[2]}, expected {exp.group(group).gid}"
    if got != want:
        return False, (
            f"group {group}: {len(got)} members, expected {len(want)}"
            f" (missing {len(want - got)}, extra {len(got - want)})"
        )
    return True, ""


def nss_step(
    target: Target,
    argv: list[str],
    check: Callable[[str], tuple[bool, str]],
    env: dict[str, str] | None = None,
) -> Callable[[], Outcome]:
    def action() -> Outcome:
        timing, stdout, rest = timed_nss(target, argv, env)
        if timing is None:
            return Outcome(None, False, f"no timing (namespace failed?): {rest[-300:]}")
        if timing.rc != 0:
            return Outcome(timing, False, f"exit {timing.rc}: {rest.strip()[-300:]}")
        ok, note = check(stdout)
        return Outcome(timing, ok, note)

    return action


def invalidate_step(target: Target, na: list[str]) -> Callable[[], Outcome]:
    """``cache -E`` / ``sss_cache -E``; appends the reason to ``na`` when unavailable."""

    def action() -> Outcome:
        timing, why = target.invalidate_all()
        if timing is None:
            na.append(why)
            return Outcome(None, False, why)
        return Outcome(timing, True)

    return action
