"""A throwaway real SSSD 2.8 (Debian's packages) for comparisons, in a private mount namespace.

SSSD's paths are compiled in (``/var/lib/sss/{db,pipes,mc,pubconf,...}``, ``/etc/sssd``,
``/var/log/sssd``, ``/run/sssd.pid``), so the monitor is started under ``unshare -m``
with private propagation, where each of those directories is a bind mount of a
directory inside our work directory:

====================  ==========================================
in the namespace      work directory
====================  ==========================================
``/var/lib/sss``      ``varlib/`` (db, pipes, mc, pubconf, ...)
``/etc/sssd``         ``etc/`` (our ``sssd.conf``, empty conf.d)
``/run``              ``run/`` (``sssd.pid``)
``/var/log/sssd``     ``log/``
====================  ==========================================

The host's ``/var/lib/sss``, ``/etc/sssd`` and ``/run`` are never written. ``sssd -i
--logger=stderr`` keeps the monitor in the foreground as our child (``unshare`` execs
it, so the pid we hold is the monitor's); its children are found through ``/proc``.
Stopping sends SIGTERM to the monitor (it ends its children), then SIGKILL by pid to
whatever of *our* processes is left.

NSS clients do not need the namespace: the client only opens
``/var/lib/sss/pipes/nss`` and ``/var/lib/sss/mc/*``, so :meth:`SssdDaemon.run_nss`
uses :mod:`testing.nsenv` with ``varlib/pipes`` and ``varlib/mc``, exactly as for cached.
``sss_cache`` reads ``/var/lib/sss/db`` and signals the pid in ``/run/sssd.pid``, so it
runs inside the monitor's namespace (``nsenter -m -t <pid>``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cached.responder import wire
from testing import nsenv, procstat
from testing.service import Service

SSSD = "/usr/sbin/sssd"
SSS_CACHE = "/usr/sbin/sss_cache"
# sssd-ad: the AD provider, the oracle of id_provider = ad (tests/integration/test_adjoin.py).
# sssd-krb5: the krb5 provider, the oracle of auth_provider = krb5
# (tests/integration/test_pam_krb5_sssd.py); sssd-ad brings only its common part.
PACKAGES = ("sssd-common", "sssd-ldap", "sssd-tools", "sssd-ad", "sssd-krb5")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
# How long a probe of a responder socket waits for the GET_VERSION reply before it
# tries again (the responder answers nothing while it registers with the monitor).
PROBE_TIMEOUT = 0.5
# libnss_sss waits up to 300 s for a reply (reference §1.8); a cold id of a user in
# 4,000 groups takes SSSD minutes, so client commands get a long leash.
CLIENT_TIMEOUT = 1800.0

# $1..$4: varlib, etc, run, log; then the command.
_WRAPPER = """
mount --bind "$1" /var/lib/sss && mount --bind "$2" /etc/sssd &&
    mount --bind "$3" /run && mount --bind "$4" /var/log/sssd ||
    { echo "sssd-ns: mount --bind failed" >&2; exit 125; }
shift 4
exec "$@"
"""

VARLIB_DIRS = ("db", "pipes/private", "mc", "pubconf/krb5.include.d", "gpo_cache",
               "secrets", "deskprofile", "keytabs")  # fmt: skip


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount namespace, bind mounts)"
    for path in (SSSD, SSS_CACHE, "/usr/libexec/sssd/sssd_be", "/usr/lib/x86_64-linux-gnu/sssd"):
        if not Path(path).exists():
            return f"{path} is missing: install {' '.join(PACKAGES)}"
    for target in ("/var/lib/sss", "/etc/sssd", "/var/log/sssd"):
        if not Path(target).is_dir():
            return f"mount point {target} is missing (it comes with sssd-common)"
    return None


def config_text(
    uri: str,
    base: str,
    *,
    domain: str = "LDAP",
    nss: dict[str, Any] | None = None,
    pam: dict[str, Any] | None = None,
    responders: dict[str, dict[str, Any]] | None = None,
    **domain_opts: Any,
) -> str:
    """sssd.conf for one LDAP domain, NSS only unless ``pam`` is given (then ``services =
    nss, pam`` with those ``[pam]`` options); ``responders``: more services (``ssh``, ...)
    with their sections' options; options given override the defaults."""
    dom: dict[str, Any] = {
        "id_provider": "ldap",
        "auth_provider": "none",
        "access_provider": "permit",
        "chpass_provider": "none",
        "ldap_uri": uri,
        "ldap_search_base": base,
        "ldap_schema": "rfc2307bis",
        "cache_credentials": "false",
        "enumerate": "false",
        **domain_opts,
    }
    lines = [
        "[sssd]",
        "config_file_version = 2",
        "services = " + ", ".join(
            ["nss", *(["pam"] if pam is not None else []), *(responders or {})]
        ),
        f"domains = {domain}",
        "",
        "[nss]",
        *(f"{k} = {v}" for k, v in (nss or {}).items()),
        "",
        *(["[pam]", *(f"{k} = {v}" for k, v in pam.items()), ""] if pam is not None else []),
        *(
            line
            for name, opts in (responders or {}).items()
            for line in (f"[{name}]", *(f"{k} = {v}" for k, v in opts.items()), "")
        ),
        f"[domain/{domain}]",
        *(f"{k} = {v}" for k, v in dom.items()),
    ]
    return "\n".join(lines) + "\n"


def _answers(path: Path) -> bool:
    """The responder behind ``path`` answers GET_VERSION: its event loop runs, so its
    start-up is over. Its socket listens before it has registered with the monitor
    (a blocking D-Bus call); a monitor stopped in between waits for that responder,
    which waits out D-Bus's 20 s reply timeout for the monitor, so a stop right
    after a start took 21 s."""
    request = wire.HEADER.pack(wire.HEADER_SIZE + 4, 1, 0, 0) + wire.U32.pack(1)
    # Through the directory's descriptor: a work directory's path may be longer than
    # sun_path holds (108 bytes, unix(7)).
    try:
        parent = os.open(path.parent, os.O_PATH)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(PROBE_TIMEOUT)
            sock.connect(f"/proc/self/fd/{parent}/{path.name}")
            sock.sendall(request)
            return len(sock.recv(wire.HEADER_SIZE)) > 0
    except OSError:  # not listening yet, or no answer within PROBE_TIMEOUT
        return False
    finally:
        os.close(parent)


class SssdDaemon(Service):
    """``sssd -i`` in a namespace of its own; the work directory holds everything."""

    name = "sssd"

    def __init__(
        self,
        workdir: Path,
        uri: str,
        base: str,
        nss: dict[str, Any] | None = None,
        pam: dict[str, Any] | None = None,
        responders: dict[str, dict[str, Any]] | None = None,
        **domain_opts: Any,
    ) -> None:
        """``pam``: also run the PAM responder (``services = nss, pam``) with these
        ``[pam]`` options; ``responders``: more responders (``{"ssh": {}}``) with their
        sections' options. start() then waits for their sockets as well."""
        self.workdir = Path(workdir)
        self.varlib = self.workdir / "varlib"
        self.etc = self.workdir / "etc"
        self.run_dir = self.workdir / "run"
        self.log_dir = self.workdir / "log"
        self.stderr_path = self.workdir / "sssd.stderr"
        self.config_path = self.etc / "sssd.conf"
        self.pipes_dir = self.varlib / "pipes"
        self.mc_dir = self.varlib / "mc"
        self.db_dir = self.varlib / "db"
        self.config = config_text(
            uri, base, nss=nss, pam=pam, responders=responders, **domain_opts
        )
        self.with_pam = pam is not None
        self.responders = tuple(responders or ())
        self.proc: subprocess.Popen[bytes] | None = None
        self._pids: dict[str, int] = {}
        # The command the monitor runs under (e.g. nsenter into a joined host's
        # namespaces, testing/adjoin.py); ``config`` may be replaced whole before start.
        self.prefix: list[str] = []

    # -- life cycle ------------------------------------------------------------------

    def _prepare(self) -> None:
        # Readable by all: sssd runs as root here, but the work directory may sit under
        # a 0700 temporary directory; the namespace paths are what clients use.
        for d in (self.workdir, self.etc, self.etc / "conf.d", self.run_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        for sub in VARLIB_DIRS:
            (self.varlib / sub).mkdir(parents=True, exist_ok=True)
        self.varlib.chmod(0o755)
        (self.varlib / "db").chmod(0o700)
        (self.varlib / "pipes" / "private").chmod(0o700)
        self.mc_dir.chmod(0o775)
        self.etc.chmod(0o711)
        self.config_path.write_text(self.config)
        self.config_path.chmod(0o600)  # sssd refuses a config readable by others

    def wipe(self) -> None:
        """Remove the cache, memory cache, sockets and logs (SSSD must be stopped)."""
        if self.running:
            raise RuntimeError("stop sssd before wiping its cache")
        for d in (self.varlib, self.run_dir, self.log_dir):
            shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.stderr_path.unlink()

    def start(self) -> None:
        if self.running:
            return
        reason = skip_reason()
        if reason:
            raise RuntimeError(f"cannot run SSSD: {reason}")
        self._prepare()
        nsenv.ensure_mount_points()
        cmd = [
            *self.prefix, "unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", _WRAPPER, "sssd-ns",
            str(self.varlib), str(self.etc), str(self.run_dir), str(self.log_dir),
            SSSD, "-i", "--logger=stderr", "-c", "/etc/sssd/sssd.conf",
        ]  # fmt: skip
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True
            )
        self._started()
        self._pids = {}
        deadline = time.monotonic() + START_TIMEOUT
        nss_socket = self.pipes_dir / "nss"
        wanted = ["sssd_be", "sssd_nss"]
        sockets = [nss_socket]
        if self.with_pam:
            wanted.append("sssd_pam")
            sockets += [self.pipes_dir / "pam", self.pipes_dir / "private" / "pam"]
        for name in self.responders:
            wanted.append(f"sssd_{name}")
            sockets.append(self.pipes_dir / name)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"sssd exited with {self.proc.returncode} while starting:\n{self.log_tail()}"
                )
            kids = {i.comm: i.pid for i in procstat.children(self.proc.pid)}
            if (
                all(s.exists() for s in sockets)
                and all(w in kids for w in wanted)
                and all(_answers(s) for s in sockets)
            ):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sssd not ready in {START_TIMEOUT} s:\n{self.log_tail()}")
            time.sleep(0.05)
        self._pids = {"sssd": self.proc.pid, **kids}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> dict[str, int]:
        """The monitor and its live children, by command name. Looked up every time:
        the monitor restarts a child its watchdog killed (a new pid)."""
        if not self.running:
            return dict(self._pids)
        assert self.proc is not None
        return {"sssd": self.proc.pid, **{i.comm: i.pid for i in procstat.children(self.proc.pid)}}

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        ours = [i.pid for i in procstat.children(self.proc.pid)] if self.running else []
        procstat.terminate(self.proc, STOP_TIMEOUT)
        # The monitor ends its children; any of them still alive gets SIGKILL by pid.
        deadline = time.monotonic() + STOP_TIMEOUT
        for pid in ours:
            while procstat.pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            info = procstat.proc_info(pid)
            if info is not None and info.comm.startswith("sssd"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._stopped()
        code = self.proc.returncode
        self.proc = None
        return code

    # -- talking to it ---------------------------------------------------------------

    def run_nss(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float = CLIENT_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return nsenv.run_nss(argv, self.pipes_dir, self.mc_dir, env=env, timeout=timeout)

    def run_in_namespace(
        self, argv: list[str], timeout: float = CLIENT_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the monitor's mount namespace (``sss_cache``, ``sssctl``)."""
        if not self.running:
            raise RuntimeError("sssd is not running")
        assert self.proc is not None
        return subprocess.run(
            ["nsenter", "-m", "-t", str(self.proc.pid), "--", *argv],
            capture_output=True, text=True, timeout=timeout, check=False,
            env=nsenv.nss_env(),
        )  # fmt: skip

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def version() -> str:
        proc = subprocess.run([SSSD, "--version"], capture_output=True, text=True, check=False)
        return proc.stdout.strip()


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.stdout.write(config_text("ldap://127.0.0.1:389", "dc=example,dc=test"))
