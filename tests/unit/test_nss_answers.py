"""The NSS responder's kept group replies: given again only while the lookup flow would
give the very same bytes (same store snapshot, VALID, not hidden by the negative cache),
and the memory cache is still fed on every answer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cached.cache import State, open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.model import Group, User
from cached.nss import protocol as p
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import NssResponder, _Enum
from cached.responder.flow import GETGRGID, NOT_NOW, Lookups
from testing.daemon import config_text

BASE = "dc=example,dc=test"


def group(members: tuple[str, ...]) -> Group:
    return Group("grp", 20001, f"cn=grp,ou=groups,{BASE}", members)


def _config(tmp_path: Path, **opts: Any) -> Config:
    """A one-domain configuration under ``tmp_path`` (testing.daemon's), its cache and
    memory-cache directories made; the LDAP server is never reached."""
    cfg = parse_config(config_text(["ldap://127.0.0.1:1"], BASE, tmp_path, **opts))
    (tmp_path / "db").mkdir(mode=0o700)
    (tmp_path / "mc").mkdir()
    return cfg


def test_a_kept_group_reply_follows_writes_invalidation_and_negative_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tmp_path)
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    with writer.write() as b:
        writer.put_group(b, group(("alice", "bob")))
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {"LDAP": cache}, {})
    feed = MemcacheFeed(cfg.daemon.mc_dir, cfg.nss)
    responder = NssResponder(cfg, lookups, feed)
    fed: list[int] = []
    real_group = feed.group

    def group_fed(name: str, gid: int, *rest: object) -> None:
        fed.append(gid)
        real_group(name, gid, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(feed, "group", group_fed)
    req = p.ById(p.Command.GETGRGID, 20001)
    state = _Enum()

    first = responder.answer_now(req, state)
    assert first is not None and b"alice\0bob\0" in first
    # Kept: the next answer does not go through the lookup flow, and is fed again.
    real_lookup_now = lookups.lookup_now
    monkeypatch.setattr(lookups, "lookup_now", lambda *a: pytest.fail("not kept"))
    assert responder.answer_now(req, state) == first
    assert fed == [20001, 20001]
    monkeypatch.setattr(lookups, "lookup_now", real_lookup_now)

    # A backend write: the very next answer has it.
    with writer.write() as b:
        writer.put_group(b, group(("alice", "carol")))
    second = responder.answer_now(req, state)
    assert second is not None and b"alice\0carol\0" in second and second != first
    assert responder.answer_now(req, state) == second

    # A negative entry hides the domain: not found, as the flow answers.
    nkey = GETGRGID.negative_key(20001)
    lookups.negative.timeout = 3600
    lookups.negative.add("LDAP", nkey)
    assert responder.answer_now(req, state) == p.not_found_reply(p.Command.GETGRGID)
    lookups.clear_negative()
    assert responder.answer_now(req, state) == second

    # Invalidated (`cached cache`): expired, so it waits for the backend.
    assert cache.invalidate_group("grp")
    assert responder.answer_now(req, state) is None
    feed.close()
    cache.close()
    writer.close(clean=True)


def test_a_kept_group_reply_outlives_commits_that_leave_its_records_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit of another group, or of this group's timestamps alone, leaves the kept
    reply (matched by the request's bytes) in use, byte for byte, with no lookup; a
    change to a group below it (nesting) gives the new reply at once."""
    cfg = _config(tmp_path)
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    top = Group("grp", 20001, f"cn=grp,ou=groups,{BASE}", ("alice",), ("sub",))
    with writer.write() as b:
        writer.put_group(b, top)
        writer.put_group(b, Group("sub", 20002, f"cn=sub,ou=groups,{BASE}", ("bob",)))
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {"LDAP": cache}, {})
    responder = NssResponder(cfg, lookups, MemcacheFeed(cfg.daemon.mc_dir, cfg.nss))
    req = p.ById(p.Command.GETGRGID, 20001)
    state = _Enum()
    first = responder.answer_now(req, state)
    assert first is not None and b"alice\0bob\0" in first
    kept = responder.answers[p.lookup_frame(req)]
    assert kept.request == req and kept.reply == first
    real_lookup_now = lookups.lookup_now
    monkeypatch.setattr(lookups, "lookup_now", lambda *a: pytest.fail("not kept"))
    with writer.write() as b:
        writer.put_group(b, Group("other", 20009, f"cn=other,ou=groups,{BASE}", ("eve",)))
    assert responder.answer_now(kept.request, state, kept) == first
    with writer.write() as b:
        writer.touch_group(b, "grp", modstamp="20270101000000Z")
    assert responder.answer_now(kept.request, state, kept) == first
    monkeypatch.setattr(lookups, "lookup_now", real_lookup_now)
    with writer.write() as b:
        writer.put_group(b, Group("sub", 20002, f"cn=sub,ou=groups,{BASE}", ("carol",)))
    second = responder.answer_now(kept.request, state, kept)
    assert second is not None and b"alice\0carol\0" in second
    assert responder.answers[p.lookup_frame(req)].reply == second
    responder.feed.close()
    cache.close()
    writer.close(clean=True)


def test_a_kept_group_reply_stops_when_its_entry_expires_or_reaches_its_midpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept answers and kept lookups carry when they stop being VALID: past the refresh
    midpoint the lookup says MIDPOINT, past the expiry the answer waits for the backend,
    with no store written in between."""
    cfg = _config(tmp_path, entry_cache_timeout=1000)
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    start = time.time()
    with writer.write() as b:
        writer.put_group(b, group(("alice", "bob")))
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    responder = NssResponder(cfg, Lookups(cfg, {"LDAP": cache}, {}), MemcacheFeed(
        cfg.daemon.mc_dir, cfg.nss))  # fmt: skip
    req = p.ById(p.Command.GETGRGID, 20001)
    first = responder.answer_now(req, _Enum())
    assert first is not None and b"alice\0bob\0" in first
    assert responder.answer_now(req, _Enum()) == first
    kept = cache.kept_group(20001)
    assert kept is not None and kept.state is State.VALID

    # Past the midpoint (half of the 1,000 s lifetime, nowait_percentage = 50).
    monkeypatch.setattr(time, "time", lambda: start + 700)
    kept = cache.kept_group(20001)
    assert kept is not None and kept.state is State.MIDPOINT
    assert cache.kept_group("grp") is None  # never asked by name: nothing kept
    # Expired: the kept reply is not given, the answer waits for the backend.
    monkeypatch.setattr(time, "time", lambda: start + 1100)
    kept = cache.kept_group(20001)
    assert kept is not None and kept.state is State.EXPIRED
    assert responder.answer_now(req, _Enum()) is None
    responder.feed.close()
    cache.close()
    writer.close(clean=True)


@pytest.mark.parametrize("case_sensitive", ["true", "false"])
def test_the_prefill_stores_what_getgrgid_answers(tmp_path: Path, case_sensitive: str) -> None:
    """After an INITGR answer, the memory cache holds each of the user's groups as the
    socket would answer it (output case, filter_users left out of the members), and
    the socket answers of the records the prefill built are those of a responder that
    never prefilled."""
    from cached.memcache import McReader
    from cached.model import User
    from cached.responder.flow import INITGR

    cfg = _config(tmp_path, case_sensitive=case_sensitive)
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    user = User("Alice", 10001, 10001, "", "/home/alice", "/bin/sh", f"uid=alice,{BASE}")
    groups = [
        Group(f"G{i}", 20000 + i, f"cn=g{i},ou=groups,{BASE}",
              tuple(f"u{j}" for j in range(i % 5)) + (("root",) if i % 3 == 0 else ()))
        for i in range(40)
    ]  # fmt: skip
    with writer.write() as b:
        writer.put_user(b, user)
        for g in groups:
            writer.put_group(b, g)
        writer.put_initgroups(b, "Alice", [g.gid for g in groups], [g.name for g in groups])
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {"LDAP": cache}, {})
    feed = MemcacheFeed(cfg.daemon.mc_dir, cfg.nss)
    responder = NssResponder(cfg, lookups, feed)
    found = lookups.lookup_now(INITGR, "Alice")
    assert found is not None and found is not NOT_NOW
    responder.fill_initgr(p.Command.INITGR, "Alice", found)
    (tmp_path / "mc2").mkdir()
    other = NssResponder(cfg, lookups, MemcacheFeed(str(tmp_path / "mc2"), cfg.nss))
    with McReader(tmp_path / "mc" / "group") as r:
        assert r.verify() == [] and r.stats().records == len(groups)
        for g in groups:
            req = p.ById(p.Command.GETGRGID, g.gid)
            reply = responder.answer_now(req, _Enum())
            assert reply is not None and reply == other.answer_now(req, _Enum())
            (entry,) = p.decode_group(reply[16:])
            mc = r.group(g.gid)
            assert mc is not None
            assert (mc.name, mc.gid, mc.members) == (entry.name, entry.gid, tuple(entry.members))
            assert "root" not in mc.members
            assert mc.name == (g.name.lower() if case_sensitive == "false" else g.name)
    other.feed.close()
    feed.close()
    cache.close()
    writer.close(clean=True)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_prefill_runs_without_the_cyclic_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    """The collector is off while the prefill reads and stores the user's groups, and
    as it was after it, also when storing fails (nss/server.py, _prefill_groups)."""
    import gc

    from cached.model import User
    from cached.responder.flow import INITGR

    cfg = _config(tmp_path)
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    user = User("alice", 10001, 10001, "", "/home/alice", "/bin/sh", f"uid=alice,{BASE}")
    groups = [Group(f"g{i}", 20000 + i, f"cn=g{i},ou=groups,{BASE}", ("alice",)) for i in range(5)]
    with writer.write() as b:
        writer.put_user(b, user)
        for g in groups:
            writer.put_group(b, g)
        writer.put_initgroups(b, "alice", [g.gid for g in groups], [g.name for g in groups])
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {"LDAP": cache}, {})
    responder = NssResponder(cfg, lookups, MemcacheFeed(cfg.daemon.mc_dir, cfg.nss))
    seen: list[bool] = []
    real = responder.feed.groups

    def groups_fed(batch: Any, pwfield: str) -> None:
        seen.append(gc.isenabled())
        real(batch, pwfield)
        if len(seen) > 1:
            raise OSError("disk on fire")

    monkeypatch.setattr(responder.feed, "groups", groups_fed)
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        found = lookups.lookup_now(INITGR, "alice")
        assert found is not None and found is not NOT_NOW
        responder.fill_initgr(p.Command.INITGR, "alice", found)
        assert seen == [False] and gc.isenabled() is enabled
        responder._prefilled.clear()  # so that it prefills again, and fails
        with pytest.raises(OSError):
            responder.fill_initgr(p.Command.INITGR, "alice", found)
        assert seen == [False, False] and gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
    responder.feed.close()
    cache.close()
    writer.close(clean=True)


def test_an_entry_no_record_can_carry_is_left_out_of_the_enumeration_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review: a NUL in one user's gecos (a cache written before the backend
    cut such values at the NUL) failed GETPWENT for every user of the domain."""
    cfg = _config(tmp_path, enumerate="true")
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    people = f"ou=people,{BASE}"
    with writer.write() as b:
        writer.put_user(b, User("alice", 20001, 20001, "Alice", "/home/alice", "/bin/sh",
                                f"uid=alice,{people}"))  # fmt: skip
        writer.put_user(b, User("bob", 20002, 20001, "Bob\0/root\0/bin/sh", "/home/bob",
                                "/bin/sh", f"uid=bob,{people}"))  # fmt: skip
        writer.put_user(b, User("carol", 20003, 20001, "", "/home/carol", "/bin/sh",
                                f"uid=carol,{people}"))  # fmt: skip
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    feed = MemcacheFeed(cfg.daemon.mc_dir, cfg.nss)
    responder = NssResponder(cfg, Lookups(cfg, {"LDAP": cache}, {}), feed)
    try:
        reply = responder.answer_now(p.GetEnt(p.Command.GETPWENT, 100), _Enum())
        assert reply is not None
        names = sorted(e.name for e in p.decode_passwd(reply[16:]))
        assert names == ["alice", "carol"]
        assert "enumeration: 'bob' left out: " in caplog.text
    finally:
        feed.close()
        cache.close()
        writer.close(clean=True)
