"""The administrator's tools: ``cached cache`` (sss_cache), ``cached status``, ``cached perf``.

They talk to a running daemon over its root-only control socket and work where no
D-Bus bus exists. ``cached cache`` also works when the daemon is stopped: it writes
the timestamp stores directly (reference §4: sss_cache opens the caches itself).
Imports are kept light on purpose: ``cached cache -E`` is meant to take well under
SSSD's 0.77 s (README.md), and importing asyncio or ldap3 alone would cost a large
part of that.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from cached import rpc
from cached.config import Config
from cached.counters import diff, format_idperf, idperf_breakdown, merge

NO_MATCH = "No cache object matched the specified search"
MC_FILES = ("passwd", "group", "initgroups")


class ToolError(Exception):
    """A failure to report to the administrator; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# -- cached cache ---------------------------------------------------------------------


@dataclass
class Invalidation:
    everything: bool = False
    users: bool = False
    groups: bool = False
    user_names: list[str] = field(default_factory=list)
    group_names: list[str] = field(default_factory=list)
    domain: str = ""

    def empty(self) -> bool:
        return not (
            self.everything or self.users or self.groups or self.user_names or self.group_names
        )


def _split_fq(name: str, domains: set[str]) -> tuple[str, str]:
    """``user@DOMAIN`` matches only that domain (reference §4); a plain name, all."""
    base, sep, dom = name.rpartition("@")
    if sep and dom in domains:
        return base, dom
    return name, ""


def invalidate(config: Config, what: Invalidation) -> int:
    """Expire the selected entries in every (or the given) domain; return how many."""
    from cached.cache import StoreWriteError, open_domain_cache

    names = {d.name for d in config.domains}
    if what.domain and what.domain not in names:
        raise ToolError(
            f"Could not open domain {what.domain}: it is not in [cached] domains of "
            f"{config.path} (configured: {', '.join(sorted(names))})",
            errno.ENOENT,
        )
    matched = 0
    for d in config.domains:
        if what.domain and d.name != what.domain:
            continue
        try:
            cache = open_domain_cache(config.daemon.db_dir, d)
        except FileNotFoundError:
            continue  # never started: nothing cached
        try:
            if cache.ts is None:
                raise ToolError(
                    f"{cache.ts_path}: the timestamp store cannot be opened; restart "
                    "cached: its backend rebuilds it, which expires every entry",
                )
            for every, all_fn, one_fn, wanted in (
                (what.users, cache.invalidate_users, cache.invalidate_user, what.user_names),
                (what.groups, cache.invalidate_groups, cache.invalidate_group, what.group_names),
            ):
                if what.everything or every:
                    matched += all_fn()
                    continue
                for n in wanted:
                    base, dom = _split_fq(n, names)
                    if not dom or dom == d.name:
                        matched += one_fn(base)
        except StoreWriteError as e:
            raise ToolError(f"{e}; nothing was invalidated in domain {d.name}") from None
        finally:
            cache.close()
    return matched


_RECYCLED = struct.pack("=I", 2)  # header status word at offset 12 (reference §2.2)


def _recycle_memcache(mc_dir: str) -> bool:
    """With no responder alive: mark each file RECYCLED and unlink it, as sss_cache
    does when it can take the file's lock (§4). False if a responder holds a lock."""
    for name in MC_FILES:
        path = os.path.join(mc_dir, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                return False
            os.pwrite(fd, _RECYCLED, 12)
            os.unlink(path)
        finally:
            os.close(fd)
    return True


def notify_invalidated(config: Config) -> str:
    """Tell a running daemon to drop its negative and memory caches; '' on success,
    else a warning for the administrator."""
    try:
        rpc.call_sync(rpc.control_socket(config.daemon.pipes_dir), "invalidated", timeout=10)
        return ""
    except rpc.RpcError:
        pass
    if _recycle_memcache(config.daemon.mc_dir):
        return ""
    return "The memcache was not invalidated by NSS responder."


# -- cached status --------------------------------------------------------------------


def _ago(ts: float, now: float) -> str:
    if not ts:
        return "never"
    secs = max(0.0, now - ts)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    return f"{when} ({_duration(secs)} ago)"


def _duration(secs: float) -> str:
    secs = int(secs)
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    parts = [f"{d}d"] if d else []
    if d or h:
        parts.append(f"{h}h")
    if d or h or m:
        parts.append(f"{m}m")
    parts.append(f"{s}s")
    return " ".join(parts)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def memcache_stats(mc_dir: str) -> dict[str, Any]:
    from cached.memcache import McFormatError, McReader

    out: dict[str, Any] = {}
    for name in MC_FILES:
        path = os.path.join(mc_dir, name)
        if not os.path.exists(path):
            out[name] = None
            continue
        try:
            with McReader(path) as r:
                st = r.stats()
            out[name] = {"records": st.records, "fill": st.fill, "status": st.status.name}
        except (McFormatError, OSError) as e:
            out[name] = {"error": str(e)}
    return out


def status(config: Config) -> tuple[dict[str, Any], bool]:
    """The daemon's status (or what can be read without it) and whether it runs."""
    try:
        reply = rpc.call_sync(rpc.control_socket(config.daemon.pipes_dir), "status", timeout=10)
        running = True
    except rpc.RpcError as e:
        reply = {"error": str(e)}
        # The control socket is root's (its directory is 0700, and the daemon checks the
        # peer's uid). Anyone else can still tell whether the daemon runs: its NSS socket
        # answers everyone (reference §1.8, mode 0666).
        running = os.geteuid() != 0 and _responder_answers(config.daemon.pipes_dir)
        if running:
            reply["needs_root"] = True
    reply["memcache"] = memcache_stats(config.daemon.mc_dir)
    stores = {}
    for d in config.domains:
        for prefix in ("cache", "timestamps"):
            path = os.path.join(config.daemon.db_dir, f"{prefix}_{d.name}.lmdb")
            if os.path.exists(path):
                stores[path] = os.path.getsize(path)
    reply["stores"] = stores
    return reply, running


def _responder_answers(pipes_dir: str) -> bool:
    """Whether a responder at ``pipes_dir`` completes the GET_VERSION handshake."""
    from cached.nss.client import NssClient, NssClientError

    try:
        with NssClient(pipes_dir, timeout=10) as client:
            client.handshake()
        return True
    except NssClientError:
        return False


def format_status(config: Config, st: dict[str, Any], running: bool) -> str:
    now = time.time()
    lines = []
    if not running:
        lines.append(f"cached is not running ({st.get('error')})")
    elif st.get("needs_root"):
        lines.append(
            f"cached is running (its NSS socket answers); the details need root ({st['error']})"
        )
    else:
        mon = st["monitor"]
        lines.append(
            f"cached is running: monitor pid {mon['pid']}, up {_duration(now - mon['started'])},"
            f" config {mon['config']}"
        )
        lines.append("Processes:")
        for c in st["children"]:
            state = "running" if c["running"] else f"not running ({c['last_exit']})"
            extra = ""
            s = c.get("status") or {}
            if c["name"] == "responder" and s:
                extra = (
                    f", {s.get('connections', 0)} connections, {s.get('served', 0)} requests"
                    f" served, {s.get('negative_entries', 0)} negative entries"
                )
            lines.append(
                f"  {c['name']:<16} pid {c['pid']}, {state}, up {_duration(c['uptime'])}, "
                f"restarts {c['restarts']}{extra}"
            )
        for c in st["children"]:
            s = c.get("status") or {}
            if not c["name"].startswith("backend") or not s:
                continue
            if s["online"]:
                conn = f"online via {s['server'] or '(not connected yet)'}"
            else:
                conn = f"OFFLINE: {s['last_error']}; next attempt in {s['retry_in']:.0f} s"
            lines.append(f"Domain {s['domain']}: {conn}")
            if not s["online"] and s.get("offline_since"):
                lines.append(f"  offline since: {_ago(s['offline_since'], now)}")
            lines.append(f"  last successful refresh: {_ago(s['last_success'], now)}")
            e = s["entries"]
            lines.append(
                f"  cached: {e['users']} users, {e['groups']} groups, "
                f"{e['initgr']} initgroups lists; {s['requests']} backend requests"
            )
            if s.get("limit_error"):
                lines.append(
                    f"  LOOKUP CUT BY A SERVER LIMIT ({_ago(s['limit_time'], now)}): "
                    f"{s['limit_error']}"
                )
            if s.get("ts_rebuilt"):
                lines.append(f"  timestamp store rebuilt at start: {s['ts_rebuilt']}")
    lines.append("Stores:")
    for path, size in st["stores"].items():
        lines.append(f"  {path}: {_size(size)}")
    lines.append(f"Memory cache ({config.daemon.mc_dir}):")
    for name, mc in st["memcache"].items():
        if mc is None:
            lines.append(f"  {name}: absent")
        elif "error" in mc:
            lines.append(f"  {name}: unreadable: {mc['error']}")
        else:
            lines.append(f"  {name}: {mc['records']} records, {mc['fill'] * 100:.1f}% full")
    return "\n".join(lines)


# -- cached perf ----------------------------------------------------------------------


def _snapshot(config: Config) -> dict[str, list[float]]:
    try:
        reply = rpc.call_sync(rpc.control_socket(config.daemon.pipes_dir), "counters", timeout=30)
    except rpc.RpcError as e:
        raise ToolError(f"cached is not running or not reachable: {e}", 3) from None
    return merge(list(reply["processes"].values()))


def perf(
    config: Config, argv: list[str], as_json: bool, name: str | None = None
) -> tuple[str, int]:
    """Run ``argv`` and return the breakdown of what the daemon did meanwhile."""
    import json
    import shlex
    import subprocess

    before = _snapshot(config)
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL)
    except OSError as e:
        raise ToolError(f"cannot run {shlex.join(argv)}: {e.strerror}", 2) from None
    total = time.perf_counter() - start
    after = _snapshot(config)
    breakdown = idperf_breakdown(diff(after, before), total)
    name = name or os.path.basename(argv[0])
    if as_json:
        text = json.dumps({"command": argv, "exit_status": proc.returncode, **breakdown},
                          indent=2)  # fmt: skip
    else:
        text = format_idperf(breakdown, name)
    return text, proc.returncode
