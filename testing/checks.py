"""What tests check a running ``cached serve`` with (testing/daemon.py): its status and
counters, the answers it serves against the generated directory's expected ones, its
entry store verified after a fault, and raw requests on its NSS socket.

Shared by the fault, security, hung-server, fuzz and soak tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cached.cache import DomainCache, State, cache_paths
from cached.cache import records as rec
from cached.cache.integrity import ENTRY_TABLES
from cached.cache.store import ENTRY_MAP_SIZE, Store
from cached.dn import normalize_dn
from cached.model import User
from cached.nss import protocol as p
from testing.daemon import CachedDaemon
from testing.gendir import Expected
from testing.procstat import gone

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}
BACKEND = "backend LDAP"
DOMAIN = "LDAP"
# Timeouts of the fault tests: SSSD's minimums where it has them, so a frozen server
# costs seconds, not the default 6-8 s per attempt.
FAST_FAILOVER: dict[str, Any] = {
    "ldap_network_timeout": 1,
    "ldap_search_timeout": 1,
    "ldap_opt_timeout": 1,
    "offline_timeout": 1,
    "offline_timeout_max": 2,
    "offline_timeout_random_offset": 0,
}


# -- helpers: waiting, processes, status ----------------------------------------------


def wait_for(
    cond: Callable[[], bool], what: str, timeout: float = 30.0, log: Callable[[], str] = str
) -> float:
    """Poll ``cond`` until it holds; returns the seconds it took."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f} s\n{log()}")
        time.sleep(0.05)  # pacing of the poll; the condition itself is the check
    return time.monotonic() - start


def child(d: CachedDaemon, name: str) -> dict[str, Any]:
    for c in d.control("status")["children"]:
        if c["name"] == name:
            return dict(c)
    raise LookupError(name)


def backend_status(d: CachedDaemon) -> dict[str, Any]:
    return dict(child(d, BACKEND)["status"] or {})


def responder_status(d: CachedDaemon) -> dict[str, Any]:
    return dict(child(d, "responder")["status"] or {})


def kill_hard(d: CachedDaemon) -> None:
    """SIGKILL the monitor and every child, each by its pid: no process gets to shut
    down cleanly (the monitor first, so that it cannot restart a child)."""
    children = [int(c["pid"]) for c in d.control("status")["children"] if c["running"]]
    os.kill(d.pid, signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert d.stop() == -signal.SIGKILL
    for pid in children:
        wait_for(lambda pid=pid: gone(pid), f"pid {pid} to die")  # type: ignore[misc]


# -- helpers: what the daemon answers, what it should answer ---------------------------


@dataclass(frozen=True)
class Answers:
    passwd: dict[str, str]  # name -> getent passwd line
    group: dict[str, tuple[int, frozenset[str]]]  # name -> (gid, members)
    initgroups: frozenset[int]  # the big user's gids


def passwd_line(u: User) -> str:
    return f"{u.name}:*:{u.uid}:{u.gid}:{u.gecos}:{u.home}:{u.shell}"


def expected_answers(exp: Expected, level: int = 2) -> Answers:
    return Answers(
        {u: passwd_line(exp.user(u)) for u in exp.user_names()},
        {g: (exp.group(g).gid, frozenset(exp.members(g, level))) for g in exp.group_names()},
        # getent initgroups: not the primary gid of a group not listing the user (item 11).
        frozenset(exp.initgroups_reply(exp.big_user, level)),
    )


def served_answers(d: CachedDaemon, exp: Expected) -> Answers:
    """Every user, every group and the big user's initgroups, through glibc and
    libnss_sss (socket only), three processes in all."""
    users = sorted(exp.user_names())
    r = d.run_nss(["getent", "passwd", *users], env=SOCKET_ONLY)
    passwd = {line.split(":", 1)[0]: line for line in r.stdout.splitlines()}
    r = d.run_nss(["getent", "group", *sorted(exp.group_names())], env=SOCKET_ONLY)
    group = {}
    for line in r.stdout.splitlines():
        name, _pw, gid, members = line.split(":")
        group[name] = (int(gid), frozenset(members.split(",")) - {""})
    r = d.run_nss(["getent", "initgroups", exp.big_user], env=SOCKET_ONLY)
    gids = frozenset(int(g) for g in r.stdout.split()[1:])
    return Answers(passwd, group, gids)


def cache_states(d: CachedDaemon, exp: Expected) -> set[State]:
    """The expiry state of every user and group in the entry store, read as
    ``cached cache`` reads it."""
    cache = DomainCache(str(d.db_dir), DOMAIN)
    try:
        states = {cache.user_by_name(u).state for u in exp.user_names()}
        states |= {cache.group_by_name(g).state for g in exp.group_names()}
        return states
    finally:
        cache.close()


@dataclass
class StoreReport:
    users: int = 0
    groups: int = 0
    initgr: int = 0
    index_entries: int = 0

    @property
    def records(self) -> int:
        return self.users + self.groups + self.initgr + self.index_entries


def verify_entry_store(db_dir: Path | str, domain: str = DOMAIN) -> StoreReport:
    """Open the entry store read-only and check every record: users, groups and
    initgroups lists decode; every uid, gid and DN index entry points at an existing
    record with that id or DN, and every record has its index entries. Raises
    AssertionError naming the first bad record."""
    entry_path, _ = cache_paths(str(db_dir), domain)
    store = Store(entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE)
    out = StoreReport()
    try:
        with store.read() as txn:
            t = store.tables
            users = {bytes(k): rec.decode_user(v) for k, v in txn.cursor(db=t["users"])}
            groups = {bytes(k): rec.decode_group(v) for k, v in txn.cursor(db=t["groups"])}
            for k, v in txn.cursor(db=t["initgr"]):
                gids, _names = rec.decode_initgr(v)
                assert bytes(k) in users, f"initgroups list of {bytes(k)!r} without its user"
                assert len(gids) % 4 == 0
                out.initgr += 1
            uid_index = {struct.unpack(">I", k)[0]: bytes(v) for k, v in txn.cursor(db=t["uid"])}
            gid_index = {struct.unpack(">I", k)[0]: bytes(v) for k, v in txn.cursor(db=t["gid"])}
            dn_index = {bytes(k): bytes(v) for k, v in txn.cursor(db=t["dn"])}
    finally:
        store.close()
    for key, u in users.items():
        assert uid_index.get(u.uid) == key, f"user {u.name}: uid index {uid_index.get(u.uid)!r}"
        if u.dn:
            assert dn_index.get(normalize_dn(u.dn).encode()) == b"u" + key, f"user {u.name}: dn"
    for key, g in groups.items():
        assert gid_index.get(g.gid) == key, f"group {g.name}: gid index {gid_index.get(g.gid)!r}"
        if g.dn:
            assert dn_index.get(normalize_dn(g.dn).encode()) == b"g" + key, f"group {g.name}: dn"
    for uid, key in uid_index.items():
        assert key in users and users[key].uid == uid, f"uid {uid} -> {key!r}: no such user"
    for gid, key in gid_index.items():
        assert key in groups and groups[key].gid == gid, f"gid {gid} -> {key!r}: no such group"
    for dnkey, target in dn_index.items():
        table = users if target[:1] == b"u" else groups
        assert target[:1] in (b"u", b"g") and target[1:] in table, f"dn {dnkey!r} -> {target!r}"
    out.users, out.groups = len(users), len(groups)
    out.index_entries = len(uid_index) + len(gid_index) + len(dn_index)
    return out


# -- helpers: raw NSS socket -----------------------------------------------------------


def nss_socket(d: CachedDaemon, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(str(d.pipes_dir / "nss"))
            return sock
        except BlockingIOError:
            # EAGAIN: the listen backlog (128, as SSSD's) is full until the responder
            # accepts; a burst of connections from one test meets that.
            if time.monotonic() > deadline:
                sock.close()
                raise
            time.sleep(0.001)
        except BaseException:
            sock.close()
            raise


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes, or fewer if the peer closed first."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def read_reply(sock: socket.socket) -> tuple[int, int, bytes] | None:
    """(cmd, status, body) of the next reply, or None when the server closed."""
    head = recv_exact(sock, 16)
    if len(head) < 16:
        return None
    length, cmd, status, _ = struct.unpack("=4I", head)
    body = recv_exact(sock, length - 16)
    assert len(body) == length - 16, "reply cut short"
    return cmd, status, body


def ask(sock: socket.socket, cmd: int, body: bytes) -> tuple[int, int, bytes] | None:
    sock.sendall(p.encode_request(cmd, body))
    return read_reply(sock)


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def getpwnam_ok(sock: socket.socket, name: str) -> bool:
    reply = ask(sock, p.Command.GETPWNAM, p.name_body(name))
    if reply is None or reply[1] != 0:
        return False
    users = p.decode_passwd(reply[2])
    return len(users) == 1 and users[0].name == name


def getgrnam_seconds(d: CachedDaemon, name: str, count: int, timeout: float) -> list[float]:
    """How long each of ``count`` getgrnam ``name`` requests took on one raw connection
    (printed by the tests that measure a warm answer); each must be answered found."""
    times = []
    with nss_socket(d, timeout=timeout) as sock:
        for _ in range(count):
            start = time.perf_counter()
            sock.sendall(p.encode_request(p.Command.GETGRNAM, p.name_body(name)))
            reply = read_reply(sock)
            times.append(time.perf_counter() - start)
            assert reply is not None and reply[1] == 0, (name, reply)
    return times
