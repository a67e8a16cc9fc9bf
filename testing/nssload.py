"""Load through the real libnss_sss: many threads (and processes) doing lookups.

Runs *inside* the namespace (``testing.nsenv.run_nss([python, -m, testing.nssload, ...])``)
and calls ``_nss_sss_*`` through ctypes, which releases the GIL, so the threads are
truly concurrent clients: libnss_sss keeps one connection per thread (reference
§1.1). Every answer is checked against the expected one; the result is one JSON
line: requests, errors (with samples), latency percentiles.

Input (stdin, JSON): ``{"lookups": [[op, key, expected], ...]}`` where op is
getpwnam/getpwuid/getgrnam/getgrgid/initgroups and ``expected`` is the name (for
passwd/group lookups) or the number of gids (initgroups), or null for "not found".
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import threading
import time
from typing import Any

from testing.nsenv import NssClient


def _check(op: str, expected: Any, answer: Any) -> str:
    if expected is None:
        return "" if not answer.ok else f"{op}: expected not found, got {answer.value!r}"[:200]
    if not answer.ok:
        return f"{op}: status {answer.status} errno {answer.errno}"
    if op == "initgroups":
        got = len(set(answer.value))
        return "" if got == expected else f"initgroups: {got} gids, expected {expected}"
    name = answer.value[0]
    return "" if name == expected else f"{op}: got {name!r}, expected {expected!r}"


def _worker(lookups: list[list[Any]], deadline: float, seed: int, out: list[Any]) -> None:
    client = NssClient()
    rng = random.Random(seed)
    lat: list[float] = []
    errors: list[str] = []
    while time.monotonic() < deadline:
        op, key, expected = rng.choice(lookups)
        start = time.perf_counter()
        try:
            answer = client.call(op, str(key))
            problem = _check(op, expected, answer)
        except Exception as e:  # a crash of the client counts as an error, not a hang
            problem = f"{op}: {type(e).__name__}: {e}"
        lat.append(time.perf_counter() - start)
        if problem:
            errors.append(problem)
    out.append((lat, errors))


def _process(lookups: list[list[Any]], threads: int, seconds: float, seed: int) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    out: list[Any] = []
    ts = [
        threading.Thread(target=_worker, args=(lookups, deadline, seed * 1000 + i, out))
        for i in range(threads)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lat = [x for item in out for x in item[0]]
    errors = [x for item in out for x in item[1]]
    return {"latencies": lat, "errors": errors}


def _run_process(args: tuple[list[list[Any]], int, float, int]) -> dict[str, Any]:
    return _process(*args)


def summarize(parts: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    lat = sorted(x for p in parts for x in p["latencies"])
    errors = [e for p in parts for e in p["errors"]]

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3) if lat else 0.0

    return {
        "requests": len(lat),
        "errors": len(errors),
        "error_samples": errors[:10],
        "per_second": round(len(lat) / seconds, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(lat[-1] * 1000, 3) if lat else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    lookups = json.load(sys.stdin)["lookups"]
    if args.processes == 1:
        parts = [_process(lookups, args.threads, args.seconds, 1)]
    else:
        with mp.get_context("spawn").Pool(args.processes) as pool:
            parts = pool.map(
                _run_process,
                [(lookups, args.threads, args.seconds, i + 1) for i in range(args.processes)],
            )
    print(json.dumps(summarize(parts, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
