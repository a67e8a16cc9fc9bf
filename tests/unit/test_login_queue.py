"""The backend's login queue (cached.ldap.login.RoundRobin): one login at a time, the
uids waiting served in turn, so a uid with many logins waiting delays another uid's by
at most one of them."""

from __future__ import annotations

import asyncio

from cached.ldap.login import RoundRobin


def test_uids_are_served_in_turn() -> None:
    async def run() -> list[str]:
        rr = RoundRobin()
        order: list[str] = []
        await rr.acquire("first")  # holds it while the others queue

        async def login(uid: str, n: int) -> None:
            await rr.acquire(uid)
            order.append(f"{uid}{n}")
            await asyncio.sleep(0)
            rr.release()

        tasks = [asyncio.create_task(login("flood", i)) for i in range(5)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(login("root", 0)))
        await asyncio.sleep(0)
        assert rr.queued == 6
        rr.release()
        await asyncio.gather(*tasks)
        assert rr.queued == 0
        return order

    order = asyncio.run(run())
    assert order.index("root0") <= 1, order
    assert sorted(order) == sorted([f"flood{i}" for i in range(5)] + ["root0"])


def test_a_cancelled_waiter_does_not_keep_the_turn() -> None:
    async def run() -> bool:
        rr = RoundRobin()
        await rr.acquire(1)
        waiting = asyncio.create_task(rr.acquire(2))
        await asyncio.sleep(0)
        rr.release()  # handed to the waiter...
        waiting.cancel()  # ...whose task is gone before it runs
        await asyncio.sleep(0)
        got = asyncio.create_task(rr.acquire(3))
        await asyncio.wait_for(got, 5)
        return True

    assert asyncio.run(run())
