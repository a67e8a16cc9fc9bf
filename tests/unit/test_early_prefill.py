"""The responder's side of early prefill (nss/server.py ``prefill_stored``): the groups a
backend's note names go in the memory cache at once, from the cache, and the INITGR
answer that follows puts in only the others; every group of the answer ends in the
memory cache either way. A real cache and real memory-cache files; no server."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from cached.cache import open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.ipc.ops import BadMessage, GroupsStoredNote, Op, Outcome
from cached.memcache import McReader
from cached.model import Group, User
from cached.nss import protocol as p
from cached.nss import server as server_mod
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import NssResponder
from cached.responder.flow import Found, Lookups
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


_SERIALS = itertools.count(1)


def _asked(responder: NssResponder, user: str = USER.name) -> int:
    """An initgroups of ``user`` in flight to the backend, as Lookups.refresh leaves
    it while the backend works (its notes come meanwhile); the backend's serial of
    the request, which its notes and its answer carry."""
    loop = asyncio.new_event_loop()
    fut: asyncio.Future[Outcome] = loop.create_future()
    loop.close()
    responder.lookups.inflight[("LDAP", Op.INITGROUPS, user)] = fut
    return next(_SERIALS)


def _note(
    responder: NssResponder,
    names: Iterable[str],
    request: int,
    domain: str = "LDAP",
    user: str = USER.name,
) -> None:
    """A backend's note of ``user``'s initgroups, request ``request``."""
    responder.prefill_stored(GroupsStoredNote(domain, user, request, tuple(names)))


def _asked_and_noted(responder: NssResponder, names: Iterable[str]) -> int:
    """An initgroups in flight that noted ``names``; its serial."""
    request = _asked(responder)
    _note(responder, names, request)
    return request


def _answer(responder: NssResponder, request: int = 0) -> None:
    """The INITGR answer from the cache; ``request``: the serial of the backend request
    it waited for (LookupReply.early), 0 for none. The flow forgets that request
    first (Lookups._forget is the future's first callback)."""
    responder.lookups.inflight.clear()
    cache = responder.lookups.caches["LDAP"]
    got = cache.initgroups(USER.name)
    assert got.value is not None
    found = Found(responder.config.domains[0], cache, got.value, got.state, request)
    responder.fill_initgr(p.Command.INITGR, USER.name, found)


def _in_memory_cache(cfg: Config) -> set[str]:
    with McReader(Path(cfg.daemon.mc_dir) / "group") as r:
        return {g.name for g in GROUPS if (e := r.group(g.gid)) is not None and e.name == g.name}


def test_noted_groups_are_fed_at_once_and_the_answer_feeds_the_others(tmp_path):
    cfg, responder, fed = _responder(tmp_path)
    early = [g.name for g in GROUPS[:25]]
    request = _asked_and_noted(responder, early)
    assert fed == early
    assert _in_memory_cache(cfg) == set(early)
    _answer(responder, request)
    assert fed == early + [g.name for g in GROUPS[25:]]
    assert _in_memory_cache(cfg) == {g.name for g in GROUPS}
    assert not responder._early  # each note used once


def test_notes_are_not_trusted_once_stale_used_or_invalidated(tmp_path, monkeypatch):
    cfg, responder, fed = _responder(tmp_path)
    names = tuple(g.name for g in GROUPS[:10])
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    # A note no answer used for longer than EARLY_FRESH: the answer feeds every group.
    request = _asked_and_noted(responder, names)
    clock[0] += server_mod.EARLY_FRESH + 1
    fed.clear()
    _answer(responder, request)
    assert fed == [g.name for g in GROUPS]
    # A note used by one answer spares nothing to the next (past the answer's own
    # refeed period, ``_prefill_every``).
    request = _asked_and_noted(responder, names)
    _answer(responder, request)
    clock[0] += responder._prefill_every + 1
    fed.clear()
    _answer(responder, request)
    assert fed == [g.name for g in GROUPS]
    # After `cached cache -E` (a new memory-cache file), notes from before count for
    # nothing.
    request = _asked_and_noted(responder, names)

    async def invalidated() -> None:
        responder.reset_memcache()
        await asyncio.sleep(0)  # the new file is published once the caller is answered

    asyncio.run(invalidated())
    fed.clear()
    _answer(responder, request)
    assert fed == [g.name for g in GROUPS]
    assert _in_memory_cache(cfg) == {g.name for g in GROUPS}


def test_notes_for_another_domain_or_without_a_memory_cache_feed_nothing(tmp_path):
    _, responder, fed = _responder(tmp_path)
    _note(responder, ("g000",), _asked(responder), domain="nosuchdomain")
    assert fed == []
    _, off, fed_off = _responder(tmp_path / "off", nss={"memcache_timeout": 0})
    _note(off, ("g000",), _asked(off))
    assert fed_off == []


def test_a_note_after_its_answer_or_unasked_feeds_and_spares_nothing(tmp_path):
    """Notes travel on their own socket: one read after its answer (the request no
    longer in flight), or one nobody asked for, is dropped; it must not spare a later
    answer's prefill a group that answer's request may have changed (found in review)."""
    _, responder, fed = _responder(tmp_path)
    _note(responder, ("g000", "g001"), 7)
    assert fed == [] and not responder._early
    bob = _asked(responder, "bob")  # another user's initgroups in flight: not this note's
    _note(responder, ("g000", "g001"), bob)
    assert fed == [] and not responder._early
    _answer(responder)
    assert fed == [g.name for g in GROUPS]


def test_a_note_spares_only_the_answer_of_its_own_request(tmp_path):
    """Found in review: a note of one request (here a background refresh, which no
    answer waits for) spared another request's answer a group that request had
    changed since, and the memory cache kept the group's old members."""
    _, responder, fed = _responder(tmp_path)
    background = _asked(responder)
    _note(responder, [g.name for g in GROUPS[:5]], background)
    other = _asked(responder)  # the next request of the same user, in flight later
    fed.clear()
    _answer(responder, other)
    assert fed == [g.name for g in GROUPS]  # nothing spared by the other's note
    assert ("LDAP", background) in responder._early  # kept for its own answer
    _answer(responder, background)
    assert not responder._early


def test_a_note_of_a_request_begun_before_an_invalidation_spares_nothing_after(tmp_path):
    """Found in review: `-E` forgets the request in flight; the lookup after it starts
    another; a late note of the first, filed under the second, spared the second's
    answer a group it had read again. Notes name their request's serial, and an
    answer takes only its own request's."""
    _, responder, fed = _responder(tmp_path)
    before = _asked(responder)

    async def invalidated() -> None:
        responder.lookups.invalidated()
        responder.reset_memcache()
        await asyncio.sleep(0)

    asyncio.run(invalidated())
    after = _asked(responder)  # the lookup asked after the invalidation
    _note(responder, [g.name for g in GROUPS[:5]], before)  # the first's note, late
    fed[:] = []
    _answer(responder, after)
    assert fed[5:] and fed == [g.name for g in GROUPS]


MAX = GroupsStoredNote.MAX_GROUPS
BAD_NOTES = [
    {},
    {"domain": "LDAP"},
    {"domain": 1, "user": "u", "request": 1, "groups": []},
    {"domain": "LDAP", "request": 1, "groups": []},  # no user
    {"domain": "LDAP", "user": "u", "groups": []},  # no request
    {"domain": "LDAP", "user": "u", "request": 0, "groups": []},
    {"domain": "LDAP", "user": "u", "request": True, "groups": []},
    {"domain": "LDAP", "user": "u", "request": 1, "groups": "g1"},
    {"domain": "LDAP", "user": "u", "request": 1, "groups": ["g1", 2]},
    # No key in the cache for an empty name; over LOGIN_NAME_MAX, as NSS; too many.
    {"domain": "LDAP", "user": "u", "request": 1, "groups": ["g1", ""]},
    {"domain": "LDAP", "user": "u", "request": 1, "groups": ["g\0"]},
    {"domain": "LDAP", "user": "u", "request": 1, "groups": ["x" * 257]},
    {"domain": "LDAP", "user": "u", "request": 1, "groups": [f"g{i}" for i in range(MAX + 1)]},
]


@pytest.mark.parametrize("args", BAD_NOTES)
def test_a_malformed_note_is_refused(args):
    with pytest.raises(BadMessage):
        GroupsStoredNote.parse(args)
