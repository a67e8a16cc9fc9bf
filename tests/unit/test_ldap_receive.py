"""The LDAP receive loop (cached/ldap/connection.py, Connection.receive): message
framing over a socket, the cap on one message, the whole-operation deadline. Pure logic
over a real socket pair (the framing alone, bytes only: tests/unit/test_framing.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from cached.ldap.connection import Connection, LdapMessageTooLarge, LdapTimeout, TransportError
from cached.ldap.framing import MAX_MESSAGE


def ber(payload: bytes, tag: int = 0x30, long_form: bool = False) -> bytes:
    n = len(payload)
    if n < 0x80 and not long_form:
        return bytes([tag, n]) + payload
    return bytes([tag, 0x84]) + n.to_bytes(4, "big") + payload


def over(sock: socket.socket, deadline: float | None = None) -> Connection:
    """A Connection over ``sock`` (no ldap3 object: the socket is all it reads)."""
    conn = Connection(sock, "ldap://test.invalid:389")
    conn.deadline = deadline
    return conn


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(10)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def feed(sock: socket.socket, pieces: list[bytes], pause: float = 0.0) -> threading.Thread:
    def run() -> None:
        for p in pieces:
            try:
                sock.sendall(p)
            except OSError:
                return
            if pause:
                time.sleep(pause)  # the server's pacing, not a wait for readiness

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def receive(conn: Connection) -> list[bytes]:
    return conn.receive()


def receive_all(conn: Connection, total: int) -> list[bytes]:
    """Messages until ``total`` bytes came: one call returns at the first boundary
    where its buffer is empty, which depends on how the sender's writes arrived."""
    got: list[bytes] = []
    while sum(map(len, got)) < total:
        more = receive(conn)
        assert more, "EOF"
        got += more
    return got


def test_messages_split_anywhere_come_out_whole(pair):
    a, b = pair
    m1, m2 = ber(b"x" * 10), ber(b"y" * 300, long_form=True)
    data = m1 + m2
    feed(b, [data[i : i + 1] for i in range(len(data))])
    assert receive_all(over(a), len(data)) == [m1, m2]


def test_every_length_form_split_anywhere_comes_out_whole(pair):
    """Short form and long forms of one to four octets (0x81: 128-255 bytes, 0x82: a
    group entry of a walk, read inline), each cut at every octet."""
    a, b = pair
    msgs = [ber(b"s" * 5)]
    for octets, n in ((1, 200), (2, 1200), (2, 300), (3, 70_000), (4, 90)):
        msgs.append(bytes([0x30, 0x80 | octets]) + n.to_bytes(octets, "big") + b"v" * n)
    data = b"".join(msgs)
    cuts = [data[i : i + 1] for i in range(len(data) - 70_300)] + [data[len(data) - 70_300 :]]
    feed(b, cuts)
    assert receive_all(over(a), len(data)) == msgs


@pytest.mark.parametrize("octets", [1, 2, 3, 4])
def test_a_long_form_header_cut_at_each_octet_is_read_once_whole(pair, octets):
    a, b = pair
    n = 200 if octets == 1 else 300
    m = bytes([0x30, 0x80 | octets]) + n.to_bytes(octets, "big") + b"w" * n
    st = over(a)
    for cut in range(1, 2 + octets):
        feed(b, [m[:cut]]).join()
        time.sleep(0.02)  # the cut header alone in the buffer at the next read
        feed(b, [m[cut:]])
        assert receive_all(st, len(m)) == [m]


def test_a_message_cut_inside_is_completed_by_later_reads(pair):
    a, b = pair
    m1, m2, m3 = ber(b"a"), ber(b"b" * 200), ber(b"c" * 5000)
    feed(b, [m1 + m2 + m3[:7], m3[7:]])
    assert receive_all(over(a), len(m1 + m2 + m3)) == [m1, m2, m3]


def test_messages_stay_intact_when_later_reads_reuse_the_buffer(pair):
    """The connection's receive buffer is reused by every read: what one call
    returned are copies, unchanged by the reads of the next calls."""
    a, b = pair
    st = over(a)
    first = [ber(b"1" * 50), ber(b"2" * 3000)]
    feed(b, [b"".join(first)]).join()
    got = receive_all(st, sum(map(len, first)))
    assert all(type(m) is bytes for m in got)
    second = [ber(b"3" * 3050)]
    feed(b, second).join()
    assert receive_all(st, len(second[0])) == second
    assert got == first


def test_a_large_message_arrives_intact(pair):
    a, b = pair
    m = ber(bytes(range(256)) * 40_000, long_form=True)  # ~10 MB
    feed(b, [m])
    assert receive_all(over(a), len(m)) == [m]


def test_17_7_a_message_over_the_cap_is_refused_naming_server_and_size(pair):
    a, b = pair
    size = MAX_MESSAGE + 1
    head = bytes([0x30, 0x84]) + size.to_bytes(4, "big")
    feed(b, [head + b"z" * 100])
    st = over(a)
    with pytest.raises(LdapMessageTooLarge) as e:
        receive(st)
    assert st.closed
    assert "ldap://test.invalid:389" in str(e.value) and str(size + 6) in str(e.value)


def test_indefinite_length_is_refused(pair):
    a, b = pair
    feed(b, [b"\x30\x80\x02\x01\x01\x00\x00"])
    with pytest.raises(TransportError, match="BER length"):
        receive(over(a))


def test_eof_mid_message_returns_nothing(pair):
    a, b = pair
    feed(b, [ber(b"q" * 100)[:50]]).join()
    b.shutdown(socket.SHUT_WR)
    assert receive(over(a)) == []


def test_17_6_a_trickling_server_meets_the_deadline_not_a_per_read_timeout(pair):
    a, b = pair
    m = ber(b"t" * 100)
    # One byte every 0.05 s: each read is quick, the whole answer would take 5 s.
    feed(b, [m[i : i + 1] for i in range(len(m))], pause=0.05)
    st = over(a, deadline=time.monotonic() + 0.5)
    with pytest.raises(LdapTimeout, match="timed out"):
        receive(st)
    assert st.closed


def test_a_deadline_already_past_times_out_without_reading(pair):
    a, _b = pair
    st = over(a, deadline=time.monotonic() - 1)
    with pytest.raises(LdapTimeout):
        receive(st)
