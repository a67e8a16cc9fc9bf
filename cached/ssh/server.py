"""The SSH interface of the responder (``services = nss, ssh``): ``<pipes_dir>/ssh`` for
``sss_ssh_authorizedkeys``, which sshd runs as ``AuthorizedKeysCommand``.

GET_USER_PUBKEYS is a user lookup through the one lookup flow (``responder/flow.py``,
getpwnam's plugin, as SSSD's ``cache_req_user_by_name_attrs``): the keys are the
user's ``ldap_user_ssh_public_key`` values, fetched and stored with the user and
expired with it, so they are answered offline like the rest of the entry. As SSSD
2.8.2 (``ssh_cmd.c``):

* ``root`` is never looked up: ERR_NON_SSSD_USER (the client prints nothing, exit 0);
* a name the flow does not find is ERR_NON_SSSD_USER when it is a local user (SSSD asks
  getpwnam with its own NSS module left out; cached reads ``/etc/passwd``: asking
  glibc from the responder would ask this very process), else ENOENT (the client says
  "Error looking up public keys", exit 1; sshd then offers no key);
* a user without keys: a reply of no keys.

GET_HOST_PUBKEYS is ENOENT, what SSSD answers when the directory holds no host entry
with keys: cached serves no host keys and writes no known_hosts file (the ``[ssh]``
known_hosts options have no effect). The socket is open to every local user and the
client checks neither its owner nor the server's credentials (docs/threat-model.md):
connections are counted per uid as on the NSS socket.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from typing import Any, Final

from cached.config import Config
from cached.responder import streams
from cached.responder.flow import GETPWNAM, Lookups
from cached.responder.streams import StreamClients
from cached.ssh import protocol as p

PASSWD_FILE: Final = "/etc/passwd"


def ssh_socket(config: Config) -> str:
    return os.path.join(config.daemon.pipes_dir, "ssh")


def local_user(name: str, path: str = PASSWD_FILE) -> bool:
    """Whether ``path`` (the files database) has a user ``name``."""
    prefix = name.encode("utf-8", errors="surrogateescape") + b":"
    try:
        with open(path, "rb") as f:
            return any(line.startswith(prefix) for line in f)
    except OSError:
        return False


def _error(status: int) -> Callable[[int], bytes]:
    return lambda cmd: p.error_reply(cmd, status)


# EINVAL for a body SSSD refuses; EIO when answering failed: the client prints
# "Error looking up public keys" and sshd offers no key.
_ANSWERING: Final = streams.Answering(
    "ssh", p.GetVersion, p.version_reply, _error(errno.EIO),
    refused=p.BadRequest, refusal=_error(p.EINVAL), subject=lambda req: req.name,
)  # fmt: skip


class SshResponder:
    def __init__(self, config: Config, lookups: Lookups, passwd_file: str = PASSWD_FILE) -> None:
        self.config = config
        self.lookups = lookups
        self.passwd_file = passwd_file
        self.started = time.time()
        self.clients = StreamClients(config.nss, "SSH")
        self.requests = 0
        self.keys_served = 0
        self.users_unknown = 0
        self.host_requests = 0

    async def answer(self, req: p.KeysRequest) -> bytes:
        self.requests += 1
        if req.cmd is p.Command.GET_HOST_PUBKEYS:
            self.host_requests += 1
            return p.error_reply(req.cmd, p.ENOENT)
        if req.name == "root":
            return p.error_reply(req.cmd, p.ERR_NON_SSSD_USER)
        key = req.name
        if req.domain is not None:
            if req.domain.lower() not in self.lookups.policy.domains:
                self.users_unknown += 1
                return p.error_reply(req.cmd, p.ENOENT)
            key = f"{req.name}@{req.domain}"
        found = await self.lookups.lookup(GETPWNAM, key)
        if found is None:
            self.users_unknown += 1
            status = p.ERR_NON_SSSD_USER if local_user(req.name, self.passwd_file) else p.ENOENT
            return p.error_reply(req.cmd, status)
        user = found.value
        self.keys_served += len(user.ssh_keys)
        # The name of the entry in SSSD's cache: qualified with the domain's name in
        # lower case (sysdb's internal name, sss_create_internal_fqname).
        name = f"{user.name}@{found.domain.name.lower()}"
        return p.keys_reply(req.cmd, name, user.ssh_keys)

    # -- connections ---------------------------------------------------------------

    async def serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self.clients.serve(reader, writer, p.server_connection(), self._respond)

    async def _respond(self, req: p.Request, _uid: int | None) -> bytes | None:
        return await _ANSWERING.respond(req, self.answer)

    def status(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "connections": self.clients.active,
            "refused_connections": self.clients.refused,
            "requests": self.requests,
            "keys_served": self.keys_served,
            "users_unknown": self.users_unknown,
            "host_requests": self.host_requests,
            "socket": ssh_socket(self.config),
        }


async def serve_ssh(config: Config, responder: SshResponder) -> asyncio.Server:
    """Listen on ``<pipes_dir>/ssh``, mode 0666: sshd runs the client as
    ``AuthorizedKeysCommandUser`` (nobody), any local user may run it."""
    os.makedirs(config.daemon.pipes_dir, mode=0o755, exist_ok=True)
    path = ssh_socket(config)
    return await streams.listen(path, responder.serve_client, 0o666)
