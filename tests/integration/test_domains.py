"""Several domains (`[cached] domains = ALPHA, BETA`), two bases of one real slapd whose
entries share names and ids, looked up through glibc and the real libnss_sss: an
entry filtered in the first domain leaves its id to the next one (as SSSD's cache_req
does), and the memory cache never answers a name or id otherwise than the socket does.
Both found by a helper's multi-domain differential against SSSD 2.8.2
(docs/compatibility.md §9.5, "Several domains")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.checks import SOCKET_ONLY
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd

pytestmark = requires_nss

BASE = "dc=md,dc=t"
A = f"ou=d0,{BASE}"
B = f"ou=d1,{BASE}"


def _ou(dn: str) -> str:
    return f"\ndn: {dn}\nobjectClass: organizationalUnit\nou: {dn.split(',')[0][3:]}\n"


def _user(uid: str, number: int, gid: int, base: str) -> str:
    return (f"\ndn: uid={uid},ou=people,{base}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\ncn: {uid}\nsn: x\nuid: {uid}\n"
            f"uidNumber: {number}\ngidNumber: {gid}\nhomeDirectory: /home/{uid}\n")  # fmt: skip


def _group(cn: str, gid: int, members: list[str], base: str) -> str:
    values = "".join(f"member: uid={m},ou=people,{base}\n" for m in members)
    return (f"\ndn: cn={cn},ou=groups,{base}\nobjectClass: groupOfNames\n"
            f"objectClass: posixGroup\ncn: {cn}\ngidNumber: {gid}\n{values}")  # fmt: skip


# ALPHA: ann 10001, staff 20000 {ann}. BETA: bob 10001 (ALPHA's uid), dev 20000
# (ALPHA's gid) and staff 20001 (ALPHA's name), both {bob}; and cid 25001, ops 25000
# {cid}, names and ids ALPHA has not; ann 25003 (ALPHA's name, another id).
LDIF = (
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: md\no: md\n"
    + "".join(_ou(dn) for d in (A, B) for dn in (d, f"ou=people,{d}", f"ou=groups,{d}"))
    + _user("ann", 10001, 20000, A) + _group("staff", 20000, ["ann"], A)
    + _user("bob", 10001, 20000, B) + _group("dev", 20000, ["bob"], B)
    + _group("staff", 20001, ["bob"], B)
    + _user("cid", 25001, 25000, B) + _group("ops", 25000, ["cid"], B)
    + _user("ann", 25003, 25000, B)
)  # fmt: skip


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("domains")
    (d / "d.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "d.ldif", BASE) as s:
        yield s


def _daemon(
    tmp_path: Path, s: Slapd, alpha: dict[str, Any], beta: dict[str, Any] | None = None
) -> CachedDaemon:
    d = CachedDaemon(tmp_path / "cached", [s.uri], BASE)
    text = [
        "[cached]", "domains = ALPHA, BETA", f"pipes_dir = {d.workdir / 'pipes'}",
        f"mc_dir = {d.workdir / 'mc'}", f"db_dir = {d.workdir / 'db'}",
        f"pid_file = {d.workdir / 'cached.pid'}", "dbus_address = none", "[nss]",
    ]  # fmt: skip
    for name, base, opts in (("ALPHA", A, alpha), ("BETA", B, beta or {})):
        text += [f"[domain/{name}]", "id_provider = ldap", f"ldap_uri = {s.uri}",
                 f"ldap_search_base = {base}", "ldap_schema = rfc2307bis",
                 *(f"{k} = {v}" for k, v in opts.items())]  # fmt: skip
    d.config_path.write_text("\n".join(text) + "\n")
    d.start()
    return d


def _getent(d: CachedDaemon, *args: str, env: dict[str, str] | None = None) -> str:
    r = d.run_nss(["getent", *args], env=env)
    return r.stdout.strip() if r.returncode == 0 else f"status {r.returncode}"


def test_an_entry_filtered_in_the_first_domain_leaves_its_id_to_the_next(tmp_path, slapd):
    d = _daemon(tmp_path, slapd, {"filter_users": "ann", "filter_groups": "staff"})
    try:
        for env in (SOCKET_ONLY, None):  # and again from the memory cache
            assert _getent(d, "passwd", "10001", env=env) == "bob:*:10001:20000:bob:/home/bob:"
            assert _getent(d, "group", "20000", env=env) == "dev:*:20000:bob"
            # ALPHA's ann is filtered there: BETA's ann is the answer, as SSSD's.
            assert _getent(d, "passwd", "ann", env=env) == "ann:*:25003:25000:ann:/home/ann:"
        r = d.run_nss(["id", "bob"], env=SOCKET_ONLY)
        assert r.stdout.strip() == "uid=10001(bob) gid=20000(dev) groups=20000(dev),20001(staff)"
    finally:
        d.stop()


@pytest.mark.parametrize(
    "first",
    [["initgroups", "bob"], ["passwd", "bob"], ["group", "dev"], ["group", "20001"]],
    ids=lambda a: "-".join(a),
)
def test_the_memory_cache_answers_a_shared_name_or_id_as_the_socket_does(
    tmp_path, slapd, first
):
    """A lookup of BETA's entries (bob, its groups) puts in the memory cache only what
    the socket would answer the same for each of the record's keys: BETA's dev holds
    ALPHA's gid, its staff ALPHA's name, bob ALPHA's uid."""
    d = _daemon(tmp_path, slapd, {})
    keys = [("passwd", "10001"), ("passwd", "bob"), ("group", "20000"), ("group", "staff"),
            ("group", "dev"), ("group", "20001"), ("initgroups", "bob")]  # fmt: skip
    try:
        want = {k: _getent(d, *k, env=SOCKET_ONLY) for k in keys}
        assert want[("group", "20000")] == "staff:*:20000:ann"  # ALPHA's
        assert want[("passwd", "10001")] == "ann:*:10001:20000:ann:/home/ann:"
        _getent(d, *first)  # reads and fills the memory cache
        assert d.run_nss(["id", "bob"]).returncode == 0
        got = {k: _getent(d, *k) for k in keys}
        assert got == want
    finally:
        d.stop()


def test_a_later_domain_with_its_own_id_range_is_served_from_the_memory_cache(
    tmp_path, slapd
):
    """With disjoint min_id/max_id, BETA's entries whose names ALPHA does not hold go in
    the memory cache and answer from it with the daemon stopped (found in review: any
    name an earlier domain admitted, which is every name without filters, kept them
    out)."""
    d = _daemon(tmp_path, slapd, {"min_id": 1, "max_id": 24999},
                {"min_id": 25000, "max_id": 29999})  # fmt: skip
    try:
        assert d.run_nss(["id", "cid"]).stdout.strip() == (
            "uid=25001(cid) gid=25000(ops) groups=25000(ops)"
        )
        want = {k: _getent(d, *k) for k in (("passwd", "cid"), ("passwd", "25001"),
                                               ("group", "ops"), ("group", "25000"))}  # fmt: skip
        assert want[("group", "ops")] == "ops:*:25000:cid"
        # A name both domains hold: ALPHA's ann by name, then BETA's by its uid, which
        # only BETA's range admits. BETA's may not go in the memory cache, where it
        # would answer the name ALPHA answers on the socket.
        alpha_ann = _getent(d, "passwd", "ann")
        assert alpha_ann == "ann:*:10001:20000:ann:/home/ann:"
        assert _getent(d, "passwd", "25003") == "ann:*:25003:25000:ann:/home/ann:"
    finally:
        d.stop()
    # The daemon is gone: only the memory cache answers.
    assert {k: _getent(d, *k) for k in want} == want
    assert _getent(d, "passwd", "ann") == alpha_ann
    assert _getent(d, "passwd", "25003") == "status 2"  # never put there
