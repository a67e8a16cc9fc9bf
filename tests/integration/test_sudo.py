"""Sudo rules from the directory through Debian's real ``sudo`` and ``libsss_sudo``.

The daemon runs with ``services = nss, sudo``; each command runs in a private mount
namespace (testing/nsenv.py) with ``sudoers: files sss`` and ``netgroup: sss``: a
``+netgroup`` rule is matched by sudo itself through ``innetgr(3)``, which libnss_sss
asks of the NSS responder, the netgroup an entry in the test's directory. sudo runs
setuid root there as everywhere; ``sudo -l -U NAME`` as root, ``sudo -n`` as the user
through ``setpriv``.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.responder import wire
from cached.sudo import protocol as p
from testing import nsenv, sssd
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

LIBSSS_SUDO = Path("/usr/lib/x86_64-linux-gnu/libsss_sudo.so")
pytestmark = [
    requires_nss,
    pytest.mark.skipif(
        not (LIBSSS_SUDO.exists() and shutil.which("sudo")),
        reason="needs sudo and libsss-sudo (contrib/install-deps installs them)",
    ),
]

BASE = "dc=sudo,dc=t"
SUDOERS = f"ou=sudoers,{BASE}"
NSSWITCH = (
    "passwd: files sss\ngroup: files sss\ninitgroups: files sss\n"
    "sudoers: files sss\nnetgroup: sss\n"
)


def _user(uid: str, number: int) -> str:
    return (
        f"\ndn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
        f"objectClass: posixAccount\ncn: {uid}\nsn: x\nuid: {uid}\n"
        f"uidNumber: {number}\ngidNumber: 20000\nhomeDirectory: /tmp\nloginShell: /bin/sh\n"
    )


def _group(cn: str, gid: int, *members: str) -> str:
    return (
        f"\ndn: cn={cn},ou=groups,{BASE}\nobjectClass: groupOfNames\nobjectClass: posixGroup\n"
        f"cn: {cn}\ngidNumber: {gid}\n" + "".join(f"member: {m}\n" for m in members)
    )


# The rules were written long ago (slapadd keeps the stamps given): past the clock-skew
# margin, a smart refresh asks only for later seconds.
WRITTEN = "20251201000000Z"


def _rule(cn: str, **attrs: str | list[str]) -> str:
    lines = [f"\ndn: cn={cn},{SUDOERS}", "objectClass: sudoRole", f"cn: {cn}",
             f"modifyTimestamp: {WRITTEN}", f"createTimestamp: {WRITTEN}"]  # fmt: skip
    for k, v in attrs.items():
        lines += [f"{k}: {x}" for x in ([v] if isinstance(v, str) else v)]
    return "\n".join(lines) + "\n"


def people(uid: str) -> str:
    return f"uid={uid},ou=people,{BASE}"


LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: sudo\no: sudo\n"
    f"\ndn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n"
    f"\ndn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n"
    f"\ndn: {SUDOERS}\nobjectClass: organizationalUnit\nou: sudoers\n"
    f"\ndn: ou=netgroups,{BASE}\nobjectClass: organizationalUnit\nou: netgroups\n"
    f"\ndn: cn=sudoers-ng,ou=netgroups,{BASE}\nobjectClass: nisNetgroup\ncn: sudoers-ng\n"
    "nisNetgroupTriple: (-,carol,)\n"
    + _user("alice", 10001)
    + _user("bob", 10002)
    + _user("carol", 10003)
    + _group("staff", 20000, people("alice"), people("bob"), people("carol"))
    + _group("inner", 20001, people("alice"))
    # admins reaches alice only through inner: a %group rule by nesting.
    + _group("admins", 20002, f"cn=inner,ou=groups,{BASE}")
    + _rule("defaults", sudoOption="env_keep+=CACHED_SUDO_TEST")
    + _rule("admins-all", sudoUser="%admins", sudoHost="ALL", sudoCommand="ALL",
            sudoRunAsUser="ALL", sudoOption="!authenticate", sudoOrder="10")
    + _rule("ng-id", sudoUser="+sudoers-ng", sudoHost="ALL", sudoCommand="/usr/bin/id",
            sudoOption="!authenticate", sudoOrder="5")
    + _rule("bob-true", sudoUser="bob", sudoHost="ALL", sudoCommand="/bin/true",
            sudoOption="!authenticate", sudoOrder="3")
    + _rule("elsewhere", sudoUser="ALL", sudoHost="not-this-host.example",
            sudoCommand="/bin/false", sudoOrder="1")
)  # fmt: skip


@pytest.fixture
def slapd(tmp_path: Path) -> Iterator[Slapd]:
    (tmp_path / "d.ldif").write_text(LDIF)
    with Slapd(tmp_path / "s", tmp_path / "d.ldif", BASE) as s:
        yield s


def daemon(tmp_path: Path, slapd: Slapd, **opts: Any) -> CachedDaemon:
    opts.setdefault("ldap_sudo_random_offset", 0)
    return CachedDaemon(tmp_path / "c", [slapd.uri], BASE, daemon={"services": "nss, sudo"},
                        ldap_sudo_search_base=SUDOERS, **opts)  # fmt: skip


def sudo(
    d: CachedDaemon | sssd.SssdDaemon, *args: str, as_uid: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``sudo ARGS`` in the namespace, as root or as ``as_uid`` (its groups from NSS)."""
    who = [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", "--regid=20000",
                                     "--init-groups", "--"]  # fmt: skip
    return nsenv.run_nss(
        [*who, "sudo", *args], d.pipes_dir, d.mc_dir, nsswitch=NSSWITCH, timeout=120
    )


def rules_of(d: CachedDaemon | sssd.SssdDaemon, user: str) -> str:
    r = sudo(d, "-l", "-U", user)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def sudo_status(d: CachedDaemon) -> dict[str, Any]:
    for child in d.control("status")["children"]:
        if child["name"].startswith("backend"):
            return dict(child["status"]["sudo"])
    raise LookupError("no backend")


def started(d: CachedDaemon) -> CachedDaemon:
    """``d`` started, its first full refresh done (it runs at once at the first start,
    in the background: a sudo call before it finds no rules, as with SSSD)."""
    d.start()
    wait_for(lambda: sudo_status(d)["last_full"] > 0)
    return d


GET_SUDORULES, GET_DEFAULTS = p.Command.GET_SUDORULES, p.Command.GET_DEFAULTS


def ask(pipes_dir: Path, cmd: int, uid: int, user: str) -> p.Reply:
    """One query on ``<pipes_dir>/sudo`` as libsss_sudo makes it (version first)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(60)
        s.connect(str(pipes_dir / "sudo"))
        out = []
        for c, body in ((p.Command.GET_VERSION, struct.pack("=I", 1)),
                        (cmd, p.query_body(uid, user))):  # fmt: skip
            conn = wire.ClientConnection()
            s.sendall(conn.send_request(c, body))
            while isinstance(reply := conn.next_reply(), wire.NeedData):
                data = s.recv(65536)
                assert data, "the sudo responder closed the connection"
                conn.receive_data(data)
            out.append(reply)
    assert struct.unpack("=I", out[0].body) == (1,)
    return p.decode_reply(out[1].body)


def wait_for(cond: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_rules_through_sudo_and_libsss_sudo(tmp_path: Path, slapd: Slapd) -> None:
    d = started(daemon(tmp_path, slapd))
    try:
        out = rules_of(d, "alice")
        # The %admins rule, reached through inner, and the LDAP defaults.
        assert "(ALL) NOPASSWD: ALL" in out, out
        assert "/usr/bin/id" not in out and "/bin/true" not in out and "/bin/false" not in out
        ran = sudo(d, "-n", "-u", "root", "id", "-u", as_uid=10001)
        assert (ran.returncode, ran.stdout.strip()) == (0, "0"), ran.stderr
        # bob: his own rule only; nothing else runs.
        out = rules_of(d, "bob")
        assert "NOPASSWD: /bin/true" in out and "ALL" not in out.split("may run")[-1], out
        denied = sudo(d, "-n", "-u", "root", "id", "-u", as_uid=10002)
        assert denied.returncode != 0
        # carol: the +netgroup rule, matched by sudo itself through innetgr (sss).
        out = rules_of(d, "carol")
        assert "NOPASSWD: /usr/bin/id" in out, out
        ran = sudo(d, "-n", "/usr/bin/id", "-u", as_uid=10003)
        assert (ran.returncode, ran.stdout.strip()) == (0, "0"), ran.stderr
        # `sudo -l` does not list the sss defaults (nor with SSSD): asked on the socket.
        (defaults,) = ask(d.pipes_dir, GET_DEFAULTS, 10001, "alice").rules
        assert ("sudoOption", ["env_keep+=CACHED_SUDO_TEST"]) in defaults
        assert ask(d.pipes_dir, GET_SUDORULES, 4242, "nobody-here") == p.Reply(errno.ENOENT, [])
        st = sudo_status(d)
        assert st["rules"] == 4  # "elsewhere" is not for this host
        assert st["runs"]["full"]["outcome"] == "found"
        shown = d.cli("status").stdout
        assert "sudo rules: 4; last full refresh" in shown, shown
        assert "last full refresh: found, 1 searches" in shown, shown
        assert "sudo responder: " in shown, shown
        mode = os.stat(d.pipes_dir / "sudo")
        assert (mode.st_uid, stat.S_IMODE(mode.st_mode)) == (0, 0o600)
    finally:
        d.stop()


def test_smart_refresh_sees_changes_by_stamps_and_deletions_wait_for_a_full_one(
    tmp_path: Path, slapd: Slapd
) -> None:
    d = started(daemon(tmp_path, slapd, ldap_sudo_smart_refresh_interval=1))
    try:
        before = sudo_status(d)["last_smart"]
        wait_for(lambda: sudo_status(d)["last_smart"] > before)
        # Nothing changed: one search that the server answered with no rule, nothing
        # written to the entry store.
        run = sudo_status(d)["runs"]["smart"]
        assert (run["searches"], run["entries"], run["fetched"], run["entry_records"]) == (
            1, 0, 0, 0
        ), run
        slapd.ldap_modify(
            f"dn: cn=ng-id,{SUDOERS}\nchangetype: modify\nreplace: sudoCommand\n"
            "sudoCommand: /usr/bin/whoami\n"
            f"\ndn: cn=bob-true,{SUDOERS}\nchangetype: delete\n"
        )
        wait_for(lambda: sudo_status(d)["runs"]["smart"]["fetched"] == 1)
        assert "/usr/bin/whoami" in rules_of(d, "carol")
        # Within the clock-skew margin of the newest stamp, its second is asked for
        # again: the changed rule's stamps come back, equal, and nothing is read whole.
        last = sudo_status(d)["last_smart"]
        wait_for(lambda: sudo_status(d)["last_smart"] > last)
        run = sudo_status(d)["runs"]["smart"]
        assert (run["entries"], run["fetched"], run["entry_records"]) == (1, 0, 0), run
        # SSSD's smart refresh cannot see a deletion, nor can this one: bob keeps the
        # rule until a full refresh, or until it expires and his next sudo call
        # refreshes his rules by name (`cached cache -r` expires it now).
        assert "/bin/true" in rules_of(d, "bob")
        r = d.cli("cache", "-r", "bob-true")
        assert r.returncode == 0, r.stderr
        assert "/bin/true" not in rules_of(d, "bob")
        assert sudo_status(d)["rules"] == 3
    finally:
        d.stop()


def test_a_full_refresh_drops_deleted_rules(tmp_path: Path, slapd: Slapd) -> None:
    d = started(daemon(tmp_path, slapd, ldap_sudo_full_refresh_interval=2,
                       ldap_sudo_smart_refresh_interval=0))  # fmt: skip
    try:
        assert "/bin/true" in rules_of(d, "bob")
        slapd.ldap_modify(f"dn: cn=bob-true,{SUDOERS}\nchangetype: delete\n")
        wait_for(lambda: sudo_status(d)["runs"]["full"]["deleted"] == 1)
        assert "/bin/true" not in rules_of(d, "bob")
        # The next full refresh finds nothing changed: timestamps only.
        last = sudo_status(d)["last_full"]
        wait_for(lambda: sudo_status(d)["last_full"] > last)
        run = sudo_status(d)["runs"]["full"]
        assert (run["changed"], run["entry_records"]) == (0, 0), run
    finally:
        d.stop()


def test_rules_apply_with_the_server_down(tmp_path: Path, slapd: Slapd) -> None:
    d = started(daemon(tmp_path, slapd))
    try:
        assert "(ALL) NOPASSWD: ALL" in rules_of(d, "alice")
        assert "/usr/bin/id" in rules_of(d, "carol")  # carol cached too
        slapd.stop()
        # Expired rules, the server down: the refresh a sudo call asks for fails, the
        # cached rules apply.
        r = d.cli("cache", "-E")
        assert r.returncode == 0, r.stderr
        assert "(ALL) NOPASSWD: ALL" in rules_of(d, "alice")
        ran = sudo(d, "-n", "-u", "root", "id", "-u", as_uid=10001)
        assert (ran.returncode, ran.stdout.strip()) == (0, "0"), ran.stderr
        ran = sudo(d, "-n", "/usr/bin/id", "-u", as_uid=10003)
        assert (ran.returncode, ran.stdout.strip()) == (0, "0"), ran.stderr
    finally:
        d.stop()
        slapd.start()


@pytest.mark.skipif(sssd.skip_reason() is not None, reason=sssd.skip_reason() or "")
def test_sudo_l_and_the_wire_replies_are_sssd_s(tmp_path: Path, slapd: Slapd) -> None:
    ours = started(daemon(tmp_path, slapd))
    theirs = sssd.SssdDaemon(tmp_path / "sssd", slapd.uri, BASE, responders={"sudo": {}},
                             ldap_sudo_search_base=SUDOERS)  # fmt: skip
    theirs.start()
    try:
        # SSSD's first full refresh runs in the background too: wait for its rules.
        wait_for(lambda: ask(theirs.pipes_dir, GET_DEFAULTS, 10001, "alice").rules != [])
        for user, uid in (("alice", 10001), ("bob", 10002), ("carol", 10003)):
            assert rules_of(ours, user) == rules_of(theirs, user)
            for cmd in (GET_SUDORULES, GET_DEFAULTS):
                assert ask(ours.pipes_dir, cmd, uid, user) == ask(theirs.pipes_dir, cmd, uid, user)
        assert ask(ours.pipes_dir, GET_SUDORULES, 1, "nobody-here") == ask(
            theirs.pipes_dir, GET_SUDORULES, 1, "nobody-here"
        )
    finally:
        theirs.stop()
        ours.stop()


def test_sudo_timed_leaves_out_rules_outside_their_window(tmp_path: Path, slapd: Slapd) -> None:
    slapd.ldap_modify(
        f"dn: cn=past,{SUDOERS}\nchangetype: add\nobjectClass: sudoRole\ncn: past\n"
        "sudoUser: %admins\nsudoHost: ALL\nsudoCommand: /usr/bin/past\n"
        "sudoNotAfter: 20200101000000Z\n"
    )
    d = started(daemon(tmp_path, slapd, sudo={"sudo_timed": "true"}))
    try:
        rules = ask(d.pipes_dir, GET_SUDORULES, 10001, "alice").rules
        assert sorted(dict(r)["cn"][0] for r in rules) == ["admins-all", "ng-id"]
        assert "/usr/bin/past" not in rules_of(d, "alice")
    finally:
        d.stop()
    untimed = started(daemon(tmp_path / "untimed", slapd))
    try:
        rules = ask(untimed.pipes_dir, GET_SUDORULES, 10001, "alice").rules
        assert sorted(dict(r)["cn"][0] for r in rules) == ["admins-all", "ng-id", "past"]
        # Not timed, the rule is sudo's to judge: `sudo -l` lists it with its window.
        assert "NOTAFTER=20200101000000Z /usr/bin/past" in rules_of(untimed, "alice")
    finally:
        untimed.stop()
