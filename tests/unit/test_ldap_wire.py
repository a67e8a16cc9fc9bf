"""cached/ldap/wire.py and controls.py: search requests encoded without pyasn1 are the bytes ldap3
2.9.1 sends for the same arguments (filters of every shape the client builds, the
controls it sends); its result reader against ldap3's encoder. Pure logic."""

from __future__ import annotations

import pytest
from ldap3.operation.search import search_operation
from ldap3.protocol.convert import build_controls_list
from ldap3.protocol.rfc2696 import paged_search_control
from ldap3.protocol.rfc4511 import LDAPMessage, MessageID, ProtocolOp
from ldap3.utils.asn1 import encode  # what ldap3's strategies send with

from cached.ldap import ber, deref, exchange, wire
from cached.ldap import entry as ldap_entry
from cached.ldap.batch import NamePart
from cached.ldap.controls import (
    ASQ_OID,
    PAGED_RESULTS_OID,
    Control,
    encode_asq,
    paged_control,
    paged_cookie,
)
from cached.ldap.schema import assertions, escape

_OR = "(|" + "".join(f"(member=uid=user{i:05d},ou=people,dc=example,dc=test)" for i in range(2000))
FILTERS = [
    "(uid=alice)",
    "(objectClass=*)",
    "(uid=al*)",
    "(uid=*ce)",
    "(uid=a*l*i*ce)",
    "(uid=*l*)",
    "(uidNumber>=1000)",
    "(uidNumber<=2000)",
    "(cn~=smith)",
    "(cn=)",
    f"(member={escape('cn=Smith, John (ext) *,ou=people,dc=x')})",
    f"(uid={escape('müller')})",
    f"(cn={escape('nul' + chr(0) + 'byte')})",
    r"(cn=back\slash)",  # not an escape: sent as a backslash, as ldap3 does
    r"(cn=a\5C\2a)",
    "(memberOf:1.2.840.113556.1.4.1941:=cn=g,dc=x)",
    "(userAccountControl:1.2.840.113556.1.4.803:=2)",
    "(cn:dn:=x)",
    "(:dn:2.4.6.8.10:=Dino)",
    "(:caseExactMatch:=Fred)",
    "(cn:dn:caseExactMatch:=Fred)",
    "(!(uid=bob))",
    "(&(objectClass=posixGroup)(|(cn=a)(cn=b))(!(gidNumber=0)))",
    "(&(objectClass=posixAccount)(uid=*))",
    _OR + ")",
    f"(&(objectClass=groupOfNames){_OR}(gidNumber=5)))",
    f"(&(|(cn=a)(cn=b)){NamePart('ab', 'xyz', True).filter('cn')})",
    f"(&(uid=x){NamePart('', '0123456789abcdefghijklmnopqrstuvwxyz', True).filter('uid')})",
    # Runs of an OR's equality items (wire._equality_run), and the runs it declines
    # to the loop: another attribute, a nested filter, spaces, "*", an escape.
    "(|(member=cn=a,dc=x)(member=cn=b=c,dc=x)(member=)(member=cn=Zoë Müller,dc=x))",
    "(|(member=a)(member=b)(cn=c))",
    "(|(member=a)(cn=b)(member=c)(member=d))",
    "(|(member=a)(Member=b))",
    "(|(member=a)(member=b)(&(cn=c)(cn=d)))",
    "(|(member=a)(&(cn=c)(cn=d))(member=b))",
    "(|(member=a)(member=b)(!(cn=c)))",
    "(|(member= a )(member=b  )(member=\u2003c))",
    "(|(member=a) (member=b))",
    "(|(member=a)(member=b*))",
    "(|(member=a)(member=*))",
    "(|(member=a)(member=b\\2a))",
    "(|(member=a)(member>=b))",
    "(&(member=a)(member=b))",
    "(&(objectClass=x)(|(uid=a)(uid=b))(|(uid=c)(uid=d)))",
    # The value lengths where the item's header goes from one length octet to two.
    "(|" + "".join(f"(member={'x' * n})" for n in range(110, 125)) + ")",
    "(|" + "".join(f"(member={'x' * n})" for n in range(105, 118)) + ")",
    "(|" + "".join(f"(member={'x' * n})" for n in range(110, 119)) + ")",
    "(|" + "".join(f"(member={'x' * n})" for n in range(110, 120)) + ")",
    "(|(member=" + "é" * 70 + ")(member=" + "x" * 300 + "))",
]


def ldap3_bytes(
    msgid: int,
    base: str,
    scope: str,
    filt: str,
    attrs: list[str],
    time_limit: int,
    controls: list[Control] | None,
    paged: tuple[int, bytes | None] | None,
) -> bytes:
    """What ldap3's Connection.search and SyncStrategy.send put on the wire (its own
    Boolean encoder: TRUE is 0xFF, RFC 4511 §5.1)."""
    ctrls = list(controls or [])
    if paged is not None:
        ctrls.append(paged_search_control(False, paged[0], paged[1]))
    request = search_operation(
        base, filt, {"base": 0, "one": 1, "sub": 2}[scope], 0, attrs or ["1.1"],
        0, time_limit, False, True, True,
    )  # fmt: skip
    msg = LDAPMessage()
    msg["messageID"] = MessageID(msgid)
    msg["protocolOp"] = ProtocolOp().setComponentByName("searchRequest", request)
    built = build_controls_list(ctrls)
    if built is not None:
        msg["controls"] = built
    return bytes(encode(msg))


def ours(msgid, base, scope, filt, attrs, time_limit, controls, paged) -> bytes:
    ctrls = list(controls or [])
    if paged is not None:
        ctrls.append(paged_control(*paged))
    return wire.encode_search(
        msgid, base, wire.SCOPES[scope], wire.encode_filter(filt), attrs,
        time_limit=time_limit, controls=ctrls,
    )  # fmt: skip


@pytest.mark.parametrize("filt", FILTERS, ids=range(len(FILTERS)))
def test_filters_encode_as_ldap3_does(filt):
    args = (7, "ou=groups,dc=example,dc=test", "sub", filt, ["cn", "gidNumber"], 30, None, None)
    assert ours(*args) == ldap3_bytes(*args)


DEREF = (deref.DEREF_OID, True, deref.encode_request([("member", ["uid", "cn", "objectClass"])]))
ASQ = (ASQ_OID, True, encode_asq("member"))


@pytest.mark.parametrize(
    "args",
    [
        (1, "", "base", "(objectClass=*)", [], 0, None, None),
        (127, "dc=x", "one", "(uid=a)", ["uid"], 5, None, (1000, None)),
        (128, "dc=x", "sub", "(uid=a)", ["uid"], 5, [DEREF], (1000, b"\x00\x01cookie" * 30)),
        (70000, "cn=g,dc=x", "base", "(objectClass=*)", ["cn"], 3600, [DEREF, ASQ], None),
        (
            2**31 - 1,
            "dc=ü",
            "sub",
            _OR + ")",
            ["member", "cn", "gidNumber", "objectClass"],
            8,
            [DEREF],
            (500, b"c"),
        ),
        (9, "dc=x", "sub", "(uid=a)", ["uid"], 0, [("1.2.3", False, None)], (0, None)),
    ],
    ids=["root-dse", "paged", "deref+paged-cookie", "deref+asq", "big", "no-value"],
)
def test_requests_with_controls_encode_as_ldap3_does(args):
    assert ours(*args) == ldap3_bytes(*args)


@pytest.mark.parametrize(
    "bad",
    [
        "uid=a", "(uid=a", "(uid=a))", "((uid=a)", "(&(uid=a)", "(!(a=1)(b=2))", "(uida)", "",
        # An OR's items that are no flat run (wire._equality_run declines them).
        "(|(member=a)(member=b(member=c)x))",
        "(|(member=a)(member=b)x)",
    ],
)  # fmt: skip
def test_malformed_filters_are_refused_with_the_filter_named(bad):
    with pytest.raises(wire.FilterError):
        wire.encode_filter(bad)


def _done(msgid: int, code: int, message: bytes, controls: bytes = b"") -> bytes:
    t = ber.tlv
    op = t(0x65, t(0x0A, bytes([code])) + t(4, b"dc=m") + t(4, message))
    ctrls = t(0xA0, controls) if controls else b""
    return t(0x30, t(0x02, msgid.to_bytes(2, "big")) + op + ctrls)


def test_search_done_with_a_paged_cookie_is_read():
    t = ber.tlv
    value = t(0x30, t(0x02, b"\x00") + t(4, b"next-page"))
    ctrl = t(0x30, t(4, PAGED_RESULTS_OID.encode()) + t(4, value))
    r = wire.decode_response(_done(300, 4, b"size limit", ctrl))
    assert (r.message_id, r.op, r.code, r.matched_dn, r.message) == (
        300, wire.SEARCH_RESULT_DONE, 4, b"dc=m", b"size limit")  # fmt: skip
    assert paged_cookie(r.controls[PAGED_RESULTS_OID.encode()]) == b"next-page"
    assert paged_cookie(t(0x30, t(0x02, b"\x00") + t(4, b""))) == b""


def test_notice_of_disconnection_is_read():
    t = ber.tlv
    name = t(0x8A, wire.NOTICE_OF_DISCONNECTION)
    op = t(0x78, t(0x0A, b"\x34") + t(4, b"") + t(4, b"bye") + name)
    r = wire.decode_response(t(0x30, t(0x02, b"\x00") + op))
    assert (r.message_id, r.op, r.code, r.name) == (
        0, wire.EXTENDED_RESPONSE, 52, wire.NOTICE_OF_DISCONNECTION)  # fmt: skip


@pytest.mark.parametrize("cut", [1, 3, 8, 15])
def test_truncated_results_are_refused(cut):
    msg = _done(5, 0, b"")
    with pytest.raises(ber.BerError):
        wire.decode_response(msg[:-cut] if cut < len(msg) else msg[:1])


def _entry(
    length_form: int, n_values: int, msgid: int = 5
) -> tuple[bytes, dict[bytes, list[bytes]]]:
    """A SearchResultEntry with every length written in ``length_form`` octets (0:
    short form where it fits), so the decoder's inline and general paths both read it."""

    def tlv(tag: int, body: bytes) -> bytes:
        n = len(body)
        if length_form == 0 and n < 0x80:
            return bytes((tag, n)) + body
        k = max(length_form, (n.bit_length() + 7) // 8, 1)
        return bytes((tag, 0x80 | k)) + n.to_bytes(k, "big") + body

    attrs = {
        b"uid": [b"user01234"],
        b"uidNumber": [b"11235"],
        b"member": [b"uid=u%05d,ou=people,dc=example,dc=test" % i for i in range(n_values)]
        + [b"x" * 300],
    }
    body = b"".join(
        tlv(0x30, tlv(0x04, k) + tlv(0x31, b"".join(tlv(0x04, v) for v in vs)))
        for k, vs in attrs.items()
    )
    op = tlv(0x64, tlv(0x04, b"uid=user01234,ou=people,dc=example,dc=test") + tlv(0x30, body))
    return tlv(0x30, tlv(0x02, msgid.to_bytes(1 if msgid < 0x80 else 2, "big")) + op), attrs


@pytest.mark.parametrize("form", [0, 1, 2, 3])
@pytest.mark.parametrize("n_values", [0, 3, 40])
def test_search_entry_every_length_form_and_every_truncation(form, n_values):
    """decode_search_entry reads short, one-, two- and three-octet lengths alike (the
    first two inline), and refuses every truncation of the message: a header or a
    value that would run past its container is never read from the bytes after it."""
    msg, attrs = _entry(form, n_values)
    e = ldap_entry.decode_search_entry(msg)
    assert e is not None and e.message_id == 5 and e.controls == []
    assert e.dn == b"uid=user01234,ou=people,dc=example,dc=test" and e.attrs == attrs
    big, _ = _entry(form, n_values, msgid=300)
    assert (got := ldap_entry.decode_search_entry(big)) is not None and got.message_id == 300
    for cut in range(len(msg)):
        with pytest.raises((ber.BerError, IndexError)):
            ldap_entry.decode_search_entry(msg[:cut])
    # A message whose outer length claims less than its parts: refused as well.
    for k in range(2, 8):
        inner = msg[2:] if msg[1] < 0x80 else msg[2 + (msg[1] & 0x7F) :]
        short = bytes((0x30, len(inner) - k)) + inner if len(inner) - k < 0x80 else None
        if short is not None:
            with pytest.raises((ber.BerError, IndexError)):
                ldap_entry.decode_search_entry(short)


@pytest.mark.parametrize(
    "item",
    [
        "member=uid=user00001,ou=people,dc=example,dc=test",
        "cn=User 00001",
        "cn=  padded value  ",
        "cn=",
        "cn=   ",
        "2.5.4.3=x",
        "cn;lang-en=Zoë",
        "uid=a\0b",
        "member=cn=Smith\\2c John,ou=people",  # an escape: the general path
        "cn =x",  # space before '=': the general path
        "cn~=smith",
        "uidNumber>=1000",
        "cn:caseExactMatch:=x",
        "cn=a*b",
        "member=uid=" + "x" * 120,  # long-form lengths: the value's, then the item's
        "member=uid=" + "x" * 200,
    ],
)
def test_equality_fast_path_gives_what_the_general_reader_gives(item):
    """encode_filter reads plain equality items by str methods (else one regex
    match): the same BER as
    _item, the reader of every item, whatever the spaces, options or characters."""
    want = wire._item(item)
    assert wire.encode_filter(f"({item})") == want
    assert wire.encode_filter(f"(|({item})( {item} ))") == tlv_or([want, wire._item(item)])


def tlv_or(children: list[bytes]) -> bytes:
    return ber.tlv(0xA1, b"".join(children))


def _paged_done(msgid: int, code: int, cookie: bytes) -> bytes:
    t = ber.tlv
    value = t(0x30, t(0x02, b"\x00") + t(4, cookie))
    return _done(msgid, code, b"", t(0x30, t(4, PAGED_RESULTS_OID.encode()) + t(4, value)))


def _pending(msgid: int, page: int = 1000, max_entries: int = 0) -> dict[int, exchange.Request]:
    spec = exchange.Search("dc=x", "(uid=*)", ["uid"], max_entries=max_entries)
    return {msgid: exchange.Request(spec, b"", [], page, None)}


def test_a_page_ending_in_the_batch_has_its_next_page_asked_for_at_once():
    """exchange._page_ahead: the searchResDone of a paged search, a success with a
    cookie, lets the next page go out before the page's entries are read."""
    pending = _pending(7)
    assert exchange._page_ahead(_paged_done(7, 0, b"more"), pending) == 7
    assert pending[7].cookie == b"more"


@pytest.mark.parametrize(
    "last, pending",
    [
        (_paged_done(7, 0, b""), _pending(7)),  # the last page
        (_paged_done(7, 4, b"more"), _pending(7)),  # sizeLimitExceeded: read in turn
        (_paged_done(7, 0, b"more"), _pending(7, max_entries=10)),  # a cap to count first
        (_paged_done(7, 0, b"more"), _pending(7, page=0) | _pending(8)),  # 7 not paged
        (_paged_done(8, 0, b"more"), _pending(7)),  # another search's id
        (_done(7, 0, b""), _pending(7)),  # no paged control
        (_entry(0, 3, msgid=7)[0], _pending(7)),  # an entry: the page goes on
        (_paged_done(7, 0, b"more")[:-3], _pending(7)),  # cut short: reported in turn
    ],
    ids=[
        "last-page", "size-limit", "capped", "unpaged", "other-id", "no-control", "entry",
        "truncated",
    ],
)
def test_a_page_is_asked_for_ahead_only_after_a_successful_page(last, pending):
    assert exchange._page_ahead(last, pending) is None
    assert all(r.cookie is None for r in pending.values())


def test_op_tag_is_decode_responses_op_and_minus_one_on_every_cut():
    """wire.op_tag reads the protocolOp's tag as decode_response does, from the
    envelope alone; a message cut anywhere (its SEQUENCE runs past the bytes), or
    bytes that are no LDAPMessage, give -1."""
    msgs = [
        _entry(0, 3, msgid=7)[0], _entry(2, 40, msgid=300)[0], _paged_done(7, 0, b"more"),
        _done(5, 0, b""),
    ]  # fmt: skip
    for msg in msgs:
        assert wire.op_tag(msg) == wire.decode_response(msg).op != -1
        assert {wire.op_tag(msg[:cut]) for cut in range(len(msg))} == {-1}
    for bad in (b"\x04\x00", b"\x30\x03\x04\x01\x00", b"\x30\x03\x02\x01\x00"):
        assert wire.op_tag(bad) == -1


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["cn=a,dc=x", "cn=b,dc=x"],
        ["cn=a,dc=x", "cn=Smith\\, John (ext) *,dc=x", "nul" + chr(0), "cn=c,dc=x"],
        ["plain", "star*"],
    ],
)
def test_assertions_escape_as_escape_does(values):
    """schema.assertions tests all the values at once for something to escape: each
    assertion as escape() spells it, escaped or not."""
    assert assertions("member", values) == [f"(member={escape(v)})" for v in values]
