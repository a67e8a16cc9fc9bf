"""A local user against the daemon's state directories, private sockets and pid file.

Run as root, with uid 65534 as the other user (``testing.asuser``, ``setpriv``): every
directory on the way to a state directory is checked, at start and again before each
child the monitor restarts (cached/statedir.py); each end of a private RPC socket
checks that the other is root (SO_PEERCRED); the pid file is held by a lock, in a
directory only root may write, and its content is never taken as proof of anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cached.ipc import aio, framing
from cached.ipc.ops import Op
from testing import asuser
from testing.checks import child, wait_for

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
