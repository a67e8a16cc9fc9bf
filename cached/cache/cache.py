"""The split cache of one domain, as read: :class:`DomainCache`.

``cache_<domain>.lmdb`` (synchronous commits) holds users, groups, each user's
transitive group list, and the uid/gid/DN indexes. ``timestamps_<domain>.lmdb``
(no sync) holds lastUpdate, the expiry times and the server's modifyTimestamp/USN
per entry (reference §3.1-§3.2), and when each group was last read whole
(``READ_WHOLE``). A refresh that finds nothing changed writes only
the timestamp store (docs/ARCHITECTURE.md, invariant 2); losing the timestamp store makes
entries read as expired and loses nothing (invariant 3).

The backend process is the only writer of the entry store: it holds a
:class:`cached.cache.writer.BackendCache` (a DomainCache that writes, and checks and
repairs the files when it opens them: cached/cache/integrity.py). The responder and
``cached cache`` (sss_cache) hold a DomainCache: they read both stores, nesting expanded,
and write only the timestamp store (invalidation).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import lmdb

from cached.auth.offline import Credentials
from cached.cache import records as rec
from cached.cache import sudo
from cached.cache.expiry import State, classify, midpoint
from cached.cache.integrity import (
    ENTRY_TABLES,
    TS_TABLES,
    cache_paths,
    of_the_file,
    short_file,
)
from cached.cache.records import RecordError, Times
from cached.cache.store import (
    ENTRY_MAP_SIZE,
    TS_MAP_SIZE,
    Op,
    Store,
)
from cached.config import DomainConfig
from cached.counters import (
    CACHE_READ,
    COUNTERS,
    GROUP_EXPAND,
    TS_BYTES,
    TS_RECORDS,
    TS_WRITE,
    Counters,
)
from cached.dn import normalize_dn
from cached.model import Kind, Netgroup, SudoRule, User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

T = TypeVar("T")

ID_KEY = struct.Struct(">I")  # the uid/gid index keys: big-endian ids sort numerically
# Expanded member lists kept per snapshot (responder): the largest groups asked for.
EXPAND_MEMO = 64
# Below this many direct members in the sub-groups, expanding is cheaper than keeping.
EXPAND_MEMO_MIN = 1000
# Names kept in all memoised expansions (~10 bytes each, plus the records compared):
# a bound on the memo's memory whatever groups clients ask for.
EXPAND_MEMO_NAMES = 2_000_000
# Group lookups kept per state of both stores (responder, tools): a warm `id` asks for
# each of a user's groups by gid, and reading one again (two read transactions, the
# record and its timestamps decoded) was ~17 us of the ~60 us the responder spent per
# getgrgid (perf/warmsocket.py). Bounded in entries and member bytes; dropped whole.
HELD_LOOKUPS = 50_000
HELD_MEMBER_BYTES = 64 << 20
# Users whose decoded group list is kept (_decode_initgr): a few logins at once, and
# records of at most this many bytes in all (bigroupuser's: 33 KB).
INITGR_MEMO = 16
INITGR_MEMO_BYTES = 4 << 20
# In the timestamp store's meta table: how many invalidating transactions each table has
# had. A backend write compares it with the count when its request began (writer.py,
# docs/ARCHITECTURE.md §5 "Invalidation and the backend's writes").
INVALIDATIONS = {
    "users": b"invalidations_users",
    "groups": b"invalidations_groups",
    "netgroups": b"invalidations_netgroups",
}
_COUNT = struct.Struct(">Q")
# In the timestamp store's read_whole table, under a group's key: when (unix time, the
# commit's) the backend last stored the group read whole, its members named from their
# entries (cached/ldap/stamps.py, refresh_full_interval). Wall-clock, so it survives
# a restart; kept by invalidation, deleted with the group, lost with the store.
READ_WHOLE = struct.Struct(">d")


# A stored group as a refresh validates it (DomainCache.group_stamps): modstamp,
# USN/CSN, gid, DN, and the names of its member groups.
Stamped = tuple[str, str, int, str, list[str]]


@dataclass(frozen=True, slots=True)
class Lookup(Generic[T]):
    state: State
    value: T | None = None
    times: Times = rec.MISSING_TIMES


@dataclass(slots=True, unsafe_hash=True)
class GroupView:
    """A group as answered: members expanded through nested groups.

    Never changed once built (the responder keeps and shares them), compared and
    hashed by value, but not frozen: a frozen dataclass's __init__ took 1.7 µs, this
    one 0.45, and the responder builds one per group of a user's initgroups answer
    (the memory-cache prefill, bigroupuser's 2,085: timeit). Not a NamedTuple either:
    its fields are read ~100 instructions slower (valgrind, a warm getgrgid)."""

    name: str
    gid: int
    dn: str
    members: bytes  # NUL-joined, as the NSS reply and the memory cache take them
    member_count: int


#: A stored group's fields as rec.group_fields gives them: name, gid, DN, member blob,
#: member count, member group names, walked-only member layers (records._pack_group).
_GroupFields = tuple[str, int, str, bytes, int, list[str], list[bytes]]
#: A record a held lookup was read from: (table, key, stored bytes or None) (see _Held).
_Read = tuple[str, bytes, rec.Data | None]
#: Groups of one read snapshot by key: (stored bytes, fields) (see DomainCache._below).
_Known = dict[bytes, tuple[rec.Data, _GroupFields]]


@dataclass(slots=True)
class _Expanded:
    """A memoised expansion: valid for snapshot ``snap``, and for any later one where
    every record in ``deps`` (key, stored bytes or None) is unchanged."""

    snap: int
    view: GroupView
    deps: list[tuple[bytes, rec.Data | None]]


@dataclass(slots=True)
class _Held:
    """A group lookup as read when the entry store's and the timestamp store's last
    committed transactions were ``versions``: while both still are, reading it again
    would read the same bytes (LMDB numbers every commit, whichever process makes it:
    the backend's writes, `cached cache`, the `invalidated` op). Only the expiry class
    moves with the clock; it is computed again at every hit."""

    versions: tuple[int, int]
    lookup: Lookup[GroupView]
    size: int  # bytes of member names and records held
    # Before this time (unix) the lookup is VALID: the earlier of its expiry and its
    # refresh midpoint (classify); from then on the class is computed at each hit.
    valid_until: float = 0.0
    # What it was read from, to check it again after a commit of either store
    # (DomainCache._recheck): the entry-store records, (table, key, stored bytes or
    # None) — the index entry it was found by, its record, those of the groups below
    # it — and its key in the timestamp store with the record read there.
    reads: tuple[_Read, ...] = ()
    ts_key: bytes = b""
    ts_data: rec.Data | None = None


@dataclass(frozen=True, slots=True)
class Initgroups:
    user: User
    gids: bytes  # packed native u32, sorted; includes the primary gid
    groups: tuple[str, ...]
    fetched: bool = True  # False: the user's groups were never fetched (primary gid only)


@dataclass(frozen=True, slots=True)
class Timeouts:
    user: int = 5400
    group: int = 5400
    netgroup: int = 5400


DEFAULT_TIMEOUTS = Timeouts()


class DamagedStore(Exception):
    """The entry store cannot be read safely by a reader; the message says why."""


def damaged(path: str, why: str) -> str:
    """What a reader says of an entry store it cannot read."""
    return (f"{path}: the entry store is damaged ({why}); `cached serve` moves it aside "
            "and starts with an empty cache at its next start")  # fmt: skip


class DomainCache:
    """Reading (nesting expanded down to the level) and invalidation, which writes the
    timestamp store only. Reopens the files when the backend replaced them."""

    def __init__(
        self,
        db_dir: str,
        domain: str,
        *,
        case_sensitive: bool = True,
        nesting_level: int = 2,
        nowait_percentage: int = 50,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        counters: Counters = COUNTERS,
    ) -> None:
        self.domain = domain
        self.case_sensitive = case_sensitive
        self.nesting_level = nesting_level
        self.nowait_percentage = nowait_percentage
        self.timeouts = timeouts
        self.counters = counters
        self.entry_path, self.ts_path = cache_paths(db_dir, domain)
        self.ts_rebuilt_reason = ""
        self._next_identity_check = 0.0
        # key -> (entry-store snapshot id, expanded view); see _group_view.
        self._expanded: dict[bytes, _Expanded] = {}
        # gid or name key -> the lookup as last read; see _Held.
        self._held: dict[int | bytes, _Held] = {}
        self._held_bytes = 0
        # user key -> (initgroups record, its gids, its group names); see _decode_initgr.
        self._initgr: dict[bytes, tuple[bytes, bytes, tuple[str, ...]]] = {}
        self._initgr_bytes = 0
        self.entries: Store
        self.ts: Store | None = None
        self._open()
        # Readers only: the backend (BackendCache) opens its stores as their writer and
        # never reopens them, so the identity check below is not for it, and it reads
        # its own cache mostly right after writing it.
        self._hold_lookups = not self.entries.writer

    # -- opening ---------------------------------------------------------------------

    def _open(self) -> None:
        # A reader never repairs (the backend does at its start: integrity.py), but a
        # file shorter than its pages is a SIGBUS on the first read through the map
        # (`cached cache -E` would die of "Bus error" on one).
        short = short_file(self.entry_path) if os.path.exists(self.entry_path) else ""
        if short:
            raise DamagedStore(damaged(self.entry_path, short))
        try:
            self.entries = Store(
                self.entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE
            )
        except lmdb.Error as e:
            if not of_the_file(e):
                raise
            raise DamagedStore(damaged(self.entry_path, str(e))) from None
        self._open_ts_nonbackend()

    def _open_ts_nonbackend(self) -> None:
        try:
            # Responder and tool write timestamps only to invalidate (sss_cache, D-Bus);
            # LMDB serialises writers of different processes. Neither creates it.
            self.ts = Store(
                self.ts_path, TS_TABLES, writer=True, sync=False, map_size=TS_MAP_SIZE, create=False
            )
        except (lmdb.Error, FileNotFoundError) as e:
            # Responder: serve entries as expired until the backend rebuilds the store.
            # Tool: the backend rebuilds it at its next start; report and go on.
            log.warning("%s: cannot open the timestamp store (%s)", self.ts_path, e)
            self.ts = None

    def recheck_files(self) -> None:
        """Check at the next read whether the backend replaced a store (after an
        invalidation: the 1 s between checks must not outlive it)."""
        self._next_identity_check = 0.0

    def _check_identity(self) -> None:
        """Reopen stores the backend replaced (rebuilt ts store, new format)."""
        now = time.monotonic()
        if now < self._next_identity_check:
            return
        self._next_identity_check = now + 1.0
        if self.entries.replaced():
            self._expanded.clear()  # snapshot ids of another file
            self._drop_held()
            self.entries.close()
            self.entries = Store(
                self.entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE
            )
        if self.ts is None or self.ts.replaced():
            if self.ts is not None:
                self.ts.close()
            self._open_ts_nonbackend()
            self._drop_held()  # transaction ids of another file

    def close(self) -> None:
        self._drop_held()
        if self.ts is not None:
            self.ts.close()
            self.ts = None
        self.entries.close()

    def sync_timestamps(self) -> None:
        """Flush the no-sync timestamp store (on a timer and at clean shutdown)."""
        if self.ts is not None:
            self.ts.sync()

    # -- keys ----------------------------------------------------------------------

    def key(self, name: str) -> bytes:
        # case_sensitive=false folds names the way SSSD does (lowercase), so `Alice`
        # and `alice` are one entry.
        return (name if self.case_sensitive else name.lower()).encode("utf-8")

    @staticmethod
    def dn_key(dn: str) -> bytes:
        return normalize_dn(dn).encode("utf-8")

    # -- reading -------------------------------------------------------------------

    def _times(self, table: str, key: rec.Data) -> Times:
        if self.ts is None:
            return rec.MISSING_TIMES
        with self.ts.read() as txn:
            return times_or_missing(txn.get(key, db=self.ts.tables[table]))

    def _classify(self, times: Times, expire: float) -> State:
        return classify(times.last_update, expire, time.time(), self.nowait_percentage)

    def _midpoint(self, times: Times, expire: float) -> float:
        """Until when ``classify`` answers VALID, expiry aside."""
        return midpoint(times.last_update, expire, self.nowait_percentage)

    def _reader(self) -> AbstractContextManager[lmdb.Transaction]:
        self._check_identity()
        return self.entries.read()

    def credentials(self, name: str) -> Credentials | None:
        """The cached credentials of user ``name`` (the stored user's name), or None;
        a damaged record is none (the next online login writes it again)."""
        with self._reader() as txn:
            data = txn.get(self.key(name), db=self.entries.tables["creds"])
            if data is None:
                return None
            try:
                return rec.decode_creds(data)
            except RecordError as e:
                log.warning("%s: credentials of %r: %s", self.entry_path, name, e)
                return None

    def credentials_count(self) -> int:
        """How many users hold a cached password hash."""
        n = 0
        with self._reader() as txn:
            for _key, data in txn.cursor(db=self.entries.tables["creds"]):
                with suppress(RecordError):
                    n += bool(rec.decode_creds(data).hash)
        return n

    def user_by_name(self, name: str) -> Lookup[User]:
        with self.counters.timer(CACHE_READ):
            key = self.key(name)
            with self._reader() as txn:
                key, data = self._user_entry(txn, key)
            return self._user_lookup(key, data)

    def _user_entry(self, txn: lmdb.Transaction, key: bytes) -> tuple[bytes, rec.Data | None]:
        """The user stored under ``key``, or under the entry an alias key points to."""
        data = txn.get(key, db=self.entries.tables["users"])
        if data is None:
            target = txn.get(b"u" + key, db=self.entries.tables["alias"])
            if target is not None:
                key = bytes(target)
                data = txn.get(key, db=self.entries.tables["users"])
        return key, data

    def holds(self, kind: Kind, names: Iterable[str]) -> set[str]:
        """Which of ``names`` the entry store holds a user (Kind.USER) or group of,
        under the name or an alias, read in one transaction and not decoded (whether a
        later domain's entry may go in the memory cache, responder/flow.py
        Lookups.owns: bigroupuser's 2,085 groups at once)."""
        table = self.entries.tables["users" if kind is Kind.USER else "groups"]
        aliases, tag = self.entries.tables["alias"], b"u" if kind is Kind.USER else b"g"
        out = set()
        with self._reader() as txn:
            for name in names:
                key = self.key(name)
                if txn.get(key, db=table) is not None or txn.get(tag + key, db=aliases):
                    out.add(name)
        return out

    def user_by_uid(self, uid: int) -> Lookup[User]:
        with self.counters.timer(CACHE_READ):
            with self._reader() as txn:
                key = txn.get(ID_KEY.pack(uid), db=self.entries.tables["uid"])
                data = None if key is None else txn.get(key, db=self.entries.tables["users"])
            return self._user_lookup(key or b"", data)

    def _user_lookup(self, key: rec.Data, data: rec.Data | None) -> Lookup[User]:
        if data is None:
            return Lookup(State.MISSING)
        user = rec.decode_user(data)
        times = self._times("users", key)
        return Lookup(self._classify(times, times.data_expire), user, times)

    def netgroup_by_name(self, name: str) -> Lookup[Netgroup]:
        with self.counters.timer(CACHE_READ):
            key = self.key(name)
            with self._reader() as txn:
                data = txn.get(key, db=self.entries.tables["netgroups"])
            if data is None:
                return Lookup(State.MISSING)
            ng = rec.decode_netgroup(data)
            times = self._times("netgroups", key)
            return Lookup(self._classify(times, times.data_expire), ng, times)

    def group_by_name(self, name: str) -> Lookup[GroupView]:
        start = time.perf_counter()
        key = self.key(name)
        got = self._held_lookup(key)
        if got is None:
            reads: list[_Read] = []
            with self._reader() as txn:
                found = key
                view = self._group_view(txn, key, reads)
                if view is None:
                    target = txn.get(b"g" + key, db=self.entries.tables["alias"])
                    reads.append(("alias", b"g" + key, None if target is None else bytes(target)))
                    if target is not None:
                        found, view = bytes(target), self._group_view(txn, target, reads)
                version = txn.id()
            got = self._group_lookup(key, found, view, version, reads)
        self.counters.add(CACHE_READ, 1, time.perf_counter() - start)
        return got

    def group_by_gid(self, gid: int) -> Lookup[GroupView]:
        start = time.perf_counter()
        got = self._held_lookup(gid)
        if got is None:
            # The transaction without Store.read's context manager: this is the read of
            # every getgrgid of a warm `id` once a commit has dropped the kept lookups.
            self._check_identity()
            txn = _begin(self.entries)
            try:
                ikey = ID_KEY.pack(gid)
                key = txn.get(ikey, db=self.entries.tables["gid"])
                reads: list[_Read] = [("gid", ikey, key)]
                view = None if key is None else self._group_view(txn, key, reads)
                version = txn.id()
            finally:
                txn.abort()
            got = self._group_lookup(gid, key or b"", view, version, reads)
        self.counters.add(CACHE_READ, 1, time.perf_counter() - start)
        return got

    def _group_lookup(
        self,
        asked: int | bytes,
        key: rec.Data,
        view: GroupView | None,
        version: int,
        reads: list[_Read],
    ) -> Lookup[GroupView]:
        """The lookup of a group read in entry-store snapshot ``version`` from the
        records ``reads``; kept (see _Held) under ``asked``, the gid or name key it
        was asked by."""
        if view is None:
            if (gone := self._held.pop(asked, None)) is not None:
                self._held_bytes -= gone.size
            return Lookup(State.MISSING)
        ts_data: rec.Data | None = None
        if self.ts is None:
            times, ts_version = rec.MISSING_TIMES, -1
        else:
            txn = _begin(self.ts)
            try:
                ts_data = txn.get(key, db=self.ts.tables["groups"])
                times = times_or_missing(ts_data)
                ts_version = txn.id()
            finally:
                txn.abort()
        got = Lookup(self._classify(times, times.data_expire), view, times)
        if self._hold_lookups:
            if len(self._held) >= HELD_LOOKUPS or self._held_bytes > HELD_MEMBER_BYTES:
                self._drop_held()
            old = self._held.get(asked)
            if old is not None:
                self._held_bytes -= old.size
            size = len(view.members) + sum(len(v) for _t, _k, v in reads if v is not None)
            self._held[asked] = _Held(
                (version, ts_version), got, size, self._valid_until(got),
                tuple(reads), bytes(key), ts_data,
            )  # fmt: skip
            self._held_bytes += size
        return got

    def _valid_until(self, got: Lookup[GroupView]) -> float:
        """Until when (unix) ``got`` stays VALID: _Held.valid_until."""
        if got.state is not State.VALID:
            return 0.0
        times = got.times
        return min(times.data_expire, self._midpoint(times, times.data_expire))

    def _versions(self) -> tuple[int, int]:
        """The last committed transaction of the entry and the timestamp store: a commit
        of any process is seen by the next read transaction once it returns."""
        ts = self.ts
        return _last_txnid(self.entries), -1 if ts is None else _last_txnid(ts)

    def _held_lookup(self, asked: int | bytes) -> Lookup[GroupView] | None:
        """The lookup kept under ``asked`` if neither store has changed since it was
        read, its expiry class computed again; None: read the stores."""
        if not self._hold_lookups:
            return None
        self._check_identity()
        held = self._held.get(asked)
        if held is None:
            return None
        versions = self._versions()
        if held.versions != versions and not self._recheck(held, versions):
            return None
        got = held.lookup
        if time.time() < held.valid_until:
            state = State.VALID  # = classify's answer, without its arithmetic
        else:
            times = got.times
            state = self._classify(times, times.data_expire)
        if state is not got.state:
            got = held.lookup = Lookup(state, got.value, got.times)
        return got

    def _recheck(self, held: _Held, versions: tuple[int, int]) -> bool:
        """Whether ``held`` is still what reading its group would give, a store having
        committed since it was read: its records in the entry store are the same
        bytes (a memcmp each; a commit writes only what changed, invariant 2) and,
        if its timestamps changed, its lookup takes the new ones (the same view: the
        answers kept for it stay). Another group's refresh, another user's lookup,
        a refresh ahead commit between two `id` of one user, and each dropped every
        kept lookup: the group read, its nesting expanded and its answer encoded
        again (perf/warmsocket.py --commits: 34 us per getgrgid, 118 us nested)."""
        entries, ts = versions
        if held.versions[0] != entries:
            tables = self.entries.tables
            txn = _begin(self.entries)
            try:
                get = txn.get
                for table, key, data in held.reads:
                    if get(key, None, tables[table]) != data:
                        return False
                entries = txn.id()
            finally:
                txn.abort()
        if held.versions[1] != ts:
            if self.ts is None:
                return False
            txn = _begin(self.ts)
            try:
                data = txn.get(held.ts_key, db=self.ts.tables["groups"])
                ts = txn.id()
            finally:
                txn.abort()
            if data != held.ts_data:
                old = held.lookup
                times = times_or_missing(data)
                got = Lookup(self._classify(times, times.data_expire), old.value, times)
                held.lookup, held.ts_data = got, data
                held.valid_until = self._valid_until(got)
        held.versions = (entries, ts)
        return True

    def kept_group(self, key: int | str) -> Lookup[GroupView] | None:
        """The lookup of a group by gid or name as last read, if neither store has
        committed since (see _Held); None: ask :meth:`group_by_gid` or
        :meth:`group_by_name`. Not counted as a cache read: the NSS responder asks
        this first for the answers it keeps, and the timer and the count were a tenth
        of its CPU per warm getgrgid (py-spy; perf/warmsocket.py)."""
        return self._held_lookup(key if isinstance(key, int) else self.key(key))

    def _drop_held(self) -> None:
        self._held.clear()
        self._held_bytes = 0

    def _group_view(
        self,
        txn: lmdb.Transaction,
        key: rec.Data,
        reads: list[_Read] | None = None,
    ) -> GroupView | None:
        """Read a group and expand nested member groups down to the nesting level.

        Members of a group are the users directly in any group reachable from it by
        at most ``ldap_group_nesting_level`` downward hops — the mirror image of the
        initgroups walk, so "U in G's members" iff "G in U's initgroups" (§6.2).
        All reads happen in the caller's one snapshot, so a concurrent write is seen
        whole or not at all.
        """
        data = txn.get(key, db=self.entries.tables["groups"])
        if reads is not None:
            reads.append(("groups", bytes(key), None if data is None else bytes(data)))
        if data is None:
            return None
        own, member_groups = _unpack_group(data)
        if not member_groups or self.nesting_level <= 0:
            return own
        return self._nested_view(txn, key, data, own, member_groups, reads=reads)

    def _nested_view(
        self,
        txn: lmdb.Transaction,
        key: rec.Data,
        data: rec.Data,
        own: GroupView,
        member_groups: list[str],
        known: _Known | None = None,
        reads: list[_Read] | None = None,
    ) -> GroupView:
        """_group_view of a group with member groups: stored under ``key`` as ``data``,
        ``own`` its view without them; ``known``: see :meth:`_below`; ``reads``: where
        the records of the groups below it are noted (see _Held)."""
        groups = self.entries.tables["groups"]
        # A snapshot id names one committed state of the whole entry store: while it
        # is the same, so is the expansion (docs/threat-model.md: re-expanding a 200,000-member
        # nested group took 0.48 s of the responder's one event loop per request).
        # After a write, the expansion still holds if the records it read are the
        # same bytes (comparing them is a memcmp; any cold lookup writes the store).
        snap = txn.id()
        memo = self._expanded.get(bytes(key))
        if memo is not None and (
            memo.snap == snap or all(txn.get(k, db=groups) == v for k, v in memo.deps)
        ):
            memo.snap = snap
            if reads is not None:
                _note(reads, memo.deps[1:])  # [0]: this group's, noted already
            return memo.view
        with self.counters.timer(GROUP_EXPAND):
            view, deps, sub_members = self._expand(txn, key, own, member_groups, known)
        self.counters.add(GROUP_EXPAND, 0, 0.0, view.member_count)
        if reads is not None:
            _note(reads, deps)
        if sub_members >= EXPAND_MEMO_MIN:
            kept = sum(m.view.member_count for m in self._expanded.values())
            if len(self._expanded) >= EXPAND_MEMO or kept > EXPAND_MEMO_NAMES:
                self._expanded.clear()
            self._expanded[bytes(key)] = _Expanded(snap, view, [(bytes(key), data), *deps])
        return view

    def _below(
        self,
        txn: lmdb.Transaction,
        key: bytes,
        member_groups: list[str],
        known: _Known | None = None,
    ) -> Iterator[tuple[str, bytes, rec.Data | None, _GroupFields | None, int]]:
        """The groups below the group of ``key`` (whose member groups are
        ``member_groups``) down to the nesting level (§6.2), each once, level by
        level: (name, key, stored bytes or None, its rec.group_fields or None, how
        many levels below ``key`` it is, 1 for a direct member group).

        ``known``: groups of this same snapshot already read, by key, (stored bytes,
        fields), and where those read here are noted: a batch read
        (:meth:`groups_by_name`) then reads and decodes each group once, where the
        expansions of bigroupuser's 84 nested groups read 520 of its groups again
        (1 K of the prefill's 73.6 K instructions a group, cachegrind)."""
        groups = self.entries.tables["groups"]
        seen = {key}
        frontier = list(member_groups)
        for hop in range(1, self.nesting_level + 1):
            nxt: list[str] = []
            for gname in frontier:
                gkey = self.key(gname)
                if gkey in seen:
                    continue
                seen.add(gkey)
                got = None if known is None else known.get(gkey)
                sub: rec.Data | None
                fields: _GroupFields | None
                if got is not None:
                    sub, fields = got
                else:
                    sub = txn.get(gkey, db=groups)
                    fields = None if sub is None else rec.group_fields(sub)
                    if known is not None and sub is not None and fields is not None:
                        known[gkey] = (sub, fields)
                yield gname, gkey, sub, fields, hop
                if fields is not None:
                    nxt.extend(fields[5])
            frontier = nxt
            if not frontier:
                break

    def _expand(
        self,
        txn: lmdb.Transaction,
        key: rec.Data,
        own: GroupView,
        member_groups: list[str],
        known: _Known | None = None,
    ) -> tuple[GroupView, list[tuple[bytes, rec.Data | None]], int]:
        """The expanded view of the group stored under ``key`` (``own``: its view
        without its member groups), the sub-group records it read (key, bytes or
        None), and how many direct members those sub-groups had."""
        sub_members = 0
        deps: list[tuple[bytes, rec.Data | None]] = []
        blobs = [own.members]
        for _name, gkey, sub, fields, hop in self._below(txn, bytes(key), member_groups, known):
            deps.append((gkey, sub))
            if fields is not None:
                sub_members += fields[4]
                deep, left = fields[6], self.nesting_level - hop
                if len(deep) > left:
                    # Its users reached through non-POSIX groups deeper than the levels
                    # left below it are past this group's nesting level (flattened in
                    # its record at their depth from it: save.members).
                    past = set(rec.split_members(b"".join(deep[left:])))
                    kept = [m for m in rec.split_members(fields[3]) if m not in past]
                    blobs.append("\0".join(kept).encode("utf-8") + b"\0" if kept else b"")
                else:
                    blobs.append(fields[3])
        # join_members of the union, from the concatenated blobs: each is sorted
        # already (a canonical record), so the sort merges runs, and dict.fromkeys
        # drops the names two groups share, keeping the order. Was a set of the names
        # sorted from scratch.
        joined = b"".join(blobs)
        names = sorted(joined[:-1].decode("utf-8").split("\0")) if joined else []
        unique = dict.fromkeys(names)
        blob = "\0".join(unique).encode("utf-8") + b"\0" if unique else b""
        return GroupView(own.name, own.gid, own.dn, blob, len(unique)), deps, sub_members

    def initgroups(self, name: str) -> Lookup[Initgroups]:
        """A user's transitive gids; its state comes from initgrExpireTimestamp (§6.4)."""
        with self.counters.timer(CACHE_READ):
            key = self.key(name)
            with self._reader() as txn:
                key, udata = self._user_entry(txn, key)
                idata = None if udata is None else txn.get(key, db=self.entries.tables["initgr"])
            if udata is None:
                return Lookup(State.MISSING)
            user = rec.decode_user(udata)
            times = self._times("users", key)
            if idata is None:
                # Known user, groups never fetched: answer the primary group if we
                # must (offline), but ask the backend first.
                value = Initgroups(user, _ID_NATIVE.pack(user.gid), (), fetched=False)
                return Lookup(State.EXPIRED, value, times)
            gids, groups = self._decode_initgr(key, idata)
            state = self._classify(times, times.initgr_expire)
            return Lookup(state, Initgroups(user, gids, groups), times)

    def _decode_initgr(self, key: bytes, data: rec.Data) -> tuple[bytes, tuple[str, ...]]:
        """A stored group list, decoded once while its record holds the same bytes:
        `id` asks for a user's groups two or three times (getgrouplist sizes its
        buffer first), and decoding bigroupuser's 2,086 names each time was a
        twentieth of the responder's CPU for a warm `id` over the socket (py-spy).
        Comparing the record is a memcmp; the last few users are kept."""
        memo = self._initgr.get(key)
        if memo is not None and memo[0] == data:
            return memo[1], memo[2]
        gids, groups = rec.decode_initgr(data)
        kept = (bytes(data), gids, tuple(groups))
        if len(self._initgr) >= INITGR_MEMO or self._initgr_bytes > INITGR_MEMO_BYTES:
            self._initgr.clear()
            self._initgr_bytes = 0
        if (old := self._initgr.get(key)) is not None:
            self._initgr_bytes -= len(old[0])
        self._initgr[key] = kept
        self._initgr_bytes += len(kept[0])
        return kept[1], kept[2]

    def groups_by_name(self, names: Iterable[str], expired: bool = True) -> list[GroupView]:
        """Many groups in one snapshot (memory-cache prefill after initgroups);
        ``expired=False``: not those whose timestamps say expired (an invalidated
        group put in the memory cache would be taken as valid there).

        :meth:`_group_view` of each, with its common case inline: a group without
        member groups is its own view. Through the two calls it was 4.6 µs of the
        prefill's ~16 µs a group for bigroupuser's 2,085 (tests/bench/test_bench_prefill.py;
        txn.get's keyword argument alone cost 0.35 µs)."""
        out: list[GroupView] = []
        append = out.append
        fields = rec.group_fields
        nested = self.nesting_level > 0
        known: _Known = {}  # what the expansions read again (see _below)
        ts = None if expired or self.ts is None else self.ts
        with self._reader() as txn, (ts.read() if ts is not None else nullcontext()) as tstxn:
            get, groups = txn.get, self.entries.tables["groups"]
            tsget = None if tstxn is None or ts is None else tstxn.get
            tsdb = None if ts is None else ts.tables["groups"]
            now, expiry = time.time(), rec.data_expire
            for key in map(self.key, names):
                if tsget is not None and expiry(tsget(key, None, tsdb)) <= now:
                    continue  # expired (as classify: an expiry at or before now)
                got = known.get(key)
                if got is None:
                    data = get(key, None, groups)
                    if data is None:
                        continue
                    got = known[key] = (data, fields(data))
                data, (name, gid, dn, members, count, member_groups, _deep) = got
                own = GroupView(name, gid, dn, members, count)
                if member_groups and nested:
                    own = self._nested_view(txn, key, data, own, member_groups, known)
                append(own)
        return out

    def resolve_dns(self, dns: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Cached entries by DN: ``{dn: ("user"|"group", name)}`` for those known and
        read from the server within their cache timeout (any spelling of a stored
        DN finds it: :meth:`resolve_keys` of their normalize_dn keys)."""
        dns = list(dns)
        keys = [normalize_dn(dn) for dn in dns]
        got = self.resolve_keys(set(keys))
        return {dn: got[k] for dn, k in zip(dns, keys, strict=True) if k in got}

    def resolve_keys(self, keys: Collection[str]) -> dict[str, tuple[str, str]]:
        """Cached entries by DN key (normalize_dn's): ``{key: ("user"|"group",
        name)}`` for those known and read from the server within their cache
        timeout. ``keys`` is tested with ``in`` (a set or a dict's keys). One read
        earlier may be long gone from the server, and a group still listing its DN
        (no referential integrity) would keep it as a member: it is looked up
        instead, as SSSD skips only valid cached members
        (``sdap_nested_group_check_cache``). Unlike SSSD, `cached cache -E` does not
        make them look-ups (it keeps lastUpdate as it keeps the stamps,
        sssd-reference.md §3.7): a group's refresh after it names its thousands of
        members as before."""
        out: dict[str, tuple[str, str]] = {}
        if self.ts is None:
            return out  # no lastUpdate known (invariant 3)
        since = {"users": time.time() - self.timeouts.user,
                 "groups": time.time() - self.timeouts.group}  # fmt: skip
        with self._reader() as txn, self.ts.read() as tstxn:
            dndb = self.entries.tables["dn"]
            found: list[tuple[str, rec.Data]]
            if txn.stat(dndb)["entries"] < len(keys):
                # Fewer DNs stored than asked for (a cold initgroups on a near-empty
                # cache, where one index read per member DN was 1.5-2.5 % of the
                # backend's CPU: testing.replay, 1,039 M -> 1,025 M instructions): the
                # index read whole and its keys (dn_key's, the normalized DN in
                # UTF-8) tested against those asked, rather than the other way: a
                # cold large01 asks for 5,000 against an empty index.
                hit = {
                    k: bytes(v)
                    for raw, v in txn.cursor(db=dndb)
                    if (k := bytes(raw).decode("utf-8")) in keys
                }
                # In the order asked, as the other branch gives them.
                found = [(k, hit[k]) for k in keys if k in hit] if hit else []
            else:
                # Bound method, positional arguments (see read_whole_times).
                get = txn.get
                found = [
                    (k, v) for k in keys if (v := get(k.encode("utf-8"), None, dndb)) is not None
                ]
            for k, v in found:
                kind = "user" if v[:1] == b"u" else "group"
                table = "users" if kind == "user" else "groups"
                data = txn.get(v[1:], db=self.entries.tables[table])
                stamp = tstxn.get(v[1:], db=self.ts.tables[table])
                if data is not None and times_or_missing(stamp).last_update > since[table]:
                    name = (
                        rec.decode_user(data).name
                        if kind == "user"
                        else rec.decode_group(data).name
                    )
                    out[k] = (kind, name)
        return out

    def newest_update(self) -> float:
        """The latest time the server confirmed an entry (its ``last_update``, written
        by a refresh that found it unchanged too); 0 when none is stored. What `cached
        status` shows for a backend that has had no answer since it started (it kept
        the time in memory only, so a restart during an outage showed "never" over a
        full cache, where SSSD shows the last refresh). One pass over the timestamps."""
        newest = 0.0
        if self.ts is None:
            return newest
        with self.ts.read() as txn:
            for table in ("users", "groups"):
                for _k, v in txn.cursor(db=self.ts.tables[table]):
                    newest = max(newest, times_or_missing(v).last_update)
        return newest

    def expiring(self, before: float) -> tuple[list[str], list[str], list[str]]:
        """Keys of entries whose expiry is at or before ``before``: users (data),
        groups (data), users whose initgroups list is cached (initgr). For the
        background refresh (reference §6.4: it searches the timestamp store only).
        Entries without a timestamp record are expired too."""
        users: list[str] = []
        groups: list[str] = []
        initgr: list[str] = []
        t = self.entries.tables
        with self._reader() as txn:
            ukeys = [bytes(k) for k in txn.cursor(db=t["users"]).iternext(values=False)]
            gkeys = [bytes(k) for k in txn.cursor(db=t["groups"]).iternext(values=False)]
            ikeys = {bytes(k) for k in txn.cursor(db=t["initgr"]).iternext(values=False)}
        stored: dict[str, dict[bytes, Times]] = {"users": {}, "groups": {}}
        if self.ts is not None:
            with self.ts.read() as tstxn:
                for table, times in stored.items():
                    for k, v in tstxn.cursor(db=self.ts.tables[table]):
                        times[bytes(k)] = times_or_missing(v)
        for table, keys, out in (("users", ukeys, users), ("groups", gkeys, groups)):
            for key in keys:
                tm = stored[table].get(key, rec.MISSING_TIMES)
                if tm.data_expire <= before:
                    out.append(key.decode())
                if table == "users" and key in ikeys and tm.initgr_expire <= before:
                    initgr.append(key.decode())
        return users, groups, initgr

    def expiring_netgroups(self, before: float) -> list[str]:
        """The names (keys) of the netgroups whose expiry is at or before ``before``,
        the soonest first: the background refresh's (SSSD's refreshes netgroups too)."""
        with self._reader() as txn:
            keys = [bytes(k) for k in txn.cursor(db=self.entries.tables["netgroups"])
                    .iternext(values=False)]  # fmt: skip
        due: list[tuple[float, str]] = []
        if self.ts is None:
            return [k.decode() for k in keys]
        with self.ts.read() as tstxn:
            table = self.ts.tables["netgroups"]
            for key in keys:
                expire = rec.data_expire(tstxn.get(key, db=table))
                if expire <= before:
                    due.append((expire, key.decode()))
        return [name for _, name in sorted(due)]

    def times(self, kind: str, names: Iterable[str]) -> dict[str, Times]:
        """Stored timestamp records (modifyTimestamp shortcut, status)."""
        out: dict[str, Times] = {}
        if self.ts is None:
            return out
        table = self.ts.tables["users" if kind == "user" else "groups"]
        with self.ts.read() as txn:
            for name in names:
                data = txn.get(self.key(name), db=table)
                if data is not None:
                    with suppress(RecordError):
                        out[name] = rec.decode_times(data)
        return out

    def group_stamps(self, names: Iterable[str]) -> dict[str, Stamped]:
        """(modstamp, USN/CSN, gid, DN, member group names) of stored groups, one
        snapshot of each store (refresh validation, cached/ldap/refresh.py). One
        pass, nothing but tuples built: two passes through Times and GroupRecord took
        17 ms of CPU for the 2,085 groups of bigroupuser, this 6 ms."""
        out: dict[str, Stamped] = {}
        if self.ts is None:
            return out
        tsdb, db = self.ts.tables["groups"], self.entries.tables["groups"]
        with self._reader() as txn, self.ts.read() as tstxn:
            for name in names:
                key = self.key(name)
                t = tstxn.get(key, db=tsdb)
                data = txn.get(key, db=db)
                if t is None or data is None:
                    continue
                try:
                    out[name] = (*rec.decode_stamp(t), *rec.decode_group_ident(data))
                except RecordError:
                    continue
        return out

    def read_whole_times(self, names: Iterable[str]) -> dict[str, float]:
        """When each of these groups was last stored read whole (``READ_WHOLE``), for
        those with a record; none when the timestamp store is not open."""
        out: dict[str, float] = {}
        if self.ts is None:
            return out
        db, key, unpack = self.ts.tables["read_whole"], self.key, READ_WHOLE.unpack
        with self.ts.read() as txn:
            # Bound methods, positional arguments: a refresh of bigroupuser asks for its
            # 2,085 groups, 3.2 ms of CPU with txn.get(k, db=db) and 2.5 ms so (timeit,
            # best of 5).
            get = txn.get
            for name in names:
                data = get(key(name), None, db)
                if data is not None and len(data) == READ_WHOLE.size:
                    out[name] = unpack(data)[0]
        return out

    def group_closure(self, name: str) -> list[str] | None:
        """Names of the stored group ``name`` and of the stored groups below it down
        to the nesting level: the records its answer is expanded from (``_expand``,
        §6.2), the group first; None when one of them is not stored (refresh
        validation of a group lookup, cached/ldap/refresh.py)."""
        groups = self.entries.tables["groups"]
        with self._reader() as txn:
            data = txn.get(self.key(name), db=groups)
            if data is None:
                return None
            try:
                top, member_groups = _unpack_group(data)
                out = [top.name]
                for gname, _key, sub, _u, _h in self._below(txn, self.key(top.name), member_groups):
                    if sub is None:
                        return None
                    out.append(gname)
            except RecordError:
                return None
        return out

    def dn_count(self) -> int:
        """The DNs the cache holds (users and groups, resolve_keys' index)."""
        with self._reader() as txn:
            count: int = txn.stat(self.entries.tables["dn"])["entries"]
            return count

    def counts(self) -> dict[str, int]:
        with self._reader() as txn:
            return {
                t: txn.stat(self.entries.tables[t])["entries"]
                for t in ("users", "groups", "initgr", "netgroups")
            }

    def iter_users(self) -> Iterator[User]:
        with self._reader() as txn:
            for _, data in txn.cursor(db=self.entries.tables["users"]):
                yield rec.decode_user(data)

    def iter_groups(self) -> Iterator[GroupView]:
        with self._reader() as txn:
            keys = [k for k, _ in txn.cursor(db=self.entries.tables["groups"])]
            for k in keys:
                view = self._group_view(txn, k)
                if view is not None:
                    yield view

    @staticmethod
    def _ident(table: str, data: rec.Data) -> tuple[int, str]:
        if table == "users":
            u = rec.decode_user(data)
            return u.uid, u.dn
        g = rec.decode_group(data)
        return g.gid, g.dn

    def _write_ts(self, ops: list[Op]) -> None:
        assert self.ts is not None
        with self.counters.timer(TS_WRITE):
            written, _ = self.ts.write(ops)
        self.counters.add(TS_BYTES, 0, 0.0, written)
        self.counters.add(TS_RECORDS, 0, 0.0, len(ops))

    def _write_ts_built(self, build: Callable[[lmdb.Transaction], list[Op]]) -> int:
        """One timestamp-store write whose operations ``build`` makes from what the
        store holds inside the write transaction (LMDB: one writer at a time, across
        processes), so no other process's commit falls between what it read and what it
        writes. Returns how many operations were written."""
        assert self.ts is not None
        with self.counters.timer(TS_WRITE):
            written, _, count = self.ts.write_built(build)
        self.counters.add(TS_BYTES, 0, 0.0, written)
        self.counters.add(TS_RECORDS, 0, 0.0, count)
        return count

    def invalidations(self) -> dict[str, int]:
        """How many invalidating transactions each timestamp table has had (none when
        the store is not open: it is created empty)."""
        if self.ts is None:
            return dict.fromkeys(INVALIDATIONS, 0)
        with self.ts.read() as txn:
            return invalidation_counts(txn, self.ts)

    # -- invalidation (timestamp store only) ---------------------------------------

    def _require_ts(self) -> Store:
        if self.ts is None:
            raise RuntimeError(f"{self.ts_path}: timestamp store is not open")
        return self.ts

    def _invalidate(self, tables: Sequence[str], keys: list[bytes] | None) -> None:
        """Expire ``keys`` of each of ``tables`` (None: every record they hold) and
        count one more invalidation of each, read and written in one write
        transaction: a backend commit can come before it or after it, never between
        its read and its write (where the invalidated form of a record read before
        that commit would overwrite what the commit wrote, e.g. put back the stamp of a
        group it stored incomplete), nor between two of its tables (a request begun
        and ended between the users' and the groups' invalidation stored an initgroups
        list fresh over groups then expired: its `id` asked for each group alone)."""
        ts = self._require_ts()
        meta = ts.tables["meta"]

        def build(txn: lmdb.Transaction) -> list[Op]:
            ops: list[Op] = []
            for table in tables:
                db = ts.tables[table]
                if keys is None:
                    # Entries without a record already read as expired: only the
                    # existing records are rewritten (one cursor pass).
                    ops += [(table, bytes(k), _invalidated(v)) for k, v in txn.cursor(db=db)]
                else:
                    ops += [(table, key, _invalidated(txn.get(key, db=db))) for key in keys]
                count = _count(txn.get(INVALIDATIONS[table], db=meta))
                ops.append(("meta", INVALIDATIONS[table], _COUNT.pack(count + 1)))
            return ops

        self._write_ts_built(build)

    def invalidate_user(self, name: str) -> bool:
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["users"]) is None:
                return False
        self._invalidate(["users"], [key])
        return True

    def invalidate_group(self, name: str) -> bool:
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["groups"]) is None:
                return False
        self._invalidate(["groups"], [key])
        return True

    def invalidate_tables(self, tables: Sequence[str]) -> int:
        """Expire every entry of ``tables`` (of users, groups, netgroups) in one
        transaction; returns how many entries the cache holds. Only timestamp records
        are rewritten."""
        self._require_ts()
        with self._reader() as txn:
            count: int = sum(txn.stat(self.entries.tables[t])["entries"] for t in tables)
        self._invalidate(tables, None)
        return count

    def invalidate_netgroup(self, name: str) -> bool:
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["netgroups"]) is None:
                return False
        self._invalidate(["netgroups"], [key])
        return True

    def invalidate_netgroups(self) -> int:
        return self.invalidate_tables(["netgroups"])

    def invalidate_users(self) -> int:
        return self.invalidate_tables(["users"])

    def invalidate_groups(self) -> int:
        return self.invalidate_tables(["groups"])

    def invalidate_all(self) -> int:
        return self.invalidate_tables(["users", "groups", "netgroups"])

    # -- sudo rules (cache/sudo.py) ----------------------------------------------------

    def sudo_rules(self) -> list[SudoRule]:
        """Every stored sudo rule, by name."""
        with self._reader() as txn:
            return sudo.read_rules(self.entries, txn)

    def sudo_count(self) -> int:
        """How many sudo rules the entry store holds."""
        db = self.entries.tables.get(sudo.TABLE)
        if db is None:
            return 0
        with self._reader() as txn:
            count: int = txn.stat(db)["entries"]
        return count

    def sudo_times(self) -> dict[str, Times]:
        """The timestamp record of each stored rule (a rule without one is expired)."""
        return sudo.read_times(self.ts)

    def sudo_state(self) -> sudo.SudoState:
        return sudo.read_state(self.ts)

    def invalidate_sudo(self, names: Iterable[str] | None = None) -> int:
        """Expire the rules ``names`` (None: all), timestamp store only (``sss_cache
        -r``/``-R``); returns how many were expired."""
        return sudo.invalidate(self._require_ts(), names)


_ID_NATIVE = struct.Struct("=I")


def _note(
    reads: list[_Read], deps: list[tuple[bytes, rec.Data | None]]
) -> None:
    """Note the group records ``deps`` (key, stored bytes or None) in ``reads``."""
    reads.extend(("groups", k, None if v is None else bytes(v)) for k, v in deps)


def _unpack_group(data: rec.Data) -> tuple[GroupView, list[str]]:
    """A stored group as (its view without its member groups, the names of its member
    groups): rec.group_fields, with no GroupRecord built."""
    name, gid, dn, members, count, member_groups, _deep = rec.group_fields(data)
    return GroupView(name, gid, dn, members, count), member_groups


def _begin(store: Store) -> lmdb.Transaction:
    """A read transaction of ``store`` as ``Store.read`` begins it; the caller aborts it."""
    env = store.env
    try:
        return env.begin(write=False, buffers=False)
    except lmdb.MapResizedError:
        env.set_mapsize(0)
        return env.begin(write=False, buffers=False)


def _last_txnid(store: Store) -> int:
    """The id of the last transaction committed to ``store``: that of a new read
    snapshot. A read transaction (py-lmdb reuses its reader slot) costs half of
    mdb_env_info, which builds a dictionary of six fields: the two of them per kept
    group answer were 5 % of the responder's CPU for a warm `id` over the socket
    (py-spy; perf/warmsocket.py)."""
    txn = _begin(store)
    try:
        txnid: int = txn.id()
    finally:
        txn.abort()
    return txnid


def invalidation_counts(txn: lmdb.Transaction, ts: Store) -> dict[str, int]:
    """The invalidation count of each timestamp table in ``txn`` (see INVALIDATIONS)."""
    meta = ts.tables["meta"]
    return {table: _count(txn.get(key, db=meta)) for table, key in INVALIDATIONS.items()}


def _count(data: rec.Data | None) -> int:
    return _COUNT.unpack(data)[0] if data is not None and len(data) == _COUNT.size else 0


def times_or_missing(data: rec.Data | None) -> Times:
    """A stored timestamp record; a missing or damaged one reads as never refreshed."""
    if data is None:
        return rec.MISSING_TIMES
    try:
        return rec.decode_times(data)
    except RecordError:
        return rec.MISSING_TIMES


def _invalidated(data: rec.Data | None) -> bytes:
    if data is not None:
        with suppress(RecordError):
            return rec.invalidated_times(data)
    return rec.encode_times(Times(0.0, rec.EXPIRED, rec.EXPIRED))


def cache_options(domain: DomainConfig) -> dict[str, Any]:
    """The keyword arguments of a cache of ``domain``: its case, nesting and timeouts."""
    return {
        "case_sensitive": not domain.case_insensitive,
        # rfc2307 cannot nest (reference §6.1): its groups have no member groups.
        "nesting_level": domain.ldap_group_nesting_level if domain.ldap_schema != "rfc2307" else 0,
        "timeouts": Timeouts(
            domain.entry_cache_user_timeout,
            domain.entry_cache_group_timeout,
            domain.entry_cache_netgroup_timeout,
        ),
    }


def open_domain_cache(
    db_dir: str,
    domain: DomainConfig,
    *,
    nowait_percentage: int = 50,
    counters: Counters = COUNTERS,
) -> DomainCache:
    """A reader's cache of ``domain`` (responder, tools) with its options applied."""
    return DomainCache(db_dir, domain.name, **cache_options(domain),
                       nowait_percentage=nowait_percentage, counters=counters)  # fmt: skip
