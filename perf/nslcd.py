"""A throwaway nslcd (Debian's ``nslcd`` + ``libnss-ldapd``) for comparisons: no cache.

nslcd answers every lookup with LDAP searches, so it shows what a daemon without a
cache costs on the same directory. It runs in a private mount namespace where
``/etc/nslcd.conf`` and ``/run`` are bind mounts of files in our work directory
(``/run/nslcd/socket`` is where ``libnss_ldap.so.2`` connects), in the foreground
(``nslcd -n``), and is ended by its pid. Client commands enter that namespace
(``nsenter -m``) and get an nsswitch.conf of their own with ``ldap`` only.

nslcd follows nested groups without a depth limit (``nss_nested_groups yes``), so its
answers are checked against the directory's full depth, not nesting level 2.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from perf.timecmd import Timing
from testing import nsenv, procstat

NSLCD = "/usr/sbin/nslcd"
PACKAGES = ("nslcd", "libnss-ldapd")
PROTECT = (Path("/etc/nsswitch.conf"),)
NSSWITCH_LDAP = "passwd: ldap\ngroup: ldap\ninitgroups: ldap\n"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# $1 $2: config file, run dir; then the command.
_WRAPPER = """
mount --bind "$1" /etc/nslcd.conf && mount --bind "$2" /run ||
    { echo "nslcd-ns: mount --bind failed" >&2; exit 125; }
shift 2
exec "$@"
"""
# Unlimited nesting: the deepest level any generated directory has.
LEVEL = 100


def config_text(uri: str, base: str) -> str:
    return "\n".join(
        [
            "uid nslcd",
            "gid nslcd",
            f"uri {uri}",
            f"base {base}",
            "pagesize 1000",
            "nss_nested_groups yes",
            "nss_initgroups_ignoreusers ALLLOCAL",
            "",
        ]
    )


class NslcdTarget:
    name = "nslcd"
    level = LEVEL

    def __init__(self, workdir: Path, uri: str, base: str) -> None:
        self.workdir = workdir
        self.conf = workdir / "nslcd.conf"
        self.run_dir = workdir / "run"
        self.empty = workdir / "empty"  # stands in for the sss pipes/mc dirs of nsenv
        self.text = config_text(uri, base)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "nslcd.stderr"

    def fresh(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        (self.run_dir / "nslcd").mkdir(parents=True)
        self.empty.mkdir()
        self.workdir.chmod(0o755)
        self.run_dir.chmod(0o755)
        user = pwd.getpwnam("nslcd")
        os.chown(self.run_dir / "nslcd", user.pw_uid, user.pw_gid)
        self.conf.write_text(self.text)
        self.conf.chmod(0o640)
        os.chown(self.conf, 0, user.pw_gid)
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            _WRAPPER,
            "nslcd-ns",
            str(self.conf),
            str(self.run_dir),
            NSLCD,
            "-n",
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        socket_path = self.run_dir / "nslcd" / "socket"
        deadline = time.monotonic() + START_TIMEOUT
        while not socket_path.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"nslcd exited with {self.proc.returncode}: {self._log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nslcd did not create its socket: {self._log()}")
            time.sleep(0.02)
        from perf.targets import WARMUP_NAME

        p = self.run_nss(["getent", "passwd", WARMUP_NAME])
        if p.returncode not in (0, 2):
            raise RuntimeError(f"nslcd warm-up failed ({p.returncode}): {p.stderr}")

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None:
            return
        procstat.terminate(self.proc, STOP_TIMEOUT)
        self.proc = None

    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("nslcd is not running")
        inner = nsenv.nss_command(argv, self.empty, self.empty, nsswitch=NSSWITCH_LDAP)
        return subprocess.run(
            ["nsenter", "-m", "-t", str(self.proc.pid), "--", *inner],
            env=nsenv.nss_env(env),
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )

    def invalidate_command(self) -> str:
        return "(none: nslcd has no cache)"

    def invalidate_all(self) -> tuple[Timing | None, str]:
        return None, "n/a: nslcd has no cache"

    def pids(self) -> dict[str, int]:
        return {"nslcd": self.proc.pid} if self.proc is not None else {}

    def counters(self) -> dict[str, list[float]] | None:
        return None

    def store_files(self) -> dict[str, procstat.FileSize]:
        return {}

    def config_text(self) -> str:
        return self.text


def version() -> str:
    with contextlib.suppress(OSError):
        p = subprocess.run([NSLCD, "--version"], capture_output=True, text=True, check=False)
        return p.stdout.splitlines()[0] if p.stdout else ""
    return ""
