"""The backend process of one domain: the RPC server around the LDAP provider.

One process per domain, started by the monitor (``cached serve``), the only writer
of the domain's cache. Requests from the responder arrive on
``<pipes_dir>/private/be_<domain>``; identical requests in flight share one LDAP
request; LDAP work runs on one worker thread (ldap3's synchronous connection is
not shared between threads), so the event loop stays free to answer status and
counter requests while a 2,000-group initgroups runs.

The requests waiting for that worker are queued per NSS client uid (the responder
sends it along) and taken round-robin, one per uid in turn: a local user flooding
the backend with unique names waits behind its own requests, and another user's
cold lookup waits for at most one request per busy uid (docs/threat-model.md: one FIFO queue let
a flood delay everyone's cold lookups from 8 ms to 2.5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cached import gcpause
from cached.cache import State, StoreWriteError
from cached.cache.writer import open_backend_cache
from cached.config import Config, DomainConfig
from cached.config.options import AccessProvider
from cached.counters import (
    BACKGROUND_RESTART,
    COUNTERS,
    REFRESH_CATCH_UP,
    REFRESH_EARLY,
    REFRESH_LEFT,
    REFRESH_STALLED,
    REQUEST_STORED,
    format_profile,
)
from cached.ipc import aio, framing
from cached.ipc.ops import (
    LOOKUPS,
    AccessRequest,
    AuthRequest,
    ChpassRequest,
    CountersReply,
    DomainStateNote,
    DropCredentials,
    GroupsStoredNote,
    LookupReply,
    LookupRequest,
    Op,
    Outcome,
    SudoRefresh,
    SudoRefreshKind,
    SudoRefreshReply,
)
from cached.jitter import (
    CATCH_UP,
    OFFLINE_RETRY,
    REFRESH_AHEAD,
    REFRESH_PHASE,
    REFRESH_SOON,
    SUDO_FULL,
    SUDO_SMART,
    Jitter,
    next_at,
)
from cached.ldap.access import AccessChecks
from cached.ldap.auth import warning_seconds
from cached.ldap.client import LdapClient
from cached.ldap.login import Logins
from cached.ldap.pacing import Pacer
from cached.ldap.provider import LdapProvider, Result
from cached.ldap.sudo import SudoProvider, SudoResult
from cached.model import Kind

if TYPE_CHECKING:
    from cached.ldap.idmap import IdMapper

log = logging.getLogger(__name__)


_T = TypeVar("_T")

# The bounds of one refresh-ahead run. At most REFRESH_PER_SECOND requests a second: a
# refresh by stamps is one to three searches, so a host with thousands of entries due
# sends the directory a trickle of at most ~30 searches a second rather than a burst,
# and a lookup waits behind at most one refresh request (the refresh has a queue of its
# own, taken in turn with the clients'). At most REFRESH_MAX_PER_RUN requests a run, the
# entries expiring first: 1,000 at that rate take 100 s, well inside the default
# interval (3,780 s), so a run never overlaps the next; what is left is due in the next
# run or refreshed by the lookup that finds it expired.
REFRESH_PER_SECOND = 10.0

REFRESH_MAX_PER_RUN = 1000
# A run refreshes what expires before the next run and this long after it, at least
# (or a third of an interval when shorter): the next run may fall just before an
# expiry, and its requests take their time at the background's pace.
REFRESH_RUN_MARGIN = 60.0
# Entries used past their midpoint (entry_cache_nowait_percentage) that the scheduled
# runs would not refresh before they expire (BackendService.early_horizon) are
# refreshed by an early run of refresh ahead (the responder's Op.REFRESH_SOON), not one
# request each: the run revalidates a user's groups with the initgroups walk by stamps
# (~7 searches for the 2,085 groups of bigroupuser, where a request per getgrgid made
# 2,085). Early runs, and notes weighed without one, follow each other at least this
# long apart: at most REFRESH_SOON_GAP, and at most a tenth of the window between the
# midpoint and the expiry, so that an entry noted just after a run is refreshed long
# before it expires.
REFRESH_SOON_GAP = 60.0
# An early run starts this host's share (cached/jitter.py, REFRESH_SOON) of at most
# REFRESH_SOON_SPREAD, and at most half the window, after the note that asked for it:
# hosts whose entries were filled together reach their midpoint together, and run
# together if each starts at its note (the 200-host fleet's busiest second: 7 hosts'
# revalidations, 42 searches). The delay never takes a run past the soonest expiry of
# the entries it refreshes less a tenth of the window (the time the run is allowed
# for), so that no lookup waits on an expiry the early run was to prevent.
REFRESH_SOON_SPREAD = 60.0
# When the domain comes back online, a catch-up run revalidates what expired or passed
# its midpoint while it was offline (nothing ran then), at this host's share
# (cached/jitter.py, CATCH_UP) of at most REFRESH_CATCH_UP_SPREAD, and at most half the
# window past the midpoint, after it came back: every host of a fleet whose directory
# was down comes back within its offline retry of the directory's return, and would
# otherwise revalidate in the same second (SSSD #5609: an outage's herd re-overloading
# the directory). Without it, the entries waited for the next scheduled run (up to an
# interval away), and a lookup meanwhile waited on each one it found expired.
REFRESH_CATCH_UP_SPREAD = 60.0
# The background's searches go at most this many a second (cached/ldap/pacing.py): a
# revalidation by stamps (~6 searches) spreads over ~3 s instead of a fraction of one.
# A client's request is never paced, and one waiting hurries the paced request on.
REFRESH_SEARCHES_PER_SECOND = 2.0
# The uid of the background refresh's queue (BackendService.request).
REFRESH_UID = "refresh"


def refresh_margin(interval: float, spread: float) -> float:
    """How long before an entry's expiry, at least, the scheduled run that refreshes
    it begins: the offset ``spread``, at least REFRESH_RUN_MARGIN or a third of the
    interval (:func:`refresh_horizon`)."""
    return max(spread, min(interval / 3, REFRESH_RUN_MARGIN))


def refresh_horizon(
    now: float, following: float, interval: float, spread: float, lifetime: float
) -> float:
    """Until when (epoch) a scheduled refresh-ahead run beginning at ``now`` refreshes
    what expires, the next run beginning at ``following``: whatever expires before the
    next run begins and within a margin after that (:func:`refresh_margin`), which the
    next run, allowed at least that margin before an expiry, would not refresh in
    time. What expires later is the next run's: its horizon begins where this one
    ends, so the runs chain with no gap, and a run followed soon by the next (the
    first, 30 s after the start, and the first at this host's point of the interval,
    :meth:`BackendService.next_refresh`) does not refresh what that one refreshes
    again a moment later (with a horizon of a whole interval, a 200-host fleet at a
    180 s lifetime revalidated its cold entries twice). Never as far as 95 % of the
    entries' ``lifetime`` (0: none): entries stored a moment ago are not refreshed at
    once. ``interval`` sizes the margin."""
    horizon = following + refresh_margin(interval, spread)
    if lifetime > 0:
        horizon = min(horizon, now + 0.95 * lifetime)
    return horizon


def reached_in_time(expiry: float, runs: Sequence[tuple[float, float]], margin: float) -> bool:
    """Whether the scheduled refresh-ahead runs ``runs`` ((start, horizon), epoch, the
    next ones in order) refresh an entry expiring at ``expiry`` (epoch) before it
    expires: one of them has it in its horizon and begins at least ``margin`` before
    it (:func:`refresh_margin`), or it expires after the last one's horizon.

    An entry past the last horizon is left to the runs after it: a run's horizon
    reaches the margin past the next run's start (:func:`refresh_horizon`), so the runs
    that follow each other cover every expiry after the first run's start plus the
    margin, unless 95 % of the lifetime cuts a horizon short of that, which happens
    only between runs more than 95 % of the lifetime less the margin apart. Such a gap
    among the given runs counts as not reached, as does an expiry before the first
    run's start plus the margin. With the default interval (70 % of the lifetime) the
    second run's horizon lies beyond every entry past its midpoint (50 %): the runs
    after the first fall at this host's point of the interval, an interval apart, so
    the run after the second begins at least 1.1 intervals (77 % of the lifetime)
    after the first (:meth:`BackendService.next_refresh`)."""
    if expiry > runs[-1][1]:
        return True
    return any(start + margin <= expiry <= horizon for start, horizon in runs)


# A background task (refresh ahead, the server check, the timestamp flush...) that
# raised is started again this long after, so a fault in one round (a store read that
# failed, a bug on a rare path) does not leave the host without refresh or recovery
# for the rest of the backend's life: an asyncio task that raises simply ends, and
# nothing but the garbage collector would say so.
BACKGROUND_RESTART_DELAY = 5.0
# Seconds the work a request left for after its answer (LdapProvider.after_answer) waits
# for the answer's readers, unless another request comes (_answer_then_after): what the
# responder and `id` do after bigroupuser's answer took 10-15 ms.
AFTER_ANSWER_IDLE = 0.05


async def kept(
    name: str, loop: Callable[[], Awaitable[None]], delay: float = BACKGROUND_RESTART_DELAY
) -> None:
    """Run the background ``loop`` for the backend's life: when it raises, log the
    exception (ERROR, with its traceback), count it (``be.background.restart``) and
    start it again ``delay`` seconds later; when it returns, stop. Cancellation (the
    backend stopping) goes through."""
    while True:
        try:
            await loop()
            return
        except Exception:
            COUNTERS.add(BACKGROUND_RESTART)
            log.exception("background task %s failed; started again in %.0f s", name, delay)
        await asyncio.sleep(delay)


def awaiting(task: asyncio.Task[Any]) -> str:
    """What ``task`` is doing, for a log line: the coroutines it is suspended in,
    outermost first, each as function:line, and what the innermost awaits (a future,
    a task); or how it ended. Read from the coroutines' frames, without running them."""
    if task.cancelled():
        return "cancelled"
    if task.done():
        error = task.exception()
        return "returned" if error is None else f"ended by {error!r}"
    steps: list[str] = []
    step: Any = task.get_coro()
    while step is not None and len(steps) < 32:
        frame = getattr(step, "cr_frame", None)
        if frame is None:  # the awaited object the chain ends on
            name = type(step).__name__
            steps.append("a future" if name == "FutureIter" else name)  # a task's too
            break
        steps.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        step = step.cr_await
    return " > ".join(steps)


def _in_thread(fn: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    """``fn()`` in a daemon thread of its own: a probe waiting on a hung server does
    not hold up the process's exit (an executor's threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:  # on the loop
        if fut.done():
            return  # cancelled meanwhile (shutdown)
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def run() -> None:
        try:
            value, error = fn(), None
        except BaseException as e:  # handed to the awaiting task
            value, error = None, e
        # The loop is closed when the process stopped while fn waited: nobody awaits.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


@dataclass(eq=False)
class _Job:
    op: Op
    key: str | int
    fut: asyncio.Future[Result]
    started: bool = False
    queued_for: set[Hashable] = field(default_factory=set)
    # The timestamp tables' invalidation counts when it started (see request()).
    since: dict[str, int] | None = None
    serial: int = 0  # this backend's count of requests run, when it ran (notes, answer)
    asked: float = field(default_factory=time.time)  # when first asked for (wall clock)
    # Requests awaiting its answer (_request), and set once the last of them has it.
    waiting: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)


class FairQueue:
    """Jobs queued per client uid, taken round-robin: one job of each uid in turn.

    A job asked for by several uids is queued for each (identical requests share one
    LDAP request) and runs at the earliest of their turns, so an attacker asking for
    the victim's name first cannot push the victim's lookup behind its own queue.
    """

    def __init__(self) -> None:
        # Insertion order is the rotation: a uid served goes to the back.
        self._queues: dict[Hashable, deque[_Job]] = {}
        self._ready = asyncio.Event()

    def put(self, uid: Hashable, job: _Job) -> None:
        if uid in job.queued_for:
            return
        job.queued_for.add(uid)
        self._queues.setdefault(uid, deque()).append(job)
        self._ready.set()

    def waiting(self) -> int:
        return sum(len(q) for q in self._queues.values())

    async def wait_put(self, timeout: float) -> None:
        """Return once a job is queued (at once if one is), or after ``timeout`` s."""
        if self._queues:
            return
        self._ready.clear()  # as get() does when nothing is queued
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)

    async def get(self) -> _Job:
        while True:
            while self._queues:
                uid = next(iter(self._queues))
                q = self._queues.pop(uid)
                job = q.popleft()
                if q:
                    self._queues[uid] = q
                if not job.started and not job.fut.done():
                    return job
            self._ready.clear()
            await self._ready.wait()


class BackendService:
    def __init__(self, config: Config, domain: DomainConfig) -> None:
        self.config = config
        self.domain = domain
        self.cache = open_backend_cache(
            config.daemon.db_dir,
            domain,
            nowait_percentage=config.nss.entry_cache_nowait_percentage,
        )
        if self.cache.ts_rebuilt_reason:
            log.warning("timestamp store rebuilt: %s", self.cache.ts_rebuilt_reason)
        # Servers are tried again by the server check, never inside a lookup (the
        # client's default, retry_in_lookups = False).
        # This host's offsets of the background work (connection expiry, offline
        # retries, refresh ahead), the same after every restart (cached/jitter.py).
        self.jitter = Jitter.for_host(config.daemon.machine_id_file, config.daemon.db_dir)
        self.client = LdapClient(domain, jitter=self.jitter, ccache_dir=config.daemon.db_dir)
        self.pacer = self.client.pacer = Pacer(REFRESH_SEARCHES_PER_SECOND)
        # Set while the domain is offline or on a backup server (announce).
        self._check_due = asyncio.Event()
        self.probing_since = 0.0  # time.monotonic() the running probe began; 0: none
        # The AD modules (ID mapping, tokenGroups, GPOs, SMB) only for an AD domain.
        provider: type[LdapProvider] = LdapProvider
        if domain.ldap_schema == "ad":
            from cached.ldap.ad import AdProvider

            provider = AdProvider
        self.provider = provider(domain, self.client, self.cache)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"ldap-{domain.name}")
        self.inflight: dict[tuple[Op, str | int], _Job] = {}
        self.queue: FairQueue | None = None
        self._worker: asyncio.Task[None] | None = None
        self.started = time.time()
        self.last_success = 0.0
        self._confirmed: float | None = None  # _cache_confirmed
        self.requests = 0
        # The online state the responder was last told of (it learns the
        # state from answers and from these announcements, never per object).
        self.announced_online = True
        self._retrying: asyncio.Future[None] | None = None
        self._renewing: asyncio.Future[None] | None = None
        self.responder = aio.RpcClient(framing.responder_socket(config.daemon.pipes_dir))
        self._announcing: asyncio.Task[None] | None = None
        # Notes of groups stored early (_groups_stored), sent from the executor thread;
        # not without a group memory cache, where the responder has nothing to put them in.
        self._notifier = framing.Notifier(framing.responder_socket(config.daemon.pipes_dir))
        # Requests run (_Job.serial): while one runs, its own serial (one at a time).
        self._serial = 0
        if config.nss.group_memcache:
            self.provider.on_groups_stored = self._groups_stored
        self.logins = Logins(config, domain, self.client, self.cache)
        # The account check of access_provider = ldap: on the lookup thread, whose
        # connection it uses, the checks of each PAM client uid taken in turn.
        warning = warning_seconds(domain, config.pam.pam_pwd_expiration_warning)
        self.access: AccessChecks
        if domain.access_provider is AccessProvider.AD:
            from cached.ldap.adaccess import AdAccessChecks

            self.access = AdAccessChecks(
                domain, self.client, self.cache, self.provider._prepare, self._idmap,
                Path(config.daemon.db_dir) / f"gpo_{domain.name}",
            )  # fmt: skip
        else:
            self.access = AccessChecks(domain, self.client, self.cache, self.provider._prepare,
                                       warning=warning)  # fmt: skip
        # Sudo rules only for `services = ..., sudo`: SSSD loads its sudo provider only
        # when the sudo responder is configured.
        self.sudo = (
            SudoProvider(domain, self.client, self.cache)
            if "sudo" in config.daemon.services and domain.sudo_provider == "ldap"
            else None
        )
        self._sudo_retry = 0.0  # no scheduled sudo refresh before (after a failure)
        # Set by Op.REFRESH_SOON (an entry answered past its midpoint); the refresh-ahead
        # task runs early when it is set (_refresh_expired).
        self._soon = asyncio.Event()
        # Monotonic: the last early run, or the last note left to the scheduled runs.
        self._last_early = -math.inf
        # The last scheduled run refreshed all it had due and ended before the next
        # was due: the next runs can be counted on (early_horizon).
        self._runs_keep_up = True
        # Monotonic: when the last scheduled run began, or the watch of the refresh task
        # started (_watch_refresh).
        self._run_began: float | None = None
        self._soon_at: float | None = None  # monotonic start of the noted early run
        # Monotonic start of the catch-up run after the domain came back online.
        self._catch_up_at: float | None = None
        # Wakes the refresh-ahead task (a note, the domain back online).
        self._wake = asyncio.Event()
        self._sudo_running: asyncio.Future[SudoResult] | None = None

    def _idmap(self) -> IdMapper | None:
        """The AD provider's ID mapping (its domain SID read at the first lookup)."""
        ad = getattr(self.provider, "ad", None)  # AdProvider's
        return None if ad is None else ad.idmap

    async def _in_worker(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def _do(self, op: Op, key: str | int) -> Result:
        # The provider has a method of each lookup op's name.
        method = getattr(self.provider, op.value)
        # Profile lines and `cached perf` name the request kind (reference §5.2).
        with COUNTERS.request(LOOKUPS[op].kind.name, str(key)) as scope:
            result: Result = method(key)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", format_profile(scope, result.outcome.value))
        return result

    async def _work(self, queue: FairQueue) -> None:
        """The one consumer of the queue: one LDAP request at a time, uids in turn."""
        while True:
            job = await queue.get()
            job.started = True
            job.since = self.cache.invalidations()
            if self._stored_since(job):
                if not job.fut.done():
                    job.fut.set_result(Result(Outcome.FOUND))
                continue
            # A request only the background asked for goes at the background's pace.
            self.pacer.begin(job.queued_for == {REFRESH_UID})
            # Read by _groups_stored in the worker thread while this job runs.
            self._serial += 1
            job.serial = self._serial
            # The collector stays off from the request to the end of the work it leaves
            # for after its answer, which frees what it built (cached/gcpause.py hold).
            gc_release = gcpause.hold()
            try:
                await self._answer_then_after(job, queue)
            finally:
                gc_release()

    async def _answer_then_after(self, job: _Job, queue: FairQueue) -> None:
        """Run the job's request, answer it, then the work it left for after."""
        try:
            result = await self._in_worker(functools.partial(self._do, job.op, job.key))
        except Exception as e:
            if not job.fut.done():
                job.fut.set_exception(e)
        else:
            if not job.fut.done():
                job.fut.set_result(result)
        finally:
            self.pacer.begin(False)
        if not self.provider.after_pending:
            return  # most requests: no hop to the worker thread
        # The answer goes out first, then the work the request left for after it,
        # before the next request. Each waiter writes its answer in the step that
        # resumes it, some loop iterations after the job is done; started sooner,
        # the worker thread takes the GIL at the loop's first poll and the answer
        # waits out the switch interval (5 ms) behind it (strace of a cold `id
        # bigroupuser`: 6 ms from the worker's end to the answer's write).
        if job.waiting:
            await job.answered.wait()
        # And not while those who read the answer work (the responder filling the
        # memory cache, the client's getgrgid of each group): on two cores the three
        # shared them, and a cold `id bigroupuser` took 3.5 ms longer (medians of 12,
        # alternating). It waits for the next request at most: that one runs it first.
        await queue.wait_put(AFTER_ANSWER_IDLE)
        try:
            await self._in_worker(self.provider.after_answer)
        except Exception:
            log.exception("after the %s request of %s", job.op.value, job.key)

    def _stored_since(self, job: _Job) -> bool:
        """Whether another request stored the user or group ``job`` asks for valid
        since it was asked for: then it is answered from the cache, with no search.
        A client's `id` after `cached cache -E` sends a getgrgid of each of the user's
        groups, each expired until the initgroups walk ahead of them in the queue
        stores them all: 2,085 queued requests, a search each, for bigroupuser (2
        hosts of 200 in the fleet benchmark's expiry phase, whose initgroups answer
        had come from the cache after ``cache_first_wait``). An entry stored by a
        request an invalidation raced is stored expired (:meth:`request`), so this
        never answers from what an invalidation expired."""
        lookup = LOOKUPS.get(job.op)
        if lookup is None or lookup.kind not in (Kind.USER, Kind.GROUP):
            return False
        # The cache reads them by the ops' names, as the provider fetches them (_do).
        found = getattr(self.cache, job.op.value)(job.key)
        stored: bool = found.state is State.VALID and found.times.last_update >= job.asked
        if stored:
            COUNTERS.add(REQUEST_STORED)
        return stored

    async def request(self, op: Op, key: str | int, uid: Hashable = REFRESH_UID) -> Result:
        """Run one backend request for client ``uid`` (None: unknown; ``"refresh"``:
        the background refresh, a queue of its own)."""
        return (await self._request(op, key, uid))[0]

    async def _request(self, op: Op, key: str | int, uid: Hashable) -> tuple[Result, int]:
        """:meth:`request`, and the serial of the request that answered."""
        if self.queue is None:
            self.queue = FairQueue()
            self._worker = asyncio.create_task(self._work(self.queue))
        job = self.inflight.get((op, key))
        if job is not None and job.since is not None and job.since != self.cache.invalidations():
            # Started before an invalidation (`cached cache`, D-Bus): what it reads may
            # predate the change the administrator invalidated for, so a lookup asked
            # for after it does not share its answer but runs again (docs/ARCHITECTURE.md
            # §5, "Invalidation and the backend's writes").
            job = None
        if job is None:
            job = _Job(op, key, asyncio.get_running_loop().create_future())
            self.inflight[(op, key)] = job

            def done(_f: asyncio.Future[Result], k: tuple[Op, str | int] = (op, key)) -> None:
                if self.inflight.get(k) is job:
                    del self.inflight[k]

            job.fut.add_done_callback(done)
        if not job.started:
            self.queue.put(uid, job)
        if uid != REFRESH_UID:
            self.hurry()  # a client waits: the paced request in progress goes at full speed
        job.waiting += 1
        try:
            result: Result = await asyncio.shield(job.fut)
        finally:
            job.waiting -= 1
            if not job.waiting:
                job.answered.set()
        self.requests += 1
        if result.outcome in (Outcome.FOUND, Outcome.NOT_FOUND):
            self.last_success = time.time()
        self.announce()
        return result, job.serial

    def hurry(self) -> None:
        """A client waits for the worker thread: the background request holding it
        finishes at full speed (cached/ldap/pacing.py)."""
        if self.pacer.active:
            self.pacer.hurry.set()

    def announce(self) -> None:
        """Tell the responder when the domain went offline or came back; wake the
        server check when it went offline or to a backup server; schedule the
        catch-up run when it came back."""
        online = self.client.online
        if self.client.check_in() is not None:
            self._check_due.set()
        if online == self.announced_online:
            return
        if online:
            self._catch_up_at = time.monotonic() + self.catch_up_delay()
            self._wake.set()
        if online and self.sudo is not None:
            self.sudo.host_changed()
        self.announced_online = online
        if online and self.logins.pending:
            # Back online: the TGTs of the logins made offline (krb5_store_password_if_offline).
            self._retrying = asyncio.ensure_future(self.logins.retry_pending())
        if online and self.logins.renewals.entries:
            # SSSD's online callback: the renewals put off while offline, now.
            self._renewing = asyncio.ensure_future(self.logins.renew_due())
        if self._announcing is None or self._announcing.done():
            self._announcing = asyncio.ensure_future(self._announce())

    async def _announce(self) -> None:
        # Loops so that a change during the call is announced as well.
        sent: bool | None = None
        while sent != self.announced_online:
            sent = self.announced_online
            try:
                note = DomainStateNote(
                    self.domain.name, sent, self.client.retry_in, self.client.last_error
                )
                await self.responder.call(Op.DOMAIN_STATE, timeout=10.0, **note.args())
            except framing.RpcError as e:
                # The responder is not up yet or restarting: it learns the state from
                # the next answer instead.
                log.debug("announcing domain state to the responder: %s", e)
                return

    def _groups_stored(self, user: str, names: list[str]) -> None:
        """The provider committed some of a user's groups ahead of its answer: the
        responder is told at once, from the executor thread (a note through the
        event loop waited for the thread to let go of the GIL, up to its 5 ms
        switch interval each time)."""
        # Names a note cannot carry are left to the answer's own prefill.
        names = [n for n in names if GroupsStoredNote.notable(n)]
        step = GroupsStoredNote.MAX_GROUPS
        for i in range(0, len(names), step):
            note = GroupsStoredNote(
                self.domain.name, user, self._serial, tuple(names[i : i + step])
            )
            failed = self._notifier.send(Op.GROUPS_STORED, **note.args())
            if failed:
                # Not up, or restarting: the answer's own prefill puts them in.
                log.debug("telling the responder of groups stored early: %s", failed)
                return

    async def handle(self, op: Op, args: dict[str, Any]) -> dict[str, Any]:
        if op in LOOKUPS:
            # uid None (D-Bus, tools): one shared queue.
            req = LookupRequest.parse(op, args)
            result, serial = await self._request(op, req.key, req.uid)
            reply = LookupReply(
                result.outcome, result.message, self.client.online, self.client.retry_in,
                serial if op is Op.INITGROUPS else 0,
            )  # fmt: skip
            return reply.fields()
        if op is Op.DROP_CREDENTIALS:
            drop = DropCredentials.parse(args)
            dropped = drop.domain in ("", self.domain.name) and self.cache.drop_credentials(
                drop.name
            )
            if dropped:
                log.info("domain %s: cached credentials of %r dropped", self.domain.name,
                         drop.name)  # fmt: skip
            return {"dropped": int(dropped)}
        if op in (Op.AUTHENTICATE, Op.CHANGE_PASSWORD, Op.ACCESS, Op.SUDO_REFRESH):
            self.hurry()  # they run on the worker thread too
        if op is Op.AUTHENTICATE:
            answer = await self.logins.authenticate(AuthRequest.parse(args))
            self.announce()
            return answer.fields()
        if op is Op.CHANGE_PASSWORD:
            changed = await self.logins.change_password(ChpassRequest.parse(args))
            self.announce()
            return changed.fields()
        if op is Op.ACCESS:
            decided = await self.access.check(AccessRequest.parse(args), self._in_worker)
            self.announce()
            return decided.fields()
        if op is Op.SUDO_REFRESH:
            asked = SudoRefresh.parse(args)
            if self.sudo is None:
                return SudoRefreshReply(Outcome.ERROR, message="no sudo provider").fields()
            res = await self.sudo_refresh(asked.kind, asked.names)
            return SudoRefreshReply(res.outcome, res.changed, res.deleted, res.message).fields()
        if op is Op.REFRESH_SOON:
            # One flag, however many notes: the refresh-ahead task's next early run
            # refreshes whatever is past its midpoint then.
            self._soon.set()
            self._wake.set()
            return {}
        if op is Op.COUNTERS:
            return CountersReply(os.getpid(), COUNTERS.snapshot()).fields()
        if op is Op.STATUS:
            return {"status": self.status()}
        raise ValueError(f"a backend does not answer {op}")

    def status(self) -> dict[str, Any]:
        client = self.client
        sizes = {}
        for path in (self.cache.entry_path, self.cache.ts_path):
            with contextlib.suppress(OSError):
                sizes[os.path.basename(path)] = os.path.getsize(path)
        return {
            "domain": self.domain.name,
            "pid": os.getpid(),
            "online": client.online,
            "server": client.info.uri if client.info else "",
            "last_error": client.last_error,
            "retry_in": client.retry_in,
            "probing_for": time.monotonic() - self.probing_since if self.probing_since else 0.0,
            "offline_since": 0.0 if client.online else client.went_offline,
            "last_success": self.last_success,
            "cache_confirmed": 0.0 if self.last_success else self._cache_confirmed(),
            "started": self.started,
            "requests": self.requests,
            "queued": 0 if self.queue is None else self.queue.waiting(),
            "entries": self.cache.counts(),
            "store_bytes": sizes,
            "ts_rebuilt": self.cache.ts_rebuilt_reason,
            "limit_error": self.provider.limit_error,
            "limit_time": self.provider.limit_time,
            "credentials": self.cache.credentials_count(),
            **self.logins.status(),
            **self.access.status(),
            **({"sudo": self.sudo_status()} if self.sudo is not None else {}),
        }

    # -- sudo rules (cached/ldap/sudo.py) ---------------------------------------------

    async def sudo_refresh(self, kind: SudoRefreshKind, names: tuple[str, ...] = ()) -> SudoResult:
        """One sudo refresh in the worker thread; a full refresh asked for while one
        runs shares it."""
        assert self.sudo is not None
        sudo = self.sudo
        if kind is SudoRefreshKind.FULL and self._sudo_running is not None:
            return await asyncio.shield(self._sudo_running)
        fut = asyncio.ensure_future(self._in_worker(functools.partial(sudo.run, kind, names)))
        if kind is SudoRefreshKind.FULL:
            self._sudo_running = fut
            fut.add_done_callback(lambda _f: setattr(self, "_sudo_running", None))
        result: SudoResult = await asyncio.shield(fut)
        if result.outcome is Outcome.FOUND:
            self.last_success = time.time()
        self.announce()
        return result

    def sudo_schedule(self) -> tuple[int, int, float, float]:
        """(full interval, smart interval, full offset, smart offset), as SSSD's
        ``sdap_sudo_ptask_setup_generic`` sets the intervals: both 0 turns the smart one
        back on, a full one not longer than the smart one turns the smart one off. The
        offsets are this host's fraction (cached/jitter.py) of ``ldap_sudo_random_offset``,
        or of a tenth of each interval when it is unset."""
        d = self.domain
        full, smart = d.ldap_sudo_full_refresh_interval, d.ldap_sudo_smart_refresh_interval
        if full == 0 and smart == 0:
            smart = 900
        elif 0 < full <= smart:
            smart = 0
        spread = d.ldap_sudo_random_offset

        def offset(purpose: str, interval: int) -> float:
            return self.jitter.offset(purpose, interval / 10 if spread is None else spread)

        return full, smart, offset(SUDO_FULL, full), offset(SUDO_SMART, smart)

    def sudo_due(self, now: float) -> tuple[SudoRefreshKind, float]:
        """The next scheduled sudo refresh and when (wall clock). Each follows the last
        success of its kind (a full one counts as a smart one too, as SSSD postpones the
        smart refresh after a full one), kept in the timestamp store: a restart does not
        refresh (SSSD does a full refresh 10 s after every start: a fleet restarted
        together refreshes together). Never refreshed: a full refresh at once, so that
        sudo has rules. Overdue at the start: at this host's offset after the start."""
        full, smart, off_full, off_smart = self.sudo_schedule()
        st = self.cache.sudo_state()
        due: list[tuple[float, SudoRefreshKind]] = []
        if full:
            if not st.last_full:
                at = now
            elif st.last_full > now:  # the clock went back
                at = now + off_full
            else:
                at = max(st.last_full + full + off_full, self.started + off_full)
            due.append((at, SudoRefreshKind.FULL))
        if smart and (st.last_full or not full):
            last = max(st.last_full, st.last_smart)
            if last > now:
                at = now + off_smart
            else:
                at = max((last or self.started) + smart + off_smart, self.started + off_smart)
            due.append((at, SudoRefreshKind.SMART))
        at, kind = min(due)
        return kind, max(at, self._sudo_retry)

    async def _sudo_refresh_loop(self) -> None:
        """The scheduled full and smart refreshes (sudo_due), one at a time, skipped
        while offline (the server check brings the domain back) and retried after
        ``offline_timeout`` when one fails."""
        while True:
            kind, at = self.sudo_due(time.time())
            wait = at - time.time()
            if wait > 0:
                # Woken at least every minute: `cached cache -R` or a refresh asked for
                # by the responder moves the schedule.
                await asyncio.sleep(min(wait, 60.0))
                continue
            if not self.client.online:
                self._sudo_retry = time.time() + self.domain.offline_timeout
                continue
            try:
                result = await self.sudo_refresh(kind)
            except Exception as e:  # one failure ends neither the schedule nor the task
                log.error("domain %s: sudo %s refresh: %s: %s", self.domain.name, kind.value,
                          type(e).__name__, e)  # fmt: skip
                result = SudoResult(Outcome.ERROR, message=str(e))
            if result.outcome is not Outcome.FOUND:
                self._sudo_retry = time.time() + self.domain.offline_timeout
            else:
                self._sudo_retry = 0.0
                log.log(
                    logging.INFO if result.changed else logging.DEBUG,
                    "domain %s: sudo %s refresh: %d rules read, %d changed, %d deleted",
                    self.domain.name, kind.value, result.fetched, result.changed,
                    result.deleted,
                )  # fmt: skip

    def sudo_status(self) -> dict[str, Any]:
        assert self.sudo is not None
        st = self.cache.sudo_state()
        full, smart, off_full, off_smart = self.sudo_schedule()
        kind, at = self.sudo_due(time.time())
        return {
            "rules": self.cache.sudo_count(),
            "last_full": st.last_full,
            "last_smart": st.last_smart,
            "full_interval": full,
            "smart_interval": smart,
            "full_offset": off_full,
            "smart_offset": off_smart,
            "next": kind.value,
            "next_at": at,
            "last_error": self.sudo.last_error,
            "runs": self.sudo.last,
        }

    def _cache_confirmed(self) -> float:
        """With no answer since the start, when the server last confirmed an entry of
        the cache (DomainCache.newest_update): read once, since without an answer it
        cannot change, and the read passes over every timestamp."""
        if self._confirmed is None:
            self._confirmed = self.cache.newest_update()
        return self._confirmed

    async def _server_check(self) -> None:
        """Try the servers again off the lookup path, as SSSD's check_if_online does:
        while the domain is offline, when the backoff says (offline_timeout, doubling:
        §6.4); while on an ldap_backup_uri server, the preferred ones after
        failover_primary_timeout. The probe runs in a thread of its own and the
        connection it makes is adopted, so lookups meanwhile are answered at once from
        the cache (NOTFOUND for names it lacks) and never wait on a server that hangs.
        When a lookup itself retried, every unknown name waited ldap_opt_timeout (8 s)
        once per backoff step, and every lookup queued behind it (measured against
        SSSD 2.8.2 with slapd SIGSTOPped: 6.96-8.1 s, SSSD <= 0.05 s); on a backup, a
        hung preferred server held one lookup every failover_primary_timeout. Online,
        it replaces the connection after its lifetime (ldap_connection_expire_timeout)
        the same way, so no lookup waits on a reconnection."""
        name = f"probe-{self.domain.name}"
        while True:
            await self._check_due.wait()
            while (wait := self.client.check_in()) is not None:
                self._check_due.clear()
                if wait > 0:
                    # Woken early when the state changes (announce): offline meanwhile,
                    # the backoff's retry comes before a connection's replacement.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._check_due.wait(), wait)
                    if self.client.check_in() != 0.0:
                        continue  # not due yet, or due at another time now
                try:
                    self.probing_since = time.monotonic()
                    probe = await _in_thread(self.client.probe, name)
                    await self._in_worker(functools.partial(self.client.after_probe, probe))
                except Exception as e:
                    # The check outlives any one failure (a thread that cannot start
                    # under TasksMax, an error no server explains): without it the
                    # domain would stay offline until a restart.
                    log.error("domain %s: checking the servers failed: %s: %s",
                              self.domain.name, type(e).__name__, e)  # fmt: skip
                    await self._in_worker(
                        functools.partial(self.client.probe_failed, f"{type(e).__name__}: {e}")
                    )
                finally:
                    self.probing_since = 0.0
                self.announce()
            self._check_due.clear()

    async def _warm_up(self) -> None:
        """Connect at the start, off the lookup path, so that the first lookup finds
        the connection made (TCP, StartTLS, bind, root DSE: 4 ms to a local slapd,
        13 ms as a process's first, measured; several round trips to a distant
        server) rather than making it. The probe runs in a thread of its own, as the
        server check's, so a server that hangs holds nothing but a lookup that needs
        the connection, which waits for the probe rather than trying the same server
        again (LdapClient.take_warm_up)."""
        fut = self.client.begin_warm_up()

        def probe() -> None:
            try:
                fut.set_result(self.client.probe())
            except BaseException as e:
                fut.set_exception(e)

        try:
            await _in_thread(probe, f"connect-{self.domain.name}")
        except Exception as e:  # the thread could not start: no probe to wait for
            fut.set_exception(e)
        await self._in_worker(self.client.take_warm_up)
        self.announce()

    async def _sync_timestamps(self) -> None:
        # The timestamp store is no-sync (reference §3.1); flush it on a timer so a
        # crash of the machine loses at most this many seconds of expiry times.
        while True:
            await asyncio.sleep(self.config.daemon.ts_sync_interval)
            try:
                await self._in_worker(self.cache.sync_timestamps)
            except StoreWriteError as e:
                log.error("%s", e)

    def refresh_schedule(self) -> tuple[float, float]:
        """(interval, offset spread) of the background refresh, as SSSD computes them
        (reference §6.1): an interval that would outlast the entries shrinks to 70 % of
        the shortest entry lifetime, the offset to 10 % of the interval. The defaults
        are that rule's values (config/rules.py)."""
        d = self.domain
        interval = float(d.refresh_expired_interval)
        offset = float(d.refresh_expired_interval_offset)
        lifetime = self.shortest_lifetime()
        if lifetime and interval + offset > lifetime:
            interval = 0.7 * lifetime
            offset = 0.1 * interval
        return interval, offset

    def shortest_lifetime(self) -> float:
        """The shorter of the user and group entry lifetimes (0: entries never expire)."""
        d = self.domain
        return float(min(d.entry_cache_user_timeout, d.entry_cache_group_timeout))

    def soon_schedule(self) -> tuple[float, float, float]:
        """(user window, group window, gap) of the early runs: an entry is past its
        midpoint when it expires within (100 - entry_cache_nowait_percentage) % of its
        lifetime, the windows an early run refreshes within; early runs are at least
        the gap apart (REFRESH_SOON_GAP)."""
        d = self.domain
        left = (100 - self.config.nss.entry_cache_nowait_percentage) / 100
        users, groups = left * d.entry_cache_user_timeout, left * d.entry_cache_group_timeout
        return users, groups, min(REFRESH_SOON_GAP, 0.1 * min(users, groups))

    async def _refresh_expired(self) -> None:
        """Refresh entries before they expire (refresh ahead: ``refresh_expired_interval``,
        §6.4), so that no lookup waits on an expiry.

        Each run refreshes what would expire before the next run begins, through the
        backend's own requests: those of entries the cache holds validate by change
        stamps first (cached/ldap/refresh.py), so an unchanged group costs its stamp,
        not its members. Runs are skipped while offline (the server check tries the
        servers) and bounded (REFRESH_PER_SECOND, REFRESH_MAX_PER_RUN). They start at
        this host's offset (cached/jitter.py) and follow each other every interval plus
        that offset: a fleet restarted together refreshes spread over the offset, and
        hosts with different offsets drift further apart at every run. Between them,
        entries answered past their midpoint make early runs, and the domain's return
        online a catch-up run (:meth:`_until`). The runs' searches go at the
        background's pace (REFRESH_SEARCHES_PER_SECOND).

        SSSD's ``be_refresh`` has no catch-up: its periodic task (``be_ptask`` with
        ``BE_PTASK_OFFLINE_SKIP``) skips a run due while offline and schedules the next
        one a period later, and nothing runs when the backend comes back online, so
        what expired meanwhile waits for that run or for a lookup that finds it
        expired."""
        interval, spread = self.refresh_schedule()
        offset = self.jitter.offset(REFRESH_AHEAD, spread)
        lifetime = self.shortest_lifetime()
        # The first run 30 s after start-up, as SSSD's be_refresh, plus the offset.
        due = time.monotonic() + min(30.0, interval) + offset
        while True:
            await self._until(due)
            began, began_at = time.monotonic(), time.time()
            self._run_began = began
            following = self.next_refresh(began_at, interval)
            due = began + (following - began_at)
            if self.client.online:  # offline: the server check tries the servers
                # Whatever expires before the next run begins and within the margin
                # after that: what the next run would not refresh in time (SSSD's
                # horizon of one interval leaves the entries expiring in the offset its
                # next run may come late by to expire).
                whole = await self._refresh_run(
                    refresh_horizon(began_at, following, interval, spread, lifetime)
                )
                self._runs_keep_up = whole and time.monotonic() < due
            else:
                log.info("background refresh skipped: domain %s offline", self.domain.name)

    async def _watch_refresh(self, task: asyncio.Task[None]) -> None:
        """Say when the refresh-ahead ``task`` is stuck: its scheduled runs begin at
        most 1.1 intervals apart (:meth:`next_refresh`), the first at most an interval
        plus the offset after the start, offline too (a run then only logs that it is
        skipped), so none for two intervals plus the offset spread while the domain is
        online means the task hangs, and the entries expire one by one with nothing
        else to say so: an exception is logged by :func:`kept`, a hang is not. A run
        still going after that long (a server answering each request slowly) is
        reported too: the entries behind it expire as well. Logged
        at ERROR once per stall, with the domain, the time since the last run began and
        what the task awaits (:func:`awaiting`), and counted (``be.refresh.stalled``).
        Checked twice an interval: nothing against a run's cost."""
        interval, spread = self.refresh_schedule()
        allowed = 2 * interval + spread
        if self._run_began is None:
            self._run_began = time.monotonic()
        reported: float | None = None  # the last run's beginning, when already said
        while True:
            await asyncio.sleep(interval / 2)
            began = self._run_began
            quiet = time.monotonic() - began
            if quiet <= allowed or not self.client.online or reported == began:
                continue
            reported = began
            COUNTERS.add(REFRESH_STALLED)
            log.error("domain %s: no refresh-ahead run has begun for %.0f s (they begin at "
                      "most %.0f s apart); the refresh task is at %s", self.domain.name,
                      quiet, 1.1 * interval, awaiting(task))  # fmt: skip

    def next_refresh(self, now: float, interval: float) -> float:
        """When (epoch) the scheduled run after one beginning at ``now`` begins: at
        this host's phase of the interval on the wall clock (cached/jitter.py
        ``next_at``, REFRESH_PHASE), at least a tenth of the interval after ``now`` (a
        run begun a moment before its point is not followed by another at once), so
        at most 1.1 intervals: the horizon stays inside an entry's lifetime. Hosts
        started together run spread over the whole interval, not within the minute
        they started in: in a 100-host fleet whose entries were stored together, runs
        each host began within ~40 s of the others, at 6 searches each, made 34
        searches in one second."""
        return next_at(now + interval / 10, interval, self.jitter.fraction(REFRESH_PHASE))

    async def _until(self, due: float) -> None:
        """Wait for ``due`` (monotonic), the next scheduled run, running an early run
        when the responder noted entries answered past their midpoint (Op.REFRESH_SOON)
        that the scheduled runs would not refresh before they expire
        (:meth:`early_horizon`), at most one per gap: SSSD refreshes each such entry
        with a request of its own (``entry_cache_nowait_percentage``), which for a user
        in 2,085 groups is 2,085 searches; the early run refreshes them at once, a
        user's groups with one walk by stamps. An early run starts at this host's delay
        after the note (:meth:`soon_delay`). When the domain came back online, the
        catch-up run refreshes whatever expired or passed its midpoint while nothing
        ran at this host's delay after it came back (:meth:`catch_up_delay`). Both are
        skipped while offline, as the runs are. Notes that come while a scheduled run
        is in progress are weighed after it (this wait comes between runs), against
        what it left."""
        users, groups, gap = self.soon_schedule()
        while (wait := due - time.monotonic()) > 0:
            now = time.monotonic()
            if self._soon.is_set() and self._soon_at is None:
                begin = max(self._last_early + gap, now)
                self._soon_at = begin + self.soon_delay(begin, min(users, groups))
            starts = [t for t in (self._soon_at, self._catch_up_at) if t is not None]
            hold = min([wait, *(t - now for t in starts)])
            if hold > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), hold)
                continue
            catch_up = self._catch_up_at is not None and self._catch_up_at <= now
            if catch_up:
                # It refreshes what a noted early run would: that one is done too.
                self._catch_up_at = None
            self._soon.clear()
            self._soon_at = None
            self._last_early = time.monotonic()
            if not self.client.online:
                # Offline again: the next return schedules another catch-up.
                log.info("%s refresh skipped: domain %s offline",
                         "catch-up" if catch_up else "early", self.domain.name)  # fmt: skip
                continue
            now_wall = time.time()
            bound = now_wall + max(users, groups) if catch_up else self.early_horizon(due)
            if bound is None:
                COUNTERS.add(REFRESH_LEFT)
                log.debug("early refresh not needed: the scheduled runs refresh in time "
                          "what is past its midpoint")  # fmt: skip
                continue
            COUNTERS.add(REFRESH_CATCH_UP if catch_up else REFRESH_EARLY)
            why = "catch-up, back online" if catch_up else "early, past the midpoint"
            await self._refresh_run(
                min(now_wall + groups, bound), min(now_wall + users, bound), why
            )

    def early_horizon(self, due: float) -> float | None:
        """Until when (epoch) an early run refreshes what is past its midpoint, the next
        scheduled run beginning at ``due`` (monotonic): the last expiry among the
        entries past their midpoint (not yet expired) that the next scheduled runs
        would not refresh in time (:func:`reached_in_time`); None when there is none,
        and then no early run is made.

        Each scheduled run refreshes what expires before the next run plus a margin
        (:func:`refresh_horizon`): with the interval at 70 % of the lifetime (SSSD's
        rule, the default), entries pass their midpoint between two runs and the next
        run refreshes them before they expire. An early run for every entry past its
        midpoint, as before, revalidated a host whose entries are looked up regularly
        twice per interval: in a 200-host fleet (lifetime 180 s, interval 126 s) ~33
        searches/s, whose busiest seconds passed 40, where the scheduled runs alone
        make half that. What the scheduled runs would not reach in time still gets an
        early run: entries expiring before the next run's start plus the margin (a
        cache filled before a restart, whose first run comes 30 s after the start),
        those in a gap between horizons. When the last scheduled run did not refresh
        all it had due (REFRESH_MAX_PER_RUN, the domain went offline) or ended after
        the next was due, the runs are not counted on: whatever is past its midpoint,
        as before."""
        users, groups, _gap = self.soon_schedule()
        now = time.time()
        if not self._runs_keep_up:
            return now + max(users, groups)
        interval, spread = self.refresh_schedule()
        lifetime = self.shortest_lifetime()
        runs = []
        start = now + (due - time.monotonic())
        for _ in range(2):  # the next run, and the one after
            following = self.next_refresh(start, interval)
            runs.append((start, refresh_horizon(start, following, interval, spread, lifetime)))
            start = following
        margin = refresh_margin(interval, spread)
        missed = [x for x in self.expiries(now + users, now + groups)
                  if not reached_in_time(x, runs, margin)]  # fmt: skip
        return max(missed, default=None)

    def catch_up_delay(self) -> float:
        """This host's delay of the catch-up run after the domain came back online:
        its share of REFRESH_CATCH_UP_SPREAD, at most half the window past the
        midpoint (:data:`REFRESH_CATCH_UP_SPREAD`)."""
        users, groups, _gap = self.soon_schedule()
        spread = min(REFRESH_CATCH_UP_SPREAD, min(users, groups) / 2)
        return self.jitter.offset(CATCH_UP, spread)

    def soon_delay(self, begin: float, window: float) -> float:
        """This host's delay of an early run that could begin at ``begin`` (monotonic):
        its share of REFRESH_SOON_SPREAD (at most half the ``window`` past the
        midpoint), cut so that the run begins a tenth of the window before the soonest
        expiry of the entries past their midpoint (:data:`REFRESH_SOON_SPREAD`)."""
        spread = min(REFRESH_SOON_SPREAD, window / 2)
        soonest = self.soonest_expiry(time.time() + window)
        if soonest is not None:
            left = soonest - time.time() - (begin - time.monotonic()) - window / 10
            spread = min(spread, max(left, 0.0))
        return self.jitter.offset(REFRESH_SOON, spread)

    def soonest_expiry(self, horizon: float) -> float | None:
        """The soonest expiry (epoch) after now and by ``horizon`` of the users, groups
        and initgroups lists the cache holds; None when none expires then."""
        return min(self.expiries(horizon, horizon), default=None)

    def expiries(self, users_by: float, groups_by: float) -> list[float]:
        """The expiries (epoch) after now of the users and initgroups lists the cache
        holds that expire by ``users_by``, and of the groups by ``groups_by``. Entries
        already expired are left out: a lookup of one waits whatever a run does."""
        cache = self.cache
        now = time.time()
        users, groups, initgr = cache.expiring(max(users_by, groups_by))
        out = [(t.data_expire, users_by) for t in cache.times("user", users).values()]
        out += [(t.data_expire, groups_by) for t in cache.times("group", groups).values()]
        out += [(t.initgr_expire, users_by) for t in cache.times("user", initgr).values()]
        return [e for e, by in out if now < e <= by]

    async def _refresh_run(
        self, horizon: float, user_horizon: float | None = None, why: str = ""
    ) -> bool:
        """One run: initgroups first (one such request refreshes the user's groups as
        well, so the groups still due afterwards are the ones no refreshed user is in),
        then users and groups still due; the entries expiring first first. Groups
        expiring by ``horizon``, users (and their initgroups) by ``user_horizon``
        (None: the same). False when it stopped short of what was due (its bound
        REFRESH_MAX_PER_RUN, the domain went offline)."""
        cache = self.cache
        until = {"user": horizon if user_horizon is None else user_horizon, "group": horizon}
        users, groups, initgr = cache.expiring(max(until.values()))
        budget = REFRESH_MAX_PER_RUN
        done = 0
        slot = time.monotonic()
        whole = True
        walked: set[str] = set()  # initgroups refreshed without an error

        async def refresh(op: Op, name: str) -> bool:
            nonlocal budget, done, slot, whole
            if budget <= 0 or not self.client.online:
                whole = False
                return False
            wait = slot - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            slot = max(slot, time.monotonic()) + 1.0 / REFRESH_PER_SECOND
            budget -= 1
            try:
                await self.request(op, name)
            except Exception as e:
                # One entry's failure ends neither the run nor the refresh task.
                log.error("background refresh of %s %s: %s: %s", op.value, name,
                          type(e).__name__, e)  # fmt: skip
            else:
                done += 1
                if op is Op.INITGROUPS:
                    walked.add(name)
            return True

        def initgroups_due(names: list[str]) -> list[str]:
            itimes = cache.times("user", names)
            due = [n for n in names
                   if n not in itimes or itimes[n].initgr_expire <= until["user"]]  # fmt: skip
            due.sort(key=lambda n: t.initgr_expire if (t := itimes.get(n)) else 0.0)
            return due

        initgr = initgroups_due(initgr)
        for name in initgr:
            if not await refresh(Op.INITGROUPS, name):
                break
        # An invalidation (`cached cache -E`) during the run leaves what it refreshed
        # due again (a commit an invalidation raced records no times) and, with it,
        # every group of those users. Those initgroups are walked once more (a request
        # that failed is not tried again in the run), before the group pass and
        # whenever it finds a group due, where the group pass would send a search per
        # group: 2,085 for bigroupuser, 17 minutes at the background's pace, which is
        # what 11 of 200 fleet hosts did when the expiry phase's `cache -E` met their
        # run, and 4 hosts with the invalidation in the middle of the group pass.
        rewalked: set[str] = set()

        async def rewalk_raced() -> bool:
            for name in initgroups_due(sorted(walked - rewalked)):
                rewalked.add(name)
                if not await refresh(Op.INITGROUPS, name):
                    return False
            return True

        await rewalk_raced()
        for op, what, names in (
            (Op.USER_BY_NAME, "user", users),
            (Op.GROUP_BY_NAME, "group", groups),
        ):
            due = cache.times(what, names)
            names.sort(key=lambda n: t.data_expire if (t := due.get(n)) else 0.0)
            for name in names:
                # Read again just before: a client's lookup or a request of this run
                # may have refreshed it since the run began, or an invalidation
                # expired it and the walks of its users with it.
                t = cache.times(what, [name]).get(name)
                if t is not None and t.data_expire > until[what]:
                    continue
                if walked - rewalked and await rewalk_raced():
                    t = cache.times(what, [name]).get(name)
                    if t is not None and t.data_expire > until[what]:
                        continue
                if not await refresh(op, name):
                    break
        netgroups = cache.expiring_netgroups(horizon) if user_horizon is None else []
        for name in netgroups:
            if not await refresh(Op.NETGROUP_BY_NAME, name):
                break
        # Nothing due is the steady state between expiries: no line at the default level.
        log.log(
            logging.INFO if initgr or users or groups or netgroups else logging.DEBUG,
            "background refresh: %d initgroups, %d users, %d groups, %d netgroups due; "
            "%d refreshed%s%s",
            len(initgr),
            len(users),
            len(groups),
            len(netgroups),
            done,
            "" if self.client.online else " (went offline)",
            f" ({why})" if why else "",
        )
        return whole

    async def _delayed_kinits(self) -> None:
        """krb5_store_password_if_offline: while logins made offline wait for their
        TGT, try the KDC again every offline_timeout (plus this host's offset), as
        well as when the domain comes back online (``announce``): the KDC can be
        unreachable while the directory is not."""
        offset = self.jitter.offset(OFFLINE_RETRY, self.domain.offline_timeout_random_offset)
        while True:
            await asyncio.sleep(max(1.0, self.domain.offline_timeout + offset))
            if self.logins.pending and self.client.online:
                try:
                    await self.logins.retry_pending()
                except Exception as e:  # the next round tries again
                    log.error("domain %s: delayed kinit failed: %s", self.domain.name, e)

    async def _renew_tgts(self) -> None:
        """krb5_renew_interval: every interval, while online, renew the users' TGTs
        past half their lifetime (SSSD's renewal timer, which does nothing while the
        backend is offline)."""
        while True:
            await asyncio.sleep(self.domain.krb5_renew_interval)
            if self.logins.renewals.entries and self.client.online:
                try:
                    await self.logins.renew_due()
                except Exception as e:  # the next round tries again
                    log.error("domain %s: TGT renewal failed: %s", self.domain.name, e)

    async def run(self, ready: Callable[[], None]) -> None:
        path = framing.backend_socket(self.config.daemon.pipes_dir, self.domain.name)
        server = await aio.serve(path, self.handle)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)  # logs go to stderr
        def background(name: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
            return asyncio.create_task(kept(name, loop))

        syncer = background("timestamp flush", self._sync_timestamps)
        checker = background("server check", self._server_check)
        warm_up = background("warm-up", self._warm_up)
        d = self.domain
        refresher = (
            background("refresh ahead", self._refresh_expired)
            if d.refresh_expired_interval > 0
            else None
        )
        # The watch of a refresh task that hangs (an exception is kept's).
        watch = (
            background("refresh watch", functools.partial(self._watch_refresh, refresher))
            if refresher is not None
            else None
        )
        sudo_task = background("sudo refresh", self._sudo_refresh_loop) if self.sudo else None
        kinits = (
            background("delayed kinit", self._delayed_kinits)
            if d.krb5_store_password_if_offline
            else None
        )
        renewer = background("TGT renewal", self._renew_tgts) if d.krb5_renew_interval > 0 else None
        log.info("backend %s ready on %s", self.domain.name, path)
        ready()
        await stop.wait()
        log.info("backend %s stopping", self.domain.name)
        server.close()
        syncer.cancel()
        checker.cancel()
        warm_up.cancel()
        for task in (refresher, watch, sudo_task, kinits, renewer):
            if task is not None:
                task.cancel()
        if self._worker is not None:
            self._worker.cancel()
        self.hurry()
        # Let the request in progress finish its transaction, then close cleanly:
        # the clean marker lets the next start trust the timestamp store (§3.5).
        await self._in_worker(lambda: None)
        self.executor.shutdown(wait=True)
        self.logins.close()
        self._notifier.close()
        await self.responder.close()
        self.client.close()
        self.cache.close(clean=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
