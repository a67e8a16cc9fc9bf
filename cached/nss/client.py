"""A blocking client of the NSS socket protocol: ``cached id`` and ``cached getent``.

For machines without libnss-sss and for tests that cannot use a mount namespace.
It speaks exactly what libnss_sss speaks (reference §1): GET_VERSION once per
connection, then one request at a time.
"""

from __future__ import annotations

import errno
import os
import socket
from types import TracebackType

from cached.model import User
from cached.nss import protocol as p


class NssClientError(Exception):
    """The responder could not be reached or answered with an error status."""


class NssClient:
    def __init__(self, pipes_dir: str, timeout: float = 300.0) -> None:
        # libnss_sss waits up to 300 s per poll (SSS_CLI_SOCKET_TIMEOUT, §1.8).
        self.path = os.path.join(pipes_dir, "nss")
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.conn = p.ClientConnection()

    def __enter__(self) -> NssClient:
        return self

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError as e:
            sock.close()
            raise NssClientError(f"{self.path}: {e.strerror or e}") from None
        self.sock = sock
        self.conn = p.ClientConnection()
        if p.decode_version(self._call(p.Command.GET_VERSION, p.version_body())) != 1:
            raise NssClientError(f"{self.path}: protocol version is not 1")

    def _call(self, cmd: int, body: bytes) -> bytes:
        if self.sock is None:
            self._connect()
        assert self.sock is not None
        try:
            self.sock.sendall(self.conn.send_request(cmd, body))
            while True:
                reply = self.conn.next_reply()
                if not isinstance(reply, p.NeedData):
                    break
                data = self.sock.recv(1 << 16)
                if not data:
                    raise NssClientError(f"{self.path}: connection closed by the responder")
                self.conn.receive_data(data)
        except (OSError, p.ProtocolError) as e:
            self.close()
            raise NssClientError(f"{self.path}: {e}") from None
        if reply.status != 0:
            # After an error status the real client closes the connection (§1.7).
            self.close()
            raise NssClientError(
                f"{p.command_name(cmd)}: responder answered {errno.errorcode.get(reply.status, '')}"
                f" ({reply.status}: {os.strerror(reply.status)})"
            )
        return reply.body

    def handshake(self) -> None:
        """Connect and negotiate the version, as the real client does first (§1.3)."""
        if self.sock is None:
            self._connect()

    def getpwnam(self, name: str) -> User | None:
        users = p.decode_passwd(self._call(p.Command.GETPWNAM, p.name_body(name)))
        return users[0] if users else None

    def getpwuid(self, uid: int) -> User | None:
        users = p.decode_passwd(self._call(p.Command.GETPWUID, p.id_body(uid)))
        return users[0] if users else None

    def getgrnam(self, name: str) -> p.GroupEntry | None:
        groups = p.decode_group(self._call(p.Command.GETGRNAM, p.name_body(name)))
        return groups[0] if groups else None

    def getgrgid(self, gid: int) -> p.GroupEntry | None:
        groups = p.decode_group(self._call(p.Command.GETGRGID, p.id_body(gid)))
        return groups[0] if groups else None

    def initgroups(self, name: str) -> list[int]:
        return p.decode_initgr(self._call(p.Command.INITGR, p.name_body(name)))
