"""Check and repair of a domain's two cache files, done by the backend when it opens them.

The entry store is trusted unless its record format is another version's, or it is
damaged (entry_store_damage: truncated, or liblmdb fails walking it): then both files
start empty, a damaged one kept aside as ``<file>.damaged`` (a cold cache is always
correct). The timestamp store is trusted only
when it belongs to this entry store, passes py-lmdb's verifier, holds every page its meta
page names, and the previous run shut down cleanly or the machine did not reboot since
(reference §3.5; docs/ARCHITECTURE.md, invariant 3: losing it loses nothing, every entry
then reads as expired). The readers (responder, tools) never repair: they reopen what the
backend replaced (cached/cache/cache.py).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import struct
import time
from contextlib import suppress
from dataclasses import dataclass

import lmdb

from cached.cache import records as rec
from cached.cache.store import (
    ENTRY_MAP_SIZE,
    MAX_TABLES,
    TS_MAP_SIZE,
    Store,
    StoreWriteError,
    describe_write_error,
    open_here,
)

log = logging.getLogger(__name__)

# alias: b"u"/b"g" + key of another value of a multi-valued name -> the entry's key
# (docs/compatibility.md §9.5: a lookup by any of an entry's names finds it, answered under one).
# creds: user key -> the user's cached credentials and login times (records.encode_creds),
# written by the backend after logins; not an entry of the directory, so kept when
# entries are expired or refreshed (`cached cache -E` keeps it, as SSSD keeps
# cachedPassword).
# access: user key -> what the last online access check (access_provider = ldap) read
# of the user and the server's answers (records.encode_access), written by the backend
# at the account check when it changed, so that offline the last online decision
# stands (cached/access/rules.py); deleted with the user, kept by `cached cache -E`.
# sudo: sudo rules by name (cache/sudo.py).
ENTRY_TABLES = (
    "users", "groups", "initgr", "uid", "gid", "dn", "meta", "alias", "creds", "netgroups",
    "access", "sudo",
)  # fmt: skip
# read_whole: group key -> when the backend last stored it read whole, members named
# from their entries (cache.READ_WHOLE; cached/ldap/stamps.py, refresh_full_interval).
TS_TABLES = ("users", "groups", "meta", "read_whole", "netgroups", "sudo")

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

# The entry store's walk at start (entry_store_damage) runs in a child process killed
# after this long: liblmdb may crash on a damaged file (SIGBUS, a wild read) or loop on
# a cycle of pages. Measured: a 214 MiB store of 600,000 records walked in 0.29 s here
# (fork included, page cache warm), so this is room for a cold disk and far more; and
# well within the monitor's READY_TIMEOUT (60 s), past which the backend is killed
# before it could set the store aside.
WALK_TIMEOUT = 30.0
# How the walk may die of the file: a fault of its own execution (liblmdb reading past
# a short file or through a garbled page pointer; its assertions abort). A signal sent
# from outside (an OOM kill, a stop) says nothing about the file, which is then used as
# it is (otherwise an OOM kill would set a sound cache aside).
_DAMAGE_SIGNALS = frozenset({signal.SIGBUS, signal.SIGSEGV, signal.SIGABRT, signal.SIGILL,
                             signal.SIGFPE, signal.SIGTRAP, signal.SIGSYS})  # fmt: skip
# liblmdb's answers about the machine, not the file; every other one is the file's
# (a cycle of pages is MDB_CURSOR_FULL, a flag bit cleared MDB_INCOMPATIBLE: a narrower
# list would keep such stores, and the backend would die on them).
_MACHINE_ERRORS = (lmdb.ReadersFullError, lmdb.TlsFullError, lmdb.LockError,
                   lmdb.MapResizedError, lmdb.MemoryError, lmdb.DbsFullError,
                   lmdb.InvalidParameterError, lmdb.ReadonlyError, lmdb.DiskError,
                   lmdb.MapFullError, lmdb.TxnFullError, lmdb.BadTxnError,
                   lmdb.NotFoundError)  # fmt: skip
# (NotFoundError: a table this version has and an older store lacks, no damage.)


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


def remove_store(path: str) -> None:
    for p in (path, path + "-lock"):
        with suppress(FileNotFoundError):
            os.unlink(p)


def opt_bytes(data: rec.Data | None) -> bytes | None:
    return None if data is None else bytes(data)


@dataclass
class BackendStores:
    """The backend's two stores once checked (``ts`` None: it cannot be created now)."""

    entries: Store
    ts: Store | None
    store_id: bytes
    ts_rebuilt_reason: str  # why the timestamp store was recreated empty, or ""


def open_backend_stores(entry_path: str, ts_path: str, boot_id: str) -> BackendStores:
    """Open both stores for writing, repairing what cannot be trusted, and mark the run
    unclean until :func:`mark_clean` (the marker a crash leaves behind)."""
    # Walked when first opened in this process (a test's reader may have it open).
    damage = entry_store_damage(entry_path) if not open_here(entry_path) else ""
    if damage:
        # A truncated or garbled entry store must not stop the daemon from starting
        # (liblmdb's SIGBUS, MDB_CORRUPTED). It is a cache: kept aside
        # for whoever wants to look, and started empty (a cold cache is correct).
        aside = entry_path + ".damaged"  # an earlier one is replaced: the last kept
        try:
            os.replace(entry_path, aside)
        except OSError as e:
            log.error("%s: %s; cannot move it aside (%s): remove it, and cached starts "
                      "with an empty cache", entry_path, damage, e.strerror or e)  # fmt: skip
            raise SystemExit(1) from None
        log.error(
            "%s: %s; moved to %s, starting with an empty cache (entries are fetched "
            "again from the directory)", entry_path, damage, aside,
        )  # fmt: skip
        with suppress(FileNotFoundError):
            os.unlink(entry_path + "-lock")
        remove_store(ts_path)
    entries = Store(entry_path, ENTRY_TABLES, writer=True, sync=True, map_size=ENTRY_MAP_SIZE)
    with entries.read() as txn:
        meta = entries.tables["meta"]
        fmt = opt_bytes(txn.get(b"format", db=meta))
        clean = opt_bytes(txn.get(b"clean", db=meta))
        prev_boot = bytes(txn.get(b"boot_id", db=meta) or b"").decode()
        store_id = opt_bytes(txn.get(b"uuid", db=meta))
        empty = txn.stat(entries.tables["users"])["entries"] == 0 and (
            txn.stat(entries.tables["groups"])["entries"] == 0
        )
    if fmt is not None and fmt != str(rec.FORMAT).encode() and not empty:
        # An entry store of another record format: rebuilding is a cold cache,
        # which is always correct; converting is not worth its risk.
        log.warning(
            "%s: record format %s, this version writes %s; starting with an empty cache",
            entry_path,
            fmt.decode(errors="replace"),
            rec.FORMAT,
        )
        entries.close()
        remove_store(entry_path)
        remove_store(ts_path)
        return open_backend_stores(entry_path, ts_path, boot_id)
    if store_id is None:
        store_id = os.urandom(16).hex().encode()
        # A new entry store never trusts an old timestamp store (reference §3.5).
        remove_store(ts_path)

    reason = ""
    if clean == b"0" and prev_boot != boot_id:
        reason = "the previous run did not shut down cleanly before a reboot"
    elif not empty and not os.path.exists(ts_path):
        reason = "the timestamp store is missing"
    ts, rebuilt = open_ts_checked(ts_path, store_id, reason)
    try:
        entries.write(
            [
                ("meta", b"format", str(rec.FORMAT).encode()),
                ("meta", b"uuid", store_id),
                ("meta", b"clean", b"0"),
                ("meta", b"boot_id", boot_id.encode()),
            ]
        )
    except StoreWriteError as e:
        # A full filesystem must not stop the cache from being served; the
        # unclean-run detection is what is lost until the marker can be written.
        log.error("%s; serving the cache read-only until writes succeed", e)
    return BackendStores(entries, ts, store_id, rebuilt)


def mark_clean(entries: Store, ts: Store | None) -> None:
    """A clean shutdown: the timestamp store flushed, then the marker written."""
    try:
        if ts is not None:
            ts.sync()
        entries.write([("meta", b"clean", b"1")])
    except StoreWriteError as e:
        # Without the marker the next start checks the timestamp store harder
        # (and rebuilds it after a reboot): safe, only slower.
        log.error("%s; the clean-shutdown marker was not written", e)


def open_ts_checked(ts_path: str, store_id: bytes, reason: str) -> tuple[Store | None, str]:
    """Open the timestamp store, rebuilding it empty when it cannot be trusted; returns
    it and why it was rebuilt ("" when it was not).

    None when it cannot be created (a full filesystem): every entry then reads as
    expired and is still served; the next commit tries again.
    """
    if not reason and os.path.exists(ts_path):
        reason = verify_ts(ts_path, store_id)
    if reason:
        log.warning(
            "%s: %s; recreating it empty (every entry reads as expired, none is lost)",
            ts_path,
            reason,
        )
        remove_store(ts_path)
    ts = None
    try:
        ts = Store(ts_path, TS_TABLES, writer=True, sync=False, map_size=TS_MAP_SIZE)
        ts.write([("meta", b"uuid", store_id)])
    except (lmdb.Error, StoreWriteError, OSError) as e:
        if ts is not None:
            ts.close()
        log.error(
            "%s; every entry reads as expired until it can be created",
            e if isinstance(e, StoreWriteError) else describe_write_error(ts_path, e),
        )
        return None, reason
    return ts, reason


def entry_store_damage(path: str) -> str:
    """Why the entry store cannot be used, or "" when it can: shorter than its meta
    page says, or liblmdb fails or dies walking every record of every table.

    A missing store is sound (it is created). Not found this way: bytes changed inside
    a record (LMDB keeps no checksums); a record that does not decode is handled where
    it is read.
    """
    if not os.path.exists(path):
        return ""
    short = short_file(path)
    if short:
        return f"entry store is damaged or truncated ({short})"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: walk, say what failed, and leave without cleaning up
        code = 0
        try:
            # A deadline of its own (the backend may be killed meanwhile, and an
            # orphaned walk would spin on), and none of the backend's files (the
            # monitor's ready pipe among them).
            signal.alarm(int(WALK_TIMEOUT) + 5)
            # The open ones, by /proc: closing up to a container's open-files limit
            # one by one, where close_range(2) is missing, takes minutes.
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd > 2 and fd != w:
                    with suppress(OSError):
                        os.close(fd)
            os.write(w, _walk(path).encode(errors="replace")[:4000])
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    said = b""
    deadline = time.monotonic() + WALK_TIMEOUT
    # poll(2), not select(2): a process with more than FD_SETSIZE (1,024) descriptors
    # open gets one above it here, which select refuses.
    poller = select.poll()
    poller.register(r, select.POLLIN)
    try:
        while (left := deadline - time.monotonic()) > 0 and poller.poll(left * 1000):
            chunk = os.read(r, 4096)
            if not chunk:
                break
            said += chunk
        else:
            # Not the file's fault as far as we know (liblmdb reports a cycle of pages
            # as MDB_CURSOR_FULL): a slow disk must not cost a sound cache.
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            log.warning("%s: the entry store walk did not end in %g s; used as it is",
                        path, WALK_TIMEOUT)  # fmt: skip
            return ""
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    said_text = said.decode(errors="replace")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _DAMAGE_SIGNALS:
        return f"entry store walk died of {signal.Signals(os.WTERMSIG(status)).name}"
    if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0 or said_text.startswith("?"):
        why = said_text[1:] or f"wait status {status:#x}"
        log.warning("%s: could not check the entry store (%s); used as it is", path, why)
        return ""
    return said_text


def _walk(path: str) -> str:
    """Read every record of every table of the store at ``path`` (in a child process:
    :func:`entry_store_damage`); what liblmdb reported of the file, "" when nothing,
    or "?" and an error that says nothing of the file."""
    try:
        env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=MAX_TABLES)
        with env.begin(buffers=True) as txn:
            for name in (None, *ENTRY_TABLES):
                try:
                    db = env.open_db(name.encode(), txn=txn, create=False) if name else None
                except lmdb.NotFoundError:
                    continue  # a table never created: an empty store
                for _key, _value in txn.cursor(db=db):
                    pass
    except lmdb.Error as e:
        if not of_the_file(e):
            return f"?{type(e).__name__}: {e}"
        return f"entry store cannot be read ({e})"
    return ""


def of_the_file(e: lmdb.Error) -> bool:
    """Does liblmdb's error describe the file (damage), rather than the machine?"""
    # lmdb.Error itself: an errno of the system's (EMFILE, ENOMEM, …).
    return type(e) is not lmdb.Error and not isinstance(e, _MACHINE_ERRORS)


def verify_ts(ts_path: str, store_id: bytes) -> str:
    """Why the timestamp file cannot be used, or "" when it can.

    The structural check is py-lmdb's pure-Python verifier: a damaged file is
    never handed to liblmdb, which may crash on one (SIGBUS on a truncated map).
    """
    # Imported here: only the backend verifies, and the verifier is a large module
    # that tools such as `cached cache` should not pay for at start-up.
    import lmdb.verify

    try:
        problems = lmdb.verify.verify(ts_path, subdir=False)  # type: ignore[no-untyped-call]
    except Exception as e:  # VerifyError when it cannot even begin, OSError, ValueError
        return f"timestamp store fails verification ({e})"
    if problems:
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        return f"timestamp store fails verification ({problems[0]}{more})"
    short = short_file(ts_path)
    if short:
        return f"timestamp store is truncated ({short})"
    try:
        ts = Store(ts_path, TS_TABLES, writer=True, sync=False, map_size=TS_MAP_SIZE)
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


# LMDB 0.9 meta page, 64-bit: a 16-byte page header, then MDB_meta. The page size
# aliases the free DB's md_pad; mm_last_pg and mm_txnid follow the two MDB_db
# records (48 bytes each).
_META_HEAD = struct.Struct("=II")  # at 16: mm_magic, mm_version
_MDB_MAGIC, _MDB_VERSION = 0xBEEFC0DE, 1  # lmdb.h MDB_MAGIC, MDB_DATA_VERSION
_META_PSIZE = struct.Struct("=I")  # at 16 + 24 (mm_dbs[FREE].md_pad)
_META_TAIL = struct.Struct("=QQ")  # mm_last_pg, mm_txnid at 16 + 24 + 96


def short_file(path: str) -> str:
    """Why ``path`` is no LMDB file or is shorter than its own meta page says, or "".

    py-lmdb's verifier walks the live pages only; liblmdb also reuses free pages
    up to mm_last_pg, and touching one beyond end-of-file through the map is a
    SIGBUS that kills the process. So the file must hold every page up to it. And
    the meta page must be one, or its page size means nothing (a file of zeros would
    pass, and a reader then die of lmdb.InvalidError).
    """
    with open(path, "rb") as f:
        head = f.read(65536 * 2)
    size = os.path.getsize(path)
    if len(head) < 16 + 24 + 4:
        return f"{size} bytes"
    magic, version = _META_HEAD.unpack_from(head, 16)
    (psize,) = _META_PSIZE.unpack_from(head, 16 + 24)
    if magic != _MDB_MAGIC or version != _MDB_VERSION:
        return f"{size} bytes, no LMDB meta page"
    if psize < 512 or psize > 65536 or psize & (psize - 1):
        return f"{size} bytes, a page size of {psize}"
    best = (0, -1)
    for page in (0, 1):
        off = page * psize + 16 + 24 + 96
        if off + _META_TAIL.size <= len(head):
            last_pg, txnid = _META_TAIL.unpack_from(head, off)
            if txnid > best[1]:
                best = (last_pg, txnid)
    need = (best[0] + 1) * psize
    return f"{size} bytes, its pages need {need}" if size < need else ""
