"""What the responder answers, and puts in the memory cache, after an invalidation or a
backend write: the same as a fresh responder reading the same cache would. Each case was
found in review (its shortcut served or stored a record older than the cache's). A real
cache and real memory-cache files; the backend is a stand-in that writes the cache as
the provider does (BackendCache.request, one write)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cached.cache import State, open_domain_cache
from cached.cache.integrity import cache_paths, remove_store
from cached.cache.writer import BackendCache, open_backend_cache
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.ipc.ops import LookupReply, Outcome
from cached.memcache import McReader
from cached.model import Group, User
from cached.nss import protocol as p
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import COMMANDS, NssResponder
from cached.responder.admin import Admin
from cached.responder.flow import Lookups
from testing.daemon import config_text

BASE = "dc=example,dc=test"
ALICE = User("alice", 15001, 10000, "", "/home/alice", "/bin/sh", f"uid=alice,ou=people,{BASE}")
GID = 20001
WAIT = 30.0  # seconds: generous, for a loaded machine


def _group(name: str, members: list[str]) -> Group:
    return Group(name, GID, f"cn={name},ou=groups,{BASE}", tuple(members))


def _setup(
    tmp: Path, backends: dict[str, Any] | None = None
) -> tuple[Config, BackendCache, NssResponder]:
    cfg = parse_config(config_text(["ldap://127.0.0.1:1"], BASE, tmp))
    (tmp / "db").mkdir(mode=0o700)
    (tmp / "mc").mkdir()
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    with writer.write() as b:
        writer.put_user(b, ALICE)
        writer.put_group(b, _group("g1", ["alice"]))
        writer.put_initgroups(b, "alice", [GID], ["g1"])
    lookups = Lookups(cfg, {"LDAP": open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])},
                      backends or {})  # fmt: skip
    return cfg, writer, NssResponder(cfg, lookups, MemcacheFeed(cfg.daemon.mc_dir, cfg.nss))


def _members(reply: bytes | None) -> tuple[str, ...] | None:
    assert reply is not None
    groups = p.decode_group(reply[16:])
    return tuple(groups[0].members) if groups else None


def _memory_cache(cfg: Config, key: int | str) -> tuple[str, tuple[str, ...]] | None:
    with McReader(Path(cfg.daemon.mc_dir) / "group") as r:
        e = r.group(key)
        return None if e is None else (e.name, tuple(e.members))


def test_a_lookup_asked_after_an_invalidation_does_not_share_a_request_begun_before(tmp_path):
    """The first refresh reads the server (alice), then the server changes (bob) and
    the administrator invalidates: the lookup asked after that gets its own backend
    request and bob; the first one's answer, stored expired by the backend (it ran
    across the invalidation), is not put in the memory cache as valid."""
    server = {"g1": ["alice"]}
    gate = asyncio.Event()
    one_at_a_time = asyncio.Lock()  # the backend's one worker (BackendService.executor)
    started = [asyncio.Event(), asyncio.Event()]

    class Backend:
        calls = 0

        async def call(self, op: Any, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
            Backend.calls += 1
            first = Backend.calls == 1
            started[min(Backend.calls, 2) - 1].set()
            async with one_at_a_time:
                with writer.request():
                    members = list(server["g1"])  # the search
                    if first:
                        await gate.wait()  # a slow server
                    with writer.write() as b:
                        writer.put_group(b, _group("g1", members))
            return LookupReply(Outcome.FOUND).fields()

    async def main() -> tuple[bytes, bytes]:
        cmd = COMMANDS[p.Command.GETGRGID]
        first = asyncio.ensure_future(cmd.run(responder, p.Command.GETGRGID, GID))
        await asyncio.wait_for(started[0].wait(), WAIT)
        server["g1"] = ["bob"]
        admin = Admin(responder.lookups, responder.status, on_invalidate=responder.reset_memcache)
        assert admin.invalidate("all") > 0
        await asyncio.sleep(0)  # the new memory-cache file published
        second = asyncio.ensure_future(cmd.run(responder, p.Command.GETGRGID, GID))
        # Its own backend request (sharing the first one's, it would wait for ever).
        await asyncio.wait_for(started[1].wait(), WAIT)
        gate.set()
        return await first, await second

    cfg, writer, responder = _setup(tmp_path, {"LDAP": Backend()})
    responder.lookups.caches["LDAP"].invalidate_group("g1")  # expired: a lookup refreshes
    first, second = asyncio.run(main())
    assert Backend.calls == 2
    assert _members(second) == ("bob",)
    assert _members(first) in (("alice",), ("bob",))  # asked before: either is right
    assert _memory_cache(cfg, GID) == ("g1", ("bob",))  # never alice, once invalidated


def test_an_invalidation_rechecks_a_store_the_backend_replaced(tmp_path):
    """The timestamp store rebuilt by a restarted backend, then `cached cache -E`, within
    the second between two identity checks: the responder read the old file and
    answered, and stored, the group as VALID."""
    cfg, writer, responder = _setup(tmp_path)
    cmd = p.Command.GETGRGID
    assert COMMANDS[cmd].now(responder, cmd, GID) is not None  # kept, VALID
    writer.close()
    remove_store(cache_paths(cfg.daemon.db_dir, "LDAP")[1])
    rebuilt = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    assert rebuilt.invalidate_all() > 0  # `cached cache -E` on the new file

    async def invalidated() -> None:
        responder.reset_memcache()
        await asyncio.sleep(0)

    asyncio.run(invalidated())
    # Needs the backend now (None), as a fresh responder reading the cache would.
    assert COMMANDS[cmd].now(responder, cmd, GID) is None
    assert responder.lookups.caches["LDAP"].group_by_gid(GID).state is not State.VALID
    assert _memory_cache(cfg, GID) is None


def test_a_renamed_group_leaves_the_memory_cache_at_the_next_initgroups_answer(tmp_path):
    """The user's gid list is the same after its group was renamed (and given a
    member): the prefill was skipped as done, and the memory cache kept answering the
    old name, with the old members, until memcache_timeout."""
    cfg, writer, responder = _setup(tmp_path)
    cmd = p.Command.INITGR
    assert COMMANDS[cmd].now(responder, cmd, "alice") is not None
    assert _memory_cache(cfg, "g1") == ("g1", ("alice",))
    with writer.write() as b:
        writer.delete_group(b, "g1")
        writer.put_group(b, _group("developers", ["alice", "bob"]))
        writer.put_initgroups(b, "alice", [GID], ["developers"])
    assert COMMANDS[cmd].now(responder, cmd, "alice") is not None
    assert _memory_cache(cfg, "g1") is None
    assert _memory_cache(cfg, GID) == ("developers", ("alice", "bob"))


def test_an_answer_its_request_stored_expired_stays_out_of_the_memory_cache(tmp_path):
    """The administrator invalidates while a request runs: the backend stores what it
    read expired (BackendCache.request), and the answer to the lookup that waited for
    it is that, from the cache; it is not put in the memory cache `-E` just emptied,
    where clients would take it as valid for memcache_timeout."""
    gate = asyncio.Event()
    started = asyncio.Event()

    class Backend:
        async def call(self, op: Any, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
            with writer.request():
                started.set()
                await gate.wait()
                with writer.write() as b:
                    writer.put_group(b, _group("g1", ["alice"]))
            return LookupReply(Outcome.FOUND).fields()

    async def main() -> bytes:
        cmd = COMMANDS[p.Command.GETGRGID]
        asked = asyncio.ensure_future(cmd.run(responder, p.Command.GETGRGID, GID))
        await asyncio.wait_for(started.wait(), WAIT)
        admin = Admin(responder.lookups, responder.status, on_invalidate=responder.reset_memcache)
        assert admin.invalidate("all") > 0
        await asyncio.sleep(0)  # the new memory-cache file published
        gate.set()
        return await asyncio.wait_for(asked, WAIT)

    cfg, writer, responder = _setup(tmp_path, {"LDAP": Backend()})
    responder.lookups.caches["LDAP"].invalidate_group("g1")
    assert _members(asyncio.run(main())) == ("alice",)
    assert responder.lookups.caches["LDAP"].group_by_gid(GID).state is State.EXPIRED
    assert _memory_cache(cfg, GID) is None


def test_the_prefill_leaves_an_invalidated_group_out_of_the_memory_cache(tmp_path):
    """`cached cache -g g1`, then `id alice` with alice's group list still valid: the
    prefill put the expired g1, old members and all, in the memory cache the
    invalidation had just emptied, for clients to trust for memcache_timeout."""
    cfg, _writer, responder = _setup(tmp_path)
    admin = Admin(responder.lookups, responder.status, on_invalidate=responder.reset_memcache)

    async def invalidated() -> None:
        assert admin.invalidate("group", "g1") > 0
        await asyncio.sleep(0)  # the new memory-cache file published

    asyncio.run(invalidated())
    cache = responder.lookups.caches["LDAP"]
    assert cache.group_by_gid(GID).state is State.EXPIRED
    cmd = p.Command.INITGR
    assert COMMANDS[cmd].now(responder, cmd, "alice") is not None
    assert _memory_cache(cfg, GID) is None


def test_another_users_commit_does_not_make_the_next_answer_prefill_again(tmp_path):
    """The prefill memo: the same gids under the same names within half the record
    lifetime are not fed again, whatever other users' requests commit meanwhile (a
    re-feed of bigroupuser's 2,085 groups is ~33 ms of the responder's CPU)."""
    _cfg, writer, responder = _setup(tmp_path)
    fed: list[str] = []
    real = responder.feed.groups

    def groups(batch: Any, pwfield: str) -> None:
        batch = list(batch)
        fed.extend(name for name, *_ in batch)
        real(batch, pwfield)

    responder.feed.groups = groups  # type: ignore[method-assign,assignment]
    cmd = p.Command.INITGR
    assert COMMANDS[cmd].now(responder, cmd, "alice") is not None
    assert fed == ["g1"]
    with writer.write() as b:  # someone else's lookup
        writer.put_user(b, User("carol", 15003, 10000, "", "/h", "/bin/sh", f"uid=carol,{BASE}"))
    assert COMMANDS[cmd].now(responder, cmd, "alice") is not None
    assert fed == ["g1"]
