"""The private RPC between cached's processes (responder, backends, monitor, tools).

Frames are a 4-byte big-endian length and a msgpack map. A request is
``{"id": n, "op": str, "args": {...}}``; its reply ``{"id": n, "ok": bool, ...}``.
Requests on one connection may be answered out of order (the backend answers a
cached user while an initgroups of 2,000 groups is still running).

The sockets live in ``<pipes_dir>/private`` (mode 0700, root only), like SSSD's
``pipes/private``. The framing is sans-IO (``FrameDecoder``); the asyncio server and
client below are the only I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack

log = logging.getLogger(__name__)

# One frame carries at most the counters of a process or a status report; 16 MiB is
# far above both and stops a confused peer from making us buffer without end.
MAX_FRAME = 16 << 20
_LEN = struct.Struct(">I")

Message = dict[str, Any]
Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class RpcError(Exception):
    """The peer is unreachable, went away, answered with an error, or took too long."""


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


async def serve(path: str, handler: Handler, mode: int = 0o600) -> asyncio.Server:
    """Serve RPC requests on a Unix socket; each request runs as its own task."""
    prepare_socket_path(path)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        tasks: set[asyncio.Task[None]] = set()

        async def answer(msg: Message) -> None:
            rid = msg.get("id")
            try:
                op = msg["op"]
                args = msg.get("args") or {}
                if not isinstance(op, str) or not isinstance(args, dict):
                    raise RpcError("malformed request")
                result = await handler(op, args)
                reply: Message = {"id": rid, "ok": True, **result}
            except Exception as e:
                log.exception("rpc %s failed", msg.get("op"))
                reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"}
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

    async def call(self, op: str, timeout: float = 30.0, **args: Any) -> Message:
        writer = await self._connect()
        rid = next(self._ids)
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            writer.write(encode_frame({"id": rid, "op": op, "args": args}))
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


def call_sync(path: str, op: str, timeout: float = 30.0, **args: Any) -> Message:
    """One request from a synchronous program (the CLI tools)."""

    async def run() -> Message:
        client = RpcClient(path)
        try:
            return await client.call(op, timeout=timeout, **args)
        finally:
            await client.close()

    return asyncio.run(run())
