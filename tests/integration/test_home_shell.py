"""sssd.conf's home directory and shell options through glibc and the real
libnss_sss: `getent passwd` answers what SSSD 2.8.2's NSS responder would, from the
socket and again from the memory cache (both are built from one output user,
policy.ServePolicy.output_user), with the daemon reading the host's /etc/shells as
SSSD does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cached.responder.homeshell import read_etc_shells
from testing.checks import SOCKET_ONLY
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

pytestmark = requires_nss

BASE = "dc=hs,dc=t"


def _user(uid: str, number: int, home: str | None, shell: str | None) -> str:
    return (
        f"\ndn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
        f"objectClass: posixAccount\ncn: {uid}\nsn: x\nuid: {uid}\n"
        f"uidNumber: {number}\ngidNumber: 20000\n"
        + (f"homeDirectory: {home}\n" if home else "homeDirectory: \n")
        + (f"loginShell: {shell}\n" if shell else "")
    )


# homeDirectory is a MUST of posixAccount: an empty value stands for "none" (SSSD
# stores no attribute for it either).
LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: hs\no: hs\n"
    f"\ndn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n"
    f"\ndn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n"
    f"\ndn: cn=staff,ou=groups,{BASE}\nobjectClass: groupOfNames\nobjectClass: posixGroup\n"
    f"cn: staff\ngidNumber: 20000\nmember: uid=ann,ou=people,{BASE}\n"
    + _user("ann", 10001, "/home/ann", "/bin/bash")  # in /etc/shells
    + _user("bob", 10002, None, None)  # neither: fallback_homedir, default_shell
    + _user("cid", 10003, "/export/Cid", "/bin/tcsh-allowed")  # allowed, not installed
    + _user("dan", 10004, "/home/dan", "/bin/ksh-unknown")  # neither allowed nor installed
)


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("homeshell")
    (d / "d.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "d.ldif", BASE) as s:
        yield s


def _getent(d: CachedDaemon, key: str, env: dict[str, str] | None) -> str:
    r = d.run_nss(["getent", "passwd", key], env=env)
    return r.stdout.strip() if r.returncode == 0 else f"status {r.returncode}"


def test_realmd_style_home_and_shell_through_glibc(tmp_path: Path, slapd: Slapd) -> None:
    assert "/bin/bash" in read_etc_shells()
    nss = {"allowed_shells": "/bin/tcsh-allowed", "shell_fallback": "/bin/bash",
           "homedir_substring": "/srv"}  # fmt: skip
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, nss=nss,
                     fallback_homedir="/home/%u@%d", default_shell="/bin/bash")  # fmt: skip
    d.start()
    try:
        want = {
            "ann": "ann:*:10001:20000:ann:/home/ann:/bin/bash",
            "bob": "bob:*:10002:20000:bob:/home/bob@LDAP:/bin/bash",
            "cid": "cid:*:10003:20000:cid:/export/Cid:/bin/bash",
            "dan": "dan:*:10004:20000:dan:/home/dan:/sbin/nologin",
        }
        for env in (SOCKET_ONLY, None, None):  # the socket, then the memory cache
            assert {n: _getent(d, n, env) for n in want} == want
            assert _getent(d, "10002", env) == want["bob"]
    finally:
        d.stop()


def test_override_templates_through_glibc(tmp_path: Path, slapd: Slapd) -> None:
    nss = {"override_homedir": "/nss/%u", "override_shell": "/bin/nss-shell"}
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, nss=nss, case_sensitive="false",
                     override_homedir="%H/%l/%U%h/%%", homedir_substring="/srv")  # fmt: skip
    d.start()
    try:
        for env in (SOCKET_ONLY, None, None):
            assert _getent(d, "cid", env) == (
                "cid:*:10003:20000:cid:/srv/c/10003/export/cid/%:/bin/nss-shell"
            )
            assert _getent(d, "10001", env) == (
                "ann:*:10001:20000:ann:/srv/a/10001/home/ann/%:/bin/nss-shell"
            )
    finally:
        d.stop()


def test_override_gid_and_filtered_users_in_groups_through_glibc(
    tmp_path: Path, slapd: Slapd
) -> None:
    nss = {"filter_users": "root, ann", "filter_users_in_groups": "false"}
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, override_gid=30000, nss=nss)
    d.start()
    try:
        for env in (SOCKET_ONLY, None, None):
            assert _getent(d, "bob", env) == "bob:*:10002:30000:bob::"
            assert _getent(d, "ann", env) == "status 2"
            r = d.run_nss(["getent", "group", "staff"], env=env)
            assert r.stdout.strip() == "staff:*:20000:ann"
    finally:
        d.stop()
