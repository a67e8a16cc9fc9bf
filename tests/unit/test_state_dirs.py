"""Directories another user could write to are refused before anything is put in them
(found in review): the daemon's db_dir, pipes_dir (and its private/) and mc_dir at
start, and `cached cache`'s memory-cache files, never written through a symlink."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from cached.config import parse_config
from cached.monitor import _check_state_dir, run_monitor
from cached.tools.cache import _recycle_memcache
from testing.daemon import config_text


def test_a_directory_others_may_write_to_is_refused_by_name(tmp_path):
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o755)
    _check_state_dir("pipes_dir", str(ok))
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(RuntimeError, match=r"pipes_dir = .*open: writable by other users"):
        _check_state_dir("pipes_dir", str(open_dir))
    link = tmp_path / "link"
    link.symlink_to(ok)
    with pytest.raises(RuntimeError, match="not a directory"):
        _check_state_dir("mc_dir", str(link))


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
