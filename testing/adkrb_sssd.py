"""SSSD 2.8.2 beside cached for Kerberos logins: the PAM cases of
``tests/integration/test_pam_krb5_sssd.py`` through real SSSD (``auth_provider =
krb5``) and the real pam_sss, against the KDC of :mod:`testing.adkrb`.

SSSD given the DC's ldapi:// socket goes offline at once (perf/adbig.py), so, as
there, it runs in the DC's network namespace and reaches LDAP at ldap://127.0.0.1 and
the KDC at 127.0.0.1:88: :func:`run` re-runs this module under ``nsenter --net``,
which prints one JSON object. Its krb5.conf must be readable by the user (krb5_child
drops to the user before it opens a ccache, and libkrb5 reads the configuration then):
it is written into the world-readable ccache directory. The users' UPNs are
``name@cached.test`` (Samba writes the DNS domain lowercase, as AD does), so that realm
name is mapped to the same KDC, as DNS SRV records map it on a real AD network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testing import addc
from testing.pamenv import PamEnv, make_pamd, service_file

SERVICE = "krb5-oracle"


def run(dc_pid: int, work: Path, ccdir: Path, opts: dict[str, Any],
        cases: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """SSSD with the domain options ``opts`` (``ldap_uri`` is set here), each case
    ``{"name", "user", "ops", "answers"}`` driven through pam_sss; answers by name:
    ``{"codes": [...], "env": {...}, "infos": [...]}``."""
    conf = ccdir / "krb5.conf"
    realm = addc.REALM
    conf.write_text(
        f"[libdefaults]\n default_realm = {realm}\n dns_lookup_kdc = false\n rdns = false\n"
        "[realms]\n"
        f" {realm} = {{\n  kdc = 127.0.0.1\n  kpasswd_server = 127.0.0.1\n }}\n"
        f" {realm.lower()} = {{\n  kdc = 127.0.0.1\n  kpasswd_server = 127.0.0.1\n }}\n"
    )
    conf.chmod(0o644)
    spec = {"work": str(work), "conf": str(conf), "opts": opts, "cases": cases}
    proc = subprocess.run(
        ["nsenter", f"--net=/proc/{dc_pid}/ns/net", "--", sys.executable, "-m",
         "testing.adkrb_sssd", json.dumps(spec)],
        capture_output=True, text=True, timeout=900, check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"SSSD run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _inner(spec: dict[str, Any]) -> dict[str, Any]:
    from testing.sssd import SssdDaemon

    os.environ["KRB5_CONFIG"] = spec["conf"]
    work = Path(spec["work"])
    s = SssdDaemon(work / "sssd", "ldap://127.0.0.1", addc.BASE_DN, pam={}, **spec["opts"])
    out: dict[str, Any] = {}
    with s:
        env = PamEnv(s.pipes_dir, make_pamd(work / "pamd", {SERVICE: service_file()}), s.mc_dir)
        for case in spec["cases"]:
            r = env.drive(SERVICE, case["user"], [o if isinstance(o, str) else tuple(o)
                                                  for o in case["ops"]],
                          answers=case["answers"], as_user=case.get("as_user", False))  # fmt: skip
            out[case["name"]] = {
                "codes": r.codes,
                "env": r.env,
                "infos": [i for c in r.calls for i in c.infos],
                "seconds": r.seconds,
            }
    return out


if __name__ == "__main__":
    print(json.dumps(_inner(json.loads(sys.argv[1]))), flush=True)
