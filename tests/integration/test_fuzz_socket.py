"""A fuzz of the live NSS socket: random and malformed packets against ``cached serve``
(the fuzzer and its oracle: testing/fuzz.py). After the fuzz the daemon must answer
correctly through libnss_sss, no process may have died or logged a traceback, and the
responder's memory must not have grown (see ``testing.fuzz.RSS_BOUND_KIB``).

Reproduce a failure with ``CACHED_FUZZ_SEED=<seed>`` (printed in the failure).
"""

from __future__ import annotations

import socket
import time

from cached.nss import protocol as p
from testing.checks import read_reply, responder_status, wait_for
from testing.daemon import CachedDaemon
from testing.fuzz import (
    NOT_FOUND_BODY,
    PACKETS,
    RSS_BOUND_KIB,
    SEED,
    check_daemon_after_fuzz,
    run_fuzz,
)
from testing.marks import requires_nss
from testing.procstat import proc_kib

pytestmark = requires_nss


def test_live_socket_fuzz(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d: CachedDaemon = daemon_factory(slapd_small)
    pids = {c["name"]: c["pid"] for c in d.control("status")["children"]}
    responder = pids["responder"]
    start = time.monotonic()
    # Warm-up: the code paths and the name pools' negative entries exist before the
    # memory baseline is taken.
    warm = run_fuzz(d, exp, 300, SEED + 1)
    rss_before = proc_kib(responder)
    stats = run_fuzz(d, exp, PACKETS, SEED)
    rss_after = proc_kib(responder)
    elapsed = time.monotonic() - start
    check_daemon_after_fuzz(d, exp, pids, stats, SEED)
    assert not warm.problems, warm.problems[:10]
    assert stats.packets >= PACKETS and stats.replies_checked > PACKETS // 4
    assert stats.closed_by_framing_error > 0 and set(stats.kinds) >= {"valid", "bad-framing"}
    grown = rss_after - rss_before
    assert grown < RSS_BOUND_KIB, f"responder RSS grew {grown} KiB ({rss_before} -> {rss_after})"
    print(
        f"\nfuzz seed {SEED}: {stats.packets} packets in {stats.conversations} conversations"
        f" ({stats.bytes_sent} bytes), {stats.replies_checked} replies checked,"
        f" {stats.closed_by_framing_error} closed on framing errors, {dict(stats.kinds)},"
        f" {dict(stats.endings)}; responder RSS {rss_before} -> {rss_after} KiB;"
        f" {elapsed:.1f} s"
    )


def test_unknown_names_do_not_pile_up_in_the_negative_cache(daemon_factory, slapd_small):
    """A client asking for ever new unknown names (the socket is open to every local
    user) must not grow the responder without bound: an entry of the negative cache
    is useless once entry_negative_timeout has passed, and must go."""
    d: CachedDaemon = daemon_factory(slapd_small, nss={"entry_negative_timeout": 1})
    responder = d.child_pid("responder")
    rss_before = proc_kib(responder)
    sent = 0

    def ask_unknown(sock: socket.socket, n: int) -> None:
        nonlocal sent
        for _ in range(n):
            sock.sendall(p.encode_request(p.Command.GETPWNAM, p.name_body(f"nosuch-{sent:07d}")))
            assert read_reply(sock) == (p.Command.GETPWNAM, 0, NOT_FOUND_BODY)
            sent += 1

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(d.pipes_dir / "nss"))
        ask_unknown(sock, 1000)
        # Remembered (at least those of the last second; older ones may already have
        # been swept, which is the point).
        assert responder_status(d)["negative_entries"] >= 100

        # Keep asking (a sweep may run on use) until the expired entries are gone.
        def dropped() -> bool:
            ask_unknown(sock, 10)
            return bool(responder_status(d)["negative_entries"] < 500)

        expired = wait_for(
            dropped,
            "expired negative entries dropped",
            timeout=15,
            log=lambda: (
                f"{responder_status(d)['negative_entries']} entries after {sent} names,"
                f" responder RSS +{proc_kib(responder) - rss_before} KiB"
            ),
        )
    print(f"\nnegative cache: expired entries dropped {expired:.1f} s after 1,000 names")
