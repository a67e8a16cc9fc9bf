"""The connections of a responder socket served as asyncio streams one request at a
time (the SSH, PAM and sudo sockets): each is admitted by its peer's uid (the NSS
socket's limits, ``admission``, for a socket every local user can reach; root alone
for a root-only one), a request must arrive whole within ``client_request_timeout`` of
its first byte however its bytes trickle in, and a connection idle for
``client_idle_timeout`` is closed (docs/threat-model.md). What a request is answered
with is the responder's: the loop reads, feeds the sans-IO codec, and writes each
reply before the next request is parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from cached.config import NssConfig
from cached.ipc import aio, framing
from cached.ratelimit import RateLimitedLog
from cached.responder import admission
from cached.responder.flow import CLIENT_UID
from cached.responder.wire import MAX_REQUEST_SIZE, NeedData, ProtocolError

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

BACKLOG: Final = 128


class Codec(Protocol):
    """What the loop needs of a connection's sans-IO codec: ``next_request`` raises
    :class:`~cached.responder.wire.ProtocolError` when the peer broke the protocol,
    after which the codec is ``dead`` unless it salvaged the request."""

    @property
    def buffered_bytes(self) -> int: ...

    @property
    def dead(self) -> bool: ...

    def receive_data(self, data: bytes | bytearray | memoryview) -> None: ...

    def next_request(self) -> object: ...


#: The reply to a request (what the codec's ``next_request`` returned, never
#: NEED_DATA) from a client of a uid; None: close the connection. (``Any``: mypy
#: cannot solve a request type from ``next_request``'s union with NeedData.)
Respond = Callable[[Any, int | None], Awaitable[bytes | None]]
#: The reply to a request the codec could not parse but salvaged, the connection
#: surviving (PAM's MalformedRequest); None: close the connection. Not asked when the
#: codec is dead.
Salvage = Callable[[ProtocolError], bytes | None]


def _close(_error: ProtocolError) -> bytes | None:
    return None


@dataclass(frozen=True, slots=True)
class Answering:
    """How a responder of these sockets answers a parsed request (its ``Respond``):
    the codec's GET_VERSION request (``version``) with ``version_reply()``; a request
    whose body the codec refused (``refused``: it has ``cmd`` and ``reason``, SSH's and
    sudo's EINVAL) with ``refusal(cmd)``; any other with the responder's ``answer``.
    When that raises (a bug, a store that cannot be read) the reply is
    ``failed(cmd)``, None closing the connection, and an ERROR line names the
    command and the exception's type; with ``subject`` also what the request asked
    for (``subject(request)``), the exception's message and traceback, never for a
    request that may hold a password (PAM's)."""

    what: str  # "ssh", "pam", "sudo": for log lines
    version: type[Any]
    version_reply: Callable[[], bytes]
    failed: Callable[[Any], bytes | None]
    refused: type[Any] | None = None
    refusal: Callable[[Any], bytes] | None = None
    subject: Callable[[Any], str] | None = None

    async def respond(
        self, req: Any, answer: Callable[[Any], Awaitable[bytes | None]]
    ) -> bytes | None:
        if isinstance(req, self.version):
            return self.version_reply()
        what = self.what
        if self.refused is not None and isinstance(req, self.refused):
            assert self.refusal is not None
            limited.log(("bad", what), logging.DEBUG, "%s: bad request: %s", what, req.reason)
            return self.refusal(req.cmd)
        try:
            return await answer(req)
        except Exception as e:
            command = req.cmd.name
            if self.subject is None:
                limited.log((what, "answer", type(e).__name__), logging.ERROR,
                            "%s: answering %s failed: %s", what, command,
                            type(e).__name__)  # fmt: skip
            else:
                limited.log((what, "answer", type(e).__name__), logging.ERROR,
                            "%s: answering %s for %r failed: %s: %s", what, command,
                            self.subject(req), type(e).__name__, e, exc_info=True)  # fmt: skip
            return self.failed(req.cmd)


class StreamClients:
    """The connections of one socket: how many, whose, and the loop serving each.

    ``root_only``: only root (or the user the daemon runs as, in tests) is served, the
    socket's mode being the protection (sudo); else the NSS socket's per-uid limits.
    """

    def __init__(self, limits: NssConfig, what: str, *, root_only: bool = False) -> None:
        self.limits = limits
        self.what = what  # "SSH", "PAM", "sudo": for log lines
        self.root_only = root_only
        self.active = 0
        self.nonroot = 0
        self.per_uid: dict[int | None, int] = {}
        self.refused = 0

    def refusal(self, uid: int | None) -> str:
        """Why a new connection of ``uid`` is refused, or "" when it is admitted."""
        if self.root_only:
            return "" if framing.trusted_uid(uid) else f"uid {uid}: the socket is root's"
        conns = self.per_uid.get(uid, 0)
        return admission.refusal(self.limits, self.active, self.nonroot, uid, conns)

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: Codec,
        respond: Respond,
        salvage: Salvage = _close,
    ) -> None:
        """Feed ``conn`` what the client sends and answer each complete request with
        ``respond(request, uid)``, in order."""
        try:
            uid: int | None = aio.peer_uid(writer)
        except OSError:
            uid = None
        why = self.refusal(uid)
        if why:
            self.refused += 1
            limited.log(("refused", self.what, uid), logging.WARNING,
                        "refusing a %s client: %s", self.what, why)  # fmt: skip
            writer.close()
            return
        self.active += 1
        self.nonroot += uid != 0
        self.per_uid[uid] = self.per_uid.get(uid, 0) + 1
        CLIENT_UID.set(uid)
        idle = float(self.limits.client_idle_timeout)
        request = float(self.limits.client_request_timeout)
        loop = asyncio.get_running_loop()
        first_byte = 0.0  # when the request being received began
        try:
            while True:
                begun = conn.buffered_bytes > 0
                wait = first_byte + request - loop.time() if begun else idle
                try:
                    data = await asyncio.wait_for(reader.read(MAX_REQUEST_SIZE), max(wait, 0))
                except TimeoutError:
                    break
                if not data:
                    break
                if not conn.buffered_bytes:
                    first_byte = loop.time()
                conn.receive_data(data)
                if not await self._answer(writer, conn, respond, salvage, uid):
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            self.active -= 1
            self.nonroot -= uid != 0
            self.per_uid[uid] -= 1
            if not self.per_uid[uid]:
                del self.per_uid[uid]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        conn: Codec,
        respond: Respond,
        salvage: Salvage,
        uid: int | None,
    ) -> bool:
        """Answer the complete requests buffered; False: close the connection."""
        what = self.what.lower()
        while True:
            try:
                req = conn.next_request()
            except ProtocolError as e:
                reply = None if conn.dead else salvage(e)
                if reply is None:
                    limited.log(("protocol", what), logging.DEBUG,
                                "%s: closing a client: %s", what, e)  # fmt: skip
                    return False
                limited.log(("malformed", what), logging.DEBUG,
                            "%s: malformed request: %s", what, e)  # fmt: skip
            else:
                if isinstance(req, NeedData):
                    return True
                reply = await respond(req, uid)
                if reply is None:
                    return False
            writer.write(reply)
            await writer.drain()


async def listen(
    path: str,
    client: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    mode: int,
) -> asyncio.Server:
    """Listen on ``path`` (a stale socket there removed), the socket's mode ``mode``. A
    socket for its owner alone (sudo's 0600) is created so, under a narrowed umask,
    never briefly wider than the chmod; a wider one is created as the umask has it."""
    framing.prepare_socket_path(path)
    narrow = not mode & 0o077
    old = os.umask(0o777 & ~mode) if narrow else None
    try:
        server = await asyncio.start_unix_server(
            client, path=path, backlog=BACKLOG, limit=MAX_REQUEST_SIZE * 4
        )
    finally:
        if old is not None:
            os.umask(old)
    os.chmod(path, mode)
    return server
