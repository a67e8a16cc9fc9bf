"""A real ``sshd`` for one ssh login, in a network namespace of its own: the password
logins of :mod:`testing.pamprograms` (through PAM) and the key logins of
:mod:`testing.sshkeys` (``AuthorizedKeysCommand``).

The caller wraps :func:`login_command` in ``unshare --net`` and its private mount
namespace. Inside, the script brings up the namespace's loopback (the only interface),
mounts a tmpfs over ``/run`` for sshd's privilege-separation directory, starts sshd
with the configuration, host key and pid file in the work directory (its log in
``sshd.log`` there), waits until it listens, runs the client, and ends sshd, by its
pid. Exit status 125: sshd could not be started; else the client's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

SSHD: Final = "/usr/sbin/sshd"
SSH: Final = "ssh"
SSH_KEYGEN: Final = "ssh-keygen"
SSH_PORT: Final = 2222  # in a network namespace of its own: always free
TIMEOUT: Final = 120.0

_SCRIPT: Final = r"""
set -u
workdir=$1 port=$2; shift 2
ip link set lo up || exit 125
mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -m 0755 /run/sshd || exit 125
/usr/sbin/sshd -D -e -f "$workdir/sshd_config" 2>>"$workdir/sshd.log" &
sshd=$!
n=0
until ss -Htln "sport = :$port" | grep -q LISTEN; do
    n=$((n + 1))
    if [ "$n" -gt 1200 ] || ! kill -0 "$sshd" 2>/dev/null; then
        echo "sshd did not listen" >&2; kill "$sshd" 2>/dev/null; exit 125
    fi
    sleep 0.05
done
"$@"
rc=$?
kill "$sshd"
wait "$sshd"
exit $rc
"""


def sshd_config(workdir: Path, settings: str, port: int = SSH_PORT) -> Path:
    """sshd_config, host key and pid file in ``workdir``: listening on 127.0.0.1:``port``,
    no root login, no ``authorized_keys`` files, then ``settings`` (sshd_config lines:
    how users authenticate)."""
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    conf = workdir / "sshd_config"
    conf.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {key}\nPidFile {workdir}/sshd.pid\n"
        f"{settings}AuthorizedKeysFile none\nPermitRootLogin no\nStrictModes no\n"
        "LogLevel VERBOSE\n"
    )
    return conf


def ssh_client(user: str, options: tuple[str, ...], port: int = SSH_PORT) -> list[str]:
    """``ssh`` to ``user`` at the namespace's sshd, no configuration file, the host key
    taken unchecked and not stored, then ``options``; the remote command follows."""
    return [SSH, "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=60", *options,
            "-p", str(port), f"{user}@127.0.0.1"]  # fmt: skip


def login_command(workdir: Path, client: list[str], port: int = SSH_PORT) -> list[str]:
    """The command, to run in the network namespace, that starts sshd (configured by
    :func:`sshd_config` in ``workdir``), runs ``client`` and stops sshd."""
    return ["/bin/sh", "-c", _SCRIPT, "sshd-login", str(workdir), str(port), *client]


def sshd_log(workdir: Path) -> str:
    try:
        return (workdir / "sshd.log").read_text(errors="replace")
    except FileNotFoundError:
        return "(no sshd log)"
