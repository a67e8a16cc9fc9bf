"""The sudo scenarios of perf.ab: ``sudo -l`` for bigroupuser with 1,000 rules in the
directory, and what a smart refresh costs when nothing changed, cached or SSSD 2.8.2.

The rules (:func:`rules_ldif`) are loaded with the bigroupuser directory under
``ou=sudoers``: ``defaults``, and 1,000 ``sudoRole`` entries, rule ``i`` for
``%group<i % 3000>`` (one in three of them a group bigroupuser reaches at nesting
level 2 or below, the others not), every tenth also for a user, every fiftieth for a
``+netgroup``; each runs ``/usr/bin/cmd<i>``, ``sudoHost: ALL``. ``sudo -l -U
bigroupuser`` must list exactly the commands of the rules of its groups (the netgroup
rules are sent to sudo, which finds no such netgroup: ``netgroup: files``).

Each side's daemon (``services = nss, sudo``) reaches slapd through a FaultProxy of its
own, so the bytes a refresh receives are counted on the wire alike for both; its
smart refresh runs every :data:`SMART` seconds, its full refresh not within the round.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from testing import gendir, nsenv
from testing.faultproxy import FaultProxy
from testing.slapd import Slapd

RULES = 1000
SMART = 30  # seconds between smart refreshes, both sides
WRITTEN = "20251201000000Z"  # when the rules were written
NSSWITCH = (
    "passwd: files sss\ngroup: files sss\ninitgroups: files sss\n"
    "sudoers: files sss\nnetgroup: files\n"
)
_CMD = re.compile(r"/usr/bin/cmd(\d+)")


def sudoers_dn(base: str) -> str:
    return f"ou=sudoers,{base}"


def _rule_groups(exp: gendir.Expected) -> list[str]:
    return sorted(exp.group_names())


def rules_ldif(exp: gendir.Expected) -> str:
    """The sudo entries for slapadd, written long ago (their ``modifyTimestamp`` and
    ``createTimestamp`` a year back): a directory's rules as a smart refresh finds them
    in steady state, none changed within the last minutes."""
    base = sudoers_dn(exp.base_dn)
    groups = _rule_groups(exp)
    users = sorted(exp.user_names())
    old = f"createTimestamp: {WRITTEN}\nmodifyTimestamp: {WRITTEN}\n"
    out = [
        f"dn: {base}\nobjectClass: organizationalUnit\nou: sudoers\n{old}",
        f"dn: cn=defaults,{base}\nobjectClass: sudoRole\ncn: defaults\n"
        f"sudoOption: !lecture\n{old}",
    ]
    for i in range(RULES):
        who = [f"%{groups[(i * 3) % len(groups)]}"]
        if i % 10 == 0:
            who.append(users[i % len(users)])
        if i % 50 == 0:
            who.append("+perf-ng")
        out.append(
            f"dn: cn=rule{i:04d},{base}\nobjectClass: sudoRole\n"
            f"cn: rule{i:04d}\n" + "".join(f"sudoUser: {w}\n" for w in who)
            + f"sudoHost: ALL\nsudoCommand: /usr/bin/cmd{i}\nsudoOption: !authenticate\n"
            f"sudoOrder: {i}\n{old}"
        )
    return "\n".join(out)


def with_rules(ldif: Path, exp: gendir.Expected, tmp: Path) -> Path:
    """A copy of the directory's LDIF with the sudo entries appended."""
    out = tmp / "with-sudo.ldif"
    with open(ldif) as src, open(out, "w") as dst:
        for chunk in iter(lambda: src.read(1 << 20), ""):
            dst.write(chunk)
        dst.write("\n" + rules_ldif(exp))
    return out


def expected_commands(exp: gendir.Expected, level: int) -> set[int]:
    """The rules ``sudo -l -U big_user`` lists: those of its groups and its name."""
    big = exp.big_user
    gids = exp.initgroups(big, level)
    mine = {g for g in exp.group_names() if exp.group(g).gid in gids}
    groups = _rule_groups(exp)
    users = sorted(exp.user_names())
    out = set()
    for i in range(RULES):
        if groups[(i * 3) % len(groups)] in mine or (i % 10 == 0 and users[i % len(users)] == big):
            out.add(i)
    return out


def commands_listed(output: str) -> set[int]:
    return {int(m) for m in _CMD.findall(output)}


def cached_options(server: Slapd, proxy: FaultProxy) -> dict[str, Any]:
    return {
        "ldap_uri": proxy.uri,
        "daemon": {"services": "nss, sudo"},
        "ldap_sudo_search_base": sudoers_dn(server.base_dn),
        "ldap_sudo_smart_refresh_interval": SMART,
        "ldap_sudo_random_offset": 0,
    }


def sssd_options(server: Slapd) -> dict[str, Any]:
    return {
        "sudo_provider": "ldap",
        "ldap_sudo_search_base": sudoers_dn(server.base_dn),
        "ldap_sudo_smart_refresh_interval": SMART,
    }


def sudo_rules_loaded(server: Slapd, offset: int) -> bool:
    """A full read of the sudo rules has been answered since ``offset`` (its search,
    in slapd's log, returned them all)."""
    return any(
        "sudoRole" in op.filter and (op.nentries or 0) > RULES
        for pages in server.logical_searches(offset)
        for op in pages
    )


def sudo_searches(server: Slapd, offset: int) -> int:
    return sum(
        1 for pages in server.logical_searches(offset) if "sudoRole" in pages[0].filter
    )


def wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"perf.sudo: {what} not within {timeout} s")
        time.sleep(0.2)


def netgroup_file(tmp: Path) -> Path:
    path = tmp / "netgroup"
    path.write_text("perf-ng (-,nobody-here,)\n")
    path.chmod(0o644)
    if not Path("/etc/netgroup").exists():
        Path("/etc/netgroup").touch(mode=0o644)  # a bind mount's target; empty: none
    return path


def sudo_l(user: str, netgroup: Path) -> list[str]:
    """``sudo -l -U user`` with the test's /etc/netgroup, for nsenv.run_nss."""
    return ["/bin/sh", "-c", 'mount --bind "$0" /etc/netgroup && exec "$@"', str(netgroup),
            "sudo", "-l", "-U", user]  # fmt: skip


__all__ = ["NSSWITCH", "nsenv"]
