"""Kerberos logins, cached beside SSSD 2.8.2 in one run: a cold and a warm whole login
(``authenticate acct_mgmt`` through pam_sss.so) of an AD user over Kerberos, with
``auth_provider = krb5`` and ``krb5_validate = true`` against the host keytab, on the
Samba DC of :mod:`testing.adkrb`.

Each round starts each daemon afresh on an empty cache (cold: the user is resolved, the
TGT got, validated and stored) and logs the same user in again at once (warm: the user
is within ``pam_id_timeout``, the TGT is got again; SSSD and cached both ask the KDC at
every login). The two daemons alternate, the order swapped each round; the figure is
pam_sss's transaction as :mod:`testing.pamdriver` times it, from ``pam_start`` to
``pam_end``, so no daemon's start-up or namespace set-up is in it. SSSD runs in the DC's
network namespace (:mod:`testing.adkrb_sssd`), cached on the host through the TCP
forwarders: cached's KDC round trips pass one more hop.

    python -m perf.krblogin --rounds 7 --out perf/results/DATE-krb5-login/report.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testing import adkrb, adkrb_sssd
from testing.daemon import CachedDaemon
from testing.pamenv import service_file

USER = "kalice"
LOGIN = ["authenticate", "acct_mgmt"]
CASES = [
    {"name": "cold", "user": USER, "ops": LOGIN, "answers": [adkrb.PASSWORDS[USER]]},
    {"name": "warm", "user": USER, "ops": LOGIN, "answers": [adkrb.PASSWORDS[USER]]},
]


def _options(kdc: adkrb.KerberosDC, ccdir: Path) -> dict[str, Any]:
    return {
        "ldap_schema": "ad", "ldap_default_bind_dn": kdc.dc.admin_dn,
        "ldap_default_authtok": kdc.dc.admin_pw, "ldap_referrals": "false",
        "auth_provider": "krb5", "krb5_realm": adkrb.REALM, "krb5_server": "127.0.0.1",
        "krb5_use_enterprise_principal": "true", "krb5_validate": "true",
        "krb5_keytab": str(kdc.keytab), "krb5_ccachedir": str(ccdir),
        "cache_credentials": "true",
    }  # fmt: skip


def cached_round(kdc: adkrb.KerberosDC, work: Path, ccdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with CachedDaemon(work, [kdc.ldapi_uri], kdc.dc.base_dn, log_level="info",
                      daemon={"services": "nss, pam"}, **_options(kdc, ccdir)) as d:  # fmt: skip
        env = d.pam_env({"krb5-oracle": service_file()})
        for case in CASES:
            r = env.drive("krb5-oracle", case["user"], case["ops"], answers=case["answers"])
            out[case["name"]] = {"codes": r.codes, "seconds": r.seconds,
                                 "ccache": "KRB5CCNAME" in r.env}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="report.md to write")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="krblogin-"))
    ccdir = Path(tempfile.mkdtemp(prefix="krblogin-cc-"))
    ccdir.chmod(0o1777)
    rows: list[tuple[int, str, str, dict[str, Any]]] = []
    load = os.getloadavg()
    try:
        with adkrb.kerberos_dc(work / "dc") as kdc:
            os.environ["KRB5_CONFIG"] = str(kdc.krb5_conf)
            assert kdc.dc.pid is not None
            for rnd in range(args.rounds):
                order = ["cached", "sssd"] if rnd % 2 == 0 else ["sssd", "cached"]
                for who in order:
                    w = work / f"{who}{rnd}"
                    if who == "cached":
                        got = cached_round(kdc, w, ccdir)
                    else:
                        got = adkrb_sssd.run(kdc.dc.pid, w, ccdir, _options(kdc, ccdir), CASES)
                    for name, r in got.items():
                        rows.append((rnd, who, name, r))
                        secs = r.get("seconds", 0.0)
                        print(f"round={rnd} {who:6} {name:4} {secs * 1000:8.1f} ms "
                              f"codes={r['codes']}", file=sys.stderr, flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ccdir, ignore_errors=True)
    text = report(rows, args, load)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


def report(rows: list[tuple[int, str, str, dict[str, Any]]], args: argparse.Namespace,
           load: tuple[float, float, float]) -> str:  # fmt: skip
    lines = [
        f"# perf.krblogin {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"* command: `python -m perf.krblogin --rounds {args.rounds}`",
        f"* host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()};"
        f" load average at start {' '.join(f'{x:.2f}' for x in load)}",
        f"* login: `{' '.join(LOGIN)}` of {USER} through pam_sss.so, auth_provider = krb5,"
        " krb5_validate = true; cold: a fresh daemon, empty cache; warm: the next login",
        "",
        "| | cached median | SSSD 2.8.2 median | cached / SSSD |",
        "|---|---|---|---|",
    ]
    for name in ("cold", "warm"):
        med = {}
        for who in ("cached", "sssd"):
            vals = [r["seconds"] for _, w, n, r in rows if w == who and n == name
                    and r["codes"] == [0, 0]]  # fmt: skip
            med[who] = statistics.median(vals) if vals else float("nan")
        ratio = med["cached"] / med["sssd"]
        lines.append(f"| {name} login | {med['cached'] * 1000:.1f} ms | "
                     f"{med['sssd'] * 1000:.1f} ms | {ratio:.2f} |")  # fmt: skip
    lines += ["", "```"]
    for rnd, who, name, r in rows:
        ccache = r.get("ccache", "KRB5CCNAME" in r.get("env", {}))
        lines.append(f"round={rnd} {who:6} {name:4} {r.get('seconds', 0.0) * 1000:8.1f} ms "
                     f"codes={r['codes']} ccache={ccache}")  # fmt: skip
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
