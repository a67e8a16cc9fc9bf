"""The split cache of one domain: a durable entry store and a no-sync timestamp store.

``cache_<domain>.lmdb`` (synchronous commits) holds users, groups, each user's
transitive group list, and the uid/gid/DN indexes. ``timestamps_<domain>.lmdb``
(no sync) holds lastUpdate, the expiry times and the server's modifyTimestamp/USN
per entry (reference §3.1-§3.2). A refresh that finds nothing changed writes only
the timestamp store (docs/ARCHITECTURE.md, invariant 2); losing the timestamp store makes
entries read as expired and loses nothing (invariant 3).

The backend process is the only writer of the entry store. The responder reads
both stores. ``cached cache`` (sss_cache) writes only the timestamp store.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from typing import Generic, TypeVar

import lmdb

from cached.cache import records as rec
from cached.cache.expiry import State, classify
from cached.cache.records import GroupRecord, RecordError, Times
from cached.cache.store import (
    ENTRY_MAP_SIZE,
    TS_MAP_SIZE,
    Op,
    Store,
    StoreWriteError,
    describe_write_error,
)
from cached.config import DomainConfig
from cached.counters import (
    CACHE_READ,
    COUNTERS,
    ENTRY_BYTES,
    ENTRY_COMMIT,
    ENTRY_RECORDS,
    ENTRY_SKIPPED,
    ENTRY_TXN,
    GROUP_EXPAND,
    TS_BYTES,
    TS_RECORDS,
    TS_WRITE,
    Counters,
)
from cached.dn import normalize_dn
from cached.model import Group, User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

T = TypeVar("T")

# alias: b"u"/b"g" + key of another value of a multi-valued name -> the entry's key
# (docs/compatibility.md §9.5: a lookup by any of an entry's names finds it, answered under one).
ENTRY_TABLES = ("users", "groups", "initgr", "uid", "gid", "dn", "meta", "alias")
TS_TABLES = ("users", "groups", "meta")
_ID = struct.Struct(">I")  # big-endian ids sort numerically in LMDB
# The id index and the DN-index tag of each record table.
_INDEX = {"users": ("uid", b"u"), "groups": ("gid", b"g")}

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# LMDB's compiled-in key limit (mdb_env_get_maxkeysize: 511 bytes). A name or DN key
# above it fails the whole write transaction, so such an entry is refused alone.
MAX_KEY = 511
# Expanded member lists kept per snapshot (responder): the largest groups asked for.
EXPAND_MEMO = 64
# Below this many direct members in the sub-groups, expanding is cheaper than keeping.
EXPAND_MEMO_MIN = 1000
# Names kept in all memoised expansions (~10 bytes each, plus the records compared):
# a bound on the memo's memory whatever groups clients ask for.
EXPAND_MEMO_NAMES = 2_000_000


def unstorable(kind: str, name: str, ident: int, dn: str, key: bytes) -> str:
    """Why an entry cannot be stored, or "". The cache's own limits, whatever the
    configuration: a uid/gid must be a 32-bit id other than (uid_t)-1, the keys must
    fit LMDB, and no name may hold a NUL (the NSS reply and the member lists are
    NUL-separated C strings: a NUL would cut the name or split one member in two)."""
    if not 0 <= ident < 0xFFFFFFFF:
        return f"{'uid' if kind == 'user' else 'gid'} {ident} is not a 32-bit id"
    if "\0" in name or "\0" in dn:
        return "its name or DN holds a NUL character"
    if not key:
        return "its name is empty"
    if len(key) > MAX_KEY:
        return f"its name is {len(key)} bytes, above LMDB's {MAX_KEY}-byte key limit"
    if len(normalize_dn(dn).encode("utf-8")) > MAX_KEY:
        return f"its DN is above LMDB's {MAX_KEY}-byte key limit"
    return ""


class Role(enum.Enum):
    BACKEND = "backend"  # the one writer of the entry store; repairs the ts store
    RESPONDER = "responder"  # reads both stores; writes timestamps to invalidate
    TOOL = "tool"  # `cached cache`: reads entries, writes timestamps


@dataclass(frozen=True, slots=True)
class Lookup(Generic[T]):
    state: State
    value: T | None = None
    times: Times = rec.MISSING_TIMES


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as answered: members expanded through nested groups."""

    name: str
    gid: int
    dn: str
    members: bytes  # NUL-joined, as the NSS reply and the memory cache take them
    member_count: int


@dataclass(slots=True)
class _Expanded:
    """A memoised expansion: valid for snapshot ``snap``, and for any later one where
    every record in ``deps`` (key, stored bytes or None) is unchanged."""

    snap: int
    view: GroupView
    deps: list[tuple[bytes, rec.Data | None]]


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


@dataclass
class WriteResult:
    entries_written: int = 0  # records put or deleted in the entry store
    entry_bytes: int = 0
    timestamps_written: int = 0


def read_boot_id() -> str:
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return ""


def cache_paths(db_dir: str, domain: str) -> tuple[str, str]:
    """The two files of a domain, named like SSSD's so administrators recognise them."""
    return (
        os.path.join(db_dir, f"cache_{domain}.lmdb"),
        os.path.join(db_dir, f"timestamps_{domain}.lmdb"),
    )


def _remove_store(path: str) -> None:
    for p in (path, path + "-lock"):
        with suppress(FileNotFoundError):
            os.unlink(p)


class WriteBatch:
    """What one backend request fetched; committed as one transaction per store."""

    def __init__(self) -> None:
        self.users: dict[bytes, tuple[User, str, str]] = {}
        self.groups: dict[bytes, tuple[GroupRecord, str, str, bool]] = {}
        self.touched_groups: dict[bytes, tuple[str, str]] = {}
        self.initgr: dict[bytes, tuple[tuple[int, ...], tuple[str, ...]]] = {}
        self.deleted_users: set[bytes] = set()
        self.deleted_groups: set[bytes] = set()
        self.aliases: dict[bytes, bytes] = {}  # b"u"/b"g" + alias key -> entry key


class DomainCache:
    def __init__(
        self,
        db_dir: str,
        domain: str,
        *,
        role: Role,
        case_sensitive: bool = True,
        nesting_level: int = 2,
        nowait_percentage: int = 50,
        timeouts: Timeouts = Timeouts(),
        counters: Counters = COUNTERS,
        boot_id: str | None = None,
    ) -> None:
        self.domain = domain
        self.role = role
        self.case_sensitive = case_sensitive
        self.nesting_level = nesting_level
        self.nowait_percentage = nowait_percentage
        self.timeouts = timeouts
        self.counters = counters
        self.entry_path, self.ts_path = cache_paths(db_dir, domain)
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.ts_rebuilt_reason = ""
        self.store_id = b""
        self._next_identity_check = 0.0
        # key -> (entry-store snapshot id, expanded view); see _group_view.
        self._expanded: dict[bytes, _Expanded] = {}
        self.entries: Store
        self.ts: Store | None = None
        if role is Role.BACKEND:
            self._open_backend()
        else:
            self.entries = Store(
                self.entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE
            )
            self._open_ts_nonbackend()

    # -- opening and crash safety ------------------------------------------------

    def _open_backend(self) -> None:
        self.entries = Store(
            self.entry_path, ENTRY_TABLES, writer=True, sync=True, map_size=ENTRY_MAP_SIZE
        )
        with self.entries.read() as txn:
            meta = self.entries.tables["meta"]
            fmt = _opt_bytes(txn.get(b"format", db=meta))
            clean = _opt_bytes(txn.get(b"clean", db=meta))
            prev_boot = bytes(txn.get(b"boot_id", db=meta) or b"").decode()
            store_id = _opt_bytes(txn.get(b"uuid", db=meta))
            empty = txn.stat(self.entries.tables["users"])["entries"] == 0 and (
                txn.stat(self.entries.tables["groups"])["entries"] == 0
            )
        if fmt is not None and fmt != str(rec.FORMAT).encode() and not empty:
            # An entry store of another record format: rebuilding is a cold cache,
            # which is always correct; converting is not worth its risk.
            log.warning(
                "%s: record format %s, this version writes %s; starting with an empty cache",
                self.entry_path,
                fmt.decode(errors="replace"),
                rec.FORMAT,
            )
            self.entries.close()
            _remove_store(self.entry_path)
            _remove_store(self.ts_path)
            return self._open_backend()
        if store_id is None:
            store_id = os.urandom(16).hex().encode()
            # A new entry store never trusts an old timestamp store (reference §3.5).
            _remove_store(self.ts_path)

        reason = ""
        if clean == b"0" and prev_boot != self.boot_id:
            reason = "the previous run did not shut down cleanly before a reboot"
        elif not empty and not os.path.exists(self.ts_path):
            reason = "the timestamp store is missing"
        self.store_id = store_id
        self.ts = self._open_ts_checked(store_id, reason)
        try:
            self.entries.write(
                [
                    ("meta", b"format", str(rec.FORMAT).encode()),
                    ("meta", b"uuid", store_id),
                    ("meta", b"clean", b"0"),
                    ("meta", b"boot_id", self.boot_id.encode()),
                ]
            )
        except StoreWriteError as e:
            # A full filesystem must not stop the cache from being served; the
            # unclean-run detection is what is lost until the marker can be written.
            log.error("%s; serving the cache read-only until writes succeed", e)

    def _open_ts_checked(self, store_id: bytes, reason: str) -> Store | None:
        """Open the timestamp store, rebuilding it empty when it cannot be trusted.

        None when it cannot be created (a full filesystem): every entry then reads
        as expired and is still served; writing retries it (``_require_ts_for_write``).
        """
        if not reason and os.path.exists(self.ts_path):
            reason = self._verify_ts(store_id)
        if reason:
            log.warning(
                "%s: %s; recreating it empty (every entry reads as expired, none is lost)",
                self.ts_path,
                reason,
            )
            self.ts_rebuilt_reason = reason
            _remove_store(self.ts_path)
        ts = None
        try:
            ts = Store(self.ts_path, TS_TABLES, writer=True, sync=False, map_size=TS_MAP_SIZE)
            ts.write([("meta", b"uuid", store_id)])
        except (lmdb.Error, StoreWriteError, OSError) as e:
            if ts is not None:
                ts.close()
            log.error(
                "%s; every entry reads as expired until it can be created",
                e if isinstance(e, StoreWriteError) else describe_write_error(self.ts_path, e),
            )
            return None
        return ts

    def _verify_ts(self, store_id: bytes) -> str:
        """Why the timestamp file cannot be used, or "" when it can.

        The structural check is py-lmdb's pure-Python verifier: a damaged file is
        never handed to liblmdb, which may crash on one (SIGBUS on a truncated map).
        """
        # Imported here: only the backend verifies, and the verifier is a large module
        # that tools such as `cached cache` should not pay for at start-up.
        import lmdb.verify

        try:
            problems = lmdb.verify.verify(self.ts_path, subdir=False)  # type: ignore[no-untyped-call]
        except Exception as e:  # VerifyError when it cannot even begin, OSError, ValueError
            return f"timestamp store fails verification ({e})"
        if problems:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            return f"timestamp store fails verification ({problems[0]}{more})"
        short = _short_file(self.ts_path)
        if short:
            return f"timestamp store is truncated ({short})"
        try:
            ts = Store(self.ts_path, TS_TABLES, writer=True, sync=False, map_size=TS_MAP_SIZE)
        except lmdb.Error as e:
            return f"timestamp store does not open ({e})"
        try:
            with ts.read() as txn:
                owner = txn.get(b"uuid", db=ts.tables["meta"])
        except lmdb.Error as e:
            return f"timestamp store cannot be read ({e})"
        finally:
            ts.close()
        if owner != store_id:
            return "timestamp store belongs to another entry store"
        return ""

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

    def _check_identity(self) -> None:
        """Reopen stores the backend replaced (rebuilt ts store, new format)."""
        now = time.monotonic()
        if now < self._next_identity_check:
            return
        self._next_identity_check = now + 1.0
        if self.entries.replaced():
            self._expanded.clear()  # snapshot ids of another file
            self.entries.close()
            self.entries = Store(
                self.entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE
            )
        if self.ts is None or self.ts.replaced():
            if self.ts is not None:
                self.ts.close()
            self._open_ts_nonbackend()

    def close(self, clean: bool = True) -> None:
        if self.role is Role.BACKEND and clean:
            try:
                if self.ts is not None:
                    self.ts.sync()
                self.entries.write([("meta", b"clean", b"1")])
            except StoreWriteError as e:
                # Without the marker the next start checks the timestamp store harder
                # (and rebuilds it after a reboot): safe, only slower.
                log.error("%s; the clean-shutdown marker was not written", e)
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
            return _times_or_missing(txn.get(key, db=self.ts.tables[table]))

    def _classify(self, times: Times, expire: float) -> State:
        return classify(times.last_update, expire, time.time(), self.nowait_percentage)

    def _reader(self) -> AbstractContextManager[lmdb.Transaction]:
        if self.role is not Role.BACKEND:
            self._check_identity()
        return self.entries.read()

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

    def user_by_uid(self, uid: int) -> Lookup[User]:
        with self.counters.timer(CACHE_READ):
            with self._reader() as txn:
                key = txn.get(_ID.pack(uid), db=self.entries.tables["uid"])
                data = None if key is None else txn.get(key, db=self.entries.tables["users"])
            return self._user_lookup(key or b"", data)

    def _user_lookup(self, key: rec.Data, data: rec.Data | None) -> Lookup[User]:
        if data is None:
            return Lookup(State.MISSING)
        user = rec.decode_user(data)
        times = self._times("users", key)
        return Lookup(self._classify(times, times.data_expire), user, times)

    def group_by_name(self, name: str) -> Lookup[GroupView]:
        with self.counters.timer(CACHE_READ):
            key = self.key(name)
            with self._reader() as txn:
                view = self._group_view(txn, key)
                if view is None:
                    target = txn.get(b"g" + key, db=self.entries.tables["alias"])
                    if target is not None:
                        key, view = bytes(target), self._group_view(txn, target)
            return self._group_lookup(key, view)

    def group_by_gid(self, gid: int) -> Lookup[GroupView]:
        with self.counters.timer(CACHE_READ):
            with self._reader() as txn:
                key = txn.get(_ID.pack(gid), db=self.entries.tables["gid"])
                view = None if key is None else self._group_view(txn, key)
            return self._group_lookup(key or b"", view)

    def _group_lookup(self, key: rec.Data, view: GroupView | None) -> Lookup[GroupView]:
        if view is None:
            return Lookup(State.MISSING)
        times = self._times("groups", key)
        return Lookup(self._classify(times, times.data_expire), view, times)

    def _group_view(self, txn: lmdb.Transaction, key: rec.Data) -> GroupView | None:
        """Read a group and expand nested member groups down to the nesting level.

        Members of a group are the users directly in any group reachable from it by
        at most ``ldap_group_nesting_level`` downward hops — the mirror image of the
        initgroups walk, so "U in G's members" iff "G in U's initgroups" (§6.2).
        All reads happen in the caller's one snapshot, so a concurrent write is seen
        whole or not at all.
        """
        groups = self.entries.tables["groups"]
        data = txn.get(key, db=groups)
        if data is None:
            return None
        top = rec.decode_group(data)
        if not top.member_groups or self.nesting_level <= 0:
            return GroupView(top.name, top.gid, top.dn, top.members, top.member_count)
        # A snapshot id names one committed state of the whole entry store: while it
        # is the same, so is the expansion (docs/threat-model.md: re-expanding a 200,000-member
        # nested group took 0.48 s of the responder's one event loop per request).
        # After a write, the expansion still holds if the records it read are the
        # same bytes (comparing them is a memcmp; any cold lookup writes the store).
        snap = txn.id()
        memo = self._expanded.get(bytes(key))
        if memo is not None:
            if memo.snap == snap:
                return memo.view
            if all(txn.get(k, db=groups) == v for k, v in memo.deps):
                memo.snap = snap
                return memo.view
        with self.counters.timer(GROUP_EXPAND):
            view, deps, sub_members = self._expand(txn, key, top)
        self.counters.add(GROUP_EXPAND, 0, 0.0, view.member_count)
        if sub_members >= EXPAND_MEMO_MIN:
            kept = sum(m.view.member_count for m in self._expanded.values())
            if len(self._expanded) >= EXPAND_MEMO or kept > EXPAND_MEMO_NAMES:
                self._expanded.clear()
            self._expanded[bytes(key)] = _Expanded(snap, view, [(bytes(key), data), *deps])
        return view

    def _expand(
        self, txn: lmdb.Transaction, key: rec.Data, top: GroupRecord
    ) -> tuple[GroupView, list[tuple[bytes, rec.Data | None]], int]:
        """The expanded view of ``top``, the sub-group records it read (key, bytes or
        None), and how many direct members those sub-groups had."""
        groups = self.entries.tables["groups"]
        sub_members = 0
        deps: list[tuple[bytes, rec.Data | None]] = []
        seen = {key}
        blobs = [top.members]
        frontier = list(top.member_groups)
        for _ in range(self.nesting_level):
            nxt: list[str] = []
            for gname in frontier:
                gkey = self.key(gname)
                if gkey in seen:
                    continue
                seen.add(gkey)
                sub = txn.get(gkey, db=groups)
                deps.append((gkey, sub))
                if sub is None:
                    continue
                subrec = rec.decode_group(sub)
                sub_members += subrec.member_count
                blobs.append(subrec.members)
                nxt.extend(subrec.member_groups)
            frontier = nxt
            if not frontier:
                break
        names: set[str] = set()
        for blob in blobs:
            names.update(rec.split_members(blob))
        blob = rec.join_members(list(names))
        return GroupView(top.name, top.gid, top.dn, blob, len(names)), deps, sub_members

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
            gids, groups = rec.decode_initgr(idata)
            state = self._classify(times, times.initgr_expire)
            return Lookup(state, Initgroups(user, gids, tuple(groups)), times)

    def groups_by_name(self, names: Iterable[str]) -> list[GroupView]:
        """Many groups in one snapshot (memory-cache prefill after initgroups)."""
        out = []
        with self._reader() as txn:
            for name in names:
                view = self._group_view(txn, self.key(name))
                if view is not None:
                    out.append(view)
        return out

    def resolve_dns(self, dns: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Cached entries by DN: ``{dn: ("user"|"group", name)}`` for those known."""
        out: dict[str, tuple[str, str]] = {}
        with self._reader() as txn:
            dndb = self.entries.tables["dn"]
            for dn in dns:
                v = txn.get(self.dn_key(dn), db=dndb)
                if v is not None:
                    kind = "user" if v[:1] == b"u" else "group"
                    table = "users" if kind == "user" else "groups"
                    data = txn.get(v[1:], db=self.entries.tables[table])
                    if data is not None:
                        name = (
                            rec.decode_user(data).name
                            if kind == "user"
                            else rec.decode_group(data).name
                        )
                        out[dn] = (kind, name)
        return out

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
                        times[bytes(k)] = _times_or_missing(v)
        for table, keys, out in (("users", ukeys, users), ("groups", gkeys, groups)):
            for key in keys:
                tm = stored[table].get(key, rec.MISSING_TIMES)
                if tm.data_expire <= before:
                    out.append(key.decode())
                if table == "users" and key in ikeys and tm.initgr_expire <= before:
                    initgr.append(key.decode())
        return users, groups, initgr

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

    def group_idents(self, names: Iterable[str]) -> dict[str, tuple[int, str]]:
        """(gid, DN) of stored groups, members not expanded (refresh validation)."""
        out: dict[str, tuple[int, str]] = {}
        with self._reader() as txn:
            table = self.entries.tables["groups"]
            for name in names:
                data = txn.get(self.key(name), db=table)
                if data is not None:
                    with suppress(RecordError):
                        out[name] = self._ident("groups", data)
        return out

    def counts(self) -> dict[str, int]:
        with self._reader() as txn:
            return {
                t: txn.stat(self.entries.tables[t])["entries"]
                for t in ("users", "groups", "initgr")
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

    # -- writing (backend) ---------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[WriteBatch]:
        """Collect one backend request's results; commit them when the block ends."""
        batch = WriteBatch()
        yield batch
        self.commit(batch)

    def _refused(self, kind: str, name: str, ident: int, dn: str) -> bool:
        """Refuse an entry the store cannot hold, alone, with one log line (SSSD:
        "Failed to store group … Ignoring"): the rest of the write goes on."""
        why = unstorable(kind, name, ident, dn, self.key(name))
        if why:
            self.counters.add(ENTRY_SKIPPED, 1, 0.0)
            limited.log(("unstorable", kind, dn or name), logging.WARNING,
                        "failed to store %s %r (%s): %s; ignoring it", kind, name[:64],
                        dn[:128], why)  # fmt: skip
        return bool(why)

    def storable_group(self, name: str, gid: int, dn: str) -> bool:
        """For the backend: can this group be stored (and so be in initgroups)?"""
        return not self._refused("group", name, gid, dn)

    def put_user(
        self,
        batch: WriteBatch,
        user: User,
        modstamp: str = "",
        usn: str = "",
        aliases: Iterable[str] = (),
    ) -> None:
        if self._refused("user", user.name, user.uid, user.dn):
            return
        key = self.key(user.name)
        batch.users[key] = (user, modstamp, usn)
        self._put_aliases(batch, b"u", key, aliases)

    def _put_aliases(
        self, batch: WriteBatch, tag: bytes, key: bytes, aliases: Iterable[str]
    ) -> None:
        """The other values of a multi-valued name: lookups by them find the entry."""
        for alias in aliases:
            akey = self.key(alias)
            # An alias the store cannot key is left out alone, like an unstorable entry.
            if akey != key and akey and len(tag + akey) <= MAX_KEY and "\0" not in alias:
                batch.aliases[tag + akey] = key

    def put_group(
        self,
        batch: WriteBatch,
        group: Group,
        modstamp: str = "",
        usn: str = "",
        complete: bool = True,
        aliases: Iterable[str] = (),
    ) -> None:
        """Store a group. ``complete=False``: its member groups down to the nesting
        level were not all fetched, so it is stored already expired, as SSSD stores
        the incomplete groups of initgroups (reference §6.3 step 4)."""
        if self._refused("group", group.name, group.gid, group.dn):
            return
        if any("\0" in m for m in (*group.members, *group.member_groups)):
            # A NUL would split one member into two in the NUL-joined list.
            limited.log(("nul-member", group.name), logging.WARNING,
                        "group %r: member values with a NUL character are ignored",
                        group.name[:64])  # fmt: skip
            group = Group(group.name, group.gid, group.dn,
                          tuple(m for m in group.members if "\0" not in m),
                          tuple(m for m in group.member_groups if "\0" not in m))  # fmt: skip
        self._put_aliases(batch, b"g", self.key(group.name), aliases)
        batch.groups[self.key(group.name)] = (
            GroupRecord.from_group(group),
            modstamp,
            usn,
            complete,
        )

    def touch_group(self, batch: WriteBatch, name: str, modstamp: str = "", usn: str = "") -> None:
        """The group is known unchanged (same modifyTimestamp): timestamps only."""
        batch.touched_groups[self.key(name)] = (modstamp, usn)

    def put_initgroups(
        self, batch: WriteBatch, user: str, gids: Iterable[int], groups: Iterable[str]
    ) -> None:
        ok = [g for g in gids if 0 <= g < 0xFFFFFFFF]  # as unstorable(): 32-bit ids only
        batch.initgr[self.key(user)] = (tuple(ok), tuple(groups))

    def delete_user(self, batch: WriteBatch, name: str) -> None:
        batch.deleted_users.add(self.key(name))

    def delete_group(self, batch: WriteBatch, name: str) -> None:
        batch.deleted_groups.add(self.key(name))

    def commit(self, batch: WriteBatch, now: float | None = None) -> WriteResult:
        """Write the entry store only where content changed; always write timestamps."""
        if self.role is not Role.BACKEND:
            raise RuntimeError("only the backend writes the entry store")
        if self.ts is None:
            # Created at start failed (full filesystem): try again now.
            self.ts = self._open_ts_checked(self.store_id, "")
            if self.ts is None:
                raise StoreWriteError(f"{self.ts_path}: the timestamp store cannot be created")
        now = time.time() if now is None else now
        ops: list[Op] = []
        ts_ops: list[Op] = []
        t = self.entries.tables
        with self.entries.read() as txn, self.ts.read() as tstxn:
            tsu, tsg = self.ts.tables["users"], self.ts.tables["groups"]

            def old_times(table: lmdb._Database, key: bytes) -> Times:
                return _times_or_missing(tstxn.get(key, db=table))

            for key, (user, modstamp, usn) in batch.users.items():
                new = rec.encode_user(user)
                old = txn.get(key, db=t["users"])
                ops += self._put_ops("users", key, new, old, (user.uid, user.dn))
                initgr_expire = old_times(tsu, key).initgr_expire
                if key in batch.initgr:
                    initgr_expire = now + self.timeouts.user
                times = Times(now, now + self.timeouts.user, initgr_expire, modstamp, usn)
                ts_ops.append(("users", key, rec.encode_times(times)))

            for key, (gids, names) in batch.initgr.items():
                new = rec.encode_initgr(gids, names)
                if txn.get(key, db=t["initgr"]) != new:
                    ops.append(("initgr", key, new))
                if key not in batch.users:
                    p = old_times(tsu, key)
                    times = Times(p.last_update or now, p.data_expire, now + self.timeouts.user,
                                  p.modstamp, p.usn)  # fmt: skip
                    ts_ops.append(("users", key, rec.encode_times(times)))

            for key, (group, modstamp, usn, complete) in batch.groups.items():
                new = rec.encode_group(group)
                old = txn.get(key, db=t["groups"])
                ops += self._put_ops("groups", key, new, old, (group.gid, group.dn))
                expire = now + self.timeouts.group if complete else now - 1
                times = Times(now, expire, 0.0, modstamp, usn)
                ts_ops.append(("groups", key, rec.encode_times(times)))

            for akey, target in batch.aliases.items():
                if txn.get(akey, db=t["alias"]) != target:
                    ops.append(("alias", akey, target))

            for key, (modstamp, usn) in batch.touched_groups.items():
                if key in batch.groups or txn.get(key, db=t["groups"]) is None:
                    continue
                times = Times(now, now + self.timeouts.group, 0.0, modstamp, usn)
                ts_ops.append(("groups", key, rec.encode_times(times)))

            for table, keys, tstable in (
                ("users", batch.deleted_users, tsu),
                ("groups", batch.deleted_groups, tsg),
            ):
                for key in keys:
                    ops += self._delete_ops(table, key, txn.get(key, db=t[table]))
                    if table == "users" and txn.get(key, db=t["initgr"]) is not None:
                        ops.append(("initgr", key, None))
                    if tstxn.get(key, db=tstable) is not None:
                        ts_ops.append((table, key, None))

        result = WriteResult()
        if ops:
            with self.counters.transaction(ENTRY_TXN):
                written, commit_s = self.entries.write(ops)
            self.counters.add(ENTRY_COMMIT, 1, commit_s)
            self.counters.add(ENTRY_BYTES, 0, 0.0, written)
            self.counters.add(ENTRY_RECORDS, 0, 0.0, len(ops))
            result.entries_written, result.entry_bytes = len(ops), written
        if ts_ops:
            self._write_ts(ts_ops)
            result.timestamps_written = len(ts_ops)
        return result

    @staticmethod
    def _ident(table: str, data: rec.Data) -> tuple[int, str]:
        if table == "users":
            u = rec.decode_user(data)
            return u.uid, u.dn
        g = rec.decode_group(data)
        return g.gid, g.dn

    def _put_ops(
        self, table: str, key: bytes, new: bytes, old: rec.Data | None, ident: tuple[int, str]
    ) -> list[Op]:
        """Store a record that changed, moving its id and DN index entries; nothing
        when the stored bytes are the same (invariant 2)."""
        if old == new:
            return []
        id_table, tag = _INDEX[table]
        ops: list[Op] = [(table, key, new)]
        prev = None if old is None else self._ident(table, old)
        new_id, new_dn = ident
        if prev is None or prev[0] != new_id:
            if prev is not None:
                ops.append((id_table, _ID.pack(prev[0]), None))
            ops.append((id_table, _ID.pack(new_id), key))
        if prev is None or self.dn_key(prev[1]) != self.dn_key(new_dn):
            if prev is not None and prev[1]:
                ops.append(("dn", self.dn_key(prev[1]), None))
            if new_dn:
                ops.append(("dn", self.dn_key(new_dn), tag + key))
        return ops

    def _delete_ops(self, table: str, key: bytes, old: rec.Data | None) -> list[Op]:
        if old is None:
            return []
        id_table, _ = _INDEX[table]
        prev_id, prev_dn = self._ident(table, old)
        ops: list[Op] = [(table, key, None), (id_table, _ID.pack(prev_id), None)]
        if prev_dn:
            ops.append(("dn", self.dn_key(prev_dn), None))
        return ops

    def _write_ts(self, ops: list[Op]) -> None:
        assert self.ts is not None
        with self.counters.timer(TS_WRITE):
            written, _ = self.ts.write(ops)
        self.counters.add(TS_BYTES, 0, 0.0, written)
        self.counters.add(TS_RECORDS, 0, 0.0, len(ops))

    # -- invalidation (timestamp store only) ---------------------------------------

    def _require_ts(self) -> Store:
        if self.ts is None:
            raise RuntimeError(f"{self.ts_path}: timestamp store is not open")
        return self.ts

    def _invalidate_keys(self, table: str, keys: list[bytes]) -> None:
        ts = self._require_ts()
        ops: list[Op] = []
        with ts.read() as txn:
            db = ts.tables[table]
            for key in keys:
                ops.append((table, key, _invalidated(txn.get(key, db=db))))
        if ops:
            self._write_ts(ops)

    def invalidate_user(self, name: str) -> bool:
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["users"]) is None:
                return False
        self._invalidate_keys("users", [key])
        return True

    def invalidate_group(self, name: str) -> bool:
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["groups"]) is None:
                return False
        self._invalidate_keys("groups", [key])
        return True

    def _invalidate_table(self, table: str) -> int:
        """Expire every entry of ``table``; returns how many entries the cache holds.

        Only timestamp records are rewritten. Entries without one already read as
        expired, so only the existing records need rewriting (one cursor pass).
        """
        ts = self._require_ts()
        with self._reader() as txn:
            count: int = txn.stat(self.entries.tables[table])["entries"]
        with ts.read() as tstxn:
            ops: list[Op] = [
                (table, bytes(k), _invalidated(v)) for k, v in tstxn.cursor(db=ts.tables[table])
            ]
        if ops:
            self._write_ts(ops)
        return count

    def invalidate_users(self) -> int:
        return self._invalidate_table("users")

    def invalidate_groups(self) -> int:
        return self._invalidate_table("groups")

    def invalidate_all(self) -> int:
        return self.invalidate_users() + self.invalidate_groups()


_ID_NATIVE = struct.Struct("=I")


# LMDB 0.9 meta page, 64-bit: a 16-byte page header, then MDB_meta. The page size
# aliases the free DB's md_pad; mm_last_pg and mm_txnid follow the two MDB_db
# records (48 bytes each).
_META_PSIZE = struct.Struct("=I")  # at 16 + 24 (mm_dbs[FREE].md_pad)
_META_TAIL = struct.Struct("=QQ")  # mm_last_pg, mm_txnid at 16 + 24 + 96


def _short_file(path: str) -> str:
    """Why ``path`` is shorter than its own meta page says, or "".

    py-lmdb's verifier walks the live pages only; liblmdb also reuses free pages
    up to mm_last_pg, and touching one beyond end-of-file through the map is a
    SIGBUS that kills the process. So the file must hold every page up to it.
    """
    with open(path, "rb") as f:
        head = f.read(65536 * 2)
    size = os.path.getsize(path)
    if len(head) < 16 + 24 + 4:
        return f"{size} bytes"
    (psize,) = _META_PSIZE.unpack_from(head, 16 + 24)
    best = (0, -1)
    for page in (0, 1):
        off = page * psize + 16 + 24 + 96
        if off + _META_TAIL.size <= len(head):
            last_pg, txnid = _META_TAIL.unpack_from(head, off)
            if txnid > best[1]:
                best = (last_pg, txnid)
    need = (best[0] + 1) * psize
    return f"{size} bytes, its pages need {need}" if size < need else ""


def _times_or_missing(data: rec.Data | None) -> Times:
    """A stored timestamp record; a missing or damaged one reads as never refreshed."""
    if data is None:
        return rec.MISSING_TIMES
    try:
        return rec.decode_times(data)
    except RecordError:
        return rec.MISSING_TIMES


def _opt_bytes(data: rec.Data | None) -> bytes | None:
    return None if data is None else bytes(data)


def _invalidated(data: rec.Data | None) -> bytes:
    if data is not None:
        with suppress(RecordError):
            return rec.invalidated_times(data)
    return rec.encode_times(Times(0.0, rec.EXPIRED, rec.EXPIRED))


def open_domain_cache(
    db_dir: str,
    domain: DomainConfig,
    role: Role,
    *,
    nowait_percentage: int = 50,
    counters: Counters = COUNTERS,
    boot_id: str | None = None,
) -> DomainCache:
    """The cache of ``domain`` with its options (case, nesting, timeouts) applied."""
    return DomainCache(
        db_dir,
        domain.name,
        role=role,
        case_sensitive=not domain.case_insensitive,
        # rfc2307 cannot nest (reference §6.1): its groups have no member groups.
        nesting_level=domain.ldap_group_nesting_level if domain.ldap_schema != "rfc2307" else 0,
        nowait_percentage=nowait_percentage,
        timeouts=Timeouts(domain.entry_cache_user_timeout, domain.entry_cache_group_timeout),
        counters=counters,
        boot_id=boot_id,
    )
