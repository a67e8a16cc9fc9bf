"""A hostile local user of the NSS socket, for the issue-17 tests and the soak.

Runs as uid 65534 (``setpriv``) inside the test's mount namespace, where
``/var/lib/sss/pipes/nss`` is the daemon's socket, with nothing but the standard
library (it is run by ``/usr/bin/python3 -c``, outside the venv): ``attack(mode, ...)``
is called with the arguments on the command line. It prints one line of JSON when it
has set up what it holds (``ready``) and another when it ends, and keeps what it holds
until its stdin closes.

Modes:
* ``hold N``: open N connections; report how many the server kept (answered
  GET_VERSION) and how many it closed at once.
* ``trickle SECONDS``: one connection sending a request one byte every 2 s; report
  after how many seconds the server closed it (or that it never did).
* ``unread N NAME REPEAT``: N connections each asking for group NAME REPEAT times and
  never reading.
* ``flood N PREFIX``: N connections, each asking getpwnam of a new name (``PREFIX<i>``)
  as soon as the previous answer came, until stdin closes; report the count.
* ``loop N NAME``: N connections asking getgrnam NAME in a loop, reading every reply.
* ``ask NAME``: one getpwnam NAME; the reply is read when stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testing.daemon import CachedDaemon

SOURCE = r"""
import json, os, select, socket, struct, sys, threading, time

PATH = "/var/lib/sss/pipes/nss"
GETPWNAM, GETGRNAM, GET_VERSION = 0x0011, 0x0021, 0x0001


def req(cmd, body):
    return struct.pack("=4I", 16 + len(body), cmd, 0, 0) + body


def name(n):
    return n.encode() + b"\0"


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    while True:
        try:
            s.connect(PATH)
            return s
        except BlockingIOError:
            time.sleep(0.001)


def recv_exact(s, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if not k:
            return None
        got += k
    return buf


def reply(s):
    head = recv_exact(s, 16)
    if head is None:
        return None
    length, cmd, status, _ = struct.unpack("=4I", head)
    body = recv_exact(s, length - 16)
    return status if body is not None else None


def say(**kw):
    print(json.dumps(kw), flush=True)


def wait_stdin():
    sys.stdin.read()


def attack(mode, *args):
    socks = []
    if mode == "hold":
        kept = closed = 0
        for _ in range(int(args[0])):
            try:
                s = connect()
                s.sendall(req(GET_VERSION, struct.pack("=I", 1)))
                if reply(s) is None:
                    closed += 1
                    s.close()
                    continue
                kept += 1
                socks.append(s)
            except OSError:
                closed += 1
        say(ready=True, kept=kept, closed=closed)
        wait_stdin()
    elif mode == "trickle":
        s = connect()
        data = req(GETPWNAM, b"t" * 1000 + b"\0")
        start = time.monotonic()
        end = start + float(args[0])
        i = 0
        say(ready=True)
        closed_after = None
        while time.monotonic() < end and i < len(data):
            try:
                s.sendall(data[i:i + 1])
                i += 1
                r, _, _ = select.select([s], [], [], 2.0)
                if r and s.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except OSError:
                closed_after = time.monotonic() - start
                break
        say(closed_after=closed_after, sent=i)
    elif mode == "unread":
        n, group, repeat = int(args[0]), args[1], int(args[2])
        sent = 0
        for _ in range(n):
            s = connect()
            s.setblocking(False)
            try:
                s.send(req(GETGRNAM, name(group)) * repeat)
                sent += 1
            except OSError:
                pass
            socks.append(s)
        say(ready=True, connections=sent)
        wait_stdin()
    elif mode in ("flood", "loop"):
        n = int(args[0])
        stop = threading.Event()
        counts = [0] * n

        def run(k):
            try:
                s = connect()
                i = 0
                while not stop.is_set():
                    if mode == "flood":
                        s.sendall(req(GETPWNAM, name(f"{args[1]}{k}x{i}")))
                    else:
                        s.sendall(req(GETGRNAM, name(args[1])))
                    if reply(s) is None:
                        s.close()
                        s = connect()
                    i += 1
                    counts[k] = i
            except OSError:
                pass

        threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(n)]
        for t in threads:
            t.start()
        say(ready=True)
        wait_stdin()
        stop.set()
        say(requests=sum(counts))
    elif mode == "ask":
        s = connect()
        s.sendall(req(GETPWNAM, name(args[0])))
        say(ready=True)
        wait_stdin()
        say(status=reply(s))
    else:
        raise SystemExit(f"unknown mode {mode}")


attack(*sys.argv[1:])
"""

PYTHON = "/usr/bin/python3"  # the system one: 65534 cannot reach the venv under /root


def argv(mode: str, *args: object, uid: int = 65534) -> list[str]:
    """The command line of an attacker running as ``uid`` (run it in the namespace)."""
    who = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return ["setpriv", *who, PYTHON, "-c", SOURCE, mode, *(str(a) for a in args)]


@contextlib.contextmanager
def attack(d: CachedDaemon, mode: str, *args: object, uid: int = 65534
           ) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:  # fmt: skip
    """Run an attacker as ``uid`` in the namespace; yields it and its ``ready`` line."""
    proc = d.start_nss(argv(mode, *args, uid=uid))
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"attacker {mode} did not start: {err}")
        yield proc, json.loads(line)
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Close the attacker's stdin and read its last line."""
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    out = proc.stdout.read().strip().splitlines()
    return dict(json.loads(out[-1])) if out else {}
