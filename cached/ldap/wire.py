"""Search requests encoded and search results read here, without pyasn1 (sans-IO).

Every request the client makes (searches, the root DSE, ranged reads, binds,
StartTLS) is built here and every answer but a SearchResultEntry (entry.py) is read
here; ldap3 only opens the socket and wraps it in TLS (connection.py). Why: ldap3
parses each filter into a tree, compiles it into pyasn1 objects, BER-encodes those
and decodes the request back into a dict for its records; for the batched filters
of a walk (a few thousand assertions each) that was a quarter of the client's
profiled time of a cold initgroups of bigroupuser (perf/results/2026-11-30-readpath).
The bytes are the ones ldap3 2.9.1 sends for the same arguments
(tests/unit/test_ldap_wire.py compares them for every filter shape and control the
client uses).

    SearchRequest ::= [APPLICATION 3] SEQUENCE { baseObject LDAPDN,
        scope ENUMERATED, derefAliases ENUMERATED, sizeLimit INTEGER,
        timeLimit INTEGER, typesOnly BOOLEAN, filter Filter,
        attributes AttributeSelection }                       (RFC 4511 §4.5.1)
    Filter: and [0], or [1], not [2], equalityMatch [3], substrings [4],
        greaterOrEqual [5], lessOrEqual [6], present [7], approxMatch [8],
        extensibleMatch [9]                                   (RFC 4511 §4.5.1.7)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cached.ldap.ber import BerError, integer, tlv
from cached.ldap.ber import header as _header
from cached.ldap.controls import Control, decode_controls

_SEQUENCE = 0x30
_OCTET_STRING = 0x04
_INTEGER = 0x02
_ENUMERATED = 0x0A
_BOOLEAN = 0x01
BIND_REQUEST = 0x60
BIND_RESPONSE = 0x61
SEARCH_REQUEST = 0x63
SEARCH_RESULT_ENTRY = 0x64
SEARCH_RESULT_DONE = 0x65
SEARCH_RESULT_REFERENCE = 0x73
MODIFY_REQUEST = 0x66
MODIFY_RESPONSE = 0x67
EXTENDED_REQUEST = 0x77
EXTENDED_RESPONSE = 0x78
INTERMEDIATE_RESPONSE = 0x79
_CONTROLS = 0xA0
_REFERRAL = 0xA3
NOTICE_OF_DISCONNECTION = b"1.3.6.1.4.1.1466.20036"  # RFC 4511 §4.4.1
START_TLS_OID = "1.3.6.1.4.1.1466.20037"  # RFC 4511 §4.14.1

# resultCode names (RFC 4511 §4.1.9, and RFC 3909's cancel codes), for messages.
RESULT_CODES = {
    0: "success", 1: "operationsError", 2: "protocolError", 3: "timeLimitExceeded",
    4: "sizeLimitExceeded", 5: "compareFalse", 6: "compareTrue",
    7: "authMethodNotSupported", 8: "strongerAuthRequired", 10: "referral",
    11: "adminLimitExceeded", 12: "unavailableCriticalExtension",
    13: "confidentialityRequired", 14: "saslBindInProgress", 16: "noSuchAttribute",
    17: "undefinedAttributeType", 18: "inappropriateMatching", 19: "constraintViolation",
    20: "attributeOrValueExists", 21: "invalidAttributeSyntax", 32: "noSuchObject",
    33: "aliasProblem", 34: "invalidDNSyntax", 36: "aliasDereferencingProblem",
    48: "inappropriateAuthentication", 49: "invalidCredentials",
    50: "insufficientAccessRights", 51: "busy", 52: "unavailable", 53: "unwillingToPerform",
    54: "loopDetect", 64: "namingViolation", 65: "objectClassViolation",
    66: "notAllowedOnNonLeaf", 67: "notAllowedOnRDN", 68: "entryAlreadyExists",
    69: "objectClassModsProhibited", 71: "affectsMultipleDSAs", 80: "other",
    118: "canceled", 119: "noSuchOperation", 120: "tooLate", 121: "cannotCancel",
}  # fmt: skip

SCOPES = {"base": 0, "one": 1, "sub": 2}
# BOOLEAN TRUE is 0xFF (RFC 4511 §5.1: "the encoding of the value octet is set to hex
# FF"), as ldap3 2.9.1 sends it too: its strategies encode with ldap3.utils.asn1's
# Boolean encoder, not pyasn1's BER one (which writes 0x01).
TRUE = b"\xff"


class FilterError(ValueError):
    """A filter string that is not RFC 4515."""


# -- filters (RFC 4515 text -> RFC 4511 BER) -----------------------------------------

_HEX = frozenset(b"0123456789abcdefABCDEF")


def _value(text: str) -> bytes:
    """An assertion value: UTF-8 with ``\\XX`` escapes turned into bytes. A backslash
    not followed by two hex digits is sent as itself, as ldap3 does."""
    raw = text.encode("utf-8")
    if b"\\" not in raw:
        return raw
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x5C and i + 2 < n and raw[i + 1] in _HEX and raw[i + 2] in _HEX:
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(c)
        i += 1
    return bytes(out)


def _item(text: str) -> bytes:
    """One simple item ``attr<op>value`` (without its parentheses)."""
    left, eq, right = text.strip().partition("=")
    if not eq:
        raise FilterError(f"not an assertion: {text!r}")
    if left.endswith("~"):
        return tlv(0xA8, tlv(4, left[:-1].strip().encode()) + tlv(4, _value(right.strip())))
    if left.endswith(">"):
        return tlv(0xA5, tlv(4, left[:-1].strip().encode()) + tlv(4, _value(right.strip())))
    if left.endswith("<"):
        return tlv(0xA6, tlv(4, left[:-1].strip().encode()) + tlv(4, _value(right.strip())))
    if left.endswith(":"):
        return _extensible(left[:-1].strip(), right.strip())
    if right == "*":
        return tlv(0x87, left.strip().encode())
    attr = left.strip().encode()
    right = right.strip()
    if "*" in right:
        parts = right.split("*")
        subs = b""
        if parts[0]:
            subs += tlv(0x80, _value(parts[0]))
        for p in parts[1:-1]:
            if p:
                subs += tlv(0x81, _value(p))
        if parts[-1]:
            subs += tlv(0x82, _value(parts[-1]))
        return tlv(0xA4, tlv(4, attr) + tlv(_SEQUENCE, subs))
    return tlv(0xA3, tlv(4, attr) + tlv(4, _value(right)))


def _extensible(left: str, value: str) -> bytes:
    """``attr[:dn][:rule]:=value`` or ``[:dn]:rule:=value``."""
    parts = left.split(":")
    attr = rule = ""
    dn = False
    if parts[0] == "":
        if len(parts) == 2 and parts[1].strip().lower() != "dn":
            rule = parts[1]
        elif len(parts) == 3 and parts[1].strip().lower() == "dn":
            dn, rule = True, parts[2]
        else:
            raise FilterError(f"invalid extensible filter {left!r}")
    elif len(parts) == 1:
        attr = parts[0]
    elif len(parts) == 2:
        attr = parts[0]
        if parts[1].strip().lower() == "dn":
            dn = True
        else:
            rule = parts[1]
    elif len(parts) == 3 and parts[1].strip().lower() == "dn":
        attr, dn, rule = parts[0], True, parts[2]
    else:
        raise FilterError(f"invalid extensible filter {left!r}")
    body = b""
    if rule.strip():
        body += tlv(0x81, rule.strip().encode())
    if attr.strip():
        body += tlv(0x82, attr.strip().encode())
    body += tlv(0x83, _value(value))
    if dn:  # dnAttributes BOOLEAN DEFAULT FALSE: sent only when true
        body += b"\x84\x01" + TRUE
    return tlv(0xA9, body)


# An equality item with nothing to unescape, ``attr=value)`` (``value`` without
# parentheses, ``*`` or backslash; the attribute a plain name or OID, so no ``~``,
# ``>``, ``<`` or ``:`` before the ``=``): the walk's OR filters are thousands of
# ``(member=<DN>)``, which the general path (_item) read at 5 µs each (11 ms per cold
# initgroups of bigroupuser, perf/readpath.py).
_EQUALITY = re.compile(r"([A-Za-z][A-Za-z0-9;-]*|[0-9][0-9.]*)=([^()*\\]*)\)").match
# The same item read with str methods: up to the first ")", split at the first "=";
# the attribute checked once per name (_EQ_ATTRS: its OCTET STRING, or None for a
# name _EQUALITY's attribute pattern refuses), the value free of "(", "*" and "\\".
# The regular expression's scan of each DN cost 80 instructions a character (a third
# of encode_filter for the walk's OR filters of 1,000 DNs, valgrind).
_EQ_ATTR = re.compile(r"[A-Za-z][A-Za-z0-9;-]*|[0-9][0-9.]*").fullmatch
_EQ_ATTRS: dict[str, bytes | None] = {}
_EQ_ATTRS_MAX = 256
_EQ_PREFIXES: dict[bytes, tuple[bytes, ...]] = {}  # _equality_run's, by OCTET STRING


def encode_filter(text: str) -> bytes:
    """The BER of an RFC 4515 filter string; FilterError naming the filter when it
    is not one. Whitespace between parentheses is skipped, as ldap3 does."""
    s = text.strip()
    if not s.startswith("(") or not s.endswith(")") or s.count("(") != s.count(")"):
        raise FilterError(f"invalid filter {text[:200]!r}")
    # A stack of (tag, [encoded children]); parentheses inside values are escaped
    # (RFC 4515 §3), so they delimit.
    stack: list[tuple[int, list[bytes]]] = [(0, [])]
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\n\r":
            i += 1
            continue
        if c != "(":
            if c == ")" and len(stack) > 1:
                tag, children = stack.pop()
                if tag == 0xA2 and len(children) != 1:
                    raise FilterError(f"(! ...) takes one filter: {text[:200]!r}")
                stack[-1][1].append(tlv(tag, b"".join(children)))
                i += 1
                continue
            raise FilterError(f"malformed filter {text[:200]!r}")
        i += 1
        while i < n and s[i] in " \t\n\r":
            i += 1
        op = s[i] if i < n else ""
        if op in "&|!":
            stack.append(({"&": 0xA0, "|": 0xA1, "!": 0xA2}[op], []))
            i += 1
            continue
        j = s.find(")", i)
        attr, eq, value = s[i:j].partition("=")
        if eq and "(" not in value and "*" not in value and "\\" not in value:
            a = _EQ_ATTRS.get(attr, b"")
            if a == b"":
                a = tlv(4, attr.encode()) if _EQ_ATTR(attr) else None
                if len(_EQ_ATTRS) < _EQ_ATTRS_MAX:
                    _EQ_ATTRS[attr] = a
            if a is not None:
                top = stack[-1]
                if top[0] == 0xA1 and not top[1] and s.startswith("(", j + 1):
                    # The first of an OR's items, and more follow: the walk's ORs
                    # of 1,000 ``(member=<DN>)``, read at once when they are all
                    # such items (_equality_run), else one at a time as here.
                    run = _equality_run(s, i - 1, attr, a)
                    if run is not None:
                        top[1].append(run[0])
                        i = run[1]
                        continue
                # What _item gives for it (the _EQUALITY shape).
                v = value.strip().encode()
                lv = len(v)
                body = a + (bytes((4, lv)) + v if lv < 0x80 else tlv(4, v))
                lb = len(body)
                stack[-1][1].append(bytes((0xA3, lb)) + body if lb < 0x80 else tlv(0xA3, body))
                i = j + 1
                continue
        m = _EQUALITY(s, i)
        if m is not None:
            # What _item gives for it, read by one regex match.
            attr, value = m.group(1, 2)
            stack[-1][1].append(tlv(0xA3, tlv(4, attr.encode()) + tlv(4, value.strip().encode())))
            i = m.end()
            continue
        j = s.find(")", i)
        if j < 0 or "(" in s[i:j]:
            raise FilterError(f"malformed filter {text[:200]!r}")
        stack[-1][1].append(_item(s[i:j]))
        i = j + 1
    if len(stack) != 1 or len(stack[0][1]) != 1:
        raise FilterError(f"malformed filter {text[:200]!r}")
    return stack[0][1][0]


def _equality_run(s: str, start: int, attr: str, a: bytes) -> tuple[bytes, int] | None:
    """The BER of the filter items from ``s[start]`` up to the first ``))`` when they
    are all equality items of ``attr`` (OCTET STRING ``a``) with nothing to unescape,
    as encode_filter's loop reads them one by one (the same bytes), and where it is
    to go on (that ``))``'s second parenthesis); else None. Each value is taken
    whole, between ``attr=`` and ``)``, with its surrounding whitespace stripped.

    Why: the loop's str methods and bytes per item took 3 µs an item, 7 ms of a cold
    initgroups of bigroupuser for the two ORs of 1,000 DNs of its second level,
    encoded before the sweep that goes out with them can leave (py-spy on
    perf.replay). Here the checks are counts over the run and the items are built
    by maps in C."""
    k = s.find("))", start)
    if k < 0:
        return None
    run = s[start : k + 1]
    head = "(" + attr + "="
    n = run.count("(")
    # n items, alternating "(" and ")" with each ")" but the last followed at once
    # by "(" (n - 1 ")(" among n of each cannot leave two of a kind together), each
    # "(" opening ``attr=``: a flat run of ``(attr=value)``, no value holding a
    # parenthesis. Nor "*" (a substring or presence item) nor "\" (an escape).
    if (
        not run.startswith(head)
        or run.count(")") != n
        or run.count(")(") != n - 1
        or run.count(head) != n
        or "*" in run
        or "\\" in run
    ):
        return None
    values = list(map(str.encode, map(str.strip, run[len(head) : -1].split(")" + head))))
    pre = _EQ_PREFIXES.get(a)
    if pre is None:
        # The item's header and the value's, by the value's length, for the lengths
        # where both are one octet: ``A3 len a 04 len``.
        pre = tuple(
            bytes((0xA3, len(a) + 2 + lv)) + a + bytes((4, lv)) for lv in range(126 - len(a))
        )
        if len(_EQ_PREFIXES) < _EQ_ATTRS_MAX:
            _EQ_PREFIXES[a] = pre
    lens = list(map(len, values))
    if max(lens) < len(pre):
        return b"".join(map(bytes.__add__, map(pre.__getitem__, lens), values)), k + 1
    return b"".join(tlv(0xA3, a + tlv(4, v)) for v in values), k + 1


# -- requests ------------------------------------------------------------------------

def encode_search(
    message_id: int,
    base: str,
    scope: int,
    filt: bytes,
    attrs: list[str],
    *,
    time_limit: int = 0,
    size_limit: int = 0,
    deref_aliases: int = 0,
    controls: list[Control] | None = None,
) -> bytes:
    """One LDAPMessage with a SearchRequest; ``filt`` from :func:`encode_filter`.
    No attributes asks for none (``1.1``, RFC 4511 §4.5.1.8), as ldap3 does."""
    body = (
        tlv(4, base.encode("utf-8"))
        + integer(_ENUMERATED, scope)
        + integer(_ENUMERATED, deref_aliases)
        + integer(_INTEGER, size_limit)
        + integer(_INTEGER, time_limit)
        + b"\x01\x01\x00"  # typesOnly FALSE
        + filt
        + tlv(_SEQUENCE, b"".join(tlv(4, a.encode("utf-8")) for a in (attrs or ["1.1"])))
    )
    msg = integer(_INTEGER, message_id) + tlv(SEARCH_REQUEST, body)
    if controls:
        msg += _encode_controls(controls)
    return tlv(_SEQUENCE, msg)


def _encode_controls(controls: list[Control]) -> bytes:
    """``controls [0] Controls`` closing an LDAPMessage (RFC 4511 §4.1.11)."""
    items = []
    for oid, critical, value in controls:
        c = tlv(4, oid.encode())
        if critical:
            c += b"\x01\x01" + TRUE
        if value is not None:
            c += tlv(4, value)
        items.append(tlv(_SEQUENCE, c))
    return tlv(_CONTROLS, b"".join(items))


def encode_bind(
    message_id: int,
    name: str,
    *,
    password: str | bytes = "",
    sasl_mechanism: str = "",
    sasl_credentials: bytes = b"",
    controls: list[Control] | None = None,
) -> bytes:
    """One LDAPMessage with a BindRequest, version 3: simple with ``password`` (empty
    name and password: anonymous), or SASL ``sasl_mechanism`` with
    ``sasl_credentials`` (EXTERNAL: empty, the identity is the transport's; without the
    credentials field slapd answers saslBindInProgress; GSSAPI: a context token).

        BindRequest ::= [APPLICATION 0] SEQUENCE { version INTEGER (1 ..  127),
            name LDAPDN, authentication CHOICE { simple [0] OCTET STRING,
            sasl [3] SaslCredentials } }                       (RFC 4511 §4.2)
        SaslCredentials ::= SEQUENCE { mechanism LDAPString, credentials OCTET STRING OPTIONAL }
    """
    if sasl_mechanism:
        auth = tlv(0xA3, tlv(4, sasl_mechanism.encode()) + tlv(4, sasl_credentials))
    else:
        # A user's password arrives as the bytes PAM was given (RFC 4513 §5.1.1 asks
        # for UTF-8; the server compares the octets).
        secret = password if isinstance(password, bytes) else password.encode("utf-8")
        auth = tlv(0x80, secret)
    body = integer(_INTEGER, 3) + tlv(4, name.encode("utf-8")) + auth
    msg = integer(_INTEGER, message_id) + tlv(BIND_REQUEST, body)
    if controls:
        msg += _encode_controls(controls)
    return tlv(_SEQUENCE, msg)


def encode_extended(
    message_id: int,
    oid: str,
    value: bytes | None = None,
    controls: list[Control] | None = None,
) -> bytes:
    """One LDAPMessage with an ExtendedRequest (RFC 4511 §4.12): ``[APPLICATION 23]
    SEQUENCE { requestName [0] LDAPOID, requestValue [1] OCTET STRING OPTIONAL }``;
    without a value for StartTLS (RFC 4511 §4.14.1) and Who am I? (RFC 4532)."""
    body = tlv(0x80, oid.encode())
    if value is not None:
        body += tlv(0x81, value)
    msg = integer(_INTEGER, message_id) + tlv(EXTENDED_REQUEST, body)
    if controls:
        msg += _encode_controls(controls)
    return tlv(_SEQUENCE, msg)


def encode_modify_replace(
    message_id: int,
    dn: str,
    attribute: str,
    values: list[bytes],
    controls: list[Control] | None = None,
) -> bytes:
    """One LDAPMessage with a ModifyRequest replacing ``attribute`` with ``values``
    (RFC 4511 §4.6: ``[APPLICATION 6] SEQUENCE { object LDAPDN, changes SEQUENCE OF
    change SEQUENCE { operation ENUMERATED { add (0), delete (1), replace (2) },
    modification PartialAttribute } }``)."""
    vals = b"".join(tlv(_OCTET_STRING, v) for v in values)
    partial = tlv(_SEQUENCE, tlv(_OCTET_STRING, attribute.encode()) + tlv(0x31, vals))
    change = tlv(_SEQUENCE, integer(_ENUMERATED, 2) + partial)
    body = tlv(_OCTET_STRING, dn.encode("utf-8")) + tlv(_SEQUENCE, change)
    msg = integer(_INTEGER, message_id) + tlv(MODIFY_REQUEST, body)
    if controls:
        msg += _encode_controls(controls)
    return tlv(_SEQUENCE, msg)


def describe(res: Response) -> str:
    """A result's code, its name and the server's message, for an error."""
    text = f"{RESULT_CODES.get(res.code, 'result')} ({res.code})"
    if res.message:
        text += f": {res.message.decode('utf-8', 'replace')[:300]}"
    return text


# -- responses other than SearchResultEntry (entry.py reads those) ---------------------


@dataclass(slots=True)
class Response:
    """An LDAPMessage that is not a SearchResultEntry: its id and protocolOp tag;
    for a result (searchResDone, extendedResp, bindResponse) its code, message and controls."""

    message_id: int
    op: int
    code: int = 0
    matched_dn: bytes = b""
    message: bytes = b""
    name: bytes = b""  # extendedResp's responseName
    value: bytes = b""  # extendedResp's responseValue
    sasl_credentials: bytes = b""  # bindResponse's serverSaslCreds [7]
    controls: dict[bytes, bytes | None] = field(default_factory=dict)


def op_tag(buf: bytes) -> int:
    """The protocolOp's tag of one LDAPMessage, read from its envelope alone; -1 when
    the envelope is not an LDAPMessage's (decode_response says what is wrong)."""
    try:
        tag, pos, end = _header(buf, 0, len(buf))
        if tag != _SEQUENCE:
            return -1
        tag, _a, pos = _header(buf, pos, end)
    except BerError:
        return -1
    return buf[pos] if tag == _INTEGER and pos < end else -1


def decode_response(buf: bytes) -> Response:
    """Read the envelope of one LDAPMessage and, for an LDAPResult, its fields."""
    tag, pos, end = _header(buf, 0, len(buf))
    if tag != _SEQUENCE:
        raise BerError(f"LDAPMessage: expected SEQUENCE, got tag {tag:#x}")
    tag, a, pos = _header(buf, pos, end)
    if tag != _INTEGER or a == pos:
        raise BerError("messageID is not an INTEGER")
    out = Response(int.from_bytes(buf[a:pos], "big", signed=True), buf[pos] if pos < end else 0)
    if pos >= end:
        raise BerError("LDAPMessage without a protocolOp")
    tag, opos, oend = _header(buf, pos, end)
    if tag in (SEARCH_RESULT_DONE, EXTENDED_RESPONSE, BIND_RESPONSE, MODIFY_RESPONSE):
        tag, a, b = _header(buf, opos, oend)
        if tag != _ENUMERATED:
            raise BerError("resultCode is not an ENUMERATED")
        out.code = int.from_bytes(buf[a:b], "big", signed=True)
        tag, a, b2 = _header(buf, b, oend)
        if tag != _OCTET_STRING:
            raise BerError("matchedDN is not an OCTET STRING")
        out.matched_dn = buf[a:b2]
        tag, a, b = _header(buf, b2, oend)
        if tag != _OCTET_STRING:
            raise BerError("diagnosticMessage is not an OCTET STRING")
        out.message = buf[a:b]
        while b < oend:  # referral [3], responseName [10], responseValue [11]
            tag, a, b = _header(buf, b, oend)
            if tag == 0x8A:
                out.name = buf[a:b]
            elif tag == 0x8B:
                out.value = buf[a:b]
            elif tag == 0x87:
                out.sasl_credentials = buf[a:b]
    out.controls = {oid: value for oid, _critical, value in decode_controls(buf, oend, end)}
    return out
