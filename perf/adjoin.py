"""bigroupuser on an AD-joined host: cached and SSSD 2.8.2 with realmd's sssd.conf.

The host of testing/adjoin.py (a Samba DC with KDC and DNS in its network namespace,
the host joined with ``adcli join``) serving perf/adbig.py's bigroupuser directory
(5,001 users, 2,999 groups; bigroupuser in 2,000 directly, 2,085 through nesting).
Both daemons run on the host with the file realmd writes (``id_provider = ad``:
GSSAPI with the host keytab, a sealed session, the DC from DNS SRV records, ID
mapping; cached without ``access_provider = ad``, which it refuses), one after the
other, each from an empty cache:

* cold ``id bigroupuser@cached.test``, then warm ``id`` through the socket
  (``SSS_NSS_USE_MEMCACHE=NO``);
* LDAP searches: cached's own counter; SSSD's ``calling ldap_search_ext`` log lines
  (``debug_level = 0x0400``);
* bytes: what the host received over its veth link from the DC during the cold
  ``id`` (LDAP, Kerberos and DNS, with TCP/IP headers, the same measure for both),
  and cached's own count of LDAP bytes read (after the SASL layer's framing).

A first cached run, not reported, reads every object the lookups need once, so both
daemons meet a DC with its database in the page cache.

    python -m perf.adjoin [--workdir DIR] [--repeat N] [--no-sssd]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cached.counters import LDAP_BYTES, LDAP_SEARCH
from perf.adbig import ad_entries
from testing import adjoin, gendir, nsenv, sssd
from testing.addir import ADDirectory
from testing.daemon import CachedDaemon

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}
USER = f"bigroupuser@{adjoin.DOMAIN}"
_SSSD_SEARCH = re.compile(rb"calling ldap_search_ext with")
Row = tuple[str, str, float, int, int, int, int]  # who, step, wall, searches, veth, ldap, gids


def rx_bytes(host: adjoin.JoinedHost) -> int:
    """Bytes the host's side of the veth link has received (its own /proc/net/dev)."""
    out = subprocess.run(host.command(["cat", "/proc/net/dev"], net_only=True),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for line in out.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "veth-host":
            return int(rest.split()[0])
    raise LookupError("veth-host")


def _gids(out: str) -> set[int]:
    return {int(x.split("(")[0]) for x in out.strip().split("groups=", 1)[1].split(",")}


def _id(host: adjoin.JoinedHost, d: CachedDaemon | sssd.SssdDaemon) -> tuple[float, set[int]]:
    t0 = time.monotonic()
    r = subprocess.run(host.nss_command(["id", USER], d.pipes_dir, d.mc_dir),
                       env={**nsenv.nss_env(), **SOCKET_ONLY}, capture_output=True,
                       text=True, timeout=3600, check=False)  # fmt: skip
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"id {USER}: {r.stderr.strip()}")
    return wall, _gids(r.stdout)


def run_cached(host: adjoin.JoinedHost, work: Path, who: str = "cached") -> list[Row]:
    text = host.cached_config(work)
    with CachedDaemon.from_text(work, text, prefix=host.prefix, log_level="info") as d:
        def count(name: str) -> int:
            return int(d.counters().get(name, [0, 0, 0])[0 if name == LDAP_SEARCH else 2])

        n0, b0, v0 = count(LDAP_SEARCH), count(LDAP_BYTES), rx_bytes(host)
        wall, gids = _id(host, d)
        cold = (who, "cold id", wall, count(LDAP_SEARCH) - n0, rx_bytes(host) - v0,
                count(LDAP_BYTES) - b0, len(gids))  # fmt: skip
        n0 = count(LDAP_SEARCH)
        wall, warm_gids = _id(host, d)
        assert warm_gids == gids
        warm = (who, "warm id (socket)", wall, count(LDAP_SEARCH) - n0, 0, 0, len(gids))
        run_cached.gids = gids  # type: ignore[attr-defined]
    return [cold, warm]


def run_sssd(host: adjoin.JoinedHost, work: Path) -> list[Row]:
    s = sssd.SssdDaemon(work, "", "")
    conf = adjoin.REALMD_SSSD_CONF.replace("services = nss, pam", "services = nss")
    s.config = conf + "debug_level = 0x0400\n"
    s.prefix = host.prefix

    def searches() -> int:
        files = [s.stderr_path, *s.log_dir.glob("*.log")]
        return sum(len(_SSSD_SEARCH.findall(f.read_bytes())) for f in files if f.exists())

    with s:
        n0, v0 = searches(), rx_bytes(host)
        wall, gids = _id(host, s)
        cold = ("SSSD 2.8.2", "cold id", wall, searches() - n0, rx_bytes(host) - v0, 0, len(gids))
        n0 = searches()
        wall, warm_gids = _id(host, s)
        warm = ("SSSD 2.8.2", "warm id (socket)", wall, searches() - n0, 0, 0, len(warm_gids))
        run_sssd.gids = gids  # type: ignore[attr-defined]
    return [cold, warm]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="cached's runs (medians)")
    ap.add_argument("--no-sssd", action="store_true")
    args = ap.parse_args(argv)
    reason = adjoin.skip_reason()
    if reason:
        print(f"cannot make a joined host: {reason}", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="adjb", dir="/tmp"))
    d = gendir.build(gendir.BIGROUPUSER)
    entries, modify = ad_entries(d)
    t0 = time.monotonic()
    with adjoin.JoinedHost(work / "host", ADDirectory(entries, modify)) as host:
        print(f"provisioned, loaded and joined in {time.monotonic() - t0:.0f} s", flush=True)
        run_cached(host, work / "warmup", "warm-up")
        rows: list[Row] = []
        for i in range(args.repeat):
            rows += run_cached(host, work / f"cached{i}")
            print(rows[-2], rows[-1], flush=True)
        if not args.no_sssd:
            rows += run_sssd(host, work / "sssd")
            print(rows[-2], rows[-1], flush=True)
            same = run_sssd.gids == run_cached.gids  # type: ignore[attr-defined]
            print(f"cached and SSSD answer the same gids: {same}")
    _print(rows)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _print(rows: list[Row]) -> None:
    print("\n| daemon | step | wall (s) | LDAP searches | bytes received (veth) "
          "| LDAP bytes (cached) | gids |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    keys = dict.fromkeys((r[0], r[1]) for r in rows)
    for who, step in keys:
        runs = [r for r in rows if (r[0], r[1]) == (who, step)]
        walls = [r[2] for r in runs]
        wall = f"{statistics.median(walls):.2f}"
        if len(walls) > 1:
            wall += f" ({min(walls):.2f}-{max(walls):.2f}, {len(walls)} runs)"
        last = runs[-1]
        print(f"| {who} | {step} | {wall} | {last[3]} | {last[4]:,} | {last[5]:,} | {last[6]} |")


if __name__ == "__main__":
    sys.exit(main())
