"""The private RPC between cached's processes (responder, backends, monitor, tools):
the frames, the socket paths, and the tools' blocking client (``ops.py`` names what
the frames carry).

Frames are a 4-byte big-endian length and a msgpack map. A request is
``{"id": n, "op": str, "args": {...}}``; its reply ``{"id": n, "ok": bool, ...}``. A
request without an id is a note: nothing answers it (``Notifier``).
Requests on one connection may be answered out of order (the backend answers a
cached user while an initgroups of 2,000 groups is still running).

The sockets live in ``<pipes_dir>/private`` (mode 0700, root only), like SSSD's
``pipes/private``. The framing is sans-IO (``FrameDecoder``). This module also has the
blocking one-shot client the command-line tools use (``call_sync``): a tool such as
``cached cache -E`` must start fast, and asyncio alone costs more to import than the
whole invalidation (``aio.py`` holds the daemon's asyncio server and client).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from typing import Any

import msgpack

from cached.ipc.ops import Op

log = logging.getLogger(__name__)

# One frame carries at most the counters of a process or a status report; 16 MiB is
# far above both and stops a confused peer from making us buffer without end.
MAX_FRAME = 16 << 20
_LEN = struct.Struct(">I")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (socket(7) SO_PEERCRED)

Message = dict[str, Any]


class RpcError(Exception):
    """The peer is unreachable, went away, answered with an error, or took too long."""


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket, as the
    kernel recorded it at connect (or listen) time: SO_PEERCRED."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return int(_UCRED.unpack(creds)[1])


def trusted_uid(uid: int | None) -> bool:
    """Root, or the user we run as (tests run the daemon unprivileged): the only
    peers the private sockets talk to, at either end."""
    return uid == 0 or uid == os.geteuid()


def check_server(sock: socket.socket, path: str) -> None:
    """Refuse a server that is not root's. The socket's directory is root's alone,
    but a name is trusted no further than every directory on its way (``statedir``):
    a socket bound there by another user would be told the tools' requests and could
    answer them, so the client checks the server as the server checks the client."""
    uid = peer_uid(sock)
    if not trusted_uid(uid):
        raise RpcError(f"{path}: the server runs as uid {uid}, not root; not talking to it")


def private_dir(pipes_dir: str) -> str:
    return os.path.join(pipes_dir, "private")


def backend_socket(pipes_dir: str, domain: str) -> str:
    return os.path.join(private_dir(pipes_dir), f"be_{domain}")


def responder_socket(pipes_dir: str) -> str:
    return os.path.join(private_dir(pipes_dir), "responder")


def control_socket(pipes_dir: str) -> str:
    return os.path.join(private_dir(pipes_dir), "control")


def encode_frame(msg: Message) -> bytes:
    body = msgpack.packb(msg, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise RpcError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _LEN.pack(len(body)) + body


class FrameDecoder:
    """Bytes in, messages out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= 4:
            (n,) = _LEN.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise RpcError(f"peer sent a frame of {n} bytes (limit {MAX_FRAME})")
            if len(self._buf) < 4 + n:
                break
            body = bytes(self._buf[4 : 4 + n])
            del self._buf[: 4 + n]
            try:
                msg = msgpack.unpackb(body, raw=False)
            except (ValueError, msgpack.UnpackException) as e:
                raise RpcError(f"undecodable frame: {e}") from None
            if not isinstance(msg, dict):
                raise RpcError("frame is not a map")
            out.append(msg)
        return out


def prepare_socket_path(path: str) -> None:
    """Make the parent directory (0700 for private/) and remove a stale socket."""
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def call_sync(path: str, op: Op, timeout: float = 30.0, **args: Any) -> Message:
    """One request from a synchronous program (the CLI tools)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            check_server(sock, path)
            sock.sendall(encode_frame({"id": 1, "op": op.value, "args": args}))
            decoder = FrameDecoder()
            while True:
                data = sock.recv(65536)
                if not data:
                    raise RpcError(f"{path}: connection closed before the answer to {op}")
                for reply in decoder.feed(data):
                    if not reply.get("ok"):
                        raise RpcError(f"{path}: {op} failed: {reply.get('error')}")
                    return reply
        except TimeoutError:
            raise RpcError(f"{path}: no answer to {op} within {timeout:.0f} s") from None
        except OSError as e:
            raise RpcError(f"{path}: {e.strerror or e}") from None


class Notifier:
    """One-way notes (requests without an id, never answered) from a thread that
    must not wait for an event loop: the backend's executor thread tells the
    responder of groups it stored early (ldap/service.py). One connection, opened
    when first needed and again after a failure; a note that cannot be sent is
    dropped (each is an optimisation) and the error returned."""

    def __init__(self, path: str, timeout: float = 1.0) -> None:
        self.path, self.timeout = path, timeout
        self._sock: socket.socket | None = None

    def send(self, op: Op, **args: Any) -> str:
        """Send a note; "" when sent, else why not."""
        frame = encode_frame({"op": op.value, "args": args})
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.path)
                    check_server(sock, self.path)
                except BaseException:
                    sock.close()
                    raise
                self._sock = sock
            self._sock.sendall(frame)
        except RpcError as e:
            self.close()
            return str(e)
        except OSError as e:
            self.close()
            return f"{self.path}: {e.strerror or e}"
        return ""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
