"""A local user against the daemon's state directories, private sockets and pid file.

Run as root, with uid 65534 as the other user (``testing.asuser``, ``setpriv``): every
directory on the way to a state directory is checked, at start and again before each
child the monitor restarts (cached/statedir.py); each end of a private RPC socket
checks that the other is root (SO_PEERCRED); the pid file is held by a lock, in a
directory only root may write, and its content is never taken as proof of anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cached.config import parse_config
from cached.ipc import aio, framing
from cached.ipc.ops import Op
from cached.monitor import PidFile, run_monitor
from testing import asuser
from testing.checks import child, wait_for
from testing.daemon import REPO, config_text

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: uid 65534 attacks root")

NOBODY = asuser.NOBODY


def _as_nobody(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run([*asuser.as_nobody(), *argv], check=True, capture_output=True, cwd=cwd,
                   timeout=60)  # fmt: skip


# == a directory on the way, during a restart =============================================


def test_a_restarted_backend_never_writes_into_a_directory_a_user_took(
    daemon_factory, slapd_small, tmp_path
):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    d = daemon_factory(slapd_small, daemon={"db_dir": shared / "db"})
    asuser.open_the_way(shared)
    # Root hands the directory above db_dir to a user while the daemon runs (a home,
    # a shared folder). The user puts a directory of theirs where db_dir was...
    os.chown(shared, NOBODY, NOBODY)
    _as_nobody("sh", "-c", "mv db db.root && mkdir -m 0777 db", cwd=shared)
    mine = shared / "db"
    assert mine.stat().st_uid == NOBODY
    # ...and the backend restarts: it would open db_dir by name, in the user's folder.
    os.kill(d.child_pid("backend LDAP"), signal.SIGKILL)
    refusal = f"not starting backend LDAP: db_dir = {mine}: {shared} belongs to uid {NOBODY}"
    wait_for(lambda: refusal in d.log_text() or any(mine.iterdir()),
             "the restart refused", timeout=120, log=d.log_tail)  # fmt: skip
    assert list(mine.iterdir()) == [], "root's cache was written into the user's directory"
    backend = child(d, "backend LDAP")
    assert not backend["running"] and backend["last_exit"].startswith("not started: db_dir")
    # Root takes the directory back: the next try starts it, on the cache it had.
    mine.rmdir()
    (shared / "db.root").rename(mine)
    os.chown(shared, 0, 0)
    wait_for(lambda: child(d, "backend LDAP")["ready"], "the backend restarted", timeout=180,
             log=d.log_tail)  # fmt: skip
    assert {"cache_LDAP.lmdb", "timestamps_LDAP.lmdb"} <= {p.name for p in mine.iterdir()}


# == the private sockets: each end checks the other =======================================

FORGING_SERVER = """
import socket, sys
from cached.ipc.framing import FrameDecoder, encode_frame
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    with c:
        for m in FrameDecoder().feed(c.recv(65536)):
            if "id" in m:
                c.sendall(encode_frame({"id": m["id"], "ok": True, "status": "forged"}))
"""

ASKING_CLIENT = """
import socket, sys
from cached.ipc.framing import encode_frame
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(encode_frame({"id": 1, "op": "status", "args": {}}))
    print("answered" if s.recv(65536) else "closed")
except (BrokenPipeError, ConnectionResetError):  # closed before or after the request
    print("closed")
"""


def test_a_private_socket_peer_that_is_not_root_is_refused_at_both_ends(tmp_path):
    asuser.open_the_way(tmp_path)
    tmp_path.chmod(0o755)
    # The client end: a socket another user bound where a backend's should be (its
    # directory the user's) answers nothing to root's tools, backends or responder.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    path = str(theirs / "be_LDAP")
    server = asuser.start_python(["-c", FORGING_SERVER, path])
    try:
        assert server.stdout is not None and server.stderr is not None
        assert server.stdout.readline() == "listening\n", server.stderr.read()
        refused = rf"{path}: the server runs as uid {NOBODY}, not root"
        with pytest.raises(framing.RpcError, match=refused):
            framing.call_sync(path, Op.STATUS, timeout=30)

        async def ask() -> None:
            client = aio.RpcClient(path)
            try:
                with pytest.raises(framing.RpcError, match=refused):
                    await client.call(Op.STATUS, timeout=30)
            finally:
                await client.close()

        asyncio.run(ask())
        notifier = framing.Notifier(path, timeout=30)
        assert "not root" in notifier.send(Op.INVALIDATED)
        notifier.close()
    finally:
        server.kill()
        server.communicate(timeout=30)

    # The server end: a client of another user gets the connection closed, no answer,
    # even where the socket's mode would let it in; root is answered.
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o755)
    path = str(ours / "be_LDAP")

    async def handler(op: Op, args: dict[str, Any]) -> dict[str, Any]:
        return {"status": "answered"}

    async def serve_both() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        srv = await aio.serve(path, handler, mode=0o666)
        try:
            nobody = await asyncio.to_thread(asuser.run_python, ["-c", ASKING_CLIENT, path])
            root = await asyncio.to_thread(framing.call_sync, path, Op.STATUS, 30.0)
        finally:
            srv.close()
        return nobody, root

    nobody, root = asyncio.run(serve_both())
    assert nobody.stdout.strip() == "closed", (nobody.stdout, nobody.stderr)
    assert root["status"] == "answered"


# == the pid file ===========================================================================

PID_TAKER = """
import sys
from cached.monitor import PidFile
try:
    held = PidFile(sys.argv[1])
except Exception as e:
    print("refused", e, flush=True)
else:
    print("taken", flush=True)
    sys.stdin.readline()
    held.release()
"""


def _take_in_another_process(path: Path) -> subprocess.Popen[str]:
    """A monitor's PidFile in a process of its own (POSIX locks are per process)."""
    return subprocess.Popen(
        [sys.executable, "-c", PID_TAKER, str(path)], cwd=REPO, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _pid_file_config(tmp_path: Path, pid_file: Path) -> Any:
    text = config_text(["ldap://127.0.0.1:1"], "dc=example,dc=test", tmp_path,
                       daemon={"pid_file": pid_file})  # fmt: skip
    return parse_config(text)


def test_a_planted_pid_file_neither_stops_the_daemon_nor_is_trusted(tmp_path, caplog):
    asuser.open_the_way(tmp_path)
    tmp_path.chmod(0o755)
    # A process of the user's whose arguments read `cached serve`.
    decoy = subprocess.Popen([*asuser.as_nobody(), "sh", "-c", "read x", "cached", "serve"],
                             stdin=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # In a sticky world-writable directory (/tmp-like) the user plants a pid file
        # naming it. The daemon refuses the directory, and says why; it no longer
        # reports a cached running that does not.
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        planted = sticky / "cached.pid"
        _as_nobody("sh", "-c", f"echo {decoy.pid} > {planted}")
        cfg = _pid_file_config(tmp_path, planted)
        with caplog.at_level(logging.ERROR):
            assert asyncio.run(run_monitor(cfg, str(tmp_path / "cached.conf"), "info")) == 1
        assert f"pid_file = {planted}: {sticky} writable by other users (mode 1777" in caplog.text
        assert "already runs" not in caplog.text
        # In root's own directory the same content (a monitor killed, its pid reused
        # by the user's process) proves nothing: the lock is free, the file is taken.
        run = tmp_path / "run"
        run.mkdir(mode=0o755)
        pid_file = run / "cached.pid"
        pid_file.write_text(f"{decoy.pid}\n")
        held = PidFile(str(pid_file))
    finally:
        decoy.communicate("\n", timeout=30)
    try:
        assert pid_file.read_text() == f"{os.getpid()}\n"
        # Only root may open it: any descriptor can hold a lock (flock through a
        # read-only one), so one of the user's would keep every monitor out.
        assert pid_file.stat().st_mode & 0o7777 == 0o600
        peek = asuser.run_python(["-c", "import sys; open(sys.argv[1])", str(pid_file)])
        assert "PermissionError" in peek.stderr, peek.stderr
        # The lock is what says a monitor runs: a second one is refused.
        second = _take_in_another_process(pid_file)
        out, err = second.communicate(timeout=60)
        assert out.startswith("refused") and f"already runs as pid {os.getpid()}" in out, err
    finally:
        held.release()
    assert not pid_file.exists()
    # A pid file others could open (0644) may hold a lock of theirs: it is replaced,
    # not locked.
    pid_file.write_text("1\n")
    pid_file.chmod(0o644)
    holder = asuser.start_python(["-c", (
        "import fcntl, sys\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\nsys.stdin.readline()\n"), str(pid_file)])  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        first = _take_in_another_process(pid_file)
        assert first.stdout is not None and first.stdout.readline() == "taken\n"
        assert pid_file.read_text() == f"{first.pid}\n"
        first.communicate("\n", timeout=60)
    finally:
        holder.communicate("\n", timeout=30)
    # Never through a symlink at the name, and never through a directory that is one.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    pid_file.symlink_to(victim)
    with pytest.raises(RuntimeError, match=rf"pid_file = {pid_file}: a symlink"):
        PidFile(str(pid_file))
    (tmp_path / "run-link").symlink_to(run)
    with pytest.raises(RuntimeError, match=rf"{tmp_path}/run-link is a symlink"):
        PidFile(str(tmp_path / "run-link/other.pid"))
    assert victim.read_text() == "precious\n"
