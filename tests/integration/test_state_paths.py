"""A local user against the daemon's state directories, private sockets and pid file.

Run as root, with uid 65534 as the other user (``testing.asuser``, ``setpriv``): every
directory on the way to a state directory is checked, at start and again before each
child the monitor restarts (cached/statedir.py); each end of a private RPC socket
checks that the other is root (SO_PEERCRED); the pid file is held by a lock, in a
directory only root may write, and its content is never taken as proof of anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

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
