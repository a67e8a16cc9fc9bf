"""A fleet of hosts on one directory: what N cached instances, and a few SSSD 2.8.2
instances beside them, cost the server through a cold start, an expiry wave, an outage
and a steady period.

    python -m perf.fleet --hosts 50 --sssd 5 --lifetime 60 --out perf/results/DIR

Every host is a daemon of its own (its configuration, stores, sockets and, for cached,
a ``machine_id_file`` with a distinct id, so each host draws its own offsets,
cached/jitter.py), all on one slapd serving the bigroupuser directory
(testing/gendir.py). A host's lookup is ``id USER`` through glibc and the real
libnss_sss in a private mount namespace bound to that host's pipes (testing/nsenv.py),
with ``SSS_NSS_USE_MEMCACHE=NO``: every lookup reaches the responder, as on a host
without ``/var/lib/sss/mc`` or on a memory-cache miss, the case where an expired entry
can make a lookup wait. ``--user big`` asks for ``bigroupuser`` (2,085 groups at
nesting level 2) on every host; ``--user twenty`` asks on each host for a different
ordinary user of the same directory, one in exactly 20 groups.

``--per-request REPS`` runs no fleet: one host's cold ``id`` goes through a recording
proxy, and each of its requests is sent again REPS times to see what it costs slapd
(:func:`per_request`; perf/results/2026-12-07-cold-slapd-cost).

The cached fleet runs first, then is stopped, then the SSSD fleet runs the same phases
against the same slapd, so slapd's log and CPU in a phase belong to one fleet:

* ``cold``: every daemon started with an empty cache, then one lookup per host, all at
  once;
* ``expiry``: ``cached cache -E`` / ``sss_cache -E`` on every host at once, then one
  lookup each, all at once (the worst case: every entry expired at the same moment);
* ``steady``: ``--steady`` lifetimes of lookups every ``--period`` seconds per host,
  spread over the period; refresh ahead on (cached's default; SSSD's default is off),
  ``entry_cache_timeout = --lifetime``: a scaled day, the entry lifetime and the
  refresh timers derived from it scaled by ``lifetime / 5400`` (the connection
  lifetime and the offline retries are not);
* ``outage``: slapd stopped for ``--down`` seconds (default ``--lifetime`` + 10 s:
  every entry expired meanwhile), each host looking up every ``--period`` seconds
  throughout (answered from the stores), then started again: the ``--recovery``
  seconds after it, the hosts still looking up (each comes back at its offline retry,
  ``offline_timeout`` plus its offset, doubling up to ``offline_timeout_max``: pass
  ``--opt offline_timeout_max=60`` to have every host back within 90 s of the
  directory, and a short ``--recovery``; then cached's catch-up run, this host's share
  of at most a quarter of the lifetime later).

Per phase: slapd's search operations (its stats log, root DSE reads left out; every
page counts, as the server sees them), per second (1-s buckets of slapd's own
timestamps); slapd's CPU seconds (``/proc``); the lookups' p50/p99 (wall time around
the namespace's command, its set-up included: a few ms); for cached, per host from its
own counters, the logical searches, the bytes received from LDAP, and the lookups that
waited on the backend (``nss.wait``: a missing or expired entry); for SSSD, the bytes
through a counting proxy in front of slapd (testing/faultproxy.py). ``results.json``
and ``report.md`` with charts go to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cached import counters as C
from perf.ab import DATA_DIR
from perf.steps import check_id
from perf.targets import DOMAIN_OPTIONS, SSSD_ONLY_OPTIONS, SSSD_SURVIVAL_DOMAIN, SSSD_SURVIVAL_NSS
from testing import gendir, nsenv, procstat, replay
from testing.daemon import CachedDaemon
from testing.faultproxy import FaultProxy
from testing.slapd import Slapd
from testing.sssd import SssdDaemon

NO_MEMCACHE = {"SSS_NSS_USE_MEMCACHE": "NO"}
PHASES = ("expiry", "steady", "outage")  # after "cold", which every run has
LOOKUP_TIMEOUT = 1800.0
START_WORKERS = 4  # daemons started at once: start-up is CPU (Python imports)
# No host is started while the machine has less memory available than this: the run
# stops rather than have the kernel's OOM killer pick among everyone's processes.
MIN_AVAILABLE_MIB = 3072
# One search's stats line and the timestamp slapd puts before it (testing/slapd.py).
# Per host from cached's counters: logical searches, bytes received, waits on the backend.
# And the catch-up runs after the domain came back online, the initgroups requests (a
# client's or a revalidation's: a user's groups fetched or revalidated once each) and
# the early refresh-ahead runs (entries answered past their midpoint); the expired
# entries answered without waiting (offline, or a bounded wait ran out), the
# backend's requests answered from what another request had stored meanwhile, and
# the refresh-ahead task found stuck by its watch. (counter, its field, Phase's list)
FIGURES = (
    (C.LDAP_SEARCH, 0, "host_searches"), (C.LDAP_BYTES, 2, "host_bytes"),
    (C.NSS_WAIT, 0, "host_waits"), (C.REFRESH_CATCH_UP, 0, "host_catch_ups"),
    (C.REQ_INITGR, 0, "host_initgr"), (C.REFRESH_EARLY, 0, "host_early"),
    (C.NSS_STALE, 0, "host_stale"), (C.REQUEST_STORED, 0, "host_stored"),
    (C.REFRESH_STALLED, 0, "host_refresh_stalled"),
)  # fmt: skip
_SRCH_AT = re.compile(
    r'([0-9a-f]{8,})\.[0-9a-f]{8} 0x[0-9a-f]+ conn=\d+ op=\d+ SRCH base="([^"]*)"'
)
LEVEL = int(DOMAIN_OPTIONS["ldap_group_nesting_level"])


class Host(Protocol):
    name: str
    user: str

    def lookup(self) -> tuple[float, bool]: ...
    def invalidate(self) -> None: ...
    def counters(self) -> dict[str, list[float]] | None: ...
    def stop(self) -> None: ...


def _id_ok(p: subprocess.CompletedProcess[str], exp: gendir.Expected, user: str) -> bool:
    """The answer the generator expects: every gid, each with its name."""
    return p.returncode == 0 and check_id(exp, LEVEL, user, p.stdout)[0]


class CachedHost:
    def __init__(self, workdir: Path, uri: str, base: str, user: str, exp: gendir.Expected,
                 lifetime: int, index: int,
                 extra: dict[str, str] | None = None) -> None:  # fmt: skip
        self.name, self.user, self.exp = f"cached{index:03d}", user, exp
        workdir.mkdir(parents=True, exist_ok=True)
        machine_id = workdir / "machine-id"
        # A distinct id per host, as machine-id(5) spells one: 32 hex digits.
        machine_id.write_text(f"{index + 1:08x}{'c0ffee00' * 3}\n")
        extra = dict(extra or {})
        nss = dict(kv.split("=", 1) for kv in extra.pop("[nss]", "").split(",") if kv)
        opts = {**DOMAIN_OPTIONS, "entry_cache_timeout": lifetime, **extra}
        self.daemon = CachedDaemon(
            workdir, [uri], base, log_level="info",
            daemon={"machine_id_file": machine_id}, nss=nss,
            # The defaults, not the tests' pinned values: refresh ahead on, the host's
            # own offline retry offset.
            refresh_expired_interval=None, offline_timeout_random_offset=None, **opts,
        )  # fmt: skip

    def start(self) -> None:
        self.daemon.start()

    def lookup(self) -> tuple[float, bool]:
        d = self.daemon
        t = time.perf_counter()
        p = nsenv.run_nss(["id", self.user], d.pipes_dir, d.mc_dir, env=NO_MEMCACHE,
                          timeout=LOOKUP_TIMEOUT)  # fmt: skip
        return time.perf_counter() - t, _id_ok(p, self.exp, self.user)

    def invalidate(self) -> None:
        # 200 tools start at once on 2 cores (load ~190): Python's start-up alone can
        # take minutes, as the lookups' can.
        p = self.daemon.cli("cache", "-E", timeout=LOOKUP_TIMEOUT)
        if p.returncode:
            raise RuntimeError(f"{self.name}: cached cache -E: {p.stderr}")

    def counters(self) -> dict[str, list[float]] | None:
        return self.daemon.counters()

    def rss_kib(self) -> int:
        status = self.daemon.control("status")
        pids = [int(status["monitor"]["pid"])]
        pids += [int(c["pid"]) for c in status["children"] if c.get("running")]
        return sum(procstat.proc_kib(p) for p in pids)

    def stop(self) -> None:
        self.daemon.stop()


class SssdHost:
    def __init__(self, workdir: Path, uri: str, base: str, user: str, exp: gendir.Expected,
                 lifetime: int, index: int) -> None:  # fmt: skip
        self.name, self.user, self.exp = f"sssd{index:02d}", user, exp
        domain = {**DOMAIN_OPTIONS, **SSSD_ONLY_OPTIONS, **SSSD_SURVIVAL_DOMAIN,
                  "entry_cache_timeout": lifetime}  # fmt: skip
        self.daemon = SssdDaemon(workdir, uri, base, nss=dict(SSSD_SURVIVAL_NSS), **domain)

    def start(self) -> None:
        self.daemon.start()

    def lookup(self) -> tuple[float, bool]:
        t = time.perf_counter()
        p = self.daemon.run_nss(["id", self.user], env=NO_MEMCACHE, timeout=LOOKUP_TIMEOUT)
        return time.perf_counter() - t, _id_ok(p, self.exp, self.user)

    def invalidate(self) -> None:
        p = self.daemon.run_in_namespace(["sss_cache", "-E"])
        if p.returncode:
            raise RuntimeError(f"{self.name}: sss_cache -E: {p.stderr}")

    def counters(self) -> dict[str, list[float]] | None:
        return None

    def rss_kib(self) -> int:
        return sum(procstat.proc_kib(p) for p in self.daemon.pids().values())

    def stop(self) -> None:
        self.daemon.stop()


@dataclass
class Phase:
    fleet: str
    name: str
    hosts: int
    seconds: float  # the phase's wall time
    searches: int  # slapd's search operations (pages each), root DSE left out
    per_second: list[int]  # searches in each 1-s bucket from the phase's start
    slapd_cpu: float
    bytes: int  # cached: from the hosts' counters; SSSD: through the proxy
    lookups: list[float] = field(default_factory=list)
    wrong: int = 0  # lookups whose answer was not the expected one
    # cached only, per host: logical searches, bytes, lookups that waited on the backend
    host_searches: list[int] = field(default_factory=list)
    host_bytes: list[int] = field(default_factory=list)
    host_waits: list[int] = field(default_factory=list)
    host_catch_ups: list[int] = field(default_factory=list)
    host_initgr: list[int] = field(default_factory=list)
    host_early: list[int] = field(default_factory=list)
    host_stale: list[int] = field(default_factory=list)
    host_stored: list[int] = field(default_factory=list)
    host_refresh_stalled: list[int] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return max(self.per_second, default=0)


def _pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def per_second(log: Path, since: int, t0: float, t1: float) -> list[int]:
    """Searches (root DSE reads left out) in 1-s buckets of slapd's timestamps."""
    with open(log, "rb") as fh:
        fh.seek(since)
        text = fh.read().decode(errors="replace")
    seconds = Counter(int(m.group(1), 16) for m in _SRCH_AT.finditer(text) if m.group(2))
    start, n = int(t0), max(1, int(t1) - int(t0) + 1)
    return [seconds.get(start + i, 0) for i in range(n)]


def _available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def _start(h: CachedHost | SssdHost) -> None:
    if (left := _available_mib()) < MIN_AVAILABLE_MIB:
        raise SystemExit(f"{left} MiB available, under {MIN_AVAILABLE_MIB}: no more hosts")
    h.start()


def _all(hosts: Sequence[Host], fn: Callable[[Host], Any]) -> list[Any]:
    """``fn`` on every host at once: one thread each, released together."""
    gate = threading.Barrier(len(hosts))

    def go(h: Host) -> Any:
        gate.wait()
        return fn(h)

    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return list(pool.map(go, hosts))


def _paced(hosts: Sequence[Host], period: float, duration: float) -> list[tuple[float, bool]]:
    """Every host looks up every ``period`` seconds for ``duration``, the hosts spread
    evenly over the period; the phase ends with the last lookup begun in time."""
    out: list[tuple[float, bool]] = []
    lock = threading.Lock()
    end = time.monotonic() + duration

    def run(i: int, h: Host) -> None:
        at = time.monotonic() + period * i / len(hosts)
        while at < end:
            time.sleep(max(0.0, at - time.monotonic()))
            r = h.lookup()
            with lock:
                out.append(r)
            # A host behind its schedule (lookups slower than the period on a loaded
            # machine) skips the slots it missed rather than catching up in a burst.
            at += period
            while at < time.monotonic():
                at += period

    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        list(pool.map(run, range(len(hosts)), hosts))
    return out


class Run:
    def __init__(self, server: Slapd, proxy: FaultProxy | None, say: Callable[[str], None]) -> None:
        self.server, self.proxy, self.say = server, proxy, say
        self.phases: list[Phase] = []
        self.rss: dict[str, list[int]] = {}  # KiB per host, after the cold lookup

    @contextlib.contextmanager
    def phase(self, fleet: str, name: str, hosts: Sequence[Host]) -> Iterator[Phase]:
        def totals() -> list[list[float]]:
            out = []
            for h in hosts:
                c = h.counters() or {}
                out.append([c.get(k, [0, 0, 0])[i] for k, i, _f in FIGURES])
            return out

        before = totals()
        bytes0 = self.proxy.stats.bytes_down if self.proxy else 0
        offset, t0 = self.server.log_offset(), time.time()
        cpu0 = procstat.cpu_seconds({"slapd": self.server.pid or 0})["slapd"]
        ph = Phase(fleet, name, len(hosts), 0.0, 0, [], 0.0, 0)
        yield ph
        t1 = time.time()
        ph.seconds = t1 - t0
        ph.slapd_cpu = procstat.cpu_seconds({"slapd": self.server.pid or 0})["slapd"] - cpu0
        ops = self.server.searches(offset)
        ph.searches = sum(1 for op in ops if op.base)
        ph.per_second = per_second(self.server.log_path, offset, t0, t1)
        after = totals()
        if fleet == "cached":
            diff = [
                [int(a - b) for a, b in zip(x, y, strict=True)]
                for x, y in zip(after, before, strict=True)
            ]
            for j, (_k, _i, figure) in enumerate(FIGURES):
                setattr(ph, figure, [d[j] for d in diff])
            ph.bytes = sum(ph.host_bytes)
        elif self.proxy is not None:
            ph.bytes = self.proxy.stats.bytes_down - bytes0
        self.phases.append(ph)
        self.say(
            f"{fleet:6} {name:8} hosts={len(hosts):<4} {ph.seconds:7.1f} s"
            f" searches={ph.searches:<7}"
            f" peak={ph.peak:<5}/s slapd_cpu={ph.slapd_cpu:6.2f} s bytes={ph.bytes:<11}"
            f" lookups={len(ph.lookups)} p50={_pct(ph.lookups, 0.5):.3f} s"
            f" p99={_pct(ph.lookups, 0.99):.3f} s wrong={ph.wrong}"
            + (f" waits={sum(ph.host_waits)}" if ph.host_waits else "")
        )

    def fleet(self, kind: str, hosts: Sequence[Any], args: argparse.Namespace) -> None:
        say = self.say
        t = time.monotonic()
        with ThreadPoolExecutor(max_workers=START_WORKERS) as pool:
            list(pool.map(_start, hosts))
        say(f"{kind}: {len(hosts)} daemons started in {time.monotonic() - t:.1f} s")

        def record(ph: Phase, results: list[tuple[float, bool]]) -> None:
            ph.lookups = [s for s, ok in results if ok]
            ph.wrong = sum(not ok for _, ok in results)

        with self.phase(kind, "cold", hosts) as ph:
            record(ph, _all(hosts, lambda h: h.lookup()))
        rss = [h.rss_kib() for h in hosts]
        say(f"{kind}: RSS per host (all its processes) median {statistics.median(rss) / 1024:.0f}"
            f" MiB, max {max(rss) / 1024:.0f} MiB")  # fmt: skip
        self.rss[kind] = rss
        if "expiry" in args.phases:
            with self.phase(kind, "expiry", hosts) as ph:
                _all(hosts, lambda h: h.invalidate())
                record(ph, _all(hosts, lambda h: h.lookup()))
        if "steady" in args.phases:
            with self.phase(kind, "steady", hosts) as ph:
                record(ph, _paced(hosts, args.period, args.steady * args.lifetime))
        if "outage" not in args.phases:
            return
        down = args.lifetime + 10 if args.down is None else args.down
        say(f"{kind}: slapd down for {down} s")
        self.server.stop()
        try:
            offline = _paced(hosts, args.period, down)
        finally:
            self.server.start()
        say(f"{kind}: {sum(ok for _, ok in offline)}/{len(offline)} lookups answered while down,"
            f" p50 {_pct([s for s, _ in offline], 0.5):.3f} s")  # fmt: skip
        with self.phase(kind, "outage", hosts) as ph:
            record(ph, _paced(hosts, args.period, args.recovery))


def _render(res: dict[str, Any], out: Path) -> list[str]:
    """report.md's tables and the charts (when matplotlib is there)."""
    lines = []
    lines.append(
        "| fleet | phase | hosts | wall s | searches | per host | peak /s | peak /s per 100"
        " hosts | slapd CPU s | per host ms | MiB from LDAP | p50 s | p99 s | wrong | waits |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in res["phases"]:
        n = p["hosts"]
        peak = max(p["per_second"], default=0)
        lk = p["lookups"]
        waits = sum(p["host_waits"]) if p["fleet"] == "cached" else "n/a"
        lines.append(
            f"| {p['fleet']} | {p['name']} | {n} | {p['seconds']:.1f} | {p['searches']:,} |"
            f" {p['searches'] / n:,.1f} | {peak} | {peak * 100 / n:,.0f} | {p['slapd_cpu']:.2f} |"
            f" {p['slapd_cpu'] * 1e3 / n:.1f} | {p['bytes'] / 2**20:,.1f} |"
            f" {_pct(lk, 0.5):.3f} | {_pct(lk, 0.99):.3f} | {p['wrong']} | {waits} |"
        )
    lines += ["", "Per cached host (its own counters): logical searches, KiB received, lookups that"
              " waited on the backend, catch-up runs, initgroups requests, early runs,"
              " expired entries answered without waiting, requests answered from what"
              " another had stored, refresh-ahead tasks found stuck; min / median / max;"
              " hosts that waited.", "",
              "| phase | searches | KiB | waits | catch-up runs | initgroups | early runs"
              " | stale answers | stored meanwhile | refresh stuck | hosts that waited |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in res["phases"]:
        if p["fleet"] == "cached" and p["host_searches"]:
            zeros = [0] * len(p["host_waits"])
            kib = [b / 1024 for b in p["host_bytes"]]
            # Results of older runs lack the figures added since: zeros.
            later = [p.get(f) or zeros for _k, _i, f in FIGURES[3:]]
            cols = [
                " / ".join(f"{f(xs):,.0f}" for f in (min, statistics.median, max))
                for xs in (p["host_searches"], kib, p["host_waits"], *later)
            ]
            waited = sum(1 for w in p["host_waits"] if w)
            lines.append(f"| {p['name']} | " + " | ".join(cols) + f" | {waited} |")
    lines += ["", "Busiest seconds (slapd's searches, per 100 hosts): the five busiest 1-s"
              " buckets, the busiest 10 s as a rate.", "",
              "| fleet | phase | busiest seconds | per 100 hosts | busiest 10 s, /s per 100 |",
              "|---|---|---|---|---|"]  # fmt: skip
    for p in res["phases"]:
        ys, n = p["per_second"], p["hosts"]
        top = sorted(ys, reverse=True)[:5]
        ten = max((sum(ys[i : i + 10]) for i in range(max(1, len(ys) - 9))), default=0)
        lines.append(
            f"| {p['fleet']} | {p['name']} | {', '.join(map(str, top))} |"
            f" {', '.join(f'{y * 100 / n:.1f}' for y in top)} | {ten * 10 / n:.1f} |"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return lines
    phases = [p for p in res["phases"]]
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5), sharey="col")
    for row, fleet in enumerate(("cached", "sssd")):
        for col, name in enumerate(("cold", "expiry", "steady", "outage")):
            ax = axes[row][col]
            got = [p for p in phases if p["fleet"] == fleet and p["name"] == name]
            if got:
                ys = got[0]["per_second"]
                ax.bar(range(len(ys)), ys, width=1.0, color="C0" if fleet == "cached" else "C3")
                ax.set_title(f"{fleet} ×{got[0]['hosts']}: {name}", fontsize=9)
            ax.set_xlabel("s", fontsize=8)
            if col == 0:
                ax.set_ylabel("searches/s", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "searches.png", dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels = [f"{p['fleet']}\n{p['name']}" for p in phases]
    ax.bar(range(len(phases)), [p["slapd_cpu"] for p in phases],
           color=["C0" if p["fleet"] == "cached" else "C3" for p in phases])  # fmt: skip
    ax.set_xticks(range(len(phases)), labels, fontsize=7)
    ax.set_ylabel("slapd CPU s")
    fig.tight_layout()
    fig.savefig(out / "slapd-cpu.png", dpi=90)
    plt.close(fig)
    lines += ["", "![searches per second](searches.png)", "", "![slapd CPU](slapd-cpu.png)"]
    return lines


def _users(exp: gendir.Expected, which: str, n: int) -> list[str]:
    """The user each host looks up: the big user everywhere, or a user in 20 groups
    (its primary group among them) of its own per host."""
    if which == "big":
        return [exp.big_user] * n
    twenty = [u for u in exp.user_names() if len(exp.initgroups(u, LEVEL)) == 20]
    if not twenty:
        raise SystemExit("the directory has no user in exactly 20 groups")
    return [twenty[i % len(twenty)] for i in range(n)]


def per_request(reps: int, user: str, checkout: Path | None) -> int:
    """What each request of one cold ``id USER`` costs slapd (``--per-request``): one
    fresh host's requests recorded through a proxy (testing/replay.py), each sent
    again ``reps`` times on a connection of its own (a paged one to its last page),
    slapd's utime + stime over them (``/proc``, 10 ms ticks) divided by ``reps``,
    the median of three; the entries, values and bytes of the recorded answer."""
    gen = gendir.generate(gendir.BIGROUPUSER, DATA_DIR, reuse=True)
    print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]), flush=True)
    with tempfile.TemporaryDirectory(prefix="fleet-cost-", dir="/tmp") as t:
        tmp = Path(t)
        with Slapd(tmp / "slapd", gen.ldif, gendir.BIGROUPUSER.base_dn) as server:
            slapd_pid = server.pid
            assert slapd_pid is not None
            proxy = replay.RecordingProxy(server.port)
            try:
                uri = f"ldap://127.0.0.1:{proxy.port}"
                d = CachedDaemon(tmp / "d", [uri], server.base_dn, log_level="info",
                                 checkout=checkout, **DOMAIN_OPTIONS)  # fmt: skip
                with d:
                    c0 = procstat.cpu_seconds({"s": slapd_pid})["s"]
                    p = d.run_nss(["id", user], env=NO_MEMCACHE, timeout=LOOKUP_TIMEOUT)
                    c1 = procstat.cpu_seconds({"s": slapd_pid})["s"]
                    if p.returncode:
                        raise SystemExit(f"id failed: {p.stderr}")
                    print(f"id {user}: {len(p.stdout.split(','))} groups; slapd CPU "
                          f"{(c1 - c0) * 1e3:.0f} ms over the cold lookup (one run)")  # fmt: skip
            finally:
                proxy.close()
            reqs = replay.recorded_requests(proxy)
            total_bytes = sum(len(down) for _up, down in proxy.conns)
            print(f"{len(reqs)} search requests on {len(proxy.conns)} connections, "
                  f"{total_bytes:,} bytes from slapd", flush=True)  # fmt: skip
            rows = []
            for r in reqs:
                if r.follows:
                    continue  # a later page: replayed with its first
                pages = [q for q in reqs if q.conn == r.conn and q.follows and q.filt == r.filt
                         and q.base == r.base]  # fmt: skip
                entries = r.entries + sum(q.entries for q in pages)
                values = r.values + sum(q.values for q in pages)
                nbytes = r.answer_bytes + sum(q.answer_bytes for q in pages)
                samples = [replay.request_cpu(server.port, slapd_pid, r, reps) for _ in range(3)]
                cpu = statistics.median(samples)
                rows.append((cpu, nbytes))
                print(f"{cpu * 1e3:7.2f} ms  {entries:6d} entries {values:7d} values "
                      f"{nbytes:10,d} B  pages {r.pages}  sizelimit {r.size_limit}  "
                      f"scope {r.scope} base {r.base!r}\n"
                      f"          attrs {','.join(r.attrs) or '1.1'}  controls "
                      f"{[o for o, _c, _v in r.controls]}\n"
                      f"          filter {replay.describe_filter(r.filt)[:300]}",
                      flush=True)  # fmt: skip
            print(f"sum {sum(c for c, _b in rows) * 1e3:.2f} ms of slapd CPU for {len(rows)} "
                  f"searches ({sum(b for _c, b in rows):,} bytes)")  # fmt: skip
    print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.fleet", description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=10, help="cached instances")
    ap.add_argument("--sssd", type=int, default=5, help="SSSD 2.8.2 instances (0: none)")
    ap.add_argument("--user", choices=("big", "twenty"), default="big")
    ap.add_argument("--lifetime", type=int, default=60, help="entry_cache_timeout, seconds")
    ap.add_argument("--period", type=float, default=15.0, help="seconds between a host's lookups")
    ap.add_argument("--steady", type=float, default=3.0, help="steady period, in lifetimes")
    ap.add_argument("--recovery", type=float, default=60.0, help="seconds watched after the outage")
    ap.add_argument("--down", type=float, help="seconds slapd is down (default: lifetime + 10)")
    ap.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                    help="a domain option of the cached hosts (repeatable)")  # fmt: skip
    ap.add_argument("--nss-opt", action="append", default=[], metavar="KEY=VALUE",
                    help="an [nss] option of the cached hosts (repeatable)")  # fmt: skip
    ap.add_argument("--phases", type=lambda v: v.split(","), default=list(PHASES),
                    help=f"the phases after the cold start, in their order (default: "
                         f"{','.join(PHASES)}), fewer to fit a run in its time")  # fmt: skip
    ap.add_argument("--out", type=Path, help="results directory (results.json, report.md)")
    ap.add_argument("--workdir", type=Path, help="daemons' directories (default: a temporary one)")
    ap.add_argument("--per-request", type=int, metavar="REPS",
                    help="no fleet: slapd's CPU per request of one host's cold `id`, each "
                         "request sent again REPS times (per_request)")  # fmt: skip
    ap.add_argument("--checkout", type=Path,
                    help="with --per-request: the source tree whose cached runs")  # fmt: skip
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("perf.fleet needs root (mount namespaces)")
    if args.per_request:
        user = _users(gendir.generate(gendir.BIGROUPUSER, DATA_DIR, reuse=True).expected(),
                      args.user, 1)[0]  # fmt: skip
        return per_request(args.per_request, user, args.checkout)
    gen = gendir.generate(gendir.BIGROUPUSER, DATA_DIR, reuse=True)
    exp = gen.expected()
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    def load() -> str:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])

    started = dt.datetime.now(dt.UTC)
    say(
        f"# Fleet: {args.hosts} cached, {args.sssd} SSSD 2.8.2 on one slapd"
        f" ({started:%Y-%m-%d %H:%M} UTC)"
    )
    say()
    say(f"* command: `python -m perf.fleet {shlex.join(sys.argv[1:] if argv is None else argv)}`")
    say(f"* host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average at start {load()} (shared with other people's test runs)")  # fmt: skip
    say(f"* directory: bigroupuser (5,001 users, 3,000 groups); lookup `id {args.user}` per host "
        f"({'bigroupuser, 2,085 groups' if args.user == 'big' else 'a user in 20 groups'}), "
        "through libnss_sss, SSS_NSS_USE_MEMCACHE=NO")  # fmt: skip
    say(f"* entry_cache_timeout {args.lifetime} s (a scaled day: ×{5400 / args.lifetime:.0f} to"
        f" the default 5,400 s), a lookup per host every {args.period:g} s in the steady and"
        " outage phases")  # fmt: skip
    say()
    say("```")
    tmp_owned = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="fleet-")) if args.workdir is None else args.workdir
    result: dict[str, Any] = {}
    try:
        with Slapd(work / "slapd", gen.ldif, gendir.BIGROUPUSER.base_dn) as server:
            proxy = FaultProxy("127.0.0.1", server.port).start() if args.sssd else None
            run = Run(server, proxy, say)
            extra = dict(kv.split("=", 1) for kv in args.opt)
            if args.nss_opt:  # carried to the hosts under a key no option has
                extra["[nss]"] = ",".join(args.nss_opt)
            users = _users(exp, args.user, max(args.hosts, args.sssd))
            try:
                hosts: list[Any] = [
                    CachedHost(
                        work / f"c{i}",
                        server.uri,
                        server.base_dn,
                        users[i],
                        exp,
                        args.lifetime,
                        i,
                        extra,
                    )
                    for i in range(args.hosts)
                ]
                try:
                    run.fleet("cached", hosts, args)
                finally:
                    for h in hosts:
                        with contextlib.suppress(Exception):
                            h.stop()
                if args.sssd and proxy is not None:
                    hosts = [
                        SssdHost(
                            work / f"s{i}",
                            proxy.uri,
                            server.base_dn,
                            users[i],
                            exp,
                            args.lifetime,
                            i,
                        )
                        for i in range(args.sssd)
                    ]
                    try:
                        run.fleet("sssd", hosts, args)
                    finally:
                        for h in hosts:
                            with contextlib.suppress(Exception):
                                h.stop()
            finally:
                if proxy is not None:
                    proxy.stop()
            result = {"args": {k: str(v) for k, v in vars(args).items()},
                      "phases": [asdict(p) for p in run.phases], "rss_kib": run.rss,
                      "load_end": load()}  # fmt: skip
    finally:
        if tmp_owned:
            shutil.rmtree(work, ignore_errors=True)
    say("```")
    say()
    say(f"load average at end {load()}")
    say()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
        for line in _render(result, args.out):
            say(line)
        (args.out / "report.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
