"""systemd/cached.service and systemd/cached.tmpfiles against the daemon they run.

* ``systemd-analyze verify`` accepts the unit, with no warnings. ``security --offline``
  keeps its exposure score low.
* ``systemd-tmpfiles --create --root=DIR`` creates the directories with their modes.
* The unit's writable paths are exactly the defaults of db_dir, pipes_dir, mc_dir and the
  pid file's directory in cached/config.py, so the two cannot drift apart.
* ``Type=notify`` holds: ``cached serve`` sends READY=1 from its main PID once the NSS
  socket answers, survives the ExecReload signal, and sends STOPPING=1 on SIGTERM.
* The daemon works inside the unit's sandbox, emulated without systemd as PID 1: the
  file system read-only except ReadWritePaths, the empty CapabilityBoundingSet=,
  NoNewPrivileges=, UMask= and Environment=. It has no writable and executable
  mapping (MemoryDenyWriteExecute=).

CI containers do not run systemd as PID 1, so nothing here starts the unit through
systemd. systemd-analyze and systemd-tmpfiles come from Debian's ``systemd`` package.
``/bin/kill`` (ExecReload=, which verify checks) comes from ``procps``. setpriv and
unshare come from ``util-linux``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from cached.config import DAEMON_OPTIONS, NSS_OPTIONS
from cached.ipc import framing as rpc
from cached.ipc.ops import Op
from cached.nss.client import NssClient
from testing.daemon import config_text
from testing.slapd import LiveDirectory

REPO: Final = Path(__file__).resolve().parents[2]
UNIT: Final = REPO / "systemd" / "cached.service"
TMPFILES: Final = REPO / "systemd" / "cached.tmpfiles"
#: Where README.md's install puts the console script (a venv). The unit names this path.
PACKAGED_CACHED: Final = "/opt/cached/bin/cached"
START_TIMEOUT: Final = 60.0  # as testing.daemon: a backend's start may verify its cache
STOP_TIMEOUT: Final = 30.0
#: Ceiling for `systemd-analyze security` (0 = locked down, 10 = fully exposed). The unit
#: scores 3.6 on systemd 252. The slack allows for scoring changes, not for dropped
#: settings.
MAX_EXPOSURE: Final = 4.0
#: The modes the monitor gives these directories when it creates them itself
#: (cached/monitor.py, run_monitor). tmpfiles must create them the same way.
DIR_MODES: Final = {"db_dir": 0o700, "pipes_dir": 0o755, "private": 0o700, "mc_dir": 0o755}

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEMD_TMPFILES = shutil.which("systemd-tmpfiles")
requires_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="systemd-analyze is not installed (Debian package `systemd`; contrib/install-deps)",
)
# As testing.nsenv: the sandbox needs unshare -m and bind mounts, the tmpfiles test chown.
# CI runs as root.
requires_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: unshare -m, bind mounts and chown"
)
requires_tmpfiles = pytest.mark.skipif(
    SYSTEMD_TMPFILES is None,
    reason="systemd-tmpfiles is not installed (Debian package `systemd`; contrib/install-deps)",
)


# -- reading the unit -----------------------------------------------------------------------

Unit = dict[str, list[tuple[str, str]]]


def read_unit(path: Path) -> Unit:
    """Sections of a unit file: (key, value) in file order. systemd.syntax(7), no continuations."""
    sections: Unit = {}
    current: list[tuple[str, str]] | None = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"{path}:{n}: line continuations are not parsed here"
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path}:{n}: not `Key=value` in a section"
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(unit: Unit, section: str, key: str) -> str | None:
    """A single-valued setting: the last assignment wins."""
    values = [v for k, v in unit.get(section, []) if k == key]
    return values[-1] if values else None


def unit_list(unit: Unit, section: str, key: str) -> list[str]:
    """A list setting, accumulated as systemd does: an empty assignment resets it."""
    out: list[str] = []
    for k, v in unit.get(section, []):
        if k == key:
            out = [*out, *shlex.split(v)] if v else []
    return out


def unit_environment(unit: Unit) -> dict[str, str]:
    env = {}
    for item in unit_list(unit, "Service", "Environment"):
        name, _, value = item.partition("=")
        env[name] = value
    return env


def writable_paths(unit: Unit) -> set[str]:
    """Every path ProtectSystem=strict leaves writable for the service."""
    paths = {p.lstrip("-+") for p in unit_list(unit, "Service", "ReadWritePaths")}
    paths |= {f"/run/{d}" for d in unit_list(unit, "Service", "RuntimeDirectory")}
    paths |= {f"/var/lib/{d}" for d in unit_list(unit, "Service", "StateDirectory")}
    paths |= {f"/var/cache/{d}" for d in unit_list(unit, "Service", "CacheDirectory")}
    paths |= {f"/var/log/{d}" for d in unit_list(unit, "Service", "LogsDirectory")}
    return {os.path.normpath(p) for p in paths}


def default_writable_dirs() -> dict[str, str]:
    """What the daemon writes with the default configuration (cached/config.py)."""
    d = {name: str(DAEMON_OPTIONS[name].default) for name in ("db_dir", "pipes_dir", "mc_dir")}
    d["pid_file dir"] = os.path.dirname(str(DAEMON_OPTIONS["pid_file"].default))
    return {k: os.path.normpath(v) for k, v in d.items()}


def cached_command() -> list[str]:
    """The console script `pip install` made, the stand-in for ExecStart's cached."""
    script = Path(sysconfig.get_path("scripts")) / "cached"
    if not os.access(script, os.X_OK):
        pytest.fail(f"{script} is missing: install the project (`make deps` or pip install -e .)")
    return [str(script)]


# -- the unit and the tmpfiles file -----------------------------------------------------------


@pytest.fixture
def verifiable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart= pointing at the venv's script. verify checks the binary exists."""
    unit = read_unit(UNIT)
    exec_start = unit_value(unit, "Service", "ExecStart")
    assert exec_start is not None and exec_start.split()[0] == PACKAGED_CACHED, (
        f"ExecStart= should run the packaged {PACKAGED_CACHED} (see the comment in the unit)"
    )
    text = UNIT.read_text()
    copy, n = re.subn(
        rf"^ExecStart={re.escape(PACKAGED_CACHED)}(?=\s)",
        f"ExecStart={cached_command()[0]}",
        text,
        flags=re.MULTILINE,
    )
    assert n == 1
    path = tmp_path / UNIT.name  # verify takes the unit's name from the file name
    path.write_text(copy)
    return path


@requires_analyze
def test_unit_verifies(verifiable_unit: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run(
        # --recursive-errors=no: judge our unit, not whatever units the host has installed.
        [SYSTEMD_ANALYZE, "verify", "--man=no", "--recursive-errors=no", str(verifiable_unit)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    # Unknown keys and bad values are warnings with exit status 0, so read the output too.
    ours = [line for line in output.splitlines() if verifiable_unit.name in line]
    assert proc.returncode == 0 and not ours, output


@requires_analyze
def test_unit_hardening_exposure(verifiable_unit: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(verifiable_unit)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m[1]) <= MAX_EXPOSURE, f"a hardening setting was dropped?\n{proc.stdout}"


def test_unit_writable_paths_are_the_config_defaults() -> None:
    unit = read_unit(UNIT)
    assert unit_value(unit, "Service", "ProtectSystem") == "strict"
    expected = default_writable_dirs()
    declared = writable_paths(unit)
    missing = {k: v for k, v in expected.items() if v not in declared}
    extra = declared - set(expected.values())
    assert not missing, f"cached writes there but the unit keeps it read-only: {missing}"
    assert not extra, f"writable in the unit but not a directory cached writes: {extra}"


def test_unit_settings_match_the_daemon() -> None:
    unit = read_unit(UNIT)
    s = "Service"
    assert unit_value(unit, s, "Type") == "notify"
    assert unit_value(unit, s, "NotifyAccess") in (None, "main")
    assert unit_value(unit, s, "PIDFile") is None  # Type=notify: the started process is main
    assert unit_value(unit, s, "ExecReload") == "/bin/kill -HUP $MAINPID"
    # The monitor orders the shutdown of its children itself.
    assert unit_value(unit, s, "KillMode") == "mixed"
    # libnss_sss's loop guard (reference §1.1), as SSSD sets it for its daemons.
    assert unit_environment(unit).get("_SSS_LOOPS") == "NO"
    limit = unit_value(unit, s, "LimitNOFILE")
    assert limit is not None and int(limit) > 2 * NSS_OPTIONS["max_clients"].default
    u = "Unit"
    assert "sssd.service" in unit_list(unit, u, "Conflicts")
    assert "sssd.service" in unit_list(unit, u, "After")  # stop it before we start
    assert "nss-user-lookup.target" in unit_list(unit, u, "Before")
    assert "nss-user-lookup.target" in unit_list(unit, u, "Wants")


def test_config_error_is_not_restarted(tmp_path: Path) -> None:
    """RestartPreventExitStatus= holds the status `cached serve` exits with on a bad config."""
    bad = tmp_path / "cached.conf"
    bad.write_text("[cached]\ndomains = LDAP\n")  # no [domain/LDAP]
    proc = subprocess.run(
        [*cached_command(), "serve", "-c", str(bad)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "no [domain/LDAP] section" in proc.stderr
    prevent = unit_list(read_unit(UNIT), "Service", "RestartPreventExitStatus")
    assert str(proc.returncode) in prevent, (proc.returncode, prevent)


def tmpfiles_dirs() -> dict[str, tuple[int, str, str]]:
    """The `d` lines of the tmpfiles file: path -> (mode, user, group)."""
    out = {}
    for line in TMPFILES.read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        assert fields[0] == "d", f"unexpected tmpfiles line: {line}"
        out[fields[1]] = (int(fields[2], 8), fields[3], fields[4])
    return out


def test_tmpfiles_covers_the_writable_dirs() -> None:
    defaults = default_writable_dirs()
    want = {
        defaults["db_dir"]: DIR_MODES["db_dir"],
        defaults["pipes_dir"]: DIR_MODES["pipes_dir"],
        rpc.private_dir(defaults["pipes_dir"]): DIR_MODES["private"],
        defaults["mc_dir"]: DIR_MODES["mc_dir"],
    }
    have = tmpfiles_dirs()
    for path, mode in want.items():
        assert path in have, f"{TMPFILES} does not create {path}"
        assert have[path] == (mode, "root", "root"), (path, have[path])
    # ReadWritePaths= needs every path to exist at start. tmpfiles makes those that
    # /run (always there) is not.
    for path in writable_paths(read_unit(UNIT)) - {"/run"}:
        assert path in have, f"ReadWritePaths={path} but {TMPFILES} does not create it"


@requires_root
@requires_tmpfiles
def test_tmpfiles_creates_the_directories(tmp_path: Path) -> None:
    assert SYSTEMD_TMPFILES is not None
    root = tmp_path / "root"
    # A directory left by an SSSD that ran as another user, with another mode: `d`
    # must give it back to root with the right mode.
    stale = root / "var/lib/sss/pipes"
    stale.mkdir(parents=True)
    stale.chmod(0o700)
    os.chown(stale, 65534, 65534)
    proc = subprocess.run(
        [SYSTEMD_TMPFILES, "--create", f"--root={root}", str(TMPFILES)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    for path, (mode, user, group) in tmpfiles_dirs().items():
        st = os.lstat(root / path.lstrip("/"))
        assert stat.S_ISDIR(st.st_mode), path
        assert stat.S_IMODE(st.st_mode) == mode, (path, oct(st.st_mode))
        assert (user, group) == ("root", "root") and (st.st_uid, st.st_gid) == (0, 0), path


# -- the daemon under Type=notify ---------------------------------------------------------


@dataclass(frozen=True)
class Notification:
    pid: int  # the sender, from SCM_CREDENTIALS: systemd checks it against NotifyAccess=
    fields: dict[str, str]


class NotifySocket:
    """The receiving end of sd_notify(3), bound as systemd binds /run/systemd/notify."""

    _UCRED = struct.Struct("3i")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))

    def close(self) -> None:
        self.sock.close()

    def _read(self) -> Notification:
        data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(self._UCRED.size))
        pid = 0
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = self._UCRED.unpack(payload[: self._UCRED.size])[0]
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
        return Notification(pid, fields)

    def pending(self) -> list[Notification]:
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    out.append(self._read())
                except BlockingIOError:
                    return out
        finally:
            self.sock.setblocking(True)

    def receive(self, proc: subprocess.Popen[bytes], log: Path) -> Notification:
        """The next message. Fails if ``proc`` exits first (a pidfd wakes us up: no polling)."""
        queued = self.pending()
        if queued:
            assert len(queued) == 1, queued
            return queued[0]
        pidfd = os.pidfd_open(proc.pid)
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.sock, selectors.EVENT_READ)
                sel.register(pidfd, selectors.EVENT_READ)
                ready = {key.fd for key, _ in sel.select(START_TIMEOUT)}
        finally:
            os.close(pidfd)
        if self.sock.fileno() in ready:
            return self._read()
        if pidfd in ready:
            proc.wait()
            pytest.fail(f"cached serve exited ({proc.returncode}) without notifying:\n{tail(log)}")
        pytest.fail(f"no notification in {START_TIMEOUT} s:\n{tail(log)}")


def tail(log: Path, lines: int = 40) -> str:
    with contextlib.suppress(FileNotFoundError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    notify: NotifySocket
    workdir: Path
    log: Path

    @property
    def pipes(self) -> Path:
        return self.workdir / "pipes"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT)

    def children(self) -> list[int]:
        """PIDs of the children, each of which has just answered the monitor over its RPC."""
        status = rpc.call_sync(rpc.control_socket(str(self.pipes)), Op.STATUS, timeout=30)
        for c in status["children"]:
            assert c["running"] and not c["error"], c
        return [int(c["pid"]) for c in status["children"]]


@contextlib.contextmanager
def serve(directory: LiveDirectory, workdir: Path, wrapper: Sequence[str] = ()) -> Iterator[Served]:
    """`cached serve` with NOTIFY_SOCKET, the unit's Environment= and cwd /, as systemd runs it.

    The config is testing.daemon's test config, with the pid file in workdir/run, so that
    each default directory has its own stand-in: db, pipes, mc, run.
    """
    s = directory.slapd
    for name, mode in (("db", 0o700), ("pipes", 0o755), ("pipes/private", 0o700),
                       ("mc", 0o755), ("run", 0o755)):  # fmt: skip
        (workdir / name).mkdir(mode=mode, parents=True)
    config = workdir / "cached.conf"
    config.write_text(
        config_text([s.uri], s.base_dn, workdir, daemon={"pid_file": workdir / "run/cached.pid"})
    )
    config.chmod(0o600)
    notify = NotifySocket(workdir / "notify")
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    env.update(unit_environment(read_unit(UNIT)))
    env["NOTIFY_SOCKET"] = str(notify.path)
    log = workdir / "cached.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*wrapper, *cached_command(), "serve", "-c", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, cwd="/",
        )  # fmt: skip
    served = Served(proc, notify, workdir, log)
    try:
        yield served
    finally:
        if proc.poll() is None:  # the test failed half-way: stop what we started, by PID
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        notify.close()


def assert_serves(served: Served, directory: LiveDirectory) -> None:
    name = directory.expected.user_names()[0]
    with NssClient(str(served.pipes), timeout=30) as client:
        user = client.getpwnam(name)
    assert user is not None and user.uid == directory.expected.user(name).uid


def test_notify_ready_reload_stopping(
    slapd_small: LiveDirectory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with serve(slapd_small, tmp_path_factory.mktemp("notify")) as d:
        ready = d.notify.receive(d.proc, d.log)
        # The main PID itself: with NotifyAccess=main systemd drops any other sender.
        assert ready.pid == d.proc.pid, ready
        assert ready.fields.get("READY") == "1", ready
        # READY=1 means serving: the NSS socket answers at once.
        assert_serves(d, slapd_small)

        # ExecReload= sends SIGHUP to the monitor, which passes it on. All must survive it.
        # The status request is handled after the monitor took the signal, and it asks
        # every child. A process that SIGHUP killed could not answer.
        children = d.children()
        os.kill(d.proc.pid, signal.SIGHUP)
        assert d.children() == children
        assert_serves(d, slapd_small)
        assert d.proc.poll() is None

        code = d.stop()
        stopping = d.notify.receive(d.proc, d.log)
        assert stopping.pid == d.proc.pid and stopping.fields.get("STOPPING") == "1", stopping
        assert code == 0, tail(d.log)
        # Nothing else notified: the children do not inherit NOTIFY_SOCKET.
        assert d.notify.pending() == []


# -- the daemon inside the unit's sandbox ------------------------------------------------------

#: Runs in a new mount namespace (unshare -m), then execs the daemon. It emulates
#: ProtectSystem=strict + ReadWritePaths= (every mount read-only except the API file
#: systems, the listed directories bind-mounted writable) and UMask=. It fails if the
#: file system is still writable, so the test cannot pass for the wrong reason.
SANDBOX: Final = r"""
import errno, json, os, re, subprocess, sys
spec = json.loads(sys.argv[1])
for d in spec["rw"]:
    subprocess.run(["mount", "--bind", d, d], check=True)
def unescape(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), s)
with open("/proc/self/mountinfo") as f:
    mounts = [(unescape(l.split()[4]), l.split()[5].split(",")) for l in f]
for target, opts in mounts:
    if "ro" in opts or target in spec["rw"]:
        continue
    if any(target == a or target.startswith(a + "/") for a in ("/proc", "/sys", "/dev")):
        continue
    r = subprocess.run(["mount", "-o", "remount,bind,ro", target], capture_output=True)
    if r.returncode and target == "/":
        sys.exit("sandbox: cannot make / read-only: " + r.stderr.decode())
try:
    open(os.path.join(spec["probe"], "write-probe"), "x").close()
except OSError as e:
    if e.errno != errno.EROFS:
        raise
else:
    sys.exit("sandbox: " + spec["probe"] + " is still writable")
os.umask(int(spec["umask"], 8))
argv = spec["prefix"] + sys.argv[2:]
os.execvp(argv[0], argv)
"""


def sandbox_wrapper(unit: Unit, rw: list[Path], probe: Path) -> list[str]:
    assert unit_value(unit, "Service", "NoNewPrivileges") == "yes"
    caps = unit_list(unit, "Service", "CapabilityBoundingSet")
    assert not any(c.startswith("~") for c in caps), "only a positive list is emulated"
    bounding = ",".join(["-all", *(f"+{c.lower().removeprefix('cap_')}" for c in caps)])
    setpriv = ["setpriv", "--no-new-privs", f"--bounding-set={bounding}", "--inh-caps=-all", "--"]
    spec = {
        "rw": [str(p) for p in rw],
        "probe": str(probe),
        "umask": unit_value(unit, "Service", "UMask") or "0022",
        "prefix": setpriv,
    }
    return ["unshare", "--mount", "--propagation", "private", "--",
            sys.executable, "-c", SANDBOX, json.dumps(spec)]  # fmt: skip


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def wx_mappings(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if {"w", "x"} <= set(line.split()[1])]


@requires_root
def test_daemon_runs_in_the_unit_sandbox(
    slapd_small: LiveDirectory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    unit = read_unit(UNIT)
    workdir = tmp_path_factory.mktemp("sandbox")
    # The stand-ins for db_dir, pipes_dir, mc_dir and the pid file's directory: the same
    # four the unit's ReadWritePaths= grants (checked above against config.py).
    rw = [workdir / "db", workdir / "pipes", workdir / "mc", workdir / "run"]
    wrapper = sandbox_wrapper(unit, rw, probe=workdir)
    with serve(slapd_small, workdir, wrapper) as d:
        ready = d.notify.receive(d.proc, d.log)
        assert ready.pid == d.proc.pid and ready.fields.get("READY") == "1", ready
        assert_serves(d, slapd_small)

        pids = [d.proc.pid, *d.children()]
        assert len(pids) == 3  # monitor, backend LDAP, responder
        for pid in pids:
            st = proc_status(pid)
            # The sandbox really applies, in the children as well.
            assert int(st["CapEff"], 16) == 0 and int(st["CapBnd"], 16) == 0, st
            assert st["NoNewPrivs"] == "1", st
            # MemoryDenyWriteExecute=yes would refuse such a mapping.
            assert wx_mappings(pid) == [], (pid, wx_mappings(pid))

        # Under UMask=0077, what clients use must still be public: the daemon sets these
        # modes itself.
        nss = os.stat(d.pipes / "nss")
        assert stat.S_ISSOCK(nss.st_mode) and stat.S_IMODE(nss.st_mode) == 0o666
        mc_files = [p for p in (d.workdir / "mc").iterdir() if p.is_file()]
        assert mc_files, "no memory-cache files"
        for p in mc_files:
            assert p.stat().st_mode & 0o444 == 0o444, (p, oct(p.stat().st_mode))

        code = d.stop()
        stopping = d.notify.receive(d.proc, d.log)
        assert stopping.fields.get("STOPPING") == "1", stopping
        assert code == 0, tail(d.log)
    log = d.log.read_text(errors="replace")
    for sign in (os.strerror(errno.EROFS), os.strerror(errno.EACCES), "Traceback"):
        assert sign not in log, log
