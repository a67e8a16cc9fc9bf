"""The OpenLDAP dereference control (draft-masarati-ldap-deref), encoded and decoded here.

With the control on a group search, the server returns, for every member DN, the
attributes we ask for (the user name, the group name, the object classes), so one
search turns a member list into names and types — no search per member (SSSD does
the same, reference §6.2 step 3).

ldap3 hands the response control back as raw bytes. Its pyasn1 path measured 1.7 s
for a 5,000-member group against 70 ms for a direct walk of the BER, so the value is
walked here, by hand, with bounds checks: the bytes come from the network.

    DerefSpecs ::= SEQUENCE OF DerefSpec
    DerefSpec  ::= SEQUENCE { derefAttr AttributeDescription, attributes AttributeList }
    DerefResponse ::= SEQUENCE OF DerefRes
    DerefRes ::= SEQUENCE { derefAttr AttributeDescription, derefVal LDAPDN,
                            attrVals [0] PartialAttributeList OPTIONAL }
    PartialAttribute ::= SEQUENCE { type AttributeDescription, vals SET OF AttributeValue }
"""

from __future__ import annotations

from dataclasses import dataclass

DEREF_OID = "1.3.6.1.4.1.4203.666.5.16"

_SEQUENCE = 0x30
_SET = 0x31
_OCTET_STRING = 0x04
_CONTEXT_0 = 0xA0  # [0] IMPLICIT SEQUENCE OF PartialAttribute


class BerError(ValueError):
    """The control value is not the BER the draft describes."""


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv(tag: int, value: bytes) -> bytes:
    return bytes([tag]) + _length(len(value)) + value


def encode_request(specs: list[tuple[str, list[str]]]) -> bytes:
    """DerefSpecs for [(derefAttr, [attributes to return]), ...]."""
    out = []
    for attr, attrs in specs:
        attr_list = b"".join(_tlv(_OCTET_STRING, a.encode()) for a in attrs)
        out.append(_tlv(_SEQUENCE, _tlv(_OCTET_STRING, attr.encode()) + _tlv(_SEQUENCE, attr_list)))
    return _tlv(_SEQUENCE, b"".join(out))


def _header(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """Read a tag and length at ``pos``; return (tag, value start, value end)."""
    if pos + 2 > end:
        raise BerError("truncated header")
    tag = buf[pos]
    first = buf[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or pos + n > end:
            raise BerError("unsupported or truncated length")
        length = int.from_bytes(buf[pos : pos + n], "big")
        pos += n
    if pos + length > end:
        raise BerError("value runs past its container")
    return tag, pos, pos + length


@dataclass(frozen=True, slots=True)
class DerefResult:
    attr: str  # the dereferenced attribute, e.g. "member"
    dn: str  # the member DN
    values: dict[str, list[bytes]]  # lower-cased attribute name -> values
    repeat: bool = False  # the DN was in ``seen``: its values were not decoded again


def decode_response(buf: bytes, seen: set[str] | None = None) -> list[DerefResult]:
    """Decode a DerefResponse control value. With ``seen``, the values of a DN
    already in it are skipped (``repeat``) and every new DN is added: a member of 20
    groups is dereferenced 20 times, and decoding each copy cost most of a cold
    initgroups (measured: 44,000 results for 5,000 distinct members)."""
    tag, pos, end = _header(buf, 0, len(buf))
    if tag != _SEQUENCE:
        raise BerError(f"DerefResponse: expected SEQUENCE, got tag {tag:#x}")
    out: list[DerefResult] = []
    while pos < end:
        tag, rpos, rend = _header(buf, pos, end)
        if tag != _SEQUENCE:
            raise BerError(f"DerefRes: expected SEQUENCE, got tag {tag:#x}")
        pos = rend
        tag, a, b = _header(buf, rpos, rend)
        if tag != _OCTET_STRING:
            raise BerError("derefAttr is not an OCTET STRING")
        attr = buf[a:b].decode("utf-8")
        tag, a, rpos = _header(buf, b, rend)
        if tag != _OCTET_STRING:
            raise BerError("derefVal is not an OCTET STRING")
        dn = buf[a:rpos].decode("utf-8")
        values: dict[str, list[bytes]] = {}
        if seen is not None:
            if dn in seen:
                out.append(DerefResult(attr, dn, values, True))
                continue
            seen.add(dn)
        if rpos < rend:
            tag, apos, aend = _header(buf, rpos, rend)
            if tag != _CONTEXT_0:
                raise BerError(f"attrVals: expected [0], got tag {tag:#x}")
            while apos < aend:
                tag, ppos, pend = _header(buf, apos, aend)
                if tag != _SEQUENCE:
                    raise BerError("PartialAttribute is not a SEQUENCE")
                apos = pend
                tag, a, b = _header(buf, ppos, pend)
                if tag != _OCTET_STRING:
                    raise BerError("attribute type is not an OCTET STRING")
                name = buf[a:b].decode("utf-8").lower()
                tag, vpos, vend = _header(buf, b, pend)
                if tag != _SET:
                    raise BerError("attribute values are not a SET")
                vals = values.setdefault(name, [])
                while vpos < vend:
                    tag, a, b = _header(buf, vpos, vend)
                    if tag != _OCTET_STRING:
                        raise BerError("attribute value is not an OCTET STRING")
                    vals.append(buf[a:b])
                    vpos = b
        out.append(DerefResult(attr, dn, values))
    return out
