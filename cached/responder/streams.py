"""The connections of a responder socket every local user can reach, served as asyncio
streams one request at a time (the SSH socket; the PAM sockets keep a loop of their
own shaped the same way): each is charged to its peer's uid (``admission``: the NSS
socket's limits), a request must arrive whole within ``REQUEST_TIMEOUT`` of its first
byte however its bytes trickle in, and a connection idle for ``client_idle_timeout``
is closed (docs/threat-model.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from cached.config import NssConfig
from cached.ipc import aio
from cached.ratelimit import RateLimitedLog
from cached.responder import admission
from cached.responder.flow import CLIENT_UID
from cached.responder.wire import MAX_REQUEST_SIZE

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# A request must arrive whole within this many seconds of its first byte (the clients
# write header and body at once); trickling cannot keep a connection.
REQUEST_TIMEOUT: Final = 10.0


class Codec(Protocol):
    """What the loop needs of a connection's sans-IO codec."""

    @property
    def buffered_bytes(self) -> int: ...

    def receive_data(self, data: bytes | bytearray | memoryview) -> None: ...


class StreamClients:
    """The connections of one socket: how many, whose, and the loop serving each."""

    def __init__(self, limits: NssConfig, what: str) -> None:
        self.limits = limits
        self.what = what  # "SSH": for log lines
        self.active = 0
        self.nonroot = 0
        self.per_uid: dict[int | None, int] = {}
        self.refused = 0

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: Codec,
        process: Callable[[int | None], Awaitable[bool]],
    ) -> None:
        """Feed ``conn`` what the client sends; after each read ``process(uid)``
        answers the complete requests buffered (False: close)."""
        try:
            uid: int | None = aio.peer_uid(writer)
        except OSError:
            uid = None
        why = admission.refusal(
            self.limits, self.active, self.nonroot, uid, self.per_uid.get(uid, 0)
        )
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
        loop = asyncio.get_running_loop()
        first_byte = 0.0  # when the request being received began
        try:
            while True:
                begun = conn.buffered_bytes > 0
                wait = first_byte + REQUEST_TIMEOUT - loop.time() if begun else idle
                try:
                    data = await asyncio.wait_for(reader.read(MAX_REQUEST_SIZE), max(wait, 0))
                except TimeoutError:
                    break
                if not data:
                    break
                if not conn.buffered_bytes:
                    first_byte = loop.time()
                conn.receive_data(data)
                if not await process(uid):
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
