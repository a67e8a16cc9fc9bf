"""``auto_private_groups = true | hybrid`` through glibc and the real libnss_sss, beside
SSSD 2.8.2 on the same slapd: each user's private group (gid = uid, named as the user,
no members) answered by getgrgid and getgrnam and as `id`'s primary group, from the
socket and again from the memory cache; with ``true`` the directory's gidNumber becomes
one of the user's groups; with ``hybrid`` only a user whose gidNumber is its uid has
one, and only while no real group has that gid (by gid) or that name (by name).

The directory's shapes without a collision between a private group and a real one are
answered as SSSD answers them, lookups in either order. Where they collide, SSSD's
answer depends on which entry its cache stored first (sysdb_add_user and
sysdb_add_group refuse the second); cached's does not (docs/compatibility.md, "Private
groups"), and those lookups are checked against cached's rule alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing import sssd
from testing.checks import SOCKET_ONLY
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

pytestmark = requires_nss

BASE = "dc=upg,dc=t"


def _user(uid: str, number: int, gid: int) -> str:
    return (
        f"\ndn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
        f"objectClass: posixAccount\ncn: {uid}\nsn: x\nuid: {uid}\n"
        f"uidNumber: {number}\ngidNumber: {gid}\nhomeDirectory: /home/{uid}\n"
    )


def _group(cn: str, gid: int, members: list[str]) -> str:
    values = "".join(f"member: uid={m},ou=people,{BASE}\n" for m in members)
    return (f"\ndn: cn={cn},ou=groups,{BASE}\nobjectClass: groupOfNames\n"
            f"objectClass: posixGroup\ncn: {cn}\ngidNumber: {gid}\n{values}")  # fmt: skip


# alice: gidNumber is a real group (staff); bob: gidNumber = uid and no group has it
# (the private group hybrid makes); dave: gidNumber = uid and a real group has it;
# erin: gidNumber = uid and a real group has her name, with another gid.
LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: upg\no: upg\n"
    f"\ndn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n"
    f"\ndn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n"
    + _user("alice", 10001, 20000) + _user("bob", 10002, 10002)
    + _user("dave", 10004, 10004) + _user("erin", 10005, 10005)
    + _group("staff", 20000, ["bob"]) + _group("dev", 20001, ["alice", "bob"])
    + _group("davegrp", 10004, ["dave"]) + _group("erin", 20005, ["erin"])
)  # fmt: skip

# Lookups whose answers no collision touches: cached and SSSD must agree.
COMMON = [
    ["getent", "passwd", "alice"],
    ["getent", "passwd", "bob"],
    ["getent", "group", "alice"],
    ["getent", "group", "10001"],
    ["getent", "group", "bob"],
    ["getent", "group", "10002"],
    ["getent", "group", "staff"],
    ["getent", "group", "20000"],
    ["getent", "initgroups", "alice"],
    ["getent", "initgroups", "bob"],
    ["id", "alice"],
    ["id", "bob"],
    ["getent", "group", "nosuch"],
    ["getent", "group", "10009"],
]
USERS_FIRST = [c for c in COMMON if c[1] in ("passwd", "initgroups") or c[0] == "id"]
ORDERS = {
    "users first": USERS_FIRST + [c for c in COMMON if c not in USERS_FIRST],
    "groups first": [c for c in COMMON if c not in USERS_FIRST] + USERS_FIRST,
}


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("upg")
    (d / "d.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "d.ldif", BASE) as s:
        yield s


def _normal(argv: list[str], text: str) -> str:
    """The answer with its groups in gid order: SSSD lists the original primary group
    last, cached's lists are in gid order, and glibc keeps either (not a difference)."""
    if argv[:2] == ["getent", "initgroups"]:
        name, *gids = text.split()
        return " ".join([name, *sorted(gids, key=int)])
    if argv[0] == "id" and " groups=" in text:
        head, groups = text.split(" groups=")
        items = sorted(groups.split(","), key=lambda g: int(g.split("(")[0]))
        return f"{head} groups={','.join(items)}"
    return text


def _answers(run: object, lookups: list[list[str]], env: dict[str, str] | None) -> dict[str, str]:
    out = {}
    for argv in lookups:
        r = run(argv, env=env)  # type: ignore[operator]
        text = r.stdout.strip()
        out[" ".join(argv)] = _normal(argv, text) if r.returncode == 0 else f"status {r.returncode}"
    return out


def _cached(tmp: Path, slapd: Slapd, mode: str) -> CachedDaemon:
    return CachedDaemon(tmp, [slapd.uri], BASE, auto_private_groups=mode,
                        ldap_schema="rfc2307bis")  # fmt: skip


def _sssd_answers(tmp: Path, slapd: Slapd, mode: str, lookups: list[list[str]]) -> dict[str, str]:
    s = sssd.SssdDaemon(tmp, slapd.uri, BASE, auto_private_groups=mode)
    s.start()
    try:
        return _answers(s.run_nss, lookups, SOCKET_ONLY)
    finally:
        s.stop()


TRUE_WANT = {
    "getent passwd alice": "alice:*:10001:10001:alice:/home/alice:",
    "getent group alice": "alice:*:10001:",
    "getent group 10001": "alice:*:10001:",
    "getent initgroups alice": "alice 20000 20001",
    "id alice": "uid=10001(alice) gid=10001(alice) groups=10001(alice),20000(staff),20001(dev)",
}
HYBRID_WANT = {
    "getent passwd alice": "alice:*:10001:20000:alice:/home/alice:",
    "getent group alice": "status 2",
    "getent group 10001": "status 2",
    "getent group bob": "bob:*:10002:",
    "getent group 10002": "bob:*:10002:",
    "id bob": "uid=10002(bob) gid=10002(bob) groups=10002(bob),20000(staff),20001(dev)",
}


@pytest.mark.parametrize("mode", ["true", "hybrid"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_private_groups_answer_as_sssd(
    tmp_path: Path, slapd: Slapd, mode: str, order: str
) -> None:
    lookups = ORDERS[order]
    want = _sssd_answers(tmp_path / "sssd", slapd, mode, lookups)
    for k, v in (TRUE_WANT if mode == "true" else HYBRID_WANT).items():
        assert want[k] == v, (k, want[k])  # the oracle says what the test expects
    d = _cached(tmp_path / "c", slapd, mode)
    d.start()
    try:
        # The socket, then again with the memory cache the first pass filled.
        assert _answers(d.run_nss, lookups, SOCKET_ONLY) == want
        assert _answers(d.run_nss, lookups, None) == want
    finally:
        d.stop()


def test_collisions_with_real_groups_true(tmp_path: Path, slapd: Slapd) -> None:
    """A real group of the user's uid or name is answered, in whichever order; the
    user is always found, its primary gid its uid. SSSD 2.8.2 stores whichever entry
    comes first and refuses the other: after these group lookups it finds neither
    dave nor erin as users (`id dave`: no such user)."""
    d = _cached(tmp_path / "c", slapd, "true")
    d.start()
    try:
        for env in (SOCKET_ONLY, None):
            got = _answers(d.run_nss, [
                ["getent", "group", "10004"], ["getent", "group", "erin"],
                ["getent", "group", "10005"], ["id", "dave"], ["id", "erin"],
            ], env)  # fmt: skip
            assert got == {
                "getent group 10004": "davegrp:*:10004:dave",
                "getent group erin": "erin:*:20005:erin",
                "getent group 10005": "erin:*:10005:",
                "id dave": "uid=10004(dave) gid=10004(davegrp) groups=10004(davegrp)",
                "id erin": "uid=10005(erin) gid=10005(erin) groups=10005(erin),20005(erin)",
            }
    finally:
        d.stop()


def test_collisions_with_real_groups_hybrid(tmp_path: Path, slapd: Slapd) -> None:
    """As SSSD's hybrid mode: a real group of the gid wins; by name, a private group
    whose gid a real group has is no answer; a real group of the name is answered."""
    d = _cached(tmp_path / "c", slapd, "hybrid")
    d.start()
    try:
        for env in (SOCKET_ONLY, None):
            got = _answers(d.run_nss, [
                ["getent", "group", "10004"], ["getent", "group", "dave"],
                ["getent", "group", "erin"], ["getent", "group", "10005"], ["id", "dave"],
            ], env)  # fmt: skip
            assert got == {
                "getent group 10004": "davegrp:*:10004:dave",
                "getent group dave": "status 2",
                "getent group erin": "erin:*:20005:erin",
                "getent group 10005": "erin:*:10005:",
                "id dave": "uid=10004(dave) gid=10004(davegrp) groups=10004(davegrp)",
            }
    finally:
        d.stop()


def test_enumeration_lists_the_private_groups(tmp_path: Path, slapd: Slapd) -> None:
    """enumerate = true with auto_private_groups = true: getent group lists the cached
    users as their private groups too (SSSD's SYSDB_GRENT_MPG_FILTER), but for one a
    real group of its gid shadows; cached enumerates what it has cached
    (docs/compatibility.md §9.1)."""
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, auto_private_groups="true",
                     ldap_schema="rfc2307bis", enumerate="true")  # fmt: skip
    d.start()
    try:
        _answers(d.run_nss, [["id", "alice"], ["id", "dave"]], SOCKET_ONLY)
        r = d.run_nss(["getent", "group"], env=SOCKET_ONLY)
        lines = sorted(r.stdout.split())
        assert "alice:*:10001:" in lines
        assert "davegrp:*:10004:dave" in lines
        assert not [line for line in lines if line.startswith("dave:")]
    finally:
        d.stop()


NOGID_BASE = "dc=nogid,dc=t"
# Users of objectClass account: posixAccount needs a gidNumber, so the user without
# one is an account with extensibleObject (uidNumber, homeDirectory allowed there).
NOGID_LDIF = (
    f"dn: {NOGID_BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: nogid\n"
    f"o: nogid\n"
    f"\ndn: uid=withgid,{NOGID_BASE}\nobjectClass: account\nobjectClass: posixAccount\n"
    f"uid: withgid\ncn: withgid\nuidNumber: 10011\ngidNumber: 10011\n"
    f"homeDirectory: /home/withgid\n"
    f"\ndn: uid=nogid,{NOGID_BASE}\nobjectClass: account\nobjectClass: extensibleObject\n"
    f"uid: nogid\ncn: nogid\nuidNumber: 10012\nhomeDirectory: /home/nogid\n"
)
NOGID_LOOKUPS = [
    ["getent", "passwd", "nogid"], ["getent", "passwd", "10012"],
    ["getent", "group", "nogid"], ["getent", "group", "10012"], ["id", "nogid"],
    ["getent", "passwd", "withgid"], ["getent", "group", "10011"],
]  # fmt: skip


@pytest.mark.parametrize("mode", ["true", "hybrid"])
def test_a_user_without_gidnumber_as_sssd(tmp_path: Path, mode: str) -> None:
    """With true a user needs no gidNumber (SSSD's MPG domain stores gid = uid); with
    hybrid it is no POSIX user, as SSSD's provider refuses it (ERR_NO_POSIX)."""
    (tmp_path / "d.ldif").write_text(NOGID_LDIF)
    opts: dict[str, Any] = {"auto_private_groups": mode, "ldap_user_object_class": "account"}
    with Slapd(tmp_path / "s", tmp_path / "d.ldif", NOGID_BASE) as server:
        s = sssd.SssdDaemon(tmp_path / "sssd", server.uri, NOGID_BASE, **opts)
        s.start()
        try:
            want = _answers(s.run_nss, NOGID_LOOKUPS, SOCKET_ONLY)
        finally:
            s.stop()
        found = want["getent passwd nogid"] != "status 2"
        assert found == (mode == "true"), want  # what the test is about
        d = CachedDaemon(tmp_path / "c", [server.uri], NOGID_BASE,
                         ldap_schema="rfc2307bis", **opts)  # fmt: skip
        d.start()
        try:
            assert _answers(d.run_nss, NOGID_LOOKUPS, SOCKET_ONLY) == want
            assert _answers(d.run_nss, NOGID_LOOKUPS, None) == want
        finally:
            d.stop()
