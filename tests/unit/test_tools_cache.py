"""``cached cache`` with no responder alive: the memory-cache files are marked RECYCLED
and unlinked, as sss_cache does when it can take a file's lock (reference §4)."""

from __future__ import annotations

import os
from pathlib import Path

from cached.memcache import GroupWriter, Kind, McReader, PasswdWriter, Status
from cached.tools.cache import _recycle_memcache


def test_recycle_marks_every_file_and_unlinks_it(tmp_path: Path) -> None:
    with PasswdWriter(tmp_path / "passwd", slots=64) as w:
        w.store("alice", 1000, 1000)
    with GroupWriter(tmp_path / "group", slots=64) as g:
        g.store("staff", 50, [])
    # A client that still maps the files sees them through these links.
    os.link(tmp_path / "passwd", tmp_path / "passwd.client")
    os.link(tmp_path / "group", tmp_path / "group.client")
    assert _recycle_memcache(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["group.client", "passwd.client"]
    for name, kind in (("passwd.client", Kind.USER), ("group.client", Kind.GROUP)):
        with McReader(tmp_path / name, kind) as r:
            assert r.read_header().status == Status.RECYCLED and not r.usable()


def test_recycle_leaves_a_file_a_live_writer_holds(tmp_path: Path) -> None:
    with PasswdWriter(tmp_path / "passwd", slots=64) as w:
        w.store("alice", 1000, 1000)
        assert not _recycle_memcache(str(tmp_path))
        with McReader(tmp_path / "passwd") as r:
            assert r.read_header().status == Status.ALIVE
