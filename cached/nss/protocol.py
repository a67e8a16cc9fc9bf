"""SSSD's NSS socket protocol as a sans-IO codec: bytes in, values out.

The shape follows h11 (docs/CONTRIBUTING.md, Style): :class:`ServerConnection` buffers
what the socket delivered (``receive_data``) and hands out one parsed request at a time
(``next_request``) or :data:`NEED_DATA`; reply encoders turn values into bytes. There are
no sockets, clocks or tasks here, so every edge case is a unit test and the codec can be
fuzzed. :class:`ClientConnection` and the ``decode_*`` functions are the same protocol from
the client's side, for ``cached id`` / ``cached getent`` and for tests.

Wire format (reference §1.2): a 16-byte header of four host-endian
``uint32`` (``len`` incl. header, ``cmd``, ``status``, ``reserved``) then the body. Every
integer on this socket is host-endian because client and server are on the same machine:
all packing here uses ``struct``'s ``"="`` (native byte order, standard 4-byte ``I``, no
alignment padding) or an ``array`` whose item size is checked to be 4 bytes.

What a peer's mistake does (server side)
----------------------------------------

======================================================  ==================================
Request                                                 Outcome
======================================================  ==================================
length field < 16 (cannot hold the header)              close: :class:`ProtocolError`
length field > 1024 (``MAX_REQUEST_SIZE``)              close: :class:`ProtocolError`
command not served (unknown to SSSD, or one we do not   close: :class:`ProtocolError`
implement: ``_EX``, idmap, hosts, ...)
header ``status`` / ``reserved`` not 0                  ignored (never interpreted)
GET_VERSION body not exactly 4 bytes                    EINVAL: :class:`BadRequest`
GET_VERSION with a version other than 1                 served: the reply is still 1
by-name body without the final NUL (incl. empty body)   EINVAL
by-name: empty name (body ``"\\0"``)                    EINVAL
by-name: NUL before the final one                       EINVAL
by-name: name longer than 256 bytes (excl. the NUL)     EINVAL
by-name: name not valid UTF-8                           EINVAL
by-id body not exactly 4 bytes                          EINVAL
GET*ENT body not exactly 4 bytes                        EINVAL
SET*ENT / END*ENT body not empty                        EINVAL
a request before GET_VERSION                            served (not enforced)
======================================================  ==================================

* "close" follows SSSD: on an unknown command or malformed framing the responder simply
  closes the connection (§1.2). Framing errors are detected as soon as the offending
  header field has arrived (4 bytes for the length, 8 for the command), so a hostile
  peer can never make us buffer more than one capped request.
* "EINVAL" follows SSSD's body validation (§1.5): a framed request whose body is wrong is
  answered with a header-only reply whose status is EINVAL, and the connection stays
  usable (the real client closes it anyway after any non-zero status, §1.7).
* Where §1.5 is silent (embedded NUL, over-long name, GET*ENT size consequence,
  non-empty SET*/END* body, GET_VERSION body size) we answer EINVAL rather than guess:
  the request is framed, so the connection can continue, and refusing bodies that the
  real ``libnss_sss`` never sends cannot break it, whereas accepting them would mean
  interpreting bytes whose meaning no client defined (e.g. a C server would silently
  truncate ``"root\\0x"`` to ``"root"``).

After :class:`ProtocolError` a :class:`ServerConnection` is *dead*: its buffer is
released and every later ``receive_data``/``next_request`` raises :class:`ProtocolError`
again. The caller closes the socket.
"""

from __future__ import annotations

import errno as _errno
import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Final, Literal, NoReturn, TypeAlias, TypeVar

from cached.model import GroupEntry, PasswdEntry, User
from cached.responder import wire
from cached.responder.wire import (
    DEFAULT_MAX_REPLY_SIZE,
    HEADER_SIZE,
    MAX_REQUEST_SIZE,
    NEED_DATA,
    NeedData,
    ProtocolError,
    Reply,
    encode_request,
)

__all__ = [
    "DEFAULT_MAX_REPLY_SIZE",
    "EINVAL",
    "GETENT_MAX_ENTRIES",
    "HEADER_SIZE",
    "MAX_NAME_BYTES",
    "MAX_REQUEST_SIZE",
    "MIN_GROUP_RECORD_SIZE",
    "MIN_PASSWD_RECORD_SIZE",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "SERVED_COMMANDS",
    "BadRequest",
    "ById",
    "ByName",
    "ClientConnection",
    "Command",
    "EndEnt",
    "GetEnt",
    "GetVersion",
    "GroupEntry",
    "NeedData",
    "PasswdEntry",
    "ProtocolError",
    "Reply",
    "Request",
    "ServerConnection",
    "SetEnt",
    "command_name",
    "decode_group",
    "decode_initgr",
    "decode_passwd",
    "decode_passwd_entries",
    "decode_version",
    "empty_reply",
    "encode_group",
    "encode_group_record",
    "encode_passwd_record",
    "encode_request",
    "error_reply",
    "getent_body",
    "group_reply",
    "id_body",
    "initgr_reply",
    "members_blob",
    "name_body",
    "not_found_reply",
    "passwd_reply",
    "version_body",
    "version_reply",
]

# --------------------------------------------------------------------------- limits

# HEADER_SIZE and MAX_REQUEST_SIZE (1024: the largest legitimate NSS request is a
# by-name lookup, 16 + 256 + 1 = 273 bytes) are the shared framing's (responder/wire.py).

#: ``LOGIN_NAME_MAX``: the client never sends a name longer than 256 bytes (§1.5). The
#: limit counts the name's bytes without the terminating NUL, as the reference words it.
MAX_NAME_BYTES: Final = 256

#: The only NSS protocol version ("2008-09-05, \\0 terminated strings"); the client accepts
#: an exact match only (§1.3).
PROTOCOL_VERSION: Final = 1

#: ``max_entries`` that libnss_sss always sends with GET*ENT (§1.5); SSSD ignores it.
GETENT_MAX_ENTRIES: Final = 256

#: Smallest records the client accepts (§1.6): passwd is uid, gid and five NULs; the
#: client rejects a group record with fewer than 11 bytes left (see encode_group_record).
MIN_PASSWD_RECORD_SIZE: Final = 13
MIN_GROUP_RECORD_SIZE: Final = 11


#: Status for a framed request with a bad body (§1.5). Statuses are errno values of the
#: host, like the integers are host-endian: client and server share the machine (§1.7).
EINVAL: Final = _errno.EINVAL

# ------------------------------------------------------------------------- packing

# "=" is native byte order with standard sizes and no alignment: exactly the host-endian
# packed uint32 of §1.2 ("@" could insert padding, "<" would be wrong on big-endian hosts).
_U32: Final = wire.U32
_U32X2: Final = struct.Struct("=2I")
_HEADER: Final = wire.HEADER
# header + the ``num_results, reserved`` prefix of every lookup reply (§1.6)
_HEADER_PREFIX: Final = struct.Struct("=6I")
_PREFIX_SIZE: Final = 8
_U32_MAX: Final = 0xFFFFFFFF

# array typecode holding a host-endian uint32 (initgroups gid lists, §1.6)
_U32_TYPECODE: Final[Literal["I", "L"]] = "I" if array("I").itemsize == 4 else "L"
if array(_U32_TYPECODE).itemsize != 4:  # pragma: no cover - no such CPython platform
    raise ImportError("cached.nss.protocol needs a 4-byte unsigned array typecode")


# ------------------------------------------------------------------------ commands


class Command(IntEnum):
    """Command codes (§1.4). Only :data:`SERVED_COMMANDS` are answered; the others are
    named so that logs can say what a client asked for."""

    GET_VERSION = 0x0001
    GETPWNAM = 0x0011
    GETPWUID = 0x0012
    SETPWENT = 0x0013
    GETPWENT = 0x0014
    ENDPWENT = 0x0015
    GETPWNAM_EX = 0x0019
    GETPWUID_EX = 0x001A
    GETGRNAM = 0x0021
    GETGRGID = 0x0022
    SETGRENT = 0x0023
    GETGRENT = 0x0024
    ENDGRENT = 0x0025
    INITGR = 0x0026
    SETNETGRENT = 0x0061
    GETNETGRENT = 0x0062  # not served: SSSD 2.8.2 answers all at SETNETGRENT
    ENDNETGRENT = 0x0063  # not served, as SSSD 2.8.2
    GETGRNAM_EX = 0x0029
    GETGRGID_EX = 0x002A
    INITGR_EX = 0x002E
    GETSIDBYNAME = 0x0111
    GETSIDBYID = 0x0112
    GETNAMEBYSID = 0x0113
    GETIDBYSID = 0x0114
    GETORIGBYNAME = 0x0115
    GETNAMEBYCERT = 0x0116
    GETLISTBYCERT = 0x0117
    GETSIDBYUID = 0x0118
    GETSIDBYGID = 0x0119
    GETORIGBYUSERNAME = 0x011A
    GETORIGBYGROUPNAME = 0x011B
    GET_SUBID_RANGES = 0x0130


BY_NAME_COMMANDS: Final = frozenset(
    {Command.GETPWNAM, Command.GETGRNAM, Command.INITGR, Command.SETNETGRENT}
)
BY_ID_COMMANDS: Final = frozenset({Command.GETPWUID, Command.GETGRGID})
SETENT_COMMANDS: Final = frozenset({Command.SETPWENT, Command.SETGRENT})
GETENT_COMMANDS: Final = frozenset({Command.GETPWENT, Command.GETGRENT})
ENDENT_COMMANDS: Final = frozenset({Command.ENDPWENT, Command.ENDGRENT})
#: What libnss_sss sends for passwd and group (§1.4: 0x01, 0x11-0x15, 0x21-0x26), and
#: SETNETGRENT (0x61): libnss_sss 2.8.2 sends no GETNETGRENT or ENDNETGRENT, and
#: SSSD's responder serves neither (closes, as on any command it does not serve).
SERVED_COMMANDS: Final = frozenset(
    {Command.GET_VERSION}
    | BY_NAME_COMMANDS
    | BY_ID_COMMANDS
    | SETENT_COMMANDS
    | GETENT_COMMANDS
    | ENDENT_COMMANDS
)
#: Commands whose reply body must start with ``num_results, reserved``; a header-only
#: status-0 reply to one of them makes the calling process abort (§1.7).
LOOKUP_COMMANDS: Final = BY_NAME_COMMANDS | BY_ID_COMMANDS | GETENT_COMMANDS
_PASSWD_REPLY_COMMANDS: Final = frozenset({Command.GETPWNAM, Command.GETPWUID, Command.GETPWENT})
_GROUP_REPLY_COMMANDS: Final = frozenset({Command.GETGRNAM, Command.GETGRGID, Command.GETGRENT})

# int -> member, for the parser: one dict probe both validates and converts.
_SERVED_BY_VALUE: Final[dict[int, Command]] = {int(c): c for c in SERVED_COMMANDS}


command_name: Final = wire.command_namer(Command)


# ----------------------------------------------------------------------- errors


# ProtocolError, NeedData and NEED_DATA are the shared framing's (responder/wire.py).


# ---------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class GetVersion:
    """GET_VERSION. SSSD answers 1 whatever ``version`` the client expects (§1.3)."""

    version: int
    cmd: ClassVar[Command] = Command.GET_VERSION


@dataclass(frozen=True, slots=True)
class ByName:
    """GETPWNAM, GETGRNAM or INITGR; ``name`` is validated (non-empty UTF-8, ≤ 256 bytes,
    no NUL)."""

    cmd: Command
    name: str


@dataclass(frozen=True, slots=True)
class ById:
    """GETPWUID or GETGRGID."""

    cmd: Command
    id: int


@dataclass(frozen=True, slots=True)
class SetEnt:
    """SETPWENT or SETGRENT: answer with :func:`empty_reply`."""

    cmd: Command


@dataclass(frozen=True, slots=True)
class GetEnt:
    """GETPWENT or GETGRENT. ``max_entries`` is what the client asked for (always 256);
    SSSD ignores it and the client accepts any batch size (§1.6)."""

    cmd: Command
    max_entries: int


@dataclass(frozen=True, slots=True)
class EndEnt:
    """ENDPWENT or ENDGRENT: answer with :func:`empty_reply`."""

    cmd: Command


@dataclass(frozen=True, slots=True)
class BadRequest:
    """A framed request with an invalid body. Answer ``error_reply(cmd, errno)``; the
    connection stays usable. ``reason`` is for logs only."""

    cmd: Command
    errno: int
    reason: str


Request: TypeAlias = GetVersion | ByName | ById | SetEnt | GetEnt | EndEnt | BadRequest


def _bad(cmd: Command, reason: str) -> BadRequest:
    return BadRequest(cmd, EINVAL, reason)


def _parse_name(cmd: Command, body: bytes) -> ByName | BadRequest:
    # §1.5: must end in NUL, be valid UTF-8 and non-empty, else EINVAL. The client never
    # sends more than LOGIN_NAME_MAX (§1.5); the request cap alone would allow 1007.
    # A NUL inside (reference silent) is refused, see wire.nul_terminated.
    try:
        name = wire.nul_terminated(body, "name", empty=False, max_bytes=MAX_NAME_BYTES)
    except ValueError as e:
        return _bad(cmd, str(e))
    return ByName(cmd, name)


def _parse_body(cmd: Command, body: bytes) -> Request:
    if cmd in BY_NAME_COMMANDS:
        return _parse_name(cmd, body)
    if cmd in BY_ID_COMMANDS:
        if len(body) != 4:  # §1.5: exactly 4 bytes, else EINVAL
            return _bad(cmd, f"id body is {len(body)} bytes, not 4")
        return ById(cmd, _U32.unpack(body)[0])
    if cmd in GETENT_COMMANDS:
        if len(body) != 4:  # §1.5: exactly 4 bytes; EINVAL like the by-id bodies
            return _bad(cmd, f"getent body is {len(body)} bytes, not 4")
        return GetEnt(cmd, _U32.unpack(body)[0])
    if cmd in SETENT_COMMANDS:
        if body:  # §1.5: empty. Nothing defines extra bytes; refuse them
            return _bad(cmd, f"setent body is {len(body)} bytes, not empty")
        return SetEnt(cmd)
    if cmd in ENDENT_COMMANDS:
        if body:
            return _bad(cmd, f"endent body is {len(body)} bytes, not empty")
        return EndEnt(cmd)
    # GET_VERSION (the only other served command): body u32 expected version (§1.3)
    if len(body) != 4:
        return _bad(cmd, f"version body is {len(body)} bytes, not 4")
    return GetVersion(_U32.unpack(body)[0])


T = TypeVar("T")


class ServerConnection:
    """One client connection as the responder sees it.

    Feed whatever the socket delivered to :meth:`receive_data`, then call
    :meth:`next_request` until it returns :data:`NEED_DATA`. The client never pipelines
    (§1.1), but fragments and several requests in one buffer are handled. When
    :meth:`next_request` returns :data:`NEED_DATA` fewer than ``MAX_REQUEST_SIZE`` bytes
    are buffered, so a server that drains after every read buffers at most that plus
    one read.

    :class:`ProtocolError` means "close the connection"; the object is then dead.
    """

    __slots__ = ("_buf", "_error")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._error: ProtocolError | None = None

    @property
    def dead(self) -> bool:
        """True after a :class:`ProtocolError`; the connection must be closed."""
        return self._error is not None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a request."""
        return len(self._buf)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the socket."""
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        self._buf += data

    def next_request(self) -> Request | NeedData:
        """The next complete request, or :data:`NEED_DATA`.

        Raises :class:`ProtocolError` for a length field outside 16..1024 or a command
        that is not served (the connection is then dead).
        """
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        buf = self._buf
        try:
            framed = wire.request_frame(buf, _SERVED_BY_VALUE, command_name)
        except ProtocolError as e:
            self._fail(str(e), e.cmd)
        if isinstance(framed, NeedData):
            return NEED_DATA
        cmd, length = framed
        body = bytes(buf[HEADER_SIZE:length])
        del buf[:length]
        return _parse_body(cmd, body)

    def take_known(self, known: Mapping[bytes, T]) -> T | None:
        """If the buffer holds exactly one request whose bytes are a key of ``known``
        (requests this codec parsed before, as :func:`lookup_frame` gives them), take it
        and return its value; else None, the buffer untouched (:meth:`next_request`).

        The warm path of a lookup asked again and again (the getgrgid calls of `id`):
        the request's bytes are its key, with no frame read, body cut or request
        object built for it (perf/warmsocket.py)."""
        buf = self._buf
        if len(buf) <= HEADER_SIZE or self._error is not None:
            return None
        got = known.get(bytes(buf))
        if got is not None:
            buf.clear()
        return got

    def _fail(self, message: str, cmd: int | None = None) -> NoReturn:
        error = ProtocolError(message, cmd)
        self._error = error
        self._buf = bytearray()  # a dead connection holds on to nothing
        raise error


# ------------------------------------------------------------------------ replies

_VERSION_REPLY: Final = _HEADER.pack(HEADER_SIZE + 4, Command.GET_VERSION, 0, 0) + _U32.pack(
    PROTOCOL_VERSION
)
# Precomputed: these replies depend on the command only.
_EMPTY_REPLIES: Final[dict[int, bytes]] = {
    int(c): _HEADER.pack(HEADER_SIZE, c, 0, 0) for c in SETENT_COMMANDS | ENDENT_COMMANDS
}
_NOT_FOUND_REPLIES: Final[dict[int, bytes]] = {
    int(c): _HEADER_PREFIX.pack(HEADER_SIZE + _PREFIX_SIZE, c, 0, 0, 0, 0) for c in LOOKUP_COMMANDS
}


def lookup_frame(req: ByName | ById) -> bytes:
    """The bytes libnss_sss sends for ``req`` (header, then body; §1.2, §1.5)."""
    if isinstance(req, ById):
        return encode_request(req.cmd, _U32.pack(req.id))
    return encode_request(req.cmd, req.name.encode("utf-8") + b"\0")


def version_reply() -> bytes:
    """Reply to GET_VERSION: always version 1, status 0 (§1.3)."""
    return _VERSION_REPLY


def error_reply(cmd: int, errno: int) -> bytes:
    """Header-only reply with ``status = errno`` (§1.2, §1.7).

    The client maps EAGAIN to TRYAGAIN and any other status to UNAVAIL, then closes the
    connection. ``errno`` must be non-zero: a header-only status-0 reply to a lookup makes
    the calling process abort (§1.7); use :func:`not_found_reply` for "does not exist".
    """
    if not 0 < errno <= _U32_MAX:
        raise ValueError(f"error status must be a non-zero errno, got {errno}")
    return _HEADER.pack(HEADER_SIZE, cmd, errno, 0)


def empty_reply(cmd: int) -> bytes:
    """Header-only status-0 reply, for SET*ENT and END*ENT only (§1.6)."""
    try:
        return _EMPTY_REPLIES[cmd]
    except KeyError:
        # A body-less success to a lookup aborts the client (§1.7): refuse to build one.
        raise ValueError(f"empty_reply is for SET*ENT/END*ENT, not {command_name(cmd)}") from None


def not_found_reply(cmd: int) -> bytes:
    """ "Not found" for a lookup: status 0, body ``num_results=0, reserved=0`` (§1.6, §1.7).

    Also the end of an enumeration (GET*ENT) and an unknown user for INITGR. Never a
    zero-length body: that aborts the client (§1.7).
    """
    try:
        return _NOT_FOUND_REPLIES[cmd]
    except KeyError:
        raise ValueError(f"not_found_reply is for lookups, not {command_name(cmd)}") from None


def _lookup_reply(cmd: int, records: Sequence[bytes]) -> bytes:
    n = len(records)
    try:
        if n == 1:  # the by-name / by-id case: one concatenation
            record = records[0]
            return _HEADER_PREFIX.pack(24 + len(record), cmd, 0, 0, 1, 0) + record
        size = 24 + sum(map(len, records))
        return b"".join((_HEADER_PREFIX.pack(size, cmd, 0, 0, n, 0), *records))
    except struct.error as exc:
        raise ValueError(f"{command_name(cmd)} reply does not fit a uint32 length") from exc


def passwd_reply(cmd: int, records: Sequence[bytes]) -> bytes:
    """Reply to GETPWNAM / GETPWUID / GETPWENT with pre-encoded passwd records.

    By-name and by-id replies take at most one record (the client answers more with
    TRYAGAIN/EBADMSG, §1.6); zero records is the "not found" reply.
    """
    if cmd not in _PASSWD_REPLY_COMMANDS:
        raise ValueError(f"passwd_reply is not for {command_name(cmd)}")
    if len(records) > 1 and cmd != Command.GETPWENT:
        raise ValueError(f"{command_name(cmd)} must return at most one record (§1.6)")
    return _lookup_reply(cmd, records)


def group_reply(cmd: int, records: Sequence[bytes]) -> bytes:
    """Reply to GETGRNAM / GETGRGID / GETGRENT with pre-encoded group records.

    Same rules as :func:`passwd_reply`.
    """
    if cmd not in _GROUP_REPLY_COMMANDS:
        raise ValueError(f"group_reply is not for {command_name(cmd)}")
    if len(records) > 1 and cmd != Command.GETGRENT:
        raise ValueError(f"{command_name(cmd)} must return at most one record (§1.6)")
    return _lookup_reply(cmd, records)


def _nul_error(kind: str, **fields: str) -> ValueError:
    bad = [k for k, v in fields.items() if "\0" in v]
    return ValueError(f"{kind} field(s) {', '.join(bad)} contain NUL")


def encode_passwd_record(
    uid: int, gid: int, name: str, passwd: str, gecos: str, home: str, shell: str
) -> bytes:
    """``u32 uid, u32 gid, name\\0 passwd\\0 gecos\\0 home\\0 shell\\0`` (§1.6), ≥ 13 bytes.

    Strings are UTF-8. Raises ValueError for a string containing NUL (it would shift
    every later field) or an id outside uint32.
    """
    # One join yields every terminator (the trailing "" adds the last NUL) and lets a
    # single count() prove no field carried its own NUL.
    text = "\0".join((name, passwd, gecos, home, shell, ""))
    if text.count("\0") != 5:
        raise _nul_error("passwd", name=name, passwd=passwd, gecos=gecos, home=home, shell=shell)
    try:
        ids = _U32X2.pack(uid, gid)
    except struct.error as exc:
        raise ValueError(f"uid {uid} / gid {gid} must be uint32") from exc
    return ids + text.encode("utf-8")


def members_blob(members: Sequence[str]) -> bytes:
    """The ``m1\\0m2\\0...mn\\0`` form :func:`encode_group_record` takes (b"" for none).

    The cache stores member lists this way so that answering a 5,000-member group is a
    concatenation, not 5,000 encodes. Raises ValueError for an empty name or one
    containing NUL.
    """
    if not members:
        return b""
    text = "\0".join(members)
    if text.count("\0") != len(members) - 1:
        raise ValueError("a group member name contains NUL")
    if "" in members:
        raise ValueError("a group member name is empty")
    return (text + "\0").encode("utf-8")


def encode_group_record(
    gid: int, name: str, passwd: str, members_count: int, members_blob: bytes
) -> bytes:
    """``u32 gid, u32 num_members, name\\0 passwd\\0 member_1\\0 ... member_n\\0`` (§1.6).

    ``members_blob`` is the already NUL-joined member list (see :func:`members_blob`).
    It must hold exactly ``members_count`` non-empty NUL-terminated names; that is
    checked with C-speed byte scans because a mismatch makes the client misread the
    record. Raises ValueError for NUL in ``name``/``passwd``, an id outside uint32, or a
    record under the client's 11-byte minimum (§1.6; only empty name *and* passwd with no
    members is that short).
    """
    head = "\0".join((name, passwd, ""))
    if head.count("\0") != 2:
        raise _nul_error("group", name=name, passwd=passwd)
    if (
        members_blob.count(b"\0") != members_count
        or members_blob[-1:] not in (b"\0", b"")  # not NUL-terminated (b"" iff count 0)
        or members_blob[:1] == b"\0"  # empty first name
        or b"\0\0" in members_blob  # empty later name
    ):
        raise ValueError(
            f"members_blob does not hold exactly {members_count} non-empty NUL-terminated names"
        )
    try:
        ids = _U32X2.pack(gid, members_count)
    except struct.error as exc:
        raise ValueError(f"gid {gid} must be uint32") from exc
    head_bytes = head.encode("utf-8")
    if 8 + len(head_bytes) + len(members_blob) < MIN_GROUP_RECORD_SIZE:
        raise ValueError("group record below the client's 11-byte minimum (§1.6)")
    return b"".join((ids, head_bytes, members_blob))


def encode_group(gid: int, name: str, passwd: str, members: Sequence[str]) -> bytes:
    """Convenience: :func:`encode_group_record` from a list of member names."""
    return encode_group_record(gid, name, passwd, len(members), members_blob(members))


#: The kinds of SETNETGRENT entries (``SSS_NETGR_REP_TRIPLE``, ``SSS_NETGR_REP_GROUP``).
NETGR_TRIPLE: Final = 1
NETGR_GROUP: Final = 2


def netgroup_reply(triples: Sequence[tuple[str, str, str]], members: Sequence[str]) -> bytes:
    """SETNETGRENT's answer for a netgroup found (``sss_nss_protocol_fill_netgrent``):
    ``num_results`` is 1 (the netgroup) plus one per entry, then each triple as ``u32
    1, host\0, user\0, domain\0`` ("" for an empty field) and each member netgroup as
    ``u32 2, name\0``. ValueError for a NUL inside a string or an empty member name."""
    parts = []
    for triple in triples:
        if "\0" in "".join(triple):
            raise ValueError("NUL inside a netgroup triple")
        parts.append(_U32.pack(NETGR_TRIPLE) + "\0".join(triple).encode("utf-8") + b"\0")
    for name in members:
        if not name or "\0" in name:
            raise ValueError(f"netgroup member {name!r} is empty or holds a NUL")
        parts.append(_U32.pack(NETGR_GROUP) + name.encode("utf-8") + b"\0")
    body = b"".join(parts)
    count = 1 + len(triples) + len(members)
    return (
        _HEADER_PREFIX.pack(
            HEADER_SIZE + _PREFIX_SIZE + len(body), Command.SETNETGRENT, 0, 0, count, 0
        )
        + body
    )


def decode_netgroup(body: bytes) -> list[tuple[str, str, str] | str]:
    """The entries of a SETNETGRENT answer (triples, and member names as ``str``);
    [] for "not found". ProtocolError where libnss_sss would fail it."""
    n = _prefix(body, "netgroup")
    if n == 0:
        return []
    out: list[tuple[str, str, str] | str] = []
    pos = _PREFIX_SIZE
    for _ in range(n - 1):
        if len(body) - pos < 4:
            raise ProtocolError("netgroup entry truncated")
        kind = _U32.unpack_from(body, pos)[0]
        pos += 4
        if kind == NETGR_TRIPLE:
            host, pos = _cstr(body, pos, "host")
            user, pos = _cstr(body, pos, "user")
            domain, pos = _cstr(body, pos, "domain")
            out.append((host, user, domain))
        elif kind == NETGR_GROUP:
            name, pos = _cstr(body, pos, "netgroup")
            out.append(name)
        else:
            raise ProtocolError(f"netgroup entry of type {kind}")
    return out


def initgr_reply(gids: Sequence[int] | bytes | bytearray | memoryview | array[int]) -> bytes:
    """Reply to INITGR: ``u32 num_results, u32 reserved, num_results × u32 gid`` (§1.6).

    ``gids`` is either a sequence of ints or already packed host-endian uint32s
    (``bytes``/``bytearray``/``memoryview`` whose size is a multiple of 4, or an unsigned
    4-byte ``array``), which is copied once into the reply. No trailing spare zero u32 is
    written: SSSD 2.8.2 adds one, HEAD trims it, and the client reads ``num_results``
    gids only (§1.6). Gids are sent as given (no de-duplication, the primary gid is not
    added or removed: glibc dedupes, §1.6). An empty list is the "unknown user" reply.
    """
    payload: bytes | bytearray | memoryview | array[int]
    if isinstance(gids, array):
        if gids.itemsize != 4 or gids.typecode not in ("I", "L"):
            raise ValueError(f"gid array must hold 4-byte unsigned ints, not {gids.typecode!r}")
        payload = gids
        n = len(gids)
    elif isinstance(gids, (bytes, bytearray, memoryview)):
        nbytes = gids.nbytes if isinstance(gids, memoryview) else len(gids)
        if nbytes % 4:
            raise ValueError(f"packed gids are {nbytes} bytes, not a multiple of 4")
        payload = gids
        n = nbytes // 4
    else:
        try:
            payload = array(_U32_TYPECODE, gids)
        except OverflowError as exc:
            raise ValueError("every gid must be a uint32") from exc
        n = len(payload)
    try:
        prefix = _HEADER_PREFIX.pack(24 + 4 * n, Command.INITGR, 0, 0, n, 0)
    except struct.error as exc:
        raise ValueError("initgroups reply does not fit a uint32 length") from exc
    return b"".join((prefix, payload))


# ------------------------------------------------------------------ client side


def version_body(version: int = PROTOCOL_VERSION) -> bytes:
    """GET_VERSION body: ``u32 expected`` (§1.3)."""
    return _U32.pack(version)


def name_body(name: str) -> bytes:
    """By-name body ``name\\0`` (§1.5). Raises ValueError for what the real client never
    sends: an empty name, a NUL in it, more than 256 bytes."""
    raw = name.encode("utf-8")
    if not raw or b"\0" in raw or len(raw) > MAX_NAME_BYTES:
        raise ValueError(
            f"name must be 1..{MAX_NAME_BYTES} UTF-8 bytes without NUL, got {len(raw)} bytes"
        )
    return raw + b"\0"


def id_body(n: int) -> bytes:
    """By-id body ``u32 id`` (§1.5)."""
    try:
        return _U32.pack(n)
    except struct.error as exc:
        raise ValueError(f"id {n} must be uint32") from exc


def getent_body(max_entries: int = GETENT_MAX_ENTRIES) -> bytes:
    """GET*ENT body ``u32 max_entries``; the real client always sends 256 (§1.5)."""
    return _U32.pack(max_entries)


class ClientConnection(wire.ClientConnection):
    """The NSS client's side (:class:`cached.responder.wire.ClientConnection`), naming
    NSS commands in its errors."""

    __slots__ = ()

    def __init__(self, max_reply_size: int = DEFAULT_MAX_REPLY_SIZE) -> None:
        super().__init__(max_reply_size, command_name)


# ---------------------------------------------------------------------- decoders


def _prefix(body: bytes, what: str) -> int:
    # Every lookup reply starts with num_results, reserved (§1.6); a shorter body is the
    # reply that makes the real client abort (§1.7).
    if len(body) < _PREFIX_SIZE:
        raise ProtocolError(f"{what} reply body is {len(body)} bytes, shorter than 8")
    num: int = _U32.unpack_from(body, 0)[0]
    return num


def _cstr(body: bytes, pos: int, what: str) -> tuple[str, int]:
    end = body.find(b"\0", pos)
    if end < 0:
        raise ProtocolError(f"{what} reply truncated: unterminated string at {pos}")
    try:
        return body[pos:end].decode("utf-8"), end + 1
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} reply: string at {pos} is not UTF-8") from exc


def decode_passwd_entries(body: bytes) -> list[PasswdEntry]:
    """Records of a status-0 GETPW* reply body.

    Raises :class:`ProtocolError` on truncation, invalid UTF-8 or bytes after the last
    record (records are back-to-back with nothing after them, §1.6).
    """
    num = _prefix(body, "passwd")
    size = len(body)
    # Bound the loop before running it: a corrupt num_results must not spin 2**32 times.
    if num * MIN_PASSWD_RECORD_SIZE > size - _PREFIX_SIZE:
        raise ProtocolError(f"passwd reply truncated: {num} records cannot fit {size} bytes")
    out: list[PasswdEntry] = []
    pos = _PREFIX_SIZE
    for _ in range(num):
        if size - pos < MIN_PASSWD_RECORD_SIZE:
            raise ProtocolError(f"passwd reply truncated at {pos}")
        uid, gid = _U32X2.unpack_from(body, pos)
        pos += 8
        name, pos = _cstr(body, pos, "passwd")
        passwd, pos = _cstr(body, pos, "passwd")
        gecos, pos = _cstr(body, pos, "passwd")
        home, pos = _cstr(body, pos, "passwd")
        shell, pos = _cstr(body, pos, "passwd")
        out.append(PasswdEntry(name, passwd, uid, gid, gecos, home, shell))
    if pos != size:
        raise ProtocolError(f"passwd reply has {size - pos} bytes after the last record")
    return out


def decode_passwd(body: bytes) -> list[User]:
    """Users of a status-0 GETPW* reply body (see :func:`decode_passwd_entries`)."""
    return [entry.to_user() for entry in decode_passwd_entries(body)]


def decode_group(body: bytes) -> list[GroupEntry]:
    """Records of a status-0 GETGR* reply body, members in wire order.

    Raises :class:`ProtocolError` on truncation (including a record with fewer than the
    client's minimum 11 bytes left, §1.6), invalid UTF-8 or trailing bytes.
    """
    num = _prefix(body, "group")
    size = len(body)
    if num * MIN_GROUP_RECORD_SIZE > size - _PREFIX_SIZE:
        raise ProtocolError(f"group reply truncated: {num} records cannot fit {size} bytes")
    out: list[GroupEntry] = []
    pos = _PREFIX_SIZE
    for _ in range(num):
        if size - pos < MIN_GROUP_RECORD_SIZE:
            raise ProtocolError(f"group reply truncated at {pos}")
        gid, count = _U32X2.unpack_from(body, pos)
        pos += 8
        name, pos = _cstr(body, pos, "group")
        passwd, pos = _cstr(body, pos, "group")
        if count > size - pos:  # each member is at least its NUL
            raise ProtocolError(f"group reply truncated: {count} members at {pos}")
        members = []
        for _ in range(count):
            member, pos = _cstr(body, pos, "group")
            members.append(member)
        out.append(GroupEntry(name, passwd, gid, tuple(members)))
    if pos != size:
        raise ProtocolError(f"group reply has {size - pos} bytes after the last record")
    return out


def decode_initgr(body: bytes) -> list[int]:
    """Gids of a status-0 INITGR reply body.

    Bytes after ``num_results`` gids are ignored, as the client does: SSSD 2.8.2 sends a
    spare zero u32 there (§1.6).
    """
    num = _prefix(body, "initgroups")
    end = _PREFIX_SIZE + 4 * num
    if len(body) < end:
        raise ProtocolError(f"initgroups reply truncated: {num} gids need {end} bytes")
    gids = array(_U32_TYPECODE)
    gids.frombytes(body[_PREFIX_SIZE:end])
    return gids.tolist()


def decode_version(body: bytes) -> int:
    """The version in a status-0 GET_VERSION reply body (``u32``, §1.3)."""
    if len(body) != 4:
        raise ProtocolError(f"version reply body is {len(body)} bytes, not 4")
    version: int = _U32.unpack(body)[0]
    return version
