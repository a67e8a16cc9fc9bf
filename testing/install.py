"""Install the Debian packages of a comparison (SSSD, nslcd) without starting anything.

``perf.run --with-sssd`` needs ``sssd-common``, ``sssd-ldap`` and ``sssd-tools``; it
installs them here, non-interactively and without recommends, and leaves the host as
it found it apart from the packages themselves:

* no service is started by the maintainer scripts: a temporary ``/usr/sbin/policy-rc.d``
  that exits 101 ("action forbidden", invoke-rc.d(8)) is put in place when none exists
  (and removed after); an existing one is left alone;
* no unit stays enabled: systemd units of the package that the postinst enabled
  (``deb-systemd-helper enable``, which works without a running systemd) are disabled
  again with ``systemctl disable`` (it edits the symlinks offline, and for
  ``sssd.service`` also turns the SysV rc links into K links); a later upgrade sees
  them disabled and keeps them so (``deb-systemd-helper was-enabled``);
* no daemon of the package is left running: if one appeared during the installation
  anyway, we stop with an error naming its pid rather than end a process we did not
  start.

What the packages' own scripts do besides that is Debian's business and is listed in
the report (``libpam-sss``'s postinst runs ``pam-auth-update``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
SYSTEMD_ETC = Path("/etc/systemd/system")
APT_TIMEOUT = 1800.0


class InstallError(RuntimeError):
    """The packages could not be installed, or the host was left in an unexpected state."""


def installed(package: str) -> bool:
    """Whether dpkg reports ``package`` as installed."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0 and proc.stdout.startswith("ii")


def package_version(package: str) -> str:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def enabled_units(prefixes: Sequence[str]) -> set[str]:
    """What would start at boot, for names starting with one of ``prefixes``: systemd
    unit links under ``/etc/systemd/system/*.wants`` (made by ``deb-systemd-helper
    enable``, which works without a running systemd) and SysV start links
    ``/etc/rc[2-5].d/S??name`` (nslcd ships an init script only), as ``sysv:name``."""
    found: set[str] = set()
    for wants in SYSTEMD_ETC.glob("*.wants"):
        for link in wants.iterdir():
            if link.name.startswith(tuple(prefixes)):
                found.add(link.name)
    for rc in Path("/etc").glob("rc[2-5].d"):
        for link in rc.glob("S*"):
            script = link.name[3:]
            if script.startswith(tuple(prefixes)):
                found.add(f"sysv:{script}")
    return found


def disable(units: Sequence[str], log: list[str]) -> None:
    """Disable systemd units and SysV scripts as :func:`enabled_units` names them."""
    native = [u for u in units if not u.startswith("sysv:")]
    if native:
        # deb-systemd-helper refuses to run outside a maintainer script; systemctl
        # disable edits the same symlinks without a running systemd.
        subprocess.run(["systemctl", "disable", *native], capture_output=True, check=False)
        log.append(f"systemctl disable {' '.join(native)} (the postinst had enabled them)")
    for script in sorted({u[5:] for u in units if u.startswith("sysv:")}):
        subprocess.run(["update-rc.d", script, "disable"], capture_output=True, check=False)
        log.append(f"update-rc.d {script} disable (the postinst had enabled it)")


def processes(prefixes: Sequence[str]) -> dict[int, str]:
    """Running processes whose command name starts with one of ``prefixes``."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith(tuple(prefixes)):
            out[int(entry.name)] = comm
    return out


def ensure_packages(
    packages: Sequence[str],
    unit_prefixes: Sequence[str],
    log: list[str],
    protect: Sequence[Path] = (),
) -> list[str]:
    """Install the missing ``packages``; returns the ones installed now (empty when all
    were there).  ``unit_prefixes`` name the package's units and daemons (``("sssd",)``).
    Files in ``protect`` (``/etc/nsswitch.conf`` for libnss-ldapd, whose postinst may add
    ``ldap`` to it) are put back as they were if the installation changed them. Every
    action is appended to ``log`` for the report."""
    missing = [p for p in packages if not installed(p)]
    if not missing:
        return []
    saved = {path: path.read_bytes() for path in protect if path.exists()}
    # Watched, not restored: libpam-sss's postinst runs pam-auth-update, which is the
    # package's documented behaviour; the report says so.
    watched = {p: p.read_bytes() for p in sorted(Path("/etc/pam.d").glob("common-*"))}
    if os.geteuid() != 0:
        raise InstallError(f"installing {' '.join(missing)} needs root")
    units_before = enabled_units(unit_prefixes)
    procs_before = processes(unit_prefixes)
    created_policy = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text(
            "#!/bin/sh\n# testing/install.py: no service starts during apt\nexit 101\n"
        )
        POLICY_RC_D.chmod(0o755)
        created_policy = True
        log.append(f"created a temporary {POLICY_RC_D} (exit 101)")
    else:
        log.append(f"kept the existing {POLICY_RC_D}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", APT_LISTCHANGES_FRONTEND="none")
    cmd = [
        "apt-get", "install", "-y", "-q", "--no-install-recommends",
        "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
        *missing,
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, check=False, timeout=APT_TIMEOUT
        )
        if proc.returncode != 0 and "apt-get update" in proc.stderr + proc.stdout:
            # Stale package lists (a 404 on a superseded version): refresh them once.
            subprocess.run(
                ["apt-get", "update", "-q"], env=env, capture_output=True, check=False,
                timeout=APT_TIMEOUT,
            )  # fmt: skip
            log.append("apt-get update")
            proc = subprocess.run(
                cmd, env=env, capture_output=True, text=True, check=False, timeout=APT_TIMEOUT
            )
    finally:
        if created_policy:
            POLICY_RC_D.unlink()
            log.append(f"removed the temporary {POLICY_RC_D}")
    log.append(" ".join(cmd) + f"  → exit {proc.returncode}")
    for path, content in watched.items():
        if path.exists() and path.read_bytes() != content:
            log.append(f"{path} was changed by the maintainer scripts (pam-auth-update)")
    for path, content in saved.items():
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            log.append(f"restored {path}, which the maintainer scripts had changed")
    if proc.returncode != 0:
        raise InstallError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    new_units = sorted(enabled_units(unit_prefixes) - units_before)
    if new_units:
        disable(new_units, log)
    left = sorted(enabled_units(unit_prefixes) - units_before)
    if left:
        raise InstallError(f"units still enabled after installing {missing}: {left}")
    new_procs = {pid: c for pid, c in processes(unit_prefixes).items() if pid not in procs_before}
    if new_procs:
        raise InstallError(
            f"the installation started {new_procs} although service starts were forbidden;"
            " stop them (by pid) and rerun"
        )
    return missing


def main() -> int:
    """``python -m testing.install``: the oracle's packages (SSSD 2.8.2 and ldb-tools),
    installed as ``make compat`` installs them, for the tests that compare against it
    (``make deps`` runs this, so ``make test`` runs them rather than skips them)."""
    from testing import pamcompat  # its PACKAGES: SSSD's and ldb-tools

    log: list[str] = []
    try:
        done = ensure_packages(pamcompat.PACKAGES, ("sssd",), log)
    except InstallError as e:
        print(f"testing.install: {e}", file=sys.stderr)
        return 1
    for line in log:
        print(f"testing.install: {line}")
    if done:
        print(f"testing.install: installed {' '.join(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
