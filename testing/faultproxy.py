"""A TCP proxy that makes a healthy loopback server slow, distant or broken, on demand.

Tests and benchmarks put it between a client (cached, SSSD, nslcd) and slapd to
reproduce on loopback what a WAN link or a failing server does:

* ``delay_up`` / ``delay_down``: a fixed one-way delay per direction (a round trip of
  20 ms is 10 ms each way). It is latency, not a throughput limit: chunks are stamped
  when read and forwarded when due, so pipelined pages overlap as on a real link.
* ``stall``: accept connections but forward nothing, either way, until unset (what a
  SIGSTOPped server looks like, without touching the server).
* ``drop_after``: close each connection once that many bytes went server -> client
  (a server dying in the middle of an answer).
* ``trickle``: forward server -> client one byte every that many seconds.
* ``bandwidth``: cap each direction of each connection to that many bytes a second,
  forwarded ``piece`` bytes at a time (at most a read of CHUNK by default; a small
  piece makes a server that keeps sending slowly rather than in bursts).
* ``rewrite``: a function applied to every server -> client chunk (a server answering
  something else than it should).

Every knob can be changed at run time from another thread (the test's): the proxy
runs its own event loop in a daemon thread and reads the knobs per chunk. It listens
on its own free loopback port. Counters: connections accepted, bytes each way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

CHUNK = 16384  # forwarding granularity; small enough for a smooth bandwidth cap


@dataclass
class Knobs:
    delay_up: float = 0.0  # seconds, client -> server
    delay_down: float = 0.0  # seconds, server -> client
    stall: bool = False
    drop_after: int | None = None  # bytes server -> client per connection, then close
    trickle: float | None = None  # seconds between single bytes server -> client
    bandwidth: float | None = None  # bytes per second per direction and connection
    piece: int = CHUNK  # bytes forwarded at once under ``bandwidth``
    rewrite: Callable[[bytes], bytes] | None = None  # server -> client chunks


@dataclass
class Stats:
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    dropped: int = 0  # connections closed by drop_after


@dataclass(eq=False)
class _Conn:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    down: int = 0  # bytes forwarded server -> client

    def abort(self) -> None:
        for w in self.writers:
            w.transport.abort()


class FaultProxy:
    def __init__(
        self, target_host: str, target_port: int, host: str = "127.0.0.1", netns: str = ""
    ) -> None:
        """``netns``: a network namespace (``/proc/PID/ns/net``) the proxy's thread
        enters before it listens, so that it listens and connects in there (e.g. a
        second DC's address beside the DC, testing/adjoin.py)."""
        self.target = (target_host, target_port)
        self.host = host
        self.netns = netns
        self.port = 0
        self.knobs = Knobs()
        self.stats = Stats()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # each connection's _handle
        self._flowing: asyncio.Event | None = None  # set while not stalled

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        if self.netns:
            enter_netns(self.netns)  # this thread only: the proxy's own
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def _stop() -> None:
            if self._server is not None:
                self._server.close()
            for c in list(self._conns):
                c.abort()
            if self._flowing is not None:
                self._flowing.set()  # let stalled pumps see their aborted transports
            # Then end every connection's task before the loop stops: one left pending
            # was reported at exit ("Task was destroyed but it is pending").
            pending = [t for t in self._tasks if not t.done()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    @property
    def uri(self) -> str:
        return f"ldap://{self.host}:{self.port}"

    # -- run-time control (from any thread) --------------------------------------------

    def set(self, **knobs: object) -> None:
        """Change knobs, e.g. ``set(delay_up=0.01, delay_down=0.01)``; unknown names fail."""
        for name, value in knobs.items():
            if not hasattr(self.knobs, name):
                raise AttributeError(f"FaultProxy has no knob {name!r}")
            setattr(self.knobs, name, value)
        if "stall" in knobs:
            self._loop.call_soon_threadsafe(self._apply_stall)

    def rtt(self, seconds: float) -> None:
        """A round-trip time, half of it each way."""
        self.set(delay_up=seconds / 2, delay_down=seconds / 2)

    def heal(self) -> None:
        """Every knob back to a transparent proxy."""
        self.knobs.rewrite = None
        self.set(**{k: v for k, v in vars(Knobs()).items() if k != "rewrite"})

    def drop_all(self) -> None:
        """Reset every open connection now."""

        def _drop() -> None:
            for c in list(self._conns):
                c.abort()

        self._loop.call_soon_threadsafe(_drop)

    def _apply_stall(self) -> None:
        assert self._flowing is not None
        if self.knobs.stall:
            self._flowing.clear()
        else:
            self._flowing.set()

    # -- forwarding --------------------------------------------------------------------

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        conn = _Conn([cwriter])
        self._conns.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            assert self._flowing is not None
            await self._flowing.wait()  # stalled: accepted, nothing reaches the server
            try:
                sreader, swriter = await asyncio.open_connection(*self.target)
            except OSError:
                return
            conn.writers.append(swriter)
            await asyncio.gather(
                self._pump(creader, swriter, conn, up=True),
                self._pump(sreader, cwriter, conn, up=False),
                return_exceptions=True,
            )
        finally:
            self._conns.discard(conn)
            if task is not None:
                self._tasks.discard(task)
            conn.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn, up: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            while True:
                data = await reader.read(CHUNK)
                delay = self.knobs.delay_up if up else self.knobs.delay_down
                queue.put_nowait((time.monotonic() + delay, data))
                if not data:
                    return

        reading = asyncio.ensure_future(read())
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                assert self._flowing is not None
                await self._flowing.wait()
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                await self._forward(data, writer, conn, up)
        finally:
            reading.cancel()

    async def _forward(
        self, data: bytes, writer: asyncio.StreamWriter, conn: _Conn, up: bool
    ) -> None:
        k = self.knobs
        if up:
            self.stats.bytes_up += len(data)
        else:
            if k.rewrite is not None:
                data = k.rewrite(data)
            if k.drop_after is not None and conn.down + len(data) >= k.drop_after:
                writer.write(data[: max(0, k.drop_after - conn.down)])
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                self.stats.dropped += 1
                conn.abort()
                raise ConnectionResetError("drop_after")
            conn.down += len(data)
            self.stats.bytes_down += len(data)
            if k.trickle is not None:
                for i in range(len(data)):
                    writer.write(data[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(k.trickle)
                return
        if k.bandwidth:
            for i in range(0, len(data), k.piece):
                writer.write(data[i : i + k.piece])
                await writer.drain()
                await asyncio.sleep(len(data[i : i + k.piece]) / k.bandwidth)
            return
        writer.write(data)
        await writer.drain()


def enter_netns(path: str) -> None:
    """The calling thread (only it) moves into the network namespace at ``path``:
    the sockets it makes then belong to that namespace for their whole life."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def main() -> None:
    """Run a proxy from the command line (benchmarks by hand, demos)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("target", help="HOST:PORT of the server")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="round-trip time to add")
    ap.add_argument("--bandwidth", type=float, default=None, help="bytes per second")
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    proxy = FaultProxy(host, int(port)).start()
    proxy.rtt(args.rtt_ms / 1000)
    proxy.set(bandwidth=args.bandwidth)
    print(proxy.uri, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()


if __name__ == "__main__":
    main()
