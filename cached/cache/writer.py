"""The writer of a domain's cache: the backend's :class:`BackendCache`.

The backend process is the only writer of the entry store (docs/ARCHITECTURE.md): only
it holds a :class:`BackendCache`, the responder and the tools a
:class:`~cached.cache.cache.DomainCache`, which has no method that writes entries, so
mypy rejects a write anywhere else (and the import-graph test,
tests/unit/test_imports.py, keeps this module to the backend). Writing keeps the uid, gid
and DN indexes in step with the records, and writes the entry store only where content
changed (invariant 2); the timestamps are always written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import lmdb

from cached.access.rules import AccessState
from cached.auth.offline import Credentials
from cached.cache import records as rec
from cached.cache import sudo
from cached.cache.cache import (
    DEFAULT_TIMEOUTS,
    ID_KEY,
    READ_WHOLE,
    DomainCache,
    Timeouts,
    cache_options,
    invalidation_counts,
    times_or_missing,
)
from cached.cache.integrity import mark_clean, open_backend_stores, open_ts_checked, read_boot_id
from cached.cache.records import RecordError, Times
from cached.cache.store import Op, StoreWriteError
from cached.config import DomainConfig
from cached.counters import (
    COUNTERS,
    ENTRY_BYTES,
    ENTRY_COMMIT,
    ENTRY_RECORDS,
    ENTRY_SKIPPED,
    ENTRY_TXN,
    Counters,
)
from cached.dn import normalize_dn
from cached.model import Group, Netgroup, SudoRule, User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# LMDB's compiled-in key limit (mdb_env_get_maxkeysize: 511 bytes). A name or DN key
# above it fails the whole write transaction, so such an entry is refused alone.
MAX_KEY = 511
# The id index and the DN-index tag of each record table.
_INDEX = {"users": ("uid", b"u"), "groups": ("gid", b"g")}


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


@dataclass
class WriteResult:
    entries_written: int = 0  # records put or deleted in the entry store
    entry_bytes: int = 0
    timestamps_written: int = 0


class WriteBatch:
    """What one backend request fetched; committed as one transaction per store.

    ``since``: the timestamp tables' invalidation counts when the request began
    (BackendCache.request); None: when the commit reads the stores. ``started``: when
    it began (wall clock; the commit's time when None)."""

    def __init__(
        self, since: dict[str, int] | None = None, started: float | None = None
    ) -> None:
        self.since = since
        self.started = started
        self.users: dict[bytes, tuple[User, str, str]] = {}
        # key -> (records.encode_group_of, gid, DN, modstamp, USN, complete)
        self.groups: dict[bytes, tuple[bytes, int, str, str, str, bool]] = {}
        self.touched_groups: dict[bytes, tuple[str, str]] = {}
        self.initgr: dict[bytes, tuple[tuple[int, ...], tuple[str, ...]]] = {}
        self.deleted_users: set[bytes] = set()
        self.deleted_groups: set[bytes] = set()
        self.read_whole: set[bytes] = set()  # keys of groups stored read whole
        # gid -> key of the group a lookup by that gid answered (own_gid)
        self.gid_owner: dict[int, bytes] = {}
        self.aliases: dict[bytes, bytes] = {}  # b"u"/b"g" + alias key -> entry key
        # Set by BackendCache.plan_early: groups of this batch may be committed early.
        self.early: EarlyPlan | None = None


class EarlyPlan:
    """What :meth:`BackendCache.commit_new_groups` must know of the whole request
    before its first early commit: the index keys two of its entries write, the
    member groups each group expands to, and what went early so far."""

    __slots__ = ("children", "dns", "done", "gids", "names", "users")

    def __init__(
        self, names: set[bytes], gids: set[int], dns: set[bytes], users: set[bytes]
    ) -> None:
        # Written by two entries of the request: b"g" + a group's name or alias key, a
        # gid, a DN key (a group's, or a user's of the batch). Their groups wait for
        # the last commit, where one commit's order of writes decides, as without any.
        self.names, self.gids, self.dns = names, gids, dns
        self.users = users  # the keys of the batch's users when planned
        # Group key -> the names of its member groups, as put (put_group_of).
        self.children: dict[bytes, Collection[str]] = {}
        self.done: set[bytes] = set()  # keys committed early in this request


# A group put without the plan knowing it: not committed early.
_UNKNOWN: Collection[str] = ("\0",)


def _twice(items: list[Any]) -> set[Any]:
    """The items met more than once (none, at C speed, in the usual request)."""
    if len(set(items)) == len(items):
        return set()
    seen: set[Any] = set()
    twice = set()
    for i in items:
        if i in seen:
            twice.add(i)
        seen.add(i)
    return twice


class BackendCache(DomainCache):
    """The cache as the backend holds it: opened with check and repair
    (cached/cache/integrity.py), read without reopening (nothing replaces its files under
    it), and written."""

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
        boot_id: str | None = None,
    ) -> None:
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.store_id = b""
        # The invalidation counts and the time when the current request began (request()).
        self._since: dict[str, int] | None = None
        self._started: float | None = None
        # Which of the gid, DN and alias indexes held nothing at the request's first
        # early commit (commit_new_groups); None: none yet in this request.
        self._empty: tuple[bool, bool, bool] | None = None
        super().__init__(
            db_dir,
            domain,
            case_sensitive=case_sensitive,
            nesting_level=nesting_level,
            nowait_percentage=nowait_percentage,
            timeouts=timeouts,
            counters=counters,
        )

    def _open(self) -> None:
        stores = open_backend_stores(self.entry_path, self.ts_path, self.boot_id)
        self.entries, self.ts = stores.entries, stores.ts
        self.store_id, self.ts_rebuilt_reason = stores.store_id, stores.ts_rebuilt_reason

    def _reader(self) -> AbstractContextManager[lmdb.Transaction]:
        return self.entries.read()

    def close(self, clean: bool = True) -> None:
        if clean:
            mark_clean(self.entries, self.ts)
        super().close()

    # -- writing -------------------------------------------------------------------

    @contextmanager
    def request(self) -> Iterator[None]:
        """Around one backend request, entered before its first search. What it read
        may predate an invalidation (`cached cache`, D-Bus) that commits while it runs,
        and the change the administrator invalidated for: what it writes to a table
        invalidated meanwhile is stored expired, so the next lookup asks the server
        again (docs/ARCHITECTURE.md §5, "Invalidation and the backend's writes").
        Nested: the outer start counts."""
        outer, outer_started = self._since, self._started
        if outer is None:
            self._since, self._started = self.invalidations(), time.time()
        try:
            yield
        finally:
            self._since, self._started = outer, outer_started
            if outer is None:
                self._empty = None

    @contextmanager
    def write(self) -> Iterator[WriteBatch]:
        """Collect one backend request's results; commit them when the block ends.
        Outside request(), the request is taken to begin here."""
        if self._since is not None:
            batch = WriteBatch(self._since, self._started)
        else:
            batch = WriteBatch(self.invalidations())
        yield batch
        self.commit(batch)

    def _refused(self, kind: str, name: str, ident: int, dn: str, key: bytes | None = None) -> bool:
        """Refuse an entry the store cannot hold, alone, with one log line (SSSD:
        "Failed to store group … Ignoring"): the rest of the write goes on. ``key``:
        the name's key when the caller has it."""
        why = unstorable(kind, name, ident, dn, self.key(name) if key is None else key)
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
        self.put_group_of(batch, group.name, group.gid, group.dn, group.members,
                          group.member_groups, modstamp, usn, complete, aliases)  # fmt: skip

    def put_group_of(
        self,
        batch: WriteBatch,
        name: str,
        gid: int,
        dn: str,
        members: Collection[str],
        member_groups: Collection[str],
        modstamp: str = "",
        usn: str = "",
        complete: bool = True,
        aliases: Iterable[str] = (),
        *,
        checked: bool = False,
        whole: bool = False,
        deep: Sequence[Collection[str]] = (),
    ) -> None:
        """put_group of a Group(name, gid, dn, members, member_groups), without one
        built (the backend stores 2,085 for a cold initgroups of bigroupuser).
        ``members`` a dict or set: unique already (records.encode_group_of).
        ``checked``: storable_group(name, gid, dn) answered True for these very values
        (the provider asks it of every group it fetches), so they are not checked
        again. ``whole``: the group was read whole (read_whole). ``deep``: the
        members reached only through non-POSIX member groups, by depth (in
        ``members`` too; records._pack_group)."""
        key = self.key(name)
        if not checked and self._refused("group", name, gid, dn, key):
            return
        record = rec.encode_group_of(name, gid, dn, members, member_groups, deep)
        if record is None:
            # A NUL would split one member into two in the NUL-joined list.
            limited.log(("nul-member", name), logging.WARNING,
                        "group %r: member values with a NUL character are ignored",
                        name[:64])  # fmt: skip
            record = rec.encode_group_of(
                name, gid, dn, [m for m in members if "\0" not in m],
                [m for m in member_groups if "\0" not in m],
                [[m for m in layer if "\0" not in m] for layer in deep],
            )  # fmt: skip
            assert record is not None
        if aliases:
            self._put_aliases(batch, b"g", key, aliases)
        batch.groups[key] = (record, gid, dn, modstamp, usn, complete)
        if batch.early is not None:
            batch.early.children[key] = member_groups
        if whole:
            batch.read_whole.add(key)

    def read_whole(self, batch: WriteBatch, name: str) -> None:
        """Group ``name``, stored in this batch, was read whole (members named from
        their entries): the commit records when (``READ_WHOLE``, stamps.due)."""
        batch.read_whole.add(self.key(name))

    def own_gid(self, batch: WriteBatch, name: str, gid: int) -> None:
        """Group ``name``, put in ``batch``, is the answer of a lookup by ``gid``: the
        gid index names it after the commit, whatever other group of the batch (or
        of the store) has that gid too. Where two groups share a gid and one is in
        the other's closure, the one below, stored incomplete at its level, took the
        index: getgrgid answered it with a truncated member list (found by fuzzing
        the cold path)."""
        batch.gid_owner[gid] = self.key(name)

    def touch_group(self, batch: WriteBatch, name: str, modstamp: str = "", usn: str = "") -> None:
        """The group is known unchanged (same modifyTimestamp): timestamps only."""
        batch.touched_groups[self.key(name)] = (modstamp, usn)

    def put_initgroups(
        self, batch: WriteBatch, user: str, gids: Iterable[int], groups: Iterable[str]
    ) -> None:
        ok = [g for g in gids if 0 <= g < 0xFFFFFFFF]  # as unstorable(): 32-bit ids only
        batch.initgr[self.key(user)] = (tuple(ok), tuple(groups))

    def store_netgroup(
        self, name: str, ng: Netgroup | None, modstamp: str = "", now: float | None = None
    ) -> None:
        """Store netgroup ``ng`` under ``name`` (None: delete it), in its own commits:
        the entry store only when the record changed (invariant 2), then its timestamps.
        A netgroup is one record with no index, so it needs no batch. As the batch's
        commit, a record written after an invalidation of netgroups that committed
        since the request began is written invalidated."""
        key = self.key(name)
        since = self._since if self._since is not None else self.invalidations()
        now = time.time() if now is None else now
        with self.entries.read() as txn:
            old = txn.get(key, db=self.entries.tables["netgroups"])
            old = None if old is None else bytes(old)
        new = None if ng is None else rec.encode_netgroup(ng)
        if new is not None and len(key) > MAX_KEY:
            self._refused("netgroup", name, 0, ng.dn if ng else "", key)
            return
        if new != old:
            with self.counters.transaction(ENTRY_TXN):
                written, commit_s = self.entries.write([("netgroups", key, new)])
            self.counters.add(ENTRY_COMMIT, 1, commit_s)
            self.counters.add(ENTRY_BYTES, 0, 0.0, written)
            self.counters.add(ENTRY_RECORDS, 0, 0.0, 1)
        ts = self.ts
        if ts is None:
            return
        times = None if new is None else rec.pack_times(
            now, now + self.timeouts.netgroup, 0.0, modstamp, ""
        )  # fmt: skip

        def build(tstxn: lmdb.Transaction) -> list[Op]:
            if times is None:
                gone = tstxn.get(key, db=ts.tables["netgroups"]) is None
                return [] if gone else [("netgroups", key, None)]
            moved = invalidation_counts(tstxn, ts)["netgroups"] != since.get("netgroups", 0)
            return [("netgroups", key, rec.invalidated_times(times) if moved else times)]

        self._write_ts_built(build)

    def drop_credentials(self, name: str) -> bool:
        """Forget user ``name``'s credentials record; whether there was one."""
        key = self.key(name)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["creds"]) is None:
                return False
        self.entries.write([("creds", key, None)])
        return True

    def put_credentials(self, name: str, creds: Credentials) -> None:
        """Store a user's credentials record (a login's outcome); StoreWriteError."""
        self.entries.write([("creds", self.key(name), rec.encode_creds(creds))])

    def access_state(self, name: str) -> AccessState | None:
        """What the last online access check of user ``name`` learnt, or None (never
        checked, or a damaged record: the next online check writes it again)."""
        with self._reader() as txn:
            data = txn.get(self.key(name), db=self.entries.tables["access"])
            if data is None:
                return None
            try:
                return rec.decode_access(data)
            except RecordError as e:
                log.warning("%s: access record of %r: %s", self.entry_path, name, e)
                return None

    def put_access(self, name: str, state: AccessState) -> bool:
        """Store an online access check's outcome when it differs from the stored one
        (invariant 2); whether it wrote. StoreWriteError."""
        key, new = self.key(name), rec.encode_access(state)
        with self._reader() as txn:
            if txn.get(key, db=self.entries.tables["access"]) == new:
                return False
        self.entries.write([("access", key, new)])
        return True

    def store_sudo(
        self,
        rules: list[SudoRule],
        stamps: Mapping[str, sudo.Stamp],
        delete: Collection[str],
        *,
        full: bool,
        since: int,
        lifetime: int,
        now: float | None = None,
    ) -> list[str]:
        """Store a sudo refresh's result (cache/sudo.py): ``rules`` read whole (written
        only where their bytes changed), ``stamps`` of every rule it saw (timestamp
        store), ``delete`` the rules it found gone. ``since``: the rules' invalidation
        count when the refresh began. Returns the names whose stored body changed."""
        now = time.time() if now is None else now
        with self.entries.read() as txn:
            ops, changed = sudo.entry_ops(txn, self.entries, rules, delete)
        if ops:
            with self.counters.transaction(ENTRY_TXN):
                written, commit_s = self.entries.write(ops)
            self.counters.add(ENTRY_COMMIT, 1, commit_s)
            self.counters.add(ENTRY_BYTES, 0, 0.0, written)
            self.counters.add(ENTRY_RECORDS, 0, 0.0, len(ops))
        if self.ts is not None:
            ts = self.ts

            def build(txn: lmdb.Transaction) -> list[Op]:
                return sudo.ts_ops(
                    txn, ts, stamps, delete, now=now, lifetime=lifetime, since=since, full=full
                )

            self._write_ts_built(build)
        return changed

    def delete_user(self, batch: WriteBatch, name: str) -> None:
        batch.deleted_users.add(self.key(name))

    def delete_group(self, batch: WriteBatch, name: str) -> None:
        batch.deleted_groups.add(self.key(name))

    def plan_early(
        self, batch: WriteBatch, groups: Collection[tuple[str, int, str, Iterable[str]]]
    ) -> None:
        """Allow :meth:`commit_new_groups` on ``batch``. ``groups``: (name, gid, DN key
        as dn.normalize_dn gives it, aliases) of every group the request may put in it,
        given after its users and before its first group are put: an index key that
        two of them write (a name, alias, gid or DN met twice, or a user's DN) keeps
        both out of the early commits, whichever comes first. Measured on the 2,085
        groups of bigroupuser: the checks cost nothing per group where nothing is met
        twice (set sizes compared in C)."""
        key = self.key
        names: list[bytes] = []
        gids: list[int] = []
        dns: list[bytes] = []
        for n, gid, dn, aliases in groups:
            own = key(n)
            names.append(b"g" + own)
            gids.append(gid)
            if dn:
                dns.append(dn.encode("utf-8"))
            if aliases:
                names += {b"g" + a for a in map(key, aliases) if a != own}
        users = {self.dn_key(u.dn) for u, _m, _u in batch.users.values() if u.dn}
        batch.early = EarlyPlan(
            _twice(names), _twice(gids), _twice(dns) | (users & set(dns)), set(batch.users)
        )

    def commit_new_groups(self, batch: WriteBatch) -> list[bytes]:
        """Commit now the groups of ``batch`` that only add to the store, and take them
        out of it; return their keys. The rest of the batch commits when its block
        ends. Nothing without :meth:`plan_early`.

        Why: the responder can put a user's groups in the memory cache while the
        backend still encodes the others (the prefill, nss/server.py), instead of
        after the whole answer (docs/ARCHITECTURE.md §4, "Early prefill").

        A group goes early when: no record is under its key; its gid, DN and aliases
        are in no index, and no other entry of the request writes them (the plan's
        ``contested``, and the DN of a user in the batch); and each of its member
        groups went early before or goes with it, so its expansion is final — a
        member group still to be written (changed, new in a later chunk, or left for
        the last commit) keeps it back, as does one the store held before (a parent
        committed ahead of its changed member group would be put in the memory cache
        without the new members). So a reader between the commits sees
        each such group whole or not at all, expanded as it will be after the last,
        and every entry the store held before as it was; the last commit leaves what
        one commit of the whole batch leaves; and a kill between them leaves groups
        stored exactly as read, with all they expand to."""
        plan = batch.early
        if plan is None:
            return []
        t = self.entries.tables
        c_names, c_gids, c_dns = plan.names, plan.gids, plan.dns
        if not plan.users.issuperset(batch.users):
            # A user put after the plan: its DN, like the plan's, may be no group's.
            c_dns = c_dns | {self.dn_key(u.dn) for u, _m, _u in batch.users.values() if u.dn}
        aliases: dict[bytes, list[bytes]] = {}
        for a, k in batch.aliases.items():
            if a[:1] == b"g":
                aliases.setdefault(k, []).append(a)
        new: dict[bytes, tuple[bytes, int, str, str, str, bool]] = {}
        with self.entries.read() as txn:
            get, groups = txn.get, t["groups"]
            # An index empty at the request's first early commit holds only what its
            # early commits added since (this process is the store's one writer), and
            # no two groups of the request share an index key (the plan): so it is not
            # looked up (the first fetch of a big user's groups: each look-up was a
            # third of this).
            empty = self._empty
            if empty is None or self._since is None:
                stat = txn.stat
                empty = self._empty = (
                    not stat(t["gid"])["entries"],
                    not stat(t["dn"])["entries"],
                    not stat(t["alias"])["entries"],
                )
            gids = None if empty[0] else t["gid"]
            dns = None if empty[1] else t["dn"]
            alias = None if empty[2] else t["alias"]
            dn_keys = dns is not None or bool(c_dns)
            for key, v in batch.groups.items():
                if (
                    b"g" + key in c_names
                    or v[1] in c_gids
                    or get(key, None, groups) is not None
                    or (gids is not None and get(ID_KEY.pack(v[1]), None, gids) is not None)
                ):
                    continue
                if dn_keys and v[2]:
                    dn_key = self.dn_key(v[2])
                    if dn_key in c_dns or (dns is not None and get(dn_key, None, dns) is not None):
                        continue
                mine = aliases.get(key)
                if mine and any(a in c_names for a in mine):
                    continue
                if alias is None or (
                    get(b"g" + key, None, alias) is None
                    and all(get(a, None, alias) is None for a in mine or ())
                ):
                    new[key] = v
        # Member groups: each must go early now or have gone before (a fixpoint: a
        # group held back holds back those that expand to it).
        children, ready, keyof = plan.children, plan.done | new.keys(), self.key
        nested = [key for key in new if children.get(key, _UNKNOWN)]
        held = True
        while held and nested:
            held = False
            for key in list(nested):
                below = children.get(key, _UNKNOWN)
                if below is _UNKNOWN or not all(keyof(m) in ready for m in below):
                    del new[key]
                    ready.discard(key)
                    nested.remove(key)
                    held = True
        if not new:
            return []
        part = WriteBatch(batch.since, batch.started)
        part.groups = new
        part.read_whole = batch.read_whole & new.keys()
        part.aliases = {a: k for k in new for a in aliases.get(k, ())}
        # Not durable on its own: the request's last commit flushes it with its own
        # before the answer leaves; a crash before that undoes it whole (an fsync
        # each was half the time of these commits: docs/ARCHITECTURE.md §4).
        self.commit(part, durable=False)
        plan.done.update(new)
        for key in new:
            del batch.groups[key]
        batch.read_whole -= new.keys()
        for a in part.aliases:
            del batch.aliases[a]
        return list(new)

    def commit(
        self, batch: WriteBatch, now: float | None = None, durable: bool = True
    ) -> WriteResult:
        """Write the entry store only where content changed; always write timestamps.
        ``durable=False`` (an early commit): on disk with the request's last commit,
        which is durable before the answer leaves (Store.write_built)."""
        if self.ts is None:
            # Created at start failed (full filesystem): try again now.
            self.ts, _ = open_ts_checked(self.ts_path, self.store_id, "")
            if self.ts is None:
                raise StoreWriteError(f"{self.ts_path}: the timestamp store cannot be created")
        now = time.time() if now is None else now
        ops: list[Op] = []
        drops: list[Op] = []  # index entries records leave (_settle_drops)
        ts_ops: list[Op] = []
        # Timestamp records that vouch for nothing (expired, no stamp): written before
        # the entry commit, the others after it. A kill between the two commits then
        # leaves an entry either with its own record or with an older one that still
        # describes a version the server had (stamps only move forward), never an
        # incomplete member list under the old record's validity and trusted stamp.
        early: list[Op] = []
        t = self.entries.tables
        ts = self.ts
        with self.entries.read() as txn, ts.read() as tstxn:
            tsu, tsg, tsw = ts.tables["users"], ts.tables["groups"], ts.tables["read_whole"]
            since = invalidation_counts(tstxn, ts) if batch.since is None else batch.since

            def old_times(table: lmdb._Database, key: bytes) -> Times:
                return times_or_missing(tstxn.get(key, db=table))

            for key, (user, modstamp, usn) in batch.users.items():
                new = rec.encode_user(user)
                old = txn.get(key, db=t["users"])
                ops += self._put_ops("users", key, new, old, (user.uid, user.dn), drops)
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

            groups_db, fresh, stale = t["groups"], now + self.timeouts.group, now - 1
            for key, (new, gid, dn, modstamp, usn, complete) in batch.groups.items():
                old = txn.get(key, db=groups_db)
                ops += self._put_ops("groups", key, new, old, (gid, dn), drops)
                expire = fresh if complete else stale
                packed = rec.pack_times(now, expire, 0.0, modstamp, usn)
                (ts_ops if complete else early).append(("groups", key, packed))

            # After the entry commit (ts_ops, never early): the record vouches for the
            # stored member list, as a stamp does; so only for a group stored complete
            # (an incomplete one is stored expired, without a stamp to vouch for). The
            # request's start, not the commit: what it read is at least that old.
            whole = READ_WHOLE.pack(now if batch.started is None else batch.started)
            ts_ops += [("read_whole", key, whole) for key in batch.read_whole
                       if key in batch.groups and batch.groups[key][5]]  # fmt: skip

            for akey, target in batch.aliases.items():
                if txn.get(akey, db=t["alias"]) != target:
                    ops.append(("alias", akey, target))

            for key, (modstamp, usn) in batch.touched_groups.items():
                if key in batch.groups or txn.get(key, db=t["groups"]) is None:
                    continue
                times_data = rec.pack_times(now, now + self.timeouts.group, 0.0, modstamp, usn)
                ts_ops.append(("groups", key, times_data))

            for table, keys, tstable in (
                ("users", batch.deleted_users, tsu),
                ("groups", batch.deleted_groups, tsg),
            ):
                for key in keys:
                    ops += self._delete_ops(table, key, txn.get(key, db=t[table]), drops)
                    if table == "users" and txn.get(key, db=t["initgr"]) is not None:
                        ops.append(("initgr", key, None))
                    if tstxn.get(key, db=tstable) is not None:
                        ts_ops.append((table, key, None))
                    if table == "groups" and tstxn.get(key, db=tsw) is not None:
                        ts_ops.append(("read_whole", key, None))
            for gid, key in batch.gid_owner.items():
                if key in batch.groups:
                    if batch.groups[key][1] != gid:
                        continue
                elif key not in batch.touched_groups or txn.get(key, db=t["groups"]) is None:
                    continue  # touched: stored with this very gid (stamps.unchanged)
                ikey = ID_KEY.pack(gid)
                now_owner = next((v for tb, k, v in reversed(ops) if tb == "gid" and k == ikey),
                                 txn.get(ikey, db=t["gid"]))  # fmt: skip
                if now_owner != key:
                    ops.append(("gid", ikey, key))
            ops += self._settle_drops(txn, t, ops, drops)

        result = WriteResult()
        if ops and early:
            self._write_ts(early)
            result.timestamps_written, early = len(early), []
        ts_ops = early + ts_ops
        if ops:
            with self.counters.transaction(ENTRY_TXN):
                written, commit_s = self.entries.write(ops, durable)
            self.counters.add(ENTRY_COMMIT, 1, commit_s)
            self.counters.add(ENTRY_BYTES, 0, 0.0, written)
            self.counters.add(ENTRY_RECORDS, 0, 0.0, len(ops))
            result.entries_written, result.entry_bytes = len(ops), written
        if ts_ops:
            # The records above were computed from snapshots; an invalidation that
            # committed since the request began (it may predate what the request
            # read) is checked here, inside the write transaction, so none can fall
            # between the check and the write: that table's records are stored in
            # the invalidated form the invalidation would have given them had it
            # come after (expired, stamps and lastUpdate kept). Nor are the groups
            # recorded as read whole then (their previous records, older or none,
            # stay): what was read may predate the change invalidated for.
            # An initgroups list is only as fresh as its groups: with the groups
            # invalidated and not the users (`cached cache -G`, `-g`), the list is
            # stored expired too, so the next lookup or run walks the user again (one
            # walk by stamps) rather than finding the list fresh and each of its
            # groups expired: a search per group, 2,085 for bigroupuser.
            initgr = batch.initgr

            def build(tstxn: lmdb.Transaction) -> list[Op]:
                now_counts = invalidation_counts(tstxn, ts)
                moved = {tb for tb, n in now_counts.items() if n != since.get(tb, 0)}
                if not moved:
                    return ts_ops
                lists = "groups" in moved and "users" not in moved
                return [
                    (tb, key, rec.invalidated_times(v))
                    if v is not None and tb in moved
                    else (tb, key, rec.initgr_invalidated_times(v))
                    if lists and tb == "users" and v is not None and key in initgr
                    else (tb, key, v)
                    for tb, key, v in ts_ops
                    if not (tb == "read_whole" and v is not None and "groups" in moved)
                ]

            result.timestamps_written += self._write_ts_built(build)
        return result

    def _put_ops(
        self, table: str, key: bytes, new: bytes, old: rec.Data | None, ident: tuple[int, str],
        drops: list[Op],
    ) -> list[Op]:  # fmt: skip
        """Store a record that changed, moving its id and DN index entries (the ones it
        leaves go to ``drops``, see _settle_drops); nothing when the stored bytes are
        the same (invariant 2)."""
        if old == new:
            return []
        id_table, tag = _INDEX[table]
        ops: list[Op] = [(table, key, new)]
        prev = None if old is None else self._ident(table, old)
        new_id, new_dn = ident
        if prev is None or prev[0] != new_id:
            if prev is not None:
                drops.append((id_table, ID_KEY.pack(prev[0]), key))
            ops.append((id_table, ID_KEY.pack(new_id), key))
        if prev is None or self.dn_key(prev[1]) != self.dn_key(new_dn):
            if prev is not None and prev[1]:
                drops.append(("dn", self.dn_key(prev[1]), tag + key))
            if new_dn:
                ops.append(("dn", self.dn_key(new_dn), tag + key))
        return ops

    def _delete_ops(
        self, table: str, key: bytes, old: rec.Data | None, drops: list[Op]
    ) -> list[Op]:
        if old is None:
            return []
        id_table, tag = _INDEX[table]
        prev_id, prev_dn = self._ident(table, old)
        drops.append((id_table, ID_KEY.pack(prev_id), key))
        if prev_dn:
            drops.append(("dn", self.dn_key(prev_dn), tag + key))
        if table == "users":
            # A user the directory no longer has keeps no password that works offline
            # (SSSD deletes the entry with its cachedPassword).
            return [(table, key, None), ("creds", key, None), ("access", key, None)]
        return [(table, key, None)]

    @staticmethod
    def _settle_drops(txn: lmdb.Transaction, tables: dict[str, Any], ops: list[Op],
                      drops: list[Op]) -> list[Op]:  # fmt: skip
        """The index entries a batch's records leave, (table, key, the entry's value
        when it names that record), deleted only where they still name it once the
        batch's own index writes are counted. A record renamed on the server is put
        under its new name and its old name deleted in one batch, both with the same
        gid (and, for a change of case only, the same DN key): deleting the gid entry
        unconditionally removed the one just written for the new name, for good, as
        the next fetches find the record unchanged (found by fuzzing the refresh:
        ``getent group <gid>`` answered nothing). Two groups swapping gids likewise."""
        if not drops:
            return []
        written = {(tb, k): v for tb, k, v in ops if tb in ("uid", "gid", "dn")}
        out: list[Op] = []
        for tb, k, owner in drops:
            now = written[tb, k] if (tb, k) in written else txn.get(k, db=tables[tb])
            if now == owner:
                out.append((tb, k, None))
                written[tb, k] = None
        return out


def open_backend_cache(
    db_dir: str,
    domain: DomainConfig,
    *,
    nowait_percentage: int = 50,
    counters: Counters = COUNTERS,
    boot_id: str | None = None,
) -> BackendCache:
    """The backend's cache of ``domain`` with its options (case, nesting, timeouts)."""
    return BackendCache(db_dir, domain.name, boot_id=boot_id, **cache_options(domain),
                        nowait_percentage=nowait_percentage, counters=counters)  # fmt: skip
