"""The zoo of §9.5 through glibc and libnss_sss: every awkward directory shape exact.

One slapd serves testing/zoo.py's directory as Debian ships slapd (``sizelimit 500``, no
deref overlay); a second one adds the deref overlay, so the deref path is held to the
same answers.  Per client view (testing.zoo.views: one search base, case_sensitive modes,
search-base syntax, non-POSIX groups, nesting level 1) a ``cached serve`` answers every
lookup of the view with ``getent``/``id`` in the passes of testing.zoo.PASSES:

1. a fresh cache, groups first (getent group, then passwd, then initgroups and id);
2. after ``cached cache -E``, id first (id and initgroups, then group, then passwd);
3. after ``cached cache -E``, users first (passwd, group, initgroups, id);
4. a fresh cache again, id first.

Every pass must give the answers testing.zoo computed by construction: the same answer
whatever was looked up before (SSSD's own answers depend on the order, see
``make compat``).  A failure lists every wrong lookup of every pass.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing import zoo
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import DEREF_CONTROL, Slapd

pytestmark = requires_nss


@pytest.fixture(scope="module")
def the_zoo() -> zoo.Zoo:
    return zoo.build()


@pytest.fixture(scope="module")
def zoo_ldif(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ldif, _expected = zoo.generate(tmp_path_factory.mktemp("zoo"))
    return ldif


def _serve(factory: pytest.TempPathFactory, ldif: Path, name: str, deref: bool) -> Iterator[Slapd]:
    with Slapd(
        factory.mktemp(name), ldif, zoo.SUFFIX, sizelimit=zoo.SIZELIMIT, deref=deref
    ) as server:
        yield server


@pytest.fixture(scope="module")
def zoo_slapd(tmp_path_factory: pytest.TempPathFactory, zoo_ldif: Path) -> Iterator[Slapd]:
    """As Debian ships slapd: sizelimit 500, no deref overlay."""
    yield from _serve(tmp_path_factory, zoo_ldif, "zoo_slapd", deref=False)


@pytest.fixture(scope="module")
def zoo_slapd_deref(tmp_path_factory: pytest.TempPathFactory, zoo_ldif: Path) -> Iterator[Slapd]:
    yield from _serve(tmp_path_factory, zoo_ldif, "zoo_slapd_deref", deref=True)


class CachedClient:
    """A CachedDaemon as testing.zoo.run_passes drives it."""

    def __init__(self, daemon: CachedDaemon) -> None:
        self.daemon = daemon
        self.run_nss = daemon.run_nss

    def fresh(self) -> None:
        self.daemon.stop()
        shutil.rmtree(self.daemon.db_dir, ignore_errors=True)
        self.daemon.start()

    def expire(self) -> None:
        r = self.daemon.cli("cache", "-E")
        # Exit 2 "No cache object matched": the previous pass cached nothing (every
        # lookup failed); the comparison says so, the expiry has nothing to do.
        assert r.returncode == 0 or "No cache object" in r.stderr, r.stderr


def _check_view(tmp_path: Path, server: Slapd, the_zoo: zoo.Zoo, name: str) -> None:
    view = zoo.views(the_zoo)[name]
    want = zoo.expected(the_zoo, view)
    opts = dict(view.options)
    base = opts.pop("ldap_search_base")
    daemon = CachedDaemon(tmp_path / "cached", [server.uri], base, **opts)
    try:
        passes = zoo.run_passes(CachedClient(daemon), view)
    finally:
        daemon.stop()
    problems = [
        f"pass {n} ({how} cache, {order}): {line}"
        for n, ((how, order), got) in enumerate(zip(zoo.PASSES, passes, strict=True), 1)
        for line in zoo.diff(want, got)
    ]
    where = view.note or "see testing/zoo.py"
    assert not problems, f"view {name} ({where}):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "name", ["std", "case-false", "case-preserving", "bases", "nonposix", "nest1", "names",
             "hybrid"]
)
def test_zoo_view(tmp_path: Path, zoo_slapd: Slapd, the_zoo: zoo.Zoo, name: str) -> None:
    _check_view(tmp_path, zoo_slapd, the_zoo, name)


def test_zoo_std_with_deref(tmp_path: Path, zoo_slapd_deref: Slapd, the_zoo: zoo.Zoo) -> None:
    """The same answers when the server offers the deref control (big groups take the
    deref path there): members outside the bases and aliases are still not members."""
    assert DEREF_CONTROL in zoo_slapd_deref.root_dse.get("supportedControl", [])
    _check_view(tmp_path, zoo_slapd_deref, the_zoo, "std")


def test_user_in_more_groups_than_the_size_limit(
    tmp_path: Path, zoo_slapd: Slapd, the_zoo: zoo.Zoo
) -> None:
    """hugejoiner is a direct member of 520 groups, and slapd returns at most 500 entries
    per search: a single `(member=<dn>)` search is cut for every client (the server's
    limit, docs/compatibility.md §9.5).  The answer is complete, or the lookup fails loudly (a log
    line naming the server's limit, `cached status` showing it), in every lookup, never
    the first 500 as if they were all."""
    full = {46000 + i for i in range(1, zoo.HUGE_GROUPS + 1)}
    primary = the_zoo["hugejoiner"].gid
    opts = dict(zoo.views(the_zoo)["std"].options)
    base = opts.pop("ldap_search_base")
    with CachedDaemon(tmp_path / "cached", [zoo_slapd.uri], base, **opts) as daemon:
        for attempt in ("cold", "again"):
            r = daemon.run_nss(["getent", "initgroups", "hugejoiner"], env=zoo.SOCKET_ONLY)
            gids = {int(g) for g in r.stdout.split()[1:]} - {primary}
            assert gids in (full, set()), f"{attempt}: {len(gids)} of {len(full)} groups"
            if gids:
                continue
            assert "size limit" in daemon.log_text(), daemon.log_tail()
            status = daemon.cli("status")
            assert "size limit" in status.stdout + status.stderr, status.stdout


# -- the zoo itself ---------------------------------------------------------------------


def test_zoo_server_keeps_the_awkward_spellings(zoo_slapd: Slapd) -> None:
    """The member values reach the server as spelled (slapd stores them as given and
    matches them normalised), so the view tests really meet those spellings; the size
    limit is the server's."""
    with zoo_slapd.connect() as conn:
        conn.search(f"cn=spelling,{zoo.GROUPS}", "(objectClass=*)", search_scope="BASE",
                    attributes=["member"])  # fmt: skip
        members = set(conn.response[0]["attributes"]["member"])
        assert "UID=Alice,OU=People,DC=zoo,DC=test" in members
        assert f"uid=MÜLLER,{zoo.PEOPLE}" in members
        assert f"cn=Smith\\2C John,{zoo.PEOPLE}" in members
        # Matching is by normalised DN: both spellings find both groups.
        conn.search(zoo.BASE, f"(member=cn=Smith\\5c, John,{zoo.PEOPLE})", attributes=["cn"])
        found = {e["attributes"]["cn"][0] for e in conn.response}
        assert found == {"spelling", "plain", "bigmixed"}
        conn.raise_exceptions = False
        conn.search(zoo.BASE, "(cn=huge*)", attributes=["cn"])
        assert conn.result["result"] == 4 and len(conn.response) == zoo.SIZELIMIT


def test_expected_answers_by_construction(the_zoo: zoo.Zoo) -> None:
    """Spot checks of the model against the zoo's intent, one per class of §9.5."""
    v = zoo.views(the_zoo)
    std = zoo.expected(the_zoo, v["std"])
    # 1: cn-named people are members; the same-cn group keeps its own members.
    assert std["group projects"] == "projects:*:40002:alice,bob,jdoe"
    assert std["group Jane Doe"] == "Jane Doe:*:40001:alice"
    # 2: names from entries, whatever the spelling.
    assert std["group spelling"] == std["group plain"].replace("plain:*:40005", "spelling:*:40004")
    # 3, 5, 10: out of base, dangling, no posixAccount, alias, non-POSIX group: dropped.
    assert std["group mixed"] == "mixed:*:40006:alice,temp"
    assert std["passwd carl"] == std["passwd carlalias"] == zoo.NOTFOUND
    big = sorted(["alice", "jsmith", "mvx", *(f"bulk{i:03d}" for i in range(1, 11))])
    assert std["group bigmixed"] == f"bigmixed:*:40008:{','.join(big)}"
    # 4: the size limit never shortens an answer.
    assert len(std["group big600"].split(":")[3].split(",")) == zoo.BIG_GROUP_SIZE
    assert len(std["initgroups joiner"].split()) == 1 + zoo.JOINER_GROUPS == 1 + 901
    assert std["group uptop"] == "uptop:*:43999:joiner"
    # 5: nesting level by level, primary gid without a group.
    assert std["initgroups deepuser"] == "deepuser 40010 40011 40012"
    assert std["group d3"] == "d3:*:40013:"
    assert v["nest1"].nesting == 1
    assert zoo.expected(the_zoo, v["nest1"])["initgroups deepuser"] == "deepuser 40010 40011"
    assert std["id orphan"] == "uid=40110(orphan) gid=49999 groups=40007(orphanclub),49999"
    # 6: case.
    assert std["group DevOps"] == "DevOps:*:40022:CaseUser,alice"
    low = zoo.expected(the_zoo, v["case-false"])
    assert low["group DEVOPS"] == "devops:*:40022:alice,caseuser"
    assert low["passwd MÜLLER"].startswith("müller:")
    keep = zoo.expected(the_zoo, v["case-preserving"])
    assert keep["passwd CASEUSER"].startswith("CaseUser:")
    assert zoo.expected(the_zoo, v["case-false"])["passwd CASEUSER"].startswith("caseuser:")
    assert std.get("passwd CASEUSER") is None  # case-sensitive view: not looked up there
    # 7: filtered user base, several group bases.
    bases = zoo.expected(the_zoo, v["bases"])
    assert bases["passwd temp"] == zoo.NOTFOUND and bases["group mixed"] == "mixed:*:40006:alice"
    assert bases["group teamx"] != zoo.NOTFOUND and bases["group oldgroup"] == zoo.NOTFOUND
    # 8: walked through the groupOfNames, which itself is not a POSIX group.
    gon = zoo.expected(the_zoo, v["nonposix"])
    assert gon["initgroups nester"] == "nester 45000 45001 45002"
    assert gon["group nmiddle"] == zoo.NOTFOUND and gon["group ntop"] == "ntop:*:45002:nester"
    assert std["group ntop"] == "ntop:*:45002:"  # posixGroup class: nmiddle is nothing
    # 9: multi-valued names answer under the RDN value.
    assert std["group engineering"] == std["group eng"] and std["group eng"].startswith("eng:")
    assert std["passwd mvalias"].startswith("mvuser:")
    # 11: the primary gid only for explicit members.
    assert std["initgroups alice"].split()[1:] == [
        "40001", "40002", "40004", "40005", "40006", "40008", "40022", "40030", "40031"
    ]  # fmt: skip
    assert "40000" in std["initgroups bob"].split()


def test_script_and_parse_round_trip(tmp_path: Path) -> None:
    """parse() reads what script() runs: exit statuses, padded initgroups, id's order."""
    out = "\n".join(
        [
            "@@zoo@@ group g", "g:*:5:b,a", "@@zoo@@ rc=0",
            "@@zoo@@ passwd x", "@@zoo@@ rc=2",
            "@@zoo@@ initgroups u", "u                     7 3", "@@zoo@@ rc=0",
            "@@zoo@@ id u", "uid=1(u) gid=7(s) groups=7(s),3(t),9", "@@zoo@@ rc=0",
            "@@zoo@@ id nobody", "@@zoo@@ rc=1",
        ]
    )  # fmt: skip
    assert zoo.parse(out) == {
        "group g": "g:*:5:a,b",
        "passwd x": zoo.NOTFOUND,
        "initgroups u": "u 3 7",
        "id u": "uid=1(u) gid=7(s) groups=3(t),7(s),9",
        "id nobody": zoo.NOTFOUND,
    }
    text = zoo.script([("group", "Jane Doe"), ("id", "it's")])
    assert "getent group -- 'Jane Doe'" in text and "id -- 'it'\"'\"'s'" in text
    some = [("passwd", "a"), ("id", "a"), ("group", "g")]
    assert [kind for kind, _ in zoo.ordered(some, "id-first")] == ["id", "group", "passwd"]
    assert zoo.diff({"group g": "g:*:5:a,b"}, {"group g": "g:*:5:a,c"}) == [
        "group g: expected g:*:5:a,b, got g:*:5:a,c [1 missing (b); 1 extra (c)]"
    ]


# -- bigroupuser with cn-named people (docs/compatibility.md §9.5) ------------------------


def _request_searches(server: Slapd, offset: int) -> int:
    """Logical searches since ``offset``, without root DSE reads (the connection's, not
    the request's)."""
    return sum(1 for pages in server.logical_searches(offset) if pages[0].base != "")


def test_bigroupuser_cn_people_cold_and_warm_id(tmp_path: Path, slapd_big_cn: Any) -> None:
    """People named cn=<full name>: a cold `id` exact in at most 10 searches, the warm
    `id` over the socket in none, `getent group large01` exact (all 5,000 members)."""
    s, exp = slapd_big_cn.slapd, slapd_big_cn.expected
    assert exp.user("bigroupuser").dn.startswith("cn=Big Group User,")
    with CachedDaemon(tmp_path / "cached", [s.uri], s.base_dn) as daemon:
        offset = s.log_offset()
        r = daemon.run_nss(["id", "bigroupuser"], env=zoo.SOCKET_ONLY, timeout=600)
        assert r.returncode == 0, r.stderr
        assert _id_gids(r.stdout) == exp.initgroups("bigroupuser", 2)
        cold = _request_searches(s, offset)
        assert cold <= 10, f"cold id made {cold} searches"

        offset = s.log_offset()
        r = daemon.run_nss(["id", "bigroupuser"], env=zoo.SOCKET_ONLY, timeout=600)
        assert _id_gids(r.stdout) == exp.initgroups("bigroupuser", 2)
        warm = _request_searches(s, offset)
        assert warm == 0, f"warm id over the socket made {warm} searches"

        r = daemon.run_nss(["getent", "group", "large01"], env=zoo.SOCKET_ONLY, timeout=600)
        members = r.stdout.rstrip("\n").split(":")[3].split(",")
        assert set(members) == exp.members("large01", 2) and len(members) == 5000


def _id_gids(output: str) -> set[int]:
    groups = output.strip().split("groups=", 1)[1]
    return {int(item.split("(", 1)[0]) for item in groups.split(",")}
