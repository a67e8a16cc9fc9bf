"""The floor under a cold lookup: slapd's answers to cached's own requests, read with
no client work at all, beside cached's cold lookup end to end on the same server.

No client can answer a cold lookup faster than the server sends what it needs. This
measures that time for exactly the searches cached makes: a cold lookup is recorded
(perf.replay's ``record_lookup``), then its requests are sent again, byte for byte,
over a fresh connection, timed from the first request (the backend connects at its
start, so neither its connection nor the floor's is counted): each request goes out
once as many answer bytes have arrived as had when cached sent it (a nesting level's
searches wait for the level above, as cached's do), and the clock stops at the last
byte. Nothing is decoded, stored or answered; the answers
must come to the recorded number of bytes, so a directory or a checkout that
searches differently stops it. Each repetition alternates this floor with cached's
cold lookup (perf.coldid's measure: glibc, the real libnss_sss, a fresh ``cached
serve`` with an empty cache), so both see the same load on a shared machine.

    python -m perf.floor [--group large01] [--reps 9] [--memcache]

Prints each repetition, then the medians and cached's median over the floor's.
#15's cold ``getent group large01`` target (30 ms) is read against this floor.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.cnpeople import DATA_DIR, SOCKET_ONLY
from perf.coldid import cold_once
from perf.replay import Log, record_lookup
from testing import gendir, nsenv
from testing.slapd import Slapd

# An anonymous simple bind, message ID 1 (RFC 4511 §4.2): 30 0c, messageID 1,
# [APPLICATION 0] { version 3, name "", simple [0] "" }. The recorded requests carry
# the recorded connection's later message IDs.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.floor", description=__doc__.splitlines()[0])
    ap.add_argument("--group", help="cold `getent group NAME` instead of `id bigroupuser`")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument(
        "--memcache", action="store_true", help="the client reads the memory cache (perf.run's)"
    )
    ap.add_argument("--log-level", default="info", help="cached's log level (default info)")
    args = ap.parse_args(argv)
    reason = nsenv.skip_reason()
    if reason:
        print(f"perf.floor: {reason}", file=sys.stderr)
        return 2
    sc = gendir.BIGROUPUSER
    gen = gendir.generate(sc, DATA_DIR, reuse=True)
    exp = gen.expected()
    cmd = ["getent", "group", args.group] if args.group else ["id", exp.big_user]
    env: dict[str, Any] = {} if args.memcache else SOCKET_ONLY
    floors: list[float] = []
    walls: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="floor-", dir="/tmp") as tmp,
        # perf.run's slapd: the generated directory with the deref overlay.
        Slapd(Path(tmp) / "slapd", gen.ldif, sc.base_dn, deref=True) as server,
    ):
        rec = record_lookup(server.uri, server.base_dn, Path(tmp) / "rec", args.group)
        sends, total = gated_sends(rec["log"])
        print(f"recorded: {len(sends)} requests, {total:,} answer bytes", flush=True)
        for i in range(args.reps):
            floors.append(floor_once(server.port, sends, total))
            row, _ = cold_once(server, Path(tmp) / f"cached-{i}", cmd, env, args.log_level)
            walls.append(row[0])
            print(
                f"rep={i} floor={floors[-1] * 1e3:.1f} ms"
                f" cached={walls[-1] * 1e3:.1f} ms searches={row[2]}",
                flush=True,
            )
    f, w = statistics.median(floors), statistics.median(walls)
    print(
        f"median of {args.reps}: floor {f * 1e3:.1f} ms"
        f" (min {min(floors) * 1e3:.1f}), cached {w * 1e3:.1f} ms"
        f" (min {min(walls) * 1e3:.1f}); cached / floor x{w / f:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
