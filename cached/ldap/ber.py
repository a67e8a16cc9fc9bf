"""BER as LDAP uses it (RFC 4511 §5.1, X.690): definite lengths only, the TLV encoder
and the header reader the codec modules (controls, deref, entry, wire) share.

The bytes read here come from the network: every length is checked against its
container, and what is not BER raises :class:`BerError`."""

from __future__ import annotations

SEQUENCE = 0x30
SET = 0x31
OCTET_STRING = 0x04
INTEGER = 0x02
BOOLEAN = 0x01
ENUMERATED = 0x0A


class BerError(ValueError):
    """Bytes that are not the BER they claim to be."""


def length(n: int) -> bytes:
    """A definite length: short form below 128, else long form."""
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def tlv(tag: int, body: bytes) -> bytes:
    """One BER TLV (definite length)."""
    n = len(body)
    if n < 0x80:
        return bytes((tag, n)) + body
    return bytes((tag,)) + length(n) + body


def integer(tag: int, n: int) -> bytes:
    """An INTEGER or ENUMERATED (``tag``) in the fewest octets, two's complement."""
    return tlv(tag, n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True))


def header(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """Read a tag and length at ``pos``; return (tag, value start, value end)."""
    if pos + 2 > end:
        raise BerError("truncated header")
    tag = buf[pos]
    first = buf[pos + 1]
    pos += 2
    if first < 0x80:
        n = first
    else:
        k = first & 0x7F
        if k == 0 or k > 4 or pos + k > end:
            raise BerError("unsupported or truncated length")
        n = int.from_bytes(buf[pos : pos + k], "big")
        pos += k
    if pos + n > end:
        raise BerError("value runs past its container")
    return tag, pos, pos + n
