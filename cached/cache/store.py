"""One LMDB environment: opening, named tables, map growth, short transactions.

LMDB gives the cache what it needs across processes: one writer (the backend) and
any number of lock-free readers (the responder) with MVCC snapshots, so a reader
never sees half of a write transaction. This module hides LMDB's two map-size
errors from the rest of the cache:

* ``MapFullError`` in the writer: the map is doubled and the whole write is replayed
  (writes are prepared as a list of operations before the transaction opens, so
  replaying is safe).
* ``MapResizedError`` in a reader: another process grew the map; adopt its size
  (``set_mapsize(0)``) and begin again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import TypeVar, cast

import lmdb

T = TypeVar("T")

# Preallocated address space, not disk: LMDB files are sparse and grow with use.
# 1 GiB holds about 20 directories of the bigroupuser size (a 5,000-user,
# 3,000-group cache is ~45 MB); the map doubles on demand beyond that.
ENTRY_MAP_SIZE = 1 << 30
TS_MAP_SIZE = 256 << 20
MAX_TABLES = 16

# A write: (table, key, value) puts, or (table, key, None) deletes.
Op = tuple[str, bytes, bytes | None]
_KEY = itemgetter(0)  # of a (key, value) pair


class StoreWriteError(Exception):
    """A write transaction failed; the message names the file and, when its
    filesystem is full, says so (liblmdb reports a short write as EIO)."""


def describe_write_error(path: str, e: BaseException) -> str:
    text = f"{path}: cannot write: {e}"
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
        full = st.f_bavail * st.f_frsize < (1 << 20)  # less than 1 MiB left
    except OSError:
        full = False
    if full or "No space left" in str(e):
        text += f" (No space left on device: the filesystem of {os.path.dirname(path)} is full)"
    return text


# LMDB must not open one file twice in a process (its fcntl locks are per process),
# and py-lmdb refuses to. Stores of the same file in one process (the backend and
# a responder in one test, or a tool next to a backend) share one environment.
_ENVS: dict[tuple[int, int], tuple[lmdb.Environment, int]] = {}


def _open_env(
    path: str, *, writer: bool, sync: bool, map_size: int, create: bool
) -> lmdb.Environment:
    try:
        st = os.stat(path)
        key: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except FileNotFoundError:
        key = None
    if key is not None and key in _ENVS:
        env, refs = _ENVS[key]
        if writer and env.flags()["readonly"]:
            raise lmdb.Error(f"{path}: already open read-only in this process")
        _ENVS[key] = (env, refs + 1)
        return env
    env = lmdb.open(
        path,
        subdir=False,
        map_size=map_size,
        max_dbs=MAX_TABLES,
        readonly=not writer,
        sync=sync,
        # The meta page is flushed by Store.write_built after each durable commit
        # (env.sync), not by liblmdb's commit: a commit then pays one fsync, of its
        # data pages, before its meta page is written (MDB_NOMETASYNC keeps the store
        # whole after a crash, which may undo the last commit only), and one that need
        # not be durable on its own, an early commit of a big initgroups answer
        # (BackendCache.commit_new_groups), pays no second one.
        metasync=False,
        # Readers only: several threads of one process may read at once.
        max_readers=512,
        lock=True,
        create=create,
    )
    st = os.stat(path)
    _ENVS[(st.st_dev, st.st_ino)] = (env, 1)
    return env


def open_here(path: str) -> bool:
    """Whether this process has the store at ``path`` open (liblmdb allows one
    environment per file and process; py-lmdb refuses a second)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) in _ENVS


def _release_env(env: lmdb.Environment) -> None:
    for key, (e, refs) in list(_ENVS.items()):
        if e is env:
            if refs > 1:
                _ENVS[key] = (e, refs - 1)
                return
            del _ENVS[key]
            break
    env.close()


class Store:
    def __init__(
        self,
        path: str,
        tables: tuple[str, ...],
        *,
        writer: bool,
        sync: bool,
        map_size: int,
        create: bool | None = None,
    ) -> None:
        """``create`` (default: ``writer``) makes a missing file; otherwise a missing
        file raises FileNotFoundError (only the backend creates stores)."""
        self.path = path
        self.writer = writer
        # Commits made durable before write_built returns (the entry store): the
        # meta page flushed after the commit (_open_env).
        self.durable = writer and sync
        create = writer if create is None else create
        if create:
            os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        elif not os.path.exists(path):
            raise FileNotFoundError(path)
        self.env = _open_env(path, writer=writer, sync=sync, map_size=map_size, create=create)
        st = os.stat(path)
        self.identity = (st.st_dev, st.st_ino)
        self.tables: dict[str, lmdb._Database] = {}
        if writer:
            for name in tables:
                self.tables[name] = self.env.open_db(name.encode(), create=True)
        else:
            # py-lmdb commits its own transaction here, which keeps the handles valid
            # (a handle opened in an aborted read transaction is closed with it).
            for name in tables:
                try:
                    self.tables[name] = self.env.open_db(name.encode(), create=False)
                except lmdb.NotFoundError:
                    # A table newer than the file (written by a version without it,
                    # the backend not yet started): absent, read as empty by its users.
                    continue

    def close(self) -> None:
        _release_env(self.env)

    def replaced(self) -> bool:
        """True when the file at ``path`` is no longer the one this Store has open."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self.identity

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A short read-only snapshot. Keep it short: long readers pin old pages."""
        try:
            txn = self.env.begin(write=False, buffers=False)
        except lmdb.MapResizedError:
            self.env.set_mapsize(0)
            txn = self.env.begin(write=False, buffers=False)
        try:
            yield txn
        finally:
            txn.abort()

    def write(self, ops: list[Op], durable: bool = True) -> tuple[int, float]:
        """Apply ``ops`` in one write transaction.

        Returns the bytes written and the seconds spent in commit (which includes the
        fsyncs of a synchronous store: SSSD's "time spent writing to LDB", §5.2).
        ``durable=False``: a commit another durable one follows before anything
        depends on it; its meta page is flushed with that one's (write_built).
        """
        written, seconds, _ = self.write_built(lambda _txn: ops, durable)
        return written, seconds

    def write_built(
        self, build: Callable[[lmdb.Transaction], list[Op]], durable: bool = True
    ) -> tuple[int, float, int]:
        """Apply the operations ``build`` returns, built inside the same write
        transaction: its reads see every commit before it, and no other process's
        commit can come between them and the write (LMDB has one writer at a time,
        across processes). ``build`` only reads and computes: a full map is doubled
        and the transaction replayed, ``build`` included. Returns the bytes written,
        the seconds spent in commit and how many operations were applied. On a
        synchronous store the commit is on disk when this returns unless ``durable``
        is False: then its data pages are, and its meta page goes with the next
        durable commit's (a crash in between may undo it, never damage the store)."""
        while True:
            txn = self.env.begin(write=True)
            try:
                ops = build(txn)
                # Operations on different tables commute, so each table's are applied
                # together, in their order; a table with puts only takes them in one
                # putmulti (half the CPU of a put per record, measured on 6,000
                # records: what a cold initgroups of bigroupuser writes), where the
                # last put of a key wins as before.
                written = 0
                by_table: dict[str, list[tuple[bytes, bytes | None]]] = {}
                deleting: set[str] = set()
                for table, key, value in ops:
                    items = by_table.get(table)
                    if items is None:
                        items = by_table[table] = []
                    items.append((key, value))
                    if value is None:
                        deleting.add(table)
                    else:
                        written += len(key) + len(value)
                for table, items in by_table.items():
                    db = self.tables[table]
                    if table not in deleting:
                        # No None among a table's values without a delete. In key
                        # order (a stable sort: the last put of a key still wins):
                        # B-tree inserts in order touch each page once; the 2,085
                        # read_whole records of a cold initgroups, from a set, took
                        # 2.1 ms in their order, 1.5 ms sorted first.
                        items.sort(key=_KEY)
                        txn.cursor(db=db).putmulti(cast("list[tuple[bytes, bytes]]", items))
                        continue
                    for key, value in items:
                        if value is None:
                            txn.delete(key, db=db)
                        else:
                            txn.put(key, value, db=db)
                start = time.perf_counter()
                txn.commit()
                if durable and self.durable:
                    self.env.sync(True)  # the meta page (_open_env: no metasync)
                return written, time.perf_counter() - start, len(ops)
            except lmdb.MapFullError:
                txn.abort()
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
            except lmdb.Error as e:
                # Nothing was written (LMDB transactions are atomic); the caller goes
                # on serving what the store holds.
                txn.abort()
                raise StoreWriteError(describe_write_error(self.path, e)) from None
            except BaseException:
                txn.abort()
                raise

    def sync(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as e:
            raise StoreWriteError(describe_write_error(self.path, e)) from None
