"""The SearchResultEntry reader: one LDAPMessage's bytes into a DN and raw values,
without ldap3 or pyasn1, with the C reader (``_ber.c``) where it was built.

Three readers, each declining (None or False) what the next one reads:

- :func:`decode_rows` / :func:`read_rows`: runs of small entries of a search whose
  entries are wanted as rows (the sweep of the user bases), into their RowShape's rows;
- :func:`decode_entry` / :func:`read_entry`: an entry without controls, into
  (message ID, DN, {lower-cased type: values});
- :func:`decode_search_entry`: any SearchResultEntry, controls included (the deref
  control of a walk's group entries); None for any other protocolOp (wire.py reads
  those).

    LDAPMessage ::= SEQUENCE { messageID INTEGER, protocolOp CHOICE { ...,
                               searchResEntry [APPLICATION 4] SEQUENCE {
                                 objectName LDAPDN, attributes PartialAttributeList }, ...},
                               controls [0] Controls OPTIONAL }      (RFC 4511 §4.5.2)
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from cached.ldap.ber import INTEGER as _INTEGER
from cached.ldap.ber import OCTET_STRING as _OCTET_STRING
from cached.ldap.ber import SEQUENCE as _SEQUENCE
from cached.ldap.ber import SET as _SET
from cached.ldap.ber import BerError
from cached.ldap.ber import header as _header
from cached.ldap.controls import decode_controls

_SEARCH_RESULT_ENTRY = 0x64  # [APPLICATION 4] SEQUENCE (RFC 4511 §4.5.2)


@dataclass(slots=True)
class SearchEntry:
    """A SearchResultEntry as read by :func:`decode_search_entry`."""

    message_id: int
    dn: bytes
    attrs: dict[bytes, list[bytes]]  # attribute description as sent -> raw values
    controls: list[tuple[bytes, bool, bytes | None]]  # (OID, criticality, value)


def decode_search_entry(buf: bytes) -> SearchEntry | None:
    """Read one LDAPMessage carrying a SearchResultEntry, or None for any other
    protocolOp (wire.decode_response reads those).

    ldap3's generic decoder builds a tuple per TLV and converts every value twice;
    for the member values of a nesting walk that was most of the client's time
    (perf/results: 32,000 recursive decode_sequence calls per cold initgroups of
    bigroupuser). Values come back as bytes slices, nothing else is built. Lengths
    of up to two octets (every TLV of a message under 64 KiB) are read inline: a
    call per header was half of the time for the entries of a sweep of the user
    bases (5,000 entries of three attributes, perf/readpath.py). Every length is
    bounds-checked against its container: a header that would straddle its
    container's end gives a value that runs past it."""
    end = len(buf)
    if end < 5 or buf[0] != _SEQUENCE:
        raise BerError("LDAPMessage: expected SEQUENCE")
    first = buf[1]
    if first < 0x80 and buf[2] == _INTEGER and 0 < buf[3] < 0x80:
        # A message under 128 bytes with a short messageID (a sweep's entries).
        end = first + 2
        a = 4
        pos = a + buf[3]
        if pos > end or end > len(buf):
            raise BerError("value runs past its container")
    else:
        tag, pos, end = _header(buf, 0, end)
        tag, a, pos = _header(buf, pos, end)
        if tag != _INTEGER or a == pos:
            raise BerError("messageID is not an INTEGER")
    if pos >= end or buf[pos] != _SEARCH_RESULT_ENTRY:
        return None
    msgid = int.from_bytes(buf[a:pos], "big", signed=True)
    if pos + 4 <= end and buf[pos + 1] < 0x80 and buf[pos + 2] == _OCTET_STRING:
        opos = pos + 2
        oend = opos + buf[pos + 1]
    else:
        tag, opos, oend = _header(buf, pos, end)
    if oend > end:
        raise BerError("value runs past its container")
    if opos + 2 <= oend and buf[opos] == _OCTET_STRING and buf[opos + 1] < 0x80:
        a = opos + 2
        b = a + buf[opos + 1]
        if b > oend:
            raise BerError("value runs past its container")
    else:
        tag, a, b = _header(buf, opos, oend)
        if tag != _OCTET_STRING:
            raise BerError("objectName is not an OCTET STRING")
    dn = buf[a:b]
    if b + 2 <= oend and buf[b] == _SEQUENCE and buf[b + 1] < 0x80:
        lpos = b + 2
        lend = lpos + buf[b + 1]
        if lend > oend:
            raise BerError("value runs past its container")
    else:
        tag, lpos, lend = _header(buf, b, oend)
        if tag != _SEQUENCE:
            raise BerError("PartialAttributeList is not a SEQUENCE")
    attrs: dict[bytes, list[bytes]] = {}
    while lpos < lend:
        # PartialAttribute ::= SEQUENCE { type, vals SET OF value }: three headers,
        # each inline for short and one- or two-octet lengths.
        if buf[lpos] != _SEQUENCE or lpos + 2 > lend:
            raise BerError("PartialAttribute is not a SEQUENCE")
        first = buf[lpos + 1]
        if first < 0x80:
            ppos = lpos + 2
            pend = ppos + first
        elif first == 0x81 and lpos + 3 <= lend:
            ppos = lpos + 3
            pend = ppos + buf[lpos + 2]
        elif first == 0x82 and lpos + 4 <= lend:
            ppos = lpos + 4
            pend = ppos + (buf[lpos + 2] << 8 | buf[lpos + 3])
        else:
            tag, ppos, pend = _header(buf, lpos, lend)
        if pend > lend:
            raise BerError("value runs past its container")
        lpos = pend
        if ppos + 2 > pend or buf[ppos] != _OCTET_STRING:
            raise BerError("attribute type is not an OCTET STRING")
        first = buf[ppos + 1]
        if first < 0x80:
            a = ppos + 2
            b = a + first
            if b > pend:
                raise BerError("value runs past its container")
        else:
            tag, a, b = _header(buf, ppos, pend)
        vals = attrs.setdefault(buf[a:b], [])
        if b + 2 > pend or buf[b] != _SET:
            raise BerError("attribute values are not a SET")
        first = buf[b + 1]
        if first < 0x80:
            vpos = b + 2
            vend = vpos + first
        elif first == 0x81 and b + 3 <= pend:
            vpos = b + 3
            vend = vpos + buf[b + 2]
        elif first == 0x82 and b + 4 <= pend:
            vpos = b + 4
            vend = vpos + (buf[b + 2] << 8 | buf[b + 3])
        else:
            tag, vpos, vend = _header(buf, b, pend)
        if vend > pend:
            raise BerError("value runs past its container")
        while vpos < vend:
            if buf[vpos] != _OCTET_STRING or vpos + 2 > vend:
                raise BerError("attribute value is not an OCTET STRING")
            first = buf[vpos + 1]
            if first < 0x80:
                a = vpos + 2
                b = a + first
            elif first == 0x81 and vpos + 3 <= vend:
                a = vpos + 3
                b = a + buf[vpos + 2]
            else:
                tag, a, b = _header(buf, vpos, vend)
            if b > vend:
                raise BerError("value runs past its container")
            vals.append(buf[a:b])
            vpos = b
    controls = decode_controls(buf, oend, end) if oend < end else []
    return SearchEntry(msgid, dn, attrs, controls)



# The first nine octets of a message, for decode_row.
_HEAD9 = struct.Struct("9B")

# A row: (objectName as text, the values of each asked attribute by its slot).
Row = tuple[str, list[list[bytes]]]


class RowShape:
    """A search whose entries are wanted as rows (exchange.Search.rows): the attribute
    types asked for, lower-cased, by slot (:func:`decode_row` adds the spellings the
    server uses, up to 64; -1: not asked), the number of slots, the list the rows go
    to, and the layout of the usual row, learnt from the first rows read: a header
    ``04 len type 31`` per attribute, in the server's order, with its slot."""

    __slots__ = ("count", "heads", "layout", "rows", "slots", "tries")

    def __init__(self, attrs: list[str], rows: list[Row]) -> None:
        lowered = [a.lower().encode() for a in attrs]
        if len(set(lowered)) != len(lowered):
            raise ValueError(f"rows: an attribute asked twice in {attrs!r}")
        self.slots = {a: i for i, a in enumerate(lowered)}
        self.count = len(lowered)
        self.rows = rows
        # Learnt (_learn): each asked attribute once, one value each, in this order.
        self.heads: tuple[tuple[bytes, int, int], ...] = ()
        # The same, as decode_row reads it: per attribute, the offset of its value's
        # length octet, its header for each value length (_headers), and its slot.
        self.layout: tuple[tuple[int, tuple[bytes, ...], int], ...] = ()
        self.tries = 8  # rows the layout may still be learnt from


def decode_row(buf: bytes, shapes: dict[int, RowShape]) -> bool:
    """Read a small SearchResultEntry of a search whose entries are wanted as rows
    (``shapes``: by message ID) into its shape's rows: (objectName, the values of
    each slot's attribute in a list at its index; [] for an attribute the entry
    lacks). Returns False, reading nothing, for everything else, which the caller
    reads with :func:`decode_search_entry` (same row, or BerError): another message
    ID, any other protocolOp, controls, a message of 130 bytes or more, a long-form
    length anywhere, an attribute type twice or not ASCII, an objectName not UTF-8
    (the generic reader's text for it), and any length that does not fit its
    container exactly.

    The entries of a sweep of the user bases (5,000 of three one-valued attributes
    per cold initgroups of a user in 2,000 groups, perf/readpath.py) are all small:
    the whole message under 130 bytes makes every length one octet, so each header
    is two byte reads and a comparison against its container's end, and no dict per
    entry or Entry object is built. They also all look alike: the same types, in
    the same order, one value each. Once a row of that shape was read, each
    attribute of the next is one read of its value's length octet and one
    comparison of its whole header with the learnt one for that length (``layout``,
    from ``heads``: the type's ``04 len type 31``, the slot, the offset of the SET's
    length octet); any other row takes the general loop, which gives the same row
    for the same bytes."""
    # Tags as literals (0x30 SEQUENCE, 0x02 INTEGER, 0x64 searchResEntry, 0x04 OCTET
    # STRING, 0x31 SET): a global look-up each was measurable at 5,000 entries.
    n = len(buf)
    if n < 9 or n > 129:
        return False
    # LDAPMessage SEQUENCE spanning the buffer, messageID INTEGER; searchResEntry
    # spanning the rest of the message (no controls), objectName. The first nine
    # octets at once when the messageID has one (the usual: message IDs count from 1),
    # where each read of an octet cost as much as its checks.
    t0, l0, t1, ilen, one, op, lo, t2, dlen = _HEAD9.unpack_from(buf)
    if t0 != 0x30 or l0 != n - 2 or t1 != 0x02:
        return False
    if ilen == 1:
        if op != 0x64 or lo != n - 7 or t2 != 0x04:
            return False
        shape = shapes.get(one if one < 0x80 else one - 0x100)  # a signed INTEGER
        a = 9
        pos = 9 + dlen
    else:
        pos = 4 + ilen
        if not 0 < ilen <= 4 or pos + 4 > n or buf[pos] != 0x64:
            return False
        if buf[pos + 1] != n - pos - 2 or buf[pos + 2] != 0x04:
            return False
        shape = shapes.get(int.from_bytes(buf[4:pos], "big", signed=True))
        a = pos + 4
        pos = a + buf[pos + 3]
    if shape is None:
        return False
    # PartialAttributeList spanning the rest.
    if pos + 2 > n or buf[pos] != 0x30 or buf[pos + 1] != n - pos - 2:
        return False
    try:
        dn = buf[a:pos].decode()
    except UnicodeDecodeError:
        return False  # the generic reader's text (exchange.server_text)
    pos += 2
    out: list[list[bytes] | None] = [None] * shape.count
    if shape.layout:
        # The learnt shape. Per attribute: the SEQUENCE tag, then ``04 len type 31``
        # compared at once (the type's OCTET STRING, and the SET's tag after it); the
        # SET holding exactly one OCTET STRING filling it, which ends where the
        # attribute does. An attribute past the message ends the loop past ``n``.
        p = pos
        try:
            for at, headers, slot in shape.layout:
                # The value's length octet, then the attribute's whole header for that
                # length compared at once (_headers): one read and one comparison.
                size = buf[p + at]
                a = p + at + 1
                if buf[p:a] != headers[size]:
                    break
                p = a + size
                out[slot] = [buf[a:p]]
            else:
                if p == n:
                    shape.rows.append((dn, out))  # type: ignore[arg-type]  # every slot set
                    return True
        except IndexError:
            pass  # a header cut by the end of the message: the loop below declines it
        out = [None] * shape.count
    slots = shape.slots
    start = pos
    while pos < n:
        # PartialAttribute ::= SEQUENCE { type OCTET STRING, vals SET OF OCTET STRING }
        if pos + 4 > n or buf[pos] != 0x30 or buf[pos + 2] != 0x04:
            return False
        pend = pos + 2 + buf[pos + 1]
        b = pos + 4 + buf[pos + 3]
        if pend > n or b + 2 > pend or buf[b] != 0x31 or b + 2 + buf[b + 1] != pend:
            return False
        kind = buf[pos + 4 : b]
        i = slots.get(kind)
        if i is None:
            if not kind.isascii():
                return False  # str.lower() of a non-ASCII type: left to the generic reader
            i = slots.get(kind.lower(), -1)
            if len(slots) < 64:
                slots[kind] = i
        vpos = b + 2
        pos = pend
        if i < 0:
            # Not asked, but its values are checked as the generic reader checks them:
            # a SET it refuses (another tag, a value past its end) is declined here too.
            while vpos < pend:
                if vpos + 2 > pend or buf[vpos] != 0x04:
                    return False
                vpos += 2 + buf[vpos + 1]
            if vpos != pend:
                return False
            continue
        if out[i] is not None:
            return False  # the attribute twice: the generic reader joins them
        if vpos + 2 <= pend and buf[vpos] == 0x04 and vpos + 2 + buf[vpos + 1] == pend:
            out[i] = [buf[vpos + 2 : pend]]  # one value filling the SET: the usual case
            continue
        vals = []
        while vpos < pend:
            if vpos + 2 > pend or buf[vpos] != 0x04:
                return False
            a = vpos + 2
            vpos = a + buf[vpos + 1]
            if vpos > pend:
                return False
            vals.append(buf[a:vpos])
        out[i] = vals
    if None in out:
        shape.rows.append((dn, [v if v is not None else [] for v in out]))
        return True
    if not shape.heads and shape.tries:
        _learn(buf, start, shape)
    shape.rows.append((dn, out))  # type: ignore[arg-type]  # no None left
    return True


def read_rows(msgs: list[bytes], i: int, shapes: dict[int, RowShape]) -> int:
    """:func:`decode_row` of ``msgs[i]``, ``msgs[i + 1]``, … while each is a row: the
    index of the first it declines (``len(msgs)`` when none), left to the caller's
    generic readers. The same rows, in the same order, as decode_row one by one.

    Why: the 5,000 entries of large01's sweep come in runs of the same search, each
    of the learnt layout. A call of decode_row per entry, its look-up of the shape
    and its checks one by one cost ~16,000 instructions an entry; here a row of the
    learnt layout (the one-octet messageID of the last row decode_row read, so the
    same shape) is read inline with its checks in one expression, the rest are
    decode_row's. Every check decode_row's learnt path makes is made here: a
    message that fails one is handed to decode_row, which reads it or declines it.
    The same in C (``_ber.decode_rows``, below) is what the client calls where it is
    built; it reads every row by decode_row's general loop (no layout is learnt)."""
    count = len(msgs)
    unpack = _HEAD9.unpack_from
    shape: RowShape | None = None
    at_id = -1  # the messageID octet of ``shape``'s rows (-1: none yet)
    layout: tuple[tuple[int, tuple[bytes, ...], int], ...] = ()
    rows: list[Row] = []
    slots = 0
    while i < count:
        buf = msgs[i]
        n = len(buf)
        if layout and 9 <= n <= 129:
            # decode_row's header checks (LDAPMessage spanning the buffer, a one-octet
            # messageID, searchResEntry spanning the rest, objectName, then the
            # PartialAttributeList spanning the rest), its message ID this shape's.
            t0, l0, t1, ilen, one, op, lo, t2, dlen = unpack(buf)
            p = 11 + dlen
            if (
                one == at_id and t0 == 0x30 and l0 == n - 2 and t1 == 0x02 and ilen == 1
                and op == 0x64 and lo == n - 7 and t2 == 0x04 and p <= n
                and buf[p - 2] == 0x30 and buf[p - 1] == n - p
            ):  # fmt: skip
                out: list[list[bytes] | None] = [None] * slots
                try:
                    for at, headers, slot in layout:  # as decode_row's learnt layout
                        size = buf[p + at]
                        a = p + at + 1
                        if buf[p:a] != headers[size]:
                            break
                        p = a + size
                        out[slot] = [buf[a:p]]
                    else:
                        if p == n:
                            rows.append((buf[9 : 9 + dlen].decode(), out))  # type: ignore[arg-type]
                            i += 1
                            continue
                except (IndexError, UnicodeDecodeError):
                    pass  # decode_row's to decline (or read by its general loop)
        if not decode_row(buf, shapes):
            return i
        i += 1
        # The shape of the row just read, when its messageID is one octet (the usual:
        # message IDs count from 1) and its layout is learnt: the next rows may take the
        # inline path.
        shape = shapes.get(buf[4] if buf[4] < 0x80 else buf[4] - 0x100) if buf[3] == 1 else None
        if shape is not None and shape.layout:
            at_id, layout, rows, slots = buf[4], shape.layout, shape.rows, shape.count
        else:
            at_id, layout = -1, ()
    return i


def _learn(buf: bytes, pos: int, shape: RowShape) -> None:
    """The layout of a row the general loop of :func:`decode_row` read whole, every
    slot set, from its attribute list at ``pos``: its ``heads`` when each attribute
    has one value and a slot (none unasked), else one try less."""
    shape.tries -= 1
    heads = []
    n = len(buf)
    while pos < n:
        b = pos + 4 + buf[pos + 3]
        kind = buf[pos + 4 : b]
        i = shape.slots.get(kind, -1)
        end = pos + 2 + buf[pos + 1]
        # Not asked, or not one value: none (an empty SET, last in the message, ends it:
        # its value's length would be read past the end), or more.
        if i < 0 or end - b < 4 or b + 4 + buf[b + 3] != end:
            return
        heads.append((buf[pos + 2 : b + 1], i, b + 1 - pos))
        pos = end
    if len(heads) == shape.count:
        shape.heads = tuple(heads)
        shape.layout = tuple((len(h) + 4, _headers(h), i) for h, i, _skip in heads)


@functools.lru_cache(maxsize=64)  # every sweep learns the same few types again
def _headers(head: bytes) -> tuple[bytes, ...]:
    """The header of an attribute whose type and SET tag are ``head`` (``04 len type
    31``) holding one value of each length below 128, short-form lengths throughout:
    ``30 len`` head ``len 04 len``. A size whose lengths would not fit one octet, and
    a long-form length octet (128-255), get one that matches nothing."""
    out = []
    for size in range(128):
        seq = len(head) + 3 + size
        out.append(bytes((0x30, seq)) + head + bytes((2 + size, 0x04, size)) if seq < 0x80
                   else _NEVER)  # fmt: skip
    return tuple(out) + (_NEVER,) * 128


# Equal to no slice of a header's length (decode_row compares slices of that length).
_NEVER = b""


def _container(buf: bytes, pos: int) -> tuple[int, int]:
    """The (value start, value end) of the TLV at ``pos``, whose length is short or
    of one to three octets; (0, -1) for a longer form. IndexError past the buffer."""
    f = buf[pos + 1]
    if f < 0x80:
        return pos + 2, pos + 2 + f
    if f == 0x81:
        return pos + 3, pos + 3 + buf[pos + 2]
    if f == 0x82:
        return pos + 4, pos + 4 + (buf[pos + 2] << 8 | buf[pos + 3])
    if f == 0x83:
        return pos + 5, pos + 5 + (buf[pos + 2] << 16 | buf[pos + 3] << 8 | buf[pos + 4])
    return 0, -1


def read_entry(
    buf: bytes,
    names: dict[bytes, str],
    names_max: int,
    interned: frozenset[str] | None = None,
) -> tuple[int, bytes, dict[str, list[bytes]]] | None:
    """Read one LDAPMessage carrying a SearchResultEntry without controls as (message
    ID, objectName, {attribute type lower-cased: values}): the dict the client builds
    from :func:`decode_search_entry`'s answer (exchange.Request.entry), built here
    directly. ``names`` maps the types met to their lower-cased text (the client's
    table; a type met is added while it holds fewer than ``names_max``). The C reader
    gives the values of the ``interned`` types (lower-cased) as one object per distinct
    value until :func:`intern_clear`, equal to those made here.

    Returns None for everything else, which the caller reads with
    :func:`decode_search_entry` (same answer, or BerError): any other protocolOp,
    controls, a messageID of more than four octets, a length of more than three
    octets (values: two), a type of 128 bytes or more or not ASCII, a type met
    twice (in any case: the generic reader joins or replaces them), a message not
    filling the buffer, and any length that does not fit its container exactly.

    Why: the group entries of a cold initgroups of a user in 2,000 groups (2,160
    entries of 1.2 KiB, 61,000 values) went through a SearchEntry and a second dict
    per entry. Read here, with the headers of the usual length forms inline, reading
    them into Entry objects takes 17 % fewer instructions (valgrind, on the messages
    of perf/readpath.py), the whole initgroups 6 % fewer. The same in C
    (``_ber.decode_entry``, below) is what the client calls where it is built."""
    n = len(buf)
    try:
        if buf[0] != 0x30:
            return None
        pos, end = _container(buf, 0)
        if end != n or buf[pos] != 0x02:
            return None
        ilen = buf[pos + 1]
        a = pos + 2
        pos = a + ilen
        if not 0 < ilen <= 4 or buf[pos] != 0x64:
            return None
        one = buf[a]  # a one-octet messageID below 0x80 is its own value (signed INTEGER)
        msgid = one if ilen == 1 and one < 0x80 else int.from_bytes(buf[a:pos], "big", signed=True)
        # searchResEntry spanning the rest of the message (no controls), objectName.
        pos, end = _container(buf, pos)
        if end != n or buf[pos] != 0x04:
            return None
        a, pos = _container(buf, pos)
        if a == 0 or buf[pos] != 0x30:  # also: the objectName ends inside the message
            return None
        dn = buf[a:pos]
        # PartialAttributeList spanning the rest.
        pos, end = _container(buf, pos)
        if end != n:
            return None
        attrs: dict[str, list[bytes]] = {}
        while pos < n:
            # PartialAttribute ::= SEQUENCE { type OCTET STRING, vals SET OF OCTET STRING }
            if buf[pos] != 0x30:
                return None
            f = buf[pos + 1]
            if f < 0x80:
                pend = pos + 2 + f
                pos += 2
            elif f == 0x81:
                pend = pos + 3 + buf[pos + 2]
                pos += 3
            else:
                pos, pend = _container(buf, pos)
                if pend < 0:
                    return None
            if pend > n or buf[pos] != 0x04:
                return None
            f = buf[pos + 1]
            b = pos + 2 + f
            if f >= 0x80 or b + 2 > pend or buf[b] != 0x31:
                return None
            kind = buf[pos + 2 : b]
            f = buf[b + 1]
            if f < 0x80:
                vpos = b + 2
                vend = vpos + f
            else:
                vpos, vend = _container(buf, b)
            if vend != pend:
                return None
            name = names.get(kind)
            if name is None:
                if not kind.isascii():
                    return None  # str.lower() of a non-ASCII type: the generic reader's
                name = kind.decode("ascii").lower()
                if len(names) < names_max:
                    names[kind] = name
            if name in attrs:
                return None
            vals: list[bytes] = []
            attrs[name] = vals
            pos = pend
            while vpos < pend:
                if buf[vpos] != 0x04:
                    return None
                f = buf[vpos + 1]
                if f < 0x80:
                    a = vpos + 2
                    vpos = a + f
                elif f == 0x81:
                    a = vpos + 3
                    vpos = a + buf[vpos + 2]
                elif f == 0x82:
                    a = vpos + 4
                    vpos = a + (buf[vpos + 2] << 8 | buf[vpos + 3])
                else:
                    return None
                vals.append(buf[a:vpos])
            # A value running past the SET's end (its header read past it too, but
            # inside the buffer) ends the loop past it: declined here, once per SET
            # rather than checked per value (46,000 member values per cold initgroups
            # of bigroupuser).
            if vpos != pend:
                return None
    except IndexError:
        return None  # a header cut by the end of the buffer
    return msgid, dn, attrs


# read_entry and read_rows in C where they were built (`pip install` builds them when
# a C compiler and Python's headers are there; `make test` installs both): the same
# answers (tests/unit/test_deref_entries.py, test_deref_rows.py and test_ber_c.py run
# both), at a tenth of the cost. A cold initgroups of a user in 2,000 groups spent 18 %
# of the backend's CPU in read_entry, a cold large01 38 % in read_rows (py-spy of
# perf.replay); see docs/ARCHITECTURE.md, "The C entry reader".
try:
    from cached.ldap._ber import decode_entry as decode_entry
    from cached.ldap._ber import decode_rows as decode_rows
    from cached.ldap._ber import intern_clear as intern_clear
except ImportError:  # not built: the references
    decode_entry, decode_rows = read_entry, read_rows

    def intern_clear() -> None:
        """What the C reader interned let go: the reference interns nothing."""
