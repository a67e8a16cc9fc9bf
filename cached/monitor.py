"""The monitor (``cached serve``): starts the processes, watches them, restarts them.

Order: one backend per domain first (each opens, checks and if needed repairs its
cache, reference §3.5), then the NSS responder, which opens the caches read-only.
A child that exits is restarted with a backoff (1 s doubling to 60 s; reset after a
minute of good health), so a crash loop does not spin. SIGTERM stops everything
cleanly (each backend marks its cache clean); SIGHUP is passed on (the responder
drops its negative cache, as SSSD's monitor asks its NSS responder to, §4).
Readiness is reported to systemd with ``sd_notify`` when ``NOTIFY_SOCKET`` is set.

Before it starts anything, and again before each child starts or restarts, the
monitor walks every state directory from ``/`` (``statedir.py``): a child that would
open one another user could change is not started. The pid file is held by a lock,
in a directory only root may write (``PidFile``).

The control socket (``<pipes_dir>/private/control``, mode 0600, root's) answers
``cached status``, ``cached perf`` and ``cached cache``: it gathers counters and
status from the children over their private RPC sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from cached.config import Config
from cached.ipc import aio, framing
from cached.ipc.ops import DropCredentials, Op
from cached.statedir import UnsafeDirectory, check_dir, open_dir

log = logging.getLogger(__name__)

READY_FD_ENV = "CACHED_READY_FD"
# A child that does not report readiness in this long is killed and restarted. A
# backend's start includes verifying its timestamp store (reference §3.5).
READY_TIMEOUT = 60.0
BACKOFF_START, BACKOFF_MAX, HEALTHY_AFTER = 1.0, 60.0, 60.0
STOP_TIMEOUT = 10.0


def sd_notify(message: str) -> bool:
    """Send ``message`` to systemd's notification socket (sd_notify(3)), if any."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        try:
            s.connect(addr)
            s.sendall(message.encode())
        except OSError as e:
            log.warning("sd_notify to %s failed: %s", addr, e)
            return False
    return True


def report_ready() -> None:
    """Called by a child when it serves: one byte on the pipe the monitor gave it."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(int(fd), b"1")
            os.close(int(fd))


def check_state_dirs(config: Config) -> None:
    """Walk every state directory a child opens from ``/`` (``statedir``), creating
    what is missing; ``UnsafeDirectory`` names the first that another user could
    change. Run at start and before each child starts: a child opens them by name.
    (The pid file's directory is the monitor's alone, walked by ``PidFile``.)"""
    d = config.daemon
    for option, path, mode in (
        ("db_dir", d.db_dir, 0o700),
        ("pipes_dir", d.pipes_dir, 0o755),
        ("pipes_dir", framing.private_dir(d.pipes_dir), 0o700),
        ("mc_dir", d.mc_dir, 0o755),
    ):
        check_dir(option, path, create_mode=mode)


@dataclass
class Child:
    name: str  # "backend LDAP", "responder"
    argv: list[str]
    rpc_path: str
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_START
    last_exit: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class Monitor:
    def __init__(self, config: Config, config_path: str, log_level: str) -> None:
        self.config = config
        self.config_path = config_path
        self.stopping = False
        self.started = time.time()
        base = [sys.executable, "-m", "cached", "--log-level", log_level]
        pipes = config.daemon.pipes_dir
        self.backends = [
            Child(
                f"backend {d.name}",
                [*base, "_backend", "-c", config_path, "--domain", d.name],
                framing.backend_socket(pipes, d.name),
            )
            for d in config.domains
        ]
        self.responder = Child(
            "responder", [*base, "_responder", "-c", config_path], framing.responder_socket(pipes)
        )
        self.children = [*self.backends, self.responder]
        self._watchers: list[asyncio.Task[None]] = []

    # -- children ----------------------------------------------------------------------

    async def _spawn(self, child: Child) -> bool:
        """Start ``child`` and wait until it reports ready; False if it did not, or
        was not started because a state directory is no longer safe."""
        child.ready.clear()
        try:
            check_state_dirs(self.config)
        except (UnsafeDirectory, OSError) as e:
            child.proc = None
            child.last_exit = f"not started: {e}"
            log.error("not starting %s: %s; trying again in %.0f s", child.name, e,
                      child.backoff)  # fmt: skip
            return False
        rfd, wfd = os.pipe()
        env = dict(os.environ, **{READY_FD_ENV: str(wfd)})
        env.pop("NOTIFY_SOCKET", None)  # readiness to systemd is the monitor's job
        try:
            child.proc = await asyncio.create_subprocess_exec(
                *child.argv, env=env, pass_fds=(wfd,), stdin=asyncio.subprocess.DEVNULL
            )
        finally:
            os.close(wfd)
        child.started = time.monotonic()
        log.info("started %s (pid %d)", child.name, child.proc.pid)
        loop = asyncio.get_running_loop()
        got: asyncio.Future[bool] = loop.create_future()

        def readable() -> None:
            data = os.read(rfd, 1)
            if not got.done():
                got.set_result(bool(data))

        loop.add_reader(rfd, readable)
        try:
            ok = await asyncio.wait_for(got, READY_TIMEOUT)
        except TimeoutError:
            ok = False
        finally:
            loop.remove_reader(rfd)
            os.close(rfd)
        if ok:
            child.ready.set()
        else:
            log.error("%s did not become ready; killing pid %d", child.name, child.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
        return ok

    async def _watch(self, child: Child) -> None:
        """Restart ``child`` whenever it exits, with a growing delay."""
        while not self.stopping:
            if child.proc is not None:  # else it was not started: try again
                code = await child.proc.wait()
                child.ready.clear()
                if self.stopping:
                    return
                child.last_exit = f"signal {-code}" if code < 0 else f"exit status {code}"
                if time.monotonic() - child.started > HEALTHY_AFTER:
                    child.backoff = BACKOFF_START
                log.error(
                    "%s (pid %d) died: %s; restarting in %.0f s",
                    child.name, child.proc.pid, child.last_exit, child.backoff,
                )  # fmt: skip
            await asyncio.sleep(child.backoff)
            child.backoff = min(child.backoff * 2, BACKOFF_MAX)
            if self.stopping:
                return
            child.restarts += 1
            await self._spawn(child)

    async def start(self) -> None:
        for child in self.backends:
            if not await self._spawn(child):
                raise RuntimeError(f"{child.name} failed to start; see the log above")
        if not await self._spawn(self.responder):
            raise RuntimeError("the responder failed to start; see the log above")
        self._watchers = [asyncio.create_task(self._watch(c)) for c in self.children]

    async def stop(self) -> None:
        self.stopping = True
        for w in self._watchers:
            w.cancel()
        # The responder first, so no lookup waits on a backend that is going away.
        for group in ([self.responder], self.backends):
            procs = [c.proc for c in group if c.proc and c.proc.returncode is None]
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    log.error("pid %d did not stop in %.0f s; killing it", proc.pid, STOP_TIMEOUT)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()

    def signal_children(self, sig: int) -> None:
        for c in self.children:
            if c.proc is not None and c.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(sig)

    # -- control socket ------------------------------------------------------------------

    async def _ask(self, child: Child, op: Op, **args: Any) -> dict[str, Any]:
        client = aio.RpcClient(child.rpc_path)
        try:
            return await client.call(op, timeout=10.0, **args)
        except framing.RpcError as e:
            return {"ok": False, "error": str(e)}
        finally:
            await client.close()

    async def control(self, op: Op, args: dict[str, Any]) -> dict[str, Any]:
        if op is Op.COUNTERS:
            replies = await asyncio.gather(*(self._ask(c, Op.COUNTERS) for c in self.children))
            return {
                "processes": {
                    c.name: r.get("counters", {})
                    for c, r in zip(self.children, replies, strict=True)
                }
            }
        if op is Op.STATUS:
            replies = await asyncio.gather(*(self._ask(c, Op.STATUS) for c in self.children))
            children = []
            for c, r in zip(self.children, replies, strict=True):
                children.append(
                    {
                        "name": c.name,
                        "pid": c.proc.pid if c.proc else None,
                        "running": bool(c.proc and c.proc.returncode is None),
                        "ready": c.ready.is_set(),
                        "uptime": time.monotonic() - c.started if c.started else 0.0,
                        "restarts": c.restarts,
                        "last_exit": c.last_exit,
                        "status": r.get("status"),
                        "error": r.get("error", ""),
                    }
                )
            return {
                "monitor": {"pid": os.getpid(), "started": self.started,
                            "config": self.config_path},
                "children": children,
            }  # fmt: skip
        if op is Op.DROP_CREDENTIALS:
            drop = DropCredentials.parse(args)
            replies = await asyncio.gather(
                *(self._ask(c, op, **drop.args()) for c in self.backends)
            )
            failed = [r.get("error") for r in replies if not r.get("ok", True)]
            if failed:
                raise RuntimeError("; ".join(str(e) for e in failed))
            return {"dropped": sum(int(r.get("dropped") or 0) for r in replies)}
        if op is Op.INVALIDATED:
            reply = await self._ask(self.responder, op)
            if not reply.get("ok", True):
                raise RuntimeError(reply.get("error"))
            return reply
        raise ValueError(f"the control socket does not answer {op}")


class PidFile:
    """The monitor's pid file, held by a lock (``flock``) for as long as it runs.

    Whether a monitor runs is the lock's answer, never the file's content: a file
    naming a live process proves nothing (any user can start one whose arguments read
    ``cached serve``). Nobody else may take the lock: the directory must be root's
    alone (``statedir``), or another user could plant a file or a symlink at the
    name; and the file is 0600, because any open descriptor can hold a lock on it
    (``flock`` through a read-only one, and a POSIX read lock too), so a file other
    users could open would let them keep the daemon from starting. A file found there
    that others could have opened (0644) is replaced, not locked.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path)
        self._dir = open_dir("pid_file", os.path.dirname(self.path), 0o755, self.path)
        try:
            self._fd = self._take()
        except BaseException:
            os.close(self._dir)
            raise

    def _take(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        while True:
            try:
                fd = os.open(self.name, flags, 0o600, dir_fd=self._dir)
            except OSError as e:
                why = "a symlink" if e.errno == errno.ELOOP else e.strerror
                raise RuntimeError(f"pid_file = {self.path}: {why}") from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise RuntimeError(f"pid_file = {self.path}: not a regular file")
                if st.st_mode & 0o077 or st.st_uid != os.geteuid():
                    os.unlink(self.name, dir_fd=self._dir)  # others may hold it open
                    os.close(fd)
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    other = os.read(fd, 32).decode("ascii", "replace").strip()
                    raise RuntimeError(
                        f"pid_file = {self.path}: locked: cached already runs"
                        + (f" as pid {other}" if other.isdigit() else "")
                    ) from None
                # A monitor that stopped as we opened the file removed it: the lock
                # is on a file nobody finds any more. Take the one at the name now.
                here = os.stat(self.name, dir_fd=self._dir, follow_symlinks=False)
                if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                return fd
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise

    def release(self) -> None:
        """Remove the file, then drop the lock (in this order: a monitor starting
        meanwhile finds the file gone, or locked)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name, dir_fd=self._dir)
        os.close(self._fd)
        os.close(self._dir)


async def run_monitor(config: Config, config_path: str, log_level: str) -> int:
    d = config.daemon
    try:
        check_state_dirs(config)
        pid_file = PidFile(d.pid_file)
    except (RuntimeError, OSError) as e:
        log.error("%s", e)
        return 1
    monitor = Monitor(config, config_path, log_level)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: monitor.signal_children(signal.SIGHUP))
    control = None
    try:
        try:
            await monitor.start()
        except RuntimeError as e:
            log.error("%s", e)
            return 1
        control = await aio.serve(framing.control_socket(d.pipes_dir), monitor.control, mode=0o600)
        sd_notify("READY=1\nSTATUS=serving")
        log.info("cached serving %d domain(s): %s", len(config.domains),
                 ", ".join(x.name for x in config.domains))  # fmt: skip
        await stop.wait()
        sd_notify("STOPPING=1")
        log.info("stopping")
        return 0
    finally:
        if control is not None:
            control.close()
        await monitor.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(framing.control_socket(d.pipes_dir))
        pid_file.release()
