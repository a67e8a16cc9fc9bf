"""An invalidation (`cached cache -E`) while the backend is mid-request, on real slapd:
docs/ARCHITECTURE.md §5, "Invalidation and the backend's writes"."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading

from cached.cache import DomainCache, State
from cached.config import parse_config
from cached.counters import Counters
from cached.ipc.ops import Op
from cached.ldap.provider import Outcome, Result
from cached.ldap.service import BackendService
from testing.backend import config_text, make_backend, make_domain

# Generous: the worker thread waits on the test, never on a fixed sleep.
WAIT = 60.0


def test_a_lookup_after_an_invalidation_does_not_join_a_request_begun_before_it(
    tmp_path, slapd_small
):
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = parse_config(config_text([s.uri], s.base_dn, daemon={"db_dir": tmp_path / "db"}))
    service = BackendService(cfg, cfg.domains[0])
    lookup = service.provider.user_by_name
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def held(name: str):
        calls.append(name)
        result = lookup(name)
        if len(calls) == 1:  # the first request, its entry read and stored, stays
            entered.set()  # in the backend until released
            assert release.wait(WAIT)
        return result

    service.provider.user_by_name = held  # type: ignore[method-assign]

    async def run() -> list[Outcome]:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(service.request(Op.USER_BY_NAME, exp.big_user, uid=1))
        assert await loop.run_in_executor(None, entered.wait, WAIT)
        # An identical lookup while it runs shares it ...
        joined = asyncio.ensure_future(service.request(Op.USER_BY_NAME, exp.big_user, uid=2))
        await asyncio.sleep(0)
        assert len(service.inflight) == 1
        # ... but not once the administrator has invalidated the cache.
        service.cache.invalidate_all()
        after = asyncio.ensure_future(service.request(Op.USER_BY_NAME, exp.big_user, uid=3))
        await asyncio.sleep(0)
        release.set()
        got = await asyncio.wait_for(asyncio.gather(first, joined, after), WAIT)
        return [r.outcome for r in got]

    try:
        assert asyncio.run(run()) == [Outcome.FOUND] * 3
        assert calls == [exp.big_user, exp.big_user]
    finally:
        release.set()
        service.executor.shutdown(wait=True)
        service.client.close()
        service.cache.close()


def _tool(path: str, domain: str) -> None:
    c = DomainCache(path, domain, counters=Counters())
    c.invalidate_all()
    c.close()


def test_an_entry_read_before_an_invalidation_is_stored_expired(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn))
    try:
        assert p.user_by_name(exp.big_user).outcome.value == "found"
        search = p.searcher.search
        ran: list[int | None] = []

        def search_then_invalidate(*a, **kw):
            got = search(*a, **kw)
            if not ran:  # the administrator runs `cached cache -E` now
                proc = mp.get_context("spawn").Process(
                    target=_tool, args=(str(tmp_path), cache.domain)
                )
                proc.start()
                proc.join()
                ran.append(proc.exitcode)
            return got

        p.searcher.search = search_then_invalidate  # type: ignore[method-assign]
        p.user_by_name(exp.big_user)
        assert ran == [0]
        assert cache.user_by_name(exp.big_user).state is State.EXPIRED
        p.searcher.search = search  # type: ignore[method-assign]
        p.user_by_name(exp.big_user)
        assert cache.user_by_name(exp.big_user).state is State.VALID
    finally:
        p.client.close()


def test_a_lookup_stored_by_the_request_ahead_of_it_makes_no_search(tmp_path, slapd_small):
    """`id` after `cached cache -E`: its initgroups runs, and a getgrgid of one of the
    user's groups waits behind it in the queue (its answer came from the cache after
    cache_first_wait). The walk stores the group valid; the getgrgid, when its turn
    comes, is answered from the cache with no request to the server."""
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = parse_config(config_text([s.uri], s.base_dn, daemon={"db_dir": tmp_path / "db"}))
    service = BackendService(cfg, cfg.domains[0])
    user = exp.big_user
    gid = exp.group(sorted(exp.direct_groups(user))[0]).gid
    initgroups, by_gid = service.provider.initgroups, service.provider.group_by_gid
    entered, release = threading.Event(), threading.Event()
    asked: list[int] = []

    def held(name: str):
        entered.set()
        assert release.wait(WAIT)
        return initgroups(name)

    def counted(g: int) -> Result:
        asked.append(g)
        return by_gid(g)

    async def run() -> list[Outcome]:
        loop = asyncio.get_running_loop()
        assert (await service.request(Op.INITGROUPS, user, uid=1)).outcome is Outcome.FOUND
        service.cache.invalidate_all()
        assert service.cache.group_by_gid(gid).state is State.EXPIRED
        service.provider.initgroups = held  # type: ignore[method-assign]
        service.provider.group_by_gid = counted  # type: ignore[method-assign,assignment]
        walk = asyncio.ensure_future(service.request(Op.INITGROUPS, user, uid=1))
        assert await loop.run_in_executor(None, entered.wait, WAIT)
        group = asyncio.ensure_future(service.request(Op.GROUP_BY_GID, gid, uid=1))
        await asyncio.sleep(0)
        release.set()
        got = await asyncio.wait_for(asyncio.gather(walk, group), WAIT)
        # Expired again: a lookup asked for now is asked of the server.
        service.cache.invalidate_all()
        again = await asyncio.wait_for(service.request(Op.GROUP_BY_GID, gid, uid=1), WAIT)
        return [r.outcome for r in (*got, again)]

    try:
        assert asyncio.run(run()) == [Outcome.FOUND] * 3
        assert asked == [gid]  # the last lookup's only
        assert service.cache.group_by_gid(gid).state is State.VALID
    finally:
        release.set()
        service.executor.shutdown(wait=True)
        service.client.close()
        service.cache.close()
