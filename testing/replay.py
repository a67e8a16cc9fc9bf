"""One cold initgroups of bigroupuser (or, ``--group NAME``, a group lookup) recorded
from slapd and replayed with no server: the backend's work alone, byte for byte the
same every time, so valgrind's instruction count compares two checkouts on a loaded
machine where CPU seconds do not (±1 % run to run, where the CPU seconds of the same
lookup moved by a fifth under other people's tests).

    python -m testing.replay record FILE WORKDIR [--group NAME]
    python -m testing.replay replay FILE WORKDIR [--rounds N]
    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        python -m testing.replay replay FILE WORKDIR --rounds N      # "I refs"

``record`` runs slapd with the generated directory and keeps what the socket sent and
received during the second of two lookups (the first warms slapd). ``replay`` answers
each request from the recording: a request that differs by one byte stops it, and so
does an answer that is not the recorded one, so the replay proves the checkout still
sends the same searches and computes the same answer. Round 0 is a fresh process's
lookup (module-level memos empty, like a just-started backend's); later rounds have
them filled: the instructions of rounds 0..N minus those of 0..N-1 isolate one. A
recording holds the connection's message ids, so it replays only with the
checkout whose requests it recorded (or one sending the same).

The floor under a cold lookup (:func:`floor_once`) sends a recording's requests again
to the live server, byte for byte, and reads the answers with no client work at all:
no client answers a cold lookup faster than the server sends what it needs. Each
request goes out once as many answer bytes have arrived as had when cached sent it (a
nesting level's searches wait for the level above, as cached's do), and the clock
stops at the last byte. The answers must come to the recorded number of bytes, so a
directory or a checkout that searches differently stops it. ``perf.ab --b floor``
alternates it with cached's cold lookup end to end; tests/bench/test_bench_readpath.py
times it beside the backend's own cold group lookup.

What each request costs the server (:class:`RecordingProxy`, :func:`recorded_requests`,
:func:`request_cpu`; ``perf.fleet --per-request``): a daemon's requests recorded
through a loopback proxy, each sent again many times on a connection of its own,
the server's CPU per request from ``/proc``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import selectors
import socket
import sys
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cached.cache.records import split_members
from cached.counters import Counters
from cached.ldap.ber import header
from cached.ldap.connection import Connection
from cached.ldap.controls import PAGED_RESULTS_OID, paged_control, paged_cookie
from cached.ldap.framing import MessageBuffer
from cached.ldap.provider import LdapProvider, Outcome
from cached.ldap.wire import (
    SEARCH_REQUEST,
    SEARCH_RESULT_DONE,
    SEARCH_RESULT_ENTRY,
    decode_response,
    encode_search,
)
from testing import procstat
from testing.backend import make_backend, make_domain

BIG = "bigroupuser"
Log = list[tuple[str, bytes]]


class _Recording:
    """The connection's socket, every byte received and sent kept in order."""

    def __init__(self, sock: Any, log: Log) -> None:
        self._s, self._log = sock, log

    def recv_into(self, buf: Any) -> int:
        n: int = self._s.recv_into(buf)
        self._log.append(("r", bytes(buf[:n])))
        return n

    def sendall(self, data: bytes) -> None:
        self._log.append(("s", bytes(data)))
        self._s.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)


class _Playback:
    """A socket that answers from a recording and insists on the recorded requests."""

    family = socket.AF_UNIX  # no TCP options for Connection to set

    def __init__(self, log: Log) -> None:
        self._log, self.at = log, 0

    def recv_into(self, buf: Any) -> int:
        kind, data = self._log[self.at]
        if kind != "r":
            raise RuntimeError(f"step {self.at}: a receive where the recording sent")
        self.at += 1
        buf[: len(data)] = data
        return len(data)

    def sendall(self, data: bytes) -> None:
        kind, want = self._log[self.at]
        if kind != "s" or bytes(data) != want:
            raise RuntimeError(f"step {self.at}: not the recorded request: {bytes(data)[:200]!r}")
        self.at += 1

    def settimeout(self, _t: float | None) -> None:
        pass

    def close(self) -> None:
        pass


def _lookup(p: LdapProvider, group: str | None) -> list[int] | list[str]:
    """Run the lookup; its answer as the cache holds it."""
    if group:
        assert p.group_by_name(group).outcome is Outcome.FOUND
        view = p.cache.group_by_name(group).value
        assert view is not None
        return sorted(split_members(view.members))
    assert p.initgroups(BIG).outcome is Outcome.FOUND
    ig = p.cache.initgroups(BIG).value
    assert ig is not None
    return sorted(array("I", ig.gids))


def record(out: Path, work: Path, group: str | None) -> None:
    from testing.gendir import BIGROUPUSER, generate
    from testing.slapd import Slapd

    gen = generate(BIGROUPUSER.with_schema("rfc2307bis"), work / "gen")
    exp = gen.expected()
    with Slapd(work / "slapd", gen.ldif, exp.base_dn, deref=True) as s:
        recording = record_lookup(s.uri, s.base_dn, work, group)
    with open(out, "wb") as f:
        pickle.dump(recording, f)


def record_lookup(uri: str, base: str, work: Path, group: str | None) -> dict[str, Any]:
    """The second of two cold lookups against the server at ``uri``, recorded (the
    first warms the server); caches in ``work``. :func:`floor_once` sends its requests
    again."""
    cfg = make_domain([uri], base)
    for i in range(2):
        p, cache, _ = make_backend(work / f"round{i}", cfg, Counters())
        p.client.connect()
        assert p.client.conn is not None
        log: Log = []
        start = p.client.conn._next_id
        recording: Any = _Recording(p.client.conn.socket, log)
        p.client.conn.socket = recording
        answer = _lookup(p, group)
        info = p.client.info
        p.client.close()
        cache.close()
    return {"uri": uri, "base": base, "info": info, "start": start,
            "log": log, "answer": answer, "group": group}  # fmt: skip


# An anonymous simple bind, message ID 1 (RFC 4511 §4.2): 30 0c, messageID 1,
# [APPLICATION 0] { version 3, name "", simple [0] "" }. The recorded requests carry
# ldap3's later message IDs.
BIND = bytes.fromhex("300c020101600702010304008000")
TIMEOUT = 120.0  # a recording slapd would answer differently waits this long, then fails


class FloorError(RuntimeError):
    pass


def gated_sends(log: Log) -> tuple[list[tuple[int, bytes]], int]:
    """Each recorded request with the answer bytes received before it was sent, and
    the answer bytes in all."""
    sends: list[tuple[int, bytes]] = []
    got = 0
    for kind, data in log:
        if kind == "s":
            if not _is_unbind(data):  # the recording's close: no answer comes
                sends.append((got, data))
        else:
            got += len(data)
    return sends, got


def _is_unbind(request: bytes) -> bool:
    """An UnbindRequest ([APPLICATION 2], RFC 4511 §4.3) after the message ID."""
    head = 2 if request[1] < 0x80 else 2 + (request[1] & 0x7F)
    return request[head + 2 + request[head + 1]] == 0x42


def _message_end(buf: bytearray) -> int:
    """The length of the first whole BER message in ``buf``, 0 if not all there."""
    if len(buf) < 2:
        return 0
    first = buf[1]
    if first < 0x80:
        head, size = 2, first
    else:
        n = first & 0x7F
        if len(buf) < 2 + n:
            return 0
        head, size = 2 + n, int.from_bytes(buf[2 : 2 + n], "big")
    return head + size if len(buf) >= head + size else 0


def floor_once(
    port: int, sends: list[tuple[int, bytes]], total: int, timeout: float = TIMEOUT
) -> float:
    """Seconds from the first recorded request to the last answer byte, on a
    connection opened and bound before."""
    try:
        return _floor_once(port, sends, total, timeout)
    except TimeoutError:
        raise FloorError(
            f"no answer byte in {timeout:g} s: fewer answer bytes than the recording's {total}"
        ) from None


def _floor_once(port: int, sends: list[tuple[int, bytes]], total: int, timeout: float) -> float:
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(BIND)
        reply = bytearray()
        while not (end := _message_end(reply)):
            n = s.recv_into(view)
            if not n:
                raise FloorError("the server closed the connection during the bind")
            reply += view[:n]
        if end != len(reply) or reply[end - 7 : end - 4] != b"\x0a\x01\x00":
            raise FloorError(f"the anonymous bind failed: {bytes(reply)!r}")
        received, i = 0, 0
        start = time.perf_counter()
        while True:
            while i < len(sends) and sends[i][0] <= received:
                s.sendall(sends[i][1])
                i += 1
            if received >= total:
                break
            n = s.recv_into(view)
            if not n:
                raise FloorError(f"the server closed the connection after {received} bytes")
            received += n
    elapsed = time.perf_counter() - start
    if received != total:
        raise FloorError(f"{received} answer bytes where the recording has {total}")
    return elapsed


def replay(src: Path, work: Path, rounds: int) -> None:
    with open(src, "rb") as f:
        d = pickle.load(f)
    cfg = make_domain([d["uri"]], d["base"])
    for i in range(rounds):
        p, cache, _ = make_backend(work / f"play{i}", cfg, Counters())
        playback = _Playback(d["log"])
        sock: Any = playback
        conn = Connection(sock, d["uri"])
        conn._next_id = d["start"]
        p.client.conn, p.client.info = conn, d["info"]
        p.client.connected_at = p.client.clock()
        t0 = time.process_time()
        answer = _lookup(p, d["group"])
        cpu = time.process_time() - t0
        if answer != d["answer"]:
            raise RuntimeError("not the recorded answer")
        if playback.at < len(d["log"]) - 1:
            raise RuntimeError(f"stopped at step {playback.at} of {len(d['log'])}")
        print(f"round {i}: cpu {cpu:.3f} s", file=sys.stderr)
        p.client.conn = None
        cache.close()


# -- what each request costs the server ------------------------------------------------
# perf.fleet --per-request: a daemon's requests recorded through a proxy, each sent
# again many times on a connection of its own, the server's CPU per request from /proc.

class RecordingProxy:
    """A loopback TCP proxy keeping each connection's bytes, both ways, in order."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[tuple[bytearray, bytearray]] = []  # (client->server, server->client)
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop:
            try:
                c, _ = self.listener.accept()
            except TimeoutError:
                continue
            s = socket.create_connection(("127.0.0.1", self.target))
            up, down = bytearray(), bytearray()
            self.conns.append((up, down))
            threading.Thread(target=self._pump, args=(c, s, up, down), daemon=True).start()

    @staticmethod
    def _pump(c: socket.socket, s: socket.socket, up: bytearray, down: bytearray) -> None:
        sel = selectors.DefaultSelector()
        sel.register(c, selectors.EVENT_READ, (s, up))
        sel.register(s, selectors.EVENT_READ, (c, down))
        try:
            while True:
                for key, _ in sel.select():
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    dst, log = key.data
                    data = src.recv(1 << 16)
                    if not data:
                        return
                    log += data
                    dst.sendall(data)
        except OSError:
            return
        finally:
            c.close()
            s.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.listener.close()


@dataclass
class Request:
    """One recorded SearchRequest, decoded enough to send again."""

    conn: int
    message_id: int
    base: str
    scope: int
    size_limit: int
    filt: bytes  # the encoded filter, as sent
    attrs: list[str]
    controls: list[tuple[str, bool, bytes | None]]
    entries: int = 0  # the recorded answer
    values: int = 0
    answer_bytes: int = 0
    follows: bool = False  # a later page of a paged search (its cookie set)
    pages: int = 1
    cpu: list[float] = field(default_factory=list)

    def paged_size(self) -> int | None:
        for oid, _c, value in self.controls:
            if oid == PAGED_RESULTS_OID and value:
                _t, pos, end = header(value, 0, len(value))
                _t, a, b = header(value, pos, end)
                return int.from_bytes(value[a:b], "big")
        return None

    def encode(self, message_id: int, cookie: bytes | None = None) -> bytes:
        controls = [
            paged_control(self.paged_size() or 0, cookie) if oid == PAGED_RESULTS_OID else
            (oid, crit, value) for oid, crit, value in self.controls
        ]  # fmt: skip
        return encode_search(message_id, self.base, self.scope, self.filt, self.attrs,
                             size_limit=self.size_limit, controls=controls)  # fmt: skip


def _messages(stream: bytes) -> list[bytes]:
    return MessageBuffer(limit=1 << 30).feed(stream)


def _string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    _t, a, b = header(buf, pos, end)
    return buf[a:b].decode("utf-8", "replace"), b


def _int(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    _t, a, b = header(buf, pos, end)
    return int.from_bytes(buf[a:b], "big", signed=True), b


def decode_request(conn: int, msg: bytes) -> Request | None:
    """The SearchRequest in ``msg`` (RFC 4511 §4.5.1), or None for another operation."""
    _t, pos, end = header(msg, 0, len(msg))
    mid, pos = _int(msg, pos, end)
    tag, opos, oend = header(msg, pos, end)
    if tag != SEARCH_REQUEST:
        return None
    base, p = _string(msg, opos, oend)
    scope, p = _int(msg, p, oend)
    _deref, p = _int(msg, p, oend)
    size, p = _int(msg, p, oend)
    _time, p = _int(msg, p, oend)
    _t, _a, p = header(msg, p, oend)  # typesOnly
    _t, _a, fend = header(msg, p, oend)
    filt, p = msg[p:fend], fend
    _t, a, aend = header(msg, p, oend)
    attrs = []
    while a < aend:
        s, a = _string(msg, a, aend)
        attrs.append(s)
    controls: list[tuple[str, bool, bytes | None]] = []
    if oend < end:  # [0] Controls
        _t, c, cend = header(msg, oend, end)
        while c < cend:
            _t, q, qend = header(msg, c, cend)
            oid, q = _string(msg, q, qend)
            crit, value = False, None
            while q < qend:
                t, va, vb = header(msg, q, qend)
                if t == 0x01:
                    crit = msg[va:vb] != b"\x00"
                else:
                    value = msg[va:vb]
                q = vb
            controls.append((oid, crit, value))
            c = qend
    if attrs == ["1.1"]:
        attrs = []
    return Request(conn, mid, base, scope, size, filt, attrs, controls)


def _entry_values(msg: bytes) -> int:
    """Attribute values in a SearchResultEntry (RFC 4511 §4.5.2)."""
    _t, pos, end = header(msg, 0, len(msg))
    _t, _a, pos = header(msg, pos, end)  # messageID
    _t, opos, oend = header(msg, pos, end)
    _t, _a, p = header(msg, opos, oend)  # objectName
    _t, p, lend = header(msg, p, oend)  # attributes
    n = 0
    while p < lend:
        _t, a, pend = header(msg, p, lend)
        _t, _x, a = header(msg, a, pend)  # type
        _t, v, vend = header(msg, a, pend)  # vals SET
        while v < vend:
            _t, _x, v = header(msg, v, vend)
            n += 1
        p = pend
    return n


def recorded_requests(proxy: RecordingProxy) -> list[Request]:
    """Every search request of the recording, with its recorded answer's size."""
    out: list[Request] = []
    for i, (up, down) in enumerate(proxy.conns):
        by_id: dict[int, Request] = {}
        for msg in _messages(bytes(up)):
            r = decode_request(i, msg)
            if r is not None:
                ps = r.paged_size()
                cookie = next((v for o, _c, v in r.controls if o == PAGED_RESULTS_OID), None)
                r.follows = ps is not None and bool(paged_cookie(cookie))
                out.append(r)
                by_id[r.message_id] = r
        for msg in _messages(bytes(down)):
            _t, pos, end = header(msg, 0, len(msg))
            mid, pos = _int(msg, pos, end)
            r2 = by_id.get(mid)
            if r2 is None:
                continue
            r2.answer_bytes += len(msg)
            if msg[pos] == SEARCH_RESULT_ENTRY:
                r2.entries += 1
                r2.values += _entry_values(msg)
    return out


def _read_done(s: socket.socket, buf: MessageBuffer) -> bytes | None:
    """Read to the SearchResultDone; its paged cookie (None: not paged)."""
    while True:
        data = s.recv(1 << 20)
        if not data:
            raise RuntimeError("slapd closed the connection")
        for msg in buf.feed(data):
            _t, pos, end = header(msg, 0, len(msg))
            _mid, pos = _int(msg, pos, end)
            if msg[pos] == SEARCH_RESULT_DONE:
                res = decode_response(msg)
                if res.code not in (0, 4):  # success, sizeLimitExceeded
                    raise RuntimeError(f"search failed with result {res.code}")
                v = res.controls.get(PAGED_RESULTS_OID.encode())
                return paged_cookie(v) if PAGED_RESULTS_OID.encode() in res.controls else None


def request_cpu(port: int, slapd_pid: int, r: Request, reps: int) -> float:
    """slapd's CPU seconds per run of ``r`` (a paged search to its last page)."""
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        s.sendall(BIND)
        s.recv(1 << 16)
        buf = MessageBuffer(limit=1 << 30)
        mid = 2

        def once() -> None:
            nonlocal mid
            cookie: bytes | None = None
            pages = 0
            while True:
                s.sendall(r.encode(mid, cookie))
                mid += 1
                pages += 1
                got = _read_done(s, buf)
                if not got:
                    break
                cookie = got
            r.pages = pages

        once()  # warm: the entry cache holds what the run read
        before = procstat.cpu_seconds({"s": slapd_pid})["s"]
        for _ in range(reps):
            once()
        return (procstat.cpu_seconds({"s": slapd_pid})["s"] - before) / reps


def describe_filter(f: bytes) -> str:
    """A short text of an encoded filter: runs of one kind of assertion counted."""
    out: list[str] = []

    def walk(pos: int, end: int) -> str:
        tag = f[pos]
        _t, a, b = header(f, pos, end)
        if tag in (0xA0, 0xA1):  # and, or
            parts: list[str] = []
            while a < b:
                _t2, _x, nxt = header(f, a, b)
                parts.append(walk(a, nxt))
                a = nxt
            runs: list[list[object]] = []
            for p in parts:
                key = p.split("=", 1)[0] + "=…)" if "=" in p and p.count("(") == 1 else p
                if runs and runs[-1][0] == key:
                    runs[-1][1] = int(str(runs[-1][1])) + 1
                else:
                    runs.append([key, 1, p])
            body = "".join(str(k[2]) if k[1] == 1 else f"{k[0]}×{k[1]}" for k in runs)
            return f"({'&' if tag == 0xA0 else '|'}{body})"
        if tag == 0xA2:
            return f"(!{walk(a, b)})"
        if tag == 0x87:
            return f"({f[a:b].decode()}=*)"
        if tag in (0xA3, 0xA5, 0xA6, 0xA8):  # equality, >=, <=, approx
            attr, at = _string(f, a, b)
            val, _ = _string(f, at, b)
            op = {0xA3: "=", 0xA5: ">=", 0xA6: "<=", 0xA8: "~="}[tag]
            return f"({attr}{op}{val if len(val) < 40 else val[:37] + '…'})"
        if tag == 0xA4:
            attr, _ = _string(f, a, b)
            return f"({attr}=…*…)"
        return f"(tag {tag:#x})"

    out.append(walk(0, len(f)))
    return out[0]


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m testing.replay", description=__doc__.splitlines()[0]
    )
    ap.add_argument("mode", choices=("record", "replay"))
    ap.add_argument("file", type=Path, help="the recording")
    ap.add_argument("workdir", type=Path, help="a directory for slapd and the caches")
    ap.add_argument("--group", help="record a lookup of this group instead of initgroups")
    ap.add_argument("--rounds", type=int, default=1, help="replays in this process")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.mode == "record":
        record(args.file, args.workdir, args.group)
    else:
        replay(args.file, args.workdir, args.rounds)


if __name__ == "__main__":
    main()
