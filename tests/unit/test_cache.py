"""The split cache: change detection, expiry, invalidation, crash safety, MVCC."""

from __future__ import annotations

import faulthandler
import hashlib
import multiprocessing as mp
import os
import signal
import time
from array import array
from pathlib import Path

import lmdb
import pytest

from cached.cache import DomainCache, State, cache_paths, classify, integrity
from cached.cache import cache as cache_mod
from cached.cache import records as rec
from cached.cache.writer import BackendCache
from cached.counters import ENTRY_TXN, TS_WRITE, Counters
from cached.model import Group, User
from testing.backend import group_record

BASE = "dc=example,dc=test"


def user(i: int, shell: str = "/bin/bash") -> User:
    name = f"user{i:05d}"
    return User(
        name, 10001 + i, 10000, f"User {i}", f"/home/{name}", shell, f"uid={name},ou=people,{BASE}"
    )


def group(i: int, members: int = 20, member_groups: tuple[str, ...] = ()) -> Group:
    name = f"group{i:05d}"
    return Group(
        name,
        20001 + i,
        f"cn={name},ou=groups,{BASE}",
        tuple(f"user{(i * 7 + j * 13) % 5000:05d}" for j in range(members)),
        member_groups,
    )


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def backend(tmp_path: Path, **kw) -> BackendCache:
    kw.setdefault("counters", Counters())
    kw.setdefault("boot_id", "boot-1")
    return BackendCache(str(tmp_path), "LDAP", **kw)


def test_classify_follows_the_midpoint_rule():
    # lastUpdate 1000, expiry 1000+5400, 50 %: midpoint at 1000+2700.
    assert classify(1000, 6400, 2000, 50) is State.VALID
    assert classify(1000, 6400, 3701, 50) is State.MIDPOINT
    assert classify(1000, 6400, 6400, 50) is State.EXPIRED
    assert classify(1000, 6400, 6000, 0) is State.VALID
    # The midpoint is never earlier than lastUpdate + 10 s (reference §6.4).
    assert classify(1000, 1012, 1005, 50) is State.VALID
    assert classify(1000, 1012, 1011, 50) is State.MIDPOINT
    # No timestamp record: expired, never missing.
    assert classify(0, 0, 5, 50) is State.EXPIRED


def test_records_round_trip_and_are_canonical():
    g1 = group_record(Group("g", 1, "cn=g", ("b", "a", "b"), ("y", "x")))
    g2 = group_record(Group("g", 1, "cn=g", ("a", "b"), ("x", "y")))
    assert rec.encode_group(g1) == rec.encode_group(g2)
    assert g1.members == b"a\0b\0" and g1.member_count == 2
    assert rec.decode_group(rec.encode_group(g1)) == g1
    u = user(3)
    assert rec.decode_user(rec.encode_user(u)) == u
    t = rec.Times(1.5, 2.5, 3.5, "20260101000000Z", "csn#1")
    assert rec.decode_times(rec.encode_times(t)) == t
    inv = rec.decode_times(rec.invalidated_times(rec.encode_times(t)))
    assert inv == rec.Times(1.5, rec.EXPIRED, rec.EXPIRED, "20260101000000Z", "csn#1")
    with pytest.raises(rec.RecordError):
        rec.decode_user(b"\x93\x02\x01\x02")
    with pytest.raises(rec.RecordError):
        rec.decode_times(b"\x07garbage")


def test_store_and_read_back_all_kinds(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
        c.put_group(b, group(1))
        c.put_initgroups(
            b, "user00001", [10000, 20002, 20001], ["users", "group00001", "group00002"]
        )
    got = c.user_by_name("user00001")
    assert got.state is State.VALID and got.value == user(1)
    assert c.user_by_uid(10002).value == user(1)
    assert c.user_by_name("nosuch").state is State.MISSING
    assert c.user_by_uid(1).state is State.MISSING
    g = c.group_by_gid(20002)
    assert g.value is not None and g.value.name == "group00001"
    assert g.value.member_count == 20 and g.value.members.count(b"\0") == 20
    ig = c.initgroups("user00001")
    assert ig.state is State.VALID and ig.value is not None
    assert array("I", ig.value.gids).tolist() == [10000, 20001, 20002]
    assert c.resolve_dns([user(1).dn.upper(), "cn=nope"]) == {
        user(1).dn.upper(): ("user", "user00001")
    }


def test_user_without_initgroups_record_is_expired_for_initgroups(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
    ig = c.initgroups("user00001")
    assert ig.state is State.EXPIRED
    assert ig.value is not None and array("I", ig.value.gids).tolist() == [10000]


def test_nested_members_expand_to_the_nesting_level(tmp_path):
    c = backend(tmp_path, nesting_level=1)
    with c.write() as b:
        c.put_group(b, Group("top", 1, "cn=top", ("a",), ("mid",)))
        c.put_group(b, Group("mid", 2, "cn=mid", ("b",), ("low", "top")))  # a loop too
        c.put_group(b, Group("low", 3, "cn=low", ("c",)))
    top = c.group_by_name("top").value
    assert top is not None and rec.split_members(top.members) == ["a", "b"]
    c2 = DomainCache(
        str(tmp_path), "LDAP", nesting_level=2, counters=Counters()
    )
    top = c2.group_by_name("top").value
    assert top is not None and rec.split_members(top.members) == ["a", "b", "c"]
    assert top.member_count == 3


def test_case_insensitive_domain_folds_names(tmp_path):
    c = backend(tmp_path, case_sensitive=False)
    with c.write() as b:
        c.put_user(b, User("Alice", 5000, 5000, dn="uid=Alice,ou=people"))
    assert c.user_by_name("ALICE").value == User("Alice", 5000, 5000, dn="uid=Alice,ou=people")
    cs = backend(tmp_path / "cs", case_sensitive=True)
    with cs.write() as b:
        cs.put_user(b, User("Alice", 5000, 5000))
    assert cs.user_by_name("alice").state is State.MISSING


def test_refreshing_2000_unchanged_groups_writes_no_entry_transaction(tmp_path):
    counters = Counters()
    c = backend(tmp_path, counters=counters)
    groups = [group(i) for i in range(2000)]
    with c.write() as b:
        for g in groups:
            c.put_group(b, g)
    entry_path, _ = cache_paths(str(tmp_path), "LDAP")
    before_file = digest(entry_path)
    before_txn = counters.get(ENTRY_TXN).count
    before_ts = counters.get(TS_WRITE).count
    # Same content, members listed in another order: still unchanged (§3.4).
    with c.write() as b:
        for g in groups:
            c.put_group(b, Group(g.name, g.gid, g.dn, tuple(reversed(g.members))))
    assert counters.get(ENTRY_TXN).count == before_txn
    assert counters.get(TS_WRITE).count == before_ts + 1
    assert digest(entry_path) == before_file

    # One group changes: one transaction that rewrites that record only.
    changed = group(7, members=21)
    with c.write() as b:
        for g in groups:
            c.put_group(b, changed if g.name == changed.name else g)
        result = c.commit(b)
    assert result.entries_written == 1
    assert counters.get(ENTRY_TXN).count == before_txn + 1
    assert c.group_by_name("group00007").value.member_count == 21  # type: ignore[union-attr]


def test_invalidate_all_then_same_refresh_leaves_entry_store_unchanged(tmp_path):
    counters = Counters()
    c = backend(tmp_path, counters=counters)
    users = [user(i) for i in range(5000)]
    groups = [group(i) for i in range(5000)]
    with c.write() as b:
        for u in users:
            c.put_user(b, u)
        for g in groups:
            c.put_group(b, g)
    entry_path, _ = cache_paths(str(tmp_path), "LDAP")
    before = digest(entry_path)
    txns = counters.get(ENTRY_TXN).count

    assert c.invalidate_all() == 10000
    assert all(c.user_by_name(u.name).state is State.EXPIRED for u in users)
    assert all(c.group_by_gid(g.gid).state is State.EXPIRED for g in groups)

    with c.write() as b:
        for u in users:
            c.put_user(b, u)
        for g in groups:
            c.put_group(b, g)
    assert counters.get(ENTRY_TXN).count == txns
    assert digest(entry_path) == before
    assert all(c.user_by_name(u.name).state is State.VALID for u in users[:100])


def test_invalidate_one_and_unknown(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
        c.put_group(b, group(1))
        c.put_initgroups(b, "user00001", [10000], [])
    assert c.invalidate_user("user00001") is True
    assert c.invalidate_user("nosuch") is False
    assert c.user_by_name("user00001").state is State.EXPIRED
    assert c.initgroups("user00001").state is State.EXPIRED
    assert c.group_by_name("group00001").state is State.VALID
    assert c.invalidate_group("group00001") is True
    assert c.group_by_name("group00001").state is State.EXPIRED


def test_touch_group_writes_timestamps_only(tmp_path):
    counters = Counters()
    c = backend(tmp_path, counters=counters)
    with c.write() as b:
        c.put_group(b, group(1), modstamp="20260101000000Z", usn="csn#1")
    c.invalidate_group("group00001")
    # Invalidation keeps the stamps the refresh validates by (docs/ARCHITECTURE.md §5).
    t = c.times("group", ["group00001"])["group00001"]
    assert (t.data_expire, t.modstamp, t.usn) == (rec.EXPIRED, "20260101000000Z", "csn#1")
    assert c.group_by_name("group00001").state is State.EXPIRED
    txns = counters.get(ENTRY_TXN).count
    with c.write() as b:
        c.touch_group(b, "group00001", modstamp="20260101000000Z")
        c.touch_group(b, "never-stored")
    assert counters.get(ENTRY_TXN).count == txns
    assert c.group_by_name("group00001").state is State.VALID
    assert c.group_by_name("never-stored").state is State.MISSING


def test_group_stamps_and_closure_for_validation(tmp_path):
    # What the refresh validation reads (cached/ldap/validate.py): each group's stored
    # stamp, gid, DN and member groups; and the groups an answer is expanded from, as
    # _expand reads them.
    c = backend(tmp_path, nesting_level=1)
    with c.write() as b:
        c.put_group(b, Group("top", 1, "cn=top", ("a",), ("mid",)), modstamp="m1", usn="c1")
        c.put_group(b, Group("mid", 2, "cn=mid", ("b",), ("low", "top")))  # a loop too
        c.put_group(b, Group("low", 3, "cn=low", ("c",)))
        c.put_group(b, Group("dangling", 4, "cn=d", (), ("nosuch",)))
    c.invalidate_all()  # -E keeps the stamps
    got = c.group_stamps(["top", "mid", "nosuch"])
    assert got == {
        "top": ("m1", "c1", 1, "cn=top", ["mid"]),
        "mid": ("", "", 2, "cn=mid", ["low", "top"]),
    }
    assert c.group_closure("top") == ["top", "mid"]  # nesting level 1: "low" not read
    assert c.group_closure("dangling") is None  # a member group not stored
    assert c.group_closure("nosuch") is None
    with pytest.raises(rec.RecordError):
        rec.decode_stamp(b"\x01short")
    with pytest.raises(rec.RecordError):
        rec.decode_group_ident(b"\xc1")


def test_delete_removes_record_indexes_and_timestamps(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
        c.put_group(b, group(1))
        c.put_initgroups(b, "user00001", [10000], [])
    with c.write() as b:
        c.delete_user(b, "user00001")
        c.delete_group(b, "group00001")
    assert c.user_by_uid(10002).state is State.MISSING
    assert c.group_by_gid(20002).state is State.MISSING
    assert c.initgroups("user00001").state is State.MISSING
    assert c.resolve_dns([user(1).dn, group(1).dn]) == {}
    assert c.times("user", ["user00001"]) == {}


def test_changed_uid_moves_the_index(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
    with c.write() as b:
        c.put_user(b, User("user00001", 777, 10000, dn=user(1).dn))
    assert c.user_by_uid(10002).state is State.MISSING
    assert c.user_by_uid(777).value is not None


def _named(c: BackendCache, gid: int) -> str | None:
    view = c.group_by_gid(gid).value
    return None if view is None else view.name


def test_a_group_renamed_on_the_server_keeps_its_gid_and_dn_index(tmp_path):
    """Found by fuzzing the refresh: the new name is put and the old one deleted in one
    batch; the delete dropped the gid entry (and, for a change of case, the DN entry)
    just written for the new name, and later fetches, finding the record unchanged,
    never wrote it again: `getent group <gid>` answered nothing for good."""
    c = backend(tmp_path)
    g2 = Group("g2", 3002, f"cn=g2,ou=groups,{BASE}", ("alice",))
    devs = Group("devs", 3003, f"cn=devs,ou=groups,{BASE}", ("alice",))
    with c.write() as b:
        c.put_group(b, g2)
        c.put_group(b, devs)
    renamed = Group("rg1", 3002, f"cn=rg1,ou=groups,{BASE}", ("alice",))
    case_only = Group("Devs", 3003, f"cn=Devs,ou=groups,{BASE}", ("alice",))
    with c.write() as b:
        c.put_group(b, renamed)
        c.put_group(b, case_only)
        c.delete_group(b, "g2")
        c.delete_group(b, "devs")
    assert (_named(c, 3002), _named(c, 3003)) == ("rg1", "Devs")
    assert c.resolve_dns([renamed.dn, case_only.dn]) == {
        renamed.dn: ("group", "rg1"), case_only.dn: ("group", "Devs")
    }
    assert c.group_by_name("g2").value is None and c.group_by_name("devs").value is None


def test_two_groups_swapping_gids_keep_both_index_entries(tmp_path):
    c = backend(tmp_path)
    x, y = (Group(n, gid, f"cn={n},ou=groups,{BASE}", ()) for n, gid in (("x", 3002), ("y", 3003)))
    with c.write() as b:
        c.put_group(b, x)
        c.put_group(b, y)
    with c.write() as b:  # each stored by its own lookup, in either order
        c.put_group(b, Group("y", 3002, y.dn, ()))
    with c.write() as b:
        c.put_group(b, Group("x", 3003, x.dn, ()))
    assert (_named(c, 3002), _named(c, 3003)) == ("y", "x")
    with c.write() as b:  # and back, in one batch
        c.put_group(b, x)
        c.put_group(b, y)
    assert (_named(c, 3002), _named(c, 3003)) == ("x", "y")


def test_a_deleted_duplicate_leaves_the_other_groups_gid_entry(tmp_path):
    """Two groups of one gid (the directory's error): the gid entry names the last one
    stored; deleting the other one leaves it."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, Group("a", 3005, f"cn=a,ou=groups,{BASE}", ()))
        c.put_group(b, Group("b", 3005, f"cn=b,ou=groups,{BASE}", ()))
    assert _named(c, 3005) == "b"
    with c.write() as b:
        c.delete_group(b, "a")
    assert _named(c, 3005) == "b"


def _fill(c: BackendCache, n: int = 50) -> None:
    with c.write() as b:
        for i in range(n):
            c.put_user(b, user(i))
            c.put_group(b, group(i))


def _expect_all_expired_and_present(tmp_path, n: int = 50) -> None:
    c = backend(tmp_path)
    assert c.ts_rebuilt_reason
    for i in range(n):
        u = c.user_by_name(user(i).name)
        g = c.group_by_name(group(i).name)
        assert u.state is State.EXPIRED and u.value == user(i)
        assert g.state is State.EXPIRED and g.value is not None
    c.close()


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage", "zeroed-meta", "foreign"])
def test_damaged_timestamp_store_is_rebuilt_and_nothing_is_lost(tmp_path, damage):
    c = backend(tmp_path)
    _fill(c)
    c.close()
    _, ts_path = cache_paths(str(tmp_path), "LDAP")
    size = os.path.getsize(ts_path)
    if damage == "deleted":
        os.unlink(ts_path)
    elif damage == "truncated":
        os.truncate(ts_path, size // 3)
    elif damage == "garbage":
        with open(ts_path, "r+b") as f:
            f.write(os.urandom(size))
    elif damage == "zeroed-meta":
        with open(ts_path, "r+b") as f:
            f.write(b"\0" * 8192)
    elif damage == "foreign":
        # A timestamp store of another cache (e.g. restored from a backup).
        other = backend(tmp_path / "other")
        _fill(other)
        other.close()
        os.replace(cache_paths(str(tmp_path / "other"), "LDAP")[1], ts_path)
    if damage == "deleted":
        c = backend(tmp_path)
        assert c.user_by_name("user00001").state is State.EXPIRED
        c.close()
    else:
        _expect_all_expired_and_present(tmp_path)


def test_unclean_shutdown_then_reboot_rebuilds_timestamps(tmp_path):
    c = backend(tmp_path, boot_id="boot-1")
    _fill(c)
    c.close(clean=False)  # crash: no clean marker
    # Same boot: the no-sync store survived in the page cache and is kept.
    c = backend(tmp_path, boot_id="boot-1")
    assert not c.ts_rebuilt_reason
    assert c.user_by_name("user00001").state is State.VALID
    c.close(clean=False)
    # After a reboot the unsynced timestamps cannot be trusted.
    c = BackendCache(str(tmp_path), "LDAP", boot_id="boot-2", counters=Counters())
    assert "reboot" in c.ts_rebuilt_reason
    assert c.user_by_name("user00001").state is State.EXPIRED
    assert c.user_by_name("user00001").value == user(1)
    c.close()
    # A clean shutdown before the reboot keeps them.
    c = backend(tmp_path, boot_id="boot-2")
    _fill(c)
    c.close(clean=True)
    c = backend(tmp_path, boot_id="boot-3")
    assert not c.ts_rebuilt_reason
    assert c.user_by_name("user00001").state is State.VALID


def small_map(monkeypatch) -> None:
    for module in (cache_mod, integrity):  # the reader's and the backend's opening
        monkeypatch.setattr(module, "ENTRY_MAP_SIZE", 256 * 1024)


def test_map_full_grows_the_map(tmp_path, monkeypatch):
    small_map(monkeypatch)
    c = backend(tmp_path)
    with c.write() as b:
        for i in range(3000):
            c.put_user(b, user(i))
    assert c.counts()["users"] == 3000
    assert c.entries.env.info()["map_size"] > 256 * 1024


def _grow_in_child(path: str) -> None:
    c = BackendCache(path, "LDAP", boot_id="boot-1", counters=Counters())
    with c.write() as b:
        for i in range(3000):
            c.put_user(b, user(i))
    c.close()


def test_reader_adopts_a_map_grown_by_another_process(tmp_path, monkeypatch):
    small_map(monkeypatch)
    c = backend(tmp_path)
    _fill(c, 5)
    c.close()
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert reader.user_by_name("user00001").value == user(1)
    p = mp.get_context("spawn").Process(target=_grow_in_child, args=(str(tmp_path),))
    p.start()
    p.join()
    assert p.exitcode == 0
    assert reader.user_by_name("user02999").value == user(2999)


def test_responder_reopens_a_rebuilt_timestamp_store(tmp_path):
    c = backend(tmp_path)
    _fill(c, 5)
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert reader.user_by_name("user00001").state is State.VALID
    c.close(clean=False)
    c = BackendCache(str(tmp_path), "LDAP", boot_id="boot-2", counters=Counters())
    assert c.ts_rebuilt_reason
    reader._next_identity_check = 0.0  # the 1 s recheck period, skipped
    assert reader.user_by_name("user00001").state is State.EXPIRED


def test_a_reader_writes_timestamps_only(tmp_path):
    c = backend(tmp_path)
    _fill(c, 5)
    entry_path, _ = cache_paths(str(tmp_path), "LDAP")
    before = digest(entry_path)
    tool = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert tool.invalidate_users() == 5
    # Only the backend writes entries: a DomainCache has no method that does (mypy
    # rejects the call; tests/unit/test_imports.py keeps the writer to the backend),
    # and it opens the entry store as a reader (LMDB read-only in a process of its own).
    assert not isinstance(tool, BackendCache)
    assert not any(hasattr(tool, m) for m in ("commit", "write", "put_user", "put_group"))
    assert (tool.entries.writer, c.entries.writer) == (False, True)
    tool.close()
    assert c.user_by_name("user00001").state is State.EXPIRED
    assert digest(entry_path) == before


# Child processes are spawned, not forked: an LMDB environment must not cross a
# fork, and py-lmdb refuses to reopen one a forked child inherited.
def _writer_loop(path: str, rounds: int) -> None:
    c = BackendCache(path, "LDAP", boot_id="boot-1", counters=Counters())
    for v in range(rounds):
        with c.write() as b:
            # Version v everywhere: a reader that mixes versions saw a partial write.
            c.put_group(
                b, Group("top", 1, "cn=top", tuple(f"a{v}-{j}" for j in range(50)), ("sub",))
            )
            c.put_group(b, Group("sub", 2, "cn=sub", tuple(f"b{v}-{j}" for j in range(50))))
    c.close()


def test_reader_never_sees_a_partial_write(tmp_path):
    c = backend(tmp_path)
    _writer_loop(str(tmp_path), 1)
    c.close()
    p = mp.get_context("spawn").Process(target=_writer_loop, args=(str(tmp_path), 300))
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    p.start()
    versions: set[str] = set()
    reads = 0
    while p.is_alive() or reads == 0:
        view = reader.group_by_name("top").value
        assert view is not None
        names = rec.split_members(view.members)
        assert len(names) == 100
        seen = {n.split("-")[0][1:] for n in names}
        assert len(seen) == 1, f"mixed versions in one read: {sorted(seen)}"
        versions |= seen
        reads += 1
    p.join()
    assert p.exitcode == 0
    assert len(versions) > 1  # the reader really raced the writer


# -- held group lookups (the responder's warm path) ----------------------------------


def test_a_held_group_lookup_is_reused_only_while_both_stores_are_unchanged(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, group(1))
        c.put_group(b, group(2), modstamp="20260101000000Z")
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    first = reader.group_by_gid(20003)  # group00002
    assert first.state is State.VALID and first.value is not None
    assert reader.group_by_gid(20003) is first  # held: nothing read again
    by_name = reader.group_by_name("group00002")
    assert reader.group_by_name("group00002") is by_name
    # A backend write that changes the members: seen by the very next lookup.
    changed = Group("group00002", 20003, f"cn=group00002,ou=groups,{BASE}", ("newcomer",))
    with c.write() as b:
        c.put_group(b, changed)
    for got in (reader.group_by_gid(20003), reader.group_by_name("group00002")):
        assert got.value is not None and got.value.members == b"newcomer\0"
    # A write of another group only: its records compared again, and kept.
    held = reader.group_by_gid(20003)
    with c.write() as b:
        c.put_group(b, group(3))
    assert reader.group_by_gid(20003) is held
    # A refresh that writes timestamps only (the entry store untouched): new times,
    # the same view (the responder's answers kept for it stay good).
    with c.write() as b:
        c.touch_group(b, "group00002", modstamp="20270101000000Z")
    touched = reader.group_by_gid(20003)
    assert touched.times.modstamp == "20270101000000Z" and touched.value is held.value
    # Invalidation by a tool (`cached cache`) and by the responder itself (D-Bus).
    tool = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert reader.group_by_gid(20003).state is State.VALID
    assert tool.invalidate_group("group00002")
    assert reader.group_by_gid(20003).state is State.EXPIRED
    assert reader.group_by_name("group00002").state is State.EXPIRED
    assert reader.group_by_name("group00001").state is State.VALID
    reader.invalidate_groups()
    assert reader.group_by_name("group00001").state is State.EXPIRED
    # Deleted: missing at once, by gid and by name.
    with c.write() as b:
        c.delete_group(b, "group00002")
    assert reader.group_by_gid(20003).state is State.MISSING
    assert reader.group_by_name("group00002").state is State.MISSING
    assert 20003 not in reader._held and b"group00002" not in reader._held
    tool.close()
    reader.close()


def test_a_held_group_lookup_is_checked_again_record_by_record_after_a_commit(tmp_path):
    """After any commit, a held lookup is given again only if every record it was
    read from holds the same bytes: the gid index, its record, the records of the
    groups below it (nesting), the alias it was found by; else it is read again."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, group(1, member_groups=("group00002",)))
        c.put_group(b, group(2, member_groups=("group00003",)))
        c.put_group(b, group(3))
        c.put_group(b, group(4), aliases=["another"])
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    top = reader.group_by_gid(20002)
    assert top.value is not None and b"user00021" in top.value.members  # two levels down
    by_alias = reader.group_by_name("another")
    assert by_alias.value is not None and by_alias.value.gid == 20005
    with c.write() as b:
        c.put_group(b, group(5))  # none of theirs
    assert reader.group_by_gid(20002) is top
    assert reader.group_by_name("another") is by_alias
    # A group two levels down gains a member: the top group's members change.
    with c.write() as b:
        c.put_group(b, Group("group00003", 20004, f"cn=group00003,ou=groups,{BASE}",
                             ("newcomer",)))  # fmt: skip
    got = reader.group_by_gid(20002)
    assert got is not top and got.value is not None and b"newcomer" in got.value.members
    # Another group takes the gid in the index.
    with c.write() as b:
        c.put_group(b, Group("usurper", 20002, f"cn=usurper,ou=groups,{BASE}", ("x",)))
        c.own_gid(b, "usurper", 20002)
    got = reader.group_by_gid(20002)
    assert got.value is not None and got.value.name == "usurper"
    # The alias now names nothing: the group of that name is gone for it.
    with c.write() as b:
        c.put_group(b, group(4))
    again = reader.group_by_name("another")
    assert again.value is None or again.value.gid == 20005
    with c.write() as b:
        c.put_group(b, Group("another", 30000, f"cn=another,ou=groups,{BASE}"))
    got = reader.group_by_name("another")
    assert got.value is not None and got.value.gid == 30000  # its own record wins
    reader.close()


def test_a_held_group_lookup_moves_to_midpoint_and_expired_with_the_clock(tmp_path, monkeypatch):
    c = backend(tmp_path, timeouts=cache_mod.Timeouts(group=100))
    with c.write() as b:
        c.put_group(b, group(0))
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    stored = reader.group_by_gid(20001)
    assert stored.state is State.VALID
    now = stored.times.last_update
    clock = {"now": now + 1}
    monkeypatch.setattr(time, "time", lambda: clock["now"])
    assert reader.group_by_gid(20001).state is State.VALID
    clock["now"] = now + 60  # past the midpoint (50 %), before the expiry
    assert reader.group_by_gid(20001).state is State.MIDPOINT
    clock["now"] = now + 101
    assert reader.group_by_gid(20001).state is State.EXPIRED
    clock["now"] = now + 1  # and back: the class is computed at every lookup
    assert reader.group_by_gid(20001).state is State.VALID


# Spawned, as the tool and the backend are processes of their own: LMDB's transaction
# ids are shared through the files, not through this process's environment.
def _invalidate_in_child(path: str) -> None:
    tool = DomainCache(path, "LDAP", counters=Counters())
    assert tool.invalidate_all() > 0
    tool.close()


def _rewrite_in_child(path: str) -> None:
    c = BackendCache(path, "LDAP", boot_id="boot-1", counters=Counters())
    with c.write() as b:
        c.put_group(b, Group("group00000", 20001, f"cn=group00000,ou=groups,{BASE}", ("other",)))
    c.close()


def test_a_held_group_lookup_sees_other_processes_writes_at_once(tmp_path):
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, group(0))
    c.close()
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert reader.group_by_gid(20001).state is State.VALID
    assert reader.group_by_gid(20001) is reader.group_by_gid(20001)
    ctx = mp.get_context("spawn")
    for target, check in (
        (_invalidate_in_child, lambda got: got.state is State.EXPIRED),
        (_rewrite_in_child, lambda got: got.value.members == b"other\0"),
    ):
        p = ctx.Process(target=target, args=(str(tmp_path),))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        got = reader.group_by_gid(20001)
        assert check(got), got
    reader.close()


def test_held_group_lookups_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "HELD_LOOKUPS", 10)
    c = backend(tmp_path)
    with c.write() as b:
        for i in range(25):
            c.put_group(b, group(i))
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    for i in range(25):
        assert reader.group_by_gid(20001 + i).value is not None
        assert len(reader._held) <= 10
    monkeypatch.setattr(cache_mod, "HELD_MEMBER_BYTES", 500)
    for i in range(25):
        reader.group_by_name(f"group{i:05d}")
        assert reader._held_bytes <= 500 + 800  # one more group's members and records
    # The backend keeps none: it reads what it has just written.
    assert c.group_by_gid(20001).value is not None and not c._held


def test_store_write_keeps_each_tables_order(tmp_path):
    """Store.write applies each table's operations together (puts only: one putmulti):
    within a table their order decides, as one put after another did — the last put
    of a key wins, a delete then a put leaves the put, a put then a delete nothing."""
    from cached.cache.store import Store

    st = Store(str(tmp_path / "s.ldb"), ("a", "b"), writer=True, sync=False, map_size=1 << 20)
    try:
        written, _ = st.write(
            [("a", b"k", b"1"), ("b", b"k", b"x"), ("a", b"k", b"2"), ("a", b"j", b"3")]
        )
        assert written == 8
        st.write([("b", b"k", None), ("b", b"k", b"y"), ("b", b"m", b"z"), ("b", b"m", None)])
        with st.read() as txn:
            a = dict(txn.cursor(db=st.tables["a"]))
            b = dict(txn.cursor(db=st.tables["b"]))
        assert a == {b"k": b"2", b"j": b"3"} and b == {b"k": b"y"}
    finally:
        st.close()


def test_a_kept_group_list_is_given_only_while_its_record_is_unchanged(tmp_path):
    """The responder keeps a user's decoded group list (`id` asks for it two or three
    times); a new list written by the backend is read at once, even one of the same
    size, and so is the list of another user or the one stored under an alias."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1), aliases=["alias1"])
        c.put_user(b, user(2))
        c.put_initgroups(b, "user00001", [20001, 20002], ["group00000", "group00001"])
        c.put_initgroups(b, "user00002", [20003], ["group00002"])
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())

    def groups(name: str) -> tuple[list[int], tuple[str, ...]]:
        got = reader.initgroups(name).value
        assert got is not None
        return array("I", got.gids).tolist(), got.groups

    first = groups("user00001")
    assert first == ([20001, 20002], ("group00000", "group00001"))
    assert groups("user00001") == first and groups("alias1") == first
    assert groups("user00002") == ([20003], ("group00002",))
    # Same number of groups, same record size: only the bytes differ.
    with c.write() as b:
        c.put_initgroups(b, "user00001", [20001, 20003], ["group00000", "group00002"])
    assert groups("user00001") == ([20001, 20003], ("group00000", "group00002"))
    assert groups("alias1") == ([20001, 20003], ("group00000", "group00002"))
    with c.write() as b:
        c.put_initgroups(b, "user00001", [], [])
    assert groups("user00001") == ([], ())
    reader.close()


def _store_incomplete_and_die_after_the_entry_commit(path: str) -> None:
    c = BackendCache(path, "LDAP", boot_id="boot-1", counters=Counters())
    write = c.entries.write

    def commit_then_die(ops, durable=True):
        write(ops, durable)
        os.kill(os.getpid(), signal.SIGKILL)  # before anything after the entry commit

    c.entries.write = commit_then_die  # type: ignore[method-assign]
    with c.write() as b:
        # Fewer members than the stored version: some member groups were not fetched.
        # No stamp, as the provider stores an incomplete group (validate.py).
        c.put_group(b, group(1, members=3), "", "csn-2", complete=False)


def test_a_kill_after_an_entry_commit_never_leaves_an_incomplete_group_valid(tmp_path):
    """A group stored incomplete (§6.3 step 4) is stored expired and without a stamp.
    Killed between the entry store's commit and the timestamp store's, the old
    timestamp record (valid, trusted stamp) would vouch for the incomplete member
    list: served as valid, and touched by the next refresh by stamps. Its timestamp
    record is written before the entry commit, so either order of death is safe."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, group(1), "20200101000000Z", "csn-1")
    c.close(clean=False)
    p = mp.get_context("spawn").Process(
        target=_store_incomplete_and_die_after_the_entry_commit, args=(str(tmp_path),)
    )
    p.start()
    p.join()
    assert p.exitcode == -signal.SIGKILL
    c = backend(tmp_path)  # same boot: the no-sync store is trusted, as after any kill
    assert not c.ts_rebuilt_reason
    got = c.group_by_name("group00001")
    assert got.value is not None and got.value.member_count == 3  # the entry committed
    assert got.state is State.EXPIRED
    assert c.group_stamps(["group00001"])["group00001"][0] == ""  # nothing to trust


def test_read_whole_records_survive_restarts_and_invalidation(tmp_path):
    """When a group was last stored read whole (stamps.due's record) is kept in the
    timestamp store: written by the commit that stores the group, kept across a
    restart and by invalidation, deleted with the group, lost with the store."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, group(1), "20200101000000Z", "csn-1")
        c.read_whole(b, "group00001")
        c.put_group(b, group(2), "20200101000000Z", "csn-1")  # stored, not read whole
        c.read_whole(b, "nosuch")  # not stored in this batch: nothing to vouch for
    got = c.read_whole_times(["group00001", "group00002", "nosuch"])
    assert set(got) == {"group00001"}
    t1 = got["group00001"]
    assert abs(t1 - c.times("group", ["group00001"])["group00001"].last_update) < 1e-6
    # Validated by stamps (touched): not read whole, the record stays.
    with c.write() as b:
        c.touch_group(b, "group00001", "20200101000000Z", "csn-1")
    assert c.read_whole_times(["group00001"]) == {"group00001": t1}
    c.close()
    c = backend(tmp_path)  # a restart
    assert c.read_whole_times(["group00001"]) == {"group00001": t1}
    # `cached cache -g` / -G / -E expire, they do not make a group read whole.
    tool = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert tool.invalidate_group("group00001")
    tool.invalidate_all()
    tool.close()
    assert c.group_by_name("group00001").state is State.EXPIRED
    assert c.read_whole_times(["group00001"]) == {"group00001": t1}
    with c.write() as b:
        c.delete_group(b, "group00001")
    assert c.read_whole_times(["group00001"]) == {}
    with c.write() as b:
        c.put_group(b, group(3))
        c.read_whole(b, "group00003")
    c.close(clean=False)
    # The timestamp store recreated (unclean shutdown, then a reboot): all gone.
    c = backend(tmp_path, boot_id="boot-2")
    assert c.ts_rebuilt_reason
    assert c.read_whole_times(["group00003"]) == {}
    c.close()


def test_hostile_read_whole_records_count_as_due(tmp_path):
    """A read_whole record (cache.READ_WHOLE, 8 bytes: a big-endian double) that is not
    a sane past time makes its group due a whole read (stamps.due): the timestamp
    store is no-sync and also written by `cached cache`, and the clock can move back,
    so a record is a hint, never trusted beyond the interval. A value of the wrong size
    is not read at all (as no record); NaN, +inf, -inf, a time in the future, and one
    older than refresh_full_interval all count as due. Only a time within the last
    interval does not."""
    from cached.ldap.stamps import due
    from testing.backend import make_backend, make_domain

    every = 3600
    # A provider never connected (no server: due reads the cache alone).
    p, c, _ = make_backend(
        tmp_path, make_domain(["ldap://127.0.0.1:1"], BASE, refresh_full_interval=every)
    )
    assert c.ts is not None
    now = time.time()
    hostile = {
        "empty": b"",
        "short": b"\x41\xda\x00\x00",  # 4 bytes
        "long": cache_mod.READ_WHOLE.pack(now) + b"\x00",  # 9 bytes
        "twice": cache_mod.READ_WHOLE.pack(now) * 2,  # 16 bytes
        "nan": cache_mod.READ_WHOLE.pack(float("nan")),
        "negnan": b"\xff\xf8" + b"\x00" * 6,  # a NaN with the sign bit set
        "inf": cache_mod.READ_WHOLE.pack(float("inf")),
        "neginf": cache_mod.READ_WHOLE.pack(float("-inf")),
        "future": cache_mod.READ_WHOLE.pack(now + every),
        "soon": cache_mod.READ_WHOLE.pack(now + 60),  # the clock moved back a minute
        "old": cache_mod.READ_WHOLE.pack(now - every - 1),
        "zero": cache_mod.READ_WHOLE.pack(0.0),
        "negative": cache_mod.READ_WHOLE.pack(-1.0),
    }
    fine = {"recent": cache_mod.READ_WHOLE.pack(now - 10)}
    names = sorted(hostile) + sorted(fine) + ["absent"]
    c.ts.write([("read_whole", c.key(n), v) for n, v in {**hostile, **fine}.items()])

    # The pure read: a value of the wrong size is as no record; 8 bytes are unpacked.
    got = c.read_whole_times(names)
    assert set(got) == set(names) - {"empty", "short", "long", "twice", "absent"}
    assert got["recent"] == now - 10

    assert due(p.ctx, names) == set(hostile) | {"absent"}
    c.close()


def test_a_store_of_the_previous_record_format_is_rebuilt_empty(tmp_path, caplog):
    """Format 2 (a group record's optional 8th field): a store written as format 1
    starts empty, as one of a later format does for an older version (a downgrade
    took the new field for damage, found in review)."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_user(b, user(1))
        c.put_group(b, group(1))
    c.entries.write([("meta", b"format", b"1")])  # what format 1 wrote
    c.close(clean=True)
    c = backend(tmp_path)
    try:
        assert c.user_by_name("user00001").value is None
        assert c.group_by_name("group00001").value is None
        assert f"record format 1, this version writes {rec.FORMAT}" in caplog.text
    finally:
        c.close(clean=True)


# -- the entry store's walk at start (integrity.entry_store_damage) ------------------------


def _store_with_a_record(path: Path) -> str:
    env = lmdb.open(str(path), subdir=False, max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"u1", b"record", db=env.open_db(b"users", txn=txn))
    env.close()
    return str(path)


def test_entry_store_walk_passes_a_sound_store(tmp_path: Path) -> None:
    assert integrity.entry_store_damage(_store_with_a_record(tmp_path / "e.lmdb")) == ""


def test_entry_store_walk_works_with_more_descriptors_open_than_select_takes(
    tmp_path: Path,
) -> None:
    """A backend with over FD_SETSIZE (1,024) descriptors open gets the walk's pipe above
    it: the walk still answers (select(2) would refuse that descriptor)."""
    import resource

    path = _store_with_a_record(tmp_path / "e.lmdb")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert integrity.entry_store_damage(path) == ""
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_entry_store_walk_that_dies_or_hangs_is_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """liblmdb may crash on a damaged file: the walk runs in a child process, whose
    death by a fault of its own tells the store is damaged (and the backend lives
    on)."""
    path = _store_with_a_record(tmp_path / "e.lmdb")

    def crash(_path: str) -> str:
        faulthandler.disable()  # pytest's: its dump of the child's death is noise here
        os.kill(os.getpid(), signal.SIGBUS)
        return ""

    monkeypatch.setattr(integrity, "_walk", crash)
    assert integrity.entry_store_damage(path) == "entry store walk died of SIGBUS"

    # An end that says nothing of the file (killed, as by the OOM killer; a Python
    # error; an lmdb error of the machine): the store is used as it is (else a sound
    # cache would be set aside).
    def killed(_path: str) -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        return ""

    def fails(_path: str) -> str:
        raise MemoryError

    for end in (killed, fails, lambda _path: "?ReadersFullError: no slot"):
        monkeypatch.setattr(integrity, "_walk", end)
        assert integrity.entry_store_damage(path) == ""

    def hang(_path: str) -> str:
        time.sleep(60)
        return ""

    # Past its deadline it is killed and the store used as it is: liblmdb reports a
    # cycle of pages (MDB_CURSOR_FULL), so a slow walk is a slow disk (review).
    monkeypatch.setattr(integrity, "_walk", hang)
    monkeypatch.setattr(integrity, "WALK_TIMEOUT", 0.2)
    assert integrity.entry_store_damage(path) == ""

    def aborts(_path: str) -> str:  # liblmdb's assertions abort on some garbled pages
        faulthandler.disable()
        os.abort()

    monkeypatch.setattr(integrity, "_walk", aborts)
    assert integrity.entry_store_damage(path) == "entry store walk died of SIGABRT"


def test_a_reader_refuses_a_damaged_entry_store_with_the_reason(tmp_path: Path) -> None:
    """Found in review: a reader (`cached cache`) mapped a truncated store and died of
    SIGBUS, and one of zeros with lmdb.InvalidError: it names the file and the damage."""
    from cached.cache.cache import DamagedStore

    c = backend(tmp_path)
    _fill(c, 5)
    c.close()
    entry_path, _ = cache_paths(str(tmp_path), "LDAP")
    size = os.path.getsize(entry_path)
    for damage, why in (
        (lambda: os.truncate(entry_path, size // 2), f"{size // 2} bytes, its pages need"),
        (lambda: Path(entry_path).write_bytes(bytes(size)), f"{size} bytes, no LMDB meta page"),
    ):
        damage()
        with pytest.raises(DamagedStore, match=f"^{entry_path}: the entry store is damaged "
                           f"\\({why}"):  # fmt: skip
            DomainCache(str(tmp_path), "LDAP", counters=Counters())
