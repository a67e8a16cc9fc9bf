"""Cold ``getent group large01`` (5,000 members) from LDAP into the cache, backend
alone: the group search, its members named by one sweep of the user bases (the deref
control before it: perf/readpath.py --group large01 compares), one store transaction.
Each round starts from an empty cache and an open connection."""

from __future__ import annotations

import itertools

from cached.cache.records import split_members
from cached.counters import COUNTERS, LDAP_BYTES, LDAP_SEARCH, Counters
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain


def test_cold_group_large01(benchmark, slapd_big, tmp_path):
    s, exp = slapd_big.slapd, slapd_big.expected
    cfg = make_domain([s.uri], s.base_dn)
    rounds = itertools.count()
    backends = []

    def setup():
        counters = Counters()
        p, cache, _ = make_backend(tmp_path / f"r{next(rounds)}", cfg, counters)
        p.client.connect()
        backends.append((p, cache, counters, COUNTERS.get(LDAP_BYTES).amount))
        return (p,), {}

    def run(p):
        assert p.group_by_name("large01").outcome is Outcome.FOUND

    try:
        benchmark.pedantic(run, setup=setup, rounds=5)
        p, cache, counters, bytes_before = backends[-1]
        got = cache.group_by_name("large01").value
        assert got is not None and set(split_members(got.members)) == exp.members("large01", 2)
        benchmark.extra_info["searches"] = counters.get(LDAP_SEARCH).count
        benchmark.extra_info["bytes"] = COUNTERS.get(LDAP_BYTES).amount - bytes_before
    finally:
        for p, cache, *_ in backends:
            p.client.close()
            cache.close()
