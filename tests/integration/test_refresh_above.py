"""The revalidation by stamps above the first level from one stamps-only group sweep
(cached/ldap/above.py), against a real slapd: nothing changed, no walk-up OR and no
member value; each kind of change above the first level seen, the answer and every
stored group equal to a cold walk's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cached.counters import VALIDATE_ABOVE, VALIDATE_FETCHED
from cached.ldap.client import LdapClient
from cached.ldap.exchange import Search
from cached.ldap.sweep import Record, Records
from testing.backend import make_backend, make_domain, stored_gids, stored_members
from testing.slapd import Slapd
from tests.integration.test_refresh import _oracle, _refresh, _state


class _Searches:
    """Every search the provider sends, as sent."""

    def __init__(self, client: LdapClient) -> None:
        self.sent: list[Search] = []
        self._client = client
        self._search_many = client.search_many
        client.search_many = self  # type: ignore[method-assign]

    def stop(self) -> None:
        self._client.search_many = self._search_many  # type: ignore[method-assign]

    def __call__(self, specs: list[Search], *args: Any, **kw: Any) -> Any:
        self.sent += specs
        return self._search_many(specs, *args, **kw)

    def member_terms(self) -> int:
        """``(member=DN)`` assertions sent (the walk's ORs: one per group DN)."""
        return sum(sp.filt.count("(member=") for sp in self.sent)

    def member_values_asked(self) -> list[Search]:
        return [sp for sp in self.sent if "member" in {a.lower() for a in sp.attrs}]

    def stamp_sweeps(self) -> int:
        return sum(1 for sp in self.sent if "(!(member=" in sp.filt)


def test_bigroupuser_revalidates_above_its_first_level_by_one_stamp_sweep(tmp_path, slapd_big):
    """After ``cached cache -E``, bigroupuser's groups above its 2,000 direct ones
    come from one stamps-only sweep of the 1,000 others, vouched for by the record the
    cold walk's group sweep left: two ``(member=`` assertions (the first level's and
    the sweep's negation of it) in place of ~2,080 in three ORs, no member value, and
    the same answers."""
    s, exp = slapd_big.slapd, slapd_big.expected
    cfg = make_domain([s.uri], s.base_dn)
    p, cache, counters = make_backend(tmp_path / "db", cfg)
    assert p.user_by_name("bigroupuser").outcome.name == "FOUND"
    assert p.initgroups("bigroupuser").outcome.name == "FOUND"
    before = _state(cache, "bigroupuser")
    assert before[0] == exp.initgroups("bigroupuser", cfg.ldap_group_nesting_level)
    for _again in range(2):  # from the cold walk's record, then from its own
        spy = _Searches(p.client)
        offset = s.log_offset()
        counters.reset()
        _refresh(p, cache, "bigroupuser")
        spy.stop()
        assert spy.member_terms() == 2, [sp.filt[:80] for sp in spy.sent]
        assert spy.stamp_sweeps() == 1
        assert spy.member_values_asked() == []
        assert [op for op in s.searches(offset) if "member" in op.attrs] == []
        assert counters.get(VALIDATE_ABOVE).count == 1
        assert counters.get(VALIDATE_FETCHED).amount == 0
        assert _state(cache, "bigroupuser") == before
    # Records lost (a restart): the walk searches with ORs once, after one sweep of
    # its own, and records; the next revalidation is the sweep's alone again.
    p.sweeps.above = Records()
    for ors, shortcut in ((True, 0), (False, 1)):
        spy = _Searches(p.client)
        counters.reset()
        _refresh(p, cache, "bigroupuser")
        spy.stop()
        assert (spy.member_terms() > 2000, spy.stamp_sweeps()) == (ors, 1)
        assert counters.get(VALIDATE_ABOVE).count == shortcut
        assert _state(cache, "bigroupuser") == before


def _backend(tmp: Path, cfg: Any) -> tuple[Any, Any, Any]:
    """A backend whose group sweeps go out for any user of the small directory."""
    p, cache, counters = make_backend(tmp, cfg)
    p.sweeps.tunables = replace(p.sweeps.tunables, groups_min=1, groups_factor=1000)
    return p, cache, counters


def _cold(tmp: Path, fresh: Any) -> tuple[Any, ...]:
    """The small directory's big user looked up cold by a backend whose group sweeps
    go out for anyone: (slapd, expected, domain, provider, cache, counters)."""
    s, exp = fresh.slapd, fresh.expected
    cfg = make_domain([s.uri], s.base_dn)
    p, cache, counters = _backend(tmp / "db", cfg)
    assert p.user_by_name(exp.big_user).outcome.name == "FOUND"
    assert p.initgroups(exp.big_user).outcome.name == "FOUND"
    return s, exp, cfg, p, cache, counters


def _nested(exp: Any, user: str, groups: dict[str, Any]) -> list[str]:
    """The user's groups above its first level (not direct), sorted."""
    direct = exp.direct_groups(user)
    return sorted(g for g in groups if g not in direct)


CHANGES = [
    "direct group added to an unrelated group",
    "nested membership removed",
    "nested group deleted",
    "nested group renamed",
    "new group holding a direct group",
    "member added to a direct group",
    "user joins an unrelated group",
]


@pytest.mark.parametrize("change", CHANGES)
def test_each_change_above_the_first_level_is_seen(tmp_path, slapd_small_fresh, change):
    """The small directory's big user (nesting 3 deep), the group sweep forced: an
    unchanged directory revalidates above the first level from the sweep alone; then
    each change there makes the sweep differ from the record, the walk searches, and
    answers and stored groups equal a cold walk's; the walk's new record serves the
    next revalidation."""
    s, exp, cfg, p, cache, counters = _cold(tmp_path, slapd_small_fresh)
    sc, user = exp.scenario, exp.big_user
    before = _state(cache, user)
    counters.reset()
    spy = _Searches(p.client)
    _refresh(p, cache, user)
    assert counters.get(VALIDATE_ABOVE).count == 1 and spy.stamp_sweeps() == 1
    assert spy.member_values_asked() == [] and _state(cache, user) == before

    groups = before[1]
    direct = sorted(exp.direct_groups(user))
    nested = _nested(exp, user, groups)
    assert nested, "the big user has groups above its first level"
    # A nested group and a member group of it the user is in (the edge walked up).
    parent, child = next(
        (n, c) for n in nested for c in sorted(exp.group(n).member_groups) if c in groups
    )
    unrelated = next(g for g in sorted(exp.group_names()) if g not in groups)
    edit = {
        "direct group added to an unrelated group": f"dn: {sc.group_dn(unrelated)}\n"
        f"changetype: modify\nadd: member\nmember: {sc.group_dn(direct[0])}\n\n",
        "nested membership removed": f"dn: {sc.group_dn(parent)}\nchangetype: modify\n"
        f"delete: member\nmember: {sc.group_dn(child)}\n\n",
        "nested group deleted": f"dn: {sc.group_dn(parent)}\nchangetype: delete\n\n",
        "nested group renamed": f"dn: {sc.group_dn(parent)}\nchangetype: modrdn\n"
        f"newrdn: cn={parent}-new\ndeleteoldrdn: 1\n\n",
        "new group holding a direct group": f"dn: {sc.group_dn('above-new')}\n"
        "changetype: add\nobjectClass: top\nobjectClass: groupOfNames\n"
        "objectClass: posixGroup\ncn: above-new\ngidNumber: 39002\n"
        f"member: {sc.group_dn(direct[-1])}\n\n",
        # A first-level group's own member list: it could now name a walked group.
        "member added to a direct group": f"dn: {sc.group_dn(direct[0])}\n"
        f"changetype: modify\nadd: member\nmember: {sc.group_dn(unrelated)}\n\n",
        "user joins an unrelated group": f"dn: {sc.group_dn(unrelated)}\n"
        f"changetype: modify\nadd: member\nmember: {sc.user_dn(user)}\n\n",
    }[change]
    s.ldap_modify(edit)
    counters.reset()
    spy.sent.clear()
    _refresh(p, cache, user)
    got = _state(cache, user)
    assert got == _oracle(tmp_path, cfg, user)
    assert got != before  # the change reached the answer
    assert counters.get(VALIDATE_ABOVE).count == 0  # the walk searched
    assert spy.member_terms() > 2
    for name in got[1]:
        view = cache.group_by_name(name).value
        assert view is not None and stored_members(cache, name) == got[1][name][1]
    # Recorded again by that walk: the next revalidation needs no OR.
    counters.reset()
    spy.sent.clear()
    _refresh(p, cache, user)
    assert counters.get(VALIDATE_ABOVE).count == 1 and spy.member_terms() == 2
    assert _state(cache, user) == got
    assert stored_gids(cache, user) == got[0]


def test_stamps_the_trust_rule_does_not_believe_make_no_record(tmp_path, slapd_small_fresh):
    """modifyTimestamp alone (the configured USN attribute is not the server's), on
    groups written within STAMP_MARGIN: nothing recorded, the walk searches each time."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    user = exp.big_user
    cfg = make_domain([s.uri], s.base_dn, ldap_group_entry_usn="uSNChanged")
    p, cache, counters = _backend(tmp_path / "db", cfg)
    assert p.user_by_name(user).outcome.name == "FOUND"
    assert p.initgroups(user).outcome.name == "FOUND"
    before = _state(cache, user)
    for _again in range(2):
        counters.reset()
        spy = _Searches(p.client)
        _refresh(p, cache, user)
        spy.stop()
        assert spy.stamp_sweeps() == 1 and spy.member_terms() > 2
        assert counters.get(VALIDATE_ABOVE).count == 0
        assert p.sweeps.above.get(cache.key(user)) is None
        assert _state(cache, user) == before


def test_records_keep_the_most_recently_used_users():
    rec = Record("uid=a", b"f", b"s", 3, {}, {})
    kept = Records(size=2)
    kept.put(b"a", rec)
    kept.put(b"b", rec)
    assert kept.get(b"a") is rec  # now the most recently used
    kept.put(b"c", rec)
    assert kept.get(b"b") is None and kept.get(b"a") is rec and kept.get(b"c") is rec
    kept.put(b"a", None)  # a record not made drops the old one
    assert kept.get(b"a") is None


def test_a_sweep_past_its_record_drops_it(tmp_path, slapd_small_fresh):
    """Two groups more than the record's sweep held: the sweep stops at its bound
    (one past the record's count), the walk searches, exact; the record dropped, the
    next revalidation sweeps as the cold walk would (due) and records, and the one
    after needs no OR."""
    s, exp, cfg, p, cache, counters = _cold(tmp_path, slapd_small_fresh)
    sc, user = exp.scenario, exp.big_user
    before = _state(cache, user)
    # The record is made after the answer (the service runs after_answer once it is
    # sent; the other tests leave it to the next request, which runs it first).
    assert p.sweeps.above.get(cache.key(user)) is None
    p.after_answer()
    assert p.sweeps.above.get(cache.key(user)) is not None
    other = next(u for u in exp.user_names() if u != user)
    s.ldap_modify(
        "".join(
            f"dn: {sc.group_dn(f'more{i}')}\nchangetype: add\nobjectClass: top\n"
            f"objectClass: groupOfNames\nobjectClass: posixGroup\ncn: more{i}\n"
            f"gidNumber: {39010 + i}\nmember: {sc.user_dn(other)}\n\n"
            for i in range(2)
        )
    )
    for ors, shortcut, recorded in ((True, 0, False), (True, 0, True), (False, 1, True)):
        counters.reset()
        spy = _Searches(p.client)
        _refresh(p, cache, user)
        spy.stop()
        assert (spy.member_terms() > 2, spy.stamp_sweeps()) == (ors, 1)
        assert counters.get(VALIDATE_ABOVE).count == shortcut
        assert (p.sweeps.above.get(cache.key(user)) is not None) is recorded
        assert _state(cache, user) == before == _oracle(tmp_path, cfg, user)
    assert p.sweeps.groups_at_least > 0  # the first stopped at its bound


def test_a_stamp_sweep_cut_by_the_servers_size_limit_is_not_trusted(tmp_path, small_2307bis):
    """slapd's sizelimit (as Debian ships it: every client but the rootdn) equal to the
    groups that do not list the big user: the cold walk's group sweep and an unchanged
    revalidation's stamp sweep fit under it. A group added above the first level (the
    user gains it) takes the stamp sweep past the limit: slapd cuts it after the same
    entries, same stamps, as the record's (the new entry comes last), and says so
    (sizeLimitExceeded below the sweep's own bound). The walk searches with ORs, exact
    as a cold walk; the record is dropped and no group sweep goes out again on this
    domain, so the next revalidation, after another change above the first level,
    searches too and is exact."""
    exp = small_2307bis.expected
    sc, user = exp.scenario, exp.big_user
    others = len(exp.group_names()) - len(exp.direct_groups(user))
    with Slapd(tmp_path / "s", small_2307bis.ldif, sc.base_dn, sizelimit=others) as s:
        cfg = make_domain([s.uri], s.base_dn)
        p, cache, counters = _backend(tmp_path / "db", cfg)
        assert p.user_by_name(user).outcome.name == "FOUND"
        assert p.initgroups(user).outcome.name == "FOUND"
        p.after_answer()
        key = cache.key(user)
        rec = p.sweeps.above.get(key)
        assert rec is not None and rec.count == others  # the cold sweep was not cut
        before = _state(cache, user)
        counters.reset()
        _refresh(p, cache, user)
        assert counters.get(VALIDATE_ABOVE).count == 1 and _state(cache, user) == before

        direct = sorted(exp.direct_groups(user))
        s.ldap_modify(
            f"dn: {sc.group_dn('above-new')}\nchangetype: add\nobjectClass: top\n"
            "objectClass: groupOfNames\nobjectClass: posixGroup\ncn: above-new\n"
            f"gidNumber: 39002\nmember: {sc.group_dn(direct[0])}\n\n"
        )
        counters.reset()
        spy = _Searches(p.client)
        _refresh(p, cache, user)
        spy.stop()
        got = _state(cache, user)
        assert 39002 in got[0] and got == _oracle(tmp_path, cfg, user)
        assert spy.stamp_sweeps() == 1 and spy.member_terms() > 2  # cut: the walk searched
        assert counters.get(VALIDATE_ABOVE).count == 0
        assert p.sweeps.groups_cut and p.sweeps.above.get(key) is None

        # The groups above the first level change again: no sweep, no record trusted.
        groups = before[1]
        parent, child = next(
            (n, c)
            for n in _nested(exp, user, groups)
            for c in sorted(exp.group(n).member_groups)
            if c in groups
        )
        s.ldap_modify(
            f"dn: {sc.group_dn(parent)}\nchangetype: modify\n"
            f"delete: member\nmember: {sc.group_dn(child)}\n\n"
        )
        counters.reset()
        spy = _Searches(p.client)
        _refresh(p, cache, user)
        spy.stop()
        again = _state(cache, user)
        assert again == _oracle(tmp_path, cfg, user) and again != got
        assert spy.stamp_sweeps() == 0 and spy.member_terms() > 2
        assert counters.get(VALIDATE_ABOVE).count == 0
        assert p.sweeps.above.get(key) is None
