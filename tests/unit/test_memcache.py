"""Memory-cache writer and reader: format (§2.2), chains (§2.3), barriers (§2.4), lifecycle.

Pure logic on files in a temporary directory; the real client reads them in
test_memcache_nss.py.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cached.memcache import (
    Geometry,
    GroupWriter,
    InitgroupsWriter,
    McBusyError,
    McError,
    McPasswdEntry,
    McReader,
    MemoryCache,
    PackedMembers,
    PasswdWriter,
    Status,
    murmurhash3,
)
from cached.memcache.layout import (
    HEADER,
    REC_HEADER,
    SLOT_SIZE,
    default_mb,
    encode_passwd,
    valid_barrier,
)
from cached.model import MEMCACHE_KINDS, Group, User

NOW = 1_700_000_000


def clock() -> float:
    return NOW + 0.75


def pw(path: Path, **kw: object) -> PasswdWriter:
    return PasswdWriter(path / "passwd", clock=clock, **kw)  # type: ignore[arg-type]


def assert_clean(path: Path) -> None:
    with McReader(path) as r:
        assert r.verify() == []


# --- MurmurHash3 ------------------------------------------------------------------------------

# Published MurmurHash3_x86_32 vectors (SMHasher / Wikipedia), plus keys in the shape the
# memory cache hashes (the last two from pysss_murmur.murmurhash3, SSSD's own binding).
MURMUR_VECTORS = [
    (b"", 0, 0),
    (b"", 1, 0x514E28B7),
    (b"", 0xFFFFFFFF, 0x81F16F39),
    (b"\0\0\0\0", 0, 0x2362F9DE),
    (b"a", 0x9747B28C, 0x7FA09EA6),
    (b"aa", 0x9747B28C, 0x5D211726),
    (b"aaa", 0x9747B28C, 0x283E0130),
    (b"aaaa", 0x9747B28C, 0x5A97808A),
    (b"abc", 0, 0xB3DD93FA),
    (b"abcd", 0x9747B28C, 0xF0478627),
    (b"Hello, world!", 0x9747B28C, 0x24884CBA),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
    (b"alice\0", 0, 0x1201616F),
    (b"10001\0", 0x12345678, 0xF10EA484),
]


@pytest.mark.parametrize(("data", "seed", "expected"), MURMUR_VECTORS)
def test_murmur_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmurhash3(data, seed) == expected


# --- sizes and header ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mb", "slots", "size"),
    [(8, 209712, 9253600), (6, 157288, 6940392), (10, 262144, 11567160)],
)
def test_geometry_matches_reference_table(mb: int, slots: int, size: int) -> None:
    g = Geometry.from_mb(mb)
    assert (g.slots, g.file_size) == (slots, size)
    assert g.dt_size == slots * 40 and g.ft_size == slots // 8 and g.ht_size == slots * 4
    assert g.data_table == 56
    assert g.free_table % 8 == 0 and g.hash_table % 8 == 0


def test_default_files_have_reference_sizes_and_header(tmp_path: Path) -> None:
    with MemoryCache.open(tmp_path) as mc:
        for w, size in ((mc.passwd, 9253600), (mc.group, 6940392), (mc.initgroups, 11567160)):
            assert w is not None
            st_ = os.stat(w.path)
            assert st_.st_size == size
            assert stat.S_IMODE(st_.st_mode) == 0o644
            raw = w.path.read_bytes()
            f = HEADER.unpack_from(raw)
            g = w.geometry
            assert valid_barrier(f[0]) and f[0] == f[12]
            assert f[1:12] == (
                1, 1, Status.ALIVE, w.seed, g.dt_size, g.ft_size, g.ht_size,
                56, g.free_table, g.hash_table, 0,
            )  # fmt: skip
            assert raw[52:56] == bytes(4)
            assert raw[56 : 56 + g.dt_size] == b"\xff" * g.dt_size
            assert raw[g.free_table : g.free_table + g.ft_size] == bytes(g.ft_size)
            assert raw[g.hash_table : g.hash_table + g.ht_size] == b"\xff" * g.ht_size


def test_sizes_of_zero_disable_a_file(tmp_path: Path) -> None:
    with MemoryCache.open(tmp_path, passwd_mb=1, group_mb=0, initgroups_mb=1) as mc:
        assert mc.group is None and mc.passwd is not None
        assert sorted(p.name for p in tmp_path.iterdir()) == ["initgroups", "passwd"]
    with MemoryCache.open(tmp_path / "off", timeout=0) as mc:
        assert mc.writers() == []


# --- records ----------------------------------------------------------------------------------


def test_passwd_record_layout_and_lookup(tmp_path: Path) -> None:
    with pw(tmp_path, slots=64) as w:
        res = w.store("alice", 10001, 20001, "Alice A", "/home/alice", "/bin/bash")
        assert res.stored and not res.refreshed
        raw = w.path.read_bytes()
    off = 56 + res.slot * SLOT_SIZE
    b1, length, expire, n1, n2, h1, h2, pad, b2 = REC_HEADER.unpack_from(raw, off)
    strs = b"alice\0*\0Alice A\0/home/alice\0/bin/bash\0"
    assert b1 == b2 == 0xF0000000
    assert length == 40 + 16 + len(strs)
    assert expire == NOW + 300
    assert (n1, n2, pad) == (0xFFFFFFFF,) * 3
    seed = struct.unpack_from("=I", raw, 16)[0]
    assert h1 == murmurhash3(b"alice\0", seed) % 64
    assert h2 == murmurhash3(b"10001\0", seed) % 64
    assert raw[off + 40 : off + length] == struct.pack("=4I", 16, 10001, 20001, len(strs)) + strs
    assert raw[off + length : off + 80] == b"\xff" * (80 - length)  # rest of last slot
    with McReader(tmp_path / "passwd") as r:
        e = r.passwd("alice")
        assert e == McPasswdEntry(
            "alice", "*", 10001, 20001, "Alice A", "/home/alice", "/bin/bash", NOW + 300, 0
        )
        assert r.passwd(10001) == e
        assert r.passwd("bob") is None and r.passwd(10002) is None
        assert r.passwd("alice", now=NOW + 300) == e  # the client: expire < now is stale
        assert r.passwd("alice", now=NOW + 301) is None
        assert r.verify() == []


def test_store_user_and_pwfield(tmp_path: Path) -> None:
    with pw(tmp_path, slots=64) as w:
        w.store_user(User("bob", 10002, 10002, "", "/home/bob", "/bin/sh", "uid=bob"), passwd="x")
        with McReader(w.path) as r:
            e = r.passwd(10002)
            assert e is not None and (e.name, e.passwd, e.gecos) == ("bob", "x", "")


@pytest.mark.parametrize("members", [0, 1, 5000])
def test_group_record(tmp_path: Path, members: int) -> None:
    names = [f"member{i:05d}" for i in range(members)]
    with GroupWriter(tmp_path / "group", clock=clock) as w:
        assert w.store("staff", 50000, names).stored
        with McReader(w.path) as r:
            for key in ("staff", 50000):
                e = r.group(key)
                assert e is not None
                assert (e.name, e.passwd, e.gid, e.members) == ("staff", "*", 50000, tuple(names))
            rec = r.get_record(0)
            strs = b"staff\0*\0" + b"".join(n.encode() + b"\0" for n in names)
            assert rec.data[:16] == struct.pack("=4I", 16, 50000, members, len(strs))
            assert rec.data[16:] == strs
            assert r.verify() == []


def test_group_members_as_packed_blob(tmp_path: Path) -> None:
    blob = b"".join(b"u%d\0" % i for i in range(3000))
    with GroupWriter(tmp_path / "group", slots=4096) as w:
        w.store("big", 7, PackedMembers(blob, 3000))
        w.store_group(Group("small", 8, members=("a", "b")))
        w.store_group(Group("nested", 9, members=("a",)), members=["a", "b", "c"])
        with McReader(w.path) as r:
            big, small, nested = r.group("big"), r.group(8), r.group("nested")
            assert big is not None and big.members == tuple(f"u{i}" for i in range(3000))
            assert small is not None and small.members == ("a", "b")
            assert nested is not None and nested.members == ("a", "b", "c")
    for bad in [(b"a\0b", 2), (b"a\0b\0", 1), (b"", 1), (b"a", 0)]:
        with pytest.raises(ValueError, match="NUL-terminated"):
            PackedMembers(*bad)


def test_initgroups_record(tmp_path: Path) -> None:
    gids = list(range(100000, 100000 + 2086))
    with InitgroupsWriter(tmp_path / "initgroups", clock=clock) as w:
        assert w.store("Alice", "alice", gids).stored
        with McReader(w.path) as r:
            e = r.initgroups("Alice")
            assert e is not None
            assert (e.name, e.unique_name, e.gids) == ("Alice", "alice", tuple(gids))
            # The client looks up by raw name only.
            assert r.initgroups("alice") is None
            d = r.get_record(e.slot).data
            n = len(gids)
            uniq = 24 + 4 * n
            assert struct.unpack_from("=6I", d) == (
                uniq, uniq + 6, uniq, 6 + 6, 4 * n + 12, n,
            )  # fmt: skip
            assert d[24 : 24 + 4 * n] == struct.pack(f"={n}I", *gids)
            assert d[uniq:] == b"alice\0Alice\0"
            rec = r.get_record(e.slot)
            seed, ht = r.header.seed, r.header.ht_elems
            assert rec.hash1 == murmurhash3(b"Alice\0", seed) % ht
            assert rec.hash2 == murmurhash3(b"alice\0", seed) % ht
            assert r.verify() == []


def test_initgroups_store_supersedes_other_spellings(tmp_path: Path) -> None:
    with InitgroupsWriter(tmp_path / "initgroups", slots=64) as w:
        w.store("alice", "alice", [1, 2])
        w.store("ALICE", "alice", (1, 2, 3))
        w.store("bob", "bob", [])
        with McReader(w.path) as r:
            assert r.initgroups("alice") is None
            e = r.initgroups("ALICE")
            assert e is not None and e.gids == (1, 2, 3)
            b = r.initgroups("bob")
            assert b is not None and b.gids == ()
        assert w.invalidate_user("alice") and not w.invalidate_name("ALICE")
        assert w.invalidate_name("bob")
        assert w.records == 0
        assert_clean(w.path)


def test_bad_values_are_refused(tmp_path: Path) -> None:
    with pw(tmp_path, slots=8) as w:
        with pytest.raises(ValueError, match="NUL"):
            w.store("a\0b", 1, 1)
        with pytest.raises(ValueError, match="outside"):
            w.store("a", 1 << 32, 1)
        with pytest.raises(ValueError, match="outside"):
            w.store("a", -1, 1)
    with (
        InitgroupsWriter(tmp_path / "initgroups", slots=8) as iw,
        pytest.raises(ValueError, match="gid -3"),
    ):
        iw.store("a", "a", [1, -3])
    assert w.records == 0


# --- chains -----------------------------------------------------------------------------------


def chain(r: McReader, bucket: int) -> list[int]:
    out, slot = [], r._ht(bucket)
    while slot != 0xFFFFFFFF:
        out.append(slot)
        slot = r.get_record(slot).next_with_hash(bucket)
    return out


def test_single_bucket_chain_keeps_insertion_order(tmp_path: Path) -> None:
    # One bucket: every key collides, and hash1 == hash2 for every record.
    with pw(tmp_path, slots=256, hash_elems=1) as w:
        slots = [w.store(f"user{i}", 1000 + i, 1, "x" * (i * 7)).slot for i in range(40)]
        with McReader(w.path) as r:
            assert chain(r, 0) == slots
            for i in range(40):
                e = r.passwd(f"user{i}")
                assert e is not None and e.uid == 1000 + i and r.passwd(1000 + i) == e
            # A record linked once, through next1, although both its hashes are bucket 0.
            rec = r.get_record(slots[0])
            assert rec.next1 == slots[1] and rec.next2 == 0xFFFFFFFF
        assert w.invalidate_name("user20") and w.invalidate_uid(1000)
        assert w.invalidate_name("user39")
        with McReader(w.path) as r:
            assert chain(r, 0) == slots[1:20] + slots[21:39]
            assert r.passwd("user20") is None and r.passwd(1000) is None
            assert r.passwd("user21") is not None
            assert r.verify() == []


def test_small_hash_table_two_chains_per_record(tmp_path: Path) -> None:
    with GroupWriter(tmp_path / "group", slots=512, hash_elems=7) as w:
        for i in range(200):
            w.store(f"g{i}", 5000 + i, [f"m{j}" for j in range(i % 9)])
        for i in range(0, 200, 3):
            w.invalidate_gid(5000 + i)
        for i in range(0, 200, 5):
            w.store(f"g{i}", 5000 + i, ["new"])
        with McReader(w.path) as r:
            assert r.verify() == []
            for i in range(200):
                e = r.group(f"g{i}")
                if i % 5 == 0:
                    assert e is not None and e.members == ("new",)
                elif i % 3 == 0:
                    assert e is None
                else:
                    assert e is not None and len(e.members) == i % 9
                assert r.group(5000 + i) == e
            assert sum(1 for _ in r.records()) == w.records


# --- replace, invalidate ------------------------------------------------------------------------


def test_replace_same_key_and_refresh(tmp_path: Path) -> None:
    t = [NOW]
    with PasswdWriter(tmp_path / "passwd", slots=64, clock=lambda: t[0]) as w:
        first = w.store("alice", 10001, 1, "short")
        longer = w.store("alice", 10001, 1, "a much longer gecos field " * 4)
        assert longer.slot != first.slot and w.records == 1
        with McReader(w.path) as r:
            e = r.passwd("alice")
            assert e is not None and e.gecos.startswith("a much") and r.passwd(10001) == e
            assert r.verify() == []  # the old slots are free and 0xFF again
        t[0] = NOW + 100
        again = w.store("alice", 10001, 1, "a much longer gecos field " * 4)
        assert again.refreshed and again.slot == longer.slot
        with McReader(w.path) as r:
            assert r.get_record(again.slot).expire == NOW + 400
            assert r.verify() == []
        (b1,) = struct.unpack_from("=I", w.path.read_bytes(), 56 + 40 * again.slot)
        assert b1 == 0xF0000002  # one more barrier generation (the file's third raise)


def test_reused_slot_never_shows_a_barrier_it_showed_before(tmp_path: Path) -> None:
    """The ABA window of the client's copy check (b1 before == b2 after the memcpy): a
    record freed and another written at the same slot while a reader copies must not
    carry the same barrier, or the reader accepts a mix of both (the soak's torn
    ('soakg9', '**', ...)). Before the fix every record in a free slot got 0xF0000000."""
    with GroupWriter(tmp_path / "group", slots=56, hash_elems=5, clock=clock) as w:
        seen: set[int] = set()

        def barriers() -> tuple[int, int]:
            raw = w.path.read_bytes()
            return struct.unpack_from("=I", raw, 56)[0], struct.unpack_from("=I", raw, 56 + 36)[0]

        for i in range(50):
            name, gid = ("ga", "gb")[i % 2], 1000 + i % 2
            members = [f"m{j:04d}" for j in range(250)]
            res = w.store(name, gid, members)
            assert res.stored and res.slot == 0 and res.evicted == (i > 0)
            b1, b2 = barriers()
            assert valid_barrier(b1) and b1 == b2 and b1 not in seen
            seen.add(b1)
            if i == 10:
                assert w.store(name, gid, members).refreshed
                b1, b2 = barriers()
                assert b1 == b2 and b1 not in seen
                seen.add(b1)


GRIN = "\U0001f600"  # F0 9F 98 80 in UTF-8: a 0xF0 byte a gecos may hold


def forgeable_gecos(name: str, uid: int) -> str:
    """A gecos that puts GRIN's 0xF0 at offset 3 of a slot of ``name``'s record."""
    for pad in range(SLOT_SIZE):
        gecos = "x" * pad + GRIN
        if 0xF0 in encode_passwd(name, "*", uid, uid, gecos, "/home/x", "/bin/sh")[3::SLOT_SIZE]:
            return gecos
    raise AssertionError("no padding puts 0xF0 at a slot's offset 3")


def test_a_record_whose_bytes_read_as_a_barrier_is_left_to_the_socket(tmp_path: Path) -> None:
    """A client following a stale next into a longer record takes any slot whose b1
    is valid for a record: a directory value must not put one there (SSSD's writer
    does store it). The record is left out (the socket answers) and the others stay."""
    with pw(tmp_path) as w:
        assert w.store("alice", 1000, 1000, "Alice " + GRIN, "/home/x", "/bin/sh").stored
        forged = forgeable_gecos("mallory", 1001)
        res = w.store("mallory", 1001, 1001, forged, "/home/x", "/bin/sh")
        assert not res.stored
        assert "would read as the start of another record" in res.reason
        assert w.store("mallory", 1001, 1001, forged + "!", "/home/x", "/bin/sh").stored is (
            0xF0 not in encode_passwd("mallory", "*", 1001, 1001, forged + "!", "/home/x",
                                      "/bin/sh")[3::SLOT_SIZE]
        )  # fmt: skip
        with McReader(w.path) as r:
            assert r.verify() == []
            alice = r.by_name("alice", now=NOW)
            assert isinstance(alice, McPasswdEntry) and alice.gecos == "Alice " + GRIN


def test_a_batch_with_a_forgeable_group_stores_the_others(tmp_path: Path) -> None:
    """The prefill's run (store_blobs) is checked whole: with one such group in it,
    each is stored on its own and that one left out, and reported with why."""
    members = [f"member{i:03d}" for i in range(40)]
    names = None
    for pad in range(SLOT_SIZE):
        candidate = [*members[:5], "y" * pad + GRIN, *members[5:]]
        blob = PackedMembers.from_names(candidate).blob
        with GroupWriter(tmp_path / f"probe{pad}", clock=clock) as w:
            if not w.store_blob("g2", 2002, len(candidate), blob).stored:
                names = candidate
                break
    assert names is not None, "no padding puts 0xF0 at a slot's offset 3"
    plain = PackedMembers.from_names(members)
    forged = PackedMembers.from_names(names)
    with GroupWriter(tmp_path / "group", clock=clock) as w:
        stored, bad = w.store_blobs([
            ("g1", 2001, plain.count, plain.blob),
            ("g2", 2002, forged.count, forged.blob),
            ("g3", 2003, plain.count, plain.blob),
        ])  # fmt: skip
        assert stored == 2 and [name for name, _ in bad] == ["g2"]
        assert "would read as the start of another record" in bad[0][1]
        with McReader(w.path) as r:
            assert r.verify() == []
            assert r.by_name("g1", now=NOW) is not None and r.by_name("g3", now=NOW) is not None
            assert r.by_name("g2", now=NOW) is None


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(alphabet=st.sampled_from("ab" + GRIN + "\u00e9"), max_size=120),
                min_size=1, max_size=12))  # fmt: skip
def test_no_slot_inside_a_record_reads_as_a_record_start(
    tmp_path: Path, gecoses: list[str]
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as d, pw(Path(d), slots=512, hash_elems=7) as w:
        for i, gecos in enumerate(gecoses):
            w.store(f"u{i}", 1000 + i, 1000, gecos, "/home/x", "/bin/sh")
        with McReader(w.path) as r:
            assert r.verify() == []


def test_store_supersedes_same_id_under_another_name(tmp_path: Path) -> None:
    with pw(tmp_path, slots=64) as w:
        w.store("alice", 10001, 1)
        w.store("bob", 10002, 1)
        w.store("alice2", 10001, 1)  # renamed: same uid, new name
        with McReader(w.path) as r:
            assert r.passwd("alice") is None
            e = r.passwd(10001)
            assert e is not None and e.name == "alice2"
            assert r.passwd("bob") is not None
            assert r.verify() == []
        assert w.records == 2


def test_invalidate_one_and_all(tmp_path: Path) -> None:
    with pw(tmp_path, slots=128) as w:
        for i in range(20):
            w.store(f"u{i}", i, i, "g" * i)
        assert w.invalidate_name("u3") and not w.invalidate_name("u3")
        assert w.invalidate_uid(4) and not w.invalidate_uid(4)
        assert not w.invalidate_name("nobody")
        with McReader(w.path) as r:
            assert r.passwd("u3") is None and r.passwd(4) is None and r.passwd("u5") is not None
            assert r.verify() == []
        seed = w.seed
        assert w.invalidate_all() == 18
        assert w.records == 0 and w.used_slots == 0 and w.seed == seed
        raw = w.path.read_bytes()
        g = w.geometry
        assert raw[56 : 56 + g.dt_size] == b"\xff" * g.dt_size
        assert raw[g.hash_table : g.hash_table + g.ht_size] == b"\xff" * g.ht_size
        assert raw[g.free_table : g.free_table + g.ft_size] == bytes(g.ft_size)
        w.store("again", 1, 1)
        assert_clean(w.path)


# --- eviction and sizes -----------------------------------------------------------------------


def test_fifo_eviction_when_full(tmp_path: Path) -> None:
    with pw(tmp_path, slots=16) as w:  # 16 slots; each record below takes 2
        for i in range(8):
            assert w.store(f"user{i}", i, 0, "x" * 10).evicted == 0
        assert w.used_slots == 16
        res = w.store("user8", 8, 0, "x" * 10)
        assert res.stored and res.evicted == 1 and res.slot == 0  # the oldest went
        res = w.store("big", 9, 0, "x" * 90)  # 4 slots: evicts user1 and user2 (FIFO)
        assert res.evicted == 2 and res.slot == 2
        with McReader(w.path) as r:
            present = {i for i in range(8) if r.passwd(f"user{i}") is not None}
            assert present == {3, 4, 5, 6, 7}
            assert r.passwd("user8") is not None and r.passwd("big") is not None
            assert r.verify() == []
        # holes are reused before anything else is evicted
        assert w.invalidate_name("user5")
        assert w.store("user10", 10, 0, "x" * 10).evicted == 0
        assert_clean(w.path)


def test_record_that_cannot_fit_is_skipped(tmp_path: Path) -> None:
    with GroupWriter(tmp_path / "group", slots=8) as w:
        w.store("small", 1, ["a"])
        res = w.store("huge", 2, [f"member{i}" for i in range(100)])
        assert not res.stored
        assert "'huge'" in res.reason and "8 slots" in res.reason
        assert "memcache_size_group" in res.reason
        assert w.records == 1
        assert_clean(w.path)


def test_full_table_of_many_records_stays_consistent(tmp_path: Path) -> None:
    with GroupWriter(tmp_path / "group", slots=256, hash_elems=31) as w:
        evicted = 0
        for i in range(1000):
            res = w.store(f"g{i}", i, [f"m{j}" for j in range(i % 23)])
            evicted += res.evicted
        assert evicted > 0
        assert w.records == 1000 - evicted
        with McReader(w.path) as r:
            assert r.verify() == []
            found = sum(r.group(f"g{i}") is not None for i in range(1000))
            assert found == w.records
            assert r.stats().records == w.records and r.stats().used_slots == w.used_slots


# --- many groups at once (the responder's prefill) ------------------------------------------


def _group_items(n: int, start: int = 0) -> list[tuple[str, int, int, bytes]]:
    out = []
    for i in range(start, start + n):
        names = [f"m{(i * 7 + j) % 40:02d}" for j in range(i % 9)]
        blob = b"".join(sorted({m.encode() + b"\0" for m in names}))
        out.append((f"g{i}", 1000 + i, blob.count(b"\0"), blob))
    return out


def _sequential(w: GroupWriter, items: list[tuple[str, int, int, bytes]]) -> None:
    for name, gid, count, blob in items:
        w.store_blob(name, gid, count, blob)


@pytest.mark.parametrize(
    ("name", "gid", "count", "blob"),
    [("staff", 50, 2, b"alice\0bob\0"), ("empty", 0, 0, b""), ("Ünï", 0xFFFFFFFF, 1, b"\xc3\x9c\0"),
     ("n\0ul", 1, 0, b""), ("big", 1 << 32, 0, b""), ("neg", -1, 0, b""), ("short", 1, 2, b"a\0"),
     ("unterminated", 1, 1, b"a\0b"), ("surrogate\udc80", 1, 0, b"")],
)  # fmt: skip
def test_group_item_is_the_keys_and_payload_of_the_helpers(
    name: str, gid: int, count: int, blob: bytes
) -> None:
    from cached.memcache.layout import (
        check_members,
        encode_group_item,
        encode_group_keyed,
        id_key,
        name_key,
    )

    def helpers() -> tuple[bytes, bytes, bytes]:
        check_members(blob, count)
        key1 = name_key(name)
        return key1, id_key(gid), encode_group_keyed(key1, b"*\0", gid, count, blob)

    try:
        want: object = helpers()
    except ValueError as e:
        want = (type(e), str(e))
    try:
        got: object = encode_group_item(name, gid, count, blob, b"*\0")
    except ValueError as e:
        got = (type(e), str(e))
    assert got == want


def test_store_blobs_in_a_new_file_writes_what_one_store_each_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written together (one copy, then the barriers and links), the records make the
    very same file as one store_blob each: same slots, same chains, same bytes."""
    monkeypatch.setattr("cached.memcache.mcfile.secrets.randbits", lambda _bits: 0x5EED)
    items = _group_items(300)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for hash_elems in (None, 7):  # SSSD's table, and chains of ~43 records
        with (
            GroupWriter(tmp_path / "a" / "group", slots=4096, hash_elems=hash_elems,
                        clock=clock) as a,
            GroupWriter(tmp_path / "b" / "group", slots=4096, hash_elems=hash_elems,
                        clock=clock) as b,
        ):  # fmt: skip
            stored, bad = a.store_blobs(items)
            assert (stored, bad) == (300, [])
            _sequential(b, items)
            assert a.path.read_bytes() == b.path.read_bytes()
            assert (a.records, a.used_slots) == (b.records, b.used_slots)
            with McReader(a.path) as r:
                assert r.verify() == []
                e = r.group("g17")
                assert e is not None and e.gid == 1017 and len(e.members) == 17 % 9
            # The writer's own index knows them: the next store supersedes.
            assert a.store("g17", 1017, ["x"]).stored and a.records == 300
            assert a.invalidate_gid(1018) and a.records == 299


def _varied_groups() -> list[tuple[str, int, int, bytes]]:
    """Groups of every shape the prefill meets: no members, one, a huge one spanning
    many slots, non-ASCII names (multi-byte keys and members), payloads ending on a
    slot boundary and one byte past it (no pad, 39 bytes of pad), gids at both ends."""
    out: list[tuple[str, int, int, bytes]] = [
        ("empty", 0, 0, b""),
        ("ünïcödé-grüppe", 0xFFFFFFFF, 2, "jürgen\0مريم\0".encode()),
        ("huge", 7, 3000, b"".join(b"user%05d\0" % i for i in range(3000))),
        ("一", 8, 1, "名前\0".encode()),
    ]
    for n in range(40):  # every payload length modulo the slot size
        blob = b"m" * n + b"\0"
        out.append((f"pad{n:02d}", 100 + n, 1, blob))
    return out


@pytest.mark.parametrize("hash_elems", [None, 1, 5])  # SSSD's table; one chain; collisions
def test_store_blobs_of_varied_groups_writes_what_one_store_each_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hash_elems: int | None
) -> None:
    """The batch's own record layout (header, prefix and strings packed at once, pads)
    gives the very bytes of one store_blob each, whatever the group looks like and
    however the chains collide; in a file too small for the batch, the records go one
    at a time and evict the same records."""
    monkeypatch.setattr("cached.memcache.mcfile.secrets.randbits", lambda _bits: 0x5EED)
    items = _varied_groups()
    for slots, before in ((4096, []), (4096, _group_items(5)), (512, _group_items(30))):
        a_dir, b_dir = tmp_path / f"a{slots}-{len(before)}", tmp_path / f"b{slots}-{len(before)}"
        a_dir.mkdir()
        b_dir.mkdir()
        with (
            GroupWriter(a_dir / "group", slots=slots, hash_elems=hash_elems, clock=clock) as a,
            GroupWriter(b_dir / "group", slots=slots, hash_elems=hash_elems, clock=clock) as b,
        ):
            _sequential(a, before)
            _sequential(b, before)
            stored, bad = a.store_blobs(items)
            want = sum(b.store_blob(*item).stored for item in items)
            refused = ["huge"] if slots < 1000 else []  # 3,000 members: 752 slots
            assert [name for name, _ in bad] == refused
            assert stored == want == len(items) - len(refused)
            assert a.path.read_bytes() == b.path.read_bytes()
            assert (a.records, a.used_slots) == (b.records, b.used_slots)
            with McReader(a.path) as r:
                assert r.verify() == []
                huge = r.group("huge")
                if slots > 512:  # 3,000 members, 30 KB: more slots than 512
                    assert huge is not None and len(huge.members) == 3000
                e = r.group(0xFFFFFFFF)
                assert e is not None and e.members == ("jürgen", "مريم")
            # The writer's index knows every record it wrote: each is superseded.
            for name, gid, _count, _blob in items:
                if a.holds_gid(gid):
                    assert a.store(name, gid, ["x"]).stored
                    b.store(name, gid, ["x"])
            assert a.path.read_bytes() == b.path.read_bytes()


batch_items = st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(0, 12)), max_size=40
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_items, batch_items, st.sampled_from([None, 3]))
def test_store_blobs_answers_as_one_store_each(
    before: list[tuple[int, int, int]], batch: list[tuple[int, int, int]], hash_elems: int | None
) -> None:
    """Whatever the batch holds (names or gids twice, records it supersedes, the same
    content again), a reader finds by every name and gid what one store each gives."""

    def item(n: int, gid: int, size: int) -> tuple[str, int, int, bytes]:
        blob = b"".join(b"u%02d\0" % j for j in range(size))
        return f"g{n}", 100 + gid, size, blob

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "a").mkdir()
        (Path(d) / "b").mkdir()
        a = GroupWriter(Path(d) / "a" / "group", slots=2048, hash_elems=hash_elems, clock=clock)
        b = GroupWriter(Path(d) / "b" / "group", slots=2048, hash_elems=hash_elems, clock=clock)
        for w in (a, b):
            _sequential(w, [item(*x) for x in before])
        a.store_blobs([item(*x) for x in batch])
        _sequential(b, [item(*x) for x in batch])
        assert a.records == b.records
        with McReader(a.path) as ra, McReader(b.path) as rb:
            assert ra.verify() == [] and rb.verify() == []
            keys: list[str | int] = [f"g{n}" for n in range(16)]
            for key in keys + [100 + g for g in range(16)]:
                ga, gb = ra.group(key), rb.group(key)
                assert (ga and (ga.name, ga.gid, ga.members)) == (
                    gb and (gb.name, gb.gid, gb.members)
                ), key
        a.close()
        b.close()


def test_store_blobs_in_a_full_file_evicts_as_one_store_each(tmp_path: Path) -> None:
    """No free run holds the batch: the records go one at a time, evicting the oldest."""
    with GroupWriter(tmp_path / "group", slots=256, hash_elems=31, clock=clock) as w:
        _sequential(w, _group_items(60))
        stored, bad = w.store_blobs(_group_items(60, start=60))
        assert (stored, bad) == (60, [])
        with McReader(w.path) as r:
            assert r.verify() == []
            assert r.group("g119") is not None and r.group("g0") is None
            assert sum(r.group(f"g{i}") is not None for i in range(120)) == w.records


def test_store_blobs_refuses_bad_groups_and_stores_the_others(tmp_path: Path) -> None:
    with GroupWriter(tmp_path / "group", slots=512, clock=clock) as w:
        items = [
            ("ok1", 1, 1, b"a\0"),
            ("n\0ul", 2, 0, b""),
            ("short", 3, 2, b"a\0"),
            ("ok2", 4, 0, b""),
            ("big-gid", 1 << 32, 0, b""),
        ]
        stored, bad = w.store_blobs(items)
        assert stored == 2 and [name for name, _ in bad] == ["n\0ul", "short", "big-gid"]
        assert all(isinstance(why, str) and why for _, why in bad)
        with McReader(w.path) as r:
            assert r.verify() == []
            assert r.group("ok1") is not None and r.group(4) is not None
            assert r.group(3) is None


# --- lifecycle ------------------------------------------------------------------------------


def test_reset_recycles_and_publishes_a_fresh_file(tmp_path: Path) -> None:
    with pw(tmp_path, slots=64) as w:
        w.store("alice", 1, 1)
        old_ino = os.stat(w.path).st_ino
        with McReader(w.path) as old:  # a client that mapped the old file
            assert old.usable()
            seeds = {w.seed}
            w.reset()
            h = old.read_header()
            assert h.status == Status.RECYCLED and not old.usable()
            assert old.passwd("alice") is None
        assert os.stat(w.path).st_ino != old_ino
        with McReader(w.path) as new:
            assert new.usable() and new.read_header().seed == w.seed
            assert new.passwd("alice") is None
        assert w.records == 0
        for _ in range(3):  # 32-bit random seeds: four equal in a row would be a bug
            w.reset()
            seeds.add(w.seed)
        assert len(seeds) > 1
        w.store("bob", 2, 2)
        assert_clean(w.path)


def test_stale_file_is_recycled_on_create(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    w = pw(tmp_path, slots=8)
    w.store("alice", 1, 1)
    w.close()
    w.close()  # idempotent
    with pytest.raises(McError, match="closed"):
        w.store("bob", 2, 2)
    with McReader(path) as old:
        assert old.usable()
        with pw(tmp_path, slots=16) as w2:
            assert old.read_header().status == Status.RECYCLED
            with McReader(path) as new:
                assert new.header.dt_size == 16 * 40 and new.passwd("alice") is None
            assert w2.records == 0


def test_garbage_and_symlink_at_path_are_replaced(tmp_path: Path) -> None:
    path = tmp_path / "group"
    path.write_bytes(b"junk")
    GroupWriter(path, slots=8).close()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep me")
    path.unlink()
    path.symlink_to(target)
    with GroupWriter(path, slots=8):
        assert not path.is_symlink()
    assert target.read_bytes() == b"keep me"


LOCK_PROBE = """
import fcntl, sys
with open(sys.argv[1], "r+b") as f:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # F_SETLK, as sss_cache does
    except OSError as e:
        print("busy", e.errno)
    else:
        print("free")
"""


def lock_state(path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", LOCK_PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[0]


def test_lock_on_byte0_is_held_for_the_file_life(tmp_path: Path) -> None:
    w = pw(tmp_path, slots=8)
    assert lock_state(w.path) == "busy"
    # Opening and closing the file in this process must not drop the lock (OFD lock).
    with McReader(w.path):
        pass
    assert lock_state(w.path) == "busy"
    w.reset()
    assert lock_state(w.path) == "busy"
    with pytest.raises(McBusyError, match="another running responder"):
        pw(tmp_path, slots=8)
    assert w.records == 0 and not w.closed  # the refused second writer changed nothing
    w.close()
    assert lock_state(w.path) == "free"


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(McError, match=r"missing/passwd: No such file.*mc_dir"):
        PasswdWriter(tmp_path / "missing" / "passwd", slots=8)
    (tmp_path / "other").write_bytes(b"x" * 100)
    with pytest.raises(ValueError, match=r"other.*kind="):
        McReader(tmp_path / "other")
    with pytest.raises(ValueError, match="multiple of 8"):
        PasswdWriter(tmp_path / "passwd", slots=12)
    with pytest.raises(ValueError, match="timeout"):
        PasswdWriter(tmp_path / "passwd", slots=8, timeout=0)
    assert not (tmp_path / "passwd").exists()


def test_mode_is_set_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        with pw(tmp_path, slots=8, mode=0o664) as w:
            assert stat.S_IMODE(os.stat(w.path).st_mode) == 0o664
    finally:
        os.umask(old)


def test_file_size_never_changes(tmp_path: Path) -> None:
    with GroupWriter(tmp_path / "group", slots=64) as w:
        size = os.stat(w.path).st_size
        for i in range(200):
            w.store(f"g{i}", i, ["m"] * (i % 30))
        w.invalidate_all()
        assert os.stat(w.path).st_size == size == w.geometry.file_size


def test_barriers_of_every_record_after_writes(tmp_path: Path) -> None:
    with InitgroupsWriter(tmp_path / "initgroups", slots=512, hash_elems=13) as w:
        for i in range(300):
            w.store(f"u{i % 70}", f"u{i % 50}", list(range(i % 40)))
            if i % 7 == 0:
                w.invalidate_name(f"u{(i * 3) % 70}")
        raw = w.path.read_bytes()
        with McReader(w.path) as r:
            live = [rec.slot for rec in r.records()]
            assert len(live) == w.records
            assert r.verify() == []  # includes: every free slot is all 0xFF
        for s in live:
            b1, _, _, _, _, _, _, _, b2 = REC_HEADER.unpack_from(raw, 56 + 40 * s)
            assert valid_barrier(b1) and b1 == b2


def test_mmap_of_live_file_is_readable_by_another_mapping(tmp_path: Path) -> None:
    with pw(tmp_path, slots=8) as w, open(w.path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        w.store("alice", 1, 1)
        assert b"alice\0" in m[:]  # MAP_SHARED: visible without any sync
        m.close()


# --- property: random operations against a dict model ----------------------------------------

names = st.sampled_from([f"n{i}" for i in range(12)])
uids = st.integers(0, 11)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("store"), names, uids, st.integers(0, 200)),
        st.tuples(st.just("drop_name"), names),
        st.tuples(st.just("drop_uid"), uids),
        st.tuples(st.just("drop_all")),
        st.tuples(st.just("reset")),
    ),
    max_size=60,
)


def run_model(ops_: list[tuple[object, ...]], slots: int, hash_elems: int) -> None:
    model: dict[str, tuple[int, str]] = {}  # name -> (uid, gecos)
    with tempfile.TemporaryDirectory() as d:
        w = PasswdWriter(Path(d) / "passwd", slots=slots, hash_elems=hash_elems, clock=clock)
        evictions = 0
        for op in ops_:
            match op:
                case ("store", str(name), int(uid), int(n)):
                    res = w.store(name, uid, uid, "g" * n)
                    assert res.stored
                    evictions += res.evicted
                    model = {k: v for k, v in model.items() if k != name and v[0] != uid}
                    model[name] = (uid, "g" * n)
                case ("drop_name", str(name)):
                    dropped = w.invalidate_name(name)
                    assert dropped == (name in model) or (evictions and not dropped)
                    model.pop(name, None)
                case ("drop_uid", int(uid)):
                    w.invalidate_uid(uid)
                    model = {k: v for k, v in model.items() if v[0] != uid}
                case ("drop_all",):
                    w.invalidate_all()
                    model.clear()
                case ("reset",):
                    w.reset()
                    model.clear()
        with McReader(w.path) as r:
            assert r.verify() == []
            found = {}
            for i in range(12):
                e = r.passwd(f"n{i}")
                if e is not None:
                    found[e.name] = (e.uid, e.gecos)
                    assert r.passwd(e.uid) == e
            if evictions == 0:
                assert found == model
            else:  # what is there is current; what is missing was evicted
                assert all(model[k] == v for k, v in found.items())
            assert len(found) == w.records
            for uid in range(12):
                e = r.passwd(uid)
                owners = [k for k, v in model.items() if v[0] == uid]
                assert (e is None and (not owners or evictions)) or (
                    e is not None and [e.name] == owners
                )
        w.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_random_operations_match_model_without_eviction(ops_: list[tuple[object, ...]]) -> None:
    run_model(ops_, slots=512, hash_elems=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.sampled_from([8, 16, 24]), st.integers(1, 9))
def test_random_operations_with_eviction(
    ops_: list[tuple[object, ...]], slots: int, hash_elems: int
) -> None:
    run_model(ops_, slots=slots, hash_elems=hash_elems)


def test_kind_names() -> None:
    assert [k.value for k in MEMCACHE_KINDS] == ["passwd", "group", "initgroups"]
    assert [default_mb(k) for k in MEMCACHE_KINDS] == [8, 6, 10]


def test_initgroups_payload_from_packed_gids_is_the_payload_from_ints():
    """The responder hands the memory cache the INITGR reply's packed gids as they are."""
    from array import array

    from cached.memcache.layout import encode_initgroups

    gids = [10000, 20001, 4294967294]
    packed = array("I", gids).tobytes()
    assert encode_initgroups("Bob", "bob", packed) == encode_initgroups("Bob", "bob", gids)
    assert encode_initgroups("bob", "bob", b"") == encode_initgroups("bob", "bob", [])
    with pytest.raises(ValueError, match="multiple of 4"):
        encode_initgroups("bob", "bob", packed[:-1])
