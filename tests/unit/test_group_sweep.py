"""The group sweep's reading of its answers (Sweeps.read_groups): past its bound it
gives up and remembers the bound; a server that cut it or ignored its sizeLimit ends
group sweeps on the domain. Pure logic: the answers are given, no server is
contacted (the sweep against slapd: tests/integration/test_sweep.py)."""

from __future__ import annotations

from pathlib import Path

from cached.counters import Counters
from cached.ldap.exchange import Entry, LdapLimitExceeded
from cached.ldap.sweep import Sweeps
from testing.backend import make_backend, make_domain


def _sweeps(tmp_path: Path) -> Sweeps:
    cfg = make_domain(["ldap://127.0.0.1:9"], "dc=example,dc=test")
    p, _, _ = make_backend(tmp_path, cfg, Counters())
    return p.sweeps


def _groups(n: int) -> list[Entry]:
    return [Entry(f"cn=g{i},ou=groups,dc=example,dc=test", {}) for i in range(n)]


def test_answered_within_its_bound(tmp_path: Path) -> None:
    s = _sweeps(tmp_path)
    got = s.read_groups(3, [_groups(2), _groups(1)])
    assert got is not None and len(got) == 3
    assert (s.groups_at_least, s.groups_cut) == (0, False)


def test_past_its_own_size_limit_it_gives_up_and_remembers(tmp_path: Path) -> None:
    s = _sweeps(tmp_path)
    cut = LdapLimitExceeded("size", "sizeLimitExceeded", 10)
    assert s.read_groups(10, [cut]) is None
    assert (s.groups_at_least, s.groups_cut) == (11, False)
    # Several bases together past the bound.
    assert s.read_groups(20, [_groups(15), _groups(15)]) is None
    assert s.groups_at_least == 21 and not s.groups_cut


def test_a_server_limit_or_an_ignored_size_limit_ends_group_sweeps(tmp_path: Path) -> None:
    s = _sweeps(tmp_path)
    assert s.read_groups(100, [LdapLimitExceeded("size", "sizeLimitExceeded", 10)]) is None
    assert s.groups_cut and s.groups_at_least == 0
    s = _sweeps(tmp_path / "b")
    assert s.read_groups(5, [_groups(8)]) is None  # more than asked: the limit ignored
    assert s.groups_cut
    # A time limit: given up this once, nothing learned.
    s = _sweeps(tmp_path / "c")
    assert s.read_groups(5, [LdapLimitExceeded("time", "timeLimitExceeded", 2)]) is None
    assert (s.groups_at_least, s.groups_cut) == (0, False)
