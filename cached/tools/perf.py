"""``cached perf``: run a command and print what the daemon did meanwhile, in the layout
of SSSD's contrib/systemtap/id_perf.stp (reference §5.2), from the difference of two
counter snapshots (``counters.py``)."""

from __future__ import annotations

import os
import time
from typing import Any

from cached.config import Config
from cached.counters import (
    CACHE_READ,
    ENTRY_BYTES,
    ENTRY_COMMIT,
    ENTRY_RECORDS,
    ENTRY_TXN,
    LDAP_BER,
    LDAP_DECODE,
    LDAP_SEARCH,
    LDAP_WAIT,
    NESTED_COMPARE,
    NESTED_LEVELS,
    NESTED_RESOLVE,
    NSS_REQUEST,
    REQ_GROUP,
    REQ_INITGR,
    REQ_USER,
    TS_BYTES,
    TS_RECORDS,
    TS_WRITE,
    Stat,
    diff,
    merge,
)
from cached.ipc import framing
from cached.ipc.ops import Op
from cached.tools import ToolError


def idperf_breakdown(d: dict[str, Stat], total: float) -> dict[str, Any]:
    """Reference §5.2's id_perf figures, from the difference of two snapshots taken
    around a command that ran for ``total`` seconds, plus what SSSD's probes miss."""

    def get(name: str) -> Stat:
        return d.get(name) or Stat()

    def ms(name: str) -> float:
        return round(get(name).seconds * 1000, 3)

    txn_ms, search_ms = ms(ENTRY_TXN), ms(LDAP_SEARCH)
    return {
        "total_ms": round(total * 1000, 3),
        "level0_transactions": get(ENTRY_TXN).count,
        "level0_transactions_ms": txn_ms,
        "writing_ms": ms(ENTRY_COMMIT),
        "ldap_searches": get(LDAP_SEARCH).count,
        "ldap_entries": get(LDAP_SEARCH).amount,
        "ldap_wait_ms": search_ms,
        "requests": {
            kind: {"count": get(stat).count, "ms": ms(stat)}
            for kind, stat in (("user", REQ_USER), ("group", REQ_GROUP), ("initgroups", REQ_INITGR))
        },
        # §5.2 item 8: what is neither in a level-0 transaction nor waiting for LDAP.
        "unaccounted_ms": round(total * 1000 - txn_ms - search_ms, 3),
        "timestamp_writes": get(TS_WRITE).count,
        "timestamp_writes_ms": ms(TS_WRITE),
        "timestamp_records": get(TS_RECORDS).amount,
        "entry_store_bytes": get(ENTRY_BYTES).amount,
        "entry_store_records": get(ENTRY_RECORDS).amount,
        "timestamp_store_bytes": get(TS_BYTES).amount,
        "nested": {
            "levels": get(NESTED_LEVELS).count,
            "server_and_network_ms": ms(LDAP_WAIT),
            "ber_decode_ms": ms(LDAP_BER),
            "member_resolution_ms": ms(NESTED_RESOLVE),
            "compare_ms": ms(NESTED_COMPARE),
            "decode_and_store_ms": ms(LDAP_DECODE),
        },
        "responder": {
            "requests": get(NSS_REQUEST).count,
            "requests_ms": ms(NSS_REQUEST),
            "cache_reads": get(CACHE_READ).count,
            "cache_reads_ms": ms(CACHE_READ),
        },
    }


def format_idperf(b: dict[str, Any], command: str) -> str:
    """The layout of SSSD's contrib/systemtap/id_perf.stp (§5.2), then cached's own lines."""
    r = b["requests"]
    n = b["nested"]
    lines = [
        f"Total run time of {command} was: {b['total_ms']:.0f} ms",
        f"Number of zero-level cache transactions: {b['level0_transactions']}",
        f" --> Time spent in level-0 sysdb transactions: {b['level0_transactions_ms']:.0f} ms",
        f" --> Time spent writing to LDB: {b['writing_ms']:.0f} ms",
        f"Number of LDAP searches: {b['ldap_searches']}",
        f"Time spent waiting for LDAP: {b['ldap_wait_ms']:.0f} ms",
        "LDAP searches breakdown:",
    ]
    for kind in ("user", "group", "initgroups"):
        lines += [
            f"  Number of {kind} requests: {r[kind]['count']}",
            f"  Time spent in {kind} requests: {r[kind]['ms']:.0f} ms",
        ]
    lines += [
        f"Unaccounted time: {b['unaccounted_ms']:.0f} ms",
        "",
        "What SSSD's probes do not show:",
        f"  Timestamp-only writes: {b['timestamp_writes']} transactions, "
        f"{b['timestamp_records']} records, {b['timestamp_writes_ms']:.0f} ms",
        f"  Bytes written: entry store {b['entry_store_bytes']} "
        f"({b['entry_store_records']} records), timestamp store {b['timestamp_store_bytes']}",
        "  Nested groups (reference §5.3):",
        f"    levels walked: {n['levels']}",
        f"    server and network: {n['server_and_network_ms']:.0f} ms "
        f"(of which BER decoding {n['ber_decode_ms']:.0f} ms)",
        f"    member DN resolution: {n['member_resolution_ms']:.0f} ms",
        f"    comparing with the cache: {n['compare_ms']:.0f} ms",
        f"    results processing (decode, compare, store): {n['decode_and_store_ms']:.0f} ms",
        f"  Responder: {b['responder']['requests']} NSS requests "
        f"({b['responder']['requests_ms']:.0f} ms), {b['responder']['cache_reads']} cache reads "
        f"({b['responder']['cache_reads_ms']:.0f} ms)",
    ]
    return "\n".join(lines)


def _snapshot(config: Config) -> dict[str, list[float]]:
    try:
        path = framing.control_socket(config.daemon.pipes_dir)
        reply = framing.call_sync(path, Op.COUNTERS, timeout=30)
    except framing.RpcError as e:
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
