"""LDAP controls (RFC 4511 §4.1.11): every control and capability OID the client sends
or reads, each defined here once, with the values of the simple ones encoded and
decoded. The dereference control's value, larger and on the hot path, has its own
module (deref.py).

    Controls ::= SEQUENCE OF control Control
    Control ::= SEQUENCE { controlType LDAPOID, criticality BOOLEAN DEFAULT FALSE,
                           controlValue OCTET STRING OPTIONAL }
"""

from __future__ import annotations

from cached.ldap.ber import BOOLEAN, INTEGER, OCTET_STRING, SEQUENCE, BerError, header, integer, tlv

# Simple paged results (RFC 2696).
PAGED_RESULTS_OID = "1.2.840.113556.1.4.319"
# Attribute Scoped Query ([MS-ADTS] 3.1.1.3.4.1.4): a base search returns the entries
# the DN values of one attribute of the base entry name (AD's, Samba's deref).
ASQ_OID = "1.2.840.113556.1.4.1504"
# LDAP_SERVER_SD_FLAGS_OID ([MS-ADTS] 3.1.1.3.4.1.11): which parts of
# nTSecurityDescriptor a search returns; without it the server acts as if all four
# (owner, group, DACL, SACL) were asked for, and reading the SACL takes a right a
# computer account does not have. A GPO's DACL is asked for alone, as SSSD's
# sdap_sd_search_send asks for it (SECINFO_DACL, critical).
SD_FLAGS_OID = "1.2.840.113556.1.4.801"
# SECURITY_INFORMATION ([MS-DTYP] 2.4.7): DACL_SECURITY_INFORMATION.
SECINFO_DACL = 0x4
# OpenLDAP's dereference control (draft-masarati-ldap-deref): deref.py.
DEREF_OID = "1.3.6.1.4.1.4203.666.5.16"
# LDAP_CAP_ACTIVE_DIRECTORY_OID in the root DSE's supportedCapabilities: the server is an
# AD DC (Windows or Samba), whatever ldap_schema says (MS-ADTS 3.1.1.3.4.3.1).
AD_CAPABILITY_OID = "1.2.840.113556.1.4.800"

_CONTROLS = 0xA0  # [0] Controls (RFC 4511 §4.1.1)

Control = tuple[str, bool, bytes | None]  # (OID, criticality, value), as sent


def paged_control(size: int, cookie: bytes | None) -> Control:
    """RFC 2696's control, not critical (ldap3's default)."""
    value = tlv(SEQUENCE, integer(INTEGER, size) + tlv(OCTET_STRING, cookie or b""))
    return (PAGED_RESULTS_OID, False, value)


def paged_cookie(value: bytes | None) -> bytes:
    """The cookie of a paged results response control (empty: the last page)."""
    if not value:
        return b""
    tag, pos, end = header(value, 0, len(value))
    if tag != SEQUENCE:
        raise BerError("paged results value is not a SEQUENCE")
    tag, a, pos = header(value, pos, end)
    tag, a, b = header(value, pos, end)
    if tag != OCTET_STRING:
        raise BerError("paged results cookie is not an OCTET STRING")
    return value[a:b]


def encode_asq(attr: str) -> bytes:
    """ASQ's value: SEQUENCE { sourceAttribute OCTET STRING } (BER, short lengths)."""
    a = attr.encode()
    if len(a) > 120:
        raise ValueError(f"attribute name too long for ASQ: {attr!r}")
    return bytes([0x30, len(a) + 2, 0x04, len(a)]) + a


def encode_sd_flags(flags: int) -> bytes:
    """SDFlagsRequestValue ::= SEQUENCE { Flags INTEGER }."""
    return tlv(SEQUENCE, integer(INTEGER, flags))


def decode_controls(buf: bytes, pos: int, end: int) -> list[tuple[bytes, bool, bytes | None]]:
    """The optional ``controls [0] Controls`` that close an LDAPMessage at ``pos``
    (nothing when ``pos == end``): (OID, criticality, value) each. Shared by search
    entries (entry.py) and the other responses (wire.py)."""
    controls: list[tuple[bytes, bool, bytes | None]] = []
    if pos >= end:
        return controls
    tag, cpos, cend = header(buf, pos, end)
    if tag != _CONTROLS:
        raise BerError(f"controls: expected [0], got tag {tag:#x}")
    while cpos < cend:
        tag, ipos, iend = header(buf, cpos, cend)
        if tag != SEQUENCE:
            raise BerError("Control is not a SEQUENCE")
        cpos = iend
        tag, a, ipos = header(buf, ipos, iend)
        if tag != OCTET_STRING:
            raise BerError("controlType is not an OCTET STRING")
        oid = buf[a:ipos]
        critical = False
        value = None
        while ipos < iend:
            tag, a, b = header(buf, ipos, iend)
            if tag == BOOLEAN:
                critical = any(buf[a:b])
            elif tag == OCTET_STRING:
                value = buf[a:b]
            else:
                raise BerError(f"Control: unexpected tag {tag:#x}")
            ipos = b
        controls.append((oid, critical, value))
    return controls
