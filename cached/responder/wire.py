"""The framing SSSD's responder sockets share (NSS and PAM: ``src/sss_client/sss_cli.h``):
every message is a 16-byte header of host-endian ``u32 len, cmd, status, reserved``
and a body, a request is at most 1024 bytes, and a peer that breaks the framing is
disconnected (reference §1.2; PAM reference §1.1). Sans-IO, like the codecs that
build on it (``cached.nss.protocol``, ``cached.pam.protocol``, the SSH and sudo
codecs): those add their commands and bodies, this module the frame both read and
write, the server's connection and the NUL-terminated strings of requests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final, Generic, NoReturn, TypeVar

#: Every message starts with ``len, cmd, status, reserved``, four uint32 (§1.2).
HEADER_SIZE: Final = 16

#: SSSD's responders refuse (close on) requests longer than 1024 bytes, header included
#: (``SSS_PACKET_MAX_RECV_SIZE``; more only for certificate, GSSAPI and PAC commands,
#: which cached does not serve).
MAX_REQUEST_SIZE: Final = 1024

#: Our own clients' cap on a reply. libnss_sss has no limit (§1.2), but a Python tool
#: must not try to allocate 4 GiB because of one corrupt length field.
DEFAULT_MAX_REPLY_SIZE: Final = 64 * 1024 * 1024

# "=" is native byte order with standard sizes and no alignment: exactly the host-endian
# packed uint32 of §1.2 ("@" could insert padding, "<" would be wrong on big-endian hosts).
U32: Final = struct.Struct("=I")
HEADER: Final = struct.Struct("=4I")

C = TypeVar("C")
R = TypeVar("R")


class ProtocolError(Exception):
    """The peer broke the protocol: the only correct reaction is to close the connection.

    Raised for malformed framing and unknown commands (SSSD closes on both, §1.2) on the
    server side, and for malformed, truncated or unsolicited replies on the client side.
    ``cmd`` is the command code when it was known.
    """

    def __init__(self, message: str, cmd: int | None = None) -> None:
        super().__init__(message)
        self.cmd = cmd


class NeedData(Enum):
    """Type of the :data:`NEED_DATA` sentinel."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by ``next_request``/``next_reply`` when the buffer holds no complete message.
NEED_DATA: Final = NeedData.NEED_DATA


def hex_name(code: int) -> str:
    return f"{code:#06x}"


def command_namer(commands: type[IntEnum]) -> Callable[[int], str]:
    """A codec's ``command_name``: the member's name for a known code (``"GETPWNAM"``),
    ``"0x1234"`` for any other (for logs and protocol errors)."""

    def command_name(code: int) -> str:
        try:
            return commands(code).name
        except ValueError:
            return hex_name(code)

    return command_name


def nul_terminated(
    raw: bytes | bytearray, what: str, *, empty: bool = True, max_bytes: int | None = None
) -> str:
    """The text of ``raw``, a string as SSSD's clients send it in a request: UTF-8 and
    its terminating NUL. ValueError, its message naming ``what``, for no final NUL, a
    NUL inside (a C responder would read only the part before it: refused rather than
    read otherwise), bytes that are not UTF-8 and, where the codec refuses them, an
    empty string (not ``empty``) or one of more than ``max_bytes`` bytes without its
    NUL (checked before decoding)."""
    if not raw or raw[-1] != 0:
        raise ValueError(f"{what} is not NUL-terminated")
    text = raw[:-1]
    if not text and not empty:
        raise ValueError(f"{what} is empty")
    if max_bytes is not None and len(text) > max_bytes:
        raise ValueError(f"{what} is {len(text)} bytes, longer than {max_bytes}")
    if 0 in text:
        raise ValueError(f"{what} holds a NUL")
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8") from None


def request_frame(
    buf: bytearray, served: Mapping[int, C], name: Callable[[int], str] = hex_name
) -> tuple[C, int] | NeedData:
    """The command (``served``'s value for its code) and length of the request at the
    start of ``buf``, once it is complete; :data:`NEED_DATA` before. ProtocolError for a
    length outside 16..1024 or a command not in ``served``, as soon as the first bytes
    show it (SSSD closes on both)."""
    have = len(buf)
    if have < 4:
        return NEED_DATA
    length: int = U32.unpack_from(buf, 0)[0]
    if length < HEADER_SIZE:
        raise ProtocolError(
            f"request length {length} is shorter than the {HEADER_SIZE}-byte header"
        )
    if length > MAX_REQUEST_SIZE:
        raise ProtocolError(f"request length {length} exceeds the {MAX_REQUEST_SIZE}-byte cap")
    if have < 8:
        return NEED_DATA
    code: int = U32.unpack_from(buf, 4)[0]
    cmd = served.get(code)
    if cmd is None:
        raise ProtocolError(f"command {name(code)} is not served", code)
    if have < length:
        return NEED_DATA
    # status and reserved (offsets 8, 12) are 0 from the client and never read (§1.2)
    return cmd, length


def _never(_error: ProtocolError) -> bool:
    return False


class ServerConnection(Generic[C, R]):
    """One client connection of a responder as the server sees it: feed
    :meth:`receive_data`, then call :meth:`next_request` until :data:`NEED_DATA`.
    ``served`` maps a command code to its command, ``parse(cmd, body)`` makes the
    request. :class:`ProtocolError` (a length outside 16..1024, a command not served)
    means close: the object is then dead.

    ``salvage(error)`` says whether a :class:`ProtocolError` that ``parse`` raised
    leaves the connection usable: the responder answers it and goes on (PAM's
    ``MalformedRequest``, answered ``PAM_SYSTEM_ERR`` as SSSD does); any other makes
    the connection dead as a broken frame does. ``wipe``: the request may hold a
    password, so its bytes are zeroed in the buffer once framed, ``parse`` is given a
    copy that is zeroed once parsed, and a dead connection's buffer is zeroed before it
    is dropped.
    """

    __slots__ = ("_buf", "_error", "_name", "_parse", "_salvage", "_served", "_wipe")

    def __init__(
        self,
        served: Mapping[int, C],
        parse: Callable[[C, bytearray], R],
        name: Callable[[int], str] = hex_name,
        *,
        salvage: Callable[[ProtocolError], bool] = _never,
        wipe: bool = False,
    ) -> None:
        self._buf = bytearray()
        self._error: ProtocolError | None = None
        self._served, self._parse, self._name = served, parse, name
        self._salvage, self._wipe = salvage, wipe

    @property
    def dead(self) -> bool:
        return self._error is not None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        self._buf += data

    def next_request(self) -> R | NeedData:
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        buf = self._buf
        try:
            framed = request_frame(buf, self._served, self._name)
        except ProtocolError as e:
            self._die(e)
        if isinstance(framed, NeedData):
            return NEED_DATA
        cmd, length = framed
        body = buf[HEADER_SIZE:length]
        if self._wipe:
            # Zero the request in the buffer, parse the copy and zero that too (in
            # place: a traceback may still view it).
            buf[:length] = bytes(length)
        del buf[:length]
        try:
            return self._parse(cmd, body)
        except ProtocolError as e:
            if not self._salvage(e):
                self._die(e)
            raise
        finally:
            if self._wipe:
                body[:] = bytes(len(body))

    def _die(self, error: ProtocolError) -> NoReturn:
        self._error = error
        if self._wipe:
            self._buf[:] = bytes(len(self._buf))
        self._buf = bytearray()  # a dead connection holds on to nothing
        raise error


# ------------------------------------------------------------------ client side


def encode_request(cmd: int, body: bytes = b"") -> bytes:
    """A request: header ``len, cmd, 0, 0`` then ``body`` (§1.2).

    No validation of ``cmd`` or size, so tests can build the requests a hostile client
    would send.
    """
    return HEADER.pack(HEADER_SIZE + len(body), cmd, 0, 0) + body


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply as the client sees it. ``status`` 0 is success; else an errno (§1.7)."""

    cmd: int
    status: int
    body: bytes


class ClientConnection:
    """The client's side: :meth:`send_request` to get bytes to write, feed what the socket
    returns to :meth:`receive_data`, and call :meth:`next_reply`.

    One request at a time, like the SSSD clients (§1.1). A reply whose command differs
    from the request's, a reply with no request outstanding, or a length outside
    ``16..max_reply_size`` raises :class:`ProtocolError` and the connection is dead.
    ``name`` names a command code in errors.
    """

    __slots__ = ("_buf", "_error", "_max_reply_size", "_name", "_pending")

    def __init__(
        self,
        max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
        name: Callable[[int], str] = hex_name,
    ) -> None:
        self._buf = bytearray()
        self._error: ProtocolError | None = None
        self._max_reply_size = max_reply_size
        self._pending: int | None = None
        self._name = name

    @property
    def dead(self) -> bool:
        return self._error is not None

    @property
    def pending(self) -> int | None:
        """Command code of the request awaiting its reply, if any."""
        return self._pending

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def send_request(self, cmd: int, body: bytes = b"") -> bytes:
        """Bytes of a request; its reply is the next one :meth:`next_reply` accepts."""
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        if self._pending is not None:
            # A local bug, not the peer's: the protocol has no pipelining (§1.1).
            raise RuntimeError(f"{self._name(self._pending)} is still awaiting its reply")
        self._pending = cmd
        return encode_request(cmd, body)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        self._buf += data

    def next_reply(self) -> Reply | NeedData:
        """The reply to the outstanding request, or :data:`NEED_DATA`."""
        if self._error is not None:
            raise ProtocolError(f"connection is dead: {self._error}", self._error.cmd)
        buf = self._buf
        have = len(buf)
        if have < 4:
            return NEED_DATA
        length: int = U32.unpack_from(buf, 0)[0]
        if length < HEADER_SIZE:
            self._fail(f"reply length {length} is shorter than the header")
        if length > self._max_reply_size:
            self._fail(f"reply length {length} exceeds {self._max_reply_size}")
        if have < 8:
            return NEED_DATA
        cmd: int = U32.unpack_from(buf, 4)[0]
        if self._pending is None:
            self._fail(f"unsolicited {self._name(cmd)} reply", cmd)
        if cmd != self._pending:
            self._fail(f"{self._name(cmd)} reply to a {self._name(self._pending)} request", cmd)
        if have < length:
            return NEED_DATA
        status: int = U32.unpack_from(buf, 8)[0]  # offset 12 (reserved) is ignored, §1.2
        body = bytes(buf[HEADER_SIZE:length])
        del buf[:length]
        self._pending = None
        return Reply(cmd, status, body)

    def _fail(self, message: str, cmd: int | None = None) -> NoReturn:
        error = ProtocolError(message, cmd)
        self._error = error
        self._buf = bytearray()
        raise error
