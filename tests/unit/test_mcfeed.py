"""The responder's memory-cache feed: a group record stored moments ago with the same
content is not stored again, unless it has left the file meanwhile."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from cached.cache.records import join_members
from cached.config import parse_config
from cached.memcache import McReader
from cached.nss.mcfeed import MemcacheFeed

CONF = """[cached]
domains = D
[domain/D]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:1
ldap_search_base = dc=example,dc=com
"""


@pytest.fixture
def feed(tmp_path: Path) -> Any:
    f = MemcacheFeed(str(tmp_path), parse_config(CONF).nss)
    assert f.mc is not None and f.mc.group is not None
    yield f
    f.close()


def stores(feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    assert feed.mc is not None and feed.mc.group is not None
    real = feed.mc.group.store_blob

    def counting(name: str, *args: Any, **kw: Any) -> Any:
        calls.append(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(feed.mc.group, "store_blob", counting)
    return calls


def test_same_group_again_is_not_stored_again(
    feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = stores(feed, monkeypatch)
    blob = join_members(["alice", "bob"])
    feed.group("staff", 50, 2, blob, "*")
    feed.group("staff", 50, 2, blob, "*")
    assert calls == ["staff"]
    # Changed content is stored at once.
    feed.group("staff", 50, 1, join_members(["alice"]), "*")
    assert calls == ["staff", "staff"]
    with McReader(tmp_path / "group") as r:
        g = r.group(50)
        assert g is not None and g.members == ("alice",)


def test_a_record_gone_from_the_file_is_stored_again(
    feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = stores(feed, monkeypatch)
    blob = join_members(["alice"])
    feed.group("staff", 50, 1, blob, "*")
    assert feed.mc is not None and feed.mc.group is not None
    feed.mc.group.invalidate_gid(50)  # as an eviction for another record would
    feed.group("staff", 50, 1, blob, "*")
    assert calls == ["staff", "staff"]
    feed.forget_gid(50)
    feed.group("staff", 50, 1, blob, "*")
    assert calls == ["staff", "staff", "staff"]
    with McReader(tmp_path / "group") as r:
        assert r.group("staff") is not None


def batches_stored(feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The names of each batch the feed hands to the group file's store_blobs."""
    assert feed.mc is not None and feed.mc.group is not None
    calls: list[list[str]] = []
    real = feed.mc.group.store_blobs

    def counting(groups: Any, **kw: Any) -> Any:
        groups = list(groups)
        calls.append([g[0] for g in groups])
        return real(groups, **kw)

    monkeypatch.setattr(feed.mc.group, "store_blobs", counting)
    return calls


def test_many_groups_at_once_skip_what_was_stored_moments_ago(
    feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: Any
) -> None:
    """The prefill's batch follows the same rule as one group at a time: a record stored
    moments ago with the same content is left alone, a changed one is stored, and what
    the batch stored is not stored again by the next single group."""
    caplog.set_level(logging.INFO, logger="cached.nss.mcfeed")
    calls = batches_stored(feed, monkeypatch)
    single = stores(feed, monkeypatch)
    ab, a = join_members(["alice", "bob"]), join_members(["alice"])
    feed.group("staff", 50, 2, ab, "*")
    feed.groups([("staff", 50, 2, ab), ("wheel", 51, 1, a), ("bad\0name", 52, 1, a)], "*")
    assert calls == [["wheel", "bad\0name"]]
    assert "group 'bad\\x00name' not stored" in caplog.text
    feed.groups([("staff", 50, 1, a), ("wheel", 51, 1, a)], "*")
    assert calls[-1] == ["staff"]
    feed.group("wheel", 51, 1, a, "*")
    assert single == ["staff"]  # only the first single store
    with McReader(tmp_path / "group") as r:
        staff, wheel = r.group(50), r.group("wheel")
        assert staff is not None and staff.members == ("alice",)
        assert wheel is not None and wheel.gid == 51
        assert r.group(52) is None


def test_a_new_feed_stores_the_whole_batch_then_skips_it(
    feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A feed that has stored nothing yet (a new responder's, or after a reset) takes
    the batch as it is, without the per-group test; what it stored counts as fed."""
    calls = batches_stored(feed, monkeypatch)
    batch = [(f"g{i}", 100 + i, 1, join_members([f"u{i}"])) for i in range(50)]
    feed.groups(iter(batch), "*")  # any iterable, read once
    assert calls == [[g[0] for g in batch]]
    feed.groups(batch, "*")
    assert calls[-1] == []
    with McReader(tmp_path / "group") as r:
        assert r.stats().records == 50
        g = r.group("g7")
        assert g is not None and (g.gid, g.members) == (107, ("u7",))


@pytest.fixture
def small_feed(tmp_path: Path) -> Any:
    """A feed whose group file is 1 MiB (memcache_size_group = 1)."""
    conf = CONF.replace("[domain/D]", "[nss]\nmemcache_size_group = 1\n[domain/D]")
    f = MemcacheFeed(str(tmp_path), parse_config(conf).nss)
    yield f
    f.close()


def test_a_refused_record_is_offered_once_per_content_and_file(
    small_feed: MemcacheFeed, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A record the file refuses (here a group bigger than the whole 1 MiB file) is
    answered through the socket at every lookup: it is offered to the file and logged
    once, not at each of them; new content, or a new file, is offered again."""
    caplog.set_level(logging.INFO, logger="cached.nss.mcfeed")
    calls = stores(small_feed, monkeypatch)
    names = [f"member{i:07d}" for i in range(120_000)]  # 1.8 MB of names
    huge = join_members(names)
    for _ in range(3):
        small_feed.group("huge", 60, len(names), huge, "*")
    assert calls == ["huge"]
    assert caplog.text.count("not stored") == 1
    assert "raise memcache_size_group" in caplog.text
    small_feed.groups([("huge", 60, len(names), huge)], "*")  # the prefill skips it too
    assert small_feed.mc is not None and small_feed.mc.group is not None
    assert not small_feed.mc.group.holds_gid(60)
    fewer = join_members(names[:-1])
    small_feed.group("huge", 60, len(names) - 1, fewer, "*")  # new content: offered again
    assert calls == ["huge", "huge"]
    small_feed.retire()
    small_feed.reopen()
    small_feed.group("huge", 60, len(names) - 1, fewer, "*")  # a new file: offered again
    assert calls == ["huge", "huge", "huge"]
    # One line per minute for the lot (RateLimitedLog): the second and third
    # refusals were counted, not written.
    assert caplog.text.count("not stored") == 1
