"""Unit tests and fuzzing of the sans-IO NSS protocol codec (reference §1.1-1.9)."""

from __future__ import annotations

import contextlib
import itertools
import struct
import sys
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cached.model import Group, User
from cached.nss.protocol import (
    EINVAL,
    HEADER_SIZE,
    MAX_NAME_BYTES,
    MAX_REQUEST_SIZE,
    NEED_DATA,
    SERVED_COMMANDS,
    BadRequest,
    ById,
    ByName,
    ClientConnection,
    Command,
    EndEnt,
    GetEnt,
    GetVersion,
    GroupEntry,
    NeedData,
    PasswdEntry,
    ProtocolError,
    Reply,
    Request,
    ServerConnection,
    SetEnt,
    command_name,
    decode_group,
    decode_initgr,
    decode_passwd,
    decode_passwd_entries,
    decode_version,
    empty_reply,
    encode_group,
    encode_group_record,
    encode_passwd_record,
    encode_request,
    error_reply,
    getent_body,
    group_reply,
    id_body,
    initgr_reply,
    members_blob,
    name_body,
    not_found_reply,
    passwd_reply,
    version_body,
    version_reply,
)

# Host-endian, as on the wire (§1.2); the reference's hex vectors are x86_64 (little).
LITTLE = sys.byteorder == "little"
little_only = pytest.mark.skipif(not LITTLE, reason="reference vectors are little-endian")


def u32(*values: int) -> bytes:
    return struct.pack(f"={len(values)}I", *values)


def parse_one(data: bytes) -> Request:
    conn = ServerConnection()
    conn.receive_data(data)
    req = conn.next_request()
    assert not isinstance(req, NeedData)
    assert conn.next_request() is NEED_DATA
    assert conn.buffered_bytes == 0
    return req


def parse_all(data: bytes, chunk: int | None = None) -> list[Request]:
    conn = ServerConnection()
    out: list[Request] = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step])
        while True:
            req = conn.next_request()
            if req is NEED_DATA:
                break
            assert not isinstance(req, NeedData)
            out.append(req)
    assert conn.buffered_bytes == 0
    return out


def closes(data: bytes) -> ProtocolError:
    conn = ServerConnection()
    conn.receive_data(data)
    with pytest.raises(ProtocolError) as info:
        conn.next_request()
    assert conn.dead
    assert conn.buffered_bytes == 0
    return info.value


# ------------------------------------------------------------ reference vectors


@little_only
def test_getpwnam_alice_vector() -> None:
    wire = encode_request(Command.GETPWNAM, name_body("alice"))
    assert len(wire) == 22
    assert wire[16:].hex() == "616c69636500"
    assert wire[:16].hex() == "16000000110000000000000000000000"
    assert parse_one(wire) == ByName(Command.GETPWNAM, "alice")


@little_only
def test_getpwuid_vector() -> None:
    wire = encode_request(Command.GETPWUID, id_body(10001))
    assert wire[16:].hex() == "11270000"
    assert len(wire) == 20
    assert parse_one(wire) == ById(Command.GETPWUID, 10001)


@little_only
def test_getpwent_vector() -> None:
    wire = encode_request(Command.GETPWENT, getent_body())
    assert wire[16:].hex() == "00010000"
    assert parse_one(wire) == GetEnt(Command.GETPWENT, 256)


@little_only
def test_version_reply_vector() -> None:
    reply = version_reply()
    assert reply.hex() == "1400000001000000000000000000000001000000"


def test_version_request_answered_with_1_whatever_version() -> None:
    # §1.3: SSSD answers 1 even to versions it does not know.
    req = parse_one(encode_request(Command.GET_VERSION, version_body(3)))
    assert req == GetVersion(3)
    assert req.cmd is Command.GET_VERSION
    assert decode_version(version_reply()[16:]) == 1


def test_not_found_reply_has_8_zero_bytes() -> None:
    for cmd in (
        Command.GETPWNAM,
        Command.GETPWUID,
        Command.GETGRNAM,
        Command.GETGRGID,
        Command.INITGR,
        Command.GETPWENT,
        Command.GETGRENT,
    ):
        reply = not_found_reply(cmd)
        assert reply == u32(24, cmd, 0, 0) + bytes(8)
    assert decode_passwd(not_found_reply(Command.GETPWNAM)[16:]) == []
    assert decode_group(not_found_reply(Command.GETGRGID)[16:]) == []
    assert decode_initgr(not_found_reply(Command.INITGR)[16:]) == []


def test_header_only_replies() -> None:
    assert empty_reply(Command.SETPWENT) == u32(16, 0x13, 0, 0)
    assert empty_reply(Command.ENDGRENT) == u32(16, 0x25, 0, 0)
    assert error_reply(Command.GETPWNAM, EINVAL) == u32(16, 0x11, 22, 0)
    assert EINVAL == 22


def test_replies_that_would_abort_the_client_are_refused() -> None:
    # §1.7: a header-only status-0 reply to a lookup aborts the caller.
    with pytest.raises(ValueError):
        empty_reply(Command.GETPWNAM)
    with pytest.raises(ValueError):
        error_reply(Command.GETPWNAM, 0)
    with pytest.raises(ValueError):
        not_found_reply(Command.SETPWENT)


def test_passwd_record_layout() -> None:
    rec = encode_passwd_record(10001, 20001, "alice", "*", "Alice A", "/home/alice", "/bin/sh")
    assert rec == u32(10001, 20001) + b"alice\0*\0Alice A\0/home/alice\0/bin/sh\0"
    empty = encode_passwd_record(1, 2, "", "", "", "", "")
    assert len(empty) == 13  # §1.6 minimum
    assert empty == u32(1, 2) + bytes(5)
    reply = passwd_reply(Command.GETPWNAM, [rec])
    assert reply == u32(16 + 8 + len(rec), 0x11, 0, 0, 1, 0) + rec


def test_group_record_layout() -> None:
    rec = encode_group(20001, "staff", "*", ["alice", "bob"])
    assert rec == u32(20001, 2) + b"staff\0*\0alice\0bob\0"
    smallest = encode_group(7, "g", "", [])
    assert len(smallest) == 11  # §1.6 minimum
    assert smallest == u32(7, 0) + b"g\0\0"
    # empty name + empty passwd + no members would be 10 bytes, under the client's 11
    with pytest.raises(ValueError):
        encode_group(7, "", "", [])
    assert len(encode_group(7, "", "*", [])) == 11
    reply = group_reply(Command.GETGRGID, [rec])
    assert reply == u32(24 + len(rec), 0x22, 0, 0, 1, 0) + rec


def test_initgr_reply_layout() -> None:
    reply = initgr_reply([20001, 20002, 30003])
    assert reply == u32(16 + 8 + 12, 0x26, 0, 0, 3, 0, 20001, 20002, 30003)
    # packed forms give the same bytes; no spare trailing zero is written
    assert initgr_reply(u32(20001, 20002, 30003)) == reply
    assert initgr_reply(array("I", [20001, 20002, 30003])) == reply
    assert initgr_reply(memoryview(u32(20001, 20002, 30003))) == reply
    assert initgr_reply(bytearray(u32(20001, 20002, 30003))) == reply
    assert initgr_reply([]) == not_found_reply(Command.INITGR)


def test_initgr_reply_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        initgr_reply([-1])
    with pytest.raises(ValueError):
        initgr_reply([2**32])
    with pytest.raises(ValueError):
        initgr_reply(b"\1\2\3")
    with pytest.raises(ValueError):
        initgr_reply(array("i", [1]))  # signed
    with pytest.raises(ValueError):
        initgr_reply(array("Q", [1]))


def test_decode_initgr_ignores_sssd_spare_zero() -> None:
    # SSSD 2.8.2 leaves a spare zero u32 after the gids (§1.6)
    assert decode_initgr(u32(2, 0, 5, 6, 0)) == [5, 6]


# --------------------------------------------------------------- encoder errors


def test_encoders_reject_nul() -> None:
    with pytest.raises(ValueError, match="gecos"):
        encode_passwd_record(1, 1, "a", "*", "x\0y", "/", "/bin/sh")
    with pytest.raises(ValueError, match="name"):
        encode_group(1, "a\0b", "*", [])
    with pytest.raises(ValueError):
        members_blob(["a", "b\0c"])
    with pytest.raises(ValueError):
        members_blob(["a", ""])
    with pytest.raises(ValueError):
        name_body("a\0b")


def test_encoders_reject_out_of_range_ids() -> None:
    with pytest.raises(ValueError):
        encode_passwd_record(2**32, 1, "a", "*", "", "/", "/bin/sh")
    with pytest.raises(ValueError):
        encode_passwd_record(1, -1, "a", "*", "", "/", "/bin/sh")
    with pytest.raises(ValueError):
        encode_group(2**32, "g", "*", [])
    with pytest.raises(ValueError):
        id_body(-1)


def test_encode_group_record_checks_blob() -> None:
    good = members_blob(["a", "b"])
    assert good == b"a\0b\0"
    assert encode_group_record(1, "g", "*", 2, good) == encode_group(1, "g", "*", ["a", "b"])
    for count, blob in [
        (1, good),
        (3, good),
        (2, b"a\0b"),
        (2, b"\0a\0"),
        (2, b"a\0\0"),
        (0, b"a"),
        (1, b""),
    ]:
        with pytest.raises(ValueError):
            encode_group_record(1, "g", "*", count, blob)


def test_reply_builders_check_command_and_count() -> None:
    rec = encode_passwd_record(1, 1, "a", "*", "", "/", "/bin/sh")
    with pytest.raises(ValueError):
        passwd_reply(Command.GETPWNAM, [rec, rec])  # §1.6: by-name needs exactly one
    with pytest.raises(ValueError):
        passwd_reply(Command.GETGRNAM, [rec])
    with pytest.raises(ValueError):
        group_reply(Command.GETPWNAM, [])
    assert passwd_reply(Command.GETPWUID, []) == not_found_reply(Command.GETPWUID)
    assert group_reply(Command.GETGRENT, []) == not_found_reply(Command.GETGRENT)


def test_name_body_client_limits() -> None:
    assert name_body("x" * MAX_NAME_BYTES) == b"x" * MAX_NAME_BYTES + b"\0"
    with pytest.raises(ValueError):
        name_body("x" * (MAX_NAME_BYTES + 1))
    with pytest.raises(ValueError):
        name_body("")


def test_command_name() -> None:
    assert command_name(0x11) == "GETPWNAM"
    assert command_name(0x9999) == "0x9999"


# -------------------------------------------------------------- server parsing


def test_every_served_request_parses() -> None:
    wire = b"".join(
        [
            encode_request(Command.GET_VERSION, version_body()),
            encode_request(Command.GETPWNAM, name_body("alice")),
            encode_request(Command.GETPWUID, id_body(10001)),
            encode_request(Command.SETPWENT),
            encode_request(Command.GETPWENT, getent_body()),
            encode_request(Command.ENDPWENT),
            encode_request(Command.GETGRNAM, name_body("staff")),
            encode_request(Command.GETGRGID, id_body(0xFFFFFFFF)),
            encode_request(Command.SETGRENT),
            encode_request(Command.GETGRENT, getent_body(0)),
            encode_request(Command.ENDGRENT),
            encode_request(Command.INITGR, name_body("ünïcødé")),
            encode_request(Command.SETNETGRENT, name_body("web")),
        ]
    )
    expected: list[Request] = [
        GetVersion(1),
        ByName(Command.GETPWNAM, "alice"),
        ById(Command.GETPWUID, 10001),
        SetEnt(Command.SETPWENT),
        GetEnt(Command.GETPWENT, 256),
        EndEnt(Command.ENDPWENT),
        ByName(Command.GETGRNAM, "staff"),
        ById(Command.GETGRGID, 0xFFFFFFFF),
        SetEnt(Command.SETGRENT),
        GetEnt(Command.GETGRENT, 0),
        EndEnt(Command.ENDGRENT),
        ByName(Command.INITGR, "ünïcødé"),
        ByName(Command.SETNETGRENT, "web"),
    ]
    assert {r.cmd for r in expected} == SERVED_COMMANDS
    # all in one buffer, byte by byte, and in awkward chunk sizes
    for chunk in (None, 1, 2, 3, 7, 16, 17, 50):
        assert parse_all(wire, chunk) == expected


def test_byte_by_byte_returns_need_data_until_complete() -> None:
    wire = encode_request(Command.GETPWNAM, name_body("alice"))
    conn = ServerConnection()
    for b in wire[:-1]:
        conn.receive_data(bytes([b]))
        assert conn.next_request() is NEED_DATA
    conn.receive_data(wire[-1:])
    assert conn.next_request() == ByName(Command.GETPWNAM, "alice")
    assert conn.next_request() is NEED_DATA


def test_status_and_reserved_fields_are_ignored() -> None:
    wire = struct.pack("=4I", 20, Command.GETPWUID, 7, 9) + id_body(5)
    assert parse_one(wire) == ById(Command.GETPWUID, 5)


# close cases: ProtocolError, connection dead


def test_length_below_header_closes() -> None:
    for length in (0, 1, 15):
        err = closes(u32(length))  # detected from the length field alone
        assert "shorter" in str(err)


def test_oversize_request_closes() -> None:
    err = closes(u32(MAX_REQUEST_SIZE + 1))
    assert "1024" in str(err)
    # a full 1025-byte by-name request, too
    body = b"x" * (MAX_REQUEST_SIZE + 1 - HEADER_SIZE - 1) + b"\0"
    wire = encode_request(Command.GETPWNAM, body)
    assert len(wire) == 1025
    closes(wire)
    closes(u32(0xFFFFFFFF))


def test_exactly_1024_is_framed_and_gets_einval() -> None:
    body = b"x" * (MAX_REQUEST_SIZE - HEADER_SIZE - 1) + b"\0"
    wire = encode_request(Command.GETPWNAM, body)
    assert len(wire) == MAX_REQUEST_SIZE
    req = parse_one(wire)
    assert isinstance(req, BadRequest) and req.errno == EINVAL


@pytest.mark.parametrize(
    "code",
    [
        0,
        0x02,
        0x10,
        0x16,
        0x27,
        0xFFFFFFFF,
        # known to SSSD but not served by cached (§1.4)
        Command.GETPWNAM_EX,
        Command.INITGR_EX,
        Command.GETSIDBYNAME,
        Command.GET_SUBID_RANGES,
        # not in SSSD 2.8.2's table either: its client answers all at SETNETGRENT
        Command.GETNETGRENT,
        Command.ENDNETGRENT,
        0x51,
    ],
)
def test_unserved_command_closes(code: int) -> None:
    err = closes(encode_request(code, name_body("alice")))
    assert err.cmd == code
    # detected from the first 8 bytes, without waiting for the body
    conn = ServerConnection()
    conn.receive_data(u32(100, code))
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_dead_connection_stays_dead() -> None:
    conn = ServerConnection()
    conn.receive_data(u32(5000, 0x11))
    with pytest.raises(ProtocolError):
        conn.next_request()
    assert conn.dead
    with pytest.raises(ProtocolError):
        conn.next_request()
    with pytest.raises(ProtocolError):
        conn.receive_data(encode_request(Command.GETPWNAM, name_body("alice")))
    assert conn.buffered_bytes == 0


def test_valid_request_before_a_bad_frame_is_still_returned() -> None:
    conn = ServerConnection()
    conn.receive_data(encode_request(Command.GETPWUID, id_body(1)) + u32(3))
    assert conn.next_request() == ById(Command.GETPWUID, 1)
    with pytest.raises(ProtocolError):
        conn.next_request()


# EINVAL cases: BadRequest, connection stays usable

BAD_BODIES: list[tuple[Command, bytes, str]] = [
    (Command.GETPWNAM, b"", "missing NUL (empty body)"),
    (Command.GETPWNAM, b"alice", "missing NUL"),
    (Command.GETGRNAM, b"\0", "empty name"),
    (Command.INITGR, b"ali\0ce\0", "embedded NUL"),
    (Command.GETPWNAM, b"\0\0", "embedded NUL / empty"),
    (Command.GETPWNAM, b"x" * (MAX_NAME_BYTES + 1) + b"\0", "257-byte name"),
    (Command.GETPWNAM, b"\xff\xfe\0", "bad UTF-8"),
    (Command.GETGRNAM, b"caf\xc3\0", "truncated UTF-8"),
    (Command.GETPWNAM, b"\xed\xa0\x80\0", "UTF-8 surrogate"),
    (Command.GETPWNAM, b"\xc0\xafetc\0", "overlong UTF-8"),
    (Command.GETPWUID, b"", "id body 0 bytes"),
    (Command.GETPWUID, b"\1\2\3", "id body 3 bytes"),
    (Command.GETGRGID, b"\1\2\3\4\5", "id body 5 bytes"),
    (Command.GETGRGID, b"\1\2\3\4\0\0\0\0", "id body 8 bytes"),
    (Command.GETPWENT, b"", "getent body 0 bytes"),
    (Command.GETGRENT, b"\0\1\0\0\0", "getent body 5 bytes"),
    (Command.SETPWENT, b"\0", "setent with body"),
    (Command.ENDGRENT, b"\0\0\0\0", "endent with body"),
    (Command.GET_VERSION, b"", "version body 0 bytes"),
    (Command.GET_VERSION, b"\1\0\0\0\0", "version body 5 bytes"),
]


@pytest.mark.parametrize(("cmd", "body", "what"), BAD_BODIES, ids=[b[2] for b in BAD_BODIES])
def test_bad_body_is_einval_and_connection_survives(cmd: Command, body: bytes, what: str) -> None:
    good = encode_request(Command.GETPWUID, id_body(42))
    for chunk in (None, 1):
        reqs = parse_all(good + encode_request(cmd, body) + good, chunk)
        assert len(reqs) == 3
        bad = reqs[1]
        assert isinstance(bad, BadRequest), what
        assert bad.cmd is cmd
        assert bad.errno == EINVAL
        assert reqs[0] == reqs[2] == ById(Command.GETPWUID, 42)
        assert error_reply(bad.cmd, bad.errno) == u32(16, cmd, 22, 0)


def test_name_of_256_bytes_is_accepted_257_is_not() -> None:
    name = "é" * 128  # 256 UTF-8 bytes
    req = parse_one(encode_request(Command.GETPWNAM, name.encode() + b"\0"))
    assert req == ByName(Command.GETPWNAM, name)
    req = parse_one(encode_request(Command.GETPWNAM, (name + "x").encode() + b"\0"))
    assert isinstance(req, BadRequest) and req.errno == EINVAL


# ------------------------------------------------------------------ client side


def roundtrip(cmd: Command, body: bytes, reply: bytes, chunk: int | None = None) -> Reply:
    """Client encodes a request, the server parses it, the client parses the reply."""
    client = ClientConnection()
    req = parse_one(client.send_request(cmd, body))
    assert req.cmd is cmd
    step = chunk or len(reply)
    for i in range(0, len(reply), step):
        assert client.next_reply() is NEED_DATA
        client.receive_data(reply[i : i + step])
    got = client.next_reply()
    assert isinstance(got, Reply)
    assert client.pending is None
    assert client.next_reply() is NEED_DATA
    return got


def test_passwd_roundtrip() -> None:
    rec = encode_passwd_record(
        10001, 20001, "alice@example.com", "*", "Alice Ä", "/home/a", "/bin/bash"
    )
    got = roundtrip(
        Command.GETPWNAM, name_body("alice"), passwd_reply(Command.GETPWNAM, [rec]), chunk=1
    )
    assert got.status == 0 and got.cmd == Command.GETPWNAM
    assert decode_passwd(got.body) == [
        User(
            name="alice@example.com",
            uid=10001,
            gid=20001,
            gecos="Alice Ä",
            home="/home/a",
            shell="/bin/bash",
        )
    ]
    assert decode_passwd_entries(got.body)[0].passwd == "*"


def test_passwd_enumeration_roundtrip() -> None:
    entries = [
        PasswdEntry(f"u{i}", "x", 1000 + i, 100, "", f"/home/u{i}", "/bin/sh") for i in range(300)
    ]
    recs = [
        encode_passwd_record(e.uid, e.gid, e.name, e.passwd, e.gecos, e.home, e.shell)
        for e in entries
    ]
    got = roundtrip(Command.GETPWENT, getent_body(), passwd_reply(Command.GETPWENT, recs))
    assert decode_passwd_entries(got.body) == entries


def test_group_roundtrip_5000_members() -> None:
    members = [f"user{i:05d}" for i in range(5000)]
    rec = encode_group(30000, "biggroup", "*", members)
    got = roundtrip(
        Command.GETGRNAM, name_body("biggroup"), group_reply(Command.GETGRNAM, [rec]), chunk=4096
    )
    [entry] = decode_group(got.body)
    assert entry == GroupEntry("biggroup", "*", 30000, tuple(members))
    assert entry.to_group() == Group(name="biggroup", gid=30000, members=tuple(members))


def test_group_roundtrip_0_members_and_enumeration() -> None:
    recs = [encode_group(1, "empty", "*", []), encode_group(2, "two", "x", ["a", "b"])]
    got = roundtrip(Command.GETGRENT, getent_body(), group_reply(Command.GETGRENT, recs))
    assert decode_group(got.body) == [
        GroupEntry("empty", "*", 1, ()),
        GroupEntry("two", "x", 2, ("a", "b")),
    ]


def test_initgr_roundtrip_2086_gids() -> None:
    gids = list(range(100000, 100000 + 2086))
    for form in (gids, array("I", gids), array("I", gids).tobytes()):
        got = roundtrip(Command.INITGR, name_body("bigroupuser"), initgr_reply(form))
        assert decode_initgr(got.body) == gids
        assert len(got.body) == 8 + 4 * 2086


def test_version_and_header_only_roundtrips() -> None:
    got = roundtrip(Command.GET_VERSION, version_body(), version_reply())
    assert decode_version(got.body) == 1
    got = roundtrip(Command.SETPWENT, b"", empty_reply(Command.SETPWENT))
    assert got == Reply(Command.SETPWENT, 0, b"")
    got = roundtrip(Command.GETPWNAM, b"", error_reply(Command.GETPWNAM, EINVAL))
    assert got == Reply(Command.GETPWNAM, EINVAL, b"")


def test_client_rejects_mismatched_unsolicited_and_short_replies() -> None:
    client = ClientConnection()
    client.receive_data(empty_reply(Command.SETPWENT))
    with pytest.raises(ProtocolError, match="unsolicited"):
        client.next_reply()
    assert client.dead

    client = ClientConnection()
    client.send_request(Command.GETPWNAM, name_body("a"))
    client.receive_data(not_found_reply(Command.GETGRNAM))  # §1.7: cmd mismatch → EBADMSG
    with pytest.raises(ProtocolError):
        client.next_reply()

    client = ClientConnection()
    client.send_request(Command.GETPWNAM, name_body("a"))
    client.receive_data(u32(8))
    with pytest.raises(ProtocolError):
        client.next_reply()

    client = ClientConnection(max_reply_size=100)
    client.send_request(Command.GETPWNAM, name_body("a"))
    client.receive_data(u32(101))
    with pytest.raises(ProtocolError):
        client.next_reply()
    with pytest.raises(ProtocolError):
        client.send_request(Command.GETPWNAM, name_body("a"))


def test_client_refuses_to_pipeline() -> None:
    client = ClientConnection()
    client.send_request(Command.GETPWNAM, name_body("a"))
    with pytest.raises(RuntimeError):
        client.send_request(Command.GETPWNAM, name_body("b"))


@pytest.mark.parametrize(
    "body",
    [
        b"",  # the zero-length body that aborts the real client (§1.7)
        bytes(7),
        u32(1, 0),  # one record promised, none present
        u32(1, 0, 1, 2) + b"a\0*\0\0/\0",  # truncated mid-record
        u32(1, 0, 1, 2) + b"a\0*\0\0/\0/bin/sh",  # last string unterminated
        u32(1, 0, 1, 2) + b"a\0*\0\0/\0/bin/sh\0extra",  # trailing bytes
        u32(1, 0, 1, 2) + b"\xff\0*\0\0/\0/bin/sh\0",  # bad UTF-8
        u32(0xFFFFFFFF, 0) + bytes(64),  # absurd count
    ],
)
def test_decode_passwd_rejects_malformed(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_passwd(body)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        u32(1, 0, 1, 0) + b"\0\0",  # 10-byte record: under the client's 11 (§1.6)
        u32(1, 0, 1, 3) + b"g\0*\0a\0b\0",  # 3 members promised, 2 present
        u32(1, 0, 1, 0xFFFFFFFF) + b"g\0*\0a\0",
        u32(1, 0, 1, 1) + b"g\0*\0a\0zz",
        u32(2, 0, 1, 0) + b"g\0*\0",
    ],
)
def test_decode_group_rejects_malformed(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_group(body)


def test_decode_initgr_and_version_reject_malformed() -> None:
    for body in (b"", bytes(4), u32(2, 0, 1), u32(0xFFFFFFFF, 0)):
        with pytest.raises(ProtocolError):
            decode_initgr(body)
    for body in (b"", bytes(3), bytes(8)):
        with pytest.raises(ProtocolError):
            decode_version(body)


# ----------------------------------------------------------------------- fuzzing


def _feed(chunks: list[bytes]) -> None:
    """Feed chunks as a server would, draining after each; check the codec's contract."""
    conn = ServerConnection()
    for chunk in chunks:
        conn.receive_data(chunk)
        assert conn.buffered_bytes <= MAX_REQUEST_SIZE + len(chunk)
        while True:
            try:
                req = conn.next_request()
            except ProtocolError:
                assert conn.dead
                assert conn.buffered_bytes == 0
                return
            if req is NEED_DATA:
                assert conn.buffered_bytes < MAX_REQUEST_SIZE
                break
            assert isinstance(
                req, GetVersion | ByName | ById | SetEnt | GetEnt | EndEnt | BadRequest
            )
            assert req.cmd in SERVED_COMMANDS
            if isinstance(req, BadRequest):
                assert req.errno == EINVAL
            if isinstance(req, ByName):
                raw = req.name.encode()
                assert 0 < len(raw) <= MAX_NAME_BYTES and b"\0" not in raw


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0), max_size=20))
def test_fuzz_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    _feed(_split(data, cuts))


_frame = st.builds(
    lambda cmd, body: encode_request(cmd, body),
    st.one_of(st.sampled_from(sorted(SERVED_COMMANDS)), st.integers(0, 0x200)),
    st.one_of(
        st.binary(max_size=12),
        st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass") + b"\0"),
        st.binary(min_size=250, max_size=270),
    ),
)


@FUZZ
@given(st.lists(_frame, max_size=8), st.lists(st.integers(min_value=0), max_size=20))
def test_fuzz_framed_requests(frames: list[bytes], cuts: list[int]) -> None:
    # Mostly well-framed input so the body validation is reached, not just the framing.
    data = b"".join(frames)
    _feed(_split(data, cuts))
    # A valid prefix is parsed identically whatever the fragmentation.
    whole = ServerConnection()
    whole.receive_data(data)
    pieces = ServerConnection()
    seen_whole: list[object] = []
    seen_pieces: list[object] = []
    runs = ((whole, seen_whole, [b""]), (pieces, seen_pieces, _split(data, cuts)))
    for conn, seen, chunks in runs:
        for chunk in chunks:
            conn.receive_data(chunk)
            try:
                while (req := conn.next_request()) is not NEED_DATA:
                    seen.append(req)
            except ProtocolError:
                seen.append("closed")
                break
    assert seen_whole == seen_pieces


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_decoders_only_raise_protocol_error(body: bytes) -> None:
    for decode in (decode_passwd, decode_group, decode_initgr, decode_version):
        with contextlib.suppress(ProtocolError):
            decode(body)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**32 - 1),
            st.text(min_size=1, max_size=20).filter(lambda s: "\0" not in s),
            st.lists(st.text(min_size=1, max_size=12).filter(lambda s: "\0" not in s), max_size=20),
        ),
        max_size=10,
    )
)
def test_fuzz_group_roundtrip(groups: list[tuple[int, str, list[str]]]) -> None:
    try:
        recs = [encode_group(gid, name, "*", members) for gid, name, members in groups]
    except UnicodeEncodeError:  # lone surrogates are not encodable UTF-8
        return
    reply = group_reply(Command.GETGRENT, recs)
    assert decode_group(reply[16:]) == [
        GroupEntry(name, "*", gid, tuple(members)) for gid, name, members in groups
    ]


def test_a_known_request_is_taken_by_its_bytes_alone() -> None:
    """take_known: exactly one whole request whose bytes are known is taken with its
    value; a part of one, one followed by more bytes, or unknown bytes leave the buffer
    to next_request, which parses the same request from them."""
    from cached.nss.protocol import lookup_frame

    gid = ById(Command.GETGRGID, 20001)
    name = ByName(Command.GETGRNAM, "grp")
    assert lookup_frame(gid) == encode_request(Command.GETGRGID, id_body(20001))
    assert lookup_frame(name) == encode_request(Command.GETGRNAM, name_body("grp"))
    known = {lookup_frame(gid): "kept gid", lookup_frame(name): "kept name"}
    conn = ServerConnection()
    frame = lookup_frame(gid)
    conn.receive_data(frame[:HEADER_SIZE])  # the header alone, as libnss_sss sends it
    assert conn.take_known(known) is None and conn.buffered_bytes == HEADER_SIZE
    conn.receive_data(frame[HEADER_SIZE:])
    assert conn.take_known(known) == "kept gid" and conn.buffered_bytes == 0
    assert conn.next_request() is NEED_DATA
    conn.receive_data(lookup_frame(name) + frame)  # two at once: parsed one by one
    assert conn.take_known(known) is None
    assert conn.next_request() == name
    assert conn.take_known(known) == "kept gid"
    other = encode_request(Command.GETGRGID, id_body(20002))
    conn.receive_data(other)
    assert conn.take_known(known) is None
    assert conn.next_request() == ById(Command.GETGRGID, 20002)
