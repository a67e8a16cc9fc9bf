"""``ldap_schema = ad`` against a real Samba AD DC, through glibc + libnss_sss.

One DC for the module (testing/addc.py; provision + load + start ~15 s) with the small AD
directory of testing/addir.py, whose expected answers are built with it. Two daemons read
it: one serving the POSIX attributes (uidNumber/gidNumber), one with
``ldap_id_mapping = true`` whose numbers must equal :class:`IdMapper`'s for the DC's
domain SID (tests/unit/test_idmap.py ties IdMapper to SSSD's libsss_idmap).
"""

from __future__ import annotations

import array
import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import ldap3
import pytest

from cached.cache import State
from cached.cache.cache import READ_WHOLE
from cached.cache.writer import open_backend_cache
from cached.config import parse_config
from cached.counters import COUNTERS, LDAP_BYTES, VALIDATE, VALIDATE_FETCHED, Counters
from cached.ldap.ad import AdProvider, invocation_id, security_group
from cached.ldap.client import LdapClient
from cached.ldap.controls import AD_CAPABILITY_OID, ASQ_OID, encode_asq
from cached.ldap.exchange import LdapError, Search, merge_ranges
from cached.ldap.idmap import IdMapError, IdMapper
from cached.ldap.provider import LdapProvider, Outcome
from cached.ldap.sid import sid_assertion, sid_to_bytes, sid_to_str
from cached.model import Group
from testing import addc, addir, cachetime
from testing.daemon import CachedDaemon, config_text
from testing.marks import requires_nss

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}


# -- pure logic ---------------------------------------------------------------------


def test_merge_ranges_folds_ranged_values() -> None:
    attrs = {"member;range=0-1": [b"a", b"b"], "cn": [b"g"]}
    assert merge_ranges(attrs) == {"member": 2}
    assert attrs == {"member": [b"a", b"b"], "cn": [b"g"]}
    last = {"member;range=2-*": [b"c"]}
    assert merge_ranges(last) == {} and last == {"member": [b"c"]}
    for bad in ("member;range=x-1", "member;range=5-2", "member;range=3"):
        with pytest.raises(LdapError, match="range"):
            merge_ranges({bad: [b"a"]}, "cn=g")


def test_security_group_reads_the_security_bit_of_group_type() -> None:
    for values, security in (
        ([b"-2147483646"], True), ([b"-2147483644"], True), ([b"-2147483640"], True),
        ([b"2"], False), ([b"4"], False), ([b"8"], False),
        ([], True), ([b"x"], True), ([b"2", b"4"], True), ([b"+2"], True), ([b"2_0"], True),
    ):  # fmt: skip
        assert security_group(values) is security, values


def test_sid_round_trip_and_filter_value() -> None:
    sid = "S-1-5-21-1004336348-1177238915-682003330-512"
    raw = sid_to_bytes(sid)
    assert raw[:8] == b"\x01\x05\x00\x00\x00\x00\x00\x05" and sid_to_str(raw) == sid
    assert sid_assertion("objectSid", "S-1-5-32-545") == (
        "(objectSid=\\01\\02\\00\\00\\00\\00\\00\\05\\20\\00\\00\\00\\21\\02\\00\\00)"
    )
    for bad in (b"\x01\x05\x00", raw + b"\x00"):
        with pytest.raises(ValueError):
            sid_to_str(bad)


def test_invocation_id_is_one_guid_or_nothing() -> None:
    """The DC identity stamps are qualified with (ad.py, "Stamps are per DC"): one
    16-byte value, the GUID's first three fields little-endian ([MS-DTYP] 2.3.4.2);
    anything else identifies no DC (""), so that no stamp is kept."""
    raw = bytes.fromhex("a04c7e8c12f16140b5cb2798d485cfc7")  # a Samba DC's, as read
    assert invocation_id([raw]) == "8c7e4ca0-f112-4061-b5cb-2798d485cfc7"
    for bad in ([], [b""], [raw[:15]], [raw + b"\0"], [raw * 2], [raw, raw], [bytes(16)],
                [raw.hex().encode()]):  # fmt: skip
        assert invocation_id(bad) == "", bad


def test_asq_control_value_is_ber() -> None:
    # SEQUENCE { OCTET STRING "member" } ([MS-ADTS] 3.1.1.3.4.1.4)
    assert encode_asq("member") == bytes.fromhex("3008") + b"\x04\x06member"
    with pytest.raises(ValueError):
        encode_asq("x" * 200)


def test_id_to_sid_inverts_the_mapping() -> None:
    """getpwuid/getgrgid with ID mapping search by the SID the id maps back to."""
    dom = "S-1-5-21-1004336348-1177238915-682003330"
    m = IdMapper()
    m.add_domain("D", dom)
    for rid in (500, 513, 199_999, 200_000, 1_234_567):
        sid = f"{dom}-{rid}"
        assert m.id_to_sid(m.sid_to_id(sid)) == sid
    with pytest.raises(IdMapError):
        m.id_to_sid(100)


def test_ad_defaults_and_refusals(tmp_path: Path) -> None:
    text = config_text(["ldap://127.0.0.1"], "dc=x", tmp_path, ldap_schema="ad")
    d = parse_config(text).domains[0]
    assert (d.ldap_user_name, d.ldap_user_object_class, d.ldap_group_name) == (
        "sAMAccountName", "user", "sAMAccountName")  # fmt: skip
    assert (d.ldap_user_home_directory, d.ldap_group_member) == ("unixHomeDirectory", "member")
    assert d.ldap_use_tokengroups and not d.ldap_id_mapping and not d.ldap_referrals
    # An option the file sets wins over the AD default.
    d = parse_config(text + "ldap_user_name = cn\n").domains[0]
    assert d.ldap_user_name == "cn"
    bis = config_text(["ldap://127.0.0.1"], "dc=x", tmp_path, ldap_id_mapping="true")
    with pytest.raises(Exception, match="ldap_id_mapping = true needs ldap_schema = ad"):
        parse_config(bis)


# -- against the DC -------------------------------------------------------------------


def _opts(dc: addc.SambaDC, **extra: str) -> dict[str, Any]:
    return {
        "ldap_schema": "ad",
        "ldap_default_bind_dn": dc.admin_dn,
        "ldap_default_authtok": dc.admin_pw,
        **extra,
    }


@pytest.fixture(scope="module")
def posix(
    tmp_path_factory: pytest.TempPathFactory, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> Iterator[CachedDaemon]:
    dc, _ = ad
    with CachedDaemon(tmp_path_factory.mktemp("adp"), [dc.ldapi_uri], dc.base_dn,
                      **_opts(dc)) as d:  # fmt: skip
        yield d


@pytest.fixture(scope="module")
def mapped(
    tmp_path_factory: pytest.TempPathFactory, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> Iterator[CachedDaemon]:
    dc, _ = ad
    with CachedDaemon(tmp_path_factory.mktemp("adm"), [dc.ldapi_uri], dc.base_dn,
                      **_opts(dc, ldap_id_mapping="true")) as d:  # fmt: skip
        yield d


def _nss(d: CachedDaemon, *argv: str) -> tuple[int, str]:
    r = d.run_nss(list(argv), env=SOCKET_ONLY)
    return r.returncode, r.stdout


def _group_line(d: CachedDaemon, key: str) -> tuple[str, int, set[str]]:
    rc, out = _nss(d, "getent", "group", key)
    assert rc == 0, (key, d.log_tail())
    name, _pw, gid, members = out.rstrip("\n").split(":")
    return name, int(gid), set(members.split(",")) - {""}


@requires_nss
def test_users(posix: CachedDaemon, ad: tuple[addc.SambaDC, addir.ADDirectory]) -> None:
    _, data = ad
    for login, (uid, gid, home, shell, gecos) in data.passwd.items():
        if login.startswith("m"):
            continue  # the big group's members: checked as members below
        want = f"{login}:*:{uid}:{gid}:{gecos}:{home}:{shell}\n"
        assert _nss(posix, "getent", "passwd", login) == (0, want)
        assert _nss(posix, "getent", "passwd", str(uid)) == (0, want)
    # Without POSIX attributes (and without ID mapping) a user does not exist.
    for login in data.non_posix_users:
        assert _nss(posix, "getent", "passwd", login)[0] == 2


@requires_nss
def test_groups_nested_and_ranged(
    posix: CachedDaemon, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    _, data = ad
    for name, (gid, members) in data.groups.items():
        if name == "Domain Users":
            continue  # its members are by primaryGroupID, which `member` never lists
        assert _group_line(posix, name) == (name, gid, set(members))
        assert _group_line(posix, str(gid)) == (name, gid, set(members))
    assert len(data.groups["big"][1]) > addir.MAX_VAL_RANGE
    # The primary group: its gid and its `member` values (none), even with users of
    # that primary gid cached; SSSD 2.8.2 adds the cached ones (docs/compatibility.md §9.5).
    assert _nss(posix, "getent", "passwd", "alice")[0] == 0
    assert _group_line(posix, "Domain Users") == ("Domain Users", addir.DOMAIN_USERS_GID, set())
    # A group without gidNumber is walked through (staff lists carol), never answered.
    assert _nss(posix, "getent", "group", "nonposix")[0] == 2
    # A distribution group neither, its gidNumber notwithstanding (as SSSD 2.8.2).
    assert _nss(posix, "getent", "group", addir.DISTRIBUTION)[0] == 2
    assert _nss(posix, "getent", "group", "40005")[0] == 2


@requires_nss
def test_initgroups_by_token_groups(
    posix: CachedDaemon, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    _, data = ad
    for login in ("alice", "bob", "carol", "m0001"):
        uid, gid = data.passwd[login][:2]
        want = {data.groups[g][0]: g for g in data.initgroups[login]}
        rc, out = _nss(posix, "id", login)
        assert rc == 0, posix.log_tail()
        groups = out.strip().split("groups=", 1)[1].split(",")
        got = {int(x.split("(")[0]): x.split("(", 1)[1].rstrip(")") for x in groups}
        assert out.startswith(f"uid={uid}({login}) gid={gid}(Domain Users) groups=")
        assert got == want, login
        rc, out = _nss(posix, "getent", "initgroups", login)
        assert rc == 0 and {int(g) for g in out.split()[1:]} == set(want), out


def _sids(dc: addc.SambaDC) -> dict[str, str]:
    out = {}
    for e in dc.search(dc.base_dn, "(|(objectClass=user)(objectClass=group))",
                       ["sAMAccountName", "objectSid"]):  # fmt: skip
        raw = e["raw_attributes"]
        out[raw["sAMAccountName"][0].decode()] = sid_to_str(raw["objectSid"][0])
    return out


@requires_nss
def test_id_mapping_gives_sssd_numbers(
    mapped: CachedDaemon, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    dc, data = ad
    sids = _sids(dc)
    m = IdMapper()
    m.add_domain("LDAP", dc.domain_sid)
    primary = m.sid_to_id(f"{dc.domain_sid}-513")
    for login in ("alice", "carol", *data.non_posix_users):
        uid = m.sid_to_id(sids[login])
        assert uid != data.passwd.get(login, (0,))[0]  # uidNumber is not used
        rc, out = _nss(mapped, "getent", "passwd", str(uid))
        assert rc == 0, mapped.log_tail()
        assert out.split(":")[:4] == [login, "*", str(uid), str(primary)]
        assert _nss(mapped, "getent", "passwd", login)[1] == out
    # Every group with a SID has a gid now, nonposix included (a member group of staff).
    for name, members in (("eng", {"alice"}), ("nonposix", {"carol"}), ("staff", {"carol"})):
        gid = m.sid_to_id(sids[name])
        assert _group_line(mapped, name) == (name, gid, members)
        assert _group_line(mapped, str(gid)) == (name, gid, members)
    rc, out = _nss(mapped, "id", "carol")
    assert rc == 0
    got = {int(x.split("(")[0]) for x in out.strip().split("groups=", 1)[1].split(",")}
    want = {primary} | {m.sid_to_id(sids[g]) for g in ("nonposix", "staff")}
    assert got == want
    # BUILTIN (S-1-5-32-545 Users, in every token) is not mapped.
    assert all(g < 2**31 for g in got)
    # A distribution group has a SID, and no gid (SSSD 2.8.2 the same).
    assert _nss(mapped, "getent", "group", addir.DISTRIBUTION)[0] == 2
    assert _nss(mapped, "getent", "group", str(m.sid_to_id(sids[addir.DISTRIBUTION])))[0] == 2


def test_ranged_values_read_from_the_dc(ad: tuple[addc.SambaDC, addir.ADDirectory]) -> None:
    """Samba never forces ranges; asked for them explicitly, the client reads the rest
    range by range (as it must from a Windows DC, MaxValRange 1500)."""
    dc, data = ad
    text = config_text([dc.ldapi_uri], dc.base_dn, Path("/nonexistent"), **_opts(dc))
    client = LdapClient(parse_config(text).domains[0])
    try:
        (e,) = client.search(f"CN=big,{addir.GROUPS}", "(objectClass=*)",
                             ["member;range=0-499"], scope="base")  # fmt: skip
        assert len(e.get("member")) == len(set(e.get("member"))) == len(data.groups["big"][1])
        assert not [k for k in e.attrs if ";range=" in k]
        (e,) = client.search(f"CN=big,{addir.GROUPS}", "(objectClass=*)",
                             ["member;range=1000-*"], scope="base")  # fmt: skip
        assert len(e.get("member")) == len(data.groups["big"][1]) - 1000
    finally:
        client.close()


# -- member naming paths, in-process against the DC ----------------------------------


class _Spy:
    """The provider's real LdapClient, with every search it makes recorded as
    (filter, its options): which path named the members. ``search`` sends through
    ``search_many``, so that is where every search passes."""

    def __init__(self, client: LdapClient) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.attrs: list[str] = []
        self._search_many = client.search_many
        client.search_many = self  # type: ignore[method-assign]

    def __call__(self, specs: list[Search], *args: Any, **kw: Any) -> Any:
        for sp in specs:
            opts = {"scope": sp.scope, "asq": sp.asq, "max_entries": sp.max_entries}
            self.calls.append((sp.filt, opts))
            self.attrs += sp.attrs
        return self._search_many(specs, *args, **kw)

    def asq(self) -> int:
        return sum(1 for _, kw in self.calls if kw.get("asq"))

    def sweeps(self) -> int:
        return sum(1 for _, kw in self.calls if kw.get("max_entries"))

    def batches(self) -> int:
        return sum(1 for f, _ in self.calls if "(name=" in f)


@contextlib.contextmanager
def _provider(
    dc: addc.SambaDC, tmp: Path, *, asq: bool = True, **extra: str
) -> Iterator[tuple[AdProvider, _Spy]]:
    """An AdProvider with its own cache on the real DC; ``asq=False``: the root DSE
    read at connect loses the ASQ control, as on a server that does not list it."""
    text = config_text([dc.ldapi_uri], dc.base_dn, tmp, **_opts(dc, **extra))
    domain = parse_config(text).domains[0]
    (tmp / "db").mkdir(parents=True, exist_ok=True)  # again: a restart on the same cache
    client = LdapClient(domain)
    cache = open_backend_cache(str(tmp / "db"), domain, counters=Counters())
    p = AdProvider(domain, client, cache, Counters())
    try:
        client.connect()
        assert client.info is not None and ASQ_OID in client.info.controls  # Samba has it
        if not asq:
            client.info.controls.discard(ASQ_OID)
        yield p, _Spy(client)
    finally:
        client.close()


def _members(p: LdapProvider, group: str) -> set[str]:
    view = p.cache.group_by_name(group).value
    assert view is not None, group
    return set(view.members.decode().split("\0")) - {""}


def test_group_members_by_asq_only_when_the_root_dse_lists_it(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    dc, data = ad
    want = set(data.groups["big"][1])
    with _provider(dc, tmp_path / "a") as (p, spy):
        assert p.group_by_name("big").outcome is Outcome.FOUND
        assert _members(p, "big") == want
        assert (spy.asq(), spy.batches()) == (1, 0), spy.calls
    with _provider(dc, tmp_path / "b", asq=False) as (p, spy):
        assert p.group_by_name("big").outcome is Outcome.FOUND
        assert _members(p, "big") == want
        assert spy.asq() == 0
        # 1,600 members: one sweep of the user base names them.
        assert (spy.sweeps(), spy.batches()) == (1, 0), spy.calls
    with _provider(dc, tmp_path / "u", asq=False, ldap_page_size="0") as (p, spy):
        assert p.group_by_name("big").outcome is Outcome.FOUND
        assert _members(p, "big") == want
        # Unpaged, no sweep: 1,600 members in batches of member_batch (name=…) look-ups.
        assert spy.sweeps() == 0
        assert spy.batches() == -(-len(want) // p.member_batch), spy.calls


@contextlib.contextmanager
def _scratch_group(dc: addc.SambaDC, name: str, gid: int, members: list[str]) -> Iterator[str]:
    """A group of the test's own on the module's DC, deleted after it (the other tests
    read the loaded directory as testing/addir.py built it)."""
    dn = f"CN={name},{addir.GROUPS}"
    conn = dc.connect()
    try:
        assert conn.add(dn, "group", {"sAMAccountName": name, "gidNumber": str(gid),
                                      "member": members}), conn.result  # fmt: skip
        yield dn
    finally:
        conn.delete(dn)
        conn.unbind()


def test_a_group_changed_between_its_search_and_its_asq_keeps_one_version(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """ASQ reads the group's member values again, later than the search that found
    it: a member replaced in between is not returned, yet it named a user when the
    group was read. It must be looked up, not dropped as naming nothing (that stored
    the old and new versions intersected, as the deref control did on LDAP)."""
    dc, _ = ad
    people = [f"CN=Member {i:04d},{addir.PEOPLE}" for i in range(21)]
    old, new = people[:20], people[1:21]  # m0000 replaced by m0020
    with _scratch_group(dc, "racebig", 40990, old) as dn, _provider(dc, tmp_path) as (p, spy):
        search = p.client.search
        changed: list[bool] = []

        def change_before_asq(*args: Any, **kw: Any) -> Any:
            if kw.get("asq") and not changed:
                changed.append(True)
                conn = dc.connect()
                try:
                    assert conn.modify(dn, {"member": [(ldap3.MODIFY_REPLACE, new)]}), conn.result
                finally:
                    conn.unbind()
            return search(*args, **kw)

        p.client.search = change_before_asq  # type: ignore[method-assign]
        assert p.group_by_name("racebig").outcome is Outcome.FOUND
        assert changed and spy.asq() == 1  # the ASQ search ran, after the change
        # The version the group's search read, whole.
        assert _members(p, "racebig") == {f"m{i:04d}" for i in range(20)}


def test_ranged_values_of_a_group_changed_between_ranges_are_one_version(
    ad: tuple[addc.SambaDC, addir.ADDirectory],
) -> None:
    """Each range is a search of its own: a member removed from the first range
    before the next is read shifts the values after it, so one that is still a member
    was skipped (the old and new versions mixed). The client reads every range again
    when the entry's uSNChanged moved between them."""
    dc, _ = ad
    people = [f"CN=Member {i:04d},{addir.PEOPLE}" for i in range(25)]
    text = config_text([dc.ldapi_uri], dc.base_dn, Path("/nonexistent"), **_opts(dc))
    client = LdapClient(parse_config(text).domains[0])
    with _scratch_group(dc, "racerange", 40991, people) as dn:
        fill = client.exchange.fill_entry
        gone: list[bytes] = []

        def change_between_ranges(conn: Any, e: Any, until: float) -> None:
            if not gone:
                gone.append(e.attrs["member;range=0-9"][0])  # read, then removed
                admin = dc.connect()
                try:
                    assert admin.modify(dn, {"member": [(ldap3.MODIFY_DELETE, [gone[0]])]})
                finally:
                    admin.unbind()
            fill(conn, e, until)

        client.exchange.fill_entry = change_between_ranges  # type: ignore[method-assign]
        try:
            (e,) = client.search(dn, "(objectClass=*)", ["member;range=0-9", "uSNChanged"],
                                 scope="base")  # fmt: skip
        finally:
            client.close()
        (now,) = dc.search(dn, "(objectClass=*)", ["uSNChanged"], scope=ldap3.BASE)
    assert gone
    got = {v.decode().lower() for v in e.get("member")}
    old = {p.lower() for p in people}
    assert got == old - {gone[0].decode().lower()}, (len(got), sorted(old - got))
    # The stamp that comes with the values is the version they were read from.
    assert e.get("uSNChanged") == now["raw_attributes"]["uSNChanged"]


def test_a_member_renamed_between_its_group_search_and_its_look_up_is_kept_on_ad(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """AD keeps ``member`` in step with a renamed member (links follow the object):
    renamed after its group was read and before its look-up by RDN value, the old DN
    names nothing, yet the member is in both of the group's versions. Kept."""
    dc, _ = ad
    people = [f"CN=Member {i:04d},{addir.PEOPLE}" for i in range(4)]
    moved = f"CN=Member 0000r,{addir.PEOPLE}"
    with _scratch_group(dc, "racerename", 40992, people) as dn, \
            _provider(dc, tmp_path, ldap_deref_threshold="0") as (p, spy):  # fmt: skip
        search_many = spy._search_many
        usns: list[bytes] = []

        def usn() -> bytes:
            (g,) = dc.search(dn, "(objectClass=*)", ["uSNChanged"], scope=ldap3.BASE)
            return bytes(g["raw_attributes"]["uSNChanged"][0])

        def rename_before_look_up(specs: list[Search], *args: Any, **kw: Any) -> Any:
            if not usns and any("(name=Member 0000)" in sp.filt for sp in specs):
                usns.append(usn())
                admin = dc.connect()
                try:
                    assert admin.modify_dn(people[0], "CN=Member 0000r"), admin.result
                finally:
                    admin.unbind()
                usns.append(usn())
            return search_many(specs, *args, **kw)

        spy._search_many = rename_before_look_up
        try:
            assert p.group_by_name("racerename").outcome is Outcome.FOUND
            # The group's uSNChanged did not move: only its member values tell.
            assert len(usns) == 2 and usns[0] == usns[1], usns
            assert _members(p, "racerename") == {f"m{i:04d}" for i in range(4)}
        finally:
            admin = dc.connect()
            try:
                admin.modify_dn(moved, "CN=Member 0000")
            finally:
                admin.unbind()


def test_initgroups_names_members_by_sweep_and_falls_back_past_its_bound(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """m0001 is in big (1,600 members): without ASQ the unknown members are named by
    one paged search of the user base, bounded by twice their number; with the bound
    below the domain's users it gives up and the batches name them, as exactly."""
    dc, data = ad
    want_groups = set(data.initgroups["m0001"])
    want = set(data.groups["big"][1])
    with _provider(dc, tmp_path / "a", asq=False) as (p, spy):
        assert p.initgroups("m0001").outcome is Outcome.FOUND
        ig = p.cache.initgroups("m0001").value
        assert ig is not None and set(ig.groups) == want_groups
        assert _members(p, "big") == want
        assert (spy.asq(), spy.sweeps(), spy.batches()) == (0, 1, 0), spy.calls
    with _provider(dc, tmp_path / "b", asq=False) as (p, spy):
        # the bound: as many users as unknown members, fewer than exist
        p.sweeps.tunables = replace(p.sweeps.tunables, factor=1)
        assert p.initgroups("m0001").outcome is Outcome.FOUND
        ig = p.cache.initgroups("m0001").value
        assert ig is not None and set(ig.groups) == want_groups
        assert _members(p, "big") == want
        assert spy.sweeps() == 1 and spy.batches() >= len(want) // p.member_batch, spy.calls
    with _provider(dc, tmp_path / "u", asq=False, ldap_page_size="0") as (p, spy):
        # Unpaged, nothing could stop the sweep at its bound: batches only.
        assert p.initgroups("m0001").outcome is Outcome.FOUND
        assert _members(p, "big") == want
        assert spy.sweeps() == 0 and spy.batches() >= len(want) // p.member_batch, spy.calls
    with _provider(dc, tmp_path / "c") as (p, spy):
        # With ASQ the big group's members come from it, before any sweep.
        assert p.initgroups("m0001").outcome is Outcome.FOUND
        assert _members(p, "big") == want
        assert (spy.asq(), spy.sweeps()) == (1, 0), spy.calls


def test_a_dc_read_with_another_schema_is_swept_paged(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """The unpaged sweep is bounded by its request's sizeLimit, which Samba ignores
    (every user came for a limit of 5): on a DC read with ``ldap_schema = rfc2307bis``
    the root DSE's AD capability keeps the sweep paged; a server that ignores the
    limit without saying so is swept paged from its first such answer on. The
    members are exact either way."""
    dc, data = ad
    want = set(data.groups["big"][1])
    opts = _opts(dc, ldap_schema="rfc2307bis", ldap_user_object_class="user",
                 ldap_user_name="sAMAccountName", ldap_group_object_class="group",
                 ldap_group_name="cn")  # fmt: skip
    for hide_ad, dbname in ((False, "caps"), (True, "nocaps")):
        text = config_text([dc.ldapi_uri], dc.base_dn, tmp_path, **opts)
        domain = parse_config(text).domains[0]
        (tmp_path / dbname).mkdir()
        client = LdapClient(domain)
        cache = open_backend_cache(str(tmp_path / dbname), domain, counters=Counters())
        p = LdapProvider(domain, client, cache, Counters())
        # a bound below the domain's users, where Samba passes it
        p.sweeps.tunables = replace(p.sweeps.tunables, factor=1)
        sweeps: list[list[tuple[bool, int, int]]] = []  # per request: (paged, limit, max)

        def spy(
            specs: list[Search],
            *args: Any,
            sweeps: list[list[tuple[bool, int, int]]] = sweeps,
            real: Any = client.search_many,
            **kw: Any,
        ) -> Any:
            sweeps[-1].extend(
                (sp.paged, sp.size_limit, sp.max_entries)
                for sp in specs
                if sp.filt.startswith("(objectClass=user)")
            )
            return real(specs, *args, **kw)

        client.search_many = spy  # type: ignore[method-assign]
        try:
            client.connect()
            assert client.info is not None
            assert AD_CAPABILITY_OID in client.info.capabilities  # Samba lists it
            if hide_ad:
                client.info.capabilities.discard(AD_CAPABILITY_OID)
            sweeps.append([])
            assert p.group_by_name("big").outcome is Outcome.FOUND
            assert _members(p, "big") == want
            # Both sweeps gave up at the bound (1,609 users for 1,600 wanted): forgotten,
            # as for a later request wanting more, so that the next one sweeps again.
            p.sweeps.users_at_least = 0
            sweeps.append([])  # a cold walk up from a member of big: its members swept again
            assert p.initgroups("m0001").outcome is Outcome.FOUND
            ig = p.cache.initgroups("m0001").value
            assert ig is not None and set(ig.groups) >= {"big"}
            assert _members(p, "big") == want
        finally:
            client.close()
        if hide_ad:
            # Unpaged once (all users came, past the limit), then paged.
            assert [[(pg, lim > 0) for pg, lim, _m in r] for r in sweeps] == [
                [(False, True)], [(True, False)]
            ], sweeps
        else:
            assert all(r and all(pg and not lim and m for pg, lim, m in r) for r in sweeps), sweeps


@requires_nss
def test_initgroups_without_token_groups(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """``ldap_use_tokengroups = false``: the rfc2307bis walk up by (member=<DN>), the
    same answers (SSSD 2.8.2 answers only the primary group there, §6.6)."""
    dc, data = ad
    with CachedDaemon(tmp_path / "d", [dc.ldapi_uri], dc.base_dn,
                      **_opts(dc, ldap_use_tokengroups="false")) as d:  # fmt: skip
        for login in ("alice", "bob", "carol", "m0001"):
            want = {data.groups[g][0] for g in data.initgroups[login]}
            rc, out = _nss(d, "id", login)
            assert rc == 0, d.log_tail()
            assert {int(x.split("(")[0]) for x in out.split("groups=", 1)[1].split(",")} == want
    with _provider(dc, tmp_path / "p", ldap_use_tokengroups="false") as (p, spy):
        assert p.initgroups("alice").outcome is Outcome.FOUND
        ig = p.cache.initgroups("alice").value
        assert ig is not None
        # The primary gid is in the gids, though alice is no explicit member (§9.5).
        gids = {data.groups[g][0] for g in data.initgroups["alice"]}
        assert set(array.array("I", ig.gids)) == gids
        assert set(ig.groups) == set(data.initgroups["alice"]) - {"Domain Users"}
        assert "tokenGroups" not in spy.attrs and spy.calls


# -- validation before transfer (the tokenGroups refresh, cached/ldap/ad.py) -----------


def _bytes() -> float:
    """Bytes received from LDAP so far by this process (the client counts them in the
    process-wide counters)."""
    return COUNTERS.snapshot().get(LDAP_BYTES, [0, 0.0, 0])[2]


# Validation by stamps at expiry, an opt-in on AD: refresh_full_interval defaults to the
# groups' lifetime there, so that a member's deletion, which moves no AD stamp, is seen
# at expiry (cached/config.py; test_ad_default_reads_whole_at_expiry below).
STAMPS_AT_EXPIRY = "86400"  # refresh_full_interval


def _expire(p: AdProvider, invalidate: bool) -> None:
    """Make every cached entry expired: by ``cached cache -E`` (what the tool calls)
    or, ``invalidate`` False, as the entries' lifetime running out does. On AD the two
    differ: after -E no stamp is gone by (stamps.distrusted)."""
    if invalidate:
        p.cache.invalidate_all()
    else:
        cachetime.expire_all(p.cache)


def _refresh(p: AdProvider, login: str, invalidate: bool = False) -> dict[str, float]:
    """The cache expired (``_expire``), then the user's initgroups; returns the groups
    checked and fetched whole, and the LDAP bytes of the refresh."""
    _expire(p, invalidate)
    before, b0 = p.counters.snapshot(), _bytes()
    assert p.initgroups(login).outcome is Outcome.FOUND
    after = p.counters.snapshot()

    def amount(k: str) -> float:
        return after.get(k, [0, 0.0, 0])[2] - before.get(k, [0, 0.0, 0])[2]

    runs = after.get(VALIDATE, [0])[0] - before.get(VALIDATE, [0])[0]
    return {"runs": runs, "checked": amount(VALIDATE), "fetched": amount(VALIDATE_FETCHED),
            "bytes": _bytes() - b0}  # fmt: skip


def _groups_of(p: AdProvider, login: str) -> set[str]:
    ig = p.cache.initgroups(login).value
    assert ig is not None and ig.fetched
    return set(ig.groups)


class _Scratch:
    """Groups of the test's own on the module's DC, whatever became of them deleted
    at the end (the other tests read the loaded directory as testing/addir.py built it)."""

    def __init__(self, dc: addc.SambaDC) -> None:
        self.dc = dc
        self.conn = dc.connect()
        self.dns: list[str] = []

    def add(self, name: str, gid: int | None, members: list[str]) -> str:
        """A group; ``gid`` None: without gidNumber (non-POSIX, walked through)."""
        dn = f"CN={name},{addir.GROUPS}"
        with contextlib.suppress(ldap3.core.exceptions.LDAPNoSuchObjectResult):
            self.conn.delete(dn)  # left by an interrupted run
        attrs: dict[str, Any] = {"sAMAccountName": name, "member": members}
        if gid is not None:
            attrs["gidNumber"] = str(gid)
        assert self.conn.add(dn, "group", attrs), self.conn.result
        self.dns.append(dn)
        return dn

    def usn(self, dn: str) -> bytes:
        (g,) = self.dc.search(dn, "(objectClass=*)", ["uSNChanged"], scope=ldap3.BASE)
        return bytes(g["raw_attributes"]["uSNChanged"][0])

    def close(self) -> None:
        for dn in self.dns:
            with contextlib.suppress(ldap3.core.exceptions.LDAPNoSuchObjectResult):
                self.conn.delete(dn)
        self.conn.unbind()


@pytest.fixture
def scratch(ad: tuple[addc.SambaDC, addir.ADDirectory]) -> Iterator[_Scratch]:
    s = _Scratch(ad[0])
    try:
        yield s
    finally:
        s.close()


def _person(i: int) -> str:
    return f"CN=Member {i:04d},{addir.PEOPLE}"


def test_token_groups_refresh_validates_by_stamps_and_sees_every_change(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """Once the entries expired, the refresh reads the token's groups with their stamps
    only: nothing changed, no group is fetched whole (m0002 is in big, 1,600 members,
    named by ASQ when cold) and the answers are the same; each change is seen at the
    next refresh, the changed group alone fetched whole. After ``cached cache -E``
    every group is fetched whole: a member's deletion moves no stamp on AD."""
    dc, data = ad
    login = "m0002"
    assert login in data.groups["big"][1]
    conn = scratch.conn
    rva = scratch.add("rva", 40980, [_person(2), _person(3)])
    rvb = scratch.add("rvb", 40981, [_person(2), _person(4)])
    rvc = scratch.add("rvc", 40982, [_person(2)])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, spy):
        b0 = _bytes()
        assert p.initgroups(login).outcome is Outcome.FOUND
        cold = _bytes() - b0
        assert spy.asq() == 1  # big's members
        groups = {"big", "Domain Users", "rva", "rvb", "rvc"}
        assert _groups_of(p, login) == groups
        stored = {g: _members(p, g) for g in groups}

        # Nothing changed: stamps only, every group touched (valid), none fetched.
        spy.calls.clear()
        spy.attrs.clear()
        got = _refresh(p, login)
        assert got["runs"] == 1 and got["checked"] == len(groups), got
        assert got["fetched"] == 0, got
        assert "member" not in {a.lower() for a in spy.attrs} and spy.asq() == 0, spy.calls
        assert got["bytes"] < cold / 10, (got, cold)
        assert _groups_of(p, login) == groups
        for g in groups:
            assert p.cache.group_by_name(g).state is State.VALID, g
            assert _members(p, g) == stored[g], g

        # A member added: the group's uSNChanged moves (linked attribute `member`).
        u0 = scratch.usn(rva)
        assert conn.modify(rva, {"member": [(ldap3.MODIFY_ADD, [_person(5)])]}), conn.result
        assert scratch.usn(rva) != u0
        got = _refresh(p, login)
        assert got["fetched"] == 1, got
        assert _members(p, "rva") == {"m0002", "m0003", "m0005"}
        assert p.cache.group_by_name("rva").state is State.VALID

        # A member removed.
        assert conn.modify(rva, {"member": [(ldap3.MODIFY_DELETE, [_person(3)])]}), conn.result
        assert _refresh(p, login)["fetched"] == 1
        assert _members(p, "rva") == {"m0002", "m0005"}

        # The user added to a new group.
        scratch.add("rvd", 40983, [_person(2)])
        got = _refresh(p, login)
        assert got["fetched"] == 1, got
        assert _groups_of(p, login) == groups | {"rvd"}
        assert _members(p, "rvd") == {"m0002"}

        # The user removed from a group: left the token, re-read (LdapProvider._vanished).
        assert conn.modify(rvb, {"member": [(ldap3.MODIFY_DELETE, [_person(2)])]}), conn.result
        _refresh(p, login)
        assert _groups_of(p, login) == (groups | {"rvd"}) - {"rvb"}
        assert _members(p, "rvb") == {"m0004"}

        # A group deleted: gone from the user's groups and from the cache.
        assert conn.delete(rvc), conn.result
        _refresh(p, login)
        assert _groups_of(p, login) == (groups | {"rvd"}) - {"rvb", "rvc"}
        assert p.cache.group_by_name("rvc").value is None

        # A group renamed (sAMAccountName and cn): both move uSNChanged.
        u0 = scratch.usn(rva)
        assert conn.modify(rva, {"sAMAccountName": [(ldap3.MODIFY_REPLACE, ["rve"])]})
        assert conn.modify_dn(rva, "CN=rve"), conn.result
        rve = f"CN=rve,{addir.GROUPS}"
        scratch.dns.append(rve)
        assert scratch.usn(rve) != u0
        got = _refresh(p, login)
        assert got["fetched"] == 1, got
        assert _groups_of(p, login) == (groups | {"rvd", "rve"}) - {"rva", "rvb", "rvc"}
        assert _members(p, "rve") == {"m0002", "m0005"}
        assert p.cache.group_by_name("rva").value is None

        # And nothing changed again: nothing fetched.
        assert _refresh(p, login)["fetched"] == 0

        # A member deleted: Samba takes its value out of rve without moving rve's
        # stamps. Expiry goes by them (the name stays until rve is due a whole read);
        # -E does not: every group fetched whole, the deletion seen.
        zdn = f"CN=Rv Deleted,{addir.PEOPLE}"
        scratch.dns.append(zdn)
        user = {"sAMAccountName": "rvdel", "uidNumber": "39991",
                "gidNumber": str(addir.DOMAIN_USERS_GID)}  # fmt: skip
        assert conn.add(zdn, "user", user), conn.result
        rve_now = f"CN=rve,{addir.GROUPS}"
        assert conn.modify(rve_now, {"member": [(ldap3.MODIFY_ADD, [zdn])]}), conn.result
        assert _refresh(p, login)["fetched"] == 1
        assert _members(p, "rve") == {"m0002", "m0005", "rvdel"}
        u0 = scratch.usn(rve_now)
        assert conn.delete(zdn), conn.result
        assert scratch.usn(rve_now) == u0
        assert _refresh(p, login)["fetched"] == 0
        assert "rvdel" in _members(p, "rve")
        got = _refresh(p, login, invalidate=True)
        assert got["fetched"] == got["checked"] == len(_groups_of(p, login)), got
        assert _members(p, "rve") == {"m0002", "m0005"}


def test_a_stamp_read_from_another_dc_is_not_trusted(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """uSNChanged and whenChanged are each DC's own (not replicated): a stamp stored
    from one DC never vouches for a group read from another, neither at a refresh nor
    at the store (the shortcut that only touches a group whose stamp is the stored
    one). The other DC is simulated by the identity the provider read: the stored
    content is made wrong under the stored stamp, which a trusted stamp would keep."""
    dc, _ = ad
    scratch.add("rvx", 40985, [_person(6), _person(7)])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, _spy):
        assert p.group_by_name("rvx").outcome is Outcome.FOUND
        assert _members(p, "rvx") == {"m0006", "m0007"}
        assert p.initgroups("m0006").outcome is Outcome.FOUND
        groups = _groups_of(p, "m0006")
        assert "rvx" in groups

        def corrupt() -> None:
            (modstamp, usn, gid, dn, _below) = p.cache.group_stamps(["rvx"])["rvx"]
            with p.cache.write() as batch:
                p.cache.put_group(batch, Group("rvx", gid, dn, ("m0006",), ()), modstamp, usn)
            assert _members(p, "rvx") == {"m0006"}

        # The same DC: its stamp is trusted (the store only touches the group).
        corrupt()
        assert p.group_by_name("rvx").outcome is Outcome.FOUND
        assert _members(p, "rvx") == {"m0006"}
        # Another DC (another invocationId): fetched and stored whole again.
        p.dc_id = "00000000-0000-0000-0000-000000000001"
        assert p.group_by_name("rvx").outcome is Outcome.FOUND
        assert _members(p, "rvx") == {"m0006", "m0007"}
        # The refresh after expiry likewise: every group fetched whole.
        corrupt()
        p.dc_id = "00000000-0000-0000-0000-000000000002"
        got = _refresh(p, "m0006")
        assert got["fetched"] == got["checked"] == len(groups), got
        assert _members(p, "rvx") == {"m0006", "m0007"}


def test_groups_read_after_a_reconnect_keep_no_stamp(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """The DC's identity is read once per connection: a group read on a connection
    made since (a reconnect or failover within the request, here forced by closing
    the connection before the tokenGroups search) may come from another DC, so it is
    stored without a stamp and fetched whole at the next refresh."""
    dc, _ = ad
    scratch.add("rvy", 40986, [_person(8)])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, spy):
        search_many = spy._search_many
        closed: list[bool] = []

        def reconnect_first(specs: list[Search], *args: Any, **kw: Any) -> Any:
            if not closed and any("tokenGroups" in sp.attrs for sp in specs):
                closed.append(True)
                p.client.close()  # the next search connects again: a new connection
            return search_many(specs, *args, **kw)

        spy._search_many = reconnect_first
        assert p.initgroups("m0008").outcome is Outcome.FOUND
        assert closed and _groups_of(p, "m0008") >= {"rvy", "big"}
        stamps = p.cache.group_stamps(sorted(_groups_of(p, "m0008")))
        assert stamps and all(t[0] == "" and t[1] == "" for t in stamps.values()), stamps
        # The next request identifies the new connection; nothing trusted, all whole.
        got = _refresh(p, "m0008")
        assert got["fetched"] == got["checked"] == len(stamps), got
        assert all(
            t[1].endswith("@" + p.dc_id) for t in p.cache.group_stamps(list(stamps)).values()
        )
        assert _refresh(p, "m0008")["fetched"] == 0


def test_a_dc_whose_invocation_id_is_unreadable_gets_exact_answers_and_keeps_no_stamp(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """A bind DN that may not read the DC's NTDS Settings object (here: a deny ACE
    for a service account of the test's own, set with samba-tool on the real DC)
    cannot identify the DC (AdProvider._identify_dc): the lookups are as exact as an
    administrator's, no group keeps a stamp, and every refresh — initgroups and
    group lookup — reads whole, never validating by a stamp it cannot tie to a DC."""
    dc, _ = ad
    (root,) = dc.search("", "(objectClass=*)", ["dsServiceName"], scope=ldap3.BASE)
    ntds = root["attributes"]["dsServiceName"][0]
    pw = "N0-Inv0cati0nId!"
    dn = f"CN=Rv NoId,{addir.PEOPLE}"
    conn = scratch.conn
    with contextlib.suppress(ldap3.core.exceptions.LDAPNoSuchObjectResult):
        conn.delete(dn)  # left by an interrupted run
    user = {"sAMAccountName": "rvnoid", "userAccountControl": "512",
            "unicodePwd": f'"{pw}"'.encode("utf-16-le")}  # fmt: skip
    assert conn.add(dn, "user", user), conn.result
    scratch.dns.append(dn)
    (me,) = dc.search(dn, "(objectClass=*)", ["objectSid"], scope=ldap3.BASE)
    sid = sid_to_str(bytes(me["raw_attributes"]["objectSid"][0]))
    # The DACL (SD_FLAGS control: DACL only, [MS-ADTS] 3.1.1.3.4.1.11), put back after.
    dacl = [("1.2.840.113556.1.4.801", True, bytes.fromhex("3003020104"))]
    conn.search(ntds, "(objectClass=*)", ldap3.BASE, attributes=["nTSecurityDescriptor"],
                controls=dacl)  # fmt: skip
    saved = conn.response[0]["raw_attributes"]["nTSecurityDescriptor"][0]
    logins = ("alice", "m0002")
    try:
        subprocess.run(
            [addc.SAMBA_TOOL, "dsacl", "set", "-s", str(dc.conf), "-H", dc.ldapi_uri,
             "--simple-bind-dn", dc.admin_dn, "--password", dc.admin_pw,
             "--objectdn", ntds, "--sddl", f"(D;;RP;;;{sid})"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        with _provider(dc, tmp_path / "admin") as (o, _):
            for login in logins:
                assert o.initgroups(login).outcome is Outcome.FOUND
            assert o.dc_id  # the administrator reads it
            want = {login: _groups_of(o, login) for login in logins}
            names = sorted(set().union(*want.values()))
            answers = {g: _answer(o, g) for g in names}
            assert all(t[1].endswith("@" + o.dc_id) for t in o.cache.group_stamps(names).values())
        with _provider(dc, tmp_path / "restricted", ldap_default_bind_dn=dn,
                       ldap_default_authtok=pw,
                       refresh_full_interval=STAMPS_AT_EXPIRY) as (p, spy):  # fmt: skip

            def exact_and_unstamped(login: str) -> None:
                assert p.dc_id == ""
                assert _groups_of(p, login) == want[login]
                mine = sorted(want[login])
                assert {g: _answer(p, g) for g in mine} == {g: answers[g] for g in mine}
                stamps = p.cache.group_stamps(mine)
                assert sorted(stamps) == mine
                assert all(t[:2] == ("", "") for t in stamps.values()), stamps

            for login in logins:
                assert p.initgroups(login).outcome is Outcome.FOUND
                exact_and_unstamped(login)
            # The refresh at expiry (stamps opted in): every group fetched whole.
            for login in logins:
                got = _refresh(p, login)
                assert got["fetched"] == got["checked"] == len(want[login]), (login, got)
                exact_and_unstamped(login)
            # A group lookup once expired: nothing to validate by, read whole.
            assert "big" in want["m0002"]
            spy.calls.clear()
            spy.attrs.clear()
            got = _lookup(p, "big")
            assert got["found"] and got["runs"] == 0, got
            assert "member" in {a.lower() for a in spy.attrs} or spy.asq(), spy.calls
            assert _answer(p, "big") == answers["big"]
            assert p.cache.group_stamps(["big"])["big"][:2] == ("", "")
    finally:
        assert conn.modify(ntds, {"nTSecurityDescriptor": [(ldap3.MODIFY_REPLACE, [saved])]},
                           controls=dacl), conn.result  # fmt: skip


# -- validation before transfer: the group lookup (refresh.refresh_group on AD) ------


def _lookup(p: AdProvider, key: str | int, invalidate: bool = False) -> dict[str, float]:
    """The cache expired (``_expire``), then the group lookup by name or gid (what
    ``getent group`` sends); returns the validations run, the groups fetched whole
    after one, the LDAP bytes, and the outcome."""
    _expire(p, invalidate)
    before, b0 = p.counters.snapshot(), _bytes()
    r = p.group_by_name(key) if isinstance(key, str) else p.group_by_gid(key)
    after = p.counters.snapshot()
    runs = after.get(VALIDATE, [0])[0] - before.get(VALIDATE, [0])[0]
    fetched = (after.get(VALIDATE_FETCHED, [0, 0.0, 0])[2]
               - before.get(VALIDATE_FETCHED, [0, 0.0, 0])[2])  # fmt: skip
    return {"runs": runs, "fetched": fetched, "bytes": _bytes() - b0,
            "found": r.outcome is Outcome.FOUND}  # fmt: skip


def _answer(p: AdProvider, name: str) -> tuple[int, set[str]] | None:
    """The group as the responder answers it: gid and members, nested expanded."""
    got = p.cache.group_by_name(name)
    if got.value is None:
        return None
    assert got.state is State.VALID, name
    return got.value.gid, set(got.value.members.decode().split("\0")) - {""}


def _read_whole_at(p: AdProvider, name: str, when: float) -> None:
    """Record that group ``name`` was read whole at ``when`` (the timestamp store's
    read_whole record, as BackendCache.commit writes it; stamps.due reads it)."""
    assert p.cache.ts is not None
    p.cache.ts.write([("read_whole", p.cache.key(name), READ_WHOLE.pack(when))])


def _no_member_values(spy: _Spy) -> None:
    assert "member" not in {a.lower() for a in spy.attrs} and spy.asq() == 0, spy.calls


def _validated(p: AdProvider, spy: _Spy, key: str | int) -> dict[str, float]:
    """The lookup once expired (``_lookup``), found by one validation by stamps: nothing
    fetched whole, no member value asked for."""
    spy.calls.clear()
    spy.attrs.clear()
    got = _lookup(p, key)
    assert got["found"] and got["runs"] == 1 and got["fetched"] == 0, (key, got)
    _no_member_values(spy)
    return got


def test_group_lookup_after_expiry_validates_by_stamps(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """``getent group`` of a group the cache holds, once expired: the stamps of the
    group and of its member groups, no member value; each change — a member added
    or removed, a member group's membership, a rename, a deletion — seen at the next
    lookup, which fetches whole; a member's deletion, which moves no stamp on AD, at
    the next whole read: when due, or at once after ``cached cache -E``."""
    dc, data = ad
    conn = scratch.conn
    gvb = scratch.add("gvb", 40961, [_person(12)])
    gva = scratch.add("gva", 40960, [_person(10), _person(11), gvb])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, spy):
        # The big group (1,600 members, ASQ when cold): by name and by gid.
        b0 = _bytes()
        assert p.group_by_name("big").outcome is Outcome.FOUND
        cold = _bytes() - b0
        big = _answer(p, "big")
        assert big == (40004, set(data.groups["big"][1]))
        for key in ("big", 40004):
            got = _validated(p, spy, key)
            assert got["bytes"] < cold / 20, (got, cold)
            assert _answer(p, "big") == big

        # A nested group: its stamp and its member group's, one round trip.
        assert p.group_by_name("gva").outcome is Outcome.FOUND
        assert _answer(p, "gva") == (40960, {"m0010", "m0011", "m0012"})
        for key in ("gva", 40960):
            _validated(p, spy, key)
            assert _answer(p, "gva") == (40960, {"m0010", "m0011", "m0012"})
            # gvb stays expired (its own answer reaches below what was checked) and
            # is validated by its own lookup.
            _validated(p, spy, "gvb")
            assert _answer(p, "gvb") == (40961, {"m0012"})

        def seen(key: str | int) -> None:
            got = _lookup(p, key)
            assert got["runs"] == 1 and got["fetched"] == 1, (key, got)

        # A member added, then one removed.
        assert conn.modify(gva, {"member": [(ldap3.MODIFY_ADD, [_person(13)])]}), conn.result
        seen("gva")
        assert _answer(p, "gva") == (40960, {"m0010", "m0011", "m0012", "m0013"})
        assert conn.modify(gva, {"member": [(ldap3.MODIFY_DELETE, [_person(10)])]})
        seen(40960)
        assert _answer(p, "gva") == (40960, {"m0011", "m0012", "m0013"})
        # The member group's membership (gva's own entry unchanged).
        u0 = scratch.usn(gva)
        assert conn.modify(gvb, {"member": [(ldap3.MODIFY_ADD, [_person(14)])]}), conn.result
        assert scratch.usn(gva) == u0
        seen("gva")
        assert _answer(p, "gva") == (40960, {"m0011", "m0012", "m0013", "m0014"})
        assert _answer(p, "gvb") == (40961, {"m0012", "m0014"})
        assert _lookup(p, "gva")["fetched"] == 0

        # A member deleted: AD drops its `member` value without moving the group's
        # uSNChanged (measured on Samba), as a member's rename; no stamp tells, so its
        # name stays until the group is due a whole read (refresh_full_interval).
        zdn = f"CN=Gv Deleted,{addir.PEOPLE}"
        scratch.dns.append(zdn)
        user = {"sAMAccountName": "gvdel", "uidNumber": "39990",
                "gidNumber": str(addir.DOMAIN_USERS_GID)}  # fmt: skip
        assert conn.add(zdn, "user", user), conn.result
        assert conn.modify(gva, {"member": [(ldap3.MODIFY_ADD, [zdn])]}), conn.result
        seen("gva")
        assert _answer(p, "gva") == (40960, {"m0011", "m0012", "m0013", "m0014", "gvdel"})
        u0 = scratch.usn(gva)
        assert conn.delete(zdn), conn.result
        assert scratch.usn(gva) == u0
        assert _lookup(p, "gva")["fetched"] == 0
        assert "gvdel" in _answer(p, "gva")[1]  # type: ignore[index]
        for g in ("gva", "gvb"):
            _read_whole_at(p, g, time.time() - p.cfg.refresh_full_interval - 1)
        got = _lookup(p, "gva")
        assert got["found"] and got["runs"] == 0, got  # due: read whole, no validation
        assert _answer(p, "gva") == (40960, {"m0011", "m0012", "m0013", "m0014"})
        # After -E, no stamp is gone by: the deletion seen at once.
        assert conn.add(zdn, "user", user), conn.result
        assert conn.modify(gva, {"member": [(ldap3.MODIFY_ADD, [zdn])]}), conn.result
        seen("gva")
        assert "gvdel" in _answer(p, "gva")[1]  # type: ignore[index]
        assert conn.delete(zdn), conn.result
        got = _lookup(p, "gva", invalidate=True)
        assert got["found"] and got["runs"] == 0, got  # read whole, no validation
        assert _answer(p, "gva") == (40960, {"m0011", "m0012", "m0013", "m0014"})

        # Renamed (sAMAccountName): by gid the new name; the old name is gone.
        assert conn.modify(gva, {"sAMAccountName": [(ldap3.MODIFY_REPLACE, ["gvr"])]})
        seen(40960)
        assert _answer(p, "gvr") == (40960, {"m0011", "m0012", "m0013", "m0014"})
        got = _lookup(p, "gva")
        assert got["runs"] == 1 and not got["found"], got
        assert _answer(p, "gva") is None

        # Deleted: gone from the cache, by name and by gid.
        assert _lookup(p, "gvr")["fetched"] == 0
        assert conn.delete(gva), conn.result
        got = _lookup(p, "gvr")
        assert got["runs"] == 1 and not got["found"], got
        assert _answer(p, "gvr") is None
        assert p.group_by_gid(40960).outcome is Outcome.NOT_FOUND


def test_group_lookup_through_a_non_posix_group_is_fetched_whole(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """A group whose members come through a non-POSIX group (walked through, never
    stored) keeps no stamp: that group's membership may change without the parent's
    uSNChanged moving. Fetched whole once expired, the change seen."""
    dc, _ = ad
    conn = scratch.conn
    gvn = scratch.add("gvn", None, [_person(15)])
    scratch.add("gvs", 40962, [_person(16), gvn])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, _spy):
        assert p.group_by_name("gvs").outcome is Outcome.FOUND
        assert _answer(p, "gvs") == (40962, {"m0015", "m0016"})
        assert p.cache.group_stamps(["gvs"])["gvs"][0] == ""  # no stamp to trust
        assert conn.modify(gvn, {"member": [(ldap3.MODIFY_ADD, [_person(17)])]}), conn.result
        got = _lookup(p, "gvs")
        assert got["found"] and got["runs"] == 0, got
        assert _answer(p, "gvs") == (40962, {"m0015", "m0016", "m0017"})


def test_group_lookup_by_mapped_gid_validates_by_stamps(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """With ID mapping the lookup by gid searches by the SID the gid maps back to
    (``AdProvider._group_by_gid_filter``); validated by stamps the same way."""
    dc, _ = ad
    conn = scratch.conn
    gvm = scratch.add("gvm", None, [_person(18)])
    with _provider(
        dc, tmp_path, ldap_id_mapping="true", refresh_full_interval=STAMPS_AT_EXPIRY
    ) as (p, spy):
        assert p.group_by_name("gvm").outcome is Outcome.FOUND
        view = p.cache.group_by_name("gvm").value
        assert view is not None
        gid = view.gid
        assert _answer(p, "gvm") == (gid, {"m0018"})
        spy.attrs.clear()
        got = _lookup(p, gid)
        assert got["found"] and got["runs"] == 1 and got["fetched"] == 0, got
        _no_member_values(spy)
        assert _answer(p, "gvm") == (gid, {"m0018"})
        assert conn.modify(gvm, {"member": [(ldap3.MODIFY_ADD, [_person(19)])]}), conn.result
        got = _lookup(p, gid)
        assert got["runs"] == 1 and got["fetched"] == 1, got
        assert _answer(p, "gvm") == (gid, {"m0018", "m0019"})


def test_group_lookup_after_expiry_trusts_no_stamp_of_another_dc(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """The stored content made wrong under the stored stamp: the same DC's stamp
    vouches for it (the lookup once expired only touches it), another DC's does not."""
    dc, _ = ad
    scratch.add("gvx", 40963, [_person(20), _person(21)])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, _spy):
        assert p.group_by_name("gvx").outcome is Outcome.FOUND
        (modstamp, usn, gid, dn, _below) = p.cache.group_stamps(["gvx"])["gvx"]
        assert usn.endswith("@" + p.dc_id)
        with p.cache.write() as batch:
            p.cache.put_group(batch, Group("gvx", gid, dn, ("m0020",), ()), modstamp, usn)
        got = _lookup(p, "gvx")
        assert got["runs"] == 1 and got["fetched"] == 0, got
        assert _answer(p, "gvx") == (40963, {"m0020"})
        p.dc_id = "00000000-0000-0000-0000-000000000003"
        got = _lookup(p, "gvx")
        assert got["runs"] == 1 and got["fetched"] == 1, got
        assert _answer(p, "gvx") == (40963, {"m0020", "m0021"})


@requires_nss
def test_getent_group_once_expired_validates_and_after_invalidation_reads_whole(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    """The daemon (stamps at expiry opted in), through glibc and libnss_sss: ``getent
    group`` of a nested group (team lists eng) by name and by gid, nothing changed on
    the DC. Once the cache expired (time passing, testing.cachetime): validated by
    stamps, nothing fetched whole. After ``cached cache -E``: read whole, no
    validation run (on AD no stamp is gone by after an invalidation,
    stamps.distrusted: a member's deletion moves none). The same answer each time."""
    dc, data = ad
    gid, members = data.groups["team"]
    with CachedDaemon(tmp_path, [dc.ldapi_uri], dc.base_dn,
                      **_opts(dc, refresh_full_interval=STAMPS_AT_EXPIRY)) as posix:  # fmt: skip
        _getent_group_refreshes(posix, gid, set(members))


def _getent_group_refreshes(posix: CachedDaemon, gid: int, members: set[str]) -> None:
    for key in ("team", str(gid)):
        for invalidate in (False, True):
            assert _group_line(posix, key) == ("team", gid, members)
            if invalidate:
                assert posix.cli("cache", "-E").returncode == 0
            else:
                cachetime.expire_daemon(posix.db_dir)
            before = posix.counters()
            assert _group_line(posix, key) == ("team", gid, members)
            after = posix.counters()

            def grew(name: str, i: int, after: Any = after, before: Any = before) -> float:
                return float(after.get(name, [0, 0.0, 0])[i] - before.get(name, [0, 0.0, 0])[i])

            runs, fetched = grew("be.validate", 0), grew("be.validate.fetched", 2)
            searches = grew("ldap.search", 0)
            want = (0, 0) if invalidate else (1, 0)
            assert (runs, fetched) == want and searches > 0, (key, invalidate, after)


def test_ad_default_reads_whole_at_expiry_so_a_deleted_member_is_seen(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """With ldap_schema = ad and refresh_full_interval left unset, a group read whole
    is due again when it expires (the default is the groups' lifetime): the refresh at
    expiry reads it whole, so a member's deletion — which moves no AD stamp — is seen
    then, as SSSD sees it, and a new account given the name does not inherit it."""
    dc, _ = ad
    conn = scratch.conn
    zdn = f"CN=Df Deleted,{addir.PEOPLE}"
    scratch.dns.append(zdn)
    user = {"sAMAccountName": "dfdel", "uidNumber": "39992",
            "gidNumber": str(addir.DOMAIN_USERS_GID)}  # fmt: skip
    assert conn.add(zdn, "user", user), conn.result
    scratch.add("gvd", 40964, [_person(22), zdn])
    with _provider(dc, tmp_path) as (p, _spy):
        assert p.cfg.refresh_full_interval == p.cfg.entry_cache_group_timeout > 0
        assert p.group_by_name("gvd").outcome is Outcome.FOUND
        assert _answer(p, "gvd") == (40964, {"m0022", "dfdel"})
        assert conn.delete(zdn), conn.result
        got = _lookup(p, "gvd")  # expired by time, not invalidated
        assert got["found"] and got["runs"] == 0, got  # due: read whole
        assert _answer(p, "gvd") == (40964, {"m0022"})


def test_a_changed_group_listing_an_unchanged_token_group_is_stored_complete(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """The user is in rnh, which rng lists; both POSIX token groups. When rng alone
    changes, the refresh fetches rnh whole with it (as the cold path fetches every
    token group): rng is stored complete, valid and with its stamp, and the next
    refresh fetches nothing — not rng again at every refresh, stored incomplete."""
    dc, _ = ad
    h = scratch.add("rnh", 40992, [_person(2)])
    g = scratch.add("rng", 40993, [h, _person(3)])
    with _provider(dc, tmp_path, refresh_full_interval=STAMPS_AT_EXPIRY) as (p, _spy):
        assert p.initgroups("m0002").outcome is Outcome.FOUND
        assert {"rnh", "rng"} <= _groups_of(p, "m0002")
        assert p.cache.group_by_name("rng").state is State.VALID
        assert scratch.conn.modify(g, {"member": [(ldap3.MODIFY_ADD, [_person(5)])]})
        got = _refresh(p, "m0002")
        assert got["fetched"] >= 1, got
        assert p.cache.group_by_name("rng").state is State.VALID
        assert p.cache.group_stamps(["rng"])["rng"][0]
        assert _members(p, "rng") == {"m0002", "m0003", "m0005"}
        assert _refresh(p, "m0002")["fetched"] == 0


def test_a_restart_with_another_id_range_stores_the_new_gids(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory], scratch: _Scratch
) -> None:
    """ID mapping with another range after a restart (no ``cached cache -E``): every
    group maps to a new gid with its stamp unchanged. The store's shortcut (same
    stamp: only touched) must not keep the old gid, or the user's list names gids the
    cache holds no group under (found in review: once the read_whole records outlived
    a restart, nothing made these groups be stored again)."""
    dc, _ = ad
    scratch.add("rim", None, [_person(22)])  # no gidNumber: the gid is the mapped SID
    with _provider(dc, tmp_path, ldap_id_mapping="true") as (p, _spy):
        assert p.initgroups("m0022").outcome is Outcome.FOUND
        view = p.cache.group_by_name("rim").value
        assert view is not None
        old = view.gid
    with _provider(
        dc, tmp_path, ldap_id_mapping="true",
        ldap_idmap_range_min="400000", ldap_idmap_range_max="2000400000",
    ) as (p, _spy):  # fmt: skip
        p.cache.invalidate_users()  # the user's list expired; its groups are not
        assert p.initgroups("m0022").outcome is Outcome.FOUND
        ig = p.cache.initgroups("m0022").value
        assert ig is not None
        view = p.cache.group_by_name("rim").value
        assert view is not None
        assert view.gid == old + 200000, (old, view.gid)
        assert view.gid in set(array.array("I", ig.gids))
        assert p.cache.group_by_gid(view.gid).value is not None
