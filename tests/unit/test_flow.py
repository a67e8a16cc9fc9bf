"""The responder's lookup flow (``cached.responder.flow``) with a fake cache and a fake
backend: which state of a cached entry makes the flow answer, refresh, wait or remember
a miss (reference §6.4). Pure logic: no LDAP, no LMDB, no sockets."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from cached.cache import GroupView, Initgroups, Lookup, State
from cached.config import Config, parse_config
from cached.ipc.ops import LOOKUPS, Op, Outcome
from cached.model import Kind, User
from cached.responder.flow import (
    GETGRGID,
    GETGRNAM,
    GETPWNAM,
    GETPWUID,
    INITGR,
    NOT_NOW,
    Backend,
    Found,
    Lookups,
    groups_of,
)

CONF = """[cached]
domains = D
[nss]
entry_negative_timeout = 15
cache_first_wait = {first_wait}
[domain/D]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:1
ldap_search_base = dc=example,dc=com
refresh_expired_interval = {refresh}
"""

ALICE = User("alice", 1000, 1000)


def _conf(first_wait: int = 0, refresh: int = 0) -> str:
    return CONF.format(first_wait=first_wait, refresh=refresh)


def config(first_wait: int = 0, refresh: int = 0) -> Config:
    """Refresh ahead off unless ``refresh`` is given: the midpoint refresh is then a
    request per entry, as SSSD's."""
    return parse_config(_conf(first_wait, refresh))


class FakeCache:
    """The reads the plugins make, from dicts of (state, value); a refresh by the fake
    backend replaces an entry."""

    def __init__(self) -> None:
        self.users: dict[str | int, tuple[State, User | None]] = {}
        self.groups: dict[str | int, tuple[State, GroupView | None]] = {}
        self.initgr: dict[str, tuple[State, Initgroups | None]] = {}
        self.reads = 0

    def _get(self, table: dict[Any, tuple[State, Any]], key: str | int) -> Lookup[Any]:
        self.reads += 1
        state, value = table.get(key, (State.MISSING, None))
        return Lookup(state, value)

    def user_by_name(self, name: str) -> Lookup[User]:
        return self._get(self.users, name)

    def user_by_uid(self, uid: int) -> Lookup[User]:
        return self._get(self.users, uid)

    def group_by_name(self, name: str) -> Lookup[GroupView]:
        return self._get(self.groups, name)

    def group_by_gid(self, gid: int) -> Lookup[GroupView]:
        return self._get(self.groups, gid)

    def initgroups(self, name: str) -> Lookup[Initgroups]:
        return self._get(self.initgr, name)


class FakeBackend:
    """Answers each lookup op with the outcome it is given, after ``gate`` opens; a
    FOUND answer stores ``refreshed`` (VALID) in the cache, as the real backend would."""

    def __init__(self, cache: FakeCache, outcome: Outcome = Outcome.FOUND) -> None:
        self.cache = cache
        self.outcome = outcome
        self.calls: list[tuple[Op, str | int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.refreshed: User | None = None
        self.online = True

    async def call(self, op: Op, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        if op is Op.REFRESH_SOON:
            self.calls.append((op, ""))
            return {"id": 1, "ok": True}
        key = args["key"]
        self.calls.append((op, key))
        await self.gate.wait()
        if self.outcome is Outcome.FOUND and self.refreshed is not None:
            assert LOOKUPS[op].kind is Kind.USER
            self.cache.users[key] = (State.VALID, self.refreshed)
        if self.outcome is Outcome.NOT_FOUND:
            self.cache.users.pop(key, None)
        return {
            "id": 1,
            "ok": True,
            "outcome": self.outcome.value,
            "message": "",
            "online": self.online and self.outcome is not Outcome.OFFLINE,
            "retry_in": 30.0 if self.outcome is Outcome.OFFLINE else 0.0,
        }


def flow(first_wait: int = 0, refresh: int = 0) -> tuple[Lookups, FakeCache, FakeBackend]:
    cache = FakeCache()
    backend = FakeBackend(cache)
    backends: dict[str, Backend] = {"D": backend}
    lookups = Lookups(config(first_wait, refresh), {"D": cache}, backends)  # type: ignore[dict-item]
    return lookups, cache, backend


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_valid_entry_is_answered_without_the_backend() -> None:
    lookups, cache, backend = flow()
    cache.users["alice"] = (State.VALID, ALICE)

    async def go() -> Any:
        return await lookups.lookup(GETPWNAM, "alice")

    found = run(go())
    assert found is not None and found.value == ALICE and found.state is State.VALID
    assert backend.calls == []


def test_midpoint_answers_now_and_refreshes_out_of_band() -> None:
    lookups, cache, backend = flow()
    cache.users["alice"] = (State.MIDPOINT, ALICE)
    backend.gate.clear()  # the refresh cannot finish while the answer is given
    backend.refreshed = User("alice", 1000, 1000, gecos="new")

    async def go() -> tuple[Any, int, int]:
        found = await lookups.lookup(GETPWNAM, "alice")
        in_flight = len(lookups.inflight)
        await asyncio.sleep(0)  # let the refresh task send its request
        backend.gate.set()
        await asyncio.gather(*lookups.inflight.values())
        return found, in_flight, len(lookups.inflight)

    found, in_flight, after = run(go())
    assert found is not None and found.value == ALICE  # the cached value, at once
    assert in_flight == 1 and after == 0
    assert backend.calls == [(Op.USER_BY_NAME, "alice")]
    assert cache.users["alice"][1] == backend.refreshed  # the refresh did land


def test_midpoint_with_refresh_ahead_notes_the_backend_once_a_second() -> None:
    """With refresh ahead on, entries answered past their midpoint are not refreshed
    one request each: the backend gets a note (Op.REFRESH_SOON), at most one a
    second, and its early run refreshes them together."""
    lookups, cache, backend = flow(refresh=60)
    gids = range(10000, 12000)
    for gid in gids:
        cache.groups[gid] = (State.MIDPOINT, GroupView(f"g{gid}", gid, "", b"", 0))
    clock = [100.0]
    lookups.clock = lambda: clock[0]

    async def go() -> list[Any]:
        found = [lookups.lookup_now(GETGRGID, gid) for gid in gids]
        await asyncio.sleep(0)
        clock[0] += 1.0
        found.append(lookups.lookup_now(GETGRGID, 10007))  # a second later: noted again
        for _ in range(3):
            await asyncio.sleep(0)
        return found

    found = run(go())
    assert all(isinstance(f, Found) and f.state is State.MIDPOINT for f in found)
    assert not lookups.inflight  # no lookup request
    assert backend.calls == [(Op.REFRESH_SOON, "")] * 2


def test_expired_and_offline_serves_the_stale_entry_without_asking() -> None:
    lookups, cache, backend = flow()
    cache.users["alice"] = (State.EXPIRED, ALICE)
    backend.outcome = Outcome.OFFLINE

    async def go() -> tuple[Any, Any, int]:
        first = await lookups.lookup(GETPWNAM, "alice")  # asks, learns "offline"
        calls = len(backend.calls)
        second = await lookups.lookup(GETPWNAM, "alice")  # offline: no round trip
        return first, second, calls

    first, second, calls = run(go())
    assert first is not None and first.value == ALICE and first.state is State.EXPIRED
    assert second is not None and second.value == ALICE
    assert calls == 1 and len(backend.calls) == 1
    assert lookups.states["D"].offline(lookups.clock())
    assert len(lookups.negative) == 0


@pytest.mark.parametrize(
    ("outcome", "negative"),
    [
        (Outcome.NOT_FOUND, 1),
        (Outcome.OFFLINE, 0),
        (Outcome.ERROR, 0),
    ],
)
def test_only_a_backend_not_found_enters_the_negative_cache(
    outcome: Outcome, negative: int
) -> None:
    lookups, _cache, backend = flow()
    backend.outcome = outcome

    async def go() -> tuple[Any, Any]:
        first = await lookups.lookup(GETPWUID, 4242)
        lookups.states["D"].offline_until = 0.0  # forget "offline": ask again
        second = await lookups.lookup(GETPWUID, 4242)
        return first, second

    assert run(go()) == (None, None)
    assert len(lookups.negative) == negative
    # A negative entry answers the second lookup without the backend.
    assert len(backend.calls) == 2 - negative


def test_an_unreachable_backend_is_not_a_negative_answer() -> None:
    lookups, _cache, backend = flow()

    async def broken(op: Op, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        from cached.ipc.framing import RpcError

        raise RpcError("be_D: connection refused")

    backend.call = broken  # type: ignore[method-assign]
    assert run(lookups.lookup(GETPWNAM, "ghost")) is None
    assert len(lookups.negative) == 0


def test_lookups_while_the_backend_is_unreachable_log_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Any local user can ask again and again while the backend is down or restarting:
    one line per minute (cached/ratelimit.py), not one per lookup."""
    from cached.ratelimit import RateLimitedLog
    from cached.responder import flow as flow_module

    monkeypatch.setattr(flow_module, "limited", RateLimitedLog(flow_module.log))
    caplog.set_level(logging.WARNING, logger="cached.responder.flow")
    lookups, _cache, backend = flow()

    async def broken(op: Op, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        from cached.ipc.framing import RpcError

        raise RpcError("be_D: connection refused")

    backend.call = broken  # type: ignore[method-assign]
    for i in range(100):
        assert run(lookups.lookup(GETPWNAM, f"ghost{i}")) is None
    lines = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(lines) == 1, len(lines)


def test_concurrent_lookups_share_one_refresh() -> None:
    lookups, _cache, backend = flow()
    backend.gate.clear()
    backend.refreshed = ALICE

    async def go() -> list[Any]:
        tasks = [asyncio.ensure_future(lookups.lookup(GETPWNAM, "alice")) for _ in range(5)]
        await asyncio.sleep(0.01)  # every lookup has reached the refresh and waits
        waiting = len(lookups.inflight)
        backend.gate.set()
        return [waiting, *await asyncio.gather(*tasks)]

    waiting, *answers = run(go())
    assert waiting == 1
    assert backend.calls == [(Op.USER_BY_NAME, "alice")]
    assert all(f is not None and f.value == ALICE for f in answers)


def test_filtered_names_and_ids_out_of_range_never_reach_cache_or_backend() -> None:
    lookups, cache, backend = flow()
    cache.users["root"] = (State.VALID, User("root", 1, 1))

    async def go() -> tuple[Any, Any]:
        # filter_users defaults to root; id 0 is never served (min_id >= 1).
        return await lookups.lookup(GETPWNAM, "root"), await lookups.lookup(GETGRGID, 0)

    assert run(go()) == (None, None)
    assert cache.reads == 0 and backend.calls == []


def test_initgroups_never_fetched_waits_for_the_backend() -> None:
    """A user's groups that were never fetched are a missing entry: the flow waits for
    the backend even within cache_first_wait (stale_ok of the INITGR plugin)."""
    lookups, cache, backend = flow(first_wait=5)
    unfetched = Initgroups(ALICE, b"", (), fetched=False)
    cache.initgr["alice"] = (State.EXPIRED, unfetched)
    backend.gate.clear()

    async def go() -> tuple[bool, Any]:
        task = asyncio.ensure_future(lookups.lookup(INITGR, "alice"))
        await asyncio.sleep(0.01)
        done_before = task.done()
        backend.gate.set()
        return done_before, await task

    done_before, found = run(go())
    assert not done_before  # it waited for the refresh
    assert found is not None and found.value is unfetched
    assert backend.calls == [(Op.INITGROUPS, "alice")]


def test_lookup_now_answers_what_needs_no_backend_and_starts_nothing_else() -> None:
    """The NSS socket's warm path: valid and midpoint entries, offline and stalled
    domains are answered at once; an expired or missing entry is NOT_NOW with no
    request sent (the socket then runs the whole lookup in a task)."""
    lookups, cache, backend = flow()
    backend.gate.clear()
    cache.users["valid"] = (State.VALID, ALICE)
    cache.users["midpoint"] = (State.MIDPOINT, ALICE)
    cache.users["expired"] = (State.EXPIRED, ALICE)

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {
            k: lookups.lookup_now(GETPWNAM, k) for k in ("valid", "expired", "missing")
        }
        assert backend.calls == [] and not lookups.inflight  # nothing asked for those
        out["midpoint"] = lookups.lookup_now(GETPWNAM, "midpoint")
        out["refreshing"] = len(lookups.inflight)  # midpoint: refreshed out of band
        await asyncio.sleep(0)
        backend.gate.set()
        await asyncio.gather(*lookups.inflight.values())
        # Offline: the stale entry at once, a missing one not found at once.
        lookups.states["D"].offline_until = lookups.clock() + 60
        out["expired offline"] = lookups.lookup_now(GETPWNAM, "expired")
        out["missing offline"] = lookups.lookup_now(GETPWNAM, "missing")
        lookups.states["D"].offline_until = 0.0
        lookups.states["D"].stalled = True
        out["expired stalled"] = lookups.lookup_now(GETPWNAM, "expired")
        out["missing stalled"] = lookups.lookup_now(GETPWNAM, "missing")
        return out

    out = run(go())
    assert out["valid"].value == ALICE and out["midpoint"].value == ALICE
    assert out["expired"] is NOT_NOW and out["missing"] is NOT_NOW
    assert out["refreshing"] == 1 and backend.calls == [(Op.USER_BY_NAME, "midpoint")]
    assert out["expired offline"].value == ALICE and out["missing offline"] is None
    assert out["expired stalled"].value == ALICE
    assert out["missing stalled"] is NOT_NOW  # nothing stored: it waits for the backend
    assert len(backend.calls) == 1


@pytest.mark.parametrize("users", ["root, Mallory", "root, Mallory, jürgen"])
@pytest.mark.parametrize("case", ["true", "false", "preserving"])
def test_policy_batch_group_filter_and_member_search_answer_as_the_per_group_checks(
    case: str, users: str
) -> None:
    """What the memory-cache prefill and the member filter use (a filter looked up
    once, filtered names searched as prepared bytes) answers as the checks of one
    group: filters in any case, non-ASCII names, ids out of range."""
    from cached.cache.records import join_members
    from cached.responder.policy import ServePolicy

    cfg = parse_config(
        _conf().replace("[domain/D]", "[domain/D]\ncase_sensitive = " + case)
        .replace("[nss]", f"[nss]\nfilter_users = {users}\n"
                          "filter_groups = root, Wheel")
        .replace("[domain/D]", "[domain/D]\nmin_id = 10")
    )  # fmt: skip
    policy, domain = ServePolicy(cfg), cfg.domains[0]
    ok = policy.group_view_filter(domain)
    names = ["root", "wheel", "Wheel", "WHEEL", "staff", "Ünïcode"]
    for name in names:
        for gid in (0, 5, 10, 20000, 0xFFFFFFFF):
            g = GroupView(name, gid, "", b"", 0)
            assert ok(g) == policy.group_view_ok(domain, g), (name, gid)
    for members in (["alice", "bob"], ["alice", "mallory"], ["Mallory"], ["jürgen", "x"],
                    ["JÜRGEN"], ["rooty", "xroot"], []):  # fmt: skip
        blob = join_members(members)
        g = GroupView("g", 20000, "", blob, len(set(members)))
        count, got = policy.members(domain, g)
        kept = [n for n in sorted(set(members)) if not policy.name_filtered(domain, Kind.USER, n)]
        if case == "false":
            kept = [n.lower() for n in kept]
        assert (count, got) == (len(set(kept)), join_members(kept)), members


@pytest.mark.parametrize("sensitive", [True, False])
def test_initgroups_gids_drop_the_primary_filtered_and_out_of_range_gids(
    sensitive: bool,
) -> None:
    """INITGR's gid list: the primary gid only when the user is an explicit member of
    that group, never a filtered group's gid, never an id out of range; all others
    kept, in order, whether the list is in range (dropped gids taken out in C) or not."""
    from array import array

    from cached.responder.policy import ServePolicy

    cfg = parse_config(
        _conf().replace("[nss]", "[nss]\nfilter_groups = Wheel")
        .replace("[domain/D]", "[domain/D]\nmin_id = 10\ncase_sensitive = " + str(sensitive))
    )  # fmt: skip
    policy, domain = ServePolicy(cfg), cfg.domains[0]
    views = {
        500: GroupView("Primary", 500, "", b"", 0),
        600: GroupView("Wheel" if sensitive else "wheel", 600, "", b"", 0),
    }

    class Cache:
        case_sensitive = sensitive

        def group_by_gid(self, gid: int) -> Lookup[GroupView]:
            v = views.get(gid)
            return Lookup(State.VALID if v else State.MISSING, v)

        def group_by_name(self, name: str) -> Lookup[GroupView]:
            v = next((v for v in views.values() if (v.name if sensitive else v.name.lower())
                      == (name if sensitive else name.lower())), None)  # fmt: skip
            return Lookup(State.VALID if v else State.MISSING, v)

    def gids(listed: list[int], groups: tuple[str, ...]) -> list[int]:
        user = User("u", 1000, 500)
        ig = Initgroups(user, array("I", listed).tobytes(), groups)
        got = policy.initgroups_gids(domain, Cache(), ig)  # type: ignore[arg-type]
        return array("I", got).tolist()

    assert gids([500, 600, 700], ("g700",)) == [700]
    member = "primary" if not sensitive else "Primary"
    assert gids([500, 600, 700], ("g700", member)) == [500, 700]
    if sensitive:
        assert gids([500, 700], ("g700", "primary")) == [700]  # another name
    assert gids([5, 500, 600, 700, 0xFFFFFFFF], ("g700",)) == [700]

    # A filter naming another value of a group's cn (found by name through the alias
    # index): the group is answered under its first name, which no filter names, so it
    # stays, as getent group and getgrgid serve it (SSSD 2.8.2 answers the same).
    views[600] = GroupView("admins", 600, "", b"", 0)
    aliases = {"wheel": views[600]}
    by_name = Cache.group_by_name
    Cache.group_by_name = lambda self, name: (  # type: ignore[method-assign]
        Lookup(State.VALID, aliases[name.lower()]) if name.lower() in aliases
        else by_name(self, name)
    )  # fmt: skip
    assert gids([500, 600, 700], ("g700", "admins")) == [600, 700]
    assert policy.group_ok(domain, "admins", 600)
    assert gids([5, 500, 700], ("g700", member)) == [500, 700]
    assert gids([700, 800], ("g700", "g800", member)) == [700, 800]
    assert gids([], ()) == []


# -- auto_private_groups ----------------------------------------------------------------


class GroupsNotFound(FakeBackend):
    """Finds no group in the directory, and the cached users unchanged."""

    async def call(self, op: Op, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        self.calls.append((op, args["key"]))
        found = LOOKUPS[op].kind is Kind.USER and args["key"] in self.cache.users
        return {"id": 1, "ok": True, "message": "", "online": True, "retry_in": 0.0,
                "outcome": (Outcome.FOUND if found else Outcome.NOT_FOUND).value}  # fmt: skip


def mpg_flow(mode: str) -> tuple[Lookups, FakeCache, FakeBackend]:
    cache = FakeCache()
    backend = GroupsNotFound(cache)
    cfg = parse_config(_conf().replace(
        "[domain/D]", f"[domain/D]\nauto_private_groups = {mode}"))  # fmt: skip
    lookups = Lookups(cfg, {"D": cache}, {"D": backend})  # type: ignore[dict-item]
    return lookups, cache, backend


def test_private_group_true_from_the_cache_then_the_backend() -> None:
    """auto_private_groups = true: a real group comes first, asked of the backend
    when not cached (SSSD's provider searches groups first), then a cached user is
    its own group by uid and name; a gid neither names asks the backend for the
    group, then for the user (SSSD's groups_get_mpg_done)."""
    lookups, cache, backend = mpg_flow("true")
    bob = User("bob", 1002, 20000, dn="uid=bob")
    cache.users[1002] = cache.users["bob"] = (State.VALID, bob)
    assert lookups.lookup_now(GETGRGID, 1002) is NOT_NOW
    assert run(lookups.lookup(GETGRGID, 1002)) is not None
    assert run(lookups.lookup(GETGRNAM, "bob")) is not None
    assert backend.calls == [(Op.GROUP_BY_GID, 1002), (Op.GROUP_BY_NAME, "bob")]
    # Now the misses of the real groups are remembered: the cache answers.
    for now in (lookups.lookup_now(GETGRGID, 1002), lookups.lookup_now(GETGRNAM, "bob")):
        assert isinstance(now, Found) and now.value == GroupView("bob", 1002, "uid=bob", b"", 0)
    assert len(backend.calls) == 2
    lookups.clear_negative()
    real = GroupView("bobs", 1002, "cn=bobs", b"bob\0", 1)
    cache.groups[1002] = (State.VALID, real)
    assert run(lookups.lookup(GETGRGID, 1002)).value == real
    assert lookups.lookup_now(GETGRGID, 7) is NOT_NOW
    assert run(lookups.lookup(GETGRGID, 7)) is None
    assert backend.calls[2:] == [(Op.GROUP_BY_GID, 7), (Op.USER_BY_UID, 7)]
    # Both misses are remembered: no request the second time.
    assert run(lookups.lookup(GETGRGID, 7)) is None and len(backend.calls) == 4


def test_private_group_hybrid_only_for_gid_equal_uid_and_not_shadowed() -> None:
    lookups, cache, backend = mpg_flow("hybrid")
    bob, alice = User("bob", 1002, 1002), User("alice", 1001, 20000)
    for u in (bob, alice):
        cache.users[u.uid] = cache.users[u.name] = (State.VALID, u)
    # No domain has a real group (the backend says so, SSSD's first pass), then the
    # user of that uid is asked for: bob, whose gid is his uid.
    assert lookups.lookup_now(GETGRGID, 1002) is NOT_NOW
    assert run(lookups.lookup(GETGRGID, 1002)).value == GroupView("bob", 1002, "", b"", 0)
    now = lookups.lookup_now(GETGRGID, 1002)
    assert isinstance(now, Found) and now.value.name == "bob"
    assert run(lookups.lookup(GETGRGID, 1001)) is None
    # Alice's gid is not her uid: no private group, and no request for her.
    assert backend.calls == [(Op.GROUP_BY_GID, 1002), (Op.GROUP_BY_GID, 1001)]
    assert lookups.lookup_now(GETGRGID, 1001) is None
    assert run(lookups.lookup(GETGRNAM, "bob")).value.gid == 1002
    # A real group with bob's gid shadows his private group by name, and wins by gid.
    cache.groups[1002] = (State.VALID, GroupView("staff", 1002, "", b"", 0))
    lookups.clear_negative()  # (the gid's earlier miss)
    assert run(lookups.lookup(GETGRNAM, "bob")) is None
    assert lookups.lookup_now(GETGRNAM, "bob") is None
    assert run(lookups.lookup(GETGRGID, 1002)).value.name == "staff"


def test_private_group_policy_true() -> None:
    """The user's answered gid is its uid; its gidNumber becomes one of its groups,
    and a user without one (gid 0) is served."""
    from array import array

    from cached.responder.policy import ServePolicy

    cfg = parse_config(_conf().replace(
        "[domain/D]", "[domain/D]\nauto_private_groups = true"))  # fmt: skip
    policy, domain = ServePolicy(cfg), cfg.domains[0]
    alice = User("alice", 1001, 20000)
    assert policy.output_user(domain, alice).gid == 1001
    assert policy.user_ok(domain, User("nogid", 1003, 0))

    class Cache:
        case_sensitive = True

        def group_by_gid(self, gid: int) -> Lookup[GroupView]:
            return Lookup(State.MISSING)

        def group_by_name(self, name: str) -> Lookup[GroupView]:
            return Lookup(State.MISSING)

    for user, listed, want in ((alice, [20000, 20001], [20000, 20001]),
                               (User("bob", 1002, 1002), [1002, 20001], [20001]),
                               (User("nogid", 1003, 0), [0, 20001], [20001])):  # fmt: skip
        ig = Initgroups(user, array("I", listed).tobytes(), ("g",))
        got = policy.initgroups_gids(domain, Cache(), ig)  # type: ignore[arg-type]
        assert array("I", got).tolist() == want, user


@pytest.mark.parametrize("fmt", ["%1$s@%2$s", "%2$s\\%1$s", "%1$s@%3$s%%"])
@pytest.mark.parametrize("users", ["root", "root, mallory"])
def test_qualified_members_each_format(fmt: str, users: str) -> None:
    """Qualified member lists, whether the format only appends (done on the blob) or
    not (name by name): every kept member qualified, the filtered ones left out."""
    from cached.cache.records import join_members, split_members
    from cached.responder.policy import ServePolicy

    cfg = parse_config(
        _conf().replace("[nss]", f"[nss]\nfilter_users = {users}\n")
        .replace("[domain/D]", f"[domain/D]\nuse_fully_qualified_names = true\n"
                               f"full_name_format = {fmt}")
    )  # fmt: skip
    policy, domain = ServePolicy(cfg), cfg.domains[0]
    drop = {u.strip() for u in users.split(",")}
    for members in (["alice", "bob"], ["alice", "mallory", "a-b"], [], ["Jürgen", "x y"]):
        g = GroupView("g", 20000, "", join_members(members), len(members))
        count, blob = policy.members(domain, g)
        want = {policy.output_name(domain, n) for n in members if n not in drop}
        assert (count, set(split_members(blob))) == (len(want), want), members


def test_groups_of_adds_the_stored_primary_group_once() -> None:
    cache = FakeCache()
    cfg = config()
    domain = cfg.domains[0]
    ig = Initgroups(ALICE, b"", ("staff", "inner"))

    def found() -> Found[Initgroups]:
        return Found(domain, cache, ig, State.VALID)  # type: ignore[arg-type]

    assert groups_of(found()) == ["staff", "inner"]  # primary gid 1000 not stored
    cache.groups[1000] = (State.VALID, GroupView("alice-primary", 1000, "", b"", 0))
    assert groups_of(found()) == ["staff", "inner", "alice-primary"]
    cache.groups[1000] = (State.VALID, GroupView("inner", 1000, "", b"", 0))
    assert groups_of(found()) == ["staff", "inner"]


def test_a_stalled_domain_still_refreshes_a_users_groups_but_no_group_alone() -> None:
    """With the backend stalled (another lookup's cache_first_wait ran out), an expired
    user's groups are answered stale at once and their refresh is still asked for, once:
    it refreshes every group of the user. The expired groups that `id` asks for next
    are answered stale with no request of their own each."""
    lookups, cache, backend = flow(first_wait=5)
    backend.gate.clear()
    gids = range(10000, 10050)
    ig = Initgroups(ALICE, b"".join(g.to_bytes(4, "little") for g in gids),
                    tuple(f"g{g}" for g in gids))  # fmt: skip
    cache.initgr["alice"] = (State.EXPIRED, ig)
    for gid in gids:
        cache.groups[gid] = (State.EXPIRED, GroupView(f"g{gid}", gid, "", b"", 0))
    lookups.states["D"].stalled = True

    async def go() -> tuple[list[Any], list[tuple[Op, str | int]], int]:
        found: list[Any] = [lookups.lookup_now(INITGR, "alice") for _ in range(2)]
        found += [lookups.lookup_now(GETGRGID, gid) for gid in gids]
        await asyncio.sleep(0)  # the refresh task sends its request
        asked = list(backend.calls)
        pending = len(lookups.inflight)
        backend.gate.set()
        await asyncio.gather(*lookups.inflight.values())
        return found, asked, pending

    found, asked, pending = run(go())
    assert all(isinstance(f, Found) and f.state is State.EXPIRED for f in found)
    assert found[0].value is ig
    assert asked == [(Op.INITGROUPS, "alice")] and pending == 1
    assert not lookups.states["D"].stalled  # its answer ended the stall
