"""Members named by one bounded sweep of the user bases (LdapProvider._sweep_users),
against a real slapd: the walk's first level without the deref control when a sweep
is possible, one sweep per request, its bound and its fallbacks (deref, look-ups),
and the same exact answers whichever way members were named. The awkward shapes
(dangling, out-of-base, device and id-less members) go through the sweep in
tests/integration/test_exactness.py."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cached.cache import State
from cached.ldap.client import LdapClient
from cached.ldap.exchange import LdapLimitExceeded, LdapTooMany, Search
from cached.ldap.provider import LdapProvider, Outcome
from cached.ldap.walk import Walk
from testing.backend import make_backend, make_domain, stored_gids, stored_members
from testing.ldif import group_entry, user_entry
from testing.slapd import Slapd


class _Spy:
    """Every search the provider sends: (filter, max_entries, deref asked)."""

    def __init__(self, client: LdapClient) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.stopped = 0  # searches stopped at their max_entries (a sweep's bound)
        self.unpaged = 0  # sweeps sent unpaged, bounded by their own sizeLimit
        self.batches: list[list[Search]] = []  # the searches of each call, sent together
        self._search_many = client.search_many
        client.search_many = self  # type: ignore[method-assign]

    def __call__(self, specs: list[Search], *args: Any, **kw: Any) -> Any:
        self.batches.append(list(specs))
        # A sweep is bounded: paged by max_entries, unpaged by its own sizeLimit.
        self.unpaged += sum(1 for sp in specs if sp.size_limit and not sp.paged)
        self.calls += [
            (sp.filt, sp.max_entries or sp.size_limit, bool(sp.deref_specs)) for sp in specs
        ]
        try:
            got = self._search_many(specs, *args, **kw)
        except LdapTooMany:
            self.stopped += 1
            raise
        # An unpaged sweep stopped at its own sizeLimit (one entry past the cap).
        self.stopped += sum(
            1
            for sp, a in zip(specs, got, strict=True)
            if sp.size_limit and isinstance(a, LdapLimitExceeded) and a.partial == sp.size_limit
        )
        return got

    def sweeps(self) -> int:
        """Sweeps of the user bases."""
        return sum(1 for filt, cap, _d in self.calls if cap and "(!(member=" not in filt)

    def group_sweeps(self) -> int:
        """Group sweeps (Sweeps.group_searches): the groups the first level did not
        return."""
        return sum(1 for filt, cap, _d in self.calls if cap and "(!(member=" in filt)

    def member_terms(self) -> int:
        """``(member=DN)`` assertions sent: slapd tests a walk-up search's candidates
        against them one by one."""
        return sum(filt.count("(member=") for filt, _c, _d in self.calls)

    def derefs(self) -> int:
        return sum(1 for *_, d in self.calls if d)

    def clear(self) -> None:
        self.calls.clear()
        self.batches.clear()
        self.stopped = self.unpaged = 0


def _backend(tmp: Path, slapd: Any, **opts: Any) -> tuple[LdapProvider, Any, _Spy]:
    s = slapd.slapd
    p, cache, _ = make_backend(tmp, make_domain([s.uri], s.base_dn, **opts))
    return p, cache, _Spy(p.client)






def test_small_directory_exact_when_every_request_sweeps(tmp_path, slapd_small):
    """A sweep for any unknown member: every answer at level 2 is the expected one,
    at most one sweep per request, and the walk's first level goes without deref."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    # never past the bound here: 31 users
    p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
    swept = 0
    for name in exp.user_names():
        assert p.user_by_name(name).outcome is Outcome.FOUND
        spy.clear()
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
        assert spy.sweeps() <= 1, spy.calls
        swept += spy.sweeps()
        if spy.sweeps():
            assert spy.derefs() == 0, spy.calls  # named by the sweep, not by deref
    assert swept > 0  # the sweep path was taken, not skipped
    # Group lookups on an empty cache: a group the initgroups above stored would be
    # validated by its stamp, with no member to name (refresh.refresh_group).
    p, cache, spy = _backend(tmp_path / "groups", slapd_small)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
    swept = 0
    for name in exp.group_names():
        spy.clear()
        assert p.group_by_name(name).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, 2), name
        assert cache.group_by_name(name).state is State.VALID
        assert spy.sweeps() <= 1, spy.calls
        swept += spy.sweeps()
    assert swept > 0


def test_a_sweep_asking_one_attribute_twice_names_members_as_any_other(tmp_path, slapd_small):
    """``ldap_user_gid_number = uidNumber`` (user private groups): the sweep asks for
    uidNumber twice, as the user's uid and as its gid; the rows are read by the generic
    reader (deref.RowShape has one slot per type: it raised, and every lookup that
    swept failed). Found by fuzzing the sweep's naming."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small, ldap_user_gid_number="uidNumber")
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
    swept = 0
    for name in exp.group_names():
        spy.clear()
        assert p.group_by_name(name).outcome is Outcome.FOUND, name
        assert stored_members(cache, name) == exp.members(name, 2), name
        swept += spy.sweeps()
    assert swept > 0  # the sweep path was taken
    user = exp.user_names()[0]
    assert p.user_by_name(user).outcome is Outcome.FOUND
    u = cache.user_by_name(user).value
    assert u is not None and u.gid == u.uid


def test_sweep_gives_up_at_its_bound_and_deref_names_the_members(tmp_path, slapd_small):
    """A bound below the directory's users: the sweep stops at it (pages of 2, so it
    stops early, not after everything), and the deref control or the look-ups name
    the members instead, as exactly."""
    exp = slapd_small.expected
    big = max(exp.group_names(), key=lambda g: len(exp.members(g, 0)))
    p, cache, spy = _backend(tmp_path / "b", slapd_small, ldap_page_size=2,
                             ldap_deref_threshold=1)  # fmt: skip
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    # as many users as unknown members: fewer than exist
    p.sweeps.tunables = replace(p.sweeps.tunables, factor=1)
    offset = slapd_small.slapd.log_offset()
    assert p.group_by_name(big).outcome is Outcome.FOUND
    assert stored_members(cache, big) == exp.members(big, 2)
    assert spy.sweeps() == 1, spy.calls
    assert spy.stopped == 1  # it gave up at the bound: nothing named from it
    # The base search with the deref control on the group named its members.
    assert exp.group(big).dn in [op.base for op in slapd_small.slapd.searches(offset)]
    for name in exp.user_names():
        spy.clear()
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
        assert spy.stopped == spy.sweeps(), name  # every sweep stopped at its bound


def test_no_sweep_unpaged(tmp_path, slapd_small):
    """ldap_page_size = 0: nothing could stop a sweep at its bound, so none runs; the
    deref control names members on every level, and the answers are exact."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small, ldap_page_size=0)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    for name in exp.user_names():
        spy.clear()
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
        assert spy.sweeps() == 0 and spy.derefs() >= 1, spy.calls
    for name in exp.group_names():
        assert p.group_by_name(name).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, 2), name


def test_bigroupuser_swept_once_and_never_dereferenced(tmp_path, slapd_big):
    """The default path on bigroupuser: 5,000 unknown members after the first level,
    one sweep of the user base names them, and no search carries the deref control
    (which returned one result per member value: 42,000 for 5,000 users)."""
    exp = slapd_big.expected
    p, cache, spy = _backend(tmp_path / "i", slapd_big)
    assert p.initgroups("bigroupuser").outcome is Outcome.FOUND
    assert stored_gids(cache, "bigroupuser") == exp.initgroups("bigroupuser", 2)
    assert (spy.sweeps(), spy.group_sweeps(), spy.stopped, spy.derefs()) == (1, 1, 0, 0), spy.calls
    p, cache, spy = _backend(tmp_path / "g", slapd_big)
    assert p.group_by_name("large01").outcome is Outcome.FOUND
    assert stored_members(cache, "large01") == exp.members("large01", 2)
    assert (spy.sweeps(), spy.derefs()) == (1, 0), spy.calls


def test_bigroupuser_sweep_goes_out_unpaged_with_the_walk(tmp_path, slapd_big):
    """The sweep is one unpaged search bounded by its own sizeLimit, sent with the
    level-2 walk-up searches (several message IDs outstanding): slapd logs one
    operation returning every user, not pages of 1,000 one after the other."""
    exp = slapd_big.expected
    server = slapd_big.slapd
    p, cache, spy = _backend(tmp_path, slapd_big)
    offset = server.log_offset()
    assert p.initgroups("bigroupuser").outcome is Outcome.FOUND
    assert stored_gids(cache, "bigroupuser") == exp.initgroups("bigroupuser", 2)
    (batch,) = [b for b in spy.batches if any(sp.size_limit for sp in b)]
    sweep = batch[0]
    assert not sweep.paged and sweep.size_limit > len(exp.user_names()), batch
    # Sent together with the walk's next level (the group sweep that finds it), unpaged too.
    walk = [sp for sp in batch[1:] if "(member=" in sp.filt]
    assert walk and not any(sp.paged for sp in walk), batch
    ops = server.searches(offset)
    swept = [op for op in ops if op.filter == sweep.filt]
    assert [op.nentries for op in swept] == [len(exp.user_names())], swept
    # Whether slapd begins the walk-up search before it has sent the last user
    # depends on the scheduler (a loaded machine may let the sweep finish first):
    # what the client sent together (the batch above) is the test, not the log's order.


def test_a_sweep_that_gave_up_is_not_tried_again_for_as_many_members(tmp_path, slapd_small):
    """A sweep stopped past its bound shows the bases hold more users than it: the
    next request with as many unknown members does not sweep again (the kill soak's
    log showed each group lookup of 1,000 unknown members reading 2,000 users in vain)."""
    exp = slapd_small.expected
    p, _cache, spy = _backend(tmp_path, slapd_small)
    p.client.connect()  # the root DSE: paging offered, so a sweep is possible
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1, factor=1)
    wanted = len(exp.user_names()) // 2  # a bound the 31 users pass
    base = slapd_small.slapd.base_dn
    for _request in range(3):
        w = p._walk(0.0)  # a new request: a walk of its own, nothing swept
        lookup = {f"uid=nobody{i},ou=people,{base}": (f"uid=nobody{i},ou=people,{base}", 0)
                  for i in range(wanted)}  # fmt: skip
        w.sweep_users(lookup, {})
        assert len(lookup) == wanted  # left to the look-ups: the sweep named none
    assert (spy.sweeps(), spy.stopped) == (1, 1), spy.calls


def test_a_sweep_answered_in_full_at_its_size_limit_names_the_members(tmp_path, slapd_small):
    """Its bound one short of the directory's users: the unpaged sweep's sizeLimit
    (bound + 1) is every user, and slapd answers in full (success, not
    sizeLimitExceeded). Every user is then read: the members are named from the
    rows, not given up to deref with the same users read twice."""
    exp = slapd_small.expected
    p, _cache, spy = _backend(tmp_path, slapd_small)
    p.client.connect()  # the root DSE: paging offered, so a sweep is possible
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1, factor=1)
    users = [exp.user(n).dn for n in exp.user_names()]
    wanted = users[: len(users) - 1]  # the bound: one user fewer than the base holds
    lookup = {dn.lower(): (dn, 0) for dn in wanted}
    known: dict[str, Any] = {}
    p._walk(0.0).sweep_users(lookup, known)
    assert (spy.sweeps(), spy.stopped, spy.unpaged) == (1, 0, 1), spy.calls
    assert lookup == {}  # every member named by the sweep
    assert len(known) == len(wanted) and p.sweeps.users_at_least == 0


@pytest.mark.parametrize("why", ["too-few-to-sweep", "sweep-gave-up"])
def test_first_level_again_with_deref_when_members_are_left(tmp_path, slapd_small, why):
    """The first level went without deref for a sweep that did not name its members:
    too few of them for one, or it gave up at its bound. Hundreds left unnamed (here:
    any) make its search run again with the control, not look-up batches (their cost
    on slapd grows with the square of their size); every answer stays exact."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small)
    p.sweeps.tunables = replace(p.sweeps.tunables, deref_again_min=1)
    if why == "sweep-gave-up":
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1, factor=1)
    else:
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=10**9)
    again = 0
    for name in exp.user_names():
        spy.clear()
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
        # The user's own groups, (member=<the user's DN>): first without deref.
        mine = [d for f, _cap, d in spy.calls if "(member=uid=" in f]
        assert mine and not mine[0], spy.calls
        again += sum(mine[1:])
        assert spy.stopped == spy.sweeps(), spy.calls
    assert again > 0  # the first level's search ran again, with deref
    for name in exp.group_names():
        assert p.group_by_name(name).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, 2), name


@pytest.mark.parametrize("first", ["users", "groups"])
def test_a_sweep_cut_by_a_server_size_limit_names_the_members_otherwise(
    tmp_path, small_2307bis, first
):
    """Debian's slapd caps every search at its sizelimit, paged ones included: a sweep
    of more users is cut, the unpaged one (below the sizeLimit it asked; sent ahead
    of the entries that call for it) and then the paged one. The
    lookup does not fail: its members are named by deref or the look-ups, exactly,
    and no sweep is tried again (each would be cut)."""
    exp = small_2307bis.expected
    with Slapd(tmp_path / "s", small_2307bis.ldif, exp.base_dn, sizelimit=10) as s:
        p, cache, _ = make_backend(tmp_path / "db", make_domain([s.uri], s.base_dn))
        spy = _Spy(p.client)
        ahead = _AheadSpy(p.client)
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
        # the bound never stops it: the server's limit does
        p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
        for kind in (first, "groups" if first == "users" else "users"):
            if kind == "users":
                for name in exp.user_names():
                    assert p.initgroups(name).outcome is Outcome.FOUND, name
                    assert stored_gids(cache, name) == exp.initgroups(name, 2), name
            else:
                for name in exp.group_names():
                    assert p.group_by_name(name).outcome is Outcome.FOUND, name
                    assert stored_members(cache, name) == exp.members(name, 2), name
        # The first (unpaged) sweep went out ahead of the entries that called for it
        # (a group's, or an initgroups walk's first round), was cut, and none after.
        assert len(ahead.sent) == 1, ahead.sent
        assert p.sweeps.cut
        # Unpaged once, then paged once (the fallback), then never again.
        assert (spy.sweeps(), spy.unpaged) == (2, 1), spy.calls
        assert p.limit_error == ""  # `cached status` shows no lookup cut by a limit


class _AheadSpy:
    """The searches the provider sends ahead (client.send_ahead)."""

    def __init__(self, client: LdapClient) -> None:
        self.sent: list[list[Search]] = []
        self._send_ahead = client.send_ahead
        client.send_ahead = self  # type: ignore[method-assign]

    def __call__(self, specs: list[Search]) -> None:
        self.sent.append(list(specs))
        self._send_ahead(specs)


@pytest.mark.parametrize("people", ["uid", "cn"])
def test_a_big_groups_sweep_goes_out_before_its_entry_is_read(
    tmp_path, slapd_big, slapd_big_cn, people
):
    """Cold ``getent group large01``: its 5,000 member values call for the sweep, sent
    ahead as soon as the group's answer is in (the server sends the users while the
    member DNs are keyed), and read by the one search_many that asks for it: slapd
    runs it once, and the answer is exact, with people named ``uid=`` or ``cn=Full
    Name``."""
    d = slapd_big if people == "uid" else slapd_big_cn
    exp, server = d.expected, d.slapd
    p, cache, spy = _backend(tmp_path, d)
    ahead = _AheadSpy(p.client)
    offset = server.log_offset()
    assert p.group_by_name("large01").outcome is Outcome.FOUND
    assert stored_members(cache, "large01") == exp.members("large01", 2)
    (sweep,) = ahead.sent
    assert len(sweep) == 1 and sweep[0].size_limit and not sweep[0].paged, sweep
    # The spy sees the Search objects that were sent ahead, asked for once.
    assert [b for b in spy.batches if any(x is sweep[0] for x in b)] == [sweep], spy.batches
    ops = [op for op in server.searches(offset) if op.filter == sweep[0].filt]
    assert [op.nentries for op in ops] == [len(exp.user_names())], ops


def test_no_sweep_ahead_for_a_group_whose_members_the_cache_may_hold(tmp_path, slapd_small):
    """Members that may be stored (the cache holds as many DNs as the group has
    member values) may be named from the cache, with no sweep: none goes out ahead.
    On an empty cache the same lookup sends it ahead."""
    exp = slapd_small.expected
    big = max(exp.group_names(), key=lambda g: len(exp.members(g, 0)))
    for cached_users in (False, True):
        p, cache, _spy = _backend(tmp_path / str(cached_users), slapd_small)
        ahead = _AheadSpy(p.client)
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
        p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
        if cached_users:
            for name in exp.user_names():
                assert p.user_by_name(name).outcome is Outcome.FOUND
            assert cache.dn_count() >= len(exp.group(big).members)
        assert p.group_by_name(big).outcome is Outcome.FOUND
        assert stored_members(cache, big) == exp.members(big, 2)
        assert bool(ahead.sent) is not cached_users, ahead.sent


def test_a_sweep_sent_ahead_for_a_group_not_answered_is_read_and_dropped(tmp_path, slapd_small):
    """The group's entry turns out not to be answered (its gid past max_id) after its
    sweep went out: the lookup is NOT_FOUND, the sweep's answer is read and dropped
    before the lookup returns (no slapd thread left writing to a connection nobody
    reads), and the connection serves the next lookup."""
    exp = slapd_small.expected
    server = slapd_small.slapd
    big = max(exp.group_names(), key=lambda g: len(exp.members(g, 0)))
    p, _cache, _spy = _backend(tmp_path, slapd_small, max_id=exp.group(big).gid - 1)
    ahead = _AheadSpy(p.client)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=1)
    p.sweeps.tunables = replace(p.sweeps.tunables, factor=100)
    offset = server.log_offset()
    assert p.group_by_name(big).outcome is Outcome.NOT_FOUND
    assert ahead.sent
    ops = server.searches(offset)
    assert [op.filter for op in ops].count(ahead.sent[0][0].filt) == 1, ops
    conn = p.client.conn
    assert conn is not None
    sock = conn.socket
    assert sock is not None
    was = sock.gettimeout()
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing of the sweep's answer left unread
        sock.recv(1, socket.MSG_PEEK)
    sock.settimeout(was)
    user = exp.user_names()[0]
    assert p.user_by_name(user).outcome is Outcome.FOUND
    assert p.client.conn is conn


@pytest.mark.parametrize("people", ["uid", "cn"])
def test_a_walks_sweep_goes_out_ahead_of_the_round_that_reads_it(
    tmp_path, slapd_big, slapd_big_cn, people
):
    """Cold initgroups of bigroupuser: the user's 2,000 groups (the walk's first round,
    without deref) hold 5,000 distinct member values. The sweep goes out as soon as
    that answer is in, while the entries are keyed and classified, and the next
    round's search_many, with the walk's next level, reads it: slapd runs it once,
    and the gids are exact, with people named ``uid=`` or ``cn=Full Name``."""
    d = slapd_big if people == "uid" else slapd_big_cn
    exp, server = d.expected, d.slapd
    p, cache, spy = _backend(tmp_path, d)
    ahead = _AheadSpy(p.client)
    offset = server.log_offset()
    assert p.initgroups(exp.big_user).outcome is Outcome.FOUND
    assert stored_gids(cache, exp.big_user) == exp.initgroups(exp.big_user, 2)
    (sweep,) = ahead.sent
    (batch,) = [b for b in spy.batches if any(x is sweep[0] for x in b)]
    assert any("(member=" in x.filt for x in batch), batch  # with the walk's next level
    ops = [op for op in server.searches(offset) if op.filter == sweep[0].filt]
    assert [op.nentries for op in ops] == [len(exp.user_names())], ops


_STAFF_BASE = "dc=staff,dc=test"


def _ldif(
    base: str, people: list[tuple[str, str]], groups: list[tuple[str, int, list[str]]]
) -> str:
    """A directory of people (DN, cn; uid p<i>, uidNumber 7000 + i) under ou=people
    and POSIX groups (cn, gid, member DNs) under ou=groups, in testing/ldif.py's
    entries."""
    dc = base.split(",")[0].split("=")[1]
    out = f"dn: {base}\nobjectClass: dcObject\nobjectClass: organization\ndc: {dc}\no: o\n\n"
    out += "".join(f"dn: ou={ou},{base}\nobjectClass: organizationalUnit\nou: {ou}\n\n"
                   for ou in ("people", "groups"))  # fmt: skip
    out += "\n".join(user_entry(dn, 7000 + i, 7000, f"p{i}", extra=f"cn: {cn}")
                     for i, (dn, cn) in enumerate(people))  # fmt: skip
    out += "\n" + "\n".join(group_entry(f"cn={cn},ou=groups,{base}", cn, gid, members)
                            for cn, gid, members in groups)  # fmt: skip
    return out


def _staff_ldif() -> str:
    """A user in one small group, nested in an all-staff group of the 19 other people
    (named ``cn=Full Name``): the shape where the walk's second round (with deref) brings
    the many members, not the user's own groups."""
    b = _STAFF_BASE
    people = [(f"cn=Person {i},ou=people,{b}", f"Person {i}") for i in range(20)]
    dns = [dn for dn, _cn in people]
    small = f"cn=small,ou=groups,{b}"
    return _ldif(b, people, [("small", 7101, dns[:1]), ("staff", 7102, [small, *dns[1:]])])


def test_no_sweep_ahead_for_members_the_walks_deref_named(tmp_path):
    """p0 is in one small group, nested in an all-staff group of 19 others: the first
    round (no deref, a sweep being possible) brings one member, too few to sweep;
    the second walks up with deref, which names the 19. A sweep sent ahead for
    their values would be slapd's work for nothing: none goes out, none is sent."""
    (tmp_path / "staff.ldif").write_text(_staff_ldif())
    with Slapd(tmp_path / "s", tmp_path / "staff.ldif", _STAFF_BASE) as s:
        p, cache, _ = make_backend(tmp_path / "db", make_domain([s.uri], s.base_dn))
        spy = _Spy(p.client)
        ahead = _AheadSpy(p.client)
        p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=5, factor=100)
        assert p.initgroups("p0").outcome is Outcome.FOUND
        assert stored_gids(cache, "p0") == {7000, 7101, 7102}
        assert spy.derefs() >= 1, spy.calls  # the deref control named the staff
        assert (ahead.sent, spy.sweeps()) == ([], 0), (ahead.sent, spy.calls)
        assert p.group_by_name("staff").outcome is Outcome.FOUND
        assert stored_members(cache, "staff") == {f"p{i}" for i in range(20)}


def test_a_pause_between_sending_the_sweep_ahead_and_reading_it_fails_no_server(
    tmp_path, slapd_big, monkeypatch
):
    """Cold large01 with ldap_search_timeout = 2 and the member DNs' keying held up
    past it (a stalled host): the sweep sent ahead is read as a search sent then, the
    lookup is answered and the domain stays online. The pause is the behaviour under
    test, not a wait for readiness; 2 s, not the minimum 1 s, so that a loaded machine
    still answers each search in time."""
    exp, s = slapd_big.expected, slapd_big.slapd
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn, ldap_search_timeout=2))
    ahead = _AheadSpy(p.client)
    unknown = Walk.unknown

    def held_up(*args: Any, **kw: Any) -> Any:
        time.sleep(2.2)
        return unknown(*args, **kw)

    monkeypatch.setattr(Walk, "unknown", held_up)
    assert p.group_by_name("large01").outcome is Outcome.FOUND
    assert stored_members(cache, "large01") == exp.members("large01", 2)
    assert ahead.sent and p.client.online


_NEST_BASE = "dc=nest,dc=test"


def _nest_ldif() -> str:
    """top > mid > low > big (40 people): at nesting level 2, big is only named."""
    b = _NEST_BASE
    people = [(f"uid=p{i},ou=people,{b}", f"P {i}") for i in range(40)]

    def g(cn: str) -> str:
        return f"cn={cn},ou=groups,{b}"

    return _ldif(b, people, [("top", 7101, [g("mid"), people[0][0]]), ("mid", 7102, [g("low")]),
                             ("low", 7103, [g("big")]),
                             ("big", 7104, [dn for dn, _cn in people])])  # fmt: skip


def test_no_sweep_ahead_for_the_members_of_a_group_only_named(tmp_path):
    """top > mid > low > big (40 people), nesting level 2: big is named as low's
    member, never expanded, so its 40 member values call for no sweep (one went out
    ahead, unread, and was dropped: found in review). The answer is p0 alone, as
    with no sweep ahead at all."""
    (tmp_path / "nest.ldif").write_text(_nest_ldif())
    with Slapd(tmp_path / "s", tmp_path / "nest.ldif", _NEST_BASE) as s:
        for sending in (True, False):
            p, cache, _ = make_backend(tmp_path / f"db{sending}", make_domain([s.uri], s.base_dn))
            ahead = _AheadSpy(p.client)
            if not sending:
                p.client.send_ahead = lambda specs: None  # type: ignore[method-assign]
            p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=5, factor=100)
            offset = s.log_offset()
            assert p.group_by_name("top").outcome is Outcome.FOUND
            assert stored_members(cache, "top") == {"p0"}, sending
            swept = [op for op in s.searches(offset) if op.filter == "(objectClass=posixAccount)"]
            assert (ahead.sent, swept) == ([], []), sending


def test_bigroupuser_walks_up_from_one_group_sweep(tmp_path, slapd_big):
    """The walk up from bigroupuser's 2,000 groups: one group sweep (the 1,000 groups
    that do not list the user) in place of two ORs of 1,000 group DNs and a third of
    the next level's, whose candidates slapd tests term by term (17.5 ms of its CPU
    against 6.0: perf/results/2026-12-07-cold-slapd-cost). The parents found
    locally are the server's: the answer and every stored group are exact."""
    exp = slapd_big.expected
    p, cache, spy = _backend(tmp_path, slapd_big)
    assert p.initgroups("bigroupuser").outcome is Outcome.FOUND
    assert stored_gids(cache, "bigroupuser") == exp.initgroups("bigroupuser", 2)
    # The first level's assertion and the group sweep's negation of it: no walk-up OR.
    assert spy.member_terms() == 2, spy.calls
    assert spy.group_sweeps() == 1 and p.sweeps.groups_at_least == 0
    for gid in exp.initgroups("bigroupuser", 2):
        view = cache.group_by_gid(gid).value
        assert view is not None and stored_members(cache, view.name) == exp.members(
            view.name, 2
        ), gid


def test_every_small_user_walks_up_from_a_group_sweep(tmp_path, slapd_small):
    """The group sweep for every user of the small directory (a nesting tree 3 deep):
    the same answers as the walk's searches."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small)
    p.sweeps.tunables = replace(p.sweeps.tunables, groups_min=1, groups_factor=1000)
    swept = 0
    for name in exp.user_names():
        spy.clear()
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
        swept += spy.group_sweeps()
    assert swept > 0


def test_a_group_sweep_past_its_bound_is_not_tried_again(tmp_path, slapd_small):
    """Its bound (the first level's groups) below the groups that do not list the
    user: it gives up, the walk searches for the parents as without it (exact), and a
    walk up from as many groups sweeps no more."""
    exp = slapd_small.expected
    p, cache, spy = _backend(tmp_path, slapd_small)
    p.sweeps.tunables = replace(p.sweeps.tunables, groups_min=1, groups_factor=1)
    big = max(exp.user_names(), key=lambda n: len(exp.initgroups(n, 0)))
    for _request in range(2):
        spy.clear()
        assert p.initgroups(big).outcome is Outcome.FOUND
        assert stored_gids(cache, big) == exp.initgroups(big, 2)
        assert spy.member_terms() > 2  # the walk's own searches
    assert p.sweeps.groups_at_least > 0
    assert sum(1 for f, _c, _d in spy.calls if "(!(member=" in f) == 0  # the second: none
