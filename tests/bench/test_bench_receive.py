"""Reading one 8.5 MB LDAP message: cached's receive loop (Connection.receive and its
MessageBuffer) against ldap3 2.9.1's, over a real socket pair. ldap3 reads 4,096 bytes
at a time and appends with ``bytes +=`` (quadratic: 9.7 s in the issue's measurement);
cached reads 1 MiB at a time into a bytearray. ldap3's loop is marked slow (``make
soak`` runs it)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ldap3.strategy.sync
import pytest

from tests.unit.test_ldap_receive import ber, over

# An entry the size of the issue's: one 8.5 MB value in a searchResEntry-shaped message.
MESSAGE = ber(b"\x02\x01\x01" + ber(b"g" * 8_500_000, tag=0x64, long_form=True), long_form=True)


@dataclass
class _Conn:
    socket: socket.socket
    sasl_mechanism: str | None = None
    last_error: str = ""
    listening: bool = field(default=True)


class _Strategy:
    """What ldap3's SyncStrategy.receiving reads through: its connection's socket."""

    socket_size = 4096  # ldap3 2.9.1's SOCKET_SIZE

    def __init__(self, sock: socket.socket) -> None:
        self.connection = _Conn(sock)

    def close(self) -> None:
        pass


def read_once(receiving: Callable[[socket.socket], list[bytes]]) -> list[bytes]:
    a, b = socket.socketpair()
    a.settimeout(60)
    sender = threading.Thread(target=b.sendall, args=(MESSAGE,), daemon=True)
    sender.start()
    try:
        got: list[bytes] = []
        while sum(map(len, got)) < len(MESSAGE):
            got += receiving(a)
        return got
    finally:
        sender.join(timeout=60)
        a.close()
        b.close()


def _cached(sock: socket.socket) -> list[bytes]:
    return over(sock).receive()


def _ldap3(sock: socket.socket) -> list[bytes]:
    loop: Any = ldap3.strategy.sync.SyncStrategy.receiving
    return list(loop(_Strategy(sock)))


def test_receive_8_5_mb_message_cached_loop(benchmark):
    got = benchmark(read_once, _cached)
    assert got == [MESSAGE]


@pytest.mark.slow
def test_receive_8_5_mb_message_ldap3_loop(benchmark):
    got = benchmark.pedantic(read_once, args=(_ldap3,), rounds=1, iterations=1)
    assert got == [MESSAGE]
