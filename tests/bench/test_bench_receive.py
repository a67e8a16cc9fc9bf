"""Reading one 8.5 MB LDAP message: cached's receive loop against ldap3
2.9.1's, over a real socket pair. ldap3 reads 4,096 bytes at a time and appends with
``bytes +=`` (quadratic: 9.7 s in the issue's measurement); cached reads 1 MiB at a
time into a bytearray. ldap3's loop is marked slow (``make soak`` runs it)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cached.ldap import client
from tests.unit.test_ldap_receive import _Strategy, ber

# An entry the size of the issue's: one 8.5 MB value in a searchResEntry-shaped message.
MESSAGE = ber(b"\x02\x01\x01" + ber(b"g" * 8_500_000, tag=0x64, long_form=True), long_form=True)


def read_once(receiving: Callable[[Any], list[bytes]]) -> list[bytes]:
    a, b = socket.socketpair()
    a.settimeout(60)
    sender = threading.Thread(target=b.sendall, args=(MESSAGE,), daemon=True)
    sender.start()
    try:
        got: list[bytes] = []
        while sum(map(len, got)) < len(MESSAGE):
            got += receiving(_Strategy(a))
        return got
    finally:
        sender.join(timeout=60)
        a.close()
        b.close()


def test_receive_8_5_mb_message_cached_loop(benchmark):
    got = benchmark(read_once, client._receiving_linear)
    assert got == [MESSAGE]


@pytest.mark.slow
def test_receive_8_5_mb_message_ldap3_loop(benchmark):
    got = benchmark.pedantic(read_once, args=(client._receiving,), rounds=1, iterations=1)
    assert got == [MESSAGE]
