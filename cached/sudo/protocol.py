"""SSSD's sudo socket protocol as a sans-IO codec: bytes in, values out.

The client is Debian's ``libsss_sudo.so`` (libsss-sudo), which sudo's sudoers plugin
dlopens for ``sudoers: sss`` in nsswitch.conf. Summarised from SSSD 2.8.2
(``src/sss_client/sudo/sss_sudo.c``, ``sss_sudo_response.c``,
``src/responder/sudo/sudosrv_cmd.c``, ``sudosrv_query.c``). The framing is the NSS
socket's (``cached.responder.wire``): a 16-byte header of host-endian ``len, cmd,
status, reserved``, requests of at most 1024 bytes.

* ``GET_VERSION`` (0x0001): the client sends the version it expects (1) and accepts
  only that answer; SSSD answers 1 whatever is asked (its one version, "2012-05-14,
  require uid and domain"), and so do we.
* ``GET_SUDORULES`` (0x00C1) and ``GET_DEFAULTS`` (0x00C2): body ``uid_t uid`` then the
  user's name, NUL-terminated (``username[@domain]``).
* The reply body: ``u32 error``; when it is 0 (``SSS_SUDO_ERROR_OK``), ``string domain``
  (always the empty string: deprecated, the client reads and drops it), ``u32 nrules``,
  and per rule ``u32 nattrs``, per attribute ``string name, u32 nvalues`` and the
  values, each a NUL-terminated string. The header's status is 0 even when ``error``
  is not (``sudosrv_cmd_send_reply``); a non-zero error ends the body.

What a peer's mistake does (server side)
----------------------------------------

=================================================  =======================================
Request                                            Outcome
=================================================  =======================================
length field < 16 or > 1024                        close: :class:`ProtocolError`
command not served                                 close: :class:`ProtocolError`
GET_VERSION, any body                              served: the answer is 1
rules/defaults body shorter than ``uid_t`` + 2     :class:`BadQuery`: error ``EINVAL``
(at least one character and its NUL), name not     in the body (``sudosrv_parse_query``),
NUL-terminated, a NUL inside the name, not UTF-8   the connection stays usable
=================================================  =======================================

A NUL inside the name is refused where SSSD reads up to the first one (``strdup``):
libsss_sudo never sends one, and a C server would take ``"root\\0x"`` as ``root``.
"""

from __future__ import annotations

import enum
import errno
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cached.responder import wire
from cached.responder.wire import (
    HEADER_SIZE,
    MAX_REQUEST_SIZE,
    NEED_DATA,
    NeedData,
    ProtocolError,
)

__all__ = [
    "MAX_REQUEST_SIZE",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "BadQuery",
    "Command",
    "GetVersion",
    "NeedData",
    "ProtocolError",
    "Query",
    "Rule",
    "decode_reply",
    "error_reply",
    "query_body",
    "rules_reply",
    "server_connection",
    "version_reply",
]

#: The one sudo protocol version (``SSS_SUDO_PROTOCOL_VERSION``); version 0 (no uid in
#: the query) is refused by SSSD as insecure and never answered.
PROTOCOL_VERSION: Final = 1

#: ``error`` of a reply that carries rules (``SSS_SUDO_ERROR_OK``).
ERROR_OK: Final = 0

_U32 = struct.Struct("=I")
_HEADER = struct.Struct("=4I")
# uid_t is 32 bits on every Linux ABI; libsss_sudo copies it as sizeof(uid_t).
_UID = struct.Struct("=I")


class Command(enum.IntEnum):
    GET_VERSION = 0x0001
    GET_SUDORULES = 0x00C1
    GET_DEFAULTS = 0x00C2


_SERVED = {c.value: c for c in Command}


command_name: Final = wire.command_namer(Command)


@dataclass(frozen=True, slots=True)
class GetVersion:
    cmd: Command = Command.GET_VERSION


@dataclass(frozen=True, slots=True)
class Query:
    """GET_SUDORULES or GET_DEFAULTS for ``user`` (as sent: ``name[@domain]``) whose
    uid the client says is ``uid``."""

    cmd: Command
    uid: int
    user: str


@dataclass(frozen=True, slots=True)
class BadQuery:
    """A framed rules/defaults request whose body does not parse: answered with
    :func:`error_reply` (``EINVAL``), as SSSD does; ``reason`` is for the log."""

    cmd: Command
    reason: str


Request = GetVersion | Query | BadQuery


def parse_query(cmd: Command, body: bytes | bytearray | memoryview) -> Query | BadQuery:
    """``uid_t uid, name\\0`` (``sudosrv_parse_query``)."""
    view = bytes(body)
    if len(view) < _UID.size + 2:
        return BadQuery(cmd, f"body of {len(view)} bytes holds no uid and name")
    (uid,) = _UID.unpack_from(view, 0)
    try:
        name = wire.nul_terminated(view[_UID.size :], "the name")
    except ValueError as e:
        return BadQuery(cmd, str(e))
    return Query(cmd, uid, name)


def parse_request(cmd: Command, body: bytes | bytearray) -> Request:
    if cmd is Command.GET_VERSION:
        return GetVersion()
    return parse_query(cmd, body)


def server_connection() -> wire.ServerConnection[Command, Request]:
    """One client connection as the sudo responder sees it (the shared framing's
    :class:`~cached.responder.wire.ServerConnection` with this codec's commands):
    :class:`ProtocolError` means the connection is dead (close it)."""
    return wire.ServerConnection(_SERVED, parse_request, command_name)


# ------------------------------------------------------------------------ replies

#: One rule as sent: its attributes in order, each (name, values).
Rule = Sequence[tuple[str, Sequence[str]]]


def _frame(cmd: int, body: bytes) -> bytes:
    return _HEADER.pack(HEADER_SIZE + len(body), cmd, 0, 0) + body


def _cstring(text: str) -> bytes:
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{text!r} contains NUL")
    return data + b"\0"


def version_reply() -> bytes:
    return _frame(Command.GET_VERSION, _U32.pack(PROTOCOL_VERSION))


def error_reply(cmd: int, error: int) -> bytes:
    """A reply whose body is ``u32 error`` alone (``sudosrv_cmd_send_error``): ENOENT
    for a user not found, EINVAL for a query that does not parse."""
    if error == ERROR_OK:
        raise ValueError("an error reply needs a non-zero error")
    return _frame(cmd, _U32.pack(error))


def rules_reply(cmd: int, rules: Sequence[Rule]) -> bytes:
    """``u32 0, "" , u32 nrules`` then the rules (``sudosrv_build_response``)."""
    parts = [_U32.pack(ERROR_OK), b"\0", _U32.pack(len(rules))]
    for rule in rules:
        parts.append(_U32.pack(len(rule)))
        for name, values in rule:
            parts.append(_cstring(name))
            parts.append(_U32.pack(len(values)))
            parts.extend(_cstring(v) for v in values)
    return _frame(cmd, b"".join(parts))


# ------------------------------------------------------------------- client side


def query_body(uid: int, user: str) -> bytes:
    """The body libsss_sudo sends (``sss_sudo_create_query``)."""
    return _UID.pack(uid) + _cstring(user)


@dataclass(frozen=True, slots=True)
class Reply:
    error: int
    rules: list[list[tuple[str, list[str]]]]


def decode_reply(body: bytes) -> Reply:
    """A reply body as ``sss_sudo_parse_response`` reads it; ValueError when it is
    truncated or malformed."""
    pos = 0

    def u32() -> int:
        nonlocal pos
        if pos + 4 > len(body):
            raise ValueError("truncated reply")
        (v,) = _U32.unpack_from(body, pos)
        pos += 4
        return int(v)

    def string() -> str:
        nonlocal pos
        end = body.find(b"\0", pos)
        if end < 0:
            raise ValueError("unterminated string in the reply")
        text = body[pos:end].decode("utf-8")
        pos = end + 1
        return text

    error = u32()
    if error != ERROR_OK:
        return Reply(error, [])
    string()  # the deprecated domain
    rules = []
    for _ in range(u32()):
        attrs = []
        for _ in range(u32()):
            name = string()
            attrs.append((name, [string() for _ in range(u32())]))
        rules.append(attrs)
    return Reply(error, rules)


def encode_request(cmd: int, body: bytes = b"") -> bytes:
    return wire.encode_request(cmd, body)


ENOENT: Final = errno.ENOENT
EINVAL: Final = errno.EINVAL
