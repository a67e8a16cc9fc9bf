"""counters.py: zero-level transactions, per-request scopes across threads, snapshots."""

from __future__ import annotations

import asyncio

from cached.counters import (
    ENTRY_TXN,
    LDAP_SEARCH,
    Counters,
    Stat,
    diff,
    format_profile,
    merge,
)
from cached.tools.perf import format_idperf, idperf_breakdown


def test_only_the_outermost_transaction_is_counted():
    c = Counters()
    with c.transaction() as outer:
        assert outer is True
        with c.transaction() as inner:
            assert inner is False
    with c.transaction():
        pass
    assert c.get(ENTRY_TXN).count == 2


def test_scopes_collect_what_happens_below_them_even_in_a_worker_thread():
    c = Counters()

    async def request() -> Stat:
        with c.request("INITGR", "alice") as scope:
            c.add(LDAP_SEARCH, 1, 0.5, 10)
            await asyncio.to_thread(c.add, LDAP_SEARCH, 1, 0.25, 5)  # copies the context
        return scope.get(LDAP_SEARCH)

    in_scope = asyncio.run(request())
    c.add(LDAP_SEARCH, 1, 1.0, 1)  # outside any scope
    assert in_scope == Stat(2, 0.75, 15)
    assert c.get(LDAP_SEARCH) == Stat(3, 1.75, 16)


def test_diff_merge_and_the_id_perf_breakdown():
    a, b = Counters(), Counters()
    before = merge([a.snapshot(), b.snapshot()])
    a.add(LDAP_SEARCH, 3, 0.3, 30)
    b.add(ENTRY_TXN, 1, 0.1)
    d = diff(merge([a.snapshot(), b.snapshot()]), before)
    out = idperf_breakdown(d, 1.0)
    assert out["ldap_searches"] == 3 and out["level0_transactions"] == 1
    assert out["unaccounted_ms"] == 600.0
    text = format_idperf(out, "id")
    assert text.splitlines()[0] == "Total run time of id was: 1000 ms"
    assert "Number of LDAP searches: 3" in text


def test_profile_line_is_one_greppable_line():
    c = Counters()
    with c.request("USER", "bob") as scope:
        c.add(LDAP_SEARCH, 1, 0.002, 1)
    line = format_profile(scope, "found")
    assert "\n" not in line
    assert line.startswith("USER PROFILE bob: total=") and "searches=1" in line
