"""The SASL layer on a connection (connection.bind_gssapi, send, receive) against a
scripted server on a socket pair, with a stand-in for the GSS context: the layer
negotiation's two binds, every later message framed and wrapped, and a message of a
sealed session that arrives only signed refused with the connection dropped. The
real context (kerberos.py) runs against a Samba DC in
tests/integration/test_adjoin.py."""

from __future__ import annotations

import socket
import threading

import pytest

from cached.ldap import sasl, wire
from cached.ldap.ber import integer, tlv
from cached.ldap.connection import Connection, TransportError
from cached.ldap.framing import MessageBuffer


class FakeContext:
    """Tokens are the data with a prefix: ``E`` sealed, ``S`` only signed."""

    def __init__(self) -> None:
        self.layer: sasl.Layer | None = None
        self.steps = 0

    @property
    def complete(self) -> bool:
        return self.steps >= 1

    def step(self, token: bytes | None) -> bytes:
        self.steps += 1
        return b"client-token"

    def wrap(self, data: bytes, *, seal: bool) -> bytes:
        return (b"E" if seal else b"S") + data

    def unwrap(self, token: bytes, *, sealed: bool) -> bytes:
        if sealed and token[:1] != b"E":
            raise sasl.SaslError("a message of a sealed session arrived unencrypted")
        return token[1:]


def _bind_response(msgid: int, code: int, creds: bytes | None = None) -> bytes:
    body = integer(0x0A, code) + tlv(4, b"") + tlv(4, b"")
    if creds is not None:
        body += tlv(0x87, creds)
    return tlv(0x30, integer(0x02, msgid) + tlv(wire.BIND_RESPONSE, body))


def _done(msgid: int) -> bytes:
    body = integer(0x0A, 0) + tlv(4, b"") + tlv(4, b"")
    return tlv(0x30, integer(0x02, msgid) + tlv(wire.SEARCH_RESULT_DONE, body))


def _server(sock: socket.socket, seen: list[bytes], answer_prefix: bytes) -> None:
    plain = MessageBuffer()
    # The two binds, in the clear: the context's token, then the layer reply.
    for answer in (_bind_response(1, 14, b"S" + bytes([6, 0, 0x10, 0])), _bind_response(2, 0)):
        got: list[bytes] = []
        while not got:
            got += plain.feed(sock.recv(65536))
        seen += got
        sock.sendall(answer)
    frames = sasl.SaslBuffer()
    tokens: list[bytes] = []
    while not tokens:
        tokens += frames.feed(sock.recv(65536))
    seen += tokens
    sock.sendall(sasl.frames([answer_prefix + _done(3)]))
    sock.close()


def _session(answer_prefix: bytes) -> tuple[Connection, list[bytes], threading.Thread]:
    ours, theirs = socket.socketpair()
    seen: list[bytes] = []
    t = threading.Thread(target=_server, args=(theirs, seen, answer_prefix), daemon=True)
    t.start()
    conn = Connection(ours, "test")
    with conn.deadline_in(10):
        conn.bind_gssapi(FakeContext(), min_ssf=-1)
    assert conn.sasl_layer == "seal"
    return conn, seen, t


def test_every_message_after_the_bind_is_wrapped_and_framed() -> None:
    conn, seen, t = _session(b"E")
    with conn.deadline_in(10):
        conn.send(wire.encode_extended(conn.next_id(), "1.2.3"))
        answer = conn.receive()
    t.join(10)
    conn.close()
    assert [wire.decode_response(m).op for m in answer] == [wire.SEARCH_RESULT_DONE]
    first, second, request = seen
    assert wire.decode_response(first).message_id == 1
    # The client's layer reply (signed, not sealed: RFC 4752 §3.1): seal, 16 MiB.
    assert b"S\x04\xff\xff\xff" in second
    assert request[:1] == b"E" and wire.decode_response(request[1:]).message_id == 3


def test_a_message_only_signed_in_a_sealed_session_drops_the_connection() -> None:
    conn, _seen, t = _session(b"S")
    with conn.deadline_in(10):
        conn.send(wire.encode_extended(conn.next_id(), "1.2.3"))
        with pytest.raises(TransportError, match="arrived unencrypted"):
            conn.receive()
    t.join(10)
    assert conn.closed
