"""``cached status``: the daemon's processes, domains, stores and memory cache."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any, Final

from cached.config import Config
from cached.ipc import framing
from cached.ipc.ops import Op
from cached.printable import printable


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
    from cached.model import MEMCACHE_KINDS

    out: dict[str, Any] = {}
    for kind in MEMCACHE_KINDS:
        name = kind.value
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
        reply = framing.call_sync(
            framing.control_socket(config.daemon.pipes_dir), Op.STATUS, timeout=10
        )
        running = True
    except framing.RpcError as e:
        reply = {"error": str(e)}
        # The control socket is root's (its directory is 0700, and the daemon checks the
        # peer's uid). Anyone else can still tell whether the daemon runs: its NSS socket
        # answers everyone (reference §1.8, mode 0666).
        running = os.geteuid() != 0 and _responder_answers(config.daemon.pipes_dir)
        if running:
            reply["needs_root"] = True
    reply["memcache"] = memcache_stats(config.daemon.mc_dir)
    from cached.cache import cache_paths

    stores = {}
    for d in config.domains:
        for path in cache_paths(config.daemon.db_dir, d.name):
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


def _sudo_lines(sudo: dict[str, Any], now: float) -> list[str]:
    """A backend's sudo rules: how many, when last refreshed whole and by stamps, what
    comes next, and what the last run of each kind cost."""
    out = [
        f"  sudo rules: {sudo['rules']}; last full refresh {_ago(sudo['last_full'], now)}, "
        f"last smart {_ago(sudo['last_smart'], now)}; next: "
        f"{sudo['next']} in {_duration(max(0.0, sudo['next_at'] - now))}"
    ]
    for kind, run in sorted((sudo.get("runs") or {}).items()):
        out.append(
            f"    last {kind} refresh: {run['outcome']}, {run['searches']} searches, "
            f"{_size(run['ldap_bytes'])} received, {run['fetched']} rules read whole, "
            f"{run['changed']} changed, {run['deleted']} deleted"
        )
    if sudo.get("last_error"):
        out.append(f"    last error: {sudo['last_error']}")
    return out


#: The responders of the PAM, SSH and sudo sockets: the key of each one's status in
#: the responder's, and its line, naming the counters (a counter absent: 0).
_SOCKET_RESPONDERS: Final = (
    ("pam", "PAM responder: {connections} connections, {logins_ok} logins served, "
            "{logins_refused} refused, {access_denied} account checks denied"),
    ("ssh", "SSH responder: {connections} connections, {requests} requests, {keys_served} "
            "keys served, {users_unknown} unknown users, {host_requests} host key requests "
            "(none served)"),
    ("sudo", "sudo responder: {requests} requests, {rules_sent} rules sent, "
             "{users_not_found} users not found, {refreshes_asked} refreshes asked "
             "({refresh_failures} failed)"),
)  # fmt: skip


def _socket_lines(responder: dict[str, Any]) -> list[str]:
    """A line for each socket responder whose status the responder's holds."""
    return [
        "  " + line.format_map(defaultdict(int, status))
        for key, line in _SOCKET_RESPONDERS
        if (status := responder.get(key))
    ]


def format_status(config: Config, st: dict[str, Any], running: bool) -> str:
    """The report, one fact per line. A server's error text can quote what a directory
    entry holds (a DN, a name), and an error can quote a path or a peer's words, so
    every line is printed through ``printable``: a newline or a terminal escape in what
    it quotes cannot add a line or rewrite the administrator's screen."""
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
                    f" served ({s.get('netgroups_served', 0)} netgroups), "
                    f"{s.get('negative_entries', 0)} negative entries"
                )
            lines.append(
                f"  {c['name']:<16} pid {c['pid']}, {state}, up {_duration(c['uptime'])}, "
                f"restarts {c['restarts']}{extra}"
            )
            if c["name"] == "responder":
                lines += _socket_lines(s)
        for c in st["children"]:
            s = c.get("status") or {}
            if not c["name"].startswith("backend") or not s:
                continue
            if s["online"]:
                conn = f"online via {s['server'] or '(not connected yet)'}"
            else:
                why = s["last_error"]
                if s.get("probing_for"):
                    when = f"trying the servers now (for {s['probing_for']:.0f} s)"
                else:
                    when = f"next attempt in {s['retry_in']:.0f} s"
                conn = f"OFFLINE: {why}; {when}"
            lines.append(f"Domain {s['domain']}: {conn}")
            if not s["online"] and s.get("offline_since"):
                lines.append(f"  offline since: {_ago(s['offline_since'], now)}")
            if s["last_success"] or not s.get("cache_confirmed"):
                lines.append(f"  last successful refresh: {_ago(s['last_success'], now)}")
            else:
                lines.append(
                    "  last successful refresh: none since the start; the cache was last "
                    f"confirmed by the server {_ago(s['cache_confirmed'], now)}"
                )
            e = s["entries"]
            lines.append(
                f"  cached: {e['users']} users, {e['groups']} groups, "
                f"{e['initgr']} initgroups lists, {e.get('netgroups', 0)} netgroups; "
                f"{s['requests']} backend requests"
            )
            if "credentials" in s:
                lines.append(
                    f"  logins: {s.get('online_logins', 0)} online, "
                    f"{s.get('offline_logins', 0)} with cached credentials, "
                    f"{s.get('failed_logins', 0)} failed; users with cached credentials: "
                    f"{s['credentials']}"
                )
            if s.get("access_checks"):
                lines.append(
                    f"  account checks (access_provider = ldap): {s['access_checks']}, "
                    f"{s.get('access_denied', 0)} denied, {s.get('access_offline', 0)} "
                    "decided from the last online check"
                )
            if "sudo" in s:
                lines += _sudo_lines(s["sudo"], now)
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
    return "\n".join(map(printable, lines))
