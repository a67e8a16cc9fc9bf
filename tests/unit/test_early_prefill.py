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
from cached.ipc.ops import BadMessage, GroupsStoredNote, Op
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


def _asked(responder: NssResponder, user: str = USER.name) -> None:
    """An initgroups of ``user`` in flight to the backend, as Lookups.refresh leaves
    it while the backend works (its notes come meanwhile)."""
    loop = asyncio.new_event_loop()
    responder.lookups.inflight[("LDAP", Op.INITGROUPS, user)] = loop.create_future()
    loop.close()


def _note(responder: NssResponder, names: Iterable[str], domain: str = "LDAP") -> None:
    """A backend's note while its initgroups is in flight."""
    if not responder.lookups.inflight:
        _asked(responder)
    responder.prefill_stored(GroupsStoredNote(domain, USER.name, tuple(names)))


def _answer(responder: NssResponder) -> None:
    """The backend's answer: the flow forgets the request (Lookups._forget, the
    future's first callback), then answers from the cache."""
    responder.lookups.inflight.clear()
    assert COMMANDS[p.Command.INITGR].now(responder, p.Command.INITGR, USER.name) is not None


def _in_memory_cache(cfg: Config) -> set[str]:
    with McReader(Path(cfg.daemon.mc_dir) / "group") as r:
        return {g.name for g in GROUPS if (e := r.group(g.gid)) is not None and e.name == g.name}


def test_noted_groups_are_fed_at_once_and_the_answer_feeds_the_others(tmp_path):
    cfg, responder, fed = _responder(tmp_path)
    early = [g.name for g in GROUPS[:25]]
    _note(responder, early)
    assert fed == early
    assert _in_memory_cache(cfg) == set(early)
    _answer(responder)
    assert fed == early + [g.name for g in GROUPS[25:]]
    assert _in_memory_cache(cfg) == {g.name for g in GROUPS}
    assert "LDAP" not in responder._early  # each note used once


def test_notes_are_not_trusted_once_stale_used_or_invalidated(tmp_path, monkeypatch):
    cfg, responder, fed = _responder(tmp_path)
    names = tuple(g.name for g in GROUPS[:10])
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    # A note no answer used for longer than EARLY_FRESH: the answer feeds every group.
    _note(responder, names)
    clock[0] += server_mod.EARLY_FRESH + 1
    fed.clear()
    _answer(responder)
    assert fed == [g.name for g in GROUPS]
    # A note used by one answer spares nothing to the next (past the answer's own
    # refeed period, ``_prefill_every``).
    _note(responder, names)
    _answer(responder)
    clock[0] += responder._prefill_every + 1
    fed.clear()
    _answer(responder)
    assert fed == [g.name for g in GROUPS]
    # After `cached cache -E` (a new memory-cache file), notes from before count for
    # nothing.
    _note(responder, names)

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
    _note(responder, ("g000",), domain="nosuchdomain")
    assert fed == []
    _, off, fed_off = _responder(tmp_path / "off", nss={"memcache_timeout": 0})
    _note(off, ("g000",))
    assert fed_off == []


def test_a_note_after_its_answer_or_unasked_feeds_and_spares_nothing(tmp_path):
    """Notes travel on their own socket: one read after its answer (the request no
    longer in flight), or one nobody asked for, is dropped; it must not spare a later
    answer's prefill a group that answer's request may have changed (found in review)."""
    _, responder, fed = _responder(tmp_path)
    responder.prefill_stored(GroupsStoredNote("LDAP", USER.name, ("g000", "g001")))
    assert fed == [] and not responder._early
    _asked(responder, "bob")  # another user's initgroups in flight: not this note's
    responder.prefill_stored(GroupsStoredNote("LDAP", USER.name, ("g000", "g001")))
    assert fed == [] and not responder._early
    _answer(responder)
    assert fed == [g.name for g in GROUPS]


def test_an_answer_takes_every_note_of_its_domain(tmp_path):
    """What one answer did not use (another request's notes, still in flight when it
    came) is dropped with it: the other answer feeds its groups itself."""
    _, responder, _fed = _responder(tmp_path)
    _asked(responder, "bob")  # another user's initgroups, in flight too
    _asked(responder)
    _note(responder, [g.name for g in GROUPS[:5]])
    assert set(responder._early["LDAP"]) == {g.name for g in GROUPS[:5]}
    _answer(responder)
    assert "LDAP" not in responder._early


MAX = GroupsStoredNote.MAX_GROUPS
BAD_NOTES = [
    {},
    {"domain": "LDAP"},
    {"domain": 1, "user": "u", "groups": []},
    {"domain": "LDAP", "groups": []},  # no user
    {"domain": "LDAP", "user": "u", "groups": "g1"},
    {"domain": "LDAP", "user": "u", "groups": ["g1", 2]},
    {"domain": "LDAP", "user": "u", "groups": ["g1", ""]},  # the cache has no key for it
    {"domain": "LDAP", "user": "u", "groups": ["g\0"]},
    {"domain": "LDAP", "user": "u", "groups": ["x" * 257]},  # over LOGIN_NAME_MAX, as NSS
    {"domain": "LDAP", "user": "u", "groups": [f"g{i}" for i in range(MAX + 1)]},
]


@pytest.mark.parametrize("args", BAD_NOTES)
def test_a_malformed_note_is_refused(args):
    with pytest.raises(BadMessage):
        GroupsStoredNote.parse(args)
