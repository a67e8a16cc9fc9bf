"""The refresh of bigroupuser's groups after `cached cache -E`, nothing changed on the
server, backend alone (docs/ARCHITECTURE.md §5): stamps of 2,084 groups, no member
values, timestamps written. Compare with test_bench_backend's cold initgroups."""

from __future__ import annotations

from array import array

from cached.counters import (
    COUNTERS,
    ENTRY_TXN,
    LDAP_BYTES,
    LDAP_SEARCH,
    LDAP_WAIT,
    NESTED_RESOLVE,
    TS_WRITE,
    VALIDATE,
    VALIDATE_FETCHED,
    Counters,
)
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain


def test_validated_refresh_of_bigroupuser(benchmark, slapd_big, tmp_path):
    s, exp = slapd_big.slapd, slapd_big.expected
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    counters = Counters()
    p, cache, _ = make_backend(tmp_path / "db", cfg, counters)
    try:
        b0 = COUNTERS.get(LDAP_BYTES).amount
        assert p.initgroups(user).outcome is Outcome.FOUND
        cold_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        txns = counters.get(ENTRY_TXN).count
        timed = (LDAP_SEARCH, LDAP_WAIT, NESTED_RESOLVE, TS_WRITE)
        base = {name: counters.get(name).seconds for name in timed}
        rounds = []

        def setup():
            # `cached cache -E`, then the getpwnam `id` makes before initgroups.
            cache.invalidate_all()
            assert p.user_by_name(user).outcome is Outcome.FOUND
            rounds.append(COUNTERS.get(LDAP_BYTES).amount)
            return (), {}

        def run():
            assert p.initgroups(user).outcome is Outcome.FOUND

        benchmark.pedantic(run, setup=setup, rounds=5)
        refresh_bytes = COUNTERS.get(LDAP_BYTES).amount - rounds[-1]
        got = cache.initgroups(user).value
        assert got is not None and set(array("I", got.gids)) == exp.initgroups(user, 2)
        assert counters.get(VALIDATE_FETCHED).amount == 0
        assert counters.get(ENTRY_TXN).count == txns  # nothing durable written
        # Per round, ms (the setup's user search included).
        for name in timed:
            ms = (counters.get(name).seconds - base[name]) * 1000 / len(rounds)
            benchmark.extra_info[name] = round(ms, 1)
        benchmark.extra_info["groups_checked"] = counters.get(VALIDATE).amount // len(rounds)
        benchmark.extra_info["bytes_cold"] = cold_bytes
        benchmark.extra_info["bytes_refresh"] = refresh_bytes
        assert refresh_bytes <= 0.15 * cold_bytes, (refresh_bytes, cold_bytes)
    finally:
        p.client.close()
        cache.close()
