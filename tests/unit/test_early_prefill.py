"""The responder's side of early prefill (nss/server.py ``prefill_stored``): the groups a
backend's note names go in the memory cache at once, from the cache, and the INITGR
answer that follows puts in only the others; every group of the answer ends in the
memory cache either way. A real cache and real memory-cache files; no server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from cached.cache import open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.ipc.ops import BadMessage, GroupsStoredNote
from cached.memcache import McReader
from cached.model import Group, User
from cached.nss import protocol as p
from cached.nss import server as server_mod
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import COMMANDS, NssResponder
from cached.responder.flow import Lookups
from testing.daemon import config_text

BASE = "dc=example,dc=test"
USER = User("alice", 15001, 10000, "", "/home/alice", "/bin/sh", f"uid=alice,ou=people,{BASE}")
GROUPS = [Group(f"g{i:03d}", 20000 + i, f"cn=g{i:03d},ou=groups,{BASE}", ("alice", f"u{i}"))
          for i in range(40)]  # fmt: skip


def _responder(tmp_path: Path, **opts: Any) -> tuple[Config, NssResponder, list[str]]:
    """A responder over a cache holding USER in GROUPS; and the names it feeds the
    memory cache, in order."""
    tmp_path.mkdir(exist_ok=True)
    cfg = parse_config(config_text(["ldap://127.0.0.1:1"], BASE, tmp_path, **opts))
    (tmp_path / "db").mkdir(mode=0o700)
    (tmp_path / "mc").mkdir()
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    with writer.write() as b:
        writer.put_user(b, USER)
        for g in GROUPS:
            writer.put_group(b, g)
        writer.put_initgroups(b, USER.name, [g.gid for g in GROUPS], [g.name for g in GROUPS])
    writer.close()
    lookups = Lookups(cfg, {"LDAP": open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])}, {})
    responder = NssResponder(cfg, lookups, MemcacheFeed(cfg.daemon.mc_dir, cfg.nss))
    fed: list[str] = []
    real = responder.feed.groups

    def groups(batch: Iterable[tuple[str, int, int, bytes]], pwfield: str) -> None:
        batch = list(batch)
        fed.extend(name for name, *_ in batch)
        real(batch, pwfield)

    responder.feed.groups = groups  # type: ignore[method-assign,assignment]
    return cfg, responder, fed


def _answer(responder: NssResponder) -> None:
    assert COMMANDS[p.Command.INITGR].now(responder, p.Command.INITGR, USER.name) is not None


def _in_memory_cache(cfg: Config) -> set[str]:
    with McReader(Path(cfg.daemon.mc_dir) / "group") as r:
        return {g.name for g in GROUPS if (e := r.group(g.gid)) is not None and e.name == g.name}


def test_noted_groups_are_fed_at_once_and_the_answer_feeds_the_others(tmp_path):
    cfg, responder, fed = _responder(tmp_path)
    early = [g.name for g in GROUPS[:25]]
    responder.prefill_stored(GroupsStoredNote("LDAP", tuple(early)))
    assert fed == early
    assert _in_memory_cache(cfg) == set(early)
    _answer(responder)
    assert fed == early + [g.name for g in GROUPS[25:]]
    assert _in_memory_cache(cfg) == {g.name for g in GROUPS}
    assert not responder._early["LDAP"]  # each note used once


def test_notes_are_not_trusted_once_stale_used_or_invalidated(tmp_path, monkeypatch):
    cfg, responder, fed = _responder(tmp_path)
    names = tuple(g.name for g in GROUPS[:10])
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    # A note no answer used for longer than EARLY_FRESH: the answer feeds every group.
    responder.prefill_stored(GroupsStoredNote("LDAP", names))
    clock[0] += server_mod.EARLY_FRESH + 1
    fed.clear()
    _answer(responder)
    assert fed == [g.name for g in GROUPS]
    # A note used by one answer spares nothing to the next (past the answer's own
    # refeed period, ``_prefill_every``).
    responder.prefill_stored(GroupsStoredNote("LDAP", names))
    _answer(responder)
    clock[0] += responder._prefill_every + 1
    fed.clear()
    _answer(responder)
    assert fed == [g.name for g in GROUPS]
    # After `cached cache -E` (a new memory-cache file), notes from before count for
    # nothing.
    responder.prefill_stored(GroupsStoredNote("LDAP", names))

    async def invalidated() -> None:
        responder.reset_memcache()
        await asyncio.sleep(0)  # the new file is published once the caller is answered

    asyncio.run(invalidated())
    fed.clear()
    _answer(responder)
    assert fed == [g.name for g in GROUPS]
    assert _in_memory_cache(cfg) == {g.name for g in GROUPS}


def test_notes_for_another_domain_or_without_a_memory_cache_feed_nothing(tmp_path):
    _, responder, fed = _responder(tmp_path)
    responder.prefill_stored(GroupsStoredNote("nosuchdomain", ("g000",)))
    assert fed == []
    _, off, fed_off = _responder(tmp_path / "off", nss={"memcache_timeout": 0})
    off.prefill_stored(GroupsStoredNote("LDAP", ("g000",)))
    assert fed_off == []


BAD_NOTES = [
    {},
    {"domain": "LDAP"},
    {"domain": 1, "groups": []},
    {"domain": "LDAP", "groups": "g1"},
    {"domain": "LDAP", "groups": ["g1", 2]},
]


@pytest.mark.parametrize("args", BAD_NOTES)
def test_a_malformed_note_is_refused(args):
    with pytest.raises(BadMessage):
        GroupsStoredNote.parse(args)
