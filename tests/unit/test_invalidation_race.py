"""`cached cache` (sss_cache) racing the backend's writes: an invalidation is never lost.

The invalidation (another process: the tool, or the responder's D-Bus one) writes the
timestamp store only; the backend writes both stores, the entry store first (synced),
then the timestamp store (docs/ARCHITECTURE.md §5, "a kill between a write's two
commits"). These tests put the invalidation in each window of a backend write, with
real LMDB stores in real processes, and check what a lookup reads afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from dataclasses import replace
from pathlib import Path

from cached.cache import DomainCache, State
from cached.cache import cache as cache_mod
from cached.cache.writer import BackendCache
from cached.counters import Counters
from cached.model import Group, User

BASE = "dc=example,dc=test"
ALICE = User("alice", 10001, 10000, "Alice", "/home/alice", "/bin/sh", f"uid=alice,{BASE}")
STAFF = Group("staff", 20001, f"cn=staff,ou=groups,{BASE}", ("alice", "bob"))


def backend(tmp_path: Path) -> BackendCache:
    return BackendCache(str(tmp_path), "LDAP", boot_id="boot-1", counters=Counters())


# Spawned, not forked: an LMDB environment must not cross a fork (tests/unit/test_cache.py).
def _tool(path: str, what: str) -> None:
    """What `cached cache -E` / `-U` / `-g staff` does to one domain, in a process of
    its own as the tool runs."""
    c = DomainCache(path, "LDAP", counters=Counters())
    if what == "-E":
        c.invalidate_all()
    elif what == "-U":
        c.invalidate_users()
    else:
        c.invalidate_group(what)
    c.close()


def run_tool(tmp_path: Path, what: str = "-E") -> None:
    p = mp.get_context("spawn").Process(target=_tool, args=(str(tmp_path), what))
    p.start()
    p.join()
    assert p.exitcode == 0


def _store(c: BackendCache, shell: str, members: tuple[str, ...], stamp: str) -> None:
    with c.write() as b:
        c.put_user(b, replace(ALICE, shell=shell), usn=stamp)
        c.put_group(b, Group(STAFF.name, STAFF.gid, STAFF.dn, members), usn=stamp)
        c.put_initgroups(b, "alice", [10000, 20001], ["staff"])


def states(c: DomainCache) -> tuple[State, State, State]:
    return (
        c.user_by_name("alice").state,
        c.initgroups("alice").state,
        c.group_by_name("staff").state,
    )


def test_an_invalidation_between_the_entry_commit_and_the_timestamps_is_kept(tmp_path):
    """The backend computes its timestamp records, commits the entry store (synced:
    the widest part of the window), then writes the timestamp store. `cached cache -E`
    committing in between must not be undone by that last write: the entries stay
    expired, so the next lookup fetches them again as the administrator asked."""
    c = backend(tmp_path)
    _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    write = c.entries.write
    ran = []

    def commit_then_invalidate(ops, durable=True):
        result = write(ops, durable)
        run_tool(tmp_path, "-E")  # after the entry commit, before the timestamp write
        ran.append(True)
        return result

    c.entries.write = commit_then_invalidate  # type: ignore[method-assign]
    _store(c, "/bin/bash", ("alice", "bob", "carol"), "csn-2")  # content changed
    assert ran == [True]
    c.entries.write = write  # type: ignore[method-assign]
    reader = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    assert states(reader) == (State.EXPIRED, State.EXPIRED, State.EXPIRED)
    assert reader.user_by_name("alice").value.shell == "/bin/bash"  # type: ignore[union-attr]
    # What was stored is described by its own stamp (kept, as -E keeps stamps).
    assert reader.group_stamps(["staff"])["staff"][1] == "csn-2"
    # The refresh the invalidation asked for stores them valid again.
    _store(c, "/bin/bash", ("alice", "bob", "carol"), "csn-2")
    assert states(reader) == (State.VALID, State.VALID, State.VALID)


def test_a_request_that_began_before_an_invalidation_stores_its_entries_expired(tmp_path):
    """The other direction: the backend is mid-fetch when `cached cache -E` runs. What
    it read may predate the change the administrator invalidated for, so it is stored
    (it is newer than what the cache held) but expired, with its stamps: the next
    lookup validates it again. SSSD stores it valid (docs/compatibility.md §9.2)."""
    c = backend(tmp_path)
    _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    with c.request():
        # ... the request's searches run here ...
        run_tool(tmp_path, "-E")
        _store(c, "/bin/sh", ("alice", "bob"), "csn-1")  # unchanged: timestamps only
    assert states(c) == (State.EXPIRED, State.EXPIRED, State.EXPIRED)
    assert c.group_stamps(["staff"])["staff"][1] == "csn-1"
    # A request that begins after the invalidation stores valid.
    with c.request():
        _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    assert states(c) == (State.VALID, State.VALID, State.VALID)


def test_an_invalidation_of_one_table_expires_only_that_tables_records(tmp_path):
    """`-U` during a request: its users are stored expired (their initgroups lists
    with them, as -U expires those), its groups valid; `-g staff` the reverse, but
    for the initgroups lists: a list is only as fresh as its groups. `cached cache
    -E` invalidates the users, then the groups, in transactions of their own; a
    request begun between the two, its list stored fresh and its groups expired,
    made the next `id` and refresh runs send each group's lookup alone."""
    c = backend(tmp_path)
    _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    with c.request():
        run_tool(tmp_path, "-U")
        _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    assert states(c) == (State.EXPIRED, State.EXPIRED, State.VALID)
    with c.request():
        run_tool(tmp_path, "staff")
        _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    assert states(c) == (State.VALID, State.EXPIRED, State.EXPIRED)


def test_an_invalidation_never_writes_back_a_record_older_than_a_commit(tmp_path, monkeypatch):
    """The invalidation's own read and write: a backend commit between them (here a
    group stored incomplete: expired, no stamp, sssd-reference.md §6.3 step 4) must
    not be overwritten by the invalidated form of the record read before it, whose
    stamp (kept by -E) would then vouch for the incomplete member list at the next
    refresh (touch_group, docs/ARCHITECTURE.md §5).

    The backend commits from a thread while the invalidation is between reading a
    record and writing it. When the invalidation holds the timestamp store's write
    transaction over both (LMDB: one writer at a time), that commit waits for it and
    the join below times out; the result must be the same either way."""
    c = backend(tmp_path)
    with c.write() as b:
        c.put_group(b, STAFF, "20200101000000Z", "csn-1")
    tool = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    invalidated = cache_mod._invalidated
    committed: list[bool] = []

    def store_incomplete() -> None:
        with c.write() as b:
            c.put_group(b, Group(STAFF.name, STAFF.gid, STAFF.dn, ("alice",)), "", "",
                        complete=False)  # fmt: skip
        committed.append(True)

    def invalidated_after_a_commit(data):
        if not committed and not threads:
            t = threading.Thread(target=store_incomplete)
            threads.append(t)
            t.start()
            # Not a measured threshold: how long to let the commit sneak in.
            t.join(timeout=1.0)
        return invalidated(data)

    threads: list[threading.Thread] = []
    monkeypatch.setattr(cache_mod, "_invalidated", invalidated_after_a_commit)
    assert tool.invalidate_group("staff")
    threads[0].join()
    assert committed == [True]
    got = tool.group_by_name("staff")
    assert got.value is not None and got.value.member_count == 1
    assert got.state is State.EXPIRED
    assert tool.group_stamps(["staff"])["staff"][:2] == ("", "")  # nothing to trust
    tool.close()


def test_a_request_that_an_invalidation_raced_records_no_group_read_whole(tmp_path):
    """The record of when a group was last read whole (stamps.due) is kept by
    invalidation, like the stamps; a request that began before an invalidation does
    not renew it either, whatever it read: that may predate the change invalidated
    for. The group's previous record (older, or none) stays, which makes it due
    sooner, the safe side. A request that begins after it records as usual."""
    c = backend(tmp_path)

    def store_whole() -> None:
        with c.write() as b:
            c.put_group(b, STAFF, "", "csn-1")
            c.read_whole(b, "staff")

    store_whole()
    first = c.read_whole_times(["staff"])["staff"]
    with c.request():
        run_tool(tmp_path, "-E")
        store_whole()
    assert c.group_by_name("staff").state is State.EXPIRED
    assert c.read_whole_times(["staff"]) == {"staff": first}
    with c.request():
        store_whole()
    assert c.read_whole_times(["staff"])["staff"] > first



def test_cache_minus_e_expires_users_and_groups_in_one_transaction(tmp_path, monkeypatch):
    """`-E` expires the users (their initgroups lists with them) and the groups in one
    write transaction of the timestamp store: a backend request cannot begin and end
    between the two and leave a list fresh over groups expired (its `id` would ask for
    each group alone). Counted by the transactions the tool's process writes."""
    c = backend(tmp_path)
    _store(c, "/bin/sh", ("alice", "bob"), "csn-1")
    c.close()
    d = DomainCache(str(tmp_path), "LDAP", counters=Counters())
    writes: list[int] = []
    write = d._write_ts_built

    def counted(build):
        writes.append(1)
        return write(build)

    monkeypatch.setattr(d, "_write_ts_built", counted)
    assert d.invalidate_all() == 2  # alice and staff
    assert writes == [1]
    assert d.invalidations() == {"users": 1, "groups": 1, "netgroups": 1}
    assert states(d) == (State.EXPIRED, State.EXPIRED, State.EXPIRED)
    d.close()
