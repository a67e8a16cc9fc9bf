"""bigroupuser with uid= and cn=-named people, side by side (docs/compatibility.md §9.5).

For each variant (testing.gendir BIGROUPUSER and BIGROUPUSER_CN: same groups, same
answers, only the people's RDNs differ) on its own slapd (unlimited, deref overlay, as
``perf.run`` serves it) and a fresh ``cached serve``, through glibc + libnss_sss:

* cold ``id bigroupuser`` (empty cache): wall time, LDAP searches (logical searches in
  slapd's stats log, pages once, root DSE reads left out), exact or not;
* warm ``id bigroupuser`` over the socket (``SSS_NSS_USE_MEMCACHE=NO``): the same;
* ``getent group large01`` after that: the same.

Also the CPU seconds cached's processes (monitor, backend, responder) and slapd spent
on each step, which a loaded machine inflates much less than the wall time.  Wall
times are one run each on a shared machine: indicative; the search counts are exact.
``python -m perf.cnpeople [--out FILE.md]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from testing import gendir, nsenv, procstat
from testing.daemon import REPO, CachedDaemon
from testing.slapd import Slapd

DATA_DIR = REPO / ".benchmarks" / "perf-data"  # shared with perf.run
SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}


def _gids(output: str) -> set[int]:
    if "groups=" not in output:
        return set()
    groups = output.strip().split("groups=", 1)[1]
    return {int(item.split("(", 1)[0]) for item in groups.split(",")}


def _searches(server: Slapd, offset: int) -> int:
    return sum(1 for pages in server.logical_searches(offset) if pages[0].base != "")


Row = tuple[str, float, float, int, bool]  # step, wall, CPU, searches, exact


def measure(scenario: gendir.Scenario, work: Path) -> list[Row]:
    gen = gendir.generate(scenario, DATA_DIR, reuse=True)
    exp = gen.expected()
    rows: list[Row] = []
    with (
        Slapd(work / f"slapd-{scenario.name}", gen.ldif, scenario.base_dn) as server,
        CachedDaemon(work / f"cached-{scenario.name}", [server.uri], server.base_dn) as d,
    ):
        assert server.pid is not None

        def cpu() -> float:
            pids = {"cached": d.pid, "slapd": server.pid or 0}
            pids.update({f"{i.comm}.{i.pid}": i.pid for i in procstat.children(d.pid)})
            return sum(procstat.cpu_seconds(pids).values())

        def step(name: str, argv: list[str], check: Callable[[str], bool]) -> None:
            offset, cpu0 = server.log_offset(), cpu()
            start = time.perf_counter()
            r = d.run_nss(argv, env=SOCKET_ONLY, timeout=1800)
            wall = time.perf_counter() - start
            rows.append((name, wall, cpu() - cpu0, _searches(server, offset), check(r.stdout)))

        want = exp.initgroups(exp.big_user, 2)
        members = exp.members("large01", 2)
        step("cold id", ["id", exp.big_user], lambda out: _gids(out) == want)
        step("warm id (socket)", ["id", exp.big_user], lambda out: _gids(out) == want)
        step(
            "getent group large01",
            ["getent", "group", "large01"],
            lambda out: set(out.rstrip("\n").split(":")[-1].split(",")) == members,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.cnpeople", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = p.parse_args(argv)
    reason = nsenv.skip_reason()
    if reason:
        print(f"perf.cnpeople: {reason}", file=sys.stderr)
        return 2
    lines = [
        "| people | step | wall (s) | CPU cached+slapd (s) | LDAP searches | exact |",
        "|---|---|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="cnpeople-", dir="/tmp") as tmp:
        for scenario in (gendir.BIGROUPUSER, gendir.BIGROUPUSER_CN):
            for step, wall, cpu, searches, exact in measure(scenario, Path(tmp)):
                lines.append(
                    f"| {scenario.people_rdn}= | {step} | {wall:.2f} | {cpu:.2f} | {searches} |"
                    f" {'yes' if exact else '**no**'} |"
                )
                print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
