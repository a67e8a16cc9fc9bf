"""Directories another user could change are refused before anything is put in them:
every directory from ``/`` down to the daemon's db_dir, pipes_dir (and its private/),
mc_dir and pid-file directory (cached/statedir.py), and `cached cache`'s memory-cache
files, never written through a symlink."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from cached.config import parse_config
from cached.monitor import run_monitor
from cached.statedir import UnsafeDirectory, check_dir
from cached.tools.cache import _recycle_memcache
from testing.daemon import config_text

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown")


def test_a_directory_others_may_write_to_is_refused_by_name(tmp_path):
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o755)
    check_dir("pipes_dir", str(ok))
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match=r"pipes_dir = .*open: writable by other users"):
        check_dir("pipes_dir", str(open_dir))
    link = tmp_path / "link"
    link.symlink_to(ok)
    with pytest.raises(UnsafeDirectory, match=rf"mc_dir = {link}: is a symlink \(to {ok}\)"):
        check_dir("mc_dir", str(link))


def test_every_directory_on_the_way_is_checked_not_only_the_last(tmp_path):
    # Without the whole walk each of these passed: the last directory is root's 0755.
    (tmp_path / "open/db").mkdir(parents=True, mode=0o700)
    (tmp_path / "open").chmod(0o777)
    refused = rf"db_dir = {tmp_path}/open/db: {tmp_path}/open writable by other users"
    with pytest.raises(UnsafeDirectory, match=refused):
        check_dir("db_dir", str(tmp_path / "open/db"))
    # A symlink on the way, even to a good directory: what it leads to can change.
    (tmp_path / "good/db").mkdir(parents=True)
    (tmp_path / "via").symlink_to(tmp_path / "good")
    with pytest.raises(UnsafeDirectory, match=rf"{tmp_path}/via is a symlink"):
        check_dir("db_dir", str(tmp_path / "via/db"))
    # A file on the way.
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafeDirectory, match=rf"{tmp_path}/file not a directory"):
        check_dir("db_dir", str(tmp_path / "file/db"))
    # Missing directories are created, 0755 on the way and the mode asked for at the end.
    umask = os.umask(0)
    try:
        check_dir("db_dir", str(tmp_path / "new/a/db"), create_mode=0o700)
    finally:
        os.umask(umask)
    assert (tmp_path / "new/a").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "new/a/db").stat().st_mode & 0o7777 == 0o700
    with pytest.raises(UnsafeDirectory, match=rf"{tmp_path}/absent does not exist"):
        check_dir("db_dir", str(tmp_path / "absent/db"))


@as_root
def test_sticky_root_directories_group_root_and_other_owners(tmp_path):
    # /tmp-like: root's and sticky, so only root renames the root-owned entry below.
    (tmp_path / "sticky/db").mkdir(parents=True, mode=0o700)
    (tmp_path / "sticky").chmod(0o1777)
    check_dir("db_dir", str(tmp_path / "sticky/db"))
    # ...but not as the state directory itself, nor when the entry below is a user's.
    with pytest.raises(UnsafeDirectory, match="writable by other users"):
        check_dir("db_dir", str(tmp_path / "sticky"))
    os.chown(tmp_path / "sticky/db", 65534, 65534)
    with pytest.raises(UnsafeDirectory, match=rf"db_dir = {tmp_path}/sticky/db: belongs to "
                       "uid 65534, not root"):  # fmt: skip
        check_dir("db_dir", str(tmp_path / "sticky/db"))
    # An ancestor that is a user's, even 0755: the user renames what lies below.
    (tmp_path / "home/db").mkdir(parents=True)
    os.chown(tmp_path / "home", 65534, 65534)
    with pytest.raises(UnsafeDirectory, match=rf"{tmp_path}/home belongs to uid 65534"):
        check_dir("db_dir", str(tmp_path / "home/db"))
    # Group root writing is root writing (Debian's /var/lib/sss/mc is 0775 root:root);
    # another group is other users, on the way or at the end.
    (tmp_path / "grp/mc").mkdir(parents=True)
    for d in ("grp", "grp/mc"):
        (tmp_path / d).chmod(0o775)
        os.chown(tmp_path / d, 0, 0)
    check_dir("mc_dir", str(tmp_path / "grp/mc"))
    for d in ("grp", "grp/mc"):
        os.chown(tmp_path / d, 0, 65534)
        with pytest.raises(UnsafeDirectory, match=rf"{tmp_path}/{d}:? ?writable by other "
                           r"users \(mode 0775, group 65534\)"):  # fmt: skip
            check_dir("mc_dir", str(tmp_path / "grp/mc"))
        os.chown(tmp_path / d, 0, 0)


def test_the_daemon_does_not_start_on_a_world_writable_pipes_dir(tmp_path, caplog):
    cfg = parse_config(config_text(["ldap://127.0.0.1:1"], "dc=example,dc=test", tmp_path))
    os.makedirs(cfg.daemon.pipes_dir)
    os.chmod(cfg.daemon.pipes_dir, 0o777)
    with caplog.at_level(logging.ERROR):
        assert asyncio.run(run_monitor(cfg, str(tmp_path / "cached.conf"), "info")) == 1
    assert f"pipes_dir = {cfg.daemon.pipes_dir}: writable by other users" in caplog.text
    assert not os.path.exists(os.path.join(cfg.daemon.pipes_dir, "nss"))


def test_cached_cache_never_writes_a_memory_cache_file_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"root:x:0:0:root:/root:/bin/sh\n")
    victim.chmod(0o600)
    mc = tmp_path / "mc"
    mc.mkdir()
    (mc / "passwd").symlink_to(victim)
    with pytest.raises(SystemExit, match="passwd: not a memory-cache file"):
        _recycle_memcache(str(mc))
    assert victim.read_bytes() == b"root:x:0:0:root:/root:/bin/sh\n"
    assert Path(mc / "passwd").is_symlink()
