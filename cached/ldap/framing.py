"""LDAP message framing, sans-IO: bytes in as they arrive, whole LDAPMessages out.

Every LDAPMessage is one BER SEQUENCE with a definite length (RFC 4511 §5.1), so its
size is known once its header is in. :class:`MessageBuffer` holds what has come and
not yet made a whole message; it never reads a socket (connection.py does), so it is
tested with bytes alone, split anywhere.

One call per chunk read, not per message or byte: the chunks are up to 1 MiB
(connection.RECV_SIZE) and a chunk of a sweep holds thousands of small entries.
"""

from __future__ import annotations

# The largest legitimate LDAP message we know of is a group entry with every member:
# 200,000 member DNs of ~40 bytes are 8 MB (Active Directory's MaxReceiveBuffer default
# is 10 MB). 64 MiB leaves 8x headroom and bounds the backend's memory for one message
# (the buffer, the copy and the decoded values: about 4x the message).
MAX_MESSAGE = 64 << 20

try:
    from cached.ldap._ber import frames as _frames
except ImportError:  # not built: the loop of MessageBuffer.feed
    _frames = None  # type: ignore[assignment]


class FramingError(ValueError):
    """A message header that is not a definite BER length: the stream is lost."""


class MessageTooLarge(Exception):
    """One message is larger than the buffer's limit: the stream is lost."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"an LDAP message of {size} bytes, over the {limit} byte limit")
        self.size = size
        self.limit = limit


def message_size(buf: bytes | bytearray, pos: int) -> int:
    """The size of the BER message starting at ``pos``; -1 if its header is not all in."""
    if len(buf) - pos < 2:
        return -1
    first = buf[pos + 1]
    if first < 0x80:
        return first + 2
    n = first & 0x7F
    if n == 0 or n > 8:
        # RFC 4511 §5.1: definite lengths only; 8 length octets cover any size.
        raise FramingError(f"bad BER length octet 0x{first:02x}")
    if len(buf) - pos < 2 + n:
        return -1
    return int.from_bytes(buf[pos + 2 : pos + 2 + n], "big") + 2 + n


class MessageBuffer:
    """Bytes of one connection's stream in, whole messages out, in order.

    :meth:`feed` takes the next chunk and returns the messages it completes (each a
    ``bytes`` of its own, unchanged by later chunks); :attr:`pending` is how many bytes
    of a message still incomplete are held. A header announcing more than ``limit``
    bytes raises :class:`MessageTooLarge` before the message is read, a header that is
    not a definite length :class:`FramingError`; after either the stream is out of
    step and the buffer is not to be fed again."""

    __slots__ = ("_buf", "_need", "limit")

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        if limit < 0x81:
            # A short-form message (up to 129 bytes) is taken without a look at the limit.
            raise ValueError(f"a message limit of {limit} bytes is below 129")
        self.limit = limit
        self._buf = bytearray()
        self._need = -1  # size of the message at the buffer's start, once its header is in

    @property
    def pending(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        buf += data
        if _frames is not None:
            # In C: the loop below, per message, was 5 % of a cold initgroups of
            # bigroupuser (8,000 messages; py-spy of testing.replay).
            whole_ones, taken, bad = _frames(buf, self.limit)
            if bad >= 0:
                size = message_size(buf, bad)  # FramingError: not a definite length
                raise MessageTooLarge(size, self.limit)
            if taken:
                del buf[:taken]
            return whole_ones
        end = len(buf)
        pos = 0
        need = self._need
        messages: list[bytes] = []
        # The complete messages are sliced from one bytes copy of the buffer, made
        # once a message is complete (a message still arriving is never copied).
        whole = b""
        while True:
            if need < 0 and end - pos >= 2 and buf[pos + 1] + 2 <= min(end - pos, 0x81):
                # A run of whole messages of short-form length (the sweep's entries,
                # 5,000 for large01) taken by this shorter loop, as the one below
                # takes each (a cold large01: 203 M -> 200 M instructions, perf.replay).
                if not whole:
                    whole = bytes(buf)
                append = messages.append
                while pos + 2 <= end:
                    f = whole[pos + 1]
                    if f >= 0x80 or (nxt := pos + f + 2) > end:
                        break
                    append(whole[pos:nxt])
                    pos = nxt
            if need < 0:
                if end - pos >= 2 and buf[pos + 1] < 0x80:
                    need = buf[pos + 1] + 2  # short form: every entry of a sweep
                elif end - pos >= 4 and buf[pos + 1] == 0x82:
                    need = (buf[pos + 2] << 8 | buf[pos + 3]) + 4  # a group entry of a walk
                    if need > self.limit:
                        raise MessageTooLarge(need, self.limit)
                else:
                    need = message_size(buf, pos)
                    if need < 0:
                        break
                    if need > self.limit:
                        raise MessageTooLarge(need, self.limit)
            if end - pos < need:
                break
            if not whole:
                whole = bytes(buf)
            messages.append(whole[pos : pos + need])
            pos += need
            need = -1
        if pos:
            del buf[:pos]
        self._need = need
        return messages
