"""The SSH socket's codec (``cached.ssh.protocol``) and the user record's keys field."""

from __future__ import annotations

import struct

import msgpack
import pytest

from cached.cache import records as rec
from cached.model import User
from cached.responder.wire import encode_request
from cached.ssh import protocol as p

U32 = struct.Struct("=I")


def parse(cmd: int, body: bytes) -> p.Request:
    conn = p.server_connection()
    conn.receive_data(encode_request(cmd, body))
    req = conn.next_request()
    assert not isinstance(req, p.NeedData)
    return req


def test_the_clients_request_parses() -> None:
    req = parse(p.Command.GET_USER_PUBKEYS, p.request_body("alice"))
    assert req == p.KeysRequest(p.Command.GET_USER_PUBKEYS, "alice", None, None)
    req = parse(p.Command.GET_USER_PUBKEYS, p.request_body("alice", domain="LDAP"))
    assert req == p.KeysRequest(p.Command.GET_USER_PUBKEYS, "alice", None, "LDAP")
    req = parse(p.Command.GET_HOST_PUBKEYS, p.request_body("host", alias="h"))
    assert req == p.KeysRequest(p.Command.GET_HOST_PUBKEYS, "host", "h", None)


def test_version() -> None:
    assert parse(p.Command.GET_VERSION, U32.pack(0)) == p.GetVersion(0)
    assert parse(p.Command.GET_VERSION, b"") == p.GetVersion(None)
    assert p.version_reply()[16:] == U32.pack(0)


@pytest.mark.parametrize(
    "body",
    [
        b"",  # no flags
        U32.pack(4) + U32.pack(6) + b"alice\0",  # a flag outside the mask
        U32.pack(0) + U32.pack(0),  # an empty name
        U32.pack(0) + U32.pack(5) + b"alice",  # no NUL
        U32.pack(0) + U32.pack(9) + b"alice\0",  # past the end
        U32.pack(0) + U32.pack(7) + b"ali\0ce\0",  # a NUL inside
        U32.pack(0) + U32.pack(3) + b"\xff\xfe\0",  # not UTF-8
        U32.pack(2) + U32.pack(6) + b"alice\0",  # REQ_DOMAIN without its length
        U32.pack(2) + U32.pack(6) + b"alice\0" + U32.pack(4) + b"LDAP",  # domain, no NUL
    ],
)
def test_bad_bodies_get_einval_and_the_connection_goes_on(body: bytes) -> None:
    conn = p.server_connection()
    conn.receive_data(encode_request(p.Command.GET_USER_PUBKEYS, body))
    conn.receive_data(encode_request(p.Command.GET_VERSION, U32.pack(0)))
    assert isinstance(conn.next_request(), p.BadRequest)
    assert conn.next_request() == p.GetVersion(0)
    reply = p.error_reply(p.Command.GET_USER_PUBKEYS, p.EINVAL)
    assert struct.unpack("=4I", reply) == (16, 0xE1, p.EINVAL, 0)


def test_unknown_commands_and_bad_lengths_close() -> None:
    for data in (encode_request(0x11, b""), U32.pack(2000) + U32.pack(0xE1)):
        conn = p.server_connection()
        conn.receive_data(data)
        with pytest.raises(p.ProtocolError):
            conn.next_request()
        with pytest.raises(p.ProtocolError):
            conn.receive_data(b"x")


def test_keys_reply_is_what_the_client_reads() -> None:
    keys = (b"ssh-ed25519 AAAA alice@test", b"\0\0\0\x0bssh-ed25519blob")
    reply = p.keys_reply(p.Command.GET_USER_PUBKEYS, "alice@ldap", keys)
    assert U32.unpack_from(reply, 0)[0] == len(reply)
    assert p.decode_keys(reply[16:]) == ("alice@ldap", list(keys))
    assert p.keys_reply(p.Command.GET_USER_PUBKEYS, "bob@ldap", ())[16:] == bytes(8)


def test_a_user_without_keys_is_stored_as_before() -> None:
    u = User("bob", 1, 2, "g", "/h", "/bin/sh", "uid=bob")
    assert len(msgpack.unpackb(rec.encode_user(u))) == 8
    assert rec.decode_user(rec.encode_user(u)) == u
    k = User("alice", 1, 2, "g", "/h", "/bin/sh", "uid=alice", (b"key2", b"key1"))
    assert rec.decode_user(rec.encode_user(k)) == k  # the server's order is kept


def test_a_damaged_keys_field_is_a_record_error() -> None:
    base = [rec.FORMAT, "a", 1, 2, "", "", "", ""]
    for bad in ([*base, "notalist"], [*base, ["str"]], [*base, [b"k"], [b"k"]]):
        with pytest.raises(rec.RecordError):
            rec.decode_user(msgpack.packb(bad))
