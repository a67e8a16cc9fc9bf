"""The writer's group records (records.encode_group_of, BackendCache.put_group_of):
byte for byte what encode_group(group_record(...)) gives, since records
are compared as bytes (invariant 2), and the fast path's shortcuts decline the
input they do not fit: a tuple or list may repeat a name (only a dict or set is
taken as unique), and a name may hold a NUL (left out, as put_group always did)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cached.cache import records as rec
from cached.cache.writer import BackendCache
from cached.counters import Counters
from cached.model import Group
from testing.backend import group_record

DN = "cn=g,ou=groups,dc=example,dc=test"


def reference(members: tuple[str, ...], member_groups: tuple[str, ...]) -> bytes:
    """The record as the writer encoded it before encode_group_of."""
    return rec.encode_group(group_record(Group("g", 7, DN, members, member_groups)))


CASES = [
    ((), ()),
    (("b", "a", "c"), ()),
    (("b", "a", "b", "a"), ("y", "x", "y")),  # repeated names: unique in the record
    (("",), ()),  # an empty name is a member too (b"\0")
    (("Zoë", "zoe", "ZOE", "日本"), ("Grüppe",)),  # case and non-ASCII kept as they are
    (tuple(f"user{i:05d}" for i in range(500, 0, -1)), ("sub",)),
    (tuple(f"user{i:05d}" for i in range(500, 0, -1)), ()),  # a dict of users: the usual
    (("Zoë", "zoe", "日本", ""), ()),
]


@pytest.mark.parametrize(("members", "member_groups"), CASES)
def test_encode_group_of_is_the_reference_encoding(members, member_groups):
    want = reference(members, member_groups)
    for kind in (tuple, list, dict.fromkeys, set, frozenset):
        got = rec.encode_group_of("g", 7, DN, kind(members), kind(member_groups))
        assert got == want, kind
    assert rec.decode_group(want).member_count == len(set(members))


def test_repeated_names_in_a_sequence_are_stored_once():
    # Only a dict or set skips the set: a tuple or list with a name twice takes it,
    # so the blob never holds a name twice (nor a count that says so).
    for seq in (("a", "b", "a"), ["a", "b", "a"]):
        g = rec.decode_group(rec.encode_group_of("g", 7, DN, seq, ()) or b"")
        assert g.members == b"a\0b\0" and g.member_count == 2


@pytest.mark.parametrize(
    ("members", "member_groups"),
    [(("a", "b\0c"), ()), (("a\0",), ()), (("\0",), ()), (("a",), ("x\0y",)), (("a", "\0b"), ())],
)
def test_a_nul_in_a_name_declines(members, member_groups):
    # "b\0c" joined would read as two members, b and c.
    for kind in (tuple, dict.fromkeys):
        assert rec.encode_group_of("g", 7, DN, kind(members), kind(member_groups)) is None


def backend(tmp_path: Path) -> BackendCache:
    return BackendCache(str(tmp_path), "LDAP", counters=Counters(), boot_id="boot-1")


def test_put_group_of_leaves_out_names_with_a_nul(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group_of(b, "g", 7, DN, dict.fromkeys(["b", "a\0x", "a"]), ("s\0", "t"))
    stored = c.group_by_name("g").value
    assert stored is not None
    assert rec.split_members(stored.members) == ["a", "b"] and stored.member_count == 2
    with c.entries.read() as txn:
        record = rec.decode_group(txn.get(b"g", db=c.entries.tables["groups"]) or b"")
    assert record.member_groups == ("t",)
    c.close()


def test_put_group_of_stores_what_put_group_stores(tmp_path):
    members = ("u2", "u1", "u2")
    a, b = backend(tmp_path / "a"), backend(tmp_path / "b")
    with a.write() as batch:
        a.put_group(batch, Group("g", 7, DN, members, ("s",)), "20260101000000Z", "csn", True)
        a.read_whole(batch, "g")
    with b.write() as batch:
        b.put_group_of(batch, "g", 7, DN, members, ("s",), "20260101000000Z", "csn", True,
                       whole=True)  # fmt: skip
    for c in (a, b):
        with c.entries.read() as txn:
            got = {t: txn.get(k, db=c.entries.tables[t]) for t, k in
                   (("groups", b"g"), ("gid", b"\0\0\0\7"), ("dn", c.dn_key(DN)))}  # fmt: skip
        with c.ts.read() as tstxn:  # type: ignore[union-attr]
            whole = tstxn.get(b"g", db=c.ts.tables["read_whole"])  # type: ignore[union-attr]
        assert whole is not None
        c.close()
        if c is a:
            want = got
    assert got == want and got["groups"] is not None


def test_put_group_of_refuses_an_unstorable_group_unless_checked(tmp_path):
    # Without checked=True the writer checks the group itself (a gid above 32 bits).
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group_of(b, "big", 1 << 33, DN, ("a",), ())
    assert c.group_by_name("big").value is None
    c.close()
