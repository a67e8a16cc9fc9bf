"""The asyncio side of the private RPC (``framing.py`` has the frames, ``ops.py`` the
ops): the server each daemon process runs, and the multiplexing client the responder
keeps to each backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from cached.ipc import framing
from cached.ipc.framing import FrameDecoder, Message, RpcError, encode_frame, prepare_socket_path
from cached.ipc.ops import Op

log = logging.getLogger(__name__)

Handler = Callable[[Op, dict[str, Any]], Awaitable[dict[str, Any]]]


def peer_uid(writer: asyncio.StreamWriter | asyncio.BaseTransport) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    return framing.peer_uid(sock)


async def serve(
    path: str, handler: Handler, mode: int = 0o600, allow_uids: frozenset[int] = frozenset({0})
) -> asyncio.Server:
    """Serve RPC requests on a Unix socket; each request runs as its own task.

    Only peers whose uid is in ``allow_uids`` are served (checked with SO_PEERCRED on
    top of the socket's mode): these sockets change the cache and show its contents.
    """
    prepare_socket_path(path)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer)
        if uid not in allow_uids and uid != os.geteuid():
            log.warning("rpc %s: refused a client running as uid %s", path, uid)
            writer.close()
            return
        decoder = FrameDecoder()
        tasks: set[asyncio.Task[None]] = set()

        async def answer(msg: Message) -> None:
            rid = msg.get("id")
            note = "id" not in msg  # a note: nobody waits for an answer (Notifier)
            try:
                name = msg["op"]
                args = msg.get("args") or {}
                if not isinstance(name, str) or not isinstance(args, dict):
                    raise RpcError("malformed request")
                try:
                    op = Op(name)
                except ValueError:
                    raise RpcError(f"unknown op {name!r}") from None
                result = await handler(op, args)
                reply: Message = {"id": rid, "ok": True, **result}
            except Exception as e:
                log.exception("rpc %s failed", msg.get("op"))
                reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"}
            if note:
                return
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(encode_frame(reply))
                await writer.drain()

        try:
            while data := await reader.read(65536):
                for msg in decoder.feed(data):
                    task = asyncio.create_task(answer(msg))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except (ConnectionError, RpcError) as e:
            log.warning("rpc client on %s dropped: %s", path, e)
        except asyncio.CancelledError:
            # The process stops with the client connected (asyncio.run cancels every
            # task): not an error, where asyncio logged the cancelled callback's
            # traceback at ERROR on SIGTERM (tests/unit/test_ipc_notes.py).
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(on_client, path=path)
    os.chmod(path, mode)
    return server


class RpcClient:
    """A client that reconnects on demand and multiplexes requests by id."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.open_unix_connection(self.path)
            except OSError as e:
                raise RpcError(f"{self.path}: {e.strerror or e}") from None
            try:
                framing.check_server(writer.get_extra_info("socket"), self.path)
            except RpcError:
                writer.close()
                raise
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader, writer))
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        reason = "connection closed"
        try:
            while data := await reader.read(65536):
                for msg in decoder.feed(data):
                    fut = self._pending.pop(msg.get("id", -1), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        except (ConnectionError, RpcError) as e:
            reason = str(e)
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            # Everything still waiting on this connection has lost its answer.
            for rid, fut in list(self._pending.items()):
                if not fut.done():
                    fut.set_exception(RpcError(f"{self.path}: {reason}"))
                self._pending.pop(rid, None)

    async def call(self, op: Op, timeout: float = 30.0, **args: Any) -> Message:
        writer = await self._connect()
        rid = next(self._ids)
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            writer.write(encode_frame({"id": rid, "op": op.value, "args": args}))
            await writer.drain()
            reply = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RpcError(f"{self.path}: no answer to {op} within {timeout:.0f} s") from None
        except ConnectionError as e:
            raise RpcError(f"{self.path}: {e}") from None
        finally:
            self._pending.pop(rid, None)
        if not reply.get("ok"):
            raise RpcError(f"{self.path}: {op} failed: {reply.get('error')}")
        return reply

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
