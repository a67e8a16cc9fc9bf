"""Encoding one batched search of the nesting walk (1,000 member assertions, the deref
and paged results controls): cached's encoder (cached/ldap/wire.py) against ldap3
2.9.1's parse + pyasn1 compile + BER encode. Both give the same bytes
(tests/test_ldap_wire.py); the benchmark shows what the send path saves per search."""

from __future__ import annotations

from typing import Any

from tests.unit.test_ldap_wire import DEREF, ldap3_bytes, ours

FILTER = (
    "(&(objectClass=posixGroup)(|"
    + "".join(f"(member=cn=group{i:05d},ou=groups,dc=example,dc=test)" for i in range(1000))
    + "))"
)
ATTRS = ["cn", "gidNumber", "member", "objectClass"]
ARGS: tuple[Any, ...] = (5, "dc=example,dc=test", "sub", FILTER, ATTRS, 30, [DEREF], (1000, None))


def test_encode_batched_search_cached(benchmark):
    got = benchmark(ours, *ARGS)
    assert got == ldap3_bytes(*ARGS)


def test_encode_batched_search_ldap3(benchmark):
    got = benchmark(ldap3_bytes, *ARGS)
    assert got == ours(*ARGS)
