"""Cold ``getent group large01`` (5,000 members) from LDAP into the cache, backend
alone: the group search, its members named by one sweep of the user bases, one store
transaction.
Each round starts from an empty cache and an open connection."""

from __future__ import annotations

import itertools

import pytest

from cached.cache.records import split_members
from cached.counters import COUNTERS, LDAP_BYTES, LDAP_SEARCH, Counters
from cached.ldap.provider import Outcome
from testing.backend import make_backend, make_domain
from testing.replay import FloorError, floor_once, gated_sends, record_lookup


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


def test_floor_group_large01(benchmark, slapd_big, tmp_path):
    """The floor under the test above (testing/replay.py): cached's recorded requests
    sent again with no client work. Its answers come to the recorded bytes; a
    request the server answers otherwise (here, the group search for another group)
    stops it rather than timing something else."""
    s = slapd_big.slapd
    rec = record_lookup(s.uri, s.base_dn, tmp_path, "large01")
    sends, total = gated_sends(rec["log"])
    assert len(sends) == 2  # the group search, the sweep (no unbind: no answer comes)
    elapsed = benchmark.pedantic(floor_once, args=(s.port, sends, total), rounds=5)
    assert elapsed > 0
    # A small group's lookup with large01's name: more answer bytes than recorded.
    small = record_lookup(s.uri, s.base_dn, tmp_path / "small", "grp0001")
    sends, total = gated_sends(small["log"])
    other = [(gate, req.replace(b"grp0001", b"large01")) for gate, req in sends]
    assert other != sends
    with pytest.raises(FloorError, match="answer bytes where the recording has"):
        floor_once(s.port, other, total)
