"""Netgroups' pure parts: SSSD's triple parser, member values that are DNs, the
SETNETGRENT reply, the record, and the cache's read, expiry and invalidation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cached.cache import State
from cached.cache import records as rec
from cached.cache.writer import BackendCache
from cached.ldap.netgroups import is_dn, parse_triple
from cached.model import Netgroup
from cached.nss import protocol as p


@pytest.mark.parametrize(
    ("value", "triple"),
    [
        ("(host1,alice,example.com)", ("host1", "alice", "example.com")),
        ("  ( host2 , , ) ", ("host2", "", "")),
        ("(,bob,)", ("", "bob", "")),
        ("(-,carol,)", ("-", "carol", "")),
        ("notatriple", None),
        ("(a,b)", None),
        ("(h,u,d) x", None),
        ("h,u,d)", None),
    ],
)
def test_triples_split_as_sssd_splits_them(value: str, triple: tuple[str, str, str] | None) -> None:
    assert parse_triple(value) == triple


def test_member_values_that_are_dns() -> None:
    assert is_dn("cn=ops,ou=netgroups,dc=x")
    assert is_dn("2.5.4.3=ops")
    assert not is_dn("web")
    assert not is_dn("web-servers")


def test_setnetgrent_reply() -> None:
    reply = p.netgroup_reply([("h", "", "d")], ["admins"])
    length, cmd, status, _ = struct.unpack_from("=4I", reply)
    assert (length, cmd, status) == (len(reply), 0x61, 0)
    body = reply[16:]
    assert struct.unpack_from("=2I", body) == (3, 0)  # the netgroup itself, then 2
    assert body[8:] == struct.pack("=I", 1) + b"h\0\0d\0" + struct.pack("=I", 2) + b"admins\0"
    assert p.decode_netgroup(body) == [("h", "", "d"), "admins"]
    assert p.decode_netgroup(p.netgroup_reply([], [])[16:]) == []  # found, empty: count 1
    assert struct.unpack_from("=I", p.netgroup_reply([], []), 16)[0] == 1
    with pytest.raises(ValueError):
        p.netgroup_reply([], [""])


def test_record_round_trip() -> None:
    ng = Netgroup("web", "cn=web,dc=x", (("h", "", "d"), ("", "u", "")), ("b", "a"))
    assert rec.decode_netgroup(rec.encode_netgroup(ng)) == ng
    with pytest.raises(rec.RecordError):
        rec.decode_netgroup(b"\x93\x01\x02\x03")


def test_stored_expired_invalidated(tmp_path: Path) -> None:
    cache = BackendCache(str(tmp_path), "LDAP")
    try:
        assert cache.netgroup_by_name("web").state is State.MISSING
        ng = Netgroup("web", "cn=web", (("h", "u", "d"),), ("admins",))
        cache.store_netgroup("web", ng, "20260101000000Z")
        got = cache.netgroup_by_name("web")
        assert (got.state, got.value) == (State.VALID, ng)
        assert cache.invalidate_netgroup("web") and not cache.invalidate_netgroup("nope")
        assert cache.netgroup_by_name("web").state is State.EXPIRED
        # A request begun before an invalidation stores what it read expired.
        with cache.request():
            cache.invalidate_netgroups()
            cache.store_netgroup("web", ng)
        assert cache.netgroup_by_name("web").state is State.EXPIRED
        cache.store_netgroup("web", ng)
        assert cache.netgroup_by_name("web").state is State.VALID
        cache.store_netgroup("web", None)
        assert cache.netgroup_by_name("web").state is State.MISSING
    finally:
        cache.close()


def test_expiring_netgroups_soonest_first(tmp_path: Path) -> None:
    cache = BackendCache(str(tmp_path), "LDAP")
    try:
        for name, at in (("late", 2000.0), ("soon", 1000.0), ("never", 10**10)):
            cache.store_netgroup(name, Netgroup(name), now=at - cache.timeouts.netgroup)
        assert cache.expiring_netgroups(5000.0) == ["soon", "late"]
        assert cache.expiring_netgroups(1500.0) == ["soon"]
    finally:
        cache.close()
