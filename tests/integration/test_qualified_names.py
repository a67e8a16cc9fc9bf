"""The sssd.conf realmd writes for a joined domain — ``use_fully_qualified_names =
True``, ``fallback_homedir = /home/%u@%d``, ``default_shell = /bin/bash`` — loads
unchanged and answers through glibc and the real libnss_sss as SSSD 2.8.2 does: names,
group members and initgroups qualified, from the socket and again from the memory
cache (keyed by the qualified name libnss_sss hashes); an unqualified name is not
found in that domain."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.checks import SOCKET_ONLY
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

pytestmark = requires_nss

BASE = "dc=qn,dc=t"
DOM = "ad.example.test"


def _user(uid: str, number: int) -> str:
    # homeDirectory is a MUST of posixAccount: an empty value stands for none.
    return (
        f"\ndn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
        f"objectClass: posixAccount\ncn: {uid}\nsn: x\nuid: {uid}\n"
        f"uidNumber: {number}\ngidNumber: 20000\nhomeDirectory: \n"
    )


def _group(cn: str, gid: int, members: list[str]) -> str:
    values = "".join(f"member: uid={m},ou=people,{BASE}\n" for m in members)
    return (f"\ndn: cn={cn},ou=groups,{BASE}\nobjectClass: groupOfNames\n"
            f"objectClass: posixGroup\ncn: {cn}\ngidNumber: {gid}\n{values}")  # fmt: skip


LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: qn\no: qn\n"
    f"\ndn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n"
    f"\ndn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n"
    + _user("alice", 10001) + _user("Bob", 10002)
    + _group("staff", 20000, ["alice", "Bob"]) + _group("dev", 20001, ["alice"])
    + _group("domain users", 20002, ["Bob"])
)  # fmt: skip


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("qualified")
    (d / "d.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "d.ldif", BASE) as s:
        yield s


def _run(d: CachedDaemon, argv: list[str], env: dict[str, str] | None) -> str:
    r = d.run_nss(argv, env=env)
    return r.stdout.strip() if r.returncode == 0 else f"status {r.returncode}"


def test_realmd_style_configuration_through_glibc(tmp_path: Path, slapd: Slapd) -> None:
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, domain=DOM,
                     use_fully_qualified_names="True", fallback_homedir="/home/%u@%d",
                     default_shell="/bin/bash", case_sensitive="false")  # fmt: skip
    d.start()
    owned = tmp_path / "owned"
    owned.write_text("x")
    os.chown(owned, 10001, 20001)
    try:
        alice, bob = f"alice@{DOM}", f"bob@{DOM}"
        for env in (SOCKET_ONLY, None, None):  # the socket, then the memory cache
            assert _run(d, ["getent", "passwd", alice], env) == (
                f"{alice}:*:10001:20000:alice:/home/alice@{DOM}:/bin/bash"
            )
            # Case-insensitive domain: any case finds Bob, answered lower-case.
            assert _run(d, ["getent", "passwd", f"BOB@{DOM.upper()}"], env) == (
                f"{bob}:*:10002:20000:Bob:/home/bob@{DOM}:/bin/bash"
            )
            assert _run(d, ["getent", "passwd", "10001"], env).startswith(f"{alice}:")
            assert _run(d, ["getent", "group", f"staff@{DOM}"], env) == (
                f"staff@{DOM}:*:20000:{alice},{bob}"
            )
            assert _run(d, ["getent", "group", "20001"], env) == f"dev@{DOM}:*:20001:{alice}"
            assert _run(d, ["id", alice], env) == (
                f"uid=10001({alice}) gid=20000(staff@{DOM}) "
                f"groups=20000(staff@{DOM}),20001(dev@{DOM})"
            )
            listing = _run(d, ["ls", "-l", str(owned)], env).split()
            assert listing[2:4] == [alice, f"dev@{DOM}"]
            # A domain with qualified names answers none but qualified names.
            assert _run(d, ["getent", "passwd", "alice"], env) == "status 2"
            assert _run(d, ["getent", "group", "staff"], env) == "status 2"
    finally:
        d.stop()


def test_unqualified_domain_answers_a_qualified_lookup_with_the_plain_name(
    tmp_path: Path, slapd: Slapd
) -> None:
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, domain="LDAP")
    d.start()
    try:
        for env in (SOCKET_ONLY, None):
            assert _run(d, ["getent", "passwd", "alice@ldap"], env) == (
                "alice:*:10001:20000:alice::"
            )
            assert _run(d, ["getent", "passwd", "alice"], env) == "alice:*:10001:20000:alice::"
            assert _run(d, ["id", "alice@LDAP"], env) == (
                "uid=10001(alice) gid=20000(staff) groups=20000(staff),20001(dev)"
            )
            assert _run(d, ["getent", "passwd", "alice@elsewhere"], env) == "status 2"
    finally:
        d.stop()


def test_default_domain_suffix_and_override_space_through_glibc(
    tmp_path: Path, slapd: Slapd
) -> None:
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, domain=DOM,
                     daemon={"default_domain_suffix": DOM, "override_space": "_"})  # fmt: skip
    d.start()
    try:
        for env in (SOCKET_ONLY, None, None):
            # Unqualified names are the suffix domain's, answered qualified.
            assert _run(d, ["getent", "passwd", "alice"], env) == (
                f"alice@{DOM}:*:10001:20000:alice::"
            )
            assert _run(d, ["getent", "group", "domain_users"], env) == (
                f"domain_users@{DOM}:*:20002:Bob@{DOM}"
            )
            assert _run(d, ["getent", "group", f"domain_users@{DOM}"], env) == (
                f"domain_users@{DOM}:*:20002:Bob@{DOM}"
            )
            assert _run(d, ["id", "Bob"], env) == (
                f"uid=10002(Bob@{DOM}) gid=20000(staff@{DOM}) "
                f"groups=20000(staff@{DOM}),20002(domain_users@{DOM})"
            )
    finally:
        d.stop()
