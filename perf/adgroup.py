"""`getent group large01` on a Samba AD DC once its cache expired: nothing changed, one
member changed.

    python -m perf.adgroup OUTDIR --workdir DIR [--cycles 3] [--ab CHECKOUT] [--dc-pid PID]

The DC is perf.adbig's (bigroupuser mapped to AD, kept loaded in ``DIR/dc``; started
here unless already running, when its pid may be given for its CPU figures); large01 has
5,000 members. Per cycle, with an empty cache: a cold ``getent group large01`` (through
glibc and libnss_sss, memory cache off), then the cache expired (testing.cachetime, as
time passing expires it: after ``cached cache -E`` AD reads whole, validate.distrusted)
and the lookup with nothing changed on the DC (by name, then by gid), then large01 gains
or loses a member (alternately), the cache expired and the lookup by name. Recorded per
step: the wall time of ``getent``, the bytes received from LDAP (counter
``ldap.bytes``), our searches, the lookups validated by stamps and those fetched whole
after one (``be.validate``, ``be.validate.fetched``), the backend's CPU and the DC's.

``--ab CHECKOUT``: the same with another checkout's daemon, alternating (perf.adab).
"""

from __future__ import annotations

import subprocess
import sys

import ldap3

from perf import adab
from testing import cachetime, gendir
from testing.addir import GROUPS, PEOPLE, _rdn_value
from testing.daemon import CachedDaemon

GROUP = "large01"
STEPS = ("group_cold", "group_after_expiry", "gid_after_expiry", "group_after_expiry_1changed")


def _getent(d: CachedDaemon, dc_pid: int | None, key: str, want: tuple[int, int]) -> adab.Row:
    """``getent group KEY``, measured; its answer must have gid and member count ``want``."""

    def exact(r: subprocess.CompletedProcess[str]) -> bool:
        fields = r.stdout.rstrip("\n").split(":")
        if r.returncode != 0 or len(fields) != 4:
            return False
        return (int(fields[2]), len(fields[3].split(","))) == want

    return adab.step(d, dc_pid, ["getent", "group", key], exact, 0)


def main() -> None:
    args = adab.parse_args(__doc__.splitlines()[0])
    d_ = gendir.build(gendir.BIGROUPUSER)
    g = next(g for g in d_.groups if g.name == GROUP)
    assert not g.member_groups
    other = next(u for u in d_.users if u.name not in g.members)
    other_dn = f"CN={_rdn_value(other.gecos)},{PEOPLE}"
    target_dn = f"CN={GROUP},{GROUPS}"
    runs = adab.variants(args)
    samples: dict[str, dict[str, list[adab.Row]]] = {v: {s: [] for s in STEPS} for v in runs}
    added = False
    n = len(g.members)
    with adab.dc_running(args) as dc:
        conn = dc.connect()
        for cycle in range(args.cycles):
            for v, repo in runs.items():
                with adab.daemon(args.outdir / f"{v}{cycle}", repo, dc) as d:
                    d.run_nss(["getent", "passwd", "perf-warmup-no-such-user"])
                    out = samples[v]

                    want = (g.gid, n + added)
                    out["group_cold"].append(_getent(d, args.dc_pid, GROUP, want))
                    for _ in range(2):
                        cachetime.expire_daemon(d.db_dir)
                        out["group_after_expiry"].append(_getent(d, args.dc_pid, GROUP, want))
                        cachetime.expire_daemon(d.db_dir)
                        out["gid_after_expiry"].append(_getent(d, args.dc_pid, str(g.gid), want))
                    op = ldap3.MODIFY_DELETE if added else ldap3.MODIFY_ADD
                    assert conn.modify(target_dn, {"member": [(op, [other_dn])]}), conn.result
                    added = not added
                    want = (g.gid, n + added)
                    cachetime.expire_daemon(d.db_dir)
                    out["group_after_expiry_1changed"].append(_getent(d, args.dc_pid, GROUP, want))
                print(f"cycle {cycle + 1}/{args.cycles} {v} done", file=sys.stderr, flush=True)
        if added:
            conn.modify(target_dn, {"member": [(ldap3.MODIFY_DELETE, [other_dn])]})
        conn.unbind()
    adab.write_summary(args.outdir, runs, samples, {"group": GROUP, "members": n})


if __name__ == "__main__":
    main()
