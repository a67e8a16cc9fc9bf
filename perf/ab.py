"""Two revisions or two configurations of cached, alternating in one run: medians, ratios.

    python -m perf.ab --a 149361d --b HEAD [--rounds 7] [--out FILE]
    python -m perf.ab --a . --b . --b-opt ldap_deref_threshold=0 --scenarios cold-id
    python -m perf.ab --a . --b floor --scenarios cold-id,cold-group
    python -m perf.ab --a . --b sssd --scenarios login-cold,login-warm,login20-cold

A machine shared with other people's work changes speed by half or more from one hour
to the next, so two checkouts measured one after the other compare the hours, not the
code. Here both sides run against the same slapd (the bigroupuser directory of
testing/gendir.py, with the deref overlay, as perf.run serves it) and take turns: round
r measures A then B when r is even, B then A when it is odd, so a change of load falls
on both alike; the summary gives each side's median, the ratio of the medians and the
median of the rounds' own ratios B/A (the steadier of the two when the load drifts).

A side (``--a``, ``--b``) is

* ``.`` (this checkout) or a directory holding another checkout;
* a git revision of this repository (``149361d``, ``HEAD~3``, a branch): ``git
  archive`` of it into a temporary directory;
* ``floor``: not a daemon but the floor under a cold lookup (testing/replay.py): this
  checkout's requests of that lookup, recorded once, sent again to the same slapd with
  no client work; cold scenarios only;
* ``sssd``: SSSD 2.8.2 from Debian's packages (testing/sssd.py), with the same domain
  options plus the ones perf.run gives it (perf.targets: no sudo and other providers,
  the watchdog's ``timeout`` raised so that it survives bigroupuser); the NSS scenarios
  on perf.run's domain options (perf.targets.DOMAIN_OPTIONS), the login and sudo ones.

A checkout's own ``cached`` runs its daemons (first on their path and their working
directory, testing.daemon's ``checkout``); its C entry reader (cached/ldap/_ber.c) is
built in place when missing, with this interpreter's flags, as ``pip install -e`` would.
``--a-opt``/``--b-opt KEY=VALUE`` add domain options to one side's configuration, so
the same checkout can be compared with itself under two settings. With
``use_fully_qualified_names = true`` a side is asked for ``bigroupuser@LDAP`` and
``large01@LDAP`` (the domain both daemons are given).

Scenarios, each from a fresh ``cached serve`` with an empty cache, through glibc and
the real libnss_sss in a private mount namespace (testing.nsenv), the memory cache off
unless ``--memcache`` (the client then reads it, as in production):

* ``cold-id``: ``id bigroupuser`` (2,085 groups at nesting level 2);
* ``warm-id``: ``id bigroupuser`` again on the daemon of ``cold-id``, answered from the
  cache through the socket (the median of ``--warm-reps``);
* ``cold-group``: ``getent group large01`` (5,000 members) on a daemon of its own.

Login scenarios: a whole login, the PAM transaction ``authenticate acct_mgmt
open_session close_session`` through the real ``pam_sss.so`` (testing.pamdriver in a
private mount namespace with its own ``/etc/pam.d``, as root: the private socket), with
``auth_provider = ldap`` and ``cache_credentials = true`` over ldaps (slapd's ldaps
listener behind a fault proxy, testing.faultproxy). ``login-*`` logs in ``bigroupuser``,
``login20-*`` the first user of the directory in 20 groups (nesting level 2); the
directory has no passwords, so both are given one (``userPassword``) at the start. Per
user and round, one daemon started with an empty cache:

* ``login-cold``: the first login (the user resolved, initgroups, then the bind);
* ``login-warm``: a login again, the entries valid (the median of ``--warm-reps``);
* ``login-offline``: slapd stopped: a login against the cached credentials;
* ``login-frozen``: the daemon restarted with its cache (online again), then the proxy
  forwards nothing (a hung server): a login, whatever it answers (its return codes are
  printed: this one is timed, not required to succeed).

Access scenarios: the account check alone (``acct_mgmt`` through ``pam_sss.so``, as after
a key-based ssh login) of ``bigroupuser`` with ``access_provider = simple`` and
``simple_allow_groups`` naming one of its deepest groups, one it reaches only through
nesting (docs/compatibility.md §9.9), on a daemon started with an empty cache per round:

* ``access-cold``: the first check (the user and its groups resolved, then decided);
* ``access-warm``: the check again (the median of ``--warm-reps``).

Sudo scenarios (perf/targets.py, "sudo"): the bigroupuser directory with 1,000
``sudoRole`` rules; per side and round one daemon (``services = nss, sudo``, each
behind a fault proxy of its own that counts the bytes it receives) started with an
empty cache, once its first full refresh of the rules is answered:

* ``sudo-cold``: ``sudo -l -U bigroupuser`` (its initgroups cold), exact when it lists
  the commands of exactly the rules of its groups;
* ``sudo-warm``: the same again (the median of ``--warm-reps``);
* ``sudo-smart``: the next smart refresh (every 30 s on both sides), nothing having
  changed: its searches of sudo rules and the bytes the daemon received.

A login's time is measured inside the driver, from ``pam_start`` to the return of
``pam_end``; ``process`` is the driver's process from spawn to exit, interpreter start-up
included (the namespace set-up is not).

Per sample: the command's own wall time (perf.timecmd: the namespace set-up is not
counted), the CPU seconds of cached's processes and slapd (``/proc``; the load of
others moves it far less than the wall time), slapd's logical searches (root DSE reads
left out; for the floor, the requests it sends, root DSE read included), and whether
the answer is the directory's expected one; a wrong answer is
reported and left out of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from perf import targets
from perf.targets import (
    DOMAIN_OPTIONS,
    SSSD_ONLY_OPTIONS,
    SSSD_SURVIVAL_DOMAIN,
    SSSD_SURVIVAL_NSS,
    TIMECMD,
)
from perf.timecmd import parse
from testing import gendir, nsenv, pamenv, pammatrix, procstat, sssd
from testing.daemon import REPO, CachedDaemon
from testing.faultproxy import FaultProxy
from testing.replay import floor_once, gated_sends, record_lookup
from testing.slapd import Slapd, make_tls_material

NSS_SCENARIOS = ("cold-id", "warm-id", "cold-group")
LOGIN_STEPS = ("cold", "warm", "offline", "frozen")
#: Login scenarios by prefix: ``login`` is the big user, ``login20`` a user in 20 groups.
LOGIN_PREFIXES = ("login", "login20")
LOGIN_SCENARIOS = tuple(f"{p}-{step}" for p in LOGIN_PREFIXES for step in LOGIN_STEPS)
#: The account check alone (``acct_mgmt``) of bigroupuser with ``access_provider =
#: simple`` allowing one group it reaches only through nesting.
ACCESS_SCENARIOS = ("access-cold", "access-warm")
#: Every scenario through pam_sss (a PAM daemon on either side, SSSD included).
PAM_SCENARIOS = LOGIN_SCENARIOS + ACCESS_SCENARIOS
#: Sudo scenarios (perf/targets.py): bigroupuser's rules among 1,000, cold and warm, and a
#: smart refresh that finds nothing changed.
SUDO_SCENARIOS = ("sudo-cold", "sudo-warm", "sudo-smart")
SCENARIOS = NSS_SCENARIOS + PAM_SCENARIOS + SUDO_SCENARIOS
LOGIN_PASSWORD = "Perf-login-1"
#: The bound on a login's driver process: SSSD's cold login of bigroupuser pays its
#: whole initgroups (12 s on an idle machine) and its frozen ldaps login waits for its
#: watchdog (90 s); pam_sss itself gives up after 300 s.
LOGIN_TIMEOUT = 600.0
DATA_DIR = REPO / ".benchmarks" / "perf-data"  # shared with perf.run
SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}
GROUP = "large01"

# setuptools' build_ext, in place: the flags pip's editable install builds the C reader with.
BUILD_EXT = """
from setuptools import Distribution, Extension
d = Distribution({"ext_modules": [Extension("cached.ldap._ber", ["cached/ldap/_ber.c"])]})
cmd = d.get_command_obj("build_ext")
cmd.inplace = True
cmd.ensure_finalized()
cmd.run()
"""


@dataclass
class Sample:
    wall: float
    cpu: float
    searches: int
    exact: bool
    process: float | None = None  # a login's driver process, spawn to exit
    codes: str = ""  # a login's PAM return codes, in call order
    received: int | None = None  # sudo-smart: bytes the daemon received from LDAP


@dataclass
class Side:
    label: str  # "A" or "B"
    spec: str  # as given
    checkout: Path | None  # None: the floor or SSSD
    describe: str  # the revision, for the report
    options: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    sssd: bool = False

    @property
    def floor(self) -> bool:
        return self.checkout is None and not self.sssd


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def prepare(label: str, spec: str, options: list[str], tmp: Path) -> Side:
    """The side ``spec`` names, its checkout ready to run."""
    opts = dict(o.split("=", 1) for o in options)
    if spec == "floor":
        if opts:
            raise SystemExit("perf.ab: the floor takes no options")
        return Side(label, spec, None, "floor (recorded requests, no client)")
    if spec == "sssd":
        reason = sssd.skip_reason()
        if reason:
            raise SystemExit(f"perf.ab: cannot run SSSD: {reason}")
        return Side(label, spec, None, sssd.SssdDaemon.version(), opts, sssd=True)
    path = Path(spec)
    if path.is_dir() and (path / "cached").is_dir():
        checkout = path.resolve()
        try:
            describe = _git("describe", "--always", "--dirty", cwd=checkout)
        except subprocess.CalledProcessError:
            describe = str(checkout)
    else:
        try:
            commit = _git("rev-parse", "--verify", "--short", f"{spec}^{{commit}}")
        except subprocess.CalledProcessError:
            raise SystemExit(f"perf.ab: {spec!r} is neither a checkout nor a revision") from None
        checkout = tmp / f"src-{label}-{commit}"
        checkout.mkdir()
        archive = subprocess.Popen(
            ["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(checkout)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"perf.ab: git archive {commit} failed")
        describe = commit
    _build_reader(checkout)
    return Side(label, spec, checkout, describe, opts)


def _build_reader(checkout: Path) -> None:
    """Build the checkout's C entry reader if it has one and it is not built, then check
    that its daemons will import that checkout's ``cached``."""
    ldap = checkout / "cached" / "ldap"
    has_c = (ldap / "_ber.c").exists()
    if has_c and not any(ldap.glob("_ber*.so")):
        subprocess.run(
            [sys.executable, "-c", BUILD_EXT], cwd=checkout, check=True, capture_output=True
        )
    probe = "import cached" + (", cached.ldap._ber" if has_c else "") + "; print(cached.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(checkout):
        raise SystemExit(f"perf.ab: {checkout} imports cached from {out}")


def _gids(output: str) -> set[int]:
    if "groups=" not in output:
        return set()
    groups = output.strip().split("groups=", 1)[1]
    return {int(item.split("(", 1)[0]) for item in groups.split(",")}


def _members(output: str) -> set[str]:
    fields = output.strip().split(":")
    return set(filter(None, fields[3].split(","))) if len(fields) == 4 else set()


def _schedstat(pid: int) -> float:
    """CPU seconds so far of ``pid``'s live threads (their schedstat, nanoseconds)."""
    ns = 0
    with contextlib.suppress(OSError):  # the process is gone
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):  # a thread that just ended
                ns += int((task / "schedstat").read_text().split()[0])
    return ns / 1e9


def _searches(server: Slapd, offset: int) -> int:
    return sum(1 for pages in server.logical_searches(offset) if pages[0].base != "")


class Measure:
    """One side's samples of every scenario in one round."""

    def __init__(
        self,
        server: Slapd,
        expected: gendir.Expected,
        tmp: Path,
        env: dict[str, str],
        warm_reps: int,
        log_level: str,
    ) -> None:
        self.server, self.exp, self.tmp, self.env = server, expected, tmp, env
        self.warm_reps, self.log_level = warm_reps, log_level
        self.floors: dict[str, tuple[list[tuple[int, bytes]], int]] = {}
        self.proxy: FaultProxy | None = None  # in front of ldaps, when logins are measured
        self.login_users: dict[str, str] = {}
        self.access_group = ""
        self.pamd = tmp / "pam.d"

    def prepare_logins(self, scenarios: list[str]) -> None:
        """Passwords for the login users, the fault proxy and the PAM service."""
        if not set(scenarios) & set(PAM_SCENARIOS):
            return
        exp = self.exp
        twenty = next(u for u in exp.user_names() if len(exp.initgroups(u, 2)) == 20)
        self.login_users = {"login": exp.big_user, "login20": twenty}
        # The access group: one of bigroupuser's deepest, reached only through nesting.
        big, level = exp.big_user, int(DOMAIN_OPTIONS["ldap_group_nesting_level"])
        nested = exp.initgroups(big, level) - exp.initgroups(big, level - 1)
        by_gid = {exp.group(g).gid: g for g in exp.group_names()}
        self.access_group = max(by_gid[gid] for gid in nested)
        for user in self.login_users.values():
            self.server.ldap_modify(
                f"dn: {exp.user(user).dn}\nchangetype: modify\nreplace: userPassword\n"
                f"userPassword: {LOGIN_PASSWORD}\n"
            )
        port = int(self.server.ldaps_uri.rsplit(":", 1)[1])
        self.proxy = FaultProxy("127.0.0.1", port).start()
        pamenv.make_pamd(self.pamd, {pammatrix.SERVICE: pamenv.service_file()})

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()

    def round(self, side: Side, r: int, scenarios: list[str]) -> Iterator[tuple[str, Sample]]:
        if side.floor:
            yield from self._floor(scenarios)
            return
        yield from self._logins(side, r, scenarios)
        yield from self._access(side, r, scenarios)
        yield from self._sudo(side, r, scenarios)
        user, group = self._name(side, self.exp.big_user), self._name(side, GROUP)
        if "cold-id" in scenarios or "warm-id" in scenarios:
            with self._daemon(side, f"{side.label}{r}-id") as d:
                cold = self._run(d, ["id", user])
                if "cold-id" in scenarios:
                    yield "cold-id", cold
                if "warm-id" in scenarios:
                    warm = [self._run(d, ["id", user]) for _ in range(self.warm_reps)]
                    yield "warm-id", sorted(warm, key=lambda s: s.wall)[len(warm) // 2]
        if "cold-group" in scenarios:
            with self._daemon(side, f"{side.label}{r}-group") as d:
                yield "cold-group", self._run(d, ["getent", "group", group])

    @staticmethod
    def _name(side: Side, name: str) -> str:
        """A name as the side finds it: qualified when its options qualify names."""
        qualified = side.options.get("use_fully_qualified_names", "").lower() == "true"
        return f"{name}@LDAP" if qualified else name

    @contextlib.contextmanager
    def _daemon(self, side: Side, name: str) -> Iterator[CachedDaemon | sssd.SssdDaemon]:
        if side.sssd:
            with sssd.SssdDaemon(
                self.tmp / name, self.server.uri, self.server.base_dn, nss=SSSD_SURVIVAL_NSS,
                **{**DOMAIN_OPTIONS, **SSSD_ONLY_OPTIONS, **SSSD_SURVIVAL_DOMAIN,
                   **side.options},
            ) as s:  # fmt: skip
                s.run_nss(["true"], env=self.env, timeout=600)
                yield s
            return
        checkout = None if side.checkout == REPO else side.checkout
        with CachedDaemon(
            self.tmp / name,
            [self.server.uri],
            self.server.base_dn,
            log_level=self.log_level,
            checkout=checkout,
            **side.options,
        ) as d:
            d.run_nss(["true"], env=self.env, timeout=600)  # the namespace warm
            yield d

    def _run(self, d: CachedDaemon | sssd.SssdDaemon, cmd: list[str]) -> Sample:
        if isinstance(d, CachedDaemon):
            cached = [d.pid, *(x.pid for x in procstat.children(d.pid))]
        else:
            cached = list(d.pids().values())
        slapd = {"slapd": self.server.pid or 0}

        def cpu() -> float:
            # cached's processes by their threads' schedstat (nanoseconds; /proc/<pid>/stat
            # counts 10 ms ticks, as coarse as a warm step); slapd by /proc/<pid>/stat,
            # which counts its worker threads that have exited too.
            return sum(map(_schedstat, cached)) + sum(procstat.cpu_seconds(slapd).values())

        offset, cpu0 = self.server.log_offset(), cpu()
        r = d.run_nss([*TIMECMD, *cmd], env=self.env, timeout=1800)
        timing = parse(r.stderr)[0]
        if timing is None:
            raise RuntimeError(f"{cmd} gave no timing: {r.stderr[-2000:]}")
        return Sample(
            timing.wall, cpu() - cpu0, _searches(self.server, offset), self._exact(cmd, r.stdout)
        )

    def _login_domain(self) -> dict[str, object]:
        """perf's domain options, LDAP authentication with cached credentials (the PAM
        matrix's, its short search timeout left out: SSSD's searches for bigroupuser's
        groups take longer) and ldaps through the proxy."""
        assert self.server.tls is not None and self.proxy is not None
        base = pammatrix.base_domain_options()
        del base["ldap_search_timeout"]
        return {
            **DOMAIN_OPTIONS,
            **base,
            "ldap_uri": f"ldaps://127.0.0.1:{self.proxy.port}",
            "ldap_tls_cacert": self.server.tls.ca_cert,
            "ldap_tls_reqcert": "demand",
            "ldap_id_use_start_tls": "false",
        }

    def _pam_daemon(self, side: Side, workdir: Path) -> pammatrix.PamDaemon:
        domain = {**self._login_domain(), **side.options}
        if side.sssd:
            uri = str(domain.pop("ldap_uri"))
            return pammatrix.SssdPamDaemon(
                workdir, uri, self.server.base_dn, nss=SSSD_SURVIVAL_NSS, pam={},
                **{**domain, **SSSD_ONLY_OPTIONS, **SSSD_SURVIVAL_DOMAIN},
            )  # fmt: skip
        d = pammatrix.CachedPamDaemon(workdir, pammatrix.PamConfig(self.server.base_dn, domain, {}))
        d.log_level = self.log_level
        if side.checkout is not None:
            d.checkout = side.checkout
        return d

    def _logins(self, side: Side, r: int, scenarios: list[str]) -> Iterator[tuple[str, Sample]]:
        for prefix, user in self.login_users.items():
            steps = [step for step in LOGIN_STEPS if f"{prefix}-{step}" in scenarios]
            if not steps:
                continue
            d = self._pam_daemon(side, self.tmp / f"{side.label}{r}-{prefix}")
            d.start()
            try:
                env = pamenv.PamEnv(d.pipes_dir, self.pamd, d.mc_dir)
                cold = self._login(d, env, user)  # always: it fills the cache
                if "cold" in steps:
                    yield f"{prefix}-cold", cold
                if "warm" in steps:
                    warm = [self._login(d, env, user) for _ in range(self.warm_reps)]
                    yield f"{prefix}-warm", sorted(warm, key=lambda s: s.wall)[len(warm) // 2]
                if "offline" in steps:
                    yield f"{prefix}-offline", self._offline(d, env, user)
                if "frozen" in steps:
                    yield f"{prefix}-frozen", self._frozen(d, env, user)
            finally:
                d.stop()

    def _access(self, side: Side, r: int, scenarios: list[str]) -> Iterator[tuple[str, Sample]]:
        """acct_mgmt of bigroupuser, cold (an empty cache: the user and its groups are
        resolved first, as for any PAM command) and warm, with ``access_provider =
        simple`` and ``simple_allow_groups`` naming :attr:`access_group`."""
        if not set(scenarios) & set(ACCESS_SCENARIOS):
            return
        allow = {"access_provider": "simple", "simple_allow_groups": self.access_group}
        d = self._pam_daemon(dataclasses.replace(side, options={**side.options, **allow}),
                             self.tmp / f"{side.label}{r}-access")  # fmt: skip
        d.start()
        try:
            env = pamenv.PamEnv(d.pipes_dir, self.pamd, d.mc_dir)
            user = self.exp.big_user
            cold = self._login(d, env, user, ("acct_mgmt",))
            if "access-cold" in scenarios:
                yield "access-cold", cold
            if "access-warm" in scenarios:
                warm = [self._login(d, env, user, ("acct_mgmt",)) for _ in range(self.warm_reps)]
                yield "access-warm", sorted(warm, key=lambda s: s.wall)[len(warm) // 2]
        finally:
            d.stop()

    def _offline(self, d: pammatrix.PamDaemon, env: pamenv.PamEnv, user: str) -> Sample:
        assert self.proxy is not None
        self.proxy.drop_all()
        self.server.stop()
        try:
            return self._login(d, env, user)
        finally:
            self.server.start()

    def _frozen(self, d: pammatrix.PamDaemon, env: pamenv.PamEnv, user: str) -> Sample:
        assert self.proxy is not None
        # A daemon that has seen the server down may not try it again for a while
        # (SSSD: offline_timeout); restarted, it is online again with its cache.
        d.stop()
        d.start()
        self.proxy.set(stall=True)
        try:
            return self._login(d, env, user)
        finally:
            self.proxy.heal()

    def _login(
        self,
        d: pammatrix.PamDaemon,
        env: pamenv.PamEnv,
        user: str,
        ops: tuple[str, ...] = pammatrix.LOGIN,
    ) -> Sample:
        if isinstance(d, CachedDaemon):
            root = d.pid
            pids = [root, *(x.pid for x in procstat.children(root))]
        else:
            assert isinstance(d, sssd.SssdDaemon)
            pids = list(d.pids().values())
        online = self.server.running
        slapd = {"slapd": self.server.pid or 0} if online else {}

        def cpu() -> float:
            return sum(map(_schedstat, pids)) + sum(procstat.cpu_seconds(slapd).values())

        offset, cpu0 = (self.server.log_offset() if online else 0), cpu()
        start = time.perf_counter()
        got = env.drive(
            pammatrix.SERVICE, user, ops, answers=[LOGIN_PASSWORD], timeout=LOGIN_TIMEOUT,
        )  # fmt: skip
        process = time.perf_counter() - start
        return Sample(
            got.seconds,
            cpu() - cpu0,
            _searches(self.server, offset) if online else 0,
            got.start == 0 and got.codes == [0] * len(ops),
            process,
            ",".join(map(str, got.codes)),
        )

    def _sudo(self, side: Side, r: int, scenarios: list[str]) -> Iterator[tuple[str, Sample]]:
        """sudo-cold, sudo-warm, sudo-smart on one daemon started with an empty cache,
        once its first full refresh of the rules is answered (both refresh at start)."""
        wanted = [s for s in SUDO_SCENARIOS if s in scenarios]
        if not wanted:
            return
        workdir = self.tmp / f"{side.label}{r}-sudo"
        with FaultProxy("127.0.0.1", self.server.port) as proxy:
            offset = self.server.log_offset()
            d: CachedDaemon | sssd.SssdDaemon
            if side.sssd:
                domain = {**DOMAIN_OPTIONS, **SSSD_ONLY_OPTIONS, **SSSD_SURVIVAL_DOMAIN,
                          **targets.sudo_sssd_options(self.server), **side.options}  # fmt: skip
                d = sssd.SssdDaemon(workdir, proxy.uri, self.server.base_dn,
                                    nss=SSSD_SURVIVAL_NSS, responders={"sudo": {}},
                                    **domain)  # fmt: skip
            else:
                checkout = None if side.checkout == REPO else side.checkout
                opts = {**DOMAIN_OPTIONS, **targets.sudo_cached_options(self.server, proxy),
                        **side.options}  # fmt: skip
                d = CachedDaemon(workdir, [proxy.uri], self.server.base_dn,
                                 log_level=self.log_level, checkout=checkout, **opts)  # fmt: skip
            d.start()
            try:
                targets.wait_until(lambda: targets.sudo_rules_loaded(self.server, offset), 600,
                              "the first full refresh")  # fmt: skip
                if isinstance(d, CachedDaemon):
                    targets.wait_until(lambda: _sudo_status(d)["last_full"] > 0, 600, "storing")
                else:
                    time.sleep(2.0)  # SSSD stores what the search returned (no status to ask)
                cold = self._sudo_l(d)
                if "sudo-cold" in wanted:
                    yield "sudo-cold", cold
                if "sudo-warm" in wanted:
                    warm = [self._sudo_l(d) for _ in range(self.warm_reps)]
                    yield "sudo-warm", sorted(warm, key=lambda s: s.wall)[len(warm) // 2]
                if "sudo-smart" in wanted:
                    yield "sudo-smart", self._smart(d, proxy)
            finally:
                d.stop()

    def _sudo_l(self, d: CachedDaemon | sssd.SssdDaemon) -> Sample:
        pids = list(d.pids().values()) if isinstance(d, sssd.SssdDaemon) else [
            d.pid, *(x.pid for x in procstat.children(d.pid))
        ]  # fmt: skip
        slapd = {"slapd": self.server.pid or 0}

        def cpu() -> float:
            return sum(map(_schedstat, pids)) + sum(procstat.cpu_seconds(slapd).values())

        offset, cpu0 = self.server.log_offset(), cpu()
        cmd = [*TIMECMD, *targets.sudo_l_command(self.exp.big_user)]
        r = nsenv.run_nss(cmd, d.pipes_dir, d.mc_dir, env=self.env, timeout=1800,
                          nsswitch=targets.SUDO_NSSWITCH)  # fmt: skip
        timing = parse(r.stderr)[0]
        if timing is None:
            raise RuntimeError(f"sudo -l gave no timing: {r.stderr[-2000:]}")
        level = int(DOMAIN_OPTIONS["ldap_group_nesting_level"])
        listed = targets.sudo_commands_listed(r.stdout)
        exact = listed == targets.sudo_expected_commands(self.exp, level)
        return Sample(timing.wall, cpu() - cpu0, _searches(self.server, offset), exact)

    def _smart(self, d: CachedDaemon | sssd.SssdDaemon, proxy: FaultProxy) -> Sample:
        """The next smart refresh, nothing having changed: its searches of sudo rules and
        the bytes the daemon received meanwhile (nothing else runs)."""
        offset, down = self.server.log_offset(), proxy.stats.bytes_down
        start = time.perf_counter()
        targets.wait_until(lambda: targets.sudo_searches(self.server, offset) > 0,
                      targets.SUDO_SMART * 3, "a smart refresh")  # fmt: skip
        time.sleep(1.0)  # its answer on the wire: one round trip on loopback
        searches = targets.sudo_searches(self.server, offset)
        return Sample(time.perf_counter() - start, 0.0, searches, True,
                      received=proxy.stats.bytes_down - down)  # fmt: skip

    def _exact(self, cmd: list[str], out: str) -> bool:
        if cmd[0] == "id":
            return _gids(out) == self.exp.initgroups(self.exp.big_user, 2)
        # A qualified side answers member@LDAP; the directory's names hold no "@".
        return {n.split("@", 1)[0] for n in _members(out)} == self.exp.members(GROUP, 2)

    def _floor(self, scenarios: list[str]) -> Iterator[tuple[str, Sample]]:
        for name, group in (("cold-id", None), ("cold-group", GROUP)):
            if name not in scenarios:
                continue
            if name not in self.floors:
                rec = record_lookup(
                    self.server.uri, self.server.base_dn, self.tmp / f"rec-{name}", group
                )
                self.floors[name] = gated_sends(rec["log"])
            sends, total = self.floors[name]
            yield (
                name,
                Sample(floor_once(self.server.port or 0, sends, total), 0.0, len(sends), True),
            )


def _sudo_status(d: CachedDaemon) -> dict[str, Any]:
    for child in d.control("status")["children"]:
        if child["name"].startswith("backend"):
            return dict(child["status"].get("sudo") or {"last_full": 0})
    return {"last_full": 0}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summary(a: Side, b: Side, scenarios: list[str]) -> list[str]:
    """The table of medians and ratios, one row per scenario and figure."""
    rows = [
        "| scenario | figure | A median | B median | B/A of medians | median of B/A per round "
        "| exact A, B |",
        "|---|---|---|---|---|---|---|",
    ]
    for sc in scenarios:
        sa, sb = a.samples.get(sc, []), b.samples.get(sc, [])
        if not sa or not sb:
            continue

        # A frozen server's login is timed whatever it answers (its codes are printed).
        def ok(s: Sample, sc: str = sc) -> bool:
            return s.exact or sc.endswith("-frozen")

        pairs = [(x, y) for x, y in zip(sa, sb, strict=False) if ok(x) and ok(y)]
        figures: list[tuple[str, Callable[[Sample], float], str]] = [
            ("wall", lambda s: s.wall, "s"),
            ("CPU", lambda s: s.cpu, "s"),
            ("searches", lambda s: s.searches, ""),
        ]
        if sc in PAM_SCENARIOS:
            figures.insert(1, ("process", lambda s: s.process or 0.0, "s"))
        if sc == "sudo-smart":
            figures = [("searches", lambda s: s.searches, ""),
                       ("bytes received", lambda s: float(s.received or 0), "")]  # fmt: skip
        for fig, get, unit in figures:
            ma = _median([get(s) for s in sa if ok(s)])
            mb = _median([get(s) for s in sb if ok(s)])
            if fig == "CPU" and (a.floor or b.floor):
                continue
            ratios = [get(y) / get(x) for x, y in pairs if get(x)]

            def fmt(v: float, unit: str = unit) -> str:
                return f"{v:.4f} {unit}" if unit else f"{v:g}"

            rows.append(
                f"| {sc} | {fig} | {fmt(ma)} | {fmt(mb)} | "
                f"×{mb / ma:.3f} | ×{_median(ratios):.3f} | "
                f"{sum(s.exact for s in sa)}/{len(sa)}, {sum(s.exact for s in sb)}/{len(sb)} |"
                if ma
                else f"| {sc} | {fig} | {fmt(ma)} | {fmt(mb)} | – | – | |"
            )
    return rows


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.ab", description=__doc__.splitlines()[0])
    ap.add_argument("--a", default=".", help="side A: '.', a checkout, a git revision, 'floor'")
    ap.add_argument("--b", default=".", help="side B: '.', a checkout, a git revision, 'floor'")
    ap.add_argument("--a-opt", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--b-opt", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warm-reps", type=int, default=3, help="warm-id: its median of this many")
    ap.add_argument("--deref", choices=("yes", "no"), default="yes", help="slapd's deref overlay")
    ap.add_argument("--memcache", action="store_true", help="the client reads the memory cache")
    ap.add_argument("--log-level", default="info", help="cached's log level (perf.run's: info)")
    ap.add_argument("--out", type=Path, help="also write the output to this file")
    args = ap.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    if "floor" in (args.a, args.b) and set(scenarios) & set(PAM_SCENARIOS + SUDO_SCENARIOS):
        ap.error("the floor has no login or sudo scenarios")
    logins = bool(set(scenarios) & set(PAM_SCENARIOS))
    reason = pamenv.skip_reason() if logins else nsenv.skip_reason()
    if reason:
        print(f"perf.ab: {reason}", file=sys.stderr)
        return 2
    out_file = open(args.out, "w") if args.out else None  # noqa: SIM115 (closed below)
    try:
        return _run(args, sys.argv[1:] if argv is None else argv, scenarios, out_file)
    finally:
        if out_file:
            out_file.close()


def _run(
    args: argparse.Namespace, argv: list[str], scenarios: list[str], out_file: TextIO | None
) -> int:
    def say(line: str = "") -> None:
        print(line, flush=True)
        if out_file:
            print(line, file=out_file, flush=True)

    sc = gendir.BIGROUPUSER
    gen = gendir.generate(sc, DATA_DIR, reuse=True)
    env: dict[str, str] = {} if args.memcache else SOCKET_ONLY
    with tempfile.TemporaryDirectory(prefix="perf-ab-", dir="/tmp") as tmpname:
        tmp = Path(tmpname)
        a = prepare("A", args.a, args.a_opt, tmp)
        b = prepare("B", args.b, args.b_opt, tmp)
        if (a.floor or b.floor) and "warm-id" in scenarios:
            scenarios = [s for s in scenarios if s != "warm-id"]
        say(f"# perf.ab {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
        say()
        say(f"* command: `python -m perf.ab {shlex.join(argv)}`")
        say(f"* A: {a.spec} ({a.describe}) {a.options or ''}")
        say(f"* B: {b.spec} ({b.describe}) {b.options or ''}")
        say(
            f"* host: {platform.node()}, {os.cpu_count()} CPUs, Python"
            f" {platform.python_version()}; load average at start {_loadavg()}"
        )
        say(
            f"* directory: {sc.name}, slapd deref overlay {args.deref}; client memory cache "
            f"{'on' if args.memcache else 'off (SSS_NSS_USE_MEMCACHE=NO)'}; "
            f"{args.rounds} rounds, order A,B then B,A; CPU: the daemon's processes and slapd"
        )
        logins = bool(set(scenarios) & set(PAM_SCENARIOS))
        tls = make_tls_material(tmp / "tls", "localhost") if logins else None
        ldif = gen.ldif
        if set(scenarios) & set(SUDO_SCENARIOS):
            ldif = targets.with_sudo_rules(gen.ldif, gen.expected(), tmp)
            say(f"* sudo: {targets.SUDO_RULES} rules and defaults (perf/targets.py), smart refresh "
                f"every {targets.SUDO_SMART} s on both sides")  # fmt: skip
        with Slapd(
            tmp / "slapd", ldif, sc.base_dn, deref=args.deref == "yes", tls=tls
        ) as server:
            m = Measure(server, gen.expected(), tmp, env, args.warm_reps, args.log_level)
            try:
                m.prepare_logins(scenarios)
                if set(scenarios) & set(LOGIN_SCENARIOS):
                    users = ", ".join(f"{p}-*: {u}" for p, u in m.login_users.items())
                    say(f"* logins: {users}; `{' '.join(pammatrix.LOGIN)}` through pam_sss.so")
                if set(scenarios) & set(ACCESS_SCENARIOS):
                    say(f"* access-*: `acct_mgmt` of {m.exp.big_user} through pam_sss.so, "
                        f"access_provider = simple, simple_allow_groups = {m.access_group} "
                        "(reached only through nesting)")  # fmt: skip
                say()
                say("```")
                for r in range(args.rounds):
                    for side in (a, b) if r % 2 == 0 else (b, a):
                        for name, s in m.round(side, r, scenarios):
                            side.samples.setdefault(name, []).append(s)
                            extra = (
                                f" process={s.process * 1e3:8.1f} ms codes={s.codes}"
                                if s.process is not None
                                else ""
                            )
                            if s.received is not None:
                                extra += f" received={s.received} B"
                            say(
                                f"round={r} {side.label} {name:<14} wall={s.wall * 1e3:8.1f} ms "
                                f"cpu={s.cpu * 1e3:8.1f} ms searches={s.searches:<5} "
                                f"exact={s.exact}{extra}"
                            )
            finally:
                m.close()
        say("```")
        say()
        say(f"load average at end {_loadavg()}")
        say()
        for line in summary(a, b, scenarios):
            say(line)
    wrong = sum(
        not s.exact
        for side in (a, b)
        for sc, ss in side.samples.items()
        if not sc.endswith("-frozen")
        for s in ss
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
