"""`id bigroupuser` on a Samba AD DC once its cache expired: nothing changed, one group changed.

    python -m perf.adrefresh OUTDIR --workdir DIR [--cycles 3] [--ab CHECKOUT] [--dc-pid PID]

The DC is perf.adbig's (bigroupuser mapped to AD, kept loaded in ``DIR/dc``; started
here unless already running, when its pid may be given for its CPU figures). Per cycle,
with an empty cache: a cold ``id`` (through glibc and libnss_sss, memory cache off),
then the cache expired (testing.cachetime, as time passing expires it: after ``cached
cache -E`` AD reads whole, validate.distrusted) and ``id`` with nothing changed on the
DC, then one of bigroupuser's direct groups gains or loses a member (alternately), the
cache expired and ``id``. Recorded per step: the wall time of ``id``, the bytes received
from LDAP (counter ``ldap.bytes``), our searches, the groups checked and fetched whole
again (``be.validate``, ``be.validate.fetched``), the backend's CPU and the DC's.

``--ab CHECKOUT``: the same with another checkout's daemon, alternating (perf.adab).
"""

from __future__ import annotations

import subprocess
import sys

import ldap3

from cached.ldap.sid import sid_assertion, sid_to_str
from perf import adab
from perf.adbig import BIG, _gids
from testing import cachetime, gendir
from testing.addir import GROUPS, PEOPLE, _rdn_value

STEPS = ("id_cold", "id_after_expiry", "id_after_expiry_1changed")


def main() -> None:
    args = adab.parse_args(__doc__.splitlines()[0])
    d_ = gendir.build(gendir.BIGROUPUSER)
    user_dn = {u.name: f"CN={_rdn_value(u.gecos)},{PEOPLE}" for u in d_.users}
    direct = sorted(g.name for g in d_.groups if BIG in g.members)
    target = next(g.name for g in d_.groups
                  if g.name in direct and not g.member_groups and g.name != "large01")  # fmt: skip
    members = next(g.members for g in d_.groups if g.name == target)
    other = next(u.name for u in d_.users if u.name not in members)
    target_dn = f"CN={target},{GROUPS}"
    runs = adab.variants(args)
    samples: dict[str, dict[str, list[adab.Row]]] = {v: {s: [] for s in STEPS} for v in runs}
    added = False
    with adab.dc_running(args) as dc:
        conn = dc.connect()
        # The expected gids: every group of the token (tokenGroups is the closure).
        (u,) = [e for e in dc.search(PEOPLE, f"(sAMAccountName={BIG})", ["gidNumber"])]
        tok = dc.search(u["dn"], "(objectClass=*)", ["tokenGroups"], scope=ldap3.BASE)
        sids = tok[0]["raw_attributes"]["tokenGroups"]
        want = {int(u["raw_attributes"]["gidNumber"][0])}
        for i in range(0, len(sids), 500):
            filt = "(|" + "".join(
                sid_assertion("objectSid", sid_to_str(s)) for s in sids[i : i + 500]
            )
            filt += ")"
            for g in dc.search(dc.base_dn, filt, ["gidNumber"]):
                if g["raw_attributes"].get("gidNumber"):
                    want.add(int(g["raw_attributes"]["gidNumber"][0]))

        def exact(r: subprocess.CompletedProcess[str]) -> bool:
            return r.returncode == 0 and _gids(r.stdout) == want

        for cycle in range(args.cycles):
            for v, repo in runs.items():
                with adab.daemon(args.outdir / f"{v}{cycle}", repo, dc) as d:
                    d.run_nss(["getent", "passwd", "perf-warmup-no-such-user"])
                    out = samples[v]

                    argv = ["id", BIG]
                    out["id_cold"].append(adab.step(d, args.dc_pid, argv, exact, 2))
                    for _ in range(2):
                        cachetime.expire_daemon(d.db_dir)
                        out["id_after_expiry"].append(adab.step(d, args.dc_pid, argv, exact, 2))
                    op = ldap3.MODIFY_DELETE if added else ldap3.MODIFY_ADD
                    assert conn.modify(target_dn, {"member": [(op, [user_dn[other]])]})
                    added = not added
                    cachetime.expire_daemon(d.db_dir)
                    row = adab.step(d, args.dc_pid, argv, exact, 2)
                    out["id_after_expiry_1changed"].append(row)
                print(f"cycle {cycle + 1}/{args.cycles} {v} done", file=sys.stderr, flush=True)
        if added:
            conn.modify(target_dn, {"member": [(ldap3.MODIFY_DELETE, [user_dn[other]])]})
        conn.unbind()
    adab.write_summary(args.outdir, runs, samples, {"changed_group": target})


if __name__ == "__main__":
    main()
