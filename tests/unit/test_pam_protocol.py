"""Unit tests and fuzzing of the sans-IO PAM protocol codec (PAM reference §1.1-1.7)."""

from __future__ import annotations

import logging
import pickle
import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cached.pam.protocol import (
    MAX_REQUEST_SIZE,
    NEED_DATA,
    PROTOCOL_VERSION,
    REQUEST_END,
    REQUEST_START,
    SERVED_COMMANDS,
    AuthTokType,
    ClientConnection,
    ClientFlags,
    Command,
    GetVersion,
    ItemType,
    MalformedRequest,
    NeedData,
    PamRequest,
    PamStatus,
    ProtocolError,
    ReplyItem,
    Request,
    ResponseType,
    Secret,
    ServerConnection,
    UserInfoType,
    account_expired_item,
    chpass_error_item,
    decode_reply,
    decode_version,
    domain_name_item,
    encode_request,
    encode_request_body,
    env_item,
    expire_warn_item,
    grace_login_item,
    offline_auth_delayed_item,
    offline_auth_item,
    offline_chpass_item,
    otp_chpass_item,
    pam_reply,
    parse_request,
    pin_locked_item,
    system_error_reply,
    system_info_item,
    text_msg_item,
    version_body,
    version_reply,
)

LITTLE = sys.byteorder == "little"
little_only = pytest.mark.skipif(not LITTLE, reason="reference vectors are little-endian")

PASSWORD = b"s3cr3t-Pa55"


def u32(*values: int) -> bytes:
    return struct.pack(f"={len(values)}I", *values)


def item(kind: int, data: bytes) -> bytes:
    return u32(kind, len(data)) + data


def body_of(*items: bytes) -> bytes:
    return u32(REQUEST_START) + b"".join(items) + u32(REQUEST_END)


PID = item(ItemType.CLI_PID, u32(4242))


def parse_one(cmd: int, body: bytes) -> Request:
    conn = ServerConnection()
    conn.receive_data(encode_request(cmd, body))
    req = conn.next_request()
    assert not isinstance(req, NeedData)
    assert conn.next_request() is NEED_DATA
    assert conn.buffered_bytes == 0
    return req


def parse_pam(body: bytes, cmd: int = Command.AUTHENTICATE) -> PamRequest:
    req = parse_one(cmd, body)
    assert isinstance(req, PamRequest)
    return req


# ------------------------------------------------------------------ handshake


def test_version_handshake() -> None:
    req = parse_one(Command.GET_VERSION, version_body())
    assert req == GetVersion(3)
    reply = version_reply()
    client = ClientConnection()
    client.send_request(Command.GET_VERSION, version_body())
    client.receive_data(reply)
    got = client.next_reply()
    assert not isinstance(got, NeedData)
    assert (got.cmd, got.status, decode_version(got.body)) == (Command.GET_VERSION, 0, 3)


@little_only
def test_version_reply_bytes_are_what_pam_sss_checks() -> None:
    # §1.2: the captured handshake reply body is 03000000.
    assert version_reply() == bytes.fromhex("14000000 01000000 00000000 00000000 03000000")


@pytest.mark.parametrize("body", [b"", u32(1), u32(2), u32(99), b"\x03\x00\x00"])
def test_any_version_request_is_answered_with_3(body: bytes) -> None:
    req = parse_one(Command.GET_VERSION, body)
    assert isinstance(req, GetVersion)
    assert req.version == (struct.unpack("=I", body)[0] if len(body) == 4 else None)
    assert version_reply()[-4:] == u32(PROTOCOL_VERSION)


# ------------------------------------------------------------------ request items


@little_only
def test_pamtester_authenticate_is_78_bytes() -> None:
    # §1.4 [verified]: USER(6), SERVICE(6), CLI_PID(4), AUTHTOK(10), FLAGS(4).
    body = encode_request_body(
        user="alice", service="login", cli_pid=7, authtok=(AuthTokType.PASSWORD, b"secret")
    )
    assert len(body) == 78
    req = parse_pam(body)
    assert (req.user, req.service, req.cli_pid) == ("alice", "login", 7)
    assert req.authtok is not None and req.authtok.type is AuthTokType.PASSWORD
    assert req.authtok.secret == b"secret"


def test_every_item_type() -> None:
    body = body_of(
        item(ItemType.USER, b"alice\0"),
        item(ItemType.SERVICE, b"sshd\0"),
        item(ItemType.TTY, b"/dev/pts/3\0"),
        item(ItemType.RUSER, b"bob\0"),
        item(ItemType.RHOST, b"host.example\0"),
        item(ItemType.REQUESTED_DOMAINS, b"a, b,,c\0"),
        item(ItemType.CLI_PID, u32(4242)),
        item(ItemType.CHILD_PID, u32(77)),
        item(ItemType.AUTHTOK, u32(AuthTokType.PASSWORD) + b"old"),
        item(ItemType.NEWAUTHTOK, u32(AuthTokType.PASSWORD) + b"new"),
        item(ItemType.CLI_LOCALE, b"C\0"),
        item(13, b"{}"),
        item(ItemType.FLAGS, u32(ClientFlags.USE_FIRST_PASS | ClientFlags.PROMPT_ALWAYS)),
    )
    req = parse_pam(body, Command.CHAUTHTOK)
    assert req.cmd is Command.CHAUTHTOK
    assert (req.user, req.service, req.tty, req.ruser, req.rhost) == (
        "alice", "sshd", "/dev/pts/3", "bob", "host.example",
    )  # fmt: skip
    assert req.requested_domains == ("a", "b", "c")
    assert (req.cli_pid, req.child_pid) == (4242, 77)
    assert req.authtok is not None and req.authtok.secret == b"old"
    assert req.new_authtok is not None and req.new_authtok.secret == b"new"
    assert req.flags == ClientFlags.USE_FIRST_PASS | ClientFlags.PROMPT_ALWAYS
    assert req.unknown_items == (ItemType.CLI_LOCALE, 13)


def test_encode_request_body_round_trips_every_field() -> None:
    body = encode_request_body(
        user="ünï", service="su", tty="tty1", ruser="root", rhost="h", requested_domains="d",
        cli_pid=9, child_pid=10, authtok=(AuthTokType.SC_PIN, b"1234"),
        new_authtok=(AuthTokType.PASSWORD, b"n"), flags=3, extra=[(14, b"x")],
    )  # fmt: skip
    req = parse_pam(body, Command.PREAUTH)
    assert (req.user, req.service, req.tty, req.ruser, req.rhost) == (
        "ünï",
        "su",
        "tty1",
        "root",
        "h",
    )
    assert req.requested_domains == ("d",)
    assert (req.cli_pid, req.child_pid, int(req.flags), req.unknown_items) == (9, 10, 3, (14,))
    assert req.authtok is not None and req.authtok.type is AuthTokType.SC_PIN
    assert req.authtok.secret == b"1234"


def test_absent_items_are_empty() -> None:
    req = parse_pam(body_of(PID))
    assert (req.user, req.service, req.tty, req.ruser, req.rhost) == ("",) * 5
    assert req.authtok is None and req.new_authtok is None and req.child_pid is None
    assert req.requested_domains == () and req.flags == ClientFlags(0)


@pytest.mark.parametrize("kind", list(AuthTokType))
def test_every_authtok_type(kind: AuthTokType) -> None:
    data = b"" if kind is AuthTokType.EMPTY else b"tok"
    req = parse_pam(body_of(PID, item(ItemType.AUTHTOK, u32(kind) + data)))
    assert req.authtok is not None
    assert req.authtok.type is kind
    assert req.authtok.secret == data


def test_zero_length_password_is_empty() -> None:
    # §1.4: use_first_pass with nothing stacked sends PASSWORD of length 0; SSSD: EMPTY.
    req = parse_pam(body_of(PID, item(ItemType.AUTHTOK, u32(AuthTokType.PASSWORD))))
    assert req.authtok is not None
    assert req.authtok.type is AuthTokType.EMPTY
    assert not req.authtok.is_password and not req.authtok.secret


def test_unknown_item_types_are_skipped() -> None:
    req = parse_pam(body_of(item(15, b"\xff" * 40), PID, item(0x4950414D, b"")))
    assert req.unknown_items == (15, 0x4950414D)


# ------------------------------------------------------------------ malformed bodies

MALFORMED = {
    "empty": b"",
    "short": u32(REQUEST_START, REQUEST_END) + b"\0\0",
    "no start marker": u32(0) + PID + u32(REQUEST_END),
    "no end marker": u32(REQUEST_START) + PID + u32(0),
    "no cli pid": body_of(item(ItemType.USER, b"alice\0"), item(ItemType.FLAGS, u32(0))),
    "cli pid 0": body_of(item(ItemType.CLI_PID, u32(0)), item(ItemType.FLAGS, u32(0))),
    "item runs past the end": b"".join(
        (u32(REQUEST_START), PID, u32(ItemType.USER, 50), b"al\0", u32(REQUEST_END))
    ),
    "item header cut": u32(REQUEST_START) + PID + u32(ItemType.USER) + u32(REQUEST_END),
    "string without NUL": body_of(PID, item(ItemType.USER, b"alice")),
    "empty string item": body_of(PID, item(ItemType.USER, b"")),
    "NUL inside a string": body_of(PID, item(ItemType.USER, b"ali\0ce\0")),
    "string not UTF-8": body_of(PID, item(ItemType.SERVICE, b"\xff\xfe\0")),
    "u32 of 3 bytes": body_of(item(ItemType.CLI_PID, b"\1\0\0")),
    "u32 of 8 bytes": body_of(PID, item(ItemType.FLAGS, u32(0, 0))),
    "authtok under 4 bytes": body_of(PID, item(ItemType.AUTHTOK, b"\1\0")),
    "authtok of unknown type": body_of(PID, item(ItemType.AUTHTOK, u32(99) + b"x")),
    "EMPTY authtok with data": body_of(PID, item(ItemType.AUTHTOK, u32(0) + b"x")),
    "NUL inside a password": body_of(PID, item(ItemType.AUTHTOK, u32(1) + b"pa\0ss")),
    "user twice": body_of(PID, item(ItemType.USER, b"a\0"), item(ItemType.USER, b"b\0")),
    "authtok twice": body_of(
        PID, item(ItemType.AUTHTOK, u32(1) + b"a"), item(ItemType.AUTHTOK, u32(1) + b"b")
    ),
    "bytes after the end marker": body_of(PID) + b"\0\0\0\0",
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_bodies_raise_and_the_connection_goes_on(body: bytes) -> None:
    conn = ServerConnection()
    conn.receive_data(encode_request(Command.AUTHENTICATE, body))
    with pytest.raises(MalformedRequest) as info:
        conn.next_request()
    assert info.value.cmd == Command.AUTHENTICATE
    assert not conn.dead and conn.buffered_bytes == 0
    conn.receive_data(encode_request(Command.GET_VERSION, version_body()))
    assert conn.next_request() == GetVersion(3)
    reply = decode_reply(system_error_reply(Command.AUTHENTICATE)[16:])
    assert (reply.status, reply.items) == (PamStatus.SYSTEM_ERR, ())


def test_malformed_is_a_protocol_error() -> None:
    assert issubclass(MalformedRequest, ProtocolError)


@pytest.mark.parametrize("length", [0, 15, MAX_REQUEST_SIZE + 1, 0xFFFFFFFF])
def test_bad_length_closes(length: int) -> None:
    conn = ServerConnection()
    conn.receive_data(u32(length))
    with pytest.raises(ProtocolError) as info:
        conn.next_request()
    assert not isinstance(info.value, MalformedRequest)
    assert conn.dead and conn.buffered_bytes == 0
    with pytest.raises(ProtocolError):
        conn.receive_data(b"x")


def test_oversize_request_closes_before_it_is_buffered() -> None:
    body = encode_request_body(user="u" * 1100, cli_pid=1)
    conn = ServerConnection()
    conn.receive_data(encode_request(Command.AUTHENTICATE, body)[:8])
    with pytest.raises(ProtocolError):
        conn.next_request()
    assert conn.dead


def test_a_request_of_exactly_the_cap_is_served() -> None:
    pad = MAX_REQUEST_SIZE - 16 - len(body_of(PID)) - 8
    req = parse_pam(body_of(PID, item(20, b"x" * pad)))
    assert req.unknown_items == (20,)


@pytest.mark.parametrize(
    "cmd", [Command.RENEW, Command.GSSAPI_INIT, Command.GSSAPI_SEC_CTX, 0x11, 0xFFFF]
)
def test_commands_not_served_close(cmd: int) -> None:
    conn = ServerConnection()
    conn.receive_data(encode_request(cmd, body_of(PID))[:8])
    with pytest.raises(ProtocolError) as info:
        conn.next_request()
    assert info.value.cmd == cmd and conn.dead
    with pytest.raises(ProtocolError):
        parse_request(cmd, body_of(PID))


def test_every_served_pam_command_parses() -> None:
    for cmd in SERVED_COMMANDS - {Command.GET_VERSION}:
        assert parse_pam(body_of(PID), cmd).cmd is cmd


def test_fragments_and_back_to_back_requests() -> None:
    wire = encode_request(Command.GET_VERSION, version_body()) + encode_request(
        Command.ACCT_MGMT, encode_request_body(user="alice", service="sshd", cli_pid=5)
    )
    conn = ServerConnection()
    got: list[Request] = []
    for i in range(len(wire)):
        conn.receive_data(wire[i : i + 1])
        while not isinstance(req := conn.next_request(), NeedData):
            got.append(req)
    assert got[0] == GetVersion(3)
    assert isinstance(got[1], PamRequest) and got[1].user == "alice"


# ------------------------------------------------------------------ secrets


def test_password_never_in_repr_str_or_log(caplog: pytest.LogCaptureFixture) -> None:
    req = parse_pam(
        encode_request_body(
            user="alice", cli_pid=3,
            authtok=(AuthTokType.PASSWORD, PASSWORD), new_authtok=(AuthTokType.PASSWORD, PASSWORD),
        )
    )  # fmt: skip
    assert req.authtok is not None
    texts = [repr(req), str(req), repr(req.authtok), str(req.authtok.secret), f"{req}"]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").debug("request %s %r", req, req.authtok)
    texts.append(caplog.text)
    for text in texts:
        assert PASSWORD.decode() not in text
        assert "s3cr3t" not in text


def test_the_receive_buffer_is_zeroed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytearray] = []
    import cached.pam.protocol as protocol

    real = protocol.parse_request

    def spy(cmd: int, body: bytearray) -> Request:
        seen.append(body)
        return real(cmd, body)

    monkeypatch.setattr(protocol, "parse_request", spy)  # the parser the codec is given
    conn = ServerConnection()
    conn.receive_data(
        encode_request(
            Command.AUTHENTICATE,
            encode_request_body(user="a", cli_pid=3, authtok=(AuthTokType.PASSWORD, PASSWORD)),
        )
    )
    req = conn.next_request()
    assert isinstance(req, PamRequest)
    assert seen and PASSWORD not in seen[0] and not any(seen[0])
    assert PASSWORD not in conn._buf


def test_secret_wipe_and_context_manager() -> None:
    req = parse_pam(
        encode_request_body(
            cli_pid=3,
            authtok=(AuthTokType.PASSWORD, b"old"),
            new_authtok=(AuthTokType.PASSWORD, b"new"),
        )
    )
    assert req.authtok is not None and req.new_authtok is not None
    old, new = req.authtok.secret, req.new_authtok.secret
    buf = old._buf  # the bytes must be overwritten, not just dropped
    with req:
        assert old.reveal() == b"old"
    assert len(old) == 0 and len(new) == 0 and not old
    assert not any(buf)


def test_secret_compares_in_constant_time_and_is_not_hashable_or_picklable() -> None:
    s = Secret(b"abc")
    assert s == b"abc" and s == bytearray(b"abc") and s == Secret(b"abc")
    assert s != b"abd" and s != "abc"
    with pytest.raises(TypeError):
        hash(s)
    with pytest.raises(TypeError):
        pickle.dumps(s)


# ------------------------------------------------------------------ replies


@little_only
def test_golden_online_success() -> None:
    # §1.5, SSSD's test_pam_srv.c: status 0, count 1, DOMAIN_NAME len 9 "pam_test\0".
    reply = pam_reply(Command.AUTHENTICATE, PamStatus.SUCCESS, [domain_name_item("pam_test")])
    assert reply[:16] == u32(16 + 8 + 8 + 9, Command.AUTHENTICATE, 0, 0)
    assert reply[16:] == u32(0, 1, 2, 9) + b"pam_test\0"


USER_INFO_CASES = [
    # (item, subtype, exact data length after the type/len header (§1.6), payload)
    (offline_auth_item(0), UserInfoType.OFFLINE_AUTH, 12, struct.pack("=q", 0)),
    (offline_auth_item(1_900_000_000), UserInfoType.OFFLINE_AUTH, 12,
     struct.pack("=q", 1_900_000_000)),
    (offline_auth_delayed_item(1_800_000_000), UserInfoType.OFFLINE_AUTH_DELAYED, 12,
     struct.pack("=q", 1_800_000_000)),
    (offline_chpass_item(), UserInfoType.OFFLINE_CHPASS, 4, b""),
    (otp_chpass_item(), UserInfoType.OTP_CHPASS, 4, b""),
    (chpass_error_item("too short"), UserInfoType.CHPASS_ERROR, 8 + 9, u32(9) + b"too short"),
    (chpass_error_item(""), UserInfoType.CHPASS_ERROR, 8, u32(0)),
    (grace_login_item(2), UserInfoType.GRACE_LOGIN, 8, u32(2)),
    (expire_warn_item(3600), UserInfoType.EXPIRE_WARN, 8, u32(3600)),
    (account_expired_item("locked"), UserInfoType.ACCOUNT_EXPIRED, 8 + 7, u32(7) + b"locked\0"),
    (account_expired_item(""), UserInfoType.ACCOUNT_EXPIRED, 8, u32(0)),
    (pin_locked_item(), UserInfoType.PIN_LOCKED, 4, b""),
]  # fmt: skip


@pytest.mark.parametrize(("it", "sub", "length", "payload"), USER_INFO_CASES)
def test_user_info_items_have_the_exact_lengths(
    it: ReplyItem, sub: UserInfoType, length: int, payload: bytes
) -> None:
    assert it.type == ResponseType.USER_INFO
    assert len(it.data) == length
    reply = decode_reply(pam_reply(Command.AUTHENTICATE, PamStatus.SUCCESS, [it])[16:])
    assert reply.user_info() == [(sub, payload)]


def test_string_items() -> None:
    items = [
        domain_name_item("example.com"),
        system_info_item("logged"),
        text_msg_item("hello"),
        env_item("KRB5CCNAME", "FILE:/tmp/x"),
        env_item("A", "b", ResponseType.ALL_ENV_ITEM),
    ]
    reply = decode_reply(pam_reply(Command.OPEN_SESSION, PamStatus.PERM_DENIED, items)[16:])
    assert reply.status == PamStatus.PERM_DENIED
    assert [(i.type, i.data) for i in reply.items] == [
        (ResponseType.DOMAIN_NAME, b"example.com\0"),
        (ResponseType.SYSTEM_INFO, b"logged\0"),
        (ResponseType.TEXT_MSG, b"hello\0"),
        (ResponseType.PAM_ENV_ITEM, b"KRB5CCNAME=FILE:/tmp/x\0"),
        (ResponseType.ALL_ENV_ITEM, b"A=b\0"),
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: domain_name_item("a\0b"),
        lambda: text_msg_item("\0"),
        lambda: env_item("", "x"),
        lambda: env_item("A=B", "x"),
        lambda: env_item("A", "x", ResponseType.TEXT_MSG),
        lambda: grace_login_item(-1),
        lambda: expire_warn_item(1 << 32),
        lambda: offline_auth_item(1 << 63),
        lambda: chpass_error_item("a\0"),
        lambda: pam_reply(Command.AUTHENTICATE, 1 << 31),
    ],
)
def test_reply_encoders_refuse_what_the_client_would_misread(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_reply_header_status_is_always_zero() -> None:
    # §1.1: a non-zero header status is "Request to sssd failed" whatever the body says.
    for status in PamStatus:
        assert pam_reply(Command.ACCT_MGMT, status)[8:12] == u32(0)


@pytest.mark.parametrize(
    "body",
    [b"", u32(0), u32(0, 1), u32(0, 1, 2, 10) + b"x", u32(0, 0) + b"x", u32(0, 0xFFFFFFFF)],
)
def test_decode_reply_refuses_what_pam_sss_calls_buf_err(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_reply(body)


# ------------------------------------------------------------------ fuzz

_item = st.tuples(st.integers(0, 16), st.binary(max_size=40)).map(lambda t: item(*t))
_bodies = st.one_of(
    st.binary(max_size=300),
    st.lists(_item, max_size=12).map(lambda items: body_of(*items)),
    st.lists(_item, max_size=12).map(lambda items: body_of(PID, *items)),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cmd=st.sampled_from([*SERVED_COMMANDS, Command.RENEW, 0, 0xF0]), body=_bodies)
def test_fuzz_parse_raises_only_protocol_errors(cmd: int, body: bytes) -> None:
    try:
        req = parse_request(cmd, body)
    except ProtocolError:
        return
    assert isinstance(req, (GetVersion, PamRequest))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wire=st.binary(max_size=600), chunk=st.integers(1, 64))
def test_fuzz_server_connection(wire: bytes, chunk: int) -> None:
    conn = ServerConnection()
    for i in range(0, len(wire), chunk):
        try:
            conn.receive_data(wire[i : i + chunk])
            while not isinstance(conn.next_request(), NeedData):
                pass
        except MalformedRequest:
            assert not conn.dead
        except ProtocolError:
            assert conn.dead
            return
        assert conn.buffered_bytes < MAX_REQUEST_SIZE + chunk


@settings(max_examples=200, deadline=None)
@given(password=st.binary(min_size=6, max_size=64).filter(lambda b: b"\0" not in b))
def test_fuzz_repr_never_contains_the_password(password: bytes) -> None:
    marker = b"PW:" + password
    req = parse_pam(
        encode_request_body(user="u", cli_pid=1, authtok=(AuthTokType.PASSWORD, marker))
    )
    for text in (repr(req), str(req)):
        assert marker.decode("utf-8", "backslashreplace") not in text
        assert repr(marker)[2:-1] not in text
        assert "PW:" not in text
