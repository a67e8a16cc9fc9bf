"""The fault/latency proxy (testing/faultproxy.py) against a tiny loopback server.

The server answers each request line with a fixed-size reply, so what the proxy does to
the bytes (delay, stall, drop, trickle, cap, rewrite) is seen exactly by the client.
Times are only lower bounds the proxy must respect (a delay cannot make things
faster), never upper bounds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from testing.faultproxy import FaultProxy

REPLY = bytes(range(256)) * 16  # 4 KiB


class ReplyServer:
    """Answers every received byte ``b"?"`` with REPLY; closes when the client does."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                for _ in range(data.count(b"?")):
                    conn.sendall(REPLY)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = ReplyServer()
    p = FaultProxy("127.0.0.1", server.port).start()
    try:
        yield p
    finally:
        p.stop()
        server.close()


def connect(p: FaultProxy, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=timeout)
    return s


def read_n(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def test_transparent_by_default_and_counts(proxy):
    with connect(proxy) as s:
        s.sendall(b"??")
        assert read_n(s, 2 * len(REPLY)) == REPLY * 2
    assert proxy.stats.connections == 1
    assert proxy.stats.bytes_up == 2
    assert proxy.stats.bytes_down == 2 * len(REPLY)
    assert proxy.uri == f"ldap://127.0.0.1:{proxy.port}"


def test_round_trip_delay_is_added_each_way(proxy):
    proxy.rtt(0.2)
    with connect(proxy) as s:
        start = time.monotonic()
        s.sendall(b"?")
        assert read_n(s, len(REPLY)) == REPLY
        assert time.monotonic() - start >= 0.2
    proxy.heal()
    assert proxy.knobs.delay_up == proxy.knobs.delay_down == 0.0


def test_stall_accepts_but_forwards_nothing_until_released(proxy):
    proxy.set(stall=True)
    with connect(proxy, timeout=0.5) as s:
        s.sendall(b"?")
        with pytest.raises(TimeoutError):
            s.recv(1)
        assert proxy.stats.connections == 1 and proxy.stats.bytes_up == 0
        proxy.set(stall=False)
        s.settimeout(10)
        assert read_n(s, len(REPLY)) == REPLY


def test_stall_of_an_open_connection_holds_the_answer(proxy):
    with connect(proxy, timeout=0.5) as s:
        s.sendall(b"?")
        assert read_n(s, len(REPLY)) == REPLY
        proxy.set(stall=True)
        s.sendall(b"?")
        with pytest.raises(TimeoutError):
            s.recv(1)
        proxy.set(stall=False)
        s.settimeout(10)
        assert read_n(s, len(REPLY)) == REPLY


def test_drop_after_cuts_the_answer_at_that_byte(proxy):
    proxy.set(drop_after=1000)
    with connect(proxy) as s:
        s.sendall(b"?")
        got = bytearray()
        while chunk := _recv_or_reset(s):
            got += chunk
    assert bytes(got) == REPLY[:1000]
    assert proxy.stats.dropped == 1


def test_trickle_sends_one_byte_at_a_time(proxy):
    proxy.set(trickle=0.05)
    with connect(proxy) as s:
        start = time.monotonic()
        s.sendall(b"?")
        sizes = [len(s.recv(4096)) for _ in range(5)]
        elapsed = time.monotonic() - start
    assert sizes == [1] * 5
    assert elapsed >= 4 * 0.05


def test_bandwidth_cap(proxy):
    proxy.set(bandwidth=40_000)  # bytes per second
    with connect(proxy) as s:
        start = time.monotonic()
        s.sendall(b"?" * 4)
        assert read_n(s, 4 * len(REPLY)) == REPLY * 4
        # 16 KiB at 40 kB/s: at least the time of all but the last chunk.
        assert time.monotonic() - start >= (4 * len(REPLY) - 16384) / 40_000


def test_rewrite_changes_the_answer(proxy):
    proxy.set(rewrite=lambda b: b.replace(b"\x00", b"\xff"))
    with connect(proxy) as s:
        s.sendall(b"?")
        got = read_n(s, len(REPLY))
    assert got == REPLY.replace(b"\x00", b"\xff") and got != REPLY


def test_drop_all_resets_open_connections(proxy):
    with connect(proxy) as s:
        s.sendall(b"?")
        assert read_n(s, len(REPLY)) == REPLY
        proxy.drop_all()
        assert _recv_or_reset(s) == b""


def test_unknown_knob_is_refused(proxy):
    with pytest.raises(AttributeError, match="delay"):
        proxy.set(delay=1)


def _recv_or_reset(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except ConnectionResetError:
        return b""
