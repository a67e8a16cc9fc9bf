"""cached/ldap/entry.py decode_row: the reader of small SearchResultEntry messages of a
search whose entries are wanted as rows (the sweep of the user bases). It must give
what the generic reader (decode_search_entry) gives, or decline (None) and leave the
message to it; hostile bytes — truncated, lengths past their container, long-form
and huge lengths — are declined, never read past their end. Each malformed case
below is built so that it is declined only by its own bounds check: without that
check it would give a row (a wrong one) or raise. Pure logic."""

from __future__ import annotations

import contextlib

import pytest

from cached.ldap import ber
from cached.ldap import entry as ldap_entry

DN = b"uid=user00042,ou=people,dc=example,dc=test"
ATTRS = ["uid", "uidNumber", "gidNumber"]


def _slots(msgid: int = 7) -> dict[int, ldap_entry.RowShape]:
    """What Exchange.run passes for one row search (exchange.Request)."""
    return {msgid: ldap_entry.RowShape(ATTRS, [])}


def read(buf: bytes, shapes: dict[int, ldap_entry.RowShape] | None = None, msgid: int = 7):
    """decode_row's row for ``buf`` (put in the shape's rows), or None (nothing put)."""
    shapes = _slots(msgid) if shapes is None else shapes
    rows = shapes[msgid].rows
    before = len(rows)
    ok = ldap_entry.decode_row(buf, shapes)
    assert len(rows) == before + ok
    return rows[-1] if ok else None


def tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    return bytes((tag, n) if n < 0x80 else (tag, 0x81, n)) + body


def attr(kind: bytes, *values: bytes) -> bytes:
    return tlv(0x30, tlv(0x04, kind) + tlv(0x31, b"".join(tlv(0x04, v) for v in values)))


def entry(*attrs: bytes, msgid: bytes = b"\x07", dn: bytes = DN, controls: bytes = b"") -> bytes:
    op = tlv(0x64, tlv(0x04, dn) + tlv(0x30, b"".join(attrs)))
    return tlv(0x30, tlv(0x02, msgid) + op + controls)


GOOD = entry(attr(b"gidNumber", b"10000"), attr(b"UID", b"user00042"), attr(b"uidNumber", b"1"))


def generic_row(buf: bytes) -> tuple[str, list[list[bytes]]]:
    """The row the client builds from the generic reader (exchange.Request.entry)."""
    e = ldap_entry.decode_search_entry(buf)
    assert e is not None
    attrs = {k.decode().lower(): v for k, v in e.attrs.items()}
    return e.dn.decode(), [attrs.get(a.lower(), []) for a in ATTRS]


def test_a_small_entry_is_read_in_slot_order_as_the_generic_reader_reads_it():
    got = read(GOOD)
    assert got == (DN.decode(), [[b"user00042"], [b"1"], [b"10000"]])
    assert got == generic_row(GOOD)


def test_missing_unasked_and_multivalued_attributes():
    buf = entry(attr(b"cn", b"x"), attr(b"uid", b"a", b"b"), attr(b"objectClass", b"top"))
    got = read(buf)
    assert got == (DN.decode(), [[b"a", b"b"], [], []]) == generic_row(buf)
    assert read(entry()) == (DN.decode(), [[], [], []]) == generic_row(entry())


def test_empty_value_sets_and_message_ids_as_the_generic_reader_reads_them():
    # A SET without values, last in the message: nothing is read past its end; also
    # where every asked slot is set, so the layout is learnt from it (it raised
    # IndexError there, found by differential fuzzing).
    every = entry(attr(b"gidNumber", b"5"), attr(b"uidNumber", b"1"), attr(b"uid"))
    for buf in (entry(attr(b"uid")), entry(attr(b"gidNumber", b"5"), attr(b"uid")), every):
        shapes = _slots()
        got = read(buf, shapes)
        assert got == generic_row(buf) and got is not None and got[1][0] == []
        assert not shapes[7].heads  # not a layout: one value per attribute is
    # The messageID is a signed INTEGER: 0xff is -1, 0x00 0xff is 255.
    for msgid, wire in ((-1, b"\xff"), (255, b"\x00\xff"), (0x1234, b"\x12\x34")):
        buf = entry(attr(b"uid", b"a"), msgid=wire)
        assert read(buf, msgid=msgid) == (DN.decode(), [[b"a"], [], []])
        assert read(buf, _slots(msgid + 1), msgid + 1) is None  # another search's
        assert ldap_entry.decode_search_entry(buf).message_id == msgid  # type: ignore[union-attr]


def test_a_spelling_met_is_remembered_and_the_table_is_bounded():
    slots = _slots()
    read(GOOD, slots)
    table = slots[7].slots
    assert table[b"UID"] == 0  # looked up lower-cased once, then directly
    for i in range(200):  # a server sending ever new attribute types
        read(entry(attr(b"x%d" % i, b"v")), slots)
    assert len(table) <= 64


@pytest.mark.parametrize(
    "values",
    [b"\x05\x00", b"\x05", b"\x04\x05", b"\x04\x01a\x30\x00"],
    ids=["another tag", "a header cut by its SET", "a value past its SET", "then another tag"],
)
def test_an_unasked_attribute_the_generic_reader_refuses_is_declined(values):
    """Found by differential fuzzing: the values of a type not asked for were skipped
    unread, so a row came from a message the generic reader refuses."""
    buf = entry(attr(b"uid", b"a"), tlv(0x30, tlv(0x04, b"cn") + tlv(0x31, values)))
    for shapes in (_slots, _learnt):
        assert read(buf, shapes()) is None
    with pytest.raises(ber.BerError):
        ldap_entry.decode_search_entry(buf)


def test_an_objectname_not_utf8_is_left_to_the_generic_reader():
    buf = entry(attr(b"uid", b"a"), dn=b"uid=\xff,dc=test")
    assert read(buf) is None
    ldap_entry.decode_search_entry(buf)


@pytest.mark.parametrize(
    "buf",
    [
        entry(attr(b"uid", b"a"), msgid=b"\x08"),  # another search's message
        tlv(0x30, tlv(0x02, b"\x07") + tlv(0x65, b"\x0a\x01\x00\x04\x00\x04\x00")),  # done
        entry(attr(b"uid", b"a"), controls=tlv(0xA0, tlv(0x30, tlv(0x04, b"1.2.3")))),
        entry(attr(b"uid", b"a"), attr(b"uid", b"b")),  # the generic reader joins them
        entry(attr("uİd".encode(), b"a")),  # non-ASCII type: str.lower() rules apply
        entry(attr(b"uid", b"a" * 90)),  # 130 bytes or more
    ],
)
def test_declined_but_read_by_the_generic_reader(buf):
    assert read(buf) is None
    assert read(buf, _learnt()) is None
    ldap_entry.decode_search_entry(buf)  # no BerError: well-formed, just not for decode_row


def _past_end() -> bytes:
    body = entry(attr(b"gidNumber", b"1"), attr(b"uid", b"abc"))
    at = len(body) - len(b"abc") - 1  # the value's length octet
    grown = bytearray(body)
    for k in (at, at - 2, at - 9):  # value, SET, attribute lengths
        grown[k] += 2
    return bytes(grown)


def _long_form_read_as_short() -> bytes:
    """30 81 …: a 131-byte message whose first length octet, 0x81 (long form, one
    octet: 2), read as a short form would say 129, which is what follows: an
    INTEGER and a valid entry. The generic reader refuses it (BerError)."""
    inner = tlv(0x02, b"\x07") + tlv(0x64, tlv(0x04, DN) + tlv(0x30, attr(b"uid", b"x" * 67)))
    assert len(inner) == 129
    return b"\x30\x81" + inner


def _hostile() -> list[tuple[str, bytes]]:
    good = bytearray(GOOD)
    n = len(good)
    dn_at = good.index(DN) - 1  # the objectName's length octet
    list_at = dn_at + 1 + len(DN)  # the PartialAttributeList's tag
    a1 = list_at + 2  # the first PartialAttribute (gidNumber)
    set1 = a1 + 4 + len(b"gidNumber")  # its SET's tag
    val1 = set1 + 2  # its value's tag

    def patch(at: int, *octets: int) -> bytes:
        b = bytearray(good)
        b[at : at + len(octets)] = bytes(octets)
        return bytes(b)

    return [
        ("truncated message", bytes(good[:-1])),
        ("message length past the buffer", patch(1, n - 1)),
        ("message length short of the buffer", patch(1, n - 3)),
        ("message length in long form", bytes((0x30, 0x81, n - 2)) + bytes(good[2:])),
        ("huge message length", bytes((0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF)) + bytes(good[2:])),
        ("long form read as short", _long_form_read_as_short()),
        ("messageID of no octets", entry(attr(b"uid", b"a"), msgid=b"")),
        ("messageID of five octets", entry(attr(b"uid", b"a"), msgid=b"\x00\x00\x00\x00\x07")),
        ("entry length past the message", patch(6, good[6] + 1)),
        ("objectName length past the message", patch(dn_at, n)),
        ("objectName in long form", patch(dn_at, 0x81)),
        ("attribute list length past the message", patch(list_at + 1, good[list_at + 1] + 2)),
        ("attribute length past the list", patch(a1 + 1, n)),
        ("attribute length in long form", patch(a1 + 1, 0x84)),
        ("type length past its attribute", patch(a1 + 3, 0x7F)),
        ("SET length past its attribute", patch(set1 + 1, good[set1 + 1] + 2)),
        ("SET length short of its attribute", patch(set1 + 1, good[set1 + 1] - 1)),
        ("value length past its SET", patch(val1 + 1, good[val1 + 1] + 4)),
        ("value length in long form (huge)", patch(val1 + 1, 0x84)),
        ("value header cut by its SET", entry(attr(b"uid", b"a")[:-3] + b"\x01\x04")),
        ("value not an OCTET STRING", patch(val1, 0x05)),
        ("attribute not a SEQUENCE", patch(a1, 0x31)),
        ("type not an OCTET STRING", patch(a1 + 2, 0x05)),
        ("values not a SET", patch(set1, 0x30)),
        ("attribute header cut by the message end", entry(attr(b"uid", b"a"), b"\x30\x00")),
        ("entry header cut by the message end", bytes.fromhex("300702040000000764")),
        # The last attribute, its SET and its value each 2 longer than what is left:
        # consistent with each other, past the message.
        ("attribute and its parts past the message", _past_end()),
        # The last value's header: its tag the SET's last octet, its length beyond it.
        (
            "value header cut by its SET, at the message end",
            entry(attr(b"gidNumber", b"1"), b"\x30\x0b\x04\x03uid\x31\x04\x04\x01a\x04"),
        ),
    ]


@pytest.mark.parametrize("case", _hostile(), ids=lambda c: c[0])
def test_hostile_bytes_are_declined(case):
    _name, buf = case
    # Every bounds check on its own: declined (None), never a row, never an exception;
    # by the general loop and by the learnt layout of the message they are made from.
    assert read(buf) is None
    assert read(buf, _learnt()) is None
    # Left to the generic reader, which refuses it too or reads it as the BER it is.
    with contextlib.suppress(ber.BerError):
        ldap_entry.decode_search_entry(buf)


def test_hostile_lengths_give_no_row_at_any_cut():
    """Every prefix of a valid message, and every single octet changed to a length
    that points past its container, is declined or read exactly as the generic
    reader reads it: never a value from past its container."""
    for shapes in (_slots, _learnt):
        for cut in range(len(GOOD)):
            assert read(GOOD[:cut], shapes()) is None
        for at in range(1, len(GOOD)):
            for octet in (0x7F, 0x80, 0x81, 0x84, 0xFF, GOOD[at] + 1, max(GOOD[at] - 1, 0)):
                bad = GOOD[:at] + bytes((octet,)) + GOOD[at + 1 :]
                got = read(bad, shapes())
                if got is None:
                    continue
                # Accepted only where the change left a well-formed message (a value's
                # bytes): then it is what the generic reader gives.
                assert got == generic_row(bad), (at, octet, shapes)


def _learnt() -> dict[int, ldap_entry.RowShape]:
    """A shape that has read GOOD: its layout learnt (``heads``)."""
    shapes = _slots()
    read(GOOD, shapes)
    assert [h[1] for h in shapes[7].heads] == [2, 0, 1]  # gidNumber, UID, uidNumber
    return shapes


def test_the_learnt_layout_reads_rows_like_it_and_only_those():
    """After one row of the usual shape, rows with the same types in the same order,
    one value each, are read by the learnt layout (here shown by emptying the table
    of types, which the general loop needs: it would find no asked attribute); any
    other row is read by the general loop. Both give the generic reader's row."""
    like = [
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"someone"), attr(b"uidNumber", b"33")),
        entry(attr(b"gidNumber", b""), attr(b"UID", b"x" * 20), attr(b"uidNumber", b"3")),
    ]
    unlike = [
        entry(attr(b"UID", b"a"), attr(b"gidNumber", b"2"), attr(b"uidNumber", b"3")),  # order
        entry(attr(b"gidNumber", b"2"), attr(b"uid", b"a"), attr(b"uidNumber", b"3")),  # case
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"a", b"b"), attr(b"uidNumber", b"3")),
        entry(attr(b"gidNumber", b"2"), attr(b"UID"), attr(b"uidNumber", b"3")),  # no value
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"a")),  # one missing
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"a"), attr(b"uidNumber", b"3"),
              attr(b"cn", b"c")),  # one more (not asked)
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"a"), attr(b"uidNumber", b"3"),
              attr(b"uid", b"b")),  # asked twice: declined, the generic reader joins them
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"a"), attr(b"uidNumberX", b"3")),
    ]  # fmt: skip
    for buf in like + unlike:
        got = read(buf, _learnt())
        assert got is None or got == generic_row(buf), buf
        assert (got is None) == (buf is unlike[-2]), buf
    for buf in like:
        shapes = _learnt()
        shapes[7].slots.clear()
        assert read(buf, shapes) == generic_row(buf)
    for buf in unlike:
        shapes = _learnt()
        shapes[7].slots.clear()
        assert read(buf, shapes) != generic_row(buf)


def test_the_layout_is_learnt_from_a_usual_row_within_a_few_tries():
    shapes = _slots()
    odd = entry(attr(b"uid", b"a", b"b"), attr(b"uidNumber", b"1"), attr(b"gidNumber", b"2"))
    read(odd, shapes)
    read(entry(attr(b"uid", b"a")), shapes)  # a slot not set: not a layout
    assert not shapes[7].heads
    read(GOOD, shapes)
    assert [h[0] for h in shapes[7].heads] == [
        b"\x04\x09gidNumber\x31", b"\x04\x03UID\x31", b"\x04\x09uidNumber\x31"
    ]
    never = _slots()
    for _ in range(8):
        read(odd, never)
    read(GOOD, never)
    assert never[7].heads == ()  # tries used up: the general loop reads every row



def test_read_rows_reads_runs_as_decode_row_reads_each_message():
    """read_rows: the rows of a run of messages, each as decode_row reads it (the
    learnt layout inline, anything else by decode_row), up to the first message
    decode_row declines, whose index it returns; nothing read past it."""
    like = [
        entry(attr(b"gidNumber", b"2"), attr(b"UID", b"u%d" % i), attr(b"uidNumber", b"%d" % i))
        for i in range(5)
    ]
    unlike = entry(attr(b"UID", b"a"), attr(b"gidNumber", b"2"), attr(b"uidNumber", b"3"))
    other = entry(attr(b"UID", b"b"), msgid=b"\x08")  # another search's: declined
    bad_dn = entry(attr(b"gidNumber", b"2"), attr(b"UID", b"c"), attr(b"uidNumber", b"4"),
                   dn=b"uid=\xff,dc=test")  # fmt: skip
    hostile = [buf for _name, buf in _hostile()]
    runs = [
        [GOOD, *like],
        [GOOD, *like[:2], unlike, *like[2:]],
        [*like, other, *like],
        [GOOD, bad_dn, *like],
        *([GOOD, like[0], h, like[1]] for h in hostile),
    ]
    for msgs in runs:
        one, many = _slots(), _slots()
        want = len(msgs)
        for k, buf in enumerate(msgs):
            if not ldap_entry.decode_row(buf, one):
                want = k
                break
        assert ldap_entry.read_rows(msgs, 0, many) == want
        assert many[7].rows == one[7].rows
        assert many[7].heads == one[7].heads
    # From an index on, and at the end.
    shapes = _slots()
    assert ldap_entry.read_rows([other, GOOD, *like], 1, shapes) == 7
    assert len(shapes[7].rows) == 6
    assert ldap_entry.read_rows(like, len(like), shapes) == len(like)
