"""Cold initgroups of bigroupuser from LDAP into the cache, backend alone
(docs/compatibility.md §9.3).

Each round starts from an empty cache and an open connection, so it measures the
searches, the decoding, the member resolution and the one store transaction.
The breakdown of where the time goes comes from the counters of the last round.
"""

from __future__ import annotations

import itertools
from array import array

from cached.counters import (
    ENTRY_TXN,
    LDAP_BER,
    LDAP_DECODE,
    LDAP_SEARCH,
    LDAP_WAIT,
    NESTED_COMPARE,
    NESTED_RESOLVE,
    TS_WRITE,
    Counters,
)
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain


def test_cold_initgroups_of_bigroupuser(benchmark, slapd_big, tmp_path):
    s, exp = slapd_big.slapd, slapd_big.expected
    cfg = make_domain([s.uri], s.base_dn)
    rounds = itertools.count()
    backends = []

    def setup():
        counters = Counters()
        p, cache, _ = make_backend(tmp_path / f"r{next(rounds)}", cfg, counters)
        p.client.connect()
        backends.append((p, cache, counters))
        return (p,), {}

    def run(p):
        assert p.initgroups("bigroupuser").outcome is Outcome.FOUND

    try:
        benchmark.pedantic(run, setup=setup, rounds=5)
        p, cache, counters = backends[-1]
        got = cache.initgroups("bigroupuser").value
        assert got is not None and set(array("I", got.gids)) == exp.initgroups("bigroupuser", 2)
        ms = {name: round(counters.get(name).seconds * 1000, 1) for name in (
            LDAP_SEARCH, LDAP_WAIT, LDAP_BER, LDAP_DECODE, NESTED_RESOLVE, NESTED_COMPARE,
            ENTRY_TXN, TS_WRITE)}  # fmt: skip
        benchmark.extra_info.update(ms)
        benchmark.extra_info["searches"] = counters.get(LDAP_SEARCH).count
    finally:
        for p, cache, _ in backends:
            p.client.close()
            cache.close()
