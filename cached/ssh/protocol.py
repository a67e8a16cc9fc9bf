"""SSSD's SSH socket protocol (``<pipes_dir>/ssh``) as a sans-IO codec: bytes in,
values out, in the shape of :mod:`cached.nss.protocol`.

The client is ``sss_ssh_authorizedkeys`` (sssd-common), which sshd runs as its
``AuthorizedKeysCommand``; the framing is the responders' shared one
(:mod:`cached.responder.wire`). From SSSD 2.8.2's ``src/sss_client/ssh/sss_ssh_client.c``
and ``src/responder/ssh/ssh_protocol.c``, ``ssh_reply.c``:

* GET_VERSION (0x0001): the client asks for version 0 (``SSS_SSH_PROTOCOL_VERSION``)
  and accepts only 0; the answer is always 0.
* GET_USER_PUBKEYS (0x00E1) and GET_HOST_PUBKEYS (0x00E2): ``u32 flags`` (a mask of
  ``REQ_ALIAS`` 1 and ``REQ_DOMAIN`` 2), ``u32 len, name\\0``; with ``REQ_ALIAS`` ``u32
  len, alias\\0``; with ``REQ_DOMAIN`` ``u32 len, domain\\0`` (len 0: no domain).
* A reply: ``u32 count, u32 0``, then per key ``u32 0, u32 len, name\\0, u32 len,
  key``; ``name`` is the entry's name in SSSD's cache (``name@domain``), the key the
  attribute's value as stored (a text line or an RFC 4253 blob: the client prints
  either). A failure is a header-only reply whose status is an errno or one of SSSD's
  error codes (:data:`ERR_NON_SSSD_USER`).

What a peer's mistake does (server side)
----------------------------------------

======================================================  ==================================
Request                                                 Outcome
======================================================  ==================================
length field < 16 or > 1024, a command not served       close: :class:`ProtocolError`
GET_VERSION body not 4 bytes, or another version        served: the reply is still 0
flags outside the mask, a name (alias, domain) length   EINVAL (:class:`BadRequest`), as
of 0 or past the end, without its final NUL, not        SSSD; the connection stays usable
UTF-8, or with a NUL inside
bytes after the last field                              ignored, as SSSD
======================================================  ==================================

A NUL inside a name is refused where SSSD would read the name up to it: the real
client never sends one (it sends ``strlen(name) + 1`` bytes).
"""

from __future__ import annotations

import errno as _errno
import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Final, TypeAlias

from cached.responder import wire
from cached.responder.wire import (
    DEFAULT_MAX_REPLY_SIZE,
    HEADER_SIZE,
    MAX_REQUEST_SIZE,
    NEED_DATA,
    NeedData,
    ProtocolError,
)

__all__ = [
    "MAX_REQUEST_SIZE",
    "NEED_DATA",
    "NeedData",
    "ProtocolError",
]

#: The only version the client accepts (``SSS_SSH_PROTOCOL_VERSION``).
PROTOCOL_VERSION: Final = 0

#: SSSD's ``ERR_NON_SSSD_USER`` (``ERR_BASE`` 0x555D0000 + 77, ``util_errors.h``):
#: "a valid user, not handled by SSSD". ``sss_ssh_authorizedkeys`` then prints nothing
#: and exits 0; on ENOENT it says "Error looking up public keys" and exits 1.
ERR_NON_SSSD_USER: Final = 0x555D0000 + 77
ENOENT: Final = _errno.ENOENT
EINVAL: Final = _errno.EINVAL

_U32: Final = wire.U32
_U32X2: Final = struct.Struct("=2I")


class Command(IntEnum):
    GET_VERSION = 0x0001
    GET_USER_PUBKEYS = 0x00E1
    GET_HOST_PUBKEYS = 0x00E2


class Flags(IntFlag):
    """``SSS_SSH_REQ_*``."""

    ALIAS = 0x01
    DOMAIN = 0x02


_MASK: Final = int(Flags.ALIAS | Flags.DOMAIN)
_SERVED_BY_VALUE: Final[dict[int, Command]] = {int(c): c for c in Command}


command_name: Final = wire.command_namer(Command)


@dataclass(frozen=True, slots=True)
class GetVersion:
    version: int | None  # None: no 4-byte body


@dataclass(frozen=True, slots=True)
class KeysRequest:
    """GET_USER_PUBKEYS or GET_HOST_PUBKEYS. ``domain`` None: every domain."""

    cmd: Command
    name: str
    alias: str | None = None
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class BadRequest:
    """A framed request whose body SSSD refuses with EINVAL (answer :func:`error_reply`)."""

    cmd: Command
    reason: str


Request: TypeAlias = GetVersion | KeysRequest | BadRequest


def _string(
    body: bytes | bytearray, pos: int, what: str, *, empty_ok: bool = False
) -> tuple[str | None, int]:
    """``u32 len`` then ``len`` bytes ending in NUL, at ``pos``: (text, next position).
    None for a length of 0 where ``empty_ok`` (the domain). ValueError otherwise."""
    if len(body) - pos < 4:
        raise ValueError(f"{what} length missing")
    (length,) = _U32.unpack_from(body, pos)
    pos += 4
    if length == 0 and empty_ok:
        return None, pos
    if length == 0 or length > len(body) - pos:
        raise ValueError(f"invalid {what} length {length}")
    return wire.nul_terminated(body[pos : pos + length], what), pos + length


def parse_request(cmd: Command, body: bytes | bytearray) -> Request:
    if cmd is Command.GET_VERSION:
        return GetVersion(_U32.unpack(body)[0] if len(body) == 4 else None)
    try:
        if len(body) < 4:
            raise ValueError("flags missing")
        (flags,) = _U32.unpack_from(body, 0)
        if flags & ~_MASK:
            raise ValueError(f"invalid flags {flags:#x}")
        name, pos = _string(body, 4, "name")
        alias = domain = None
        if flags & Flags.ALIAS:
            alias, pos = _string(body, pos, "alias")
        if flags & Flags.DOMAIN:
            domain, pos = _string(body, pos, "domain", empty_ok=True)
    except ValueError as e:
        return BadRequest(cmd, str(e))
    assert name is not None
    return KeysRequest(cmd, name, alias, domain)


def server_connection() -> wire.ServerConnection[Command, Request]:
    """One client connection as the SSH responder sees it (the shared framing's
    :class:`~cached.responder.wire.ServerConnection` with this codec's commands)."""
    return wire.ServerConnection(_SERVED_BY_VALUE, parse_request, command_name)


# ------------------------------------------------------------------------ replies

_VERSION_REPLY: Final = wire.HEADER.pack(HEADER_SIZE + 4, Command.GET_VERSION, 0, 0) + _U32.pack(
    PROTOCOL_VERSION
)


def version_reply() -> bytes:
    return _VERSION_REPLY


def error_reply(cmd: int, status: int) -> bytes:
    """Header-only reply with ``status`` (an errno or SSSD error code), as SSSD's
    ``sss_cmd_send_error``."""
    if not 0 < status <= 0xFFFFFFFF:
        raise ValueError(f"error status must be non-zero, got {status}")
    return wire.HEADER.pack(HEADER_SIZE, cmd, status, 0)


def keys_reply(cmd: int, name: str, keys: tuple[bytes, ...] | list[bytes]) -> bytes:
    """The keys of the entry ``name`` (SSSD's ``ssh_protocol_build_reply``); none:
    ``count 0``, which the client prints as nothing."""
    raw = name.encode("utf-8") + b"\0"
    parts = [_U32X2.pack(len(keys), 0)]
    head = _U32X2.pack(0, len(raw)) + raw
    for key in keys:
        parts += [head, _U32.pack(len(key)), key]
    body = b"".join(parts)
    return wire.HEADER.pack(HEADER_SIZE + len(body), cmd, 0, 0) + body


# ------------------------------------------------------------------ client side


def version_body(version: int = PROTOCOL_VERSION) -> bytes:
    """GET_VERSION body: ``u32 expected``."""
    return _U32.pack(version)


def request_body(name: str, domain: str | None = None, alias: str | None = None) -> bytes:
    """The body ``sss_ssh_get_ent`` sends: REQ_DOMAIN always (length 0 without one)."""
    flags = Flags.DOMAIN | (Flags.ALIAS if alias is not None else 0)
    raw = name.encode("utf-8") + b"\0"
    out = _U32X2.pack(flags, len(raw)) + raw
    if alias is not None:
        a = alias.encode("utf-8") + b"\0"
        out += _U32.pack(len(a)) + a
    if domain:
        d = domain.encode("utf-8") + b"\0"
        out += _U32.pack(len(d)) + d
    else:
        out += _U32.pack(0)
    return out


class ClientConnection(wire.ClientConnection):
    """The client's side, naming SSH commands in its errors; for tests and tools."""

    __slots__ = ()

    def __init__(self, max_reply_size: int = DEFAULT_MAX_REPLY_SIZE) -> None:
        super().__init__(max_reply_size, command_name)


def decode_keys(body: bytes) -> tuple[str, list[bytes]]:
    """(name, keys) of a keys reply body, checked as ``sss_ssh_get_ent`` checks it;
    ProtocolError where it returns EINVAL."""
    if len(body) < 8:
        raise ProtocolError(f"keys reply body is {len(body)} bytes")
    count, reserved = _U32X2.unpack_from(body, 0)
    if reserved:
        raise ProtocolError("keys reply: reserved field is not 0")
    pos, name, keys = 8, "", []
    for _ in range(count):
        if len(body) - pos < 8:
            raise ProtocolError("keys reply truncated")
        flags, length = _U32X2.unpack_from(body, pos)
        pos += 8
        if flags or length > len(body) - pos - 4:
            raise ProtocolError("keys reply: bad flags or name length")
        name = body[pos : pos + length - 1].decode("utf-8", errors="replace")
        pos += length
        (length,) = _U32.unpack_from(body, pos)
        pos += 4
        if length > len(body) - pos:
            raise ProtocolError("keys reply: key runs past the end")
        keys.append(body[pos : pos + length])
        pos += length
    return name, keys
