"""A throwaway ``cached serve`` for tests, the demo and benchmarks.

Everything lives in one work directory: the configuration, the pipes, memory-cache
and database directories, the pid file and the log. ``run_nss`` runs a command
through the real glibc and libnss_sss in a private mount namespace where
``/var/lib/sss/{pipes,mc}`` are this daemon's directories (``testing.nsenv``).
Only processes started here are ended, by PID.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cached.ipc import framing as rpc
from cached.ipc.ops import Op
from testing import nsenv, pamenv, procstat
from testing.pamenv import PamEnv
from testing.service import Service

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
REPO = Path(__file__).resolve().parent.parent


def config_text(
    uris: list[str],
    base: str,
    workdir: Path,
    *,
    domain: str = "LDAP",
    nss: dict[str, Any] | None = None,
    daemon: dict[str, Any] | None = None,
    pam: dict[str, Any] | None = None,
    sudo: dict[str, Any] | None = None,
    **domain_opts: Any,
) -> str:
    """A cached.conf for a test directory; options given override the defaults.
    ``pam``: the ``[pam]`` section (give ``daemon={"services": "nss, pam"}`` too);
    ``sudo``: the ``[sudo]`` section (with ``services`` listing ``sudo``)."""
    d = {
        "domains": domain,
        "pipes_dir": workdir / "pipes",
        "mc_dir": workdir / "mc",
        "db_dir": workdir / "db",
        "pid_file": workdir / "cached.pid",
        "dbus_address": "none",
        **(daemon or {}),
    }
    dom = {
        "id_provider": "ldap",
        "ldap_uri": ", ".join(uris),
        "ldap_search_base": base,
        "ldap_schema": "rfc2307bis",
        "offline_timeout_random_offset": 0,
        # Refresh ahead (on by default) off unless a test asks (None: the default): its
        # runs would add searches to what tests count, at a moment the machine-id sets.
        "refresh_expired_interval": 0,
        **domain_opts,
    }
    out = ["[cached]", *(f"{k} = {v}" for k, v in d.items()), "[nss]"]
    out += [f"{k} = {v}" for k, v in (nss or {}).items()]
    if pam is not None:
        out += ["[pam]", *(f"{k} = {v}" for k, v in pam.items())]
    if sudo is not None:
        out += ["[sudo]", *(f"{k} = {v}" for k, v in sudo.items())]
    # None: the option left out (its default), where the test file sets one.
    out += [f"[domain/{domain}]", *(f"{k} = {v}" for k, v in dom.items() if v is not None)]
    return "\n".join(out) + "\n"


class CachedDaemon(Service):
    def __init__(
        self,
        workdir: Path,
        uris: list[str],
        base: str,
        *,
        log_level: str = "debug",
        checkout: Path | None = None,
        **opts: Any,
    ) -> None:
        """``checkout``: the source tree whose ``cached`` runs (default this one), first
        on the daemon's path and its working directory, so that ``perf.ab`` can run two
        revisions against one server."""
        self.checkout = Path(checkout) if checkout is not None else REPO
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "cached.conf"
        self.config_path.write_text(config_text(uris, base, self.workdir, **opts))
        self.config_path.chmod(0o600)
        # Where the configuration puts them (``daemon=`` may move them).
        placed = opts.get("daemon") or {}
        self.pipes_dir = Path(placed.get("pipes_dir", self.workdir / "pipes"))
        self.mc_dir = Path(placed.get("mc_dir", self.workdir / "mc"))
        self.db_dir = Path(placed.get("db_dir", self.workdir / "db"))
        self.log_path = self.workdir / "cached.log"
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        # The command the daemon runs under (from_text).
        self.prefix: list[str] = []

    @classmethod
    def from_text(
        cls, workdir: Path, text: str, *, prefix: list[str] | None = None, **kw: Any
    ) -> CachedDaemon:
        """A daemon whose cached.conf is ``text`` whole (its directories are to be in
        ``workdir`` as config_text places them), run under ``prefix`` (e.g. nsenter
        into a joined host's namespaces, testing/adjoin.py)."""
        d = cls(workdir, [], "", **kw)
        d.config_path.write_text(text)
        d.prefix = list(prefix or [])
        return d

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        control = Path(rpc.control_socket(str(self.pipes_dir)))
        with contextlib.suppress(FileNotFoundError):
            control.unlink()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "cached", "--log-level", self.log_level,
                 "serve", "-c", str(self.config_path)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.checkout,
                env=self._env(),
            )  # fmt: skip
        self._started()
        deadline = time.monotonic() + START_TIMEOUT
        # Ready when the monitor serves its control socket: it opens it only after
        # every backend and the responder reported ready.
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"cached serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if control.exists():
                try:
                    self.control("status", timeout=5)
                    return
                except rpc.RpcError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"cached serve not ready in {START_TIMEOUT} s:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        procstat.terminate(self.proc, STOP_TIMEOUT)
        self._stopped()
        code = self.proc.returncode
        self.proc = None
        return code

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    # -- talking to it ---------------------------------------------------------------

    def control(self, op: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        path = rpc.control_socket(str(self.pipes_dir))
        return rpc.call_sync(path, Op(op), timeout=timeout, **args)

    def child_pid(self, name: str) -> int:
        """The pid of a ready child: ``"responder"`` or ``"backend LDAP"``."""
        for child in self.control("status")["children"]:
            if child["name"] == name and child["running"] and child["ready"]:
                return int(child["pid"])
        raise LookupError(f"no ready child {name!r}")

    def counters(self) -> dict[str, list[float]]:
        from cached.counters import merge

        return merge(list(self.control("counters")["processes"].values()))

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run ``cached <args> -c <config>``."""
        cmd, *rest = args
        return subprocess.run(
            [sys.executable, "-m", "cached", cmd, "-c", str(self.config_path), *rest],
            capture_output=True, text=True, timeout=timeout, cwd=self.checkout,
            env=self._env(), check=False,
        )  # fmt: skip

    def _env(self) -> dict[str, str] | None:
        """The environment of cached's processes: this process's, with another
        checkout first on ``PYTHONPATH`` when one is given (``-m`` puts the working
        directory first too)."""
        if self.checkout == REPO:
            return None
        return {**os.environ, "PYTHONPATH": str(self.checkout)}

    def run_nss(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        timeout: float = 120.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` through glibc + libnss_sss against this daemon."""
        return nsenv.run_nss(
            argv, self.pipes_dir, self.mc_dir, env=env, timeout=timeout, input=input
        )

    def start_nss(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``argv`` in the namespace without waiting (``communicate()`` it)."""
        return nsenv.start_nss(argv, self.pipes_dir, self.mc_dir, env=env)

    def pam_env(self, services: dict[str, str]) -> PamEnv:
        """Real PAM clients (``pam_sss.so``) against this daemon's PAM sockets (run it
        with ``services = nss, pam``), with ``services`` as the only ``/etc/pam.d``."""
        self.pipes_dir.chmod(0o755)  # the public socket is for uid 65534 too
        pamd = pamenv.make_pamd(self.workdir / "pam.d", services)
        return pamenv.PamEnv(self.pipes_dir, pamd, self.mc_dir)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


if __name__ == "__main__":  # pragma: no cover - manual use
    print(config_text(["ldap://127.0.0.1:389"], "dc=example,dc=test", Path(os.getcwd())))
