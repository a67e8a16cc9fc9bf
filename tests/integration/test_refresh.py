"""Background refresh of expiring entries (refresh_expired_interval, reference §6.4)."""

from __future__ import annotations

import calendar
import contextlib
import os
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.cache import State, open_domain_cache
from cached.cache.cache import READ_WHOLE
from cached.cache.records import split_members
from cached.config import parse_config
from cached.counters import COUNTERS, ENTRY_TXN, LDAP_BYTES, VALIDATE, VALIDATE_FETCHED, Counters
from cached.ldap.provider import Outcome
from cached.ldap.service import BackendService
from cached.ldap.stamps import STAMP_MARGIN, trusted_stamp
from testing.backend import config_text, make_backend, make_domain
from testing.marks import requires_nss
from testing.slapd import SearchOp, Slapd


def test_schedule_follows_sssd(tmp_path):
    def schedule(**opts):
        db = tmp_path / f"db{len(list(tmp_path.iterdir()))}"
        cfg = parse_config(
            config_text(["ldap://127.0.0.1:1"], "dc=x", daemon={"db_dir": db}, **opts)
        )
        service = BackendService(cfg, cfg.domains[0])
        try:
            return service.refresh_schedule()
        finally:
            service.cache.close()

    assert schedule(refresh_expired_interval=600) == (600.0, 60.0)
    # Interval + offset beyond the entry lifetime: 70 % of it, offset 10 % of that.
    assert schedule(refresh_expired_interval=5000, entry_cache_timeout=1000) == (700.0, 70.0)


def test_expiring_lists_due_entries(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn))
    try:
        p.initgroups(exp.big_user)
        p.group_by_name("large01")
        assert cache.expiring(time.time()) == ([], [], [])
        users, groups, initgr = cache.expiring(time.time() + 10_000)
        assert users == [exp.big_user] and initgr == [exp.big_user]
        assert "large01" in groups
        cache.invalidate_group("large01")
        assert cache.expiring(time.time()) == ([], ["large01"], [])
    finally:
        p.client.close()


@requires_nss
def test_entries_are_refreshed_without_lookups(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d = daemon_factory(slapd_small, refresh_expired_interval=1)
    assert d.run_nss(["id", exp.big_user]).returncode == 0
    assert d.cli("cache", "-E").returncode == 0
    domain = parse_config(d.config_path.read_text()).domains[0]
    deadline = time.monotonic() + 60
    while True:
        cache = open_domain_cache(str(d.db_dir), domain)
        try:
            states = {cache.initgroups(exp.big_user).state, cache.user_by_name(exp.big_user).state}
        finally:
            cache.close()
        # The refresh logs its line after its last request, which can come after
        # the entries turn valid: wait for both (the test failed once under load).
        if states == {State.VALID} and "background refresh: 1 initgroups, 1 users" in (
            d.log_text()
        ):
            break
        assert time.monotonic() < deadline, (states, d.log_tail())
        time.sleep(0.2)


# -- validation before transfer (cached/ldap/refresh.py) -------------------------------


def _state(cache, user: str) -> tuple[set[int], dict[str, tuple[int, set[str]]]]:
    """(the user's gids, {group: (gid, members)} for each of its groups), as answered."""
    got = cache.initgroups(user)
    assert got.value is not None and got.state is State.VALID
    groups = {}
    for view in cache.groups_by_name(got.value.groups):
        assert cache.group_by_name(view.name).state is State.VALID, view.name
        groups[view.name] = (view.gid, set(split_members(view.members)))
    return set(array("I", got.value.gids)), groups


def _refresh(p, cache, user: str) -> None:
    """What `id user` asks of the backend after `cached cache -E`."""
    cache.invalidate_all()
    assert p.user_by_name(user).outcome is Outcome.FOUND
    assert p.initgroups(user).outcome is Outcome.FOUND


def _oracle(tmp_path: Path, cfg, user: str):
    """The same user resolved cold, into an empty cache: what the refresh must equal."""
    p, cache, _ = make_backend(tmp_path / f"oracle{len(list(tmp_path.iterdir()))}", cfg)
    try:
        assert p.user_by_name(user).outcome is Outcome.FOUND
        assert p.initgroups(user).outcome is Outcome.FOUND
        return _state(cache, user)
    finally:
        p.client.close()
        cache.close()


@contextlib.contextmanager
def _resolved(tmp_path: Path, cfg, user: str) -> Iterator[tuple[Any, Any, Counters]]:
    """A backend with its own cache in which ``user`` and its groups were just
    resolved cold; its connection closed afterwards."""
    p, cache, counters = make_backend(tmp_path / "db", cfg)
    try:
        assert p.user_by_name(user).outcome is Outcome.FOUND
        assert p.initgroups(user).outcome is Outcome.FOUND
        yield p, cache, counters
    finally:
        p.client.close()


def _member_searches(s: Slapd, offset: int, attr: str = "member") -> list[SearchOp]:
    return [op for op in s.searches(offset) if attr.lower() in {a.lower() for a in op.attrs}]


def test_unchanged_directory_refresh_fetches_no_member_values(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    b0 = COUNTERS.get(LDAP_BYTES).amount
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        cold_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        before = _state(cache, user)
        assert before[0] == exp.initgroups(user, cfg.ldap_group_nesting_level)
        txns = counters.get(ENTRY_TXN).count

        offset = s.log_offset()
        b0 = COUNTERS.get(LDAP_BYTES).amount
        _refresh(p, cache, user)
        refresh_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        ops = s.searches(offset)
        assert ops and all(op.attrs for op in ops)  # () would mean every attribute
        # No search asked for member values; slapd's log says what each asked for.
        assert _member_searches(s, offset) == []
        # Our counters: groups checked (and the user's primary group, expired by -E
        # and validated in the first level's round trip), none fetched again, a
        # fraction of the bytes.
        assert counters.get(VALIDATE).amount == len(before[1]) + 1
        assert cache.group_by_gid(exp.primary_gid).state is State.VALID
        assert counters.get(VALIDATE_FETCHED).amount == 0
        # Groups of ~4 members here, so the stamps are a larger share than for
        # bigroupuser (measured in perf/results/*-validate: well under 15 %).
        assert 0 < refresh_bytes <= 0.2 * cold_bytes, (refresh_bytes, cold_bytes)
        # Nothing durable written (invariant 2), every answer still the same and valid.
        assert counters.get(ENTRY_TXN).count == txns
        assert _state(cache, user) == before


def test_every_kind_of_change_is_seen_after_invalidation(tmp_path, slapd_small_fresh):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        _, groups = _state(cache, user)
        direct = sorted(exp.direct_groups(user))
        changed, left, deleted, renamed = direct[:4]
        joined = next(g for g in sorted(exp.group_names()) if g not in groups)
        other = next(u for u in exp.user_names() if u not in exp.members(changed, 0))
        # A group the user is in through nesting only: its own member list changes.
        nested = next(g for g in sorted(groups) if g not in direct)
        other2 = next(u for u in exp.user_names() if u not in exp.members(nested, 9))
        # Within the second of the fetch: entryCSN tells these changes apart.
        s.ldap_modify(
            f"dn: {sc.group_dn(changed)}\nchangetype: modify\nadd: member\n"
            f"member: {sc.user_dn(other)}\n\n"
            f"dn: {sc.group_dn(nested)}\nchangetype: modify\nadd: member\n"
            f"member: {sc.user_dn(other2)}\n\n"
            f"dn: {sc.group_dn(left)}\nchangetype: modify\ndelete: member\n"
            f"member: {sc.user_dn(user)}\n\n"
            f"dn: {sc.group_dn(joined)}\nchangetype: modify\nadd: member\n"
            f"member: {sc.user_dn(user)}\n\n"
            f"dn: {sc.group_dn(deleted)}\nchangetype: delete\n\n"
            f"dn: {sc.group_dn(renamed)}\nchangetype: modrdn\n"
            f"newrdn: cn={renamed}-new\ndeleteoldrdn: 1\n\n"
        )
        offset = s.log_offset()
        _refresh(p, cache, user)
        gids, got = _state(cache, user)
        assert (gids, got) == _oracle(tmp_path, cfg, user)
        assert other in got[changed][1]
        assert other2 in got[nested][1]
        view = cache.group_by_name(left)
        assert left not in got and view.state is State.VALID and view.value is not None
        assert user not in split_members(view.value.members)
        assert joined in got
        assert deleted not in got and cache.group_by_name(deleted).value is None
        assert renamed not in got and cache.group_by_name(renamed).value is None
        assert f"{renamed}-new" in got
        # Fetched whole: the changed, joined and renamed groups (with the member
        # groups below them); `left` and `deleted` are re-read as the user left them.
        fetched = _member_searches(s, offset)
        assert fetched and counters.get(VALIDATE_FETCHED).amount >= 3
        assert counters.get(VALIDATE_FETCHED).amount < len(groups)


@pytest.mark.parametrize(
    "change", ["none", "member added", "member removed", "deleted", "due a whole read"]
)
def test_a_member_group_the_user_is_not_in_is_validated_with_its_parent(
    tmp_path, slapd_small_fresh, change
):
    """One of the user's groups lists a group the user is not in ("sibx"): the walk
    up never sees sibx, yet the parent's answer is expanded from it. After ``-E`` the
    parent was touched on its own stamp and stayed VALID with sibx's old members
    (found in review); now sibx's stamp is validated with it, and a change fetches
    the parent whole with its member groups, as a cold fetch reads it."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    parent = sorted(exp.direct_groups(user))[0]
    a, b, newbie = [u for u in sorted(exp.user_names()) if u != user][-3:]
    s.ldap_modify(
        f"dn: {sc.group_dn('sibx')}\nchangetype: add\nobjectClass: top\n"
        f"objectClass: groupOfNames\nobjectClass: posixGroup\ncn: sibx\ngidNumber: 39001\n"
        f"member: {sc.user_dn(a)}\nmember: {sc.user_dn(b)}\n\n"
        f"dn: {sc.group_dn(parent)}\nchangetype: modify\nadd: member\n"
        f"member: {sc.group_dn('sibx')}\n\n"
    )
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        before = _state(cache, user)
        assert a in before[1][parent][1] and "sibx" not in before[1]
        edit = {
            "none": "",
            "due a whole read": "",
            "member added": f"dn: {sc.group_dn('sibx')}\nchangetype: modify\nadd: member\n"
            f"member: {sc.user_dn(newbie)}\n\n",
            "member removed": f"dn: {sc.group_dn('sibx')}\nchangetype: modify\n"
            f"delete: member\nmember: {sc.user_dn(a)}\n\n",
            "deleted": f"dn: {sc.group_dn('sibx')}\nchangetype: delete\n\n",
        }[change]
        if edit:
            s.ldap_modify(edit)
        if change == "due a whole read":  # sibx alone, unchanged: read whole with its parent
            _read_whole_at(cache, "sibx", time.time() - 2 * cfg.refresh_full_interval)
        counters.reset()
        _refresh(p, cache, user)
        got = _state(cache, user)
        assert got == _oracle(tmp_path, cfg, user)
        members = got[1][parent][1]
        assert (newbie in members) is (change == "member added")
        assert (a in members) is (change in ("none", "member added", "due a whole read"))
        fetched = counters.get(VALIDATE_FETCHED).amount
        assert (fetched == 0) is (change == "none"), fetched


def test_one_changed_group_is_the_one_fetched(tmp_path, slapd_small_fresh):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        _state(cache, user)
        # A group without member groups: fetching it whole is fetching it alone.
        target = next(g for g in sorted(exp.direct_groups(user))
                      if not exp.group(g).member_groups)  # fmt: skip
        gone = sorted(u for u in exp.group(target).members if u != user)[0]
        s.ldap_modify(
            f"dn: {sc.group_dn(target)}\nchangetype: modify\ndelete: member\n"
            f"member: {sc.user_dn(gone)}\n\n"
        )
        offset = s.log_offset()
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount == 1
        # slapd's log: one search returned groups with members, that group alone; the
        # others with the member attribute looked its members up by RDN (uid=...).
        ops = [op for op in _member_searches(s, offset) if op.nentries]
        whole = [op for op in ops if "(cn=" in op.filter]
        assert len(whole) == 1 and f"(cn={target})" in whole[0].filter, ops
        assert whole[0].nentries == 1
        assert all("(uid=" in op.filter for op in ops if op not in whole), ops
        assert _state(cache, user) == _oracle(tmp_path, cfg, user)
        assert gone not in _state(cache, user)[1][target][1]


def _nested_group(exp) -> tuple[str, str]:
    """A group with member groups, and one member group below it with members."""
    for g in sorted(exp.group_names()):
        for sub in sorted(exp.group(g).member_groups):
            if exp.group(sub).members:
                return g, sub
    raise AssertionError("the generated directory has no nested group")


def _group_answer(cache, name: str) -> tuple[int, set[str]]:
    got = cache.group_by_name(name)
    assert got.value is not None and got.state is State.VALID, (name, got.state)
    return got.value.gid, set(split_members(got.value.members))


def test_expired_group_lookup_validates_by_stamps(tmp_path, slapd_small):
    # `getent group X` after -E: X and the member groups its answer is expanded from
    # are validated by their stamps in one round trip; no member value is fetched.
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = make_domain([s.uri], s.base_dn)
    top, _sub = _nested_group(exp)
    p, cache, counters = make_backend(tmp_path / "db", cfg)
    try:
        b0 = COUNTERS.get(LDAP_BYTES).amount
        assert p.group_by_name(top).outcome is Outcome.FOUND
        cold_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        before = _group_answer(cache, top)
        assert before[1] == exp.members(top, cfg.ldap_group_nesting_level)
        closure = cache.group_closure(top)
        assert closure is not None and len(closure) > 1 and closure[0] == top
        txns = counters.get(ENTRY_TXN).count
        for lookup in (lambda: p.group_by_name(top), lambda: p.group_by_gid(before[0])):
            cache.invalidate_all()
            assert cache.group_by_name(top).state is State.EXPIRED
            offset = s.log_offset()
            v0, f0 = counters.get(VALIDATE).amount, counters.get(VALIDATE_FETCHED).amount
            b0 = COUNTERS.get(LDAP_BYTES).amount
            assert lookup().outcome is Outcome.FOUND
            # slapd's log: every search asked for attributes, none for member values.
            ops = s.searches(offset)
            assert ops and all(op.attrs for op in ops)
            assert _member_searches(s, offset) == []
            # Two searches, sent together: the lookup's filter, and the member groups
            # below it by name.
            assert len(ops) == 2, ops
            # Our counters: the whole closure checked, nothing fetched, nothing durable
            # written; the group valid again, the answer the same. Its member groups
            # stay expired: their own answers reach below what was checked (found by
            # fuzzing the refresh; test_refresh_shapes.py).
            assert counters.get(VALIDATE).amount - v0 == len(closure)
            assert counters.get(VALIDATE_FETCHED).amount == f0
            assert counters.get(ENTRY_TXN).count == txns
            assert COUNTERS.get(LDAP_BYTES).amount - b0 < 0.5 * cold_bytes
            assert cache.group_by_name(top).state is State.VALID
            assert all(cache.group_by_name(g).state is State.EXPIRED for g in closure[1:])
            assert _group_answer(cache, top) == before
    finally:
        p.client.close()
        cache.close()


def test_expired_group_lookup_sees_changes_in_the_same_second(tmp_path, slapd_small_fresh):
    # A change of the group itself, and of a member group below it, each within the
    # second of the fetch (entryCSN tells them apart): fetched whole, answer exact.
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    cfg = make_domain([s.uri], s.base_dn)
    level = cfg.ldap_group_nesting_level
    top, sub = _nested_group(exp)
    p, cache, counters = make_backend(tmp_path / "db", cfg)
    try:
        assert p.group_by_name(top).outcome is Outcome.FOUND
        members = exp.members(top, level)
        outside = [u for u in sorted(exp.user_names()) if u not in members]
        for dn, added in ((sc.group_dn(top), outside[0]), (sc.group_dn(sub), outside[1])):
            s.ldap_modify(
                f"dn: {dn}\nchangetype: modify\nadd: member\nmember: {sc.user_dn(added)}\n\n"
            )
            cache.invalidate_all()
            offset = s.log_offset()
            f0 = counters.get(VALIDATE_FETCHED).amount
            assert p.group_by_name(top).outcome is Outcome.FOUND
            assert counters.get(VALIDATE_FETCHED).amount == f0 + 1
            assert _member_searches(s, offset)  # fetched whole
            members = members | {added}
            assert _group_answer(cache, top)[1] == members
        # Unchanged since: validated again, nothing fetched.
        cache.invalidate_all()
        offset = s.log_offset()
        assert p.group_by_name(top).outcome is Outcome.FOUND
        assert _member_searches(s, offset) == []
        assert _group_answer(cache, top)[1] == members
        # Deleted: not found, and gone from the cache.
        s.ldap_modify(f"dn: {sc.group_dn(top)}\nchangetype: delete\n\n")
        cache.invalidate_all()
        assert p.group_by_name(top).outcome is Outcome.NOT_FOUND
        assert cache.group_by_name(top).value is None
    finally:
        p.client.close()
        cache.close()


def test_member_renamed_without_refint_is_seen_within_the_full_interval(
    tmp_path, slapd_small_fresh
):
    # A member user's entry renamed on a server without referential integrity: the
    # group entry still names the old DN and keeps its stamp, so validation keeps the
    # old member (docs/compatibility.md §9.2). Once refresh_full_interval has passed
    # since the group was read whole, the next refresh — initgroups or a group
    # lookup — reads it whole and the member is dropped (its DN names no entry).
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    every = cfg.refresh_full_interval
    assert every > 0
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        direct = sorted(exp.direct_groups(user))
        group = next(g for g in direct if not exp.group(g).member_groups)
        gone = sorted(u for u in exp.group(group).members if u != user)[0]
        s.ldap_modify(
            f"dn: {sc.user_dn(gone)}\nchangetype: modrdn\nnewrdn: uid={gone}-new\n"
            "deleteoldrdn: 1\n\n"
        )
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount == 0
        assert gone in _state(cache, user)[1][group][1]  # the blind spot, within the bound

        def age(name: str) -> None:
            # As if refresh_full_interval had passed since it was read whole.
            _read_whole_at(cache, name, time.time() - every - 1)

        age(group)
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount == 1  # that group alone, whole
        assert gone not in _state(cache, user)[1][group][1]
        # As a cold read has it (the user's other groups, not aged, still name it).
        assert _state(cache, user)[1][group] == _oracle(tmp_path, cfg, user)[1][group]

        # A group lookup likewise: validated while fresh, read whole once aged.
        other = next(g for g in direct if g != group and not exp.group(g).member_groups)
        gone2 = sorted(u for u in exp.group(other).members if u not in (user, gone))[0]
        s.ldap_modify(f"dn: {sc.user_dn(gone2)}\nchangetype: delete\n\n")
        for aged in (False, True):
            if aged:
                age(other)
            cache.invalidate_all()
            offset = s.log_offset()
            assert p.group_by_name(other).outcome is Outcome.FOUND
            assert bool(_member_searches(s, offset)) is aged
            assert (gone2 in _group_answer(cache, other)[1]) is not aged


def _read_whole_at(cache, name: str, when: float) -> None:
    """Set when group ``name`` counts as last read whole (the timestamp store's
    read_whole record, as BackendCache.commit writes it)."""
    cache.ts.write([("read_whole", cache.key(name), READ_WHOLE.pack(when))])


def test_a_restart_keeps_when_each_group_was_read_whole(tmp_path, slapd_small_fresh):
    # When each group was last read whole is in the timestamp store: a new backend on
    # the same cache (a restart of the daemon) validates by stamps within
    # refresh_full_interval, fetching no member value, as the one that read them
    # would. A record older than the interval, one in the future (the clock moved
    # back) or none (the timestamp store recreated) makes the group read whole.
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    every = cfg.refresh_full_interval
    assert every > 0
    b0 = COUNTERS.get(LDAP_BYTES).amount
    with _resolved(tmp_path, cfg, user) as (p, cache, _):
        cold_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        before = _state(cache, user)
        cache.close()
    groups = sorted(before[1])

    p, cache, counters = make_backend(tmp_path / "db", cfg)  # the restart
    try:
        held = cache.read_whole_times(groups)
        assert sorted(held) == groups
        # `cached cache -E` / -G / -g keep them (_refresh runs -E as well).
        cache.invalidate_group(groups[0])
        cache.invalidate_all()
        assert cache.read_whole_times(groups) == held
        # Connected first (bind, root DSE), as the first process was when it refreshed.
        assert p.user_by_name(user).outcome is Outcome.FOUND
        offset = s.log_offset()
        b0 = COUNTERS.get(LDAP_BYTES).amount
        _refresh(p, cache, user)
        refresh_bytes = COUNTERS.get(LDAP_BYTES).amount - b0
        assert counters.get(VALIDATE_FETCHED).amount == 0
        assert _member_searches(s, offset) == []
        assert 0 < refresh_bytes <= 0.2 * cold_bytes, (refresh_bytes, cold_bytes)
        assert _state(cache, user) == before
        assert cache.read_whole_times(groups) == held  # validated, not read whole

        direct = sorted(exp.direct_groups(user))
        old, future = [g for g in direct if not exp.group(g).member_groups][:2]
        _read_whole_at(cache, old, time.time() - every - 1)
        _read_whole_at(cache, future, time.time() + every)
        offset = s.log_offset()
        started = time.time()
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount == 2  # those two, whole
        fetched = [op for op in _member_searches(s, offset) if op.nentries]
        assert any(f"(cn={old})" in op.filter and f"(cn={future})" in op.filter
                   for op in fetched), fetched  # fmt: skip
        again = cache.read_whole_times([old, future])
        assert all(started <= t <= time.time() for t in again.values()), again
        assert _state(cache, user) == before

        # Deleted with the group.
        s.ldap_modify(f"dn: {sc.group_dn(old)}\nchangetype: delete\n\n")
        cache.invalidate_all()
        assert p.group_by_name(old).outcome is Outcome.NOT_FOUND
        assert old not in cache.read_whole_times([old])
        groups.remove(old)
        ts_path = cache.ts_path
        cache.close()
    finally:
        p.client.close()

    # The timestamp store lost (here: removed; a damaged or unclean one is recreated
    # alike): every group is read whole, then recorded again.
    os.unlink(ts_path)
    p, cache, counters = make_backend(tmp_path / "db", cfg)
    try:
        assert cache.ts_rebuilt_reason and cache.read_whole_times(groups) == {}
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount >= len(groups)
        assert sorted(cache.read_whole_times(groups)) == groups
    finally:
        p.client.close()
        cache.close()


def test_hostile_read_whole_records_make_their_groups_read_whole(tmp_path, slapd_small):
    # The read_whole records are in the no-sync timestamp store, which anything with
    # root can write: a record that is not a sane past time (wrong size, NaN, +inf,
    # -inf, in the future) makes its group read whole at the next refresh, as no
    # record would (stamps.due), and the commit writes a sane one back. The other
    # groups, with their records as the cold read left them, are validated by stamps.
    s, exp = slapd_small.slapd, slapd_small.expected
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn)
    every = cfg.refresh_full_interval
    assert every > 0
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        before = _state(cache, user)
        direct = sorted(g for g in exp.direct_groups(user) if not exp.group(g).member_groups)
        forged = {
            "short": b"\x00" * (READ_WHOLE.size - 1),
            "long": READ_WHOLE.pack(time.time()) + b"\x00",
            "nan": READ_WHOLE.pack(float("nan")),
            "inf": READ_WHOLE.pack(float("inf")),
            "-inf": READ_WHOLE.pack(float("-inf")),
            "future": READ_WHOLE.pack(time.time() + every),
        }
        assert len(direct) > len(forged)
        hit = dict(zip(direct, forged.values(), strict=False))
        cache.ts.write([("read_whole", cache.key(g), v) for g, v in hit.items()])
        offset = s.log_offset()
        started = time.time()
        _refresh(p, cache, user)
        # Those groups alone, whole: named in the member searches, one each.
        assert counters.get(VALIDATE_FETCHED).amount == len(hit)
        fetched = " ".join(op.filter for op in _member_searches(s, offset) if op.nentries)
        assert all(f"(cn={g})" in fetched for g in hit), (sorted(hit), fetched)
        assert not any(f"(cn={g})" in fetched for g in direct if g not in hit)
        assert _state(cache, user) == before
        again = cache.read_whole_times(list(hit))
        assert sorted(again) == sorted(hit)
        assert all(started <= t <= time.time() for t in again.values()), again
        # Sane records now: the next refresh validates every group by stamps.
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount == len(hit)


def test_unpaged_stamp_searches_are_split_under_a_size_limit(tmp_path):
    # The stamp searches refresh.py sends unpaged — the walk's levels above the first
    # (walk_stamps) and a group lookup's member groups by name (refresh_group) — go out
    # together, without the paging control; a server's size limit (slapd's sizelimit,
    # Debian's default 500; 10 here) cuts them as it cuts paged ones, and the split
    # (LdapProvider._split_search_many) must still give the exact answer. u0 is in 12
    # groups g0..g11; top0..top11 each hold one of them and hub holds all 12: the
    # walk's second level (12 assertions, 13 groups) and hub's 12 member groups by
    # name are each one unpaged search past the limit.
    from testing.slapd import Slapd as _Slapd

    base = "dc=lim,dc=test"
    people, groups = f"ou=people,{base}", f"ou=groups,{base}"

    def group(cn: str, gid: int, members: list[str]) -> str:
        return (f"dn: cn={cn},{groups}\nobjectClass: groupOfNames\nobjectClass: posixGroup\n"
                f"cn: {cn}\ngidNumber: {gid}\n" + "".join(f"member: {m}\n" for m in members)
                + "\n")  # fmt: skip

    g = [f"cn=g{i},{groups}" for i in range(12)]
    ldif = (
        f"dn: {base}\nobjectClass: dcObject\nobjectClass: organization\ndc: lim\no: lim\n\n"
        + f"dn: {people}\nobjectClass: organizationalUnit\nou: people\n\n"
        + f"dn: {groups}\nobjectClass: organizationalUnit\nou: groups\n\n"
        + "".join(
            f"dn: uid=u{i},{people}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"cn: u{i}\nsn: x\nuid: u{i}\nuidNumber: {8000 + i}\ngidNumber: 5000\n"
            f"homeDirectory: /home/u{i}\n\n"
            for i in range(3)
        )
        + "".join(group(f"g{i}", 9000 + i, [f"uid=u0,{people}"]) for i in range(12))
        + "".join(group(f"top{i}", 9100 + i, [g[i]]) for i in range(12))
        + group("hub", 9200, g)
    )
    (tmp_path / "l.ldif").write_text(ldif)
    with _Slapd(tmp_path / "s", tmp_path / "l.ldif", base, sizelimit=10, deref=False) as s:
        cfg = make_domain([s.uri], base, ldap_schema="rfc2307bis",
                          ldap_group_entry_usn="entryCSN")  # fmt: skip
        assert cfg.ldap_group_nesting_level >= 2
        with _resolved(tmp_path, cfg, "u0") as (p, cache, counters):
            assert p.group_by_name("hub").outcome is Outcome.FOUND
            cold = _state(cache, "u0")
            assert cold[0] == {5000} | {9000 + i for i in range(12)} | {
                9100 + i for i in range(12)} | {9200}  # fmt: skip
            hub = _group_answer(cache, "hub")
            assert hub[1] == {"u0"}

            def cut_stamp_searches(offset: int, marker: str) -> list[SearchOp]:
                # Stamp searches (no member values asked for) the limit cut (err 4).
                return [op for op in s.searches(offset) if op.err == 4 and marker in
                        op.filter and "member" not in {a.lower() for a in op.attrs}]  # fmt: skip

            # One group changed: the refresh fetches it alone (and what is below it), exact.
            s.ldap_modify(f"dn: cn=top3,{groups}\nchangetype: modify\nadd: member\n"
                          f"member: uid=u1,{people}\n\n")  # fmt: skip
            offset = s.log_offset()
            _refresh(p, cache, "u0")
            # The second level, (member=cn=gN,...) ORed, unpaged, was cut and split.
            assert cut_stamp_searches(offset, f"(member=cn=g1,{groups})"), s.searches(offset)
            # top3 whole, with g3, its member group below it (as a group lookup reads it).
            assert counters.get(VALIDATE_FETCHED).amount == 2
            assert _state(cache, "u0") == _oracle(tmp_path, cfg, "u0")
            assert _group_answer(cache, "top3")[1] == {"u0", "u1"}

            # The group lookup: hub and its 12 member groups by name, one round trip
            # of stamps, cut and split; all unchanged, so nothing is fetched whole.
            cache.invalidate_all()
            validated = counters.get(VALIDATE).count
            offset = s.log_offset()
            assert p.group_by_name("hub").outcome is Outcome.FOUND
            assert cut_stamp_searches(offset, "(cn=g1)"), s.searches(offset)
            assert counters.get(VALIDATE).count == validated + 1
            assert counters.get(VALIDATE_FETCHED).amount == 2
            assert _member_searches(s, offset) == []
            assert _group_answer(cache, "hub") == hub
            assert cache.group_by_name("hub").state is State.VALID


def test_modify_timestamp_alone_trusts_only_old_stamps(tmp_path, slapd_small_fresh):
    # A server without entryCSN (here: an attribute it does not have is configured):
    # modifyTimestamp has one-second resolution, so the stamps of groups written
    # within STAMP_MARGIN of the fetch are not stored, and a change in the same
    # second as the fetch is seen.
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn, ldap_group_entry_usn="uSNChanged")
    with _resolved(tmp_path, cfg, user) as (p, cache, counters):
        _, groups = _state(cache, user)
        stored = cache.times("group", groups)
        assert stored and all(t.modstamp == "" and t.usn == "" for t in stored.values())
        target = sorted(exp.direct_groups(user))[0]
        other = next(u for u in exp.user_names() if u not in exp.members(target, 0))
        s.ldap_modify(
            f"dn: {sc.group_dn(target)}\nchangetype: modify\nadd: member\n"
            f"member: {sc.user_dn(other)}\n\n"
        )
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_FETCHED).amount >= len(groups)
        assert other in _state(cache, user)[1][target][1]


def test_stamp_trust_rule():
    now = calendar.timegm((2026, 11, 30, 12, 0, 0, 0, 0, 0))
    old = time.strftime("%Y%m%d%H%M%SZ", time.gmtime(now - STAMP_MARGIN - 1))
    recent = time.strftime("%Y%m%d%H%M%SZ", time.gmtime(now - STAMP_MARGIN + 1))
    assert trusted_stamp(old, "", now) == old
    assert trusted_stamp(recent, "", now) == ""  # could share its second with a change
    assert trusted_stamp(recent, "20261130120000.000001Z#000000#000#000000", now) == recent
    assert trusted_stamp("garbage", "", now) == ""
    assert trusted_stamp("", "csn", now) == ""
    assert trusted_stamp(old + "\0x", "", now) == trusted_stamp(old, "csn\0", now) == ""


@requires_nss
def test_id_after_cache_E_validates_and_sees_changes(daemon_factory, slapd_small_fresh):
    # The whole path: `id` through glibc and libnss_sss, `cached cache -E`, `id` again.
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    sc = exp.scenario
    user = exp.big_user
    d = daemon_factory(slapd_small_fresh)
    env = {"SSS_NSS_USE_MEMCACHE": "NO"}

    def groups() -> set[str]:
        r = d.run_nss(["id", "-Gn", user], env=env)
        assert r.returncode == 0, r.stderr + d.log_tail()
        return set(r.stdout.split())

    first = groups()
    assert d.cli("cache", "-E").returncode == 0
    before = d.counters()
    assert groups() == first
    after = d.counters()
    checked = after["be.validate"][2] - before.get("be.validate", [0, 0, 0])[2]
    fetched = after.get("be.validate.fetched", [0, 0, 0])[2]
    fetched -= before.get("be.validate.fetched", [0, 0, 0])[2]
    assert checked > 0 and fetched == 0

    # A direct group the user does not also reach through another one.
    direct = exp.direct_groups(user)
    left = next(g for g in sorted(direct)
                if not any(g in _parents(exp, o) for o in direct - {g}))  # fmt: skip
    joined = next(g for g in sorted(exp.group_names()) if g not in first)
    s.ldap_modify(
        f"dn: {sc.group_dn(left)}\nchangetype: modify\ndelete: member\n"
        f"member: {sc.user_dn(user)}\n\n"
        f"dn: {sc.group_dn(joined)}\nchangetype: modify\nadd: member\n"
        f"member: {sc.user_dn(user)}\n\n"
    )
    assert d.cli("cache", "-E").returncode == 0
    now = groups()
    assert joined in now and left not in now
    r = d.run_nss(["getent", "group", joined], env=env)
    assert r.returncode == 0 and user in r.stdout.strip().split(":")[3].split(",")


def _parents(exp, name: str) -> set[str]:
    """Every group ``name`` nests into, per the generated directory."""
    out: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        for g in exp.group_names():
            if cur in exp.group(g).member_groups and g not in out:
                out.add(g)
                todo.append(g)
    return out


def test_rfc2307_refresh_validates_by_the_memberuid_search(tmp_path, tmp_path_factory, small_2307):
    # rfc2307: the memberUid=<name> search still runs, returning stamps only; a group
    # whose memberUid list changed is fetched whole, the others are not.
    exp = small_2307.expected
    sc = exp.scenario
    user = exp.big_user
    with Slapd(tmp_path_factory.mktemp("s2307"), small_2307.ldif, exp.base_dn) as s:
        cfg = make_domain([s.uri], s.base_dn, ldap_schema="rfc2307")
        with _resolved(tmp_path, cfg, user) as (p, cache, counters):
            _, groups = _state(cache, user)
            offset = s.log_offset()
            _refresh(p, cache, user)
            assert _member_searches(s, offset, "memberUid") == []
            assert counters.get(VALIDATE_FETCHED).amount == 0
            assert _state(cache, user)[1] == groups

            target = sorted(exp.direct_groups(user))[0]
            other = next(u for u in exp.user_names() if u not in exp.members(target, 0))
            s.ldap_modify(
                f"dn: {sc.group_dn(target)}\nchangetype: modify\nadd: memberUid\n"
                f"memberUid: {other}\n\n"
            )
            offset = s.log_offset()
            _refresh(p, cache, user)
            assert counters.get(VALIDATE_FETCHED).amount == 1
            fetched = [op for op in _member_searches(s, offset, "memberUid") if op.nentries]
            assert len(fetched) == 1 and f"(cn={target})" in fetched[0].filter
            assert _state(cache, user) == _oracle(tmp_path, cfg, user)
            assert other in _state(cache, user)[1][target][1]
