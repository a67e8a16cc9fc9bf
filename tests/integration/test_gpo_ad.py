"""GPO-based login rights (cached/ldap/gpo.py) against a real Samba AD DC: GPOs made
and linked on the DC as the Group Policy tools make them (testing/adgpo.py), read by
cached's own LDAP client (the SD flags control for their DACL, the netlogon answer for
the site) and the GptTmpl.inf files from the DC's SYSVOL directory, decided for users
whose SIDs are the DC's tokenGroups (nesting resolved by the DC).

SYSVOL is read from the DC's directory (gpo_fetch.DirectorySysvol), and over SMB
(gpo_fetch.SmbSysvol, NTLM) from a standalone smbd sharing that directory: this DC
runs in a loopback-only network namespace that the test process reaches over ldapi
only. Reading the DC's own SMB with the host's Kerberos ticket, as the daemon does,
is tested on a joined host (tests/integration/test_adaccess.py).

The DC is the run's shared one (tests/conftest.py ``ad``; provisioning takes 6-11 s):
the tests add OUs, users, groups, a computer and GPOs of their own, and delete them
when the module ends.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cached.config.gpomap import GpoMode
from cached.ldap import gpo
from cached.ldap.client import LdapClient
from cached.ldap.gpo_fetch import DirectorySysvol, GpoFiles, SmbSysvol
from testing import addc, adgpo
from testing.addir import ADDirectory
from testing.backend import make_domain

HOST = "gpohost"
INTERACTIVE_DENY = "SeDenyInteractiveLogonRight"
INTERACTIVE_ALLOW = "SeInteractiveLogonRight"


@dataclass
class Site:
    dc: addc.SambaDC
    ou: str  # the host's OU
    parent_ou: str  # the OU above it
    denied_group: str  # its SID: the GPO denies it interactive logon
    member: tuple[str, list[str]]  # a user in it through a nested group: SID, groups
    outsider: tuple[str, list[str]]
    gpo: adgpo.Gpo


@pytest.fixture(scope="module")
def site(ad: tuple[addc.SambaDC, ADDirectory]) -> Iterator[Site]:
    """The GPO's objects on the shared DC (tests/conftest.py ``ad``), named as no
    other module names its own. When the module ends they are deleted, with the GPOs
    its tests made, and the domain's gPLink and gPOptions, which tests change, are
    as before."""
    dc, _ = ad
    domain_links = adgpo.values(dc, addc.BASE_DN, ["gPLink", "gPOptions"])
    gpos_before = adgpo.gpo_guids(dc)
    made: list[str] = []
    try:
        parent = adgpo.add_ou(dc, "Linux")
        made.append(parent)
        ou = adgpo.add_ou(dc, "Servers", parent)
        adgpo.add_computer(dc, HOST.upper(), ou)
        member = adgpo.add_user(dc, "gpomember")
        made.append(member)
        outsider = adgpo.add_user(dc, "gpooutsider")
        made.append(outsider)
        inner = adgpo.add_group(dc, "gpo-inner", [member])
        made.append(inner)
        denied = adgpo.add_group(dc, "gpo-denied", [inner])
        made.append(denied)
        denied_sid, _ = adgpo.sids_of(dc, denied)
        g = adgpo.create_gpo(dc, "Deny interactive logon")
        adgpo.set_logon_rights(dc, g, {INTERACTIVE_DENY: [denied_sid]})
        yield Site(dc, ou, parent, denied_sid, adgpo.sids_of(dc, member),
                   adgpo.sids_of(dc, outsider), g)  # fmt: skip
    finally:
        adgpo.restore(dc, addc.BASE_DN, domain_links)
        for guid in adgpo.gpo_guids(dc) - gpos_before:
            adgpo.delete_tree(dc, f"CN={guid},CN=Policies,CN=System,{addc.BASE_DN}")
            shutil.rmtree(adgpo.sysvol(dc) / addc.REALM.lower() / "Policies" / guid)
        for dn in reversed(made):
            adgpo.delete_tree(dc, dn)


@pytest.fixture
def links(site: Site) -> Iterator[None]:
    """Each test sets the links it needs; none are left for the next."""
    yield
    for som in (site.ou, site.parent_ou, addc.BASE_DN):
        adgpo.set_links(site.dc, som, [])
        adgpo.block_inheritance(site.dc, som, False)
    adgpo.set_flags(site.dc, site.gpo, 0)


def client(dc: addc.SambaDC, uri: str | None = None) -> LdapClient:
    cfg = make_domain([uri or dc.ldapi_uri], addc.BASE_DN, ldap_schema="ad",
                      ldap_default_bind_dn=addc.ADMIN_DN,
                      ldap_default_authtok=addc.ADMIN_PW)  # fmt: skip
    c = LdapClient(cfg)
    c.retry_in_lookups = True
    return c


def share(site: Site) -> DirectorySysvol:
    return DirectorySysvol({"sysvol": adgpo.sysvol(site.dc)})


def decide(site: Site, tmp_path: Path, who: tuple[str, list[str]], service: str = "login",
           ldap: LdapClient | None = None, files: GpoFiles | None = None,
           **settings) -> gpo.GpoDecision:  # fmt: skip
    files = files or GpoFiles(tmp_path / "files", 5, lambda: share(site))
    c = ldap or client(site.dc)
    try:
        return gpo.decide(
            c, files, domain=addc.REALM.lower(), domain_dn=addc.BASE_DN, host=HOST,
            user_sid=who[0], group_sids=who[1], service=service,
            settings=gpo.GpoSettings(**settings), state_dir=tmp_path / "state",
        )  # fmt: skip
    finally:
        c.close()


def test_nesting_is_the_dcs(site):
    _, groups = site.member
    assert site.denied_group in groups
    assert site.denied_group not in site.outsider[1]


@pytest.mark.parametrize("som", ["ou", "parent", "domain"])
def test_gpo_denies_interactive_logon_to_a_nested_member(site, links, tmp_path, som):
    where = {"ou": site.ou, "parent": site.parent_ou, "domain": addc.BASE_DN}[som]
    adgpo.set_links(site.dc, where, [(site.gpo, 0)])
    for service in ("login", "su"):
        got = decide(site, tmp_path, site.member, service)
        assert not got.allowed and not got.error, got
        assert INTERACTIVE_DENY in got.reason
    assert decide(site, tmp_path, site.outsider).allowed
    # sshd is remote interactive: this GPO does not restrict it.
    assert decide(site, tmp_path, site.member, "sshd").allowed


def test_modes(site, links, tmp_path):
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 0)])
    got = decide(site, tmp_path, site.member, mode=GpoMode.PERMISSIVE)
    assert got.allowed and got.would_deny
    assert decide(site, tmp_path, site.member, mode=GpoMode.DISABLED).allowed
    assert not decide(site, tmp_path, site.member).allowed


def test_unlinked_disabled_link_and_disabled_computer_part_are_ignored(site, links, tmp_path):
    assert decide(site, tmp_path, site.member).allowed  # not linked
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 1)])  # link disabled
    assert decide(site, tmp_path, site.member).allowed
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 0)])
    adgpo.set_flags(site.dc, site.gpo, 2)  # computer settings disabled
    assert decide(site, tmp_path, site.member).allowed
    adgpo.set_flags(site.dc, site.gpo, 1)  # user settings disabled: still applies
    assert not decide(site, tmp_path, site.member).allowed


def test_blocked_inheritance_and_enforced_links(site, links, tmp_path):
    adgpo.set_links(site.dc, addc.BASE_DN, [(site.gpo, 0)])
    adgpo.block_inheritance(site.dc, site.ou)
    assert decide(site, tmp_path, site.member).allowed
    adgpo.set_links(site.dc, addc.BASE_DN, [(site.gpo, 2)])  # enforced
    assert not decide(site, tmp_path, site.member).allowed


def test_a_later_gpo_and_implicit_deny(site, links, tmp_path):
    # An OU GPO that allows interactive logon to the outsider only: with the domain's
    # deny, the member is denied by both, the outsider allowed, anyone else not.
    allow = adgpo.create_gpo(site.dc, "Allow the outsider")
    adgpo.set_logon_rights(site.dc, allow, {INTERACTIVE_ALLOW: [site.outsider[0]]})
    adgpo.set_links(site.dc, site.ou, [(allow, 0)])
    adgpo.set_links(site.dc, addc.BASE_DN, [(site.gpo, 0)])
    assert decide(site, tmp_path, site.outsider).allowed
    assert not decide(site, tmp_path, site.member).allowed
    nobody: tuple[str, list[str]] = (f"{site.denied_group}-9", [])  # a SID in no list
    assert not decide(site, tmp_path, nobody).allowed
    adgpo.set_links(site.dc, site.ou, [])
    assert decide(site, tmp_path, nobody).allowed
    assert not decide(site, tmp_path, nobody, implicit_deny=True).allowed


def test_offline_uses_the_last_rights(site, links, tmp_path):
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 0)])
    assert not decide(site, tmp_path, site.member).allowed
    gone = "ldapi://" + str(tmp_path / "no-such-socket").replace("/", "%2F")
    offline = client(site.dc, gone)
    got = decide(site, tmp_path, site.member, ldap=offline)
    assert not got.allowed and got.offline
    assert decide(site, tmp_path, site.outsider, ldap=client(site.dc, gone)).allowed


def test_sysvol_is_read_again_only_when_the_version_rises(site, links, tmp_path):
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 0)])
    clock = [1000.0]
    files = GpoFiles(tmp_path / "files", 5, lambda: share(site), clock=lambda: clock[0])

    def run(who):
        c = client(site.dc)
        try:
            return gpo.decide(c, files, domain=addc.REALM.lower(), domain_dn=addc.BASE_DN,
                              host=HOST, user_sid=who[0], group_sids=who[1], service="login",
                              settings=gpo.GpoSettings(), state_dir=tmp_path / "state")  # fmt: skip
        finally:
            c.close()

    assert not run(site.member).allowed
    inf = "/".join(adgpo.SECURITY_INF)
    assert [p.split("/", 3)[-1] for p in files.fetched] == ["GPT.INI", inf]
    clock[0] += 1
    assert not run(site.member).allowed
    assert len(files.fetched) == 2  # within ad_gpo_cache_timeout: not read
    # The editor changes the GPO: it now denies the outsider instead.
    adgpo.set_logon_rights(site.dc, site.gpo, {INTERACTIVE_DENY: [site.outsider[0]]})
    try:
        clock[0] += 10
        assert run(site.member).allowed
        assert not run(site.outsider).allowed
        assert files.fetched[2:] == [f"{files.fetched[0]}", files.fetched[1]]
    finally:
        adgpo.set_logon_rights(site.dc, site.gpo, {INTERACTIVE_DENY: [site.denied_group]})


@pytest.fixture(scope="module")
def smb(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[adgpo.SysvolServer]:
    work = Path(tmp_path_factory.mktemp("smb", numbered=True))
    with adgpo.SysvolServer(work, adgpo.sysvol(site.dc)) as server:
        yield server


def test_sysvol_over_smb(site, links, smb, tmp_path):
    adgpo.set_links(site.dc, site.ou, [(site.gpo, 0)])
    readers: list[SmbSysvol] = []

    def connect(password: str = smb.password) -> SmbSysvol:
        # NTLM: the standalone test server has no KDC (production reads with Kerberos).
        r = SmbSysvol("127.0.0.1", port=smb.port, auth_protocol="ntlm", username=smb.user,
                      password=password)  # fmt: skip
        readers.append(r)
        return r

    files = GpoFiles(tmp_path / "files", 5, connect)
    try:
        got = decide(site, tmp_path, site.member, files=files)
        assert not got.allowed and not got.error, got
        assert decide(site, tmp_path, site.outsider, files=files).allowed
        assert len(files.fetched) == 2  # GPT.INI, GptTmpl.inf; the second decision: cached
        folder = files.fetched[0].rsplit("/", 1)[0]
        assert readers[0].read("SysVol", f"{folder}/none.inf") is None
        # A server that refuses the host: the evaluation fails, enforcing denies.
        refused = GpoFiles(tmp_path / "refused", 5, lambda: connect("wrong-password"))
        got = decide(site, tmp_path, site.outsider, files=refused)
        assert not got.allowed and got.error and "LOGON_FAILURE" in got.reason
    finally:
        for r in readers:
            r.close()
