"""The work a backend request leaves for after its answer (LdapProvider.after_answer)
starts only once every request waiting for that answer has it: started sooner, the
worker thread holds the GIL while the answer waits to be written. The cyclic collector
stays off from the request to the end of that work, which frees what the request built:
resumed in between, it ran over all of it before the answer. The provider is a
stand-in and the worker runs on the loop's own thread, so the order is the service's
alone (BackendService._work)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from cached.config import parse_config
from cached.ipc.ops import Op
from cached.ldap import service as service_mod
from cached.ldap.provider import Outcome, Result
from cached.ldap.service import BackendService
from testing.backend import config_text


class _Provider:
    """Answers every initgroups at once and leaves work for after the answer, which
    records how many of the waiting requests had their answer when it began."""

    def __init__(self, answered: list[str]) -> None:
        self.answered = answered
        self.seen_at_start: list[int] = []
        self.pending = 0
        self.collector: list[tuple[str, bool]] = []

    def initgroups(self, key: str) -> Result:
        self.pending += 1
        self.collector.append(("request", gc.isenabled()))
        return Result(Outcome.FOUND)

    @property
    def after_pending(self) -> bool:
        return self.pending > 0

    def after_answer(self) -> None:
        self.seen_at_start.append(len(self.answered))
        self.collector.append(("after", gc.isenabled()))
        self.pending = 0


def test_after_answer_waits_for_every_waiter_of_the_request(tmp_path: Path) -> None:
    cfg = parse_config(
        config_text(["ldap://127.0.0.1:1"], "dc=x", daemon={"db_dir": tmp_path / "db"})
    )
    service = BackendService(cfg, cfg.domains[0])
    answered: list[str] = []
    provider = _Provider(answered)
    service.provider = provider  # type: ignore[assignment]

    async def in_loop(fn: Any) -> Any:
        return fn()

    service._in_worker = in_loop  # type: ignore[method-assign]

    async def client(uid: int) -> None:
        result = await service.request(Op.INITGROUPS, "alice", uid=uid)
        # What the RPC handler does in the step that resumes it: the answer written.
        answered.append(f"{uid}: {result.outcome.value}")
        provider.collector.append(("answered", gc.isenabled()))

    async def main() -> None:
        await asyncio.gather(client(1), client(2))
        # The worker is a task of its own, and gives the answer's readers a moment
        # (AFTER_ANSWER_IDLE) before the work after it: until it has run that work.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not provider.seen_at_start and loop.time() < deadline:
            await asyncio.sleep(0.005)

    was = gc.isenabled()
    gc.enable()
    try:
        asyncio.run(main())
        assert gc.isenabled()  # on again once the work after the answer ended
    finally:
        service.cache.close()
        if not was:
            gc.disable()
    assert sorted(answered) == ["1: found", "2: found"]
    assert provider.seen_at_start == [2]
    assert provider.collector == [
        ("request", False), ("answered", False), ("answered", False), ("after", False)
    ]


def test_the_work_after_waits_while_idle_and_not_for_the_next_request(tmp_path: Path) -> None:
    """Nothing queued after an answer: the work after it waits (AFTER_ANSWER_IDLE, here
    longer than the test); a request queued then runs it at once, then runs."""
    cfg = parse_config(
        config_text(["ldap://127.0.0.1:1"], "dc=x", daemon={"db_dir": tmp_path / "db"})
    )
    service = BackendService(cfg, cfg.domains[0])
    order: list[str] = []

    class Provider(_Provider):
        def initgroups(self, key: str) -> Result:
            order.append(f"request {key}")
            return super().initgroups(key)

        def after_answer(self) -> None:
            order.append("after")
            super().after_answer()

    service.provider = Provider([])  # type: ignore[assignment]

    async def in_loop(fn: Any) -> Any:
        return fn()

    service._in_worker = in_loop  # type: ignore[method-assign]

    async def main() -> None:
        await service.request(Op.INITGROUPS, "alice", uid=1)
        for _ in range(200):
            await asyncio.sleep(0)
        assert order == ["request alice"]  # idle: the work after the answer waits
        await asyncio.wait_for(service.request(Op.INITGROUPS, "bob", uid=1), 60)

    service_mod.AFTER_ANSWER_IDLE, idle = 600.0, service_mod.AFTER_ANSWER_IDLE
    try:
        asyncio.run(main())
    finally:
        service_mod.AFTER_ANSWER_IDLE = idle
        service.cache.close()
    assert order == ["request alice", "after", "request bob"]
