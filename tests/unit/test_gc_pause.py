"""The cyclic garbage collector is off while a backend request runs and back as it
was after it, also when requests of two domains overlap (cached/gcpause.py
paused). Pure logic: no server is contacted."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from cached.counters import Counters
from cached.gcpause import hold as _gc_hold
from cached.gcpause import paused as _gc_paused
from cached.ldap.exchange import Entry
from cached.ldap.provider import Outcome, Result
from cached.ldap.walk import Walk
from testing.backend import make_backend, make_domain


@pytest.fixture
def gc_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_request_runs_without_gc(tmp_path: Path, gc_enabled: None) -> None:
    p, _cache, _ = make_backend(
        tmp_path, make_domain(["ldap://127.0.0.1:9"], "dc=example,dc=test"), Counters()
    )
    seen: list[bool] = []

    def fn(_w: Walk) -> Result:
        seen.append(gc.isenabled())
        return Result(Outcome.NOT_FOUND)

    assert p._run("req_user", "user", "alice", fn).outcome is Outcome.NOT_FOUND
    assert seen == [False]
    assert gc.isenabled()

    def fails(_w: Walk) -> Result:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        p._run("req_user", "user", "alice", fails)
    assert gc.isenabled()


def test_overlapping_requests(gc_enabled: None) -> None:
    outer = _gc_paused()
    inner = _gc_paused()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the first one ends while the other runs
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_hold_outlives_blocks_and_is_released_once(gc_enabled: None) -> None:
    release = _gc_hold()
    with _gc_paused():
        pass
    assert not gc.isenabled()  # the block ended, the hold goes on
    other = _gc_hold()
    release()
    release()  # once: the second call does not release the other hold
    assert not gc.isenabled()
    other()
    assert gc.isenabled()


def test_gc_left_off_when_it_was_off(gc_enabled: None) -> None:
    gc.disable()
    with _gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_entry_get_any_case() -> None:
    e = Entry("uid=a,dc=x", {"uidnumber": [b"5"]})
    assert e.get("uidNumber") == [b"5"] == e.get("UIDNUMBER") == e.get("uidnumber")
    assert e.get("gidNumber") == []
