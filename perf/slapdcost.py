"""What each search of a cold ``id`` costs the directory server: slapd's CPU per
request, with the entries, values and bytes it answers.

    python -m perf.slapdcost [--reps 50] [--user bigroupuser] [--checkout DIR]

Runs slapd with the bigroupuser directory (testing/gendir.py) as perf/fleet.py does,
puts a recording TCP proxy between it and one fresh cached daemon (perf.targets'
DOMAIN_OPTIONS, the fleet's hosts' settings), and runs one cold ``id USER`` through
libnss_sss. Every LDAP request the daemon sent is then sent again to slapd on a
connection of its own, ``--reps`` times one after the other (a paged search whole:
each page's cookie followed), and slapd's CPU (utime + stime of its process from
``/proc``, 10 ms ticks) over those repetitions divided by their number is the
request's cost. The recorded run's own answers give the entries, attribute values
and bytes of each request as the daemon received them. The daemon's connection
binds anonymously, as the replays do.

Run it under the benchmark lock: ``flock /work/perf.lock python -m perf.slapdcost``.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cached.ldap.ber import header
from cached.ldap.controls import PAGED_RESULTS_OID, paged_control, paged_cookie
from cached.ldap.framing import MessageBuffer
from cached.ldap.wire import (
    SEARCH_REQUEST,
    SEARCH_RESULT_DONE,
    SEARCH_RESULT_ENTRY,
    decode_response,
    encode_search,
)
from perf.ab import DATA_DIR
from perf.targets import DOMAIN_OPTIONS
from testing import gendir, procstat
from testing.daemon import CachedDaemon
from testing.replay import BIND
from testing.slapd import Slapd

NO_MEMCACHE = {"SSS_NSS_USE_MEMCACHE": "NO"}


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


def recorded(proxy: RecordingProxy) -> list[Request]:
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


def replay(port: int, slapd_pid: int, r: Request, reps: int) -> float:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m perf.slapdcost", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--reps", type=int, default=50, help="replays of each request")
    ap.add_argument("--user", default="bigroupuser")
    ap.add_argument("--checkout", type=Path, help="the source tree whose cached runs")
    args = ap.parse_args(argv)
    gen = gendir.generate(gendir.BIGROUPUSER, DATA_DIR, reuse=True)
    print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]), flush=True)
    with tempfile.TemporaryDirectory(prefix="coldslapd-cost-", dir="/tmp") as t:
        tmp = Path(t)
        with Slapd(tmp / "slapd", gen.ldif, gendir.BIGROUPUSER.base_dn) as server:
            slapd_pid = server.pid
            assert slapd_pid is not None
            proxy = RecordingProxy(server.port)
            try:
                uri = f"ldap://127.0.0.1:{proxy.port}"
                with CachedDaemon(tmp / "d", [uri], server.base_dn, log_level="info",
                                  checkout=args.checkout, **DOMAIN_OPTIONS) as d:  # fmt: skip
                    c0 = procstat.cpu_seconds({"s": slapd_pid})["s"]
                    p = d.run_nss(["id", args.user], env=NO_MEMCACHE, timeout=600)
                    c1 = procstat.cpu_seconds({"s": slapd_pid})["s"]
                    if p.returncode:
                        raise SystemExit(f"id failed: {p.stderr}")
                    print(f"id {args.user}: {len(p.stdout.split(','))} groups; slapd CPU "
                          f"{(c1 - c0) * 1e3:.0f} ms over the cold lookup (one run)")  # fmt: skip
            finally:
                proxy.close()
            reqs = recorded(proxy)
            total_bytes = sum(len(dn) for _up, dn in proxy.conns)
            print(f"{len(reqs)} search requests on {len(proxy.conns)} connections, "
                  f"{total_bytes:,} bytes from slapd", flush=True)  # fmt: skip
            rows = []
            for r in reqs:
                if r.follows:
                    continue  # a later page: replayed with its first
                pages = [q for q in reqs if q.conn == r.conn and q.follows and q.filt == r.filt
                         and q.base == r.base]  # fmt: skip
                entries = r.entries + sum(q.entries for q in pages)
                values = r.values + sum(q.values for q in pages)
                nbytes = r.answer_bytes + sum(q.answer_bytes for q in pages)
                samples = [replay(server.port, slapd_pid, r, args.reps) for _ in range(3)]
                cpu = statistics.median(samples)
                rows.append((cpu, r, entries, values, nbytes))
                print(f"{cpu * 1e3:7.2f} ms  {entries:6d} entries {values:7d} values "
                      f"{nbytes:10,d} B  pages {r.pages}  sizelimit {r.size_limit}  "
                      f"scope {r.scope} base {r.base!r}\n"
                      f"          attrs {','.join(r.attrs) or '1.1'}  controls "
                      f"{[o for o, _c, _v in r.controls]}\n"
                      f"          filter {describe_filter(r.filt)[:300]}", flush=True)  # fmt: skip
            total = sum(c for c, *_ in rows)
            print(f"sum {total * 1e3:.2f} ms of slapd CPU for {len(rows)} searches "
                  f"({sum(x[4] for x in rows):,} bytes)")  # fmt: skip
    print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
