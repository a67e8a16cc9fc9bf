"""Decoding one group entry of the nesting walk: 600 member values and the deref
control naming each member, by cached's BER reader (ldap_entry.decode_search_entry and
decode_response) against ldap3 2.9.1's fast decoder for the entry. Both give the
same raw values; the benchmark shows what the read path saves per entry."""

from __future__ import annotations

from typing import Any

from ldap3.operation.search import raw_attributes_to_dict_fast
from ldap3.utils.asn1 import decode_message_fast

from cached.ldap import deref
from cached.ldap import entry as ldap_entry
from tests.integration.test_ldap import _deref_value


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    head = bytes([n]) if n < 0x80 else bytes([0x84]) + n.to_bytes(4, "big")
    return bytes([tag]) + head + body


MEMBERS = [
    f"uid=user{i:05d},ou=people,dc=example,dc=test".encode() for i in range(600)
]  # the largest value tests.integration.test_ldap._tlv encodes (64 KiB)
_CTRL = _deref_value(
    [("member", m.decode(), {"uid": [m[4:13]], "objectClass": [b"posixAccount"]}) for m in MEMBERS]
)
_ATTRS = _tlv(
    0x30,
    _tlv(0x30, _tlv(0x04, b"cn") + _tlv(0x31, _tlv(0x04, b"large01")))
    + _tlv(0x30, _tlv(0x04, b"member") + _tlv(0x31, b"".join(_tlv(0x04, m) for m in MEMBERS))),
)
_OP = _tlv(0x64, _tlv(0x04, b"cn=large01,ou=groups,dc=example,dc=test") + _ATTRS)
_CONTROL = _tlv(0x30, _tlv(0x04, deref.DEREF_OID.encode()) + _tlv(0x04, _CTRL))
MESSAGE = _tlv(0x30, _tlv(0x02, b"\x05") + _OP + _tlv(0xA0, _CONTROL))


def _cached(msg: bytes) -> tuple[list[bytes], int]:
    e = ldap_entry.decode_search_entry(msg)
    assert e is not None
    ((_oid, _crit, value),) = e.controls
    assert value is not None
    return e.attrs[b"member"], len(deref.decode_counted(value, set())[0])


def _ldap3(msg: bytes) -> tuple[list[bytes], int]:
    m: dict[str, Any] = decode_message_fast(msg)
    raw = raw_attributes_to_dict_fast(m["payload"][1][3])
    value = m["controls"][0][3][1][3]
    return raw["member"], len(deref.decode_counted(value, set())[0])


def test_decode_group_entry_cached_reader(benchmark):
    members, derefs = benchmark(_cached, MESSAGE)
    assert (members, derefs) == (MEMBERS, len(MEMBERS))


def test_decode_group_entry_ldap3_reader(benchmark):
    members, derefs = benchmark(_ldap3, MESSAGE)
    assert (members, derefs) == (MEMBERS, len(MEMBERS))


def test_deref_control_all_members_already_named(benchmark):
    """The common case of a walk: every member of this group was dereferenced in an
    earlier group (a member of 20 groups comes back 20 times): no result is built."""
    seen = set(MEMBERS)

    def run() -> tuple[int, int]:
        results, total = deref.decode_counted(_CTRL, seen)
        return len(results), total

    assert benchmark(run) == (0, len(MEMBERS))


def test_deref_control_all_members_new(benchmark):
    def run() -> tuple[int, int]:
        results, total = deref.decode_counted(_CTRL, set())
        return len(results), total

    assert benchmark(run) == (len(MEMBERS), len(MEMBERS))
