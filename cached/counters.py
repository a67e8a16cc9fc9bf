"""One registry of counters and timers: every cost is counted where it happens.

Each process (responder, each backend) has one module-level registry, ``COUNTERS``.
A *stat* has three numbers: how many times it happened, the seconds it took, and an
amount (bytes written, entries returned, ...). ``snapshot()`` gives a plain dict
that crosses process boundaries (msgpack) so ``cached perf`` (``tools/perf.py``) can
subtract two snapshots and print reference §5.2's id_perf breakdown from the difference.

Two things SSSD's probes do that a flat counter cannot, and which this module does:

* *zero-level* transactions (§5.2 items 2-4): entry-store transactions nest; only
  the outermost one is counted and timed. ``transaction()`` tracks the depth.
* *per-request scopes* (the PROFILE log lines): ``request()`` opens a scope in a
  context variable, so a stat recorded anywhere below it — in this task, or in a
  worker thread started with ``asyncio.to_thread`` (which copies the context) — is
  also added to that request's own totals.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# Stat names shared by the writers (cache, ldap, nss) and the readers (perf, status).
# Entry store ("sysdb" in SSSD's words), outermost write transactions only.
ENTRY_TXN = "cache.entry.txn"  # count, seconds from begin to end of commit
ENTRY_COMMIT = "cache.entry.commit"  # seconds inside commit (+fsync); §5.2 "writing to LDB"
ENTRY_BYTES = "cache.entry.bytes"  # amount: bytes of records written
ENTRY_RECORDS = "cache.entry.records"  # amount: records written or deleted
TS_WRITE = "cache.ts.write"  # timestamp-store write transactions
TS_BYTES = "cache.ts.bytes"
TS_RECORDS = "cache.ts.records"
CACHE_READ = "cache.read"  # responder reads (count, seconds)
# Nested member lists expanded (count, seconds; amount: names). Memoised per entry-store
# snapshot, so a group asked for again and again is expanded once per cache change.
GROUP_EXPAND = "cache.group.expand"
ENTRY_SKIPPED = "cache.entry.skipped"  # entries the writer refused (bad id, name, key size)
LDAP_SEARCH = "ldap.search"  # logical searches; pages counted once; amount: entries
LDAP_WAIT = "ldap.wait"  # seconds waiting for the server (network + server time)
LDAP_DECODE = "ldap.decode"  # seconds turning entries into model values
LDAP_CONNECT = "ldap.connect"
LDAP_BER = "ldap.ber"  # seconds ldap3 spends decoding BER into Python values
LDAP_BYTES = "ldap.bytes"  # amount: bytes received from LDAP servers
REQ_USER = "be.req.user"  # backend account requests by type (§5.2 item 7)
REQ_GROUP = "be.req.group"
REQ_INITGR = "be.req.initgr"
REQ_NETGROUP = "be.req.netgroup"
NESTED_LEVELS = "be.nested.levels"  # amount: nesting levels walked
NESTED_RESOLVE = "be.nested.resolve"  # member DN -> name resolution
NESTED_COMPARE = "be.nested.compare"  # comparing fetched content with the cache
VALIDATE = "be.validate"  # refreshes validated by stamps; amount: groups checked
VALIDATE_FETCHED = "be.validate.fetched"  # amount: groups of those fetched whole again
# Revalidations whose groups above the first level a stamps-only group sweep vouched
# for (cached/ldap/above.py); amount: those groups.
VALIDATE_ABOVE = "be.validate.above"
REFRESH_EARLY = "be.refresh.early"  # early refresh-ahead runs (entries used past their midpoint)
# Notes of entries answered past their midpoint that made no early run: the scheduled
# refresh-ahead runs refresh them before they expire.
REFRESH_LEFT = "be.refresh.left"
BACKGROUND_RESTART = "be.background.restart"  # background tasks started again after an exception
# Refresh-ahead tasks found with no scheduled run begun for two intervals plus the
# offset spread while the domain was online (BackendService._watch_refresh): stuck.
REFRESH_STALLED = "be.refresh.stalled"
# Lookups answered from the cache when their turn came: another request had stored the
# entry valid since they were asked for (BackendService._stored_since).
REQUEST_STORED = "be.request.stored"
REFRESH_CATCH_UP = "be.refresh.catch_up"  # refresh-ahead runs after the domain came back online
# Searches of background requests held to their pace (count, seconds waited).
REFRESH_PACED = "be.refresh.paced"
NSS_REQUEST = "nss.request"  # responder requests answered
NSS_BACKEND = "nss.backend"  # responder -> backend refresh requests (count, seconds)
NSS_SOON = "nss.refresh_soon"  # notes to a backend of entries answered past their midpoint
NSS_STALE = "nss.stale"  # expired entries answered without waiting for a refresh
# Lookups that waited on a refresh by the backend (count, seconds): a missing or
# expired entry; a midpoint refresh, answered at once, is not one.
NSS_WAIT = "nss.wait"
NSS_EARLY = "nss.prefill.early"  # notes of groups stored early; amount: groups fed from them
# INITGR answers whose prefill its request's notes spared groups; amount: those groups.
NSS_SPARED = "nss.prefill.spared"
SUDO_REFRESH = "be.sudo.refresh"  # sudo rule refreshes (count, seconds); amount: rules read
SUDO_REQUEST = "sudo.request"  # sudo responder requests answered (count, seconds)
IFP_REQUEST = "ifp.request"  # D-Bus method calls answered (count, seconds)
IFP_DENIED = "ifp.denied"  # root-only D-Bus calls refused


@dataclass(slots=True)
class Stat:
    count: int = 0
    seconds: float = 0.0
    amount: int = 0

    def as_list(self) -> list[float]:
        return [self.count, self.seconds, self.amount]


@dataclass(slots=True)
class Scope:
    """The stats recorded while one request was being served."""

    kind: str
    key: str
    started: float = field(default_factory=time.perf_counter)
    elapsed: float = 0.0
    stats: dict[str, Stat] = field(default_factory=dict)

    def get(self, name: str) -> Stat:
        return self.stats.get(name) or Stat()


_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("scope", default=None)


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, Stat] = {}
        # Entry-store transaction depth, per thread: the backend writes from one
        # worker thread, but tests may write from several.
        self._depth = threading.local()

    def add(self, name: str, count: int = 1, seconds: float = 0.0, amount: int = 0) -> None:
        scope = _SCOPE.get()
        with self._lock:
            for stats in (self._stats, scope.stats) if scope is not None else (self._stats,):
                stat = stats.get(name)
                if stat is None:
                    stat = stats[name] = Stat()
                stat.count += count
                stat.seconds += seconds
                stat.amount += amount

    @contextmanager
    def timer(self, name: str, amount: int = 0) -> Iterator[None]:
        """Count one occurrence of ``name`` and the time spent inside the block."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, 1, time.perf_counter() - start, amount)

    @contextmanager
    def transaction(self, name: str = ENTRY_TXN) -> Iterator[bool]:
        """Time a store transaction; only the outermost one (depth 0) is recorded.

        Yields True for the outermost transaction, as SSSD's ``sssd_transaction_start``
        probe passes ``nesting == 0`` (reference §5.1).
        """
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        start = time.perf_counter()
        try:
            yield depth == 0
        finally:
            self._depth.value = depth
            if depth == 0:
                self.add(name, 1, time.perf_counter() - start)

    @contextmanager
    def request(self, kind: str, key: str) -> Iterator[Scope]:
        """Open a per-request scope; stats recorded inside also land in it."""
        scope = Scope(kind, key)
        token = _SCOPE.set(scope)
        try:
            yield scope
        finally:
            _SCOPE.reset(token)
            scope.elapsed = time.perf_counter() - scope.started

    def get(self, name: str) -> Stat:
        with self._lock:
            stat = self._stats.get(name)
            return Stat(stat.count, stat.seconds, stat.amount) if stat else Stat()

    def snapshot(self) -> dict[str, list[float]]:
        """A plain, serialisable copy: ``{name: [count, seconds, amount]}``."""
        with self._lock:
            return {name: stat.as_list() for name, stat in self._stats.items()}

    def reset(self) -> None:
        with self._lock:
            self._stats.clear()


def diff(after: dict[str, list[float]], before: dict[str, list[float]]) -> dict[str, Stat]:
    """What happened between two snapshots."""
    out: dict[str, Stat] = {}
    for name, (count, seconds, amount) in after.items():
        b = before.get(name, [0, 0.0, 0])
        out[name] = Stat(int(count - b[0]), seconds - b[1], int(amount - b[2]))
    return out


def merge(snapshots: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Sum snapshots of several processes (responder + backends) into one."""
    out: dict[str, list[float]] = {}
    for snap in snapshots:
        for name, values in snap.items():
            cur = out.setdefault(name, [0, 0.0, 0])
            for i in range(3):
                cur[i] += values[i]
    return out


COUNTERS = Counters()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms"


def format_profile(scope: Scope, outcome: str) -> str:
    """One hierarchical line per request, in the shape of SeaweedFS's profiling notes
    (docs/CONTRIBUTING.md, Style), so `grep PROFILE | awk` gives per-stage statistics:

    ``INITGR PROFILE bigroupuser: total=612.0ms outcome=found | ldap=410.2ms,
    decode=150.1ms, store=21.4ms └─ ldap: searches=5, entries=2086, wait=300.1ms,
    ber=80.3ms; store: txn=1, commit=3.1ms, bytes=770805, ts_writes=1, ts_records=2086``
    """
    g = scope.get
    search = g(LDAP_SEARCH)
    store_s = g(ENTRY_TXN).seconds + g(TS_WRITE).seconds
    return (
        f"{scope.kind} PROFILE {scope.key}: total={_ms(scope.elapsed)} outcome={outcome} | "
        f"ldap={_ms(search.seconds)}, decode={_ms(g(LDAP_DECODE).seconds)}, "
        f"store={_ms(store_s)} └─ ldap: searches={search.count}, entries={search.amount}, "
        f"wait={_ms(g(LDAP_WAIT).seconds)}, ber={_ms(g(LDAP_BER).seconds)}; "
        f"store: txn={g(ENTRY_TXN).count}, commit={_ms(g(ENTRY_COMMIT).seconds)}, "
        f"bytes={g(ENTRY_BYTES).amount}, ts_writes={g(TS_WRITE).count}, "
        f"ts_records={g(TS_RECORDS).amount}"
    )
