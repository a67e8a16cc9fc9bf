"""The live-socket fuzzer of ``cached serve``'s NSS socket: random and malformed
packets in conversations, checked against the sans-IO codec and the generated
directory's answers. Used by tests/integration/test_fuzz_socket.py (5,000 packets) and
the soak (100,000).

Each *conversation* is one connection: a few packets (valid requests, framed requests
with bad bodies, bad framing, random header fields, random bytes, truncated packets)
sent whole or in random fragments, then one of three endings: shut for writing and
read every reply, close without reading, or close in the middle of a packet.

The oracle is the sans-IO codec itself plus the generated directory's answers: the
byte stream of a conversation, fed to a :class:`protocol.ServerConnection`, says which
requests the server must answer before it closes (a framing error closes the
connection after the requests before it were answered, whatever the fragmentation);
each answer is checked against the directory's expected answers.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cached.nss import protocol as p
from testing.checks import expected_answers, read_reply, responder_status, served_answers, wait_for
from testing.daemon import CachedDaemon
from testing.gendir import Expected

SEED = int(os.environ.get("CACHED_FUZZ_SEED", "2307"))
PACKETS = 5000
THREADS = 4
# Growth of the responder's VmRSS allowed across a fuzz run, after a warm-up. What a
# connection may hold is bounded by design: one request (<= 1 KiB, MAX_REQUEST_SIZE),
# one 4 KiB read, the reply being written; a few connections are open at a time. The
# negative cache holds each unknown name for 15 s (its size is that of the name pool
# below). So what remains is allocator noise (pymalloc arenas, asyncio buffers); 16 MiB
# is far above the noise we measured (< 1 MiB) and far below what a leak of even a few
# hundred bytes per packet would add over 100,000 packets (the soak run).
RSS_BOUND_KIB = 16 * 1024

SERVED = sorted(p.SERVED_COMMANDS)
ALL_COMMANDS = sorted(int(c) for c in p.Command)
NOT_FOUND_BODY = b"\0" * 8


# -- generating conversations -----------------------------------------------------------


class Generator:
    """Packets and conversations from one seeded RNG (one per thread)."""

    def __init__(self, rng: random.Random, exp: Expected, unique_names: float = 0.02) -> None:
        self.rng = rng
        self.unique_names = unique_names
        self.users = sorted(exp.user_names())
        self.groups = sorted(exp.group_names())
        self.uids = [exp.user(u).uid for u in self.users]
        self.gids = [exp.group(g).gid for g in self.groups]
        self.unknown_names = [
            "root", "nobody", "User00001", "USERS", "nosuch", "a", "*", "ü", "名前",
            "x" * 256, "user00001 ", " user00001", "user00001@NODOMAIN", "grp0001,large01",
        ] + [f"fz{rng.randrange(10**6)}" for _ in range(20)]  # fmt: skip
        self.unknown_ids = [0, 1, 999, 9999, 65534, 65535, 99999, 2**31, 2**32 - 1]

    def name(self) -> str:
        r = self.rng.random()
        if r < self.unique_names:  # a new name: one LDAP search, one negative entry
            return "".join(
                chr(self.rng.choice([self.rng.randrange(33, 127), self.rng.randrange(161, 0x2FFF)]))
                for _ in range(self.rng.randrange(1, 40))
            )
        if r < 0.45:
            return self.rng.choice(self.users)
        if r < 0.75:
            return self.rng.choice(self.groups)
        return self.rng.choice(self.unknown_names)

    def ident(self) -> int:
        r = self.rng.random()
        if r < 0.4:
            return self.rng.choice(self.uids)
        if r < 0.8:
            return self.rng.choice(self.gids)
        if r < 0.97:
            return self.rng.choice(self.unknown_ids)
        return self.rng.randrange(2**32)

    def valid(self) -> bytes:
        cmd = self.rng.choice(SERVED)
        if cmd in p.BY_NAME_COMMANDS:
            body = p.name_body(self.name())
        elif cmd in p.BY_ID_COMMANDS:
            body = p.id_body(self.ident())
        elif cmd in p.GETENT_COMMANDS:
            body = p.getent_body()
        elif cmd == p.Command.GET_VERSION:
            body = p.version_body(self.rng.choice([1, 1, 1, 0, 2, 2**32 - 1]))
        else:
            body = b""
        return p.encode_request(cmd, body)

    def bad_body(self) -> bytes:
        rng = self.rng
        cmd = rng.choice(SERVED)
        choice = rng.randrange(7)
        if choice == 0:
            body = self.name().encode()  # no NUL
        elif choice == 1:
            body = b"\0"
        elif choice == 2:
            body = b"user\0x\0"
        elif choice == 3:
            body = rng.choice([b"\xff\xfe\0", b"\xc3\0", b"\xed\xa0\x80\0"])
        elif choice == 4:
            body = b"u" * rng.randrange(257, p.MAX_REQUEST_SIZE - 16) + b"\0"
        elif choice == 5:
            body = rng.randbytes(rng.choice([0, 1, 2, 3, 5, 8]))
        else:
            body = rng.randbytes(rng.randrange(0, p.MAX_REQUEST_SIZE - 16))
        return p.encode_request(cmd, body)

    def bad_framing(self) -> bytes:
        rng = self.rng
        kind = rng.randrange(3)
        if kind == 0:
            length = rng.choice([0, 1, 4, 15])
        elif kind == 1:
            length = rng.choice([p.MAX_REQUEST_SIZE + 1, 4096, 65536, 2**31, 2**32 - 1])
        else:
            length = rng.randrange(16, 64)
        cmd = rng.choice(ALL_COMMANDS) if kind < 2 else rng.choice(
            [c for c in [*ALL_COMMANDS, 0, 0x7777, 2**32 - 1] if c not in p.SERVED_COMMANDS]
        )  # fmt: skip
        tail = rng.randbytes(rng.randrange(0, 64))
        return struct.pack("=4I", length, cmd, 0, 0) + tail

    def random_header_fields(self) -> bytes:
        packet = bytearray(self.valid())
        struct.pack_into("=2I", packet, 8, self.rng.randrange(2**32), self.rng.randrange(2**32))
        return bytes(packet)

    def packet(self) -> tuple[str, bytes]:
        r = self.rng.random()
        if r < 0.40:
            return "valid", self.valid()
        if r < 0.60:
            return "bad-body", self.bad_body()
        if r < 0.72:
            return "bad-framing", self.bad_framing()
        if r < 0.82:
            return "header-fields", self.random_header_fields()
        if r < 0.91:
            return "random-bytes", self.rng.randbytes(self.rng.randrange(1, 48))
        packet = self.valid()
        return "truncated", packet[: self.rng.randrange(1, len(packet))]

    def conversation(self) -> Conversation:
        rng = self.rng
        packets = [self.packet() for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5, 8]))]
        stream = b"".join(data for _, data in packets)
        ending = rng.choices(["read-all", "close", "close-mid-packet"], [70, 15, 15])[0]
        if ending == "close-mid-packet" and len(stream) > 1:
            stream = stream[: rng.randrange(1, len(stream))]
        cuts: list[int] = []
        if rng.random() < 0.5 and len(stream) > 1:
            cuts = sorted(
                rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randrange(1, 8)))
            )
        return Conversation([kind for kind, _ in packets], stream, cuts, ending)


@dataclass
class Conversation:
    kinds: list[str]
    stream: bytes
    cuts: list[int]  # fragment boundaries
    ending: str

    def fragments(self) -> list[bytes]:
        bounds = [0, *self.cuts, len(self.stream)]
        return [self.stream[a:b] for a, b in itertools.pairwise(bounds)]


# -- the oracle --------------------------------------------------------------------------


def expected_requests(stream: bytes) -> tuple[list[p.Request], bool]:
    """What the server must answer for ``stream``, and whether it must close because
    of a framing error (else it closes at our end of stream)."""
    conn = p.ServerConnection()
    conn.receive_data(stream)
    out: list[p.Request] = []
    while True:
        try:
            req = conn.next_request()
        except p.ProtocolError:
            return out, True
        if isinstance(req, p.NeedData):
            return out, False
        out.append(req)


class Oracle:
    def __init__(self, exp: Expected) -> None:
        self.exp = exp
        self.users = {u: exp.user(u) for u in exp.user_names() if u != "root"}
        self.by_uid = {u.uid: u for u in self.users.values()}
        self.groups = {g: exp.group(g) for g in exp.group_names() if g != "root"}
        self.by_gid = {g.gid: g for g in self.groups.values()}

    def check(self, req: p.Request, reply: tuple[int, int, bytes]) -> str:
        """'' when ``reply`` is the right answer to ``req``, else what is wrong."""
        cmd, status, body = reply
        if cmd != req.cmd:
            return f"reply to {p.command_name(req.cmd)} has command {p.command_name(cmd)}"
        if isinstance(req, p.BadRequest):
            ok = (status, body) == (p.EINVAL, b"")
        elif isinstance(req, p.GetVersion):
            ok = status == 0 and p.decode_version(body) == 1
        elif isinstance(req, p.SetEnt | p.EndEnt):
            ok = (status, body) == (0, b"")
        elif isinstance(req, p.GetEnt):
            ok = (status, body) == (0, NOT_FOUND_BODY)  # enumerate = false
        elif status != 0:
            ok = False
        elif isinstance(req, p.ById):
            ok = self._by_id(req, body)
        else:
            assert isinstance(req, p.ByName)
            ok = self._by_name(req, body)
        return "" if ok else f"{req!r}: got status {status}, body {body[:80]!r}"

    def _user(self, body: bytes, want: Any) -> bool:
        if want is None:
            return body == NOT_FOUND_BODY
        got = p.decode_passwd(body)
        return (
            len(got) == 1
            and got[0].name == want.name
            and (got[0].uid, got[0].gid, got[0].gecos, got[0].home, got[0].shell)
            == (want.uid, want.gid, want.gecos, want.home, want.shell)
        )

    def _group(self, body: bytes, want: Any) -> bool:
        if want is None:
            return body == NOT_FOUND_BODY
        got = p.decode_group(body)
        return (
            len(got) == 1
            and (got[0].name, got[0].gid) == (want.name, want.gid)
            and set(got[0].members) == self.exp.members(want.name, 2)
        )

    def _by_id(self, req: p.ById, body: bytes) -> bool:
        if req.cmd == p.Command.GETPWUID:
            return self._user(body, self.by_uid.get(req.id))
        return self._group(body, self.by_gid.get(req.id))

    def _by_name(self, req: p.ByName, body: bytes) -> bool:
        if req.cmd == p.Command.GETPWNAM:
            return self._user(body, self.users.get(req.name))
        if req.cmd == p.Command.GETGRNAM:
            return self._group(body, self.groups.get(req.name))
        if req.cmd == p.Command.SETNETGRENT:
            return body == NOT_FOUND_BODY  # the generated directories hold no netgroups
        if req.name not in self.users:
            return body == NOT_FOUND_BODY
        # Not the primary gid of a group that does not list the user (docs/compatibility.md §9.5).
        want = self.exp.initgroups_reply(req.name, 2)
        return set(p.decode_initgr(body)) == want


# -- running -----------------------------------------------------------------------------


@dataclass
class FuzzStats:
    packets: int = 0
    conversations: int = 0
    bytes_sent: int = 0
    replies_checked: int = 0
    closed_by_framing_error: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    endings: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def merge(self, other: FuzzStats) -> None:
        self.packets += other.packets
        self.conversations += other.conversations
        self.bytes_sent += other.bytes_sent
        self.replies_checked += other.replies_checked
        self.closed_by_framing_error += other.closed_by_framing_error
        self.kinds.update(other.kinds)
        self.endings.update(other.endings)
        self.problems += other.problems


def converse(path: str, conv: Conversation, oracle: Oracle, stats: FuzzStats) -> None:
    requests, framing_error = expected_requests(conv.stream)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for fragment in conv.fragments():
                sock.sendall(fragment)
                stats.bytes_sent += len(fragment)
        if conv.ending != "read-all":
            return  # close without reading (possibly mid-packet)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        for req in requests:
            reply = read_reply(sock)
            if reply is None:
                stats.problems.append(f"closed before the reply to {req!r}")
                return
            problem = oracle.check(req, reply)
            if problem:
                stats.problems.append(problem)
            stats.replies_checked += 1
        extra = read_reply(sock)
        if extra is not None:
            stats.problems.append(f"unexpected reply {extra[:2]} after {len(requests)} replies")
        stats.closed_by_framing_error += framing_error


def run_fuzz(
    d: CachedDaemon,
    exp: Expected,
    packets: int,
    seed: int,
    threads: int = THREADS,
    unique_names: float = 0.02,
    progress: Callable[[int], None] | None = None,
) -> FuzzStats:
    """``packets`` packets (at least) in conversations from ``threads`` threads."""
    path = str(d.pipes_dir / "nss")
    oracle = Oracle(exp)
    total = FuzzStats()
    lock = threading.Lock()
    sent = [0]

    def worker(i: int) -> None:
        gen = Generator(random.Random(seed * 1000 + i), exp, unique_names)
        stats = FuzzStats()
        try:
            while True:
                with lock:
                    if sent[0] >= packets:
                        break
                conv = gen.conversation()
                converse(path, conv, oracle, stats)
                stats.packets += len(conv.kinds)
                stats.conversations += 1
                stats.kinds.update(conv.kinds)
                stats.endings[conv.ending] += 1
                with lock:
                    before = sent[0]
                    sent[0] += len(conv.kinds)
                if progress is not None and before // 10_000 != sent[0] // 10_000:
                    progress(sent[0])
        except Exception as e:  # reported with the seed by check_daemon_after_fuzz
            stats.problems.append(f"thread {i}: {type(e).__name__}: {e}")
        with lock:
            total.merge(stats)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return total


def check_daemon_after_fuzz(
    d: CachedDaemon, exp: Expected, pids: dict[str, int], stats: FuzzStats, seed: int
) -> None:
    assert not stats.problems, f"seed {seed}: {len(stats.problems)} problems: {stats.problems[:10]}"
    for c in d.control("status")["children"]:
        assert c["running"] and c["restarts"] == 0, c
        assert c["pid"] == pids[c["name"]], c
    wait_for(lambda: responder_status(d)["connections"] == 0, "fuzz connections closed")
    assert served_answers(d, exp) == expected_answers(exp)
    assert "Traceback" not in d.log_text(), d.log_tail()
