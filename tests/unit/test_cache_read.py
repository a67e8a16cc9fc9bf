"""The reader's fast paths of the split cache (cached/cache/cache.py): groups unpacked
without a GroupRecord, nested member lists merged from sorted blobs, the DN index read
whole when it holds fewer DNs than asked for. Each must answer what the general path
answers, on the shapes real directories have."""

from __future__ import annotations

from pathlib import Path

import pytest

from cached.cache import DomainCache
from cached.cache import records as rec
from cached.cache.records import RecordError
from cached.cache.writer import BackendCache
from cached.counters import Counters
from cached.model import Group, User

BASE = "dc=example,dc=test"


def backend(tmp_path: Path, **kw) -> BackendCache:
    return BackendCache(str(tmp_path), "LDAP", counters=Counters(), boot_id="boot-1", **kw)


def reader(tmp_path: Path, **kw) -> DomainCache:
    return DomainCache(str(tmp_path), "LDAP", counters=Counters(), **kw)


def test_nested_members_are_the_sorted_union_of_the_groups_below(tmp_path):
    # Shared members, names sorting differently as bytes and as text is not at issue
    # (UTF-8 keeps code point order) but non-ASCII, upper case and a member group that
    # is not stored (a dangling DN in the directory) are.
    groups = [
        Group("top", 1, "cn=top", ("zoe", "Émile", "bob"), ("mid", "other", "gone")),
        Group("mid", 2, "cn=mid", ("bob", "ärger", "Zoé", "alice"), ("low",)),
        Group("other", 3, "cn=other", ()),  # no members of its own
        Group("low", 4, "cn=low", ("carol", "zoe", "Émile")),
        Group("deeper", 5, "cn=deeper", ("dave",)),
    ]
    groups[3] = Group("low", 4, "cn=low", ("carol", "zoe", "Émile"), ("deeper",))
    c = backend(tmp_path)
    with c.write() as b:
        for g in groups:
            c.put_group(b, g)
    c.close(clean=True)
    want = {
        1: sorted({"zoe", "Émile", "bob", "ärger", "Zoé", "alice"}),
        2: sorted({"bob", "ärger", "Zoé", "alice", "carol", "zoe", "Émile"}),
        3: [],
    }
    for level in (1, 2):
        r = reader(tmp_path, nesting_level=level)
        top = r.group_by_name("top").value
        expected = set(want[1])
        if level == 2:
            expected |= {"carol", "zoe", "Émile"}
        assert top is not None
        assert top.members == rec.join_members(sorted(expected))
        assert top.member_count == len(expected)
        mid = r.group_by_name("mid").value
        assert mid is not None
        mid_want = want[2] if level == 1 else sorted({*want[2], "dave"})
        assert (mid.members, mid.member_count) == (rec.join_members(mid_want), len(mid_want))
        other = r.group_by_name("other").value
        assert other is not None and (other.members, other.member_count) == (b"", 0)
        # The same views through the batch read of the memory-cache prefill.
        assert r.groups_by_name(["top", "mid", "other", "nope"]) == [top, mid, other]
        r.close()


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # not msgpack
        rec.encode_group(rec.GroupRecord("g", 1, "cn=g", b"", 0, ()))[:-1],  # cut short
        b"\x97\x63\xa1g\x01\xa4cn=g\xc4\x00\x00\x90",  # format 99
        b"\x96\x01\xa1g\x01\xa4cn=g\xc4\x00\x00",  # a field missing
        b"\x01",  # not an array
    ],
)
def test_a_damaged_group_record_is_refused_as_decode_group_refuses_it(tmp_path, data):
    c = backend(tmp_path)
    c.entries.write([("groups", b"g", data)])
    c.close(clean=True)
    with pytest.raises(RecordError):
        rec.decode_group(data)
    r = reader(tmp_path)
    with pytest.raises(RecordError):
        r.group_by_name("g")
    with pytest.raises(RecordError):
        r.groups_by_name(["g"])
    r.close()


def _users() -> list[User]:
    return [
        User("alice", 5001, 5000, dn=f"uid=alice,ou=people,{BASE}"),
        User("Jöhn", 5002, 5000, dn=f"uid=Jöhn,ou=people,{BASE}"),
        User("cn people", 5003, 5000, dn=f"cn=Full Name\\, Jr.,ou=people,{BASE}"),
    ]


@pytest.mark.parametrize(
    ("fillers", "unknown"), [(10, 0), (0, 20)], ids=["by-key", "index-read-whole"]
)
def test_resolve_dns_finds_stored_entries_by_any_spelling_of_their_dn(tmp_path, fillers, unknown):
    c = backend(tmp_path)
    with c.write() as b:
        for u in _users():
            c.put_user(b, u)
        for i in range(fillers):
            c.put_user(b, User(f"f{i}", 6000 + i, 5000, dn=f"uid=f{i},ou=people,{BASE}"))
        c.put_group(b, Group("staff", 7000, f"cn=staff,ou=groups,{BASE}", ("alice",)))
    c.close(clean=True)
    r = reader(tmp_path)
    stored = r.counts()["users"] + 1  # and the group
    asked = [
        f"UID=alice, OU=People,{BASE.upper()}",
        f"uid=JÖHN,ou=people,{BASE}",
        f"cn=full name\\2C jr.,ou=people,{BASE}",
        f"cn=Staff,ou=groups,{BASE}",
        f"uid=nobody,ou=people,{BASE}",
        *(f"uid=missing{i},ou=people,{BASE}" for i in range(unknown)),
    ]
    # No more DNs asked for than stored: read by key; more: the index read whole.
    assert (len(asked) <= stored) == (unknown == 0)
    got = r.resolve_dns(iter(asked))  # any iterable, read once
    assert got == {
        asked[0]: ("user", "alice"),
        asked[1]: ("user", "Jöhn"),
        asked[2]: ("user", "cn people"),
        asked[3]: ("group", "staff"),
    }
    r.close()
