"""How to name thousands of member users on a Samba AD DC: the measurements behind
cached/ldap/ad.py's choices (ASQ for big groups, the bounded user sweep, ``(name=…)``
batches), on the bigroupuser DC of perf/adbig.py.

1. ``alternatives``: the 4,998 member users of bigroupuser's 2,086 groups named by
   batched ``(distinguishedName=…)``, ``(name=…)`` ORs, one paged search of every user,
   and ASQ over large01 (5,000 members); Samba's CPU seconds (``/proc/<pid>/stat``;
   the DC runs as one process, ``-M single``), wall time, median of ``--repeat``.
2. ``ab``: the whole tokenGroups initgroups in-process, main's member naming
   (distinguishedName batches, no sweep) against the current one, alternating, each
   from an empty cache: wall, Samba CPU, logical searches, LDAP requests (pages).

    python -m perf.admembers --workdir /tmp/adb18 [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ldap3

from cached.cache.writer import open_backend_cache
from cached.config import DomainConfig, parse_config
from cached.counters import LDAP_SEARCH, Counters
from cached.dn import normalize_dn, rdn_avas
from cached.ldap.ad import AdProvider
from cached.ldap.client import LdapClient
from cached.ldap.schema import escape
from cached.ldap.sid import sid_assertion, sid_to_str
from perf import adbig
from testing import addc
from testing.daemon import config_text

USER_ATTRS = ["sAMAccountName", "uidNumber", "gidNumber", "objectClass", "objectSid",
              "primaryGroupID"]  # fmt: skip


class DnBatches(AdProvider):
    """Member naming as on main before the sweep: distinguishedName batches only."""

    sweep_min = 1 << 62

    @staticmethod
    def _member_assertion(dn: str) -> str | None:
        return f"(distinguishedName={escape(dn)})" if rdn_avas(dn) else None


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _domain(dc: addc.SambaDC) -> DomainConfig:
    text = config_text(
        [dc.ldapi_uri], dc.base_dn, Path("/nonexistent"), ldap_schema="ad",
        ldap_default_bind_dn=dc.admin_dn, ldap_default_authtok=dc.admin_pw,
    )  # fmt: skip
    return parse_config(text).domains[0]


def member_users(c: LdapClient, base: str) -> list[str]:
    """The DNs of the members of bigroupuser's token groups that are not themselves
    token groups (the users an initgroups must name)."""
    (u,) = c.search(base, "(sAMAccountName=bigroupuser)", ["objectSid"])
    (tok,) = c.search(u.dn, "(objectClass=*)", ["tokenGroups"], scope="base")
    sids = [s for v in tok.get("tokengroups") if not (s := sid_to_str(v)).startswith("S-1-5-32-")]
    groups: set[str] = set()
    members: dict[str, str] = {}
    for i in range(0, len(sids), 1000):
        part = "".join(sid_assertion("objectSid", s) for s in sids[i : i + 1000])
        for e in c.search(base, f"(&(objectClass=group)(|{part}))", ["member"]):
            groups.add(normalize_dn(e.dn))
            for m in e.get("member"):
                members.setdefault(normalize_dn(m.decode()), m.decode())
    return sorted(d for k, d in members.items() if k not in groups)


def alternatives(dc: addc.SambaDC, repeat: int) -> None:
    assert dc.pid is not None
    c = LdapClient(_domain(dc))
    base = dc.base_dn
    users = member_users(c, base)
    print(f"{len(users)} member users to name; Samba CPU s / wall s, median of {repeat}\n")
    print("| how | searches | Samba CPU (s) | wall (s) | named |")
    print("|---|---|---|---|---|")

    def ors(assertion: Callable[[str], str], size: int) -> Callable[[], tuple[int, int]]:
        def run() -> tuple[int, int]:
            n = 0
            for i in range(0, len(users), size):
                part = "".join(assertion(d) for d in users[i : i + size])
                filt = f"(&(|(objectClass=user)(objectClass=group))(|{part}))"
                n += len(c.search(base, filt, USER_ATTRS))
            return -(-len(users) // size), n

        return run

    def rdn(d: str) -> str:
        return escape(rdn_avas(d)[0][1])

    def dn(d: str) -> str:
        return f"(distinguishedName={escape(d)})"

    cases: list[tuple[str, Callable[[], tuple[int, int]]]] = [
        ("(distinguishedName=…) ORs of 250", ors(dn, 250)),
        ("(name=…) ORs of 250", ors(lambda d: f"(name={rdn(d)})", 250)),
        ("(name=…) ORs of 1,000", ors(lambda d: f"(name={rdn(d)})", 1000)),
        ("(cn=…) ORs of 250", ors(lambda d: f"(cn={rdn(d)})", 250)),
        ("paged search of every user", lambda: (1, len(c.search(base, "(objectClass=user)",
                                                                 USER_ATTRS)))),
        ("ASQ over large01 (5,000 members)", lambda: (1, len(c.search(
            f"CN=large01,OU=groups,{base}", "(objectClass=*)", USER_ATTRS, scope="base",
            asq="member")))),
    ]  # fmt: skip
    for label, fn in cases:
        cpu, wall = [], []
        got = (0, 0)
        for _ in range(repeat):
            s0, t0 = _server_cpu(dc.pid), time.monotonic()
            got = fn()
            wall.append(time.monotonic() - t0)
            cpu.append(_server_cpu(dc.pid) - s0)
        print(f"| {label} | {got[0]} | {statistics.median(cpu):.2f} | "
              f"{statistics.median(wall):.2f} | {got[1]} |", flush=True)  # fmt: skip
    c.close()


def ab(dc: addc.SambaDC, repeat: int) -> None:
    assert dc.pid is not None
    domain = _domain(dc)
    requests = [0]
    search = ldap3.Connection.search

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        requests[0] += 1
        return search(self, *a, **kw)

    ldap3.Connection.search = counted
    variants: list[tuple[str, type[AdProvider]]] = [
        ("DN batches (before)", DnBatches),
        ("sweep + name batches", AdProvider),
    ]
    rows: dict[str, list[tuple[float, float, float, int, int]]] = {}
    try:
        for rep in range(repeat):
            for label, cls in variants if rep % 2 == 0 else variants[::-1]:
                counters = Counters()
                client = LdapClient(domain, counters)
                with tempfile.TemporaryDirectory() as tmp:
                    cache = open_backend_cache(tmp, domain, counters=counters)
                    p = cls(domain, client, cache, counters)
                    p.user_by_name("bigroupuser")
                    n0, r0 = counters.snapshot().get(LDAP_SEARCH, [0])[0], requests[0]
                    s0, t0 = _server_cpu(dc.pid), time.monotonic()
                    p.initgroups("bigroupuser")
                    wall, cpu = time.monotonic() - t0, _server_cpu(dc.pid) - s0
                    n = counters.snapshot().get(LDAP_SEARCH, [0])[0] - n0
                    ig = cache.initgroups("bigroupuser").value
                    gids = 0 if ig is None else len(ig.gids) // 4
                    rows.setdefault(label, []).append((wall, cpu, n, requests[0] - r0, gids))
                client.close()
    finally:
        ldap3.Connection.search = search
    print(f"\ninitgroups bigroupuser in-process, {repeat} alternating runs, medians\n")
    print("| member naming | wall (s) | Samba CPU (s) | searches | LDAP requests | gids |")
    print("|---|---|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {statistics.median(x[0] for x in r):.2f} | "
              f"{statistics.median(x[1] for x in r):.2f} | {r[0][2]:.0f} | {r[0][3]} | "
              f"{r[0][4]} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--workdir", type=Path, required=True, help="as for perf.adbig")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    missing = addc.available()
    if missing:
        print(f"cannot run a Samba DC: {missing}", file=sys.stderr)
        return 2
    dc, _ = adbig.prepared_dc(args.workdir)
    with dc:
        adbig._warm(dc)
        alternatives(dc, args.repeat)
        ab(dc, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
