"""SSSD's PAM socket protocol as a sans-IO codec: bytes in, values out.

The shape is :mod:`cached.nss.protocol`'s (h11's): :class:`ServerConnection` buffers what
the socket delivered and hands out one parsed request at a time or :data:`NEED_DATA`; reply
encoders turn values into bytes. No sockets, clocks or tasks, so every edge case is a unit
test and the parser can be fuzzed. The framing is the NSS socket's (a 16-byte header of
host-endian ``len, cmd, status, reserved``): its constants, :class:`ProtocolError`, the
server's connection and the client side are the responders' shared framing
(``cached.responder.wire``).

Section numbers (§) refer to the team's PAM reference notes, which paraphrase SSSD 2.8.2
(``src/sss_client/sss_cli.h``, ``pam_message.c``, ``pam_sss.c``,
``src/responder/pam/pamsrv_cmd.c``) and what Debian 12's ``pam_sss.so`` was measured to do.

What a peer's mistake does (server side)
----------------------------------------

======================================================  ==================================
Request                                                 Outcome
======================================================  ==================================
length field < 16 or > 1024 (``MAX_REQUEST_SIZE``)      close: :class:`ProtocolError`
command not served (RENEW, GSSAPI, unknown)             close: :class:`ProtocolError`
GET_VERSION body not 4 bytes                            served: the reply is still 3
GET_VERSION asking for a version other than 3           served: the reply is still 3
PAM body < 18 bytes, no start/end marker, an item that  :class:`MalformedRequest`: answer
runs past the end marker, a string item without its     :func:`system_error_reply`, the
final NUL / with a NUL inside / not UTF-8, a u32 item   connection stays usable
not exactly 4 bytes, an authtok item < 4 bytes or of
an unknown type, a PASSWORD with a NUL inside, an
EMPTY authtok with data, a known item twice, no
CLI_PID or CLI_PID 0, bytes after the end marker
an item type this codec does not know (8, 13...)        skipped (kept in ``unknown_items``)
======================================================  ==================================

* SSSD closes the connection on bad framing and unknown commands and answers a body it
  cannot parse with ``PAM_SYSTEM_ERR`` (§1.1, §1.4); so do we. :class:`MalformedRequest`
  is a :class:`ProtocolError`, so ``except ProtocolError`` is the one error type a caller
  must expect; catching :class:`MalformedRequest` first tells "answer SYSTEM_ERR" from
  "close". After a plain :class:`ProtocolError` the connection object is dead.
* Stricter than SSSD where ``pam_sss`` never sends the input (a known item twice, a NUL
  inside a string or password, data in an EMPTY token): a C server would silently take the
  last copy or the part before the NUL, so the password it checks could differ from the
  one the hash or the LDAP bind sees. Refusing costs no real client anything.
* Only protocol version 3 is parsed. SSSD also answers 1 and 2 when asked; every
  ``pam_sss`` since 2009 asks for 3 and accepts an exact match only (§1.2), so a client
  wanting an older format gets 3 and gives up rather than being misparsed.

Passwords
---------

The authentication tokens of a request are held in :class:`Secret`: a ``bytearray``
whose ``repr``/``str`` never show the content, compared in constant time, and wiped in
place by :meth:`Secret.wipe` (or :meth:`PamRequest.wipe`, or leaving ``with request:``).
:class:`ServerConnection` zeroes the bytes of each request in its buffer once parsed.
Python cannot promise more than that: whoever calls :meth:`Secret.reveal` (an LDAP bind
needs the password as ``bytes``/``str``) holds an immutable copy until it is collected.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from typing import ClassVar, Final, NoReturn, TypeAlias

from cached.responder import wire
from cached.responder.wire import (
    HEADER_SIZE,
    MAX_REQUEST_SIZE,
    NEED_DATA,
    NeedData,
    ProtocolError,
    encode_request,
)

__all__ = [
    "HEADER_SIZE",
    "MAX_REQUEST_SIZE",
    "MIN_BODY_SIZE",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "REQUEST_END",
    "REQUEST_START",
    "SERVED_COMMANDS",
    "AuthTok",
    "AuthTokType",
    "ClientConnection",
    "ClientFlags",
    "Command",
    "GetVersion",
    "ItemType",
    "MalformedRequest",
    "NeedData",
    "PamReply",
    "PamRequest",
    "PamStatus",
    "ProtocolError",
    "ReplyItem",
    "Request",
    "ResponseType",
    "Secret",
    "ServerConnection",
    "UserInfoType",
    "account_expired_item",
    "chpass_error_item",
    "command_name",
    "decode_reply",
    "decode_version",
    "domain_name_item",
    "encode_request",
    "encode_request_body",
    "env_item",
    "expire_warn_item",
    "grace_login_item",
    "offline_auth_delayed_item",
    "offline_auth_item",
    "offline_chpass_item",
    "otp_chpass_item",
    "pam_reply",
    "parse_request",
    "pin_locked_item",
    "system_error_reply",
    "system_info_item",
    "text_msg_item",
    "version_body",
    "version_reply",
]

# --------------------------------------------------------------------------- limits

#: PAM protocol version 3 ("2009-09-14, make cli_pid mandatory"): what ``pam_sss`` sends in
#: GET_VERSION and the only answer it accepts (§1.2, §1.3).
PROTOCOL_VERSION: Final = 3

#: A PAM request body starts with ``u32 0x4d415049`` and ends with ``u32 0x4950414d``
#: (``SSS_START_OF_PAM_REQUEST`` / ``SSS_END_OF_PAM_REQUEST``, §1.4).
REQUEST_START: Final = 0x4D415049
REQUEST_END: Final = 0x4950414D

# MAX_REQUEST_SIZE (from the NSS codec) applies here unchanged: SSSD caps a PAM request at
# 1024 bytes with the header (SSS_PACKET_MAX_RECV_SIZE) and closes above it; only its
# certificate, GSSAPI and PAC commands get more (§1.1). A password change with two very
# long passwords can exceed it; SSSD then closes the connection as well.

#: SSSD's responder refuses a PAM body shorter than four u32 and two bytes (§1.4: "the
#: body is ≥ 18 bytes"); a v3 body is at least 20 (markers and the mandatory CLI_PID).
MIN_BODY_SIZE: Final = 18

# "=": host byte order, standard sizes, no padding: the wire's host-endian integers (§1.1).
_U32: Final = struct.Struct("=I")
_U32X2: Final = struct.Struct("=2I")
_HEADER: Final = struct.Struct("=4I")
_I32X2: Final = struct.Struct("=2i")
# time_t of the client. 64-bit on every 64-bit Linux and on 32-bit glibc ≥ 2.34 built with
# _TIME_BITS=64 (Debian's are not, but Debian's PAM hosts are 64-bit): §1.6's "i64".
_TIME_T: Final = struct.Struct("=q")
_U32_MAX: Final = 0xFFFFFFFF


# ------------------------------------------------------------------- enumerations


class Command(IntEnum):
    """PAM command codes (§1.3, ``enum sss_cli_command``)."""

    GET_VERSION = 0x0001
    AUTHENTICATE = 0x00F1
    SETCRED = 0x00F2
    ACCT_MGMT = 0x00F3
    OPEN_SESSION = 0x00F4
    CLOSE_SESSION = 0x00F5
    CHAUTHTOK = 0x00F6
    CHAUTHTOK_PRELIM = 0x00F7
    RENEW = 0x00F8
    PREAUTH = 0x00F9
    GSSAPI_INIT = 0x00FA
    GSSAPI_SEC_CTX = 0x00FB


#: The commands ``pam_sss.so`` sends (§1.3). RENEW is Kerberos-only and never sent by
#: ``pam_sss``; the GSSAPI pair belongs to ``pam_sss_gss.so``. Those close the connection.
SERVED_COMMANDS: Final = frozenset(
    {
        Command.GET_VERSION,
        Command.AUTHENTICATE,
        Command.SETCRED,
        Command.ACCT_MGMT,
        Command.OPEN_SESSION,
        Command.CLOSE_SESSION,
        Command.CHAUTHTOK,
        Command.CHAUTHTOK_PRELIM,
        Command.PREAUTH,
    }
)
_SERVED_BY_VALUE: Final[dict[int, Command]] = {int(c): c for c in SERVED_COMMANDS}


command_name: Final = wire.command_namer(Command)


class ItemType(IntEnum):
    """Request item types (§1.4, ``enum pam_item_type``). 8 (CLI_LOCALE) is defined but
    never sent by 2.8.2 and is skipped like any unknown type."""

    USER = 1
    SERVICE = 2
    TTY = 3
    RUSER = 4
    RHOST = 5
    AUTHTOK = 6
    NEWAUTHTOK = 7
    CLI_LOCALE = 8
    CLI_PID = 9
    CHILD_PID = 10
    REQUESTED_DOMAINS = 11
    FLAGS = 12


class AuthTokType(IntEnum):
    """``enum sss_authtok_type`` (§1.4): the u32 at the start of an authtok item."""

    EMPTY = 0
    PASSWORD = 1
    CCFILE = 2
    TWO_FACTOR = 3
    SC_PIN = 4
    SC_KEYPAD = 5
    TWO_FACTOR_SINGLE = 6
    OAUTH2 = 7


class ClientFlags(IntFlag):
    """The FLAGS item: ``pam_sss.so`` options the server may need (§1.4).
    ``ignore_unknown_user``/``ignore_authinfo_unavail`` are applied by the client."""

    NONE = 0
    USE_FIRST_PASS = 1
    FORWARD_PASS = 2
    USE_AUTHTOK = 4
    IGNORE_UNKNOWN_USER = 8
    IGNORE_AUTHINFO_UNAVAIL = 16
    USE_2FA = 32
    ALLOW_MISSING_NAME = 64
    PROMPT_ALWAYS = 128
    TRY_CERT_AUTH = 256
    REQUIRE_CERT_AUTH = 512


class PamStatus(IntEnum):
    """Linux-PAM return values the responder sends (§1.7, checked with ``pam_strerror``)."""

    SUCCESS = 0
    SERVICE_ERR = 3
    SYSTEM_ERR = 4
    BUF_ERR = 5
    PERM_DENIED = 6
    AUTH_ERR = 7
    CRED_INSUFFICIENT = 8
    AUTHINFO_UNAVAIL = 9
    USER_UNKNOWN = 10
    NEW_AUTHTOK_REQD = 12
    ACCT_EXPIRED = 13
    AUTHTOK_ERR = 20
    IGNORE = 25
    MODULE_UNKNOWN = 28
    BAD_ITEM = 29


class ResponseType(IntEnum):
    """Reply item types (§1.5, ``enum response_type``)."""

    SYSTEM_INFO = 1
    DOMAIN_NAME = 2
    PAM_ENV_ITEM = 3
    ENV_ITEM = 4
    ALL_ENV_ITEM = 5
    USER_INFO = 6
    TEXT_MSG = 7
    OTP_INFO = 8
    CERT_INFO = 9
    OTP = 10
    PASSWORD_PROMPTING = 11
    CERT_AUTH_PROMPTING = 12
    CERT_INFO_WITH_HINT = 13
    PROMPT_CONFIG = 14
    CHILD_KEEP_ALIVE = 15
    OAUTH2_INFO = 16


class UserInfoType(IntEnum):
    """Subtypes of a USER_INFO reply item (§1.6, ``enum user_info_type``)."""

    OFFLINE_AUTH = 1
    OFFLINE_AUTH_DELAYED = 2
    OFFLINE_CHPASS = 3
    OTP_CHPASS = 4
    CHPASS_ERROR = 5
    GRACE_LOGIN = 6
    EXPIRE_WARN = 7
    ACCOUNT_EXPIRED = 8
    PIN_LOCKED = 9


# ------------------------------------------------------------------------ secrets


class Secret:
    """Bytes that must not leak: a password or other authentication token.

    ``repr``/``str`` never show the content (nor its length), equality is constant-time
    (:func:`hmac.compare_digest`), and :meth:`wipe` zeroes the buffer in place. Not
    hashable and not picklable, so it cannot end up as a dict key in a log record or in
    a pickled state.
    """

    __slots__ = ("_buf",)

    def __init__(self, data: bytes | bytearray | memoryview = b"") -> None:
        self._buf = bytearray(data)

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__

    def __len__(self) -> int:
        return len(self._buf)

    def __bool__(self) -> bool:
        return bool(self._buf)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Secret):
            return hmac.compare_digest(self._buf, other._buf)
        if isinstance(other, (bytes, bytearray)):
            return hmac.compare_digest(self._buf, other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")

    def reveal(self) -> bytes:
        """An immutable copy of the content, for the one call that needs it (a bind, a
        hash). The copy cannot be wiped: keep it local and short-lived."""
        return bytes(self._buf)

    def wipe(self) -> None:
        """Overwrite the content with zeros, then drop it."""
        self._buf[:] = bytes(len(self._buf))
        self._buf.clear()


@dataclass(frozen=True, slots=True)
class AuthTok:
    """An AUTHTOK or NEWAUTHTOK item: its type and the token bytes (§1.4).

    A PASSWORD of length 0 (``use_first_pass`` with nothing on the stack) is turned into
    EMPTY, as SSSD does, so "empty" has one spelling: ``type is AuthTokType.EMPTY``.
    """

    type: AuthTokType
    secret: Secret = field(repr=False, compare=False)

    @property
    def is_password(self) -> bool:
        return self.type is AuthTokType.PASSWORD

    def wipe(self) -> None:
        self.secret.wipe()


# ---------------------------------------------------------------------- requests


class MalformedRequest(ProtocolError):
    """A framed request whose body cannot be parsed (see the module's table).

    Answer it with :func:`system_error_reply` (SSSD's ``PAM_SYSTEM_ERR``); unlike a plain
    :class:`ProtocolError` the connection stays usable. The message never contains a
    token's bytes.
    """


@dataclass(frozen=True, slots=True)
class GetVersion:
    """GET_VERSION; ``version`` is what the client expects (None: no 4-byte body). The
    answer is always :data:`PROTOCOL_VERSION` (:func:`version_reply`)."""

    version: int | None
    cmd: ClassVar[Command] = Command.GET_VERSION


@dataclass(frozen=True, slots=True)
class PamRequest:
    """One PAM command with its items (§1.4). Absent strings are ``""`` (the client omits
    empty strings, so absent and empty are the same). ``authtok``/``new_authtok`` hold the
    tokens in :class:`Secret`; :meth:`wipe` (or leaving ``with request:``) zeroes them."""

    cmd: Command
    cli_pid: int
    user: str = ""
    service: str = ""
    tty: str = ""
    ruser: str = ""
    rhost: str = ""
    requested_domains: tuple[str, ...] = ()
    child_pid: int | None = None
    authtok: AuthTok | None = None
    new_authtok: AuthTok | None = None
    flags: ClientFlags = ClientFlags.NONE
    #: item types skipped because this codec does not know them (for logs)
    unknown_items: tuple[int, ...] = ()

    def wipe(self) -> None:
        for tok in (self.authtok, self.new_authtok):
            if tok is not None:
                tok.wipe()

    def __enter__(self) -> PamRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.wipe()


Request: TypeAlias = GetVersion | PamRequest

_STRING_FIELDS: Final[dict[int, str]] = {
    ItemType.USER: "user",
    ItemType.SERVICE: "service",
    ItemType.TTY: "tty",
    ItemType.RUSER: "ruser",
    ItemType.RHOST: "rhost",
    ItemType.REQUESTED_DOMAINS: "requested_domains",
}
_U32_FIELDS: Final[dict[int, str]] = {
    ItemType.CLI_PID: "cli_pid",
    ItemType.CHILD_PID: "child_pid",
    ItemType.FLAGS: "flags",
}
_TOKEN_FIELDS: Final[dict[int, str]] = {
    ItemType.AUTHTOK: "authtok",
    ItemType.NEWAUTHTOK: "new_authtok",
}
_AUTHTOK_TYPES: Final[dict[int, AuthTokType]] = {int(t): t for t in AuthTokType}


def _string(cmd: Command, name: str, data: memoryview) -> str:
    # §1.4: strings are sent with their NUL, counted in len; SSSD checks the terminator
    # and UTF-8. A NUL inside is refused (see the module docstring).
    try:
        return wire.nul_terminated(bytes(data), f"{name} item")
    except ValueError as e:
        raise MalformedRequest(str(e), cmd) from None


def _token(cmd: Command, name: str, data: memoryview) -> AuthTok:
    # §1.4: u32 authtok_type, then the token without a NUL; len = 4 + token length.
    if len(data) < 4:
        raise MalformedRequest(f"{name} item is {len(data)} bytes, shorter than 4", cmd)
    code: int = _U32.unpack_from(data, 0)[0]
    kind = _AUTHTOK_TYPES.get(code)
    if kind is None:
        raise MalformedRequest(f"{name} item has unknown token type {code}", cmd)
    token = data[4:]
    if kind is AuthTokType.EMPTY and len(token):
        raise MalformedRequest(f"{name} item of type EMPTY carries data", cmd)
    if kind is AuthTokType.PASSWORD:
        if not len(token):  # use_first_pass with nothing stacked: SSSD makes it EMPTY
            kind = AuthTokType.EMPTY
        elif 0 in token:  # the client sends strlen() bytes: a NUL cannot be in one
            raise MalformedRequest(f"NUL inside the {name} password", cmd)
    return AuthTok(kind, Secret(token))


def parse_request(cmd: int, body: bytes | bytearray | memoryview) -> Request:
    """The request ``cmd`` with this ``body`` (the bytes after the 16-byte header).

    Raises :class:`ProtocolError` for a command that is not served and
    :class:`MalformedRequest` for a body that cannot be parsed. Tokens are copied into
    :class:`Secret` objects: ``body`` can be wiped by the caller afterwards.
    """
    command = _SERVED_BY_VALUE.get(cmd)
    if command is None:
        raise ProtocolError(f"command {command_name(cmd)} is not served", cmd)
    view = memoryview(body).cast("B")
    if command is Command.GET_VERSION:
        if len(view) != 4:  # SSSD then answers its default version: so do we
            return GetVersion(None)
        return GetVersion(_U32.unpack_from(view, 0)[0])
    return _parse_pam(command, view)


def _parse_pam(cmd: Command, body: memoryview) -> PamRequest:
    size = len(body)
    if size < MIN_BODY_SIZE:
        raise MalformedRequest(f"body is {size} bytes, shorter than {MIN_BODY_SIZE}", cmd)
    if _U32.unpack_from(body, 0)[0] != REQUEST_START:
        raise MalformedRequest("body does not start with the request marker", cmd)
    if _U32.unpack_from(body, size - 4)[0] != REQUEST_END:
        raise MalformedRequest("body does not end with the request marker", cmd)
    strings: dict[str, str] = {}
    numbers: dict[str, int] = {}
    tokens: dict[str, AuthTok] = {}
    unknown: list[int] = []
    pos = 4
    end = size - 4  # where the end marker starts
    try:
        while pos < end:
            if end - pos < 8:
                raise MalformedRequest(f"item header at {pos} runs into the end marker", cmd)
            kind, length = _U32X2.unpack_from(body, pos)
            pos += 8
            if length > end - pos:
                raise MalformedRequest(
                    f"item {kind} of {length} bytes at {pos} runs past the end marker", cmd
                )
            data = body[pos : pos + length]
            pos += length
            if name := _STRING_FIELDS.get(kind):
                _once(cmd, name, strings)
                strings[name] = _string(cmd, name, data)
            elif name := _U32_FIELDS.get(kind):
                _once(cmd, name, numbers)
                if length != 4:  # §1.4: u32 items are exactly 4 bytes
                    raise MalformedRequest(f"{name} item is {length} bytes, not 4", cmd)
                numbers[name] = _U32.unpack_from(data, 0)[0]
            elif name := _TOKEN_FIELDS.get(kind):
                _once(cmd, name, tokens)
                tokens[name] = _token(cmd, name, data)
            else:  # §1.4: unknown types are skipped (newer clients send 13-15)
                unknown.append(kind)
        # The loop ends exactly at the end marker: every item fitted, nothing follows.
        if not numbers.get("cli_pid"):  # v3 made CLI_PID mandatory; SSSD refuses 0 (§1.3)
            raise MalformedRequest("no CLI_PID item, or CLI_PID 0", cmd)
    except MalformedRequest:
        for token in tokens.values():
            token.wipe()
        raise
    # pam_sss.so domains=a,b; SSSD splits on commas, trims, and drops empty names.
    domains = strings.pop("requested_domains", "").split(",")
    return PamRequest(
        cmd=cmd,
        cli_pid=numbers["cli_pid"],
        child_pid=numbers.get("child_pid"),
        flags=ClientFlags(numbers.get("flags", 0)),
        requested_domains=tuple(d for d in (p.strip() for p in domains) if d),
        authtok=tokens.get("authtok"),
        new_authtok=tokens.get("new_authtok"),
        unknown_items=tuple(unknown),
        **strings,
    )


def _once(cmd: Command, name: str, seen: Mapping[str, object]) -> None:
    # pam_sss sends each item once; a C server would keep the last copy (see the table).
    if name in seen:
        raise MalformedRequest(f"{name} item sent twice", cmd)


def _malformed(error: ProtocolError) -> bool:
    return isinstance(error, MalformedRequest)


class ServerConnection(wire.ServerConnection[Command, Request]):
    """One client connection as the PAM responder sees it.

    Feed what the socket delivered to :meth:`receive_data`, then call :meth:`next_request`
    until it returns :data:`NEED_DATA`. Raises :class:`ProtocolError` (then the connection
    is dead: close it) or :class:`MalformedRequest` (answer :func:`system_error_reply`
    with its ``cmd``; the connection goes on). The bytes of every request are zeroed in the
    buffer once it has been parsed, so a password lives on only in its :class:`Secret`.
    The framing is the shared one (:class:`cached.responder.wire.ServerConnection`).
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(
            _SERVED_BY_VALUE, parse_request, command_name, salvage=_malformed, wipe=True
        )


# ------------------------------------------------------------------------ replies


@dataclass(frozen=True, slots=True)
class ReplyItem:
    """One reply item: ``u32 type, u32 len, data[len]`` (§1.5)."""

    type: int
    data: bytes


def _cstring(text: str, what: str) -> bytes:
    if "\0" in text:
        raise ValueError(f"{what} contains NUL")
    return text.encode("utf-8") + b"\0"


def _u32(value: int, what: str) -> bytes:
    if not 0 <= value <= _U32_MAX:
        raise ValueError(f"{what} {value} is not a uint32")
    return _U32.pack(value)


def _user_info(sub: UserInfoType, data: bytes = b"") -> ReplyItem:
    return ReplyItem(ResponseType.USER_INFO, _U32.pack(sub) + data)


def domain_name_item(domain: str) -> ReplyItem:
    """DOMAIN_NAME: the domain that answered; SSSD adds it to every reply (§1.5)."""
    return ReplyItem(ResponseType.DOMAIN_NAME, _cstring(domain, "domain name"))


def system_info_item(text: str) -> ReplyItem:
    """SYSTEM_INFO: ``pam_sss`` writes it to syslog (§1.5)."""
    return ReplyItem(ResponseType.SYSTEM_INFO, _cstring(text, "system info"))


def text_msg_item(text: str) -> ReplyItem:
    """TEXT_MSG: shown to the user as ``PAM_TEXT_INFO`` (§1.5)."""
    return ReplyItem(ResponseType.TEXT_MSG, _cstring(text, "text message"))


def env_item(name: str, value: str, kind: ResponseType = ResponseType.PAM_ENV_ITEM) -> ReplyItem:
    """``NAME=value`` for ``pam_putenv`` (PAM_ENV_ITEM), ``putenv`` (ENV_ITEM) or both
    (ALL_ENV_ITEM) (§1.5)."""
    if kind not in (ResponseType.PAM_ENV_ITEM, ResponseType.ENV_ITEM, ResponseType.ALL_ENV_ITEM):
        raise ValueError(f"{kind!r} is not an environment item type")
    if not name or "=" in name:
        raise ValueError(f"environment name {name!r} is empty or contains '='")
    return ReplyItem(kind, _cstring(f"{name}={value}", "environment item"))


def offline_auth_item(expiry: int) -> ReplyItem:
    """USER_INFO OFFLINE_AUTH: "Authenticated with cached credentials[, your cached
    password will expire at: <date>]." ``expiry`` is a Unix time, 0 for never (§1.6: u32
    subtype + time_t, exactly 12 bytes or the client drops it)."""
    return _user_info(UserInfoType.OFFLINE_AUTH, _time(expiry))


def offline_auth_delayed_item(until: int) -> ReplyItem:
    """USER_INFO OFFLINE_AUTH_DELAYED: "Authentication is denied until: <date>." (§1.6)."""
    return _user_info(UserInfoType.OFFLINE_AUTH_DELAYED, _time(until))


def offline_chpass_item() -> ReplyItem:
    """USER_INFO OFFLINE_CHPASS: "System is offline, password change not possible" (§1.6)."""
    return _user_info(UserInfoType.OFFLINE_CHPASS)


def otp_chpass_item() -> ReplyItem:
    """USER_INFO OTP_CHPASS: the kinit hint after an OTP change (§1.6)."""
    return _user_info(UserInfoType.OTP_CHPASS)


def chpass_error_item(message: str) -> ReplyItem:
    """USER_INFO CHPASS_ERROR: "Password change failed. [Server message: <text>]" (§1.6).
    ``u32 len`` + the text *without* a NUL, as SSSD's ``pack_user_info_chpass_error``;
    "" shows no server message."""
    return _user_info(UserInfoType.CHPASS_ERROR, _counted(message, nul=False))


def grace_login_item(remaining: int) -> ReplyItem:
    """USER_INFO GRACE_LOGIN: "Your password has expired. You have N grace login(s)
    remaining." (§1.6: u32, exactly 8 bytes)."""
    return _user_info(UserInfoType.GRACE_LOGIN, _u32(remaining, "grace logins"))


def expire_warn_item(seconds: int) -> ReplyItem:
    """USER_INFO EXPIRE_WARN: "Your password will expire in N day(s)/..." (§1.6: u32
    seconds, exactly 8 bytes)."""
    return _user_info(UserInfoType.EXPIRE_WARN, _u32(seconds, "expiry warning"))


def account_expired_item(message: str) -> ReplyItem:
    """USER_INFO ACCOUNT_EXPIRED: "Permission denied. [Server message: <text>]" (§1.6),
    carrying ``pam_account_expired_message`` / ``pam_account_locked_message``. ``u32 len`` +
    the text with its NUL, as SSSD's responder packs it; "" shows no server message."""
    return _user_info(UserInfoType.ACCOUNT_EXPIRED, _counted(message, nul=bool(message)))


def pin_locked_item() -> ReplyItem:
    """USER_INFO PIN_LOCKED: "PIN locked" (§1.6)."""
    return _user_info(UserInfoType.PIN_LOCKED)


def _time(value: int) -> bytes:
    try:
        return _TIME_T.pack(value)
    except struct.error:
        raise ValueError(f"time {value} does not fit a 64-bit time_t") from None


def _counted(message: str, *, nul: bool) -> bytes:
    text = _cstring(message, "message") if nul else _cstring(message, "message")[:-1]
    return _U32.pack(len(text)) + text


def pam_reply(cmd: int, status: int, items: Iterable[ReplyItem] = ()) -> bytes:
    """A reply: header ``len, cmd, 0, 0`` (the header status is always 0: any other value
    is "Request to sssd failed", §1.1), then ``i32 pam_status, i32 count`` and the items
    (§1.5). ``cmd`` must be the request's command."""
    parts = [b""]
    count = 0
    for item in items:
        parts.append(_U32X2.pack(item.type, len(item.data)))
        parts.append(item.data)
        count += 1
    size = HEADER_SIZE + 8 + sum(map(len, parts))
    if size > _U32_MAX:
        raise ValueError("PAM reply does not fit a uint32 length")
    try:
        parts[0] = _HEADER.pack(size, cmd, 0, 0) + _I32X2.pack(status, count)
    except struct.error as exc:
        raise ValueError(f"bad command {cmd} or status {status}") from exc
    return b"".join(parts)


def system_error_reply(cmd: int) -> bytes:
    """``PAM_SYSTEM_ERR`` with no items: SSSD's answer to a body it cannot parse (§1.4)."""
    return pam_reply(cmd, PamStatus.SYSTEM_ERR)


_VERSION_REPLY: Final = _HEADER.pack(HEADER_SIZE + 4, Command.GET_VERSION, 0, 0) + _U32.pack(
    PROTOCOL_VERSION
)


def version_reply() -> bytes:
    """Reply to GET_VERSION: version 3, status 0 (§1.2: the client wants exactly 3)."""
    return _VERSION_REPLY


# ------------------------------------------------------------------ client side


def version_body(version: int = PROTOCOL_VERSION) -> bytes:
    """GET_VERSION body: ``u32 expected`` (§1.2)."""
    return _U32.pack(version)


def encode_request_body(
    *,
    user: str = "",
    service: str = "",
    tty: str = "",
    ruser: str = "",
    rhost: str = "",
    requested_domains: str = "",
    cli_pid: int = 1,
    child_pid: int | None = None,
    authtok: tuple[int, bytes] | None = None,
    new_authtok: tuple[int, bytes] | None = None,
    flags: int = 0,
    extra: Sequence[tuple[int, bytes]] = (),
) -> bytes:
    """A request body as ``pam_sss`` 2.8.2 builds it (``pack_message_v3``, §1.4): markers,
    strings with their NUL, empty strings omitted, items in the client's order; ``extra``
    items (type, raw data) go before FLAGS. For tests and tools; no validation beyond what
    packing needs, so a test can build what a hostile client would send."""
    items: list[tuple[int, bytes]] = []
    text_items: tuple[tuple[int, str], ...] = (
        (ItemType.USER, user),
        (ItemType.SERVICE, service),
        (ItemType.TTY, tty),
        (ItemType.RUSER, ruser),
        (ItemType.RHOST, rhost),
        (ItemType.REQUESTED_DOMAINS, requested_domains),
    )
    for kind, text in text_items:
        if text:
            items.append((kind, text.encode("utf-8") + b"\0"))
    items.append((ItemType.CLI_PID, _U32.pack(cli_pid)))
    if child_pid is not None:
        items.append((ItemType.CHILD_PID, _U32.pack(child_pid)))
    for kind, tok in ((ItemType.AUTHTOK, authtok), (ItemType.NEWAUTHTOK, new_authtok)):
        if tok is not None:
            items.append((kind, _U32.pack(tok[0]) + tok[1]))
    items.extend(extra)
    items.append((ItemType.FLAGS, _U32.pack(flags)))
    out = [_U32.pack(REQUEST_START)]
    for kind, data in items:
        out.append(_U32X2.pack(kind, len(data)))
        out.append(data)
    out.append(_U32.pack(REQUEST_END))
    return b"".join(out)


@dataclass(frozen=True, slots=True)
class PamReply:
    """A decoded reply body: the PAM status and the items in wire order."""

    status: int
    items: tuple[ReplyItem, ...]

    def user_info(self) -> list[tuple[int, bytes]]:
        """``(subtype, data after the subtype)`` of every USER_INFO item."""
        return [
            (_U32.unpack_from(i.data, 0)[0], i.data[4:])
            for i in self.items
            if i.type == ResponseType.USER_INFO and len(i.data) >= 4
        ]


class ClientConnection(wire.ClientConnection):
    """The PAM client's side (:class:`cached.responder.wire.ClientConnection`), naming
    PAM commands in its errors; for tests and tools playing ``pam_sss``."""

    __slots__ = ()

    def __init__(self, max_reply_size: int = wire.DEFAULT_MAX_REPLY_SIZE) -> None:
        super().__init__(max_reply_size, command_name)


def decode_reply(body: bytes | bytearray | memoryview) -> PamReply:
    """The reply body of a PAM command (§1.5). Raises :class:`ProtocolError` where
    ``pam_sss`` would return ``PAM_BUF_ERR``: a body shorter than 8 bytes, an item that
    runs past the end, bytes after the last item."""
    view = memoryview(body).cast("B")
    size = len(view)
    if size < 8:
        raise ProtocolError(f"PAM reply body is {size} bytes, shorter than 8")
    status, count = _I32X2.unpack_from(view, 0)
    if count < 0 or count * 8 > size - 8:
        raise ProtocolError(f"PAM reply claims {count} items in {size} bytes")
    pos = 8
    items = []
    for _ in range(count):
        if size - pos < 8:
            raise ProtocolError(f"PAM reply item header truncated at {pos}")
        kind, length = _U32X2.unpack_from(view, pos)
        pos += 8
        if length > size - pos:
            raise ProtocolError(f"PAM reply item {kind} of {length} bytes runs past the end")
        items.append(ReplyItem(kind, bytes(view[pos : pos + length])))
        pos += length
    if pos != size:
        raise ProtocolError(f"PAM reply has {size - pos} bytes after the last item")
    return PamReply(status, tuple(items))


def decode_version(body: bytes | bytearray | memoryview) -> int:
    """The version in a GET_VERSION reply body (``u32``)."""
    if len(body) != 4:
        raise ProtocolError(f"version reply body is {len(body)} bytes, not 4")
    version: int = _U32.unpack_from(body, 0)[0]
    return version
