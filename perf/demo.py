"""``make demo``: a directory with a user in 2,085 groups, answered through glibc.

1. generate the bigroupuser directory (5,001 users, 3,000 groups, nested 3 deep);
2. start a private slapd on a free loopback port with it;
3. start ``cached serve`` with its sockets, caches and memory cache in a temp dir;
4. run ``id bigroupuser`` through glibc and the distribution's libnss_sss, inside a
   private mount namespace where /var/lib/sss/{pipes,mc} are the demo's (as root;
   otherwise through ``cached id``, the Python client of the same protocol), under
   ``cached perf`` so the id_perf breakdown of that cold lookup is printed;
5. run it again warm (memory cache), show ``cached status``; stop everything.

Nothing outside the temp directory is touched, except the two empty mount points
/var/lib/sss/{pipes,mc} created when missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from testing.daemon import CachedDaemon
from testing.gendir import BIGROUPUSER, generate
from testing.nsenv import nss_command, skip_reason
from testing.slapd import Slapd


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cached-demo-"))
    through_glibc = skip_reason() is None
    try:
        say("1. Generating the bigroupuser directory (rfc2307bis, nested groups)")
        t = time.monotonic()
        gen = generate(BIGROUPUSER, work / "gen")
        exp = gen.expected()
        want = exp.initgroups("bigroupuser", 2)
        print(f"   {gen.ldif} ({gen.ldif.stat().st_size // 1024} KiB) in "
              f"{time.monotonic() - t:.1f} s; bigroupuser is in {len(want)} groups at "
              "ldap_group_nesting_level = 2 (2,000 direct + 84 nested + its primary)")  # fmt: skip

        say("2. Starting a private slapd")
        with Slapd(work / "slapd", gen.ldif, exp.base_dn) as slapd:
            print(f"   {slapd.uri} (pid {slapd.pid}), base {slapd.base_dn}")

            say("3. Starting cached serve (monitor, LDAP backend, NSS responder)")
            with CachedDaemon(work / "cached", [slapd.uri], slapd.base_dn,
                              log_level="info") as d:  # fmt: skip
                print(f"   config {d.config_path}; sockets in {d.pipes_dir}")
                print("   " + d.config_path.read_text().replace("\n", "\n   ").rstrip())
                if through_glibc:
                    cmd = nss_command(["id", "bigroupuser"], d.pipes_dir, d.mc_dir)
                    how = "id bigroupuser  (glibc + libnss_sss, private mount namespace)"
                else:
                    print(f"   (not through glibc: {skip_reason()}; using cached id)")
                    cmd = [sys.executable, "-m", "cached", "id", "-c", str(d.config_path),
                           "bigroupuser"]  # fmt: skip
                    how = "cached id bigroupuser  (Python client of the NSS protocol)"

                say(f"4. Cold: {how}, under cached perf")
                searches_before = slapd.log_offset()
                r = d.cli("perf", "--command-name", "id", "--", *cmd)
                print("   " + r.stdout.replace("\n", "\n   ").rstrip())
                print(f"   slapd logged {slapd.count_logical_searches(searches_before)} "
                      "searches for it (SSSD 2.8.2 makes 5,850 for the same id)")  # fmt: skip
                out = d.run_nss(["id", "bigroupuser"]).stdout if through_glibc else ""
                if out:
                    groups = out.split("groups=", 1)[1].split(",")
                    print(f"   id printed {len(groups)} groups: {','.join(groups[:4])},... ")
                    ok = {int(g.split("(")[0]) for g in groups} == want
                    print(f"   equal to the generator's expected answer: {ok}")

                say("5. Warm: the same id again (memory cache: the daemon is not asked)")
                r = d.cli("perf", "--command-name", "id", "--", *cmd)
                print("   " + "\n   ".join(r.stdout.splitlines()[:6]))

                say("cached status")
                print("   " + d.cli("status").stdout.replace("\n", "\n   ").rstrip())
        say("Stopped cached and slapd.")
        return 0
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
