"""SSH public keys from the directory, through Debian's own clients: a directory whose
users carry ``sshPublicKey`` values (contrib/openssh-lpk.schema), ``sss_ssh_authorizedkeys``
run in the private namespace of :mod:`testing.nsenv` (``/var/lib/sss/pipes`` is the
daemon's pipes directory), and a key login into a real ``sshd`` whose
``AuthorizedKeysCommand`` is ``sss_ssh_authorizedkeys``.

sshd runs as for :mod:`testing.pamprograms`' password logins, in a network namespace
of its own (:mod:`testing.sshd`). NSS is ``files sss`` there (sshd resolves the user
through libnss_sss; ``nobody``, the ``AuthorizedKeysCommandUser``, through files).
Authentication is by public key alone (no PAM, no password).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cached.ssh import protocol as sshp
from testing import sshd
from testing.nsenv import nss_command, nss_env

AUTHORIZEDKEYS: Final = "/usr/bin/sss_ssh_authorizedkeys"
SSH_KEYGEN: Final = sshd.SSH_KEYGEN
BASE: Final = "dc=ssh,dc=test"
TIMEOUT: Final = 120.0
#: Users: name -> uid. alice has keys, bob none; carol's are an RFC 4253 blob.
USERS: Final = {"alice": 30001, "bob": 30002, "carol": 30003}


def skip_reason() -> str | None:
    for prog, package in ((AUTHORIZEDKEYS, "sssd-common"),
                          (sshd.SSHD, "openssh-server"), (sshd.SSH, "openssh-client"),
                          (SSH_KEYGEN, "openssh-client")):  # fmt: skip
        if shutil.which(prog) is None:
            return f"{prog} is missing: install Debian's {package}"
    return None


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: str  # the authorized_keys line, "ssh-ed25519 AAAA... comment"

    @property
    def blob(self) -> bytes:
        """The public key as an RFC 4253 blob (the line's base64 field, decoded)."""
        return base64.b64decode(self.public.split()[1])


def keypair(path: Path, comment: str) -> KeyPair:
    if not path.exists():
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                        str(path)], check=True, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    return KeyPair(path, path.with_suffix(".pub").read_text().strip())


def ldif(keys: dict[str, list[bytes]]) -> str:
    """The directory: ``ou=people`` with :data:`USERS` (posixAccount, ldapPublicKey),
    each with ``keys[name]`` as its sshPublicKey values, in that order; one group."""
    out = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: ssh\no: ssh\n",
        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for user, uid in USERS.items():
        values = "".join(
            f"sshPublicKey:: {base64.b64encode(k).decode()}\n" for k in keys.get(user, [])
        )
        out.append(
            f"dn: uid={user},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nobjectClass: ldapPublicKey\nuid: {user}\ncn: {user}\n"
            f"sn: {user}\nuidNumber: {uid}\ngidNumber: 30000\nhomeDirectory: /home/{user}\n"
            f"loginShell: /bin/sh\n{values}"
        )
    out.append(
        f"dn: cn=sshusers,ou=groups,{BASE}\nobjectClass: namedObject\n"
        f"objectClass: posixGroup\ncn: sshusers\ngidNumber: 30000\n"
    )
    return "\n".join(out)


def authorized_keys(
    pipes_dir: Path, mc_dir: Path, user: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``sss_ssh_authorizedkeys [args] user`` in the namespace, as sshd runs it."""
    return subprocess.run(
        nss_command([AUTHORIZEDKEYS, *args, user], pipes_dir, mc_dir, files_first=True),
        env=nss_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip


def raw_request(pipes_dir: Path, cmd: int, body: bytes) -> tuple[int, bytes]:
    """(status, body) of one request on ``<pipes_dir>/ssh``, after GET_VERSION, as the
    client sends them."""
    conn = sshp.ClientConnection()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT)
        s.connect(os.fspath(pipes_dir / "ssh"))
        out = []
        for c, b in ((sshp.Command.GET_VERSION, sshp.version_body()), (cmd, body)):
            s.sendall(conn.send_request(c, b))
            while True:
                reply = conn.next_reply()
                if not isinstance(reply, sshp.NeedData):
                    break
                data = s.recv(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                conn.receive_data(data)
            out.append(reply)
    return out[1].status, out[1].body


def key_login(
    pipes_dir: Path, mc_dir: Path, workdir: Path, user: str, key: Path,
    command: tuple[str, ...] = ("id", "-un"),
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Log ``user`` in over ssh with the private ``key`` and run ``command``: ssh's exit
    status (255: the login failed; otherwise ``command``'s). Keys come from
    sss_ssh_authorizedkeys (run as nobody); there is no other authentication."""
    sshd.sshd_config(
        workdir,
        "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PubkeyAuthentication yes\nAuthorizedKeysCommand {AUTHORIZEDKEYS}\n"
        "AuthorizedKeysCommandUser nobody\n",
    )
    options = ("-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", "PreferredAuthentications=publickey")  # fmt: skip
    inner = sshd.login_command(workdir, [*sshd.ssh_client(user, options), *command])
    return subprocess.run(
        ["unshare", "--net", "--", *nss_command(inner, pipes_dir, mc_dir, files_first=True)],
        env=nss_env(), capture_output=True, text=True, check=False, timeout=TIMEOUT * 2,
    )  # fmt: skip


sshd_log = sshd.sshd_log
