"""The daemons a perf run compares, behind one small interface.

A :class:`Target` can be started with an empty cache (:meth:`~Target.fresh`), runs
commands through glibc and the real ``libnss_sss`` (:meth:`~Target.run_nss`),
invalidates its whole cache (:meth:`~Target.invalidate_all`: ``cached cache -E`` or
``sss_cache -E``), names its processes for CPU accounting (:meth:`~Target.pids`) and
its store files (:meth:`~Target.store_files`). cached also reports its counters.

Both daemons get the same domain settings (:data:`DOMAIN_OPTIONS`): the same URI and
base, rfc2307bis, nesting level 2, no StartTLS, cache lifetime 5,400 s, page size
1,000, deref threshold 10 (SSSD 2.8.2's defaults, reference §6.1, written out so that
a change of either default cannot silently skew the comparison).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from perf.timecmd import Timing, parse
from testing import gendir, procstat
from testing.daemon import REPO, CachedDaemon
from testing.faultproxy import FaultProxy
from testing.slapd import Slapd
from testing.sssd import SssdDaemon

# Shared by both daemons' configurations (see the module doc).
DOMAIN_OPTIONS: dict[str, Any] = {
    "ldap_schema": "rfc2307bis",
    "ldap_group_nesting_level": 2,
    "ldap_id_use_start_tls": "false",
    "ldap_tls_reqcert": "never",
    "entry_cache_timeout": 5400,
    "ldap_page_size": 1000,
    "ldap_deref_threshold": 10,
}
# SSSD only: providers cached does not have. Left at their default (= id_provider),
# SSSD's backend runs sudo and other periodic searches of its own during the steps
# (seen: a sudoRole search right after start).
SSSD_ONLY_OPTIONS: dict[str, Any] = {
    "sudo_provider": "none",
    "autofs_provider": "none",
    "selinux_provider": "none",
    "hostid_provider": "none",
    "subdomains_provider": "none",
    "session_provider": "none",
    "resolver_provider": "none",
}
# SSSD only, and not about caching: with its defaults SSSD 2.8 cannot answer `id` for
# a user in 4,000 groups here. sssd_be blocks its event loop for longer than its
# watchdog allows (3 ticks of `timeout` = 10 s) while it saves the groups and is killed
# ("terminated by own WATCHDOG"); with a longer `timeout` the NSS responder still drops
# the waiting client after `client_idle_timeout` (60 s). Either way `id` prints the
# primary group only and exits 0. Both are raised so that SSSD's times can be
# measured at all; `--sssd-pure-defaults` leaves them out to show the failure.
SSSD_SURVIVAL_DOMAIN: dict[str, Any] = {"timeout": 60}
SSSD_SURVIVAL_NSS: dict[str, Any] = {"client_idle_timeout": 300}
# The same responder setting for cached (its [nss] reads it too), so the two differ
# only where they must.
CACHED_NSS: dict[str, Any] = {"client_idle_timeout": 300}
# A name no directory has: looked up once after every start so that the LDAP
# connection is up before the first measured step (both daemons connect lazily).
WARMUP_NAME = "perf-warmup-no-such-user"
TIMECMD = [sys.executable, "-m", "perf.timecmd", "--"]


class Target(Protocol):
    name: str
    level: int  # the nesting level its answers are checked against

    def fresh(self) -> None: ...
    def stop(self) -> None: ...
    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]: ...
    def invalidate_all(self) -> tuple[Timing | None, str]: ...
    def pids(self) -> dict[str, int]: ...
    def counters(self) -> dict[str, list[float]] | None: ...
    def store_files(self) -> dict[str, procstat.FileSize]: ...
    def config_text(self) -> str: ...
    def invalidate_command(self) -> str: ...


def _warm_up(target: Target) -> None:
    p = target.run_nss(["getent", "passwd", WARMUP_NAME])
    if p.returncode not in (0, 2):
        raise RuntimeError(f"{target.name}: warm-up lookup failed ({p.returncode}): {p.stderr}")


class CachedTarget:
    name = "cached"
    level = int(DOMAIN_OPTIONS["ldap_group_nesting_level"])

    def __init__(
        self, workdir: Path, uri: str, base: str, nss: dict[str, Any] | None = None
    ) -> None:
        """``nss``: [nss] options on top of CACHED_NSS."""
        self.workdir = workdir
        self.uri = uri
        self.base = base
        self.nss = {**CACHED_NSS, **(nss or {})}
        self.daemon: CachedDaemon | None = None
        self._pids: dict[str, int] = {}
        self._cycle = 0

    def fresh(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self._cycle += 1
        d = CachedDaemon(
            self.workdir,
            [self.uri],
            self.base,
            log_level="info",
            nss=self.nss,
            **DOMAIN_OPTIONS,
        )
        d.start()
        self.daemon = d
        self._find_pids()
        _warm_up(self)

    def _find_pids(self) -> None:
        status = self._d().control("status")
        self._pids = {"cached monitor": int(status["monitor"]["pid"])}
        for child in status["children"]:
            if child.get("running") and child.get("pid"):
                self._pids[f"cached {child['name']}"] = int(child["pid"])

    def restart(self) -> float:
        """Stop and start again on the stores it has; the seconds the start took
        (until every process is ready)."""
        d = self._d()
        d.stop()
        t0 = time.monotonic()
        d.start()
        took = time.monotonic() - t0
        self._find_pids()
        return took

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def _d(self) -> CachedDaemon:
        if self.daemon is None:
            raise RuntimeError("cached is not running")
        return self.daemon

    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self._d().run_nss(argv, env=env, timeout=1800.0)

    def invalidate_command(self) -> str:
        return "cached cache -E"

    def invalidate_all(self) -> tuple[Timing | None, str]:
        """``cached cache -E``; (None, why) while the CLI has no ``cache`` command."""
        d = self._d()
        argv = [*TIMECMD, sys.executable, "-m", "cached", "cache", "-c", str(d.config_path), "-E"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
        timing, rest = parse(p.stderr)
        if timing is None or timing.rc != 0:
            first = (rest.strip().splitlines() or ["(no output)"])[-1]
            if "invalid choice: 'cache'" in rest:
                return None, "n/a: `cached cache` is not in the CLI yet"
            rc = timing.rc if timing else "?"
            return None, f"n/a: `cached cache -E` failed (exit {rc}): {first}"
        return timing, ""

    def pids(self) -> dict[str, int]:
        return dict(self._pids)

    def counters(self) -> dict[str, list[float]] | None:
        return self._d().counters()

    def store_files(self) -> dict[str, procstat.FileSize]:
        d = self._d()
        out = {f"db/{k}": v for k, v in procstat.file_sizes(d.db_dir).items()}
        out.update({f"mc/{k}": v for k, v in procstat.file_sizes(d.mc_dir).items()})
        return out

    def config_text(self) -> str:
        return self._d().config_path.read_text()


class SssdTarget:
    name = "sssd"
    level = int(DOMAIN_OPTIONS["ldap_group_nesting_level"])

    def __init__(self, workdir: Path, uri: str, base: str, pure_defaults: bool = False) -> None:
        domain = {**DOMAIN_OPTIONS, **SSSD_ONLY_OPTIONS}
        nss: dict[str, Any] = {}
        if not pure_defaults:
            domain.update(SSSD_SURVIVAL_DOMAIN)
            nss.update(SSSD_SURVIVAL_NSS)
        self.daemon = SssdDaemon(workdir, uri, base, nss=nss, **domain)
        # Seconds a client command may take before it is killed (perf.run --scale
        # gives up on a size SSSD cannot finish).
        self.client_timeout = 1800.0

    def fresh(self) -> None:
        self.daemon.stop()
        self.daemon.wipe()
        self.daemon.start()
        _warm_up(self)

    def stop(self) -> None:
        self.daemon.stop()

    def restart(self) -> float:
        """Stop and start again on the cache it has; the seconds the start took
        (until its sockets are there)."""
        self.daemon.stop()
        t0 = time.monotonic()
        self.daemon.start()
        return time.monotonic() - t0

    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.daemon.run_nss(argv, env=env, timeout=self.client_timeout)

    def invalidate_command(self) -> str:
        return "sss_cache -E"

    def invalidate_all(self) -> tuple[Timing | None, str]:
        p = self.daemon.run_in_namespace([*TIMECMD, "sss_cache", "-E"])
        timing, rest = parse(p.stderr)
        if timing is None or timing.rc != 0:
            return None, f"sss_cache -E failed: {p.returncode} {rest.strip()[-300:]}"
        return timing, ""

    def pids(self) -> dict[str, int]:
        return self.daemon.pids()

    def counters(self) -> dict[str, list[float]] | None:
        return None

    def store_files(self) -> dict[str, procstat.FileSize]:
        out = {f"db/{k}": v for k, v in procstat.file_sizes(self.daemon.db_dir).items()}
        out.update({f"mc/{k}": v for k, v in procstat.file_sizes(self.daemon.mc_dir).items()})
        return out

    def config_text(self) -> str:
        return self.daemon.config


def stop_quietly(target: Target) -> None:
    with contextlib.suppress(Exception):
        target.stop()


# -- sudo (perf.ab's sudo-* scenarios) ----------------------------------------------
#
# ``sudo -l`` for bigroupuser with 1,000 rules in the directory, and what a smart
# refresh costs when nothing changed, cached or SSSD 2.8.2.
#
# The rules (:func:`sudo_rules_ldif`) are loaded with the bigroupuser directory under
# ``ou=sudoers``: ``defaults``, and 1,000 ``sudoRole`` entries, rule ``i`` for
# ``%group<i % 3000>`` (one in three of them a group bigroupuser reaches at nesting
# level 2 or below, the others not), every tenth also for a user, every fiftieth for a
# ``+netgroup``; each runs ``/usr/bin/cmd<i>``, ``sudoHost: ALL``. ``sudo -l -U
# bigroupuser`` must list exactly the commands of the rules of its groups (the netgroup
# rules are sent to sudo, whose ``innetgr`` asks the daemon through libnss_sss,
# ``netgroup: sss``: ``perf-ng``, in the directory, does not hold bigroupuser). They
# were written long ago (SUDO_WRITTEN): a smart refresh finds them as in steady state.
#
# Each side's daemon (``services = nss, sudo``) reaches slapd through a FaultProxy of its
# own, so the bytes a refresh receives are counted on the wire alike for both; its
# smart refresh runs every SUDO_SMART seconds, its full refresh not within the round.

SUDO_RULES = 1000
SUDO_SMART = 30  # seconds between smart refreshes, both sides
SUDO_WRITTEN = "20251201000000Z"  # when the rules were written
SUDO_NSSWITCH = (
    "passwd: files sss\ngroup: files sss\ninitgroups: files sss\n"
    "sudoers: files sss\nnetgroup: sss\n"
)
_CMD = re.compile(r"/usr/bin/cmd(\d+)")


def sudoers_dn(base: str) -> str:
    return f"ou=sudoers,{base}"


def _sudo_rule_groups(exp: gendir.Expected) -> list[str]:
    return sorted(exp.group_names())


def sudo_rules_ldif(exp: gendir.Expected) -> str:
    """The sudo entries for slapadd, written long ago (their ``modifyTimestamp`` and
    ``createTimestamp`` a year back): a directory's rules as a smart refresh finds them
    in steady state, none changed within the last minutes."""
    base = sudoers_dn(exp.base_dn)
    groups = _sudo_rule_groups(exp)
    users = sorted(exp.user_names())
    old = f"createTimestamp: {SUDO_WRITTEN}\nmodifyTimestamp: {SUDO_WRITTEN}\n"
    out = [
        f"dn: {base}\nobjectClass: organizationalUnit\nou: sudoers\n{old}",
        f"dn: cn=defaults,{base}\nobjectClass: sudoRole\ncn: defaults\n"
        f"sudoOption: !lecture\n{old}",
        f"dn: cn=perf-ng,{exp.base_dn}\nobjectClass: nisNetgroup\ncn: perf-ng\n"
        "nisNetgroupTriple: (-,nobody-here,)\n",
    ]
    for i in range(SUDO_RULES):
        who = [f"%{groups[(i * 3) % len(groups)]}"]
        if i % 10 == 0:
            who.append(users[i % len(users)])
        if i % 50 == 0:
            who.append("+perf-ng")
        out.append(
            f"dn: cn=rule{i:04d},{base}\nobjectClass: sudoRole\n"
            f"cn: rule{i:04d}\n" + "".join(f"sudoUser: {w}\n" for w in who)
            + f"sudoHost: ALL\nsudoCommand: /usr/bin/cmd{i}\nsudoOption: !authenticate\n"
            f"sudoOrder: {i}\n{old}"
        )
    return "\n".join(out)


def with_sudo_rules(ldif: Path, exp: gendir.Expected, tmp: Path) -> Path:
    """A copy of the directory's LDIF with the sudo entries appended."""
    out = tmp / "with-sudo.ldif"
    with open(ldif) as src, open(out, "w") as dst:
        for chunk in iter(lambda: src.read(1 << 20), ""):
            dst.write(chunk)
        dst.write("\n" + sudo_rules_ldif(exp))
    return out


def sudo_expected_commands(exp: gendir.Expected, level: int) -> set[int]:
    """The rules ``sudo -l -U big_user`` lists: those of its groups and its name."""
    big = exp.big_user
    gids = exp.initgroups(big, level)
    mine = {g for g in exp.group_names() if exp.group(g).gid in gids}
    groups = _sudo_rule_groups(exp)
    users = sorted(exp.user_names())
    out = set()
    for i in range(SUDO_RULES):
        if groups[(i * 3) % len(groups)] in mine or (i % 10 == 0 and users[i % len(users)] == big):
            out.add(i)
    return out


def sudo_commands_listed(output: str) -> set[int]:
    return {int(m) for m in _CMD.findall(output)}


def sudo_cached_options(server: Slapd, proxy: FaultProxy) -> dict[str, Any]:
    return {
        "ldap_uri": proxy.uri,
        "daemon": {"services": "nss, sudo"},
        "ldap_sudo_search_base": sudoers_dn(server.base_dn),
        "ldap_sudo_smart_refresh_interval": SUDO_SMART,
        "ldap_sudo_random_offset": 0,
    }


def sudo_sssd_options(server: Slapd) -> dict[str, Any]:
    return {
        "sudo_provider": "ldap",
        "ldap_sudo_search_base": sudoers_dn(server.base_dn),
        "ldap_sudo_smart_refresh_interval": SUDO_SMART,
    }


def sudo_rules_loaded(server: Slapd, offset: int) -> bool:
    """A full read of the sudo rules has been answered since ``offset`` (its search,
    in slapd's log, returned them all)."""
    return any(
        "sudoRole" in pages[0].filter and sum(op.nentries or 0 for op in pages) > SUDO_RULES
        for pages in server.logical_searches(offset)
    )


def sudo_searches(server: Slapd, offset: int) -> int:
    return sum(
        1 for pages in server.logical_searches(offset) if "sudoRole" in pages[0].filter
    )


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"perf.targets: {what} not within {timeout} s")
        time.sleep(0.2)


def sudo_l_command(user: str) -> list[str]:
    """``sudo -l -U user``, for nsenv.run_nss with SUDO_NSSWITCH."""
    return ["sudo", "-l", "-U", user]

