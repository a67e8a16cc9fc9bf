"""The bounds of one refresh-ahead run (BackendService._refresh_run): entries expiring
first first, at most REFRESH_MAX_PER_RUN requests, at most REFRESH_PER_SECOND a second,
stopped when the domain goes offline. The cache and the requests are fakes, the clock
is virtual: only the run's own logic is under test (the real refresh against slapd is
tests/integration/test_refresh_ahead.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import selectors
import types
from collections.abc import Callable
from pathlib import Path

import pytest

import cached.ldap.service as service_mod
from cached.cache.records import Times
from cached.config import parse_config
from cached.counters import BACKGROUND_RESTART, COUNTERS, REFRESH_STALLED
from cached.ipc.ops import Op
from cached.jitter import CATCH_UP, REFRESH_SOON
from cached.ldap.service import BackendService
from testing.backend import config_text


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cfg = parse_config(
        config_text(["ldap://127.0.0.1:1"], "dc=x", daemon={"db_dir": tmp_path / "db"})
    )
    service = BackendService(cfg, cfg.domains[0])
    clock = _Clock()
    # The service's clock and sleeps, not the event loop's.
    fake_time = types.SimpleNamespace(monotonic=clock.monotonic, time=lambda: 5000.0)
    monkeypatch.setattr(service_mod, "time", fake_time)
    monkeypatch.setattr(service_mod, "asyncio", types.SimpleNamespace(sleep=clock.sleep))
    asked: list[tuple[Op, str]] = []

    def start(
        initgr: dict[str, float],
        offline_after: int = 0,
        failing: str = "",
        groups: dict[str, float] | None = None,
        effect: Callable[[Op, str], None] | None = None,
    ) -> list[tuple[Op, str]]:
        """One run over initgroups (and ``groups``) expiring at the times given,
        which ``effect`` may change as each request is made (what the request, or a
        client's lookup meanwhile, or an invalidation does to the cache)."""
        groups = {} if groups is None else groups

        async def request(op: Op, key: str, uid: object = "refresh") -> None:
            asked.append((op, key))
            if key == failing:
                raise RuntimeError("a request that fails")
            if op is Op.INITGROUPS:  # a refresh that succeeds stores fresh times
                initgr[key] = 99_999.0
            if effect is not None:
                effect(op, key)
            if offline_after and len(asked) >= offline_after:
                service.client.retry_at = 1.0  # offline from now on

        def times(kind: str, names: list[str]) -> dict[str, Times]:
            if kind == "group":
                return {n: Times(data_expire=groups[n]) for n in names if n in groups}
            return {n: Times(initgr_expire=initgr[n]) for n in names}

        service.request = request  # type: ignore[method-assign,assignment]
        service.cache.expiring = lambda before: (  # type: ignore[method-assign]
            [], [g for g, t in groups.items() if t <= before], list(initgr)
        )
        service.cache.times = times  # type: ignore[method-assign,assignment]
        asyncio.run(service._refresh_run(9000.0))
        return asked

    yield start, clock
    service.cache.close()


def test_expiring_first_at_most_per_run(run, monkeypatch) -> None:
    start, _clock = run
    monkeypatch.setattr(service_mod, "REFRESH_MAX_PER_RUN", 3)
    due = {"late": 4000.0, "first": 100.0, "second": 200.0, "third": 300.0, "later": 3000.0}
    asked = start(due)
    assert asked == [(Op.INITGROUPS, n) for n in ("first", "second", "third")]


def test_requests_are_paced(run, monkeypatch) -> None:
    start, clock = run
    monkeypatch.setattr(service_mod, "REFRESH_PER_SECOND", 4.0)
    asked = start({f"u{i}": float(i) for i in range(9)})
    assert len(asked) == 9
    # 9 requests at 4 a second: 8 gaps of a quarter second (instant requests).
    assert clock.slept == [0.25] * 8
    assert clock.now == 1002.0


def test_a_run_stops_when_the_domain_goes_offline(run) -> None:
    start, _clock = run
    asked = start({f"u{i}": float(i) for i in range(5)}, offline_after=2)
    assert asked == [(Op.INITGROUPS, "u0"), (Op.INITGROUPS, "u1")]


def test_a_failing_request_does_not_end_the_run(run, caplog) -> None:
    start, _clock = run
    asked = start({f"u{i}": float(i) for i in range(3)}, failing="u1")
    assert asked == [(Op.INITGROUPS, f"u{i}") for i in range(3)]
    assert "background refresh of initgroups u1: RuntimeError" in caplog.text



def test_groups_a_run_finds_refreshed_meanwhile_are_not_asked_again(run) -> None:
    """The groups of a user whose initgroups the run refreshed are fresh when the
    group pass comes to them, as are those a client's lookup refreshed meanwhile:
    each group is read again just before it is asked for."""
    start, _clock = run
    groups = {f"g{i}": 100.0 + i for i in range(6)}
    initgr = {"big": 50.0}

    def effect(op: Op, key: str) -> None:
        if op is Op.INITGROUPS:  # the walk refreshes the user's groups, not g4
            groups.update({g: 99_999.0 for g in ("g0", "g1", "g2", "g3")})
        elif key == "g4":  # and g5, left out of the walk, a client's lookup refreshed
            groups["g5"] = 99_999.0

    asked = start(initgr, groups=groups, effect=effect)
    assert asked == [(Op.INITGROUPS, "big"), (Op.GROUP_BY_NAME, "g4")]


def test_an_invalidation_during_a_run_refreshes_initgroups_again_not_each_group(run) -> None:
    """`cached cache -E` while the run's initgroups refresh is under way: its commit
    records no times, so the user and every one of its groups are due again. The run
    refreshes that initgroups once more (a walk) rather than each group with a search
    of its own; before, 2,085 searches at the background's pace."""
    start, _clock = run
    groups = {f"g{i}": 100.0 + i for i in range(50)}
    initgr = {"big": 50.0}
    walks = 0

    def effect(op: Op, key: str) -> None:
        nonlocal walks
        if op is Op.INITGROUPS:
            walks += 1
            if walks == 1:  # raced by the invalidation: no times recorded
                initgr[key] = 50.0
            else:
                groups.update(dict.fromkeys(groups, 99_999.0))

    asked = start(initgr, groups=groups, effect=effect)
    assert asked == [(Op.INITGROUPS, "big"), (Op.INITGROUPS, "big")]


def test_an_invalidation_during_the_group_pass_walks_again_before_any_group(run) -> None:
    """`cached cache -E` in the middle of the group pass (after the run's walk had
    refreshed the user's groups): the next group found due makes the run walk that
    user again, and no group of the user is asked for on its own."""
    start, _clock = run
    covered = [f"g{i}" for i in range(10)]
    groups = {"lone": 60.0, **{g: 100.0 for g in covered}}
    initgr = {"big": 50.0}

    def effect(op: Op, key: str) -> None:
        if op is Op.INITGROUPS:  # the walk refreshes the user's groups, not "lone"
            groups.update(dict.fromkeys(covered, 99_999.0))
        elif key == "lone":  # the invalidation, while "lone" is refreshed
            initgr["big"] = 50.0
            groups.update(dict.fromkeys(covered, 50.0))

    asked = start(initgr, groups=groups, effect=effect)
    assert asked == [
        (Op.INITGROUPS, "big"),
        (Op.GROUP_BY_NAME, "lone"),
        (Op.INITGROUPS, "big"),
    ]

ID_A = "0f3c6d1e8a7b4c2d9e1f0a2b3c4d5e6f\n"
ID_B = "8d2b7e4c1a9f4b3e8c7d6a5b4c3d2e1f\n"


def _host_service(tmp_path: Path, name: str, machine_id: str, **opts) -> BackendService:
    mid = tmp_path / f"{name}-machine-id"
    mid.write_text(machine_id)
    cfg = parse_config(
        config_text(
            ["ldap://127.0.0.1:1"],
            "dc=x",
            daemon={"db_dir": tmp_path / name, "machine_id_file": mid},
            **opts,
        )
    )
    return BackendService(cfg, cfg.domains[0])


def test_early_runs_start_at_the_hosts_own_delay(tmp_path: Path, monkeypatch) -> None:
    """Hosts whose entries reach their midpoint together start their early runs at
    different moments; one host (a restart, the same machine-id) at the same."""
    clock = types.SimpleNamespace(monotonic=lambda: 100.0, time=lambda: 5000.0)
    monkeypatch.setattr(service_mod, "time", clock)
    hosts = [_host_service(tmp_path, n, i) for n, i in (("a1", ID_A), ("a2", ID_A), ("b", ID_B))]
    try:
        for s in hosts:
            s.soonest_expiry = lambda horizon: 5000.0 + 120.0  # type: ignore[method-assign]
        # The fleet benchmark's window (a 240 s lifetime, midpoint at 50 %): the
        # delay is the host's share of a minute.
        a1, a2, b = (s.soon_delay(100.0, 120.0) for s in hosts)
        assert a1 == a2
        assert a1 != b
        assert 0.0 <= a1 < 60.0 and 0.0 <= b < 60.0
        assert {a1, b} != {0.0}
        # Entries expiring sooner cut the delay: the run begins a tenth of the window
        # (12 s) before the soonest expiry, whatever the host's share.
        for s in hosts:
            s.soonest_expiry = lambda horizon: 5000.0 + 30.0  # type: ignore[method-assign]
        assert all(s.soon_delay(100.0, 120.0) <= 18.0 for s in hosts)
        assert hosts[0].soon_delay(100.0, 120.0) == a1 * 18.0 / 60.0
        # A run that can begin only later (the gap after the last one) has less left.
        assert hosts[0].soon_delay(110.0, 120.0) == pytest.approx(a1 * 8.0 / 60.0)
        # Nothing left before the soonest expiry: at once.
        for s in hosts:
            s.soonest_expiry = lambda horizon: 5000.0 + 5.0  # type: ignore[method-assign]
        assert [s.soon_delay(100.0, 120.0) for s in hosts] == [0.0, 0.0, 0.0]
    finally:
        for s in hosts:
            s.cache.close()


def test_catch_up_runs_start_at_the_hosts_own_delay(tmp_path: Path) -> None:
    """A fleet coming back after an outage revalidates spread over the catch-up
    spread (cached/jitter.py CATCH_UP): two machine-ids differ, one machine-id (a
    restart, another backend of the host) is the same, and each host's delay is its
    own share, independent of its early runs'."""
    hosts = [_host_service(tmp_path, n, i) for n, i in (("a1", ID_A), ("a2", ID_A), ("b", ID_B))]
    try:
        a1, a2, b = (s.catch_up_delay() for s in hosts)
        assert a1 == a2
        assert a1 != b
        # The default lifetime (5,400 s): the host's share of a minute.
        assert 0.0 <= a1 < service_mod.REFRESH_CATCH_UP_SPREAD and 0.0 <= b < 60.0
        assert a1 == hosts[0].jitter.offset(CATCH_UP, 60.0)
        assert hosts[0].jitter.fraction(CATCH_UP) != hosts[0].jitter.fraction(REFRESH_SOON)
    finally:
        for s in hosts:
            s.cache.close()


def test_a_short_lifetime_shortens_the_catch_up_spread(tmp_path: Path) -> None:
    # A 120 s lifetime, the midpoint at 50 %: at most half the 60 s window.
    s = _host_service(tmp_path, "short", ID_A, entry_cache_timeout=120)
    try:
        assert s.catch_up_delay() == s.jitter.offset(CATCH_UP, 30.0)
    finally:
        s.cache.close()


@pytest.mark.parametrize(
    ("lifetime", "interval", "spread"),
    [(5400.0, 3780.0, 378.0), (180.0, 126.0, 12.6), (10.0, 7.0, 0.7), (5400.0, 600.0, 5.0)],
)
def test_a_scheduled_run_refreshes_up_to_the_next_and_never_what_was_just_stored(
    lifetime: float, interval: float, spread: float
) -> None:
    now = 1_765_000_000.0
    for gap in (0.1, 0.5, 1.0, 1.09):  # the next run, in intervals (next_refresh's range)
        following = now + gap * interval
        horizon = service_mod.refresh_horizon(now, following, interval, spread, lifetime)
        # An entry stored a moment ago (it expires a lifetime from now) is not due:
        # refreshing it would refresh every entry at every run.
        assert horizon < now + lifetime
        # What expires before the next run begins, and a margin after it, is due now;
        # what expires later is the next run's.
        margin = service_mod.refresh_margin(interval, spread)
        assert horizon == min(following + margin, now + 0.95 * lifetime)
        assert margin >= min(spread, interval / 3)


@pytest.mark.parametrize("lifetime", [180, 600, 5400])
def test_a_run_followed_soon_by_the_next_leaves_it_what_it_refreshes_in_time(
    tmp_path: Path, lifetime: int
) -> None:
    """The first run (30 s after the start) and the first at the host's point of the
    interval may come a tenth of an interval apart: the first refreshes only what the
    second would not refresh in time, not everything expiring within an interval,
    which the second then refreshed again. The runs after them still refresh every
    entry at least the margin before its expiry."""
    s = _host_service(
        tmp_path, f"l{lifetime}", ID_A, entry_cache_timeout=lifetime, refresh_expired_interval=None
    )
    try:
        interval, spread = s.refresh_schedule()
        margin = service_mod.refresh_margin(interval, spread)
        point = s.next_refresh(1_765_000_000.0, interval)  # one of the host's points
        for gap in (0.11, 0.3, 0.6, 1.0):  # the first run to that point, in intervals
            first = point - gap * interval
            assert s.next_refresh(first, interval) == pytest.approx(point)
            # A cache filled in the lifetime before the start: expiries all through it.
            expiry = [first + lifetime * (i + 1) / 400 for i in range(400)]
            refreshed = [0] * len(expiry)
            start = first
            for run in range(6):
                following = s.next_refresh(start, interval)
                horizon = service_mod.refresh_horizon(
                    start, following, interval, spread, lifetime
                )
                due = [i for i, x in enumerate(expiry) if x <= horizon]
                for i in due:
                    assert expiry[i] > start, (gap, run)  # none expired meanwhile
                    if run:  # the first run can only take what is left
                        assert expiry[i] >= start + margin, (gap, run)
                    if run == 0:  # what the next run would not refresh in time
                        assert expiry[i] < following + margin + 1e-6, gap
                    expiry[i] = start + lifetime
                    refreshed[i] += 1
                start = following
            assert all(refreshed)
    finally:
        s.cache.close()


def test_reached_in_time_by_a_run_a_margin_before_or_after_the_last_horizon() -> None:
    # The next run at 0 (refreshing to 95), the one after at 100 (to 195); margin 10.
    runs, margin = [(0.0, 95.0), (100.0, 195.0)], 10.0
    reached = [x for x in (5.0, 10.0, 50.0, 95.0, 97.0, 105.0, 110.0, 195.0, 300.0)
               if service_mod.reached_in_time(x, runs, margin)]  # fmt: skip
    # Not: before the first run's start plus the margin; the gap between the first
    # horizon and the second run's start plus the margin.
    assert reached == [10.0, 50.0, 95.0, 110.0, 195.0, 300.0]


class _Now:
    """The service's clocks: wall ``time`` and ``monotonic`` ``time - 4900``."""

    def __init__(self) -> None:
        self.wall = 5000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.wall - 4900.0


@pytest.mark.parametrize("lifetime", [180, 600, 5400])
def test_entries_refreshed_by_a_scheduled_run_make_no_early_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lifetime: int
) -> None:
    """With SSSD's rule's interval (70 % of the lifetime, the default), an entry a
    scheduled run refreshed passes its midpoint (50 %) before the next run, whose
    horizon holds its expiry: an entry answered then makes no early run, whenever in
    the interval the runs fall. One that expires before the next run's start plus the
    margin does, and everything past its midpoint does when the last run fell behind."""
    clock = _Now()
    monkeypatch.setattr(service_mod, "time", clock)
    s = _host_service(
        tmp_path, f"l{lifetime}", ID_A, entry_cache_timeout=lifetime, refresh_expired_interval=None
    )
    try:
        interval, spread = s.refresh_schedule()
        assert interval == pytest.approx(0.7 * lifetime, abs=1)
        window, _groups, _gap = s.soon_schedule()
        stored: list[float] = []
        s.expiries = lambda users, groups: [  # type: ignore[method-assign,assignment]
            x for x in stored if clock.wall < x <= users
        ]
        point = s.next_refresh(1_765_000_000.0, interval)  # one of the host's runs
        for apart in (0.75, 0.9, 1.0, 1.09):  # the last run, in intervals before it
            began = point - apart * interval
            following = s.next_refresh(began, interval)
            assert following == pytest.approx(point)
            stored[:] = [began + lifetime]  # refreshed by that run
            midpoint = began + lifetime - window
            assert midpoint < following
            for past in (0.0, 0.5, 0.99):  # answered from the midpoint to the next run
                clock.wall = midpoint + past * (following - midpoint)
                due = clock.monotonic() + (following - clock.wall)
                assert s.early_horizon(due) is None, (apart, past)
            # An entry expiring before the next run's start plus the margin: early.
            margin = service_mod.refresh_margin(interval, spread)
            stored[:] = [began + lifetime, following + margin / 2]
            clock.wall = following + margin / 2 - window / 2  # past its midpoint
            due = clock.monotonic() + (following - clock.wall)
            assert s.early_horizon(due) == following + margin / 2
            # The last scheduled run did not refresh all it had due: as before.
            s._runs_keep_up = False
            assert s.early_horizon(due) == clock.wall + window
            s._runs_keep_up = True
    finally:
        s.cache.close()


def test_a_background_task_that_raises_is_logged_and_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A round of a background loop that raises (a store read that failed) is logged
    with its traceback and the loop runs again: without ``kept`` the task would end,
    and refresh ahead with it, for the rest of the backend's life."""
    rounds: list[int] = []

    async def loop() -> None:
        rounds.append(len(rounds))
        if len(rounds) < 3:
            raise OSError("the timestamp store could not be read")

    before = COUNTERS.get(BACKGROUND_RESTART).count
    with caplog.at_level("ERROR", logger="cached.ldap.service"):
        asyncio.run(asyncio.wait_for(service_mod.kept("refresh ahead", loop, delay=0.0), 30))
    assert rounds == [0, 1, 2]  # returned on the third round: not started again
    failed = [r for r in caplog.records if "background task refresh ahead failed" in r.message]
    assert len(failed) == 2
    assert all(r.exc_info and "timestamp store" in str(r.exc_info[1]) for r in failed)
    after = COUNTERS.get(BACKGROUND_RESTART).count
    assert after - before == 2


def test_the_backend_stopping_cancels_a_kept_task() -> None:
    """Cancellation is not a failure: the kept loop ends at once, not started again."""
    started = 0

    async def loop() -> None:
        nonlocal started
        started += 1
        await asyncio.sleep(3600)

    async def main() -> None:
        t = asyncio.create_task(service_mod.kept("server check", loop, delay=0.0))
        while not started:
            await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(asyncio.wait_for(main(), 30))
    assert started == 1


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock: when nothing is ready, the clock moves on to
    the next timer at once instead of waiting for it (the tasks run on it wait on
    timers and on each other, never on a file descriptor or a thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 100_000.0
        selector: selectors.BaseSelector = self._selector  # type: ignore[attr-defined]
        select = selector.select

        def advance(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            events = select(0)
            if not events and timeout:
                self.now += timeout
            return events

        selector.select = advance  # type: ignore[method-assign]

    def time(self) -> float:
        return self.now


def _watched(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hang: bool,
    caplog: pytest.LogCaptureFixture,
    offline: bool = False,
) -> tuple[list[logging.LogRecord], int, int]:
    """Refresh ahead and its watch over ten intervals of virtual time (a 180 s lifetime:
    runs 126 s apart), with a run that never ends (awaiting an event nobody sets) or
    runs that end at once, the domain going offline in the first run if ``offline``:
    (the watch's ERROR lines, stalls counted, runs begun)."""
    loop = _VirtualLoop()
    monkeypatch.setattr(
        service_mod,
        "time",
        types.SimpleNamespace(monotonic=loop.time, time=lambda: 1_765_000_000.0 + loop.time()),
    )
    s = _host_service(tmp_path, f"w{hang}", ID_A, entry_cache_timeout=180,
                      refresh_expired_interval=None)  # fmt: skip
    interval, _spread = s.refresh_schedule()
    runs = 0

    async def run(*_args: object) -> bool:
        nonlocal runs
        runs += 1
        if offline:
            s.client.retry_at = 1.0  # offline from now on
        if hang:
            await asyncio.Event().wait()
        return True

    s._refresh_run = run  # type: ignore[method-assign,assignment]

    async def main() -> None:
        refresher = asyncio.create_task(service_mod.kept("refresh ahead", s._refresh_expired))
        watch = asyncio.create_task(
            service_mod.kept("refresh watch", lambda: s._watch_refresh(refresher))
        )
        await asyncio.sleep(10 * interval)
        for t in (refresher, watch):
            t.cancel()
        await asyncio.gather(refresher, watch, return_exceptions=True)

    before = COUNTERS.get(REFRESH_STALLED).count
    try:
        with caplog.at_level("ERROR", logger="cached.ldap.service"):
            loop.run_until_complete(main())
    finally:
        loop.close()
        s.cache.close()
    said = [r for r in caplog.records if "no refresh-ahead run has begun" in r.message]
    return said, COUNTERS.get(REFRESH_STALLED).count - before, runs


def test_a_refresh_task_that_hangs_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hang (unlike an exception, which kept logs) would leave the entries to
    expire with nothing said: the watch says it once, with the domain, how long no run
    has begun and where the task waits, and counts it."""
    said, stalled, runs = _watched(tmp_path, monkeypatch, True, caplog)
    assert runs == 1
    assert stalled == 1
    assert len(said) == 1
    message = said[0].getMessage()
    assert message.startswith("domain LDAP: ")
    # Two intervals plus the spread (264.6 s), found within half an interval.
    quiet = float(message.split("begun for ")[1].split(" s")[0])
    assert 264.6 < quiet <= 264.6 + 63.0
    # Where it waits: the run, inside the refresh loop, on the event's future.
    assert re.search(r"at kept:\d+ > _refresh_expired:\d+ > run:\d+ > wait:\d+ > a future$",
                     message), message  # fmt: skip


def test_a_healthy_refresh_task_is_not_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    said, stalled, runs = _watched(tmp_path, monkeypatch, False, caplog)
    assert runs >= 9  # every interval
    assert (said, stalled) == ([], 0)


def test_a_refresh_task_that_hangs_while_offline_is_not_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    said, stalled, runs = _watched(tmp_path, monkeypatch, True, caplog, offline=True)
    assert runs == 1
    assert (said, stalled) == ([], 0)
