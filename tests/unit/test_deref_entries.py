"""cached/ldap/entry.py decode_entry: the reader of SearchResultEntry messages without
controls (the group entries of a walk, any search's plain entries). It must give
what the client builds from the generic reader (decode_search_entry, then
exchange.Request.entry: the types lower-cased), or decline (None) and leave the
message to it; hostile bytes — truncated, lengths past their container, long-form
and huge lengths — are declined, never read past their end. Every test runs on both
readers: the pure-Python reference (ldap_entry.read_entry) and the C one
(cached/ldap/_ber.c), which must give the same answers, None included; and the C
reader must be built (`make test` installs the compiler). Pure logic."""

from __future__ import annotations

import contextlib

import pytest

from cached.ldap import ber
from cached.ldap import entry as ldap_entry

try:
    from cached.ldap import _ber
except ImportError:  # reported by test_the_c_reader_is_built
    _ber = None  # type: ignore[assignment]

READERS = {"python": ldap_entry.read_entry, "c": _ber.decode_entry if _ber else None}


@pytest.fixture(params=sorted(READERS), autouse=True)
def reader(request, monkeypatch):
    """Each test once per reader; ``decode`` and ``ldap_entry.decode_entry`` are it."""
    fn = READERS[request.param]
    if fn is None:
        pytest.fail("cached/ldap/_ber.c is not built: `pip install -e .` with gcc and "
                    "python3-dev installed builds it (contrib/install-deps installs them)")
    monkeypatch.setattr(ldap_entry, "decode_entry", fn)
    return fn

DN = b"cn=g1,ou=groups,dc=example,dc=test"
MEMBERS = [b"uid=user%05d,ou=people,dc=example,dc=test" % i for i in range(30)]


def tlv(tag: int, body: bytes) -> bytes:
    return ber.tlv(tag, body)  # short, 0x81 .. 0x83 lengths as the body needs


def attr(kind: bytes, *values: bytes) -> bytes:
    return tlv(0x30, tlv(0x04, kind) + tlv(0x31, b"".join(tlv(0x04, v) for v in values)))


def entry(*attrs: bytes, msgid: bytes = b"\x07", dn: bytes = DN, controls: bytes = b"") -> bytes:
    op = tlv(0x64, tlv(0x04, dn) + tlv(0x30, b"".join(attrs)))
    return tlv(0x30, tlv(0x02, msgid) + op + controls)


GROUP = entry(
    attr(b"objectClass", b"top", b"groupOfNames", b"posixGroup"),
    attr(b"cn", b"g1"),
    attr(b"gidNumber", b"20001"),
    attr(b"member", *MEMBERS),
)


def generic(buf: bytes) -> tuple[int, bytes, dict[str, list[bytes]]]:
    """What the client builds from the generic reader (exchange.Request.entry)."""
    e = ldap_entry.decode_search_entry(buf)
    assert e is not None and not e.controls
    return e.message_id, e.dn, {k.decode().lower(): v for k, v in e.attrs.items()}


def decode(buf: bytes) -> tuple[int, bytes, dict[str, list[bytes]]] | None:
    return ldap_entry.decode_entry(buf, {}, 64)


def test_a_group_entry_is_read_as_the_generic_reader_reads_it():
    assert len(GROUP) > 1000  # two-octet lengths for the message, the list, the SET
    got = decode(GROUP)
    assert got == generic(GROUP)
    assert got is not None and got[2]["member"] == MEMBERS and got[2]["cn"] == [b"g1"]


@pytest.mark.parametrize(
    "buf",
    [
        entry(),  # no attributes
        entry(attr(b"cn")),  # a SET without values, last in the message
        entry(attr(b"cn", b""), attr(b"member;range=0-*", b"a")),  # empty value, options
        entry(attr(b"cn", b"x" * 200)),  # a value of a one-octet long-form length
        entry(attr(b"description", b"x" * 300)),  # two octets
        entry(attr(b"member", *(MEMBERS * 2000))),  # three octets: 2.6 MB
        entry(attr(b"cn", b"a"), msgid=b"\xff"),  # messageID -1 (signed INTEGER)
        entry(attr(b"cn", b"a"), msgid=b"\x00\xff"),  # 255
        entry(attr(b"cn", b"a"), msgid=b"\x12\x34\x56\x78"),
        entry(attr(b"CN", b"a"), attr(b"GidNumber", b"1")),  # types lower-cased
    ],
)
def test_shapes_as_the_generic_reader_reads_them(buf):
    got = decode(buf)
    assert got is not None and got == generic(buf)


def test_a_spelling_met_is_remembered_and_the_table_is_bounded():
    names: dict[bytes, str] = {}
    ldap_entry.decode_entry(GROUP, names, 64)
    assert names[b"objectClass"] == "objectclass"
    for i in range(200):  # a server sending ever new attribute types
        assert ldap_entry.decode_entry(entry(attr(b"x%d" % i, b"v")), names, 64) is not None
    assert len(names) == 64


@pytest.mark.parametrize(
    "buf",
    [
        entry(attr(b"cn", b"a"), controls=tlv(0xA0, tlv(0x30, tlv(0x04, b"1.2.3")))),
        entry(attr(b"cn", b"a"), attr(b"cn", b"b")),  # the generic reader joins them
        entry(attr(b"cn", b"a"), attr(b"CN", b"b")),  # ... and the client keeps the last
        entry(attr("cİ".encode(), b"a")),  # non-ASCII type: str.lower() rules apply
        entry(attr(b"x" * 130, b"a")),  # a type of 128 bytes or more
        entry(attr(b"cn", b"a"), msgid=b"\x00\x00\x00\x00\x07"),  # five-octet messageID
        entry(attr(b"cn", b"x" * 70000)),  # a value of a three-octet length
    ],
)
def test_declined_but_read_by_the_generic_reader(buf):
    assert decode(buf) is None
    assert ldap_entry.decode_search_entry(buf) is not None  # well-formed, just not for us


def test_other_messages_are_declined():
    done = tlv(0x30, tlv(0x02, b"\x07") + tlv(0x65, b"\x0a\x01\x00\x04\x00\x04\x00"))
    assert decode(done) is None and ldap_entry.decode_search_entry(done) is None


def _four_octet_lengths() -> bytes:
    """The message's length in the four-octet long form (valid BER)."""
    inner = GROUP[4:]  # GROUP's length is 0x82 xx xx
    return b"\x30\x84" + len(inner).to_bytes(4, "big") + inner


def _hostile() -> list[tuple[str, bytes]]:
    good = entry(attr(b"gidNumber", b"1"), attr(b"cn", b"abc"))
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
        ("truncated message", good[:-1]),
        ("message length past the buffer", patch(1, n - 1)),
        ("message length short of the buffer", patch(1, n - 3)),
        ("huge message length", bytes((0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF)) + good[2:]),
        ("four-octet message length", _four_octet_lengths()),
        ("messageID of no octets", entry(attr(b"cn", b"a"), msgid=b"")),
        ("entry length past the message", patch(6, good[6] + 1)),
        ("entry length short of the message", patch(6, good[6] - 1)),
        ("objectName length past the message", patch(dn_at, n)),
        ("objectName into the attribute list", patch(dn_at, len(DN) + 1)),
        ("objectName in a four-octet form", patch(dn_at, 0x84)),
        ("attribute list length past the message", patch(list_at + 1, good[list_at + 1] + 2)),
        ("attribute length past the list", patch(a1 + 1, n)),
        ("attribute length in long form (huge)", patch(a1 + 1, 0x84)),
        ("type length past its attribute", patch(a1 + 3, 0x7F)),
        ("SET length past its attribute", patch(set1 + 1, good[set1 + 1] + 2)),
        ("SET length short of its attribute", patch(set1 + 1, good[set1 + 1] - 1)),
        ("value length past its SET", patch(val1 + 1, good[val1 + 1] + 4)),
        ("value length in long form (huge)", patch(val1 + 1, 0x84)),
        ("value header cut by its SET", entry(attr(b"cn", b"a")[:-3] + b"\x01\x04")),
        ("value not an OCTET STRING", patch(val1, 0x05)),
        ("attribute not a SEQUENCE", patch(a1, 0x31)),
        ("type not an OCTET STRING", patch(a1 + 2, 0x05)),
        ("values not a SET", patch(set1, 0x30)),
        ("attribute header cut by the message end", entry(attr(b"cn", b"a"), b"\x30")),
        ("entry header cut by the message end", bytes.fromhex("300702040000000764")),
        (
            "value header cut by its SET, at the message end",
            entry(attr(b"gidNumber", b"1"), b"\x30\x0a\x04\x02cn\x31\x04\x04\x01a\x04"),
        ),
        (
            "a one-octet long-form value length cut by its SET",
            entry(attr(b"gidNumber", b"1"), b"\x30\x09\x04\x02cn\x31\x03\x04\x01a\x04\x81"),
        ),
    ]


@pytest.mark.parametrize("case", _hostile(), ids=lambda c: c[0])
def test_hostile_bytes_are_declined(case):
    _name, buf = case
    # Every bounds check on its own: declined (None), never an entry, never an exception.
    assert decode(buf) is None
    # Left to the generic reader, which refuses it too or reads it as the BER it is.
    with contextlib.suppress(ber.BerError):
        ldap_entry.decode_search_entry(buf)


@pytest.mark.parametrize("good", [entry(attr(b"cn", b"ab"), attr(b"gidNumber", b"7")), GROUP])
def test_no_value_from_past_its_container_at_any_cut_or_octet(good):
    """Every prefix of a valid message, and every single octet changed to a length
    that points past its container, is declined or read exactly as the generic
    reader reads it."""
    step = 1 if len(good) < 200 else 7
    for cut in range(0, len(good), step):
        assert decode(good[:cut]) is None
    for at in range(1, len(good), step):
        for octet in (0x00, 0x7F, 0x80, 0x81, 0x82, 0x83, 0x84, 0xFF, good[at] + 1, good[at] - 1):
            if not 0 <= octet <= 0xFF:
                continue
            bad = good[:at] + bytes((octet,)) + good[at + 1 :]
            got = decode(bad)
            if got is None:
                continue
            # Accepted only where the change left a well-formed message (a value's
            # bytes): then it is what the generic reader gives.
            assert got == generic(bad), (at, octet)

