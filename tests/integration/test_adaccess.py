"""``access_provider = ad`` on a host joined with ``adcli join`` (testing/adjoin.py),
with realmd's sssd.conf as written, through the real ``pam_sss.so``: the AD account
expiry (a disabled account, an expired one), ``ad_access_filter`` (with its ``DOM:``
entries) and the GPO-based login rights (``ad_gpo_access_control``), each an
``acct_mgmt`` of pam_sss against ``cached serve`` running in the host's namespaces.

One DC and one join for the run, shared with test_adjoin.py (tests/conftest.py
joined_host); each test its own daemon (its own options).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cached.ldap.gpo_fetch import DirectorySysvol, GpoFiles
from testing import addc, addir, adgpo, adjoin, pamenv, sssd
from testing.addc import ADEntry
from testing.adjoin import DOMAIN, JoinedHost
from testing.daemon import CachedDaemon
from testing.pamenv import service_file
from testing.pamenv import skip_reason as pam_skip_reason

pytestmark = pytest.mark.skipif(
    (adjoin.skip_reason() or pam_skip_reason()) is not None,
    reason=adjoin.skip_reason() or pam_skip_reason() or "",
)

SUCCESS, SYSTEM_ERR, PERM_DENIED, ACCT_EXPIRED = 0, 4, 6, 13
SERVICES = ("login", "su", "sshd")


@pytest.fixture(scope="module")
def host(joined_host: JoinedHost) -> JoinedHost:
    """The shared joined host (tests/conftest.py), whose DC serves
    adjoin.joined_directory(): the accounts below, disabled and expired."""
    return joined_host


def _daemon(host: JoinedHost, work: Path, extra: str = "") -> CachedDaemon:
    """realmd's sssd.conf unchanged (access_provider = ad included), ``extra`` lines
    added to the domain."""
    text = host.cached_config(work, adjoin.REALMD_SSSD_CONF)
    assert "access_provider = ad\n" in text
    if extra:
        text = text.replace(f"[domain/{DOMAIN}]\n", f"[domain/{DOMAIN}]\n{extra}", 1)
    return CachedDaemon.from_text(work, text, prefix=host.prefix)


def _account(d: CachedDaemon, user: str, service: str = "login") -> int:
    env = d.pam_env({s: service_file() for s in SERVICES})
    (rc,) = env.drive(service, f"{user}@{DOMAIN}", ["acct_mgmt"]).codes
    return rc


def test_expiry_of_ad_accounts(host: JoinedHost, tmp_path: Path) -> None:
    """The AD provider's expire rule: a disabled account PERM_DENIED, one past its
    accountExpires ACCT_EXPIRED, others allowed (GPOs not evaluated here)."""
    with _daemon(host, tmp_path, "ad_gpo_access_control = disabled\n") as d:
        assert _account(d, "alice") == SUCCESS, d.log_tail()
        assert _account(d, "acdisabled") == PERM_DENIED, d.log_tail()
        assert _account(d, "acexpired") == ACCT_EXPIRED, d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_ad_access_filter(host: JoinedHost, tmp_path: Path) -> None:
    """The filter that names this domain (DOM:) wins over a generic one; a user the
    search does not find is denied, the expiry still checked first."""
    eng = f"CN=eng,{addir.GROUPS}"
    flt = f"(memberOf=CN=nobody,{addir.GROUPS})?DOM:{DOMAIN}:(memberOf={eng})"
    with _daemon(host, tmp_path, f"ad_access_filter = {flt}\n"
                 "ad_gpo_access_control = disabled\n") as d:  # fmt: skip
        assert _account(d, "alice") == SUCCESS, d.log_tail()
        assert _account(d, "bob") == PERM_DENIED, d.log_tail()
        assert _account(d, "acdisabled") == PERM_DENIED, d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_ad_access_filter_of_another_domain_denies(host: JoinedHost, tmp_path: Path) -> None:
    with _daemon(host, tmp_path, "ad_access_filter = DOM:other.test:(objectClass=user)\n"
                 "ad_gpo_access_control = disabled\n") as d:  # fmt: skip
        assert _account(d, "alice") == PERM_DENIED, d.log_tail()



def test_expiry_and_filter_as_sssd(host: JoinedHost, tmp_path: Path) -> None:
    """SSSD 2.8.2's AD provider beside cached, the same sssd.conf and keytab: the
    same acct_mgmt statuses for the expiry and the filter (GPOs disabled: SSSD's
    gpo_child needs the DC's SMB too)."""
    reason = sssd.skip_reason()
    if reason:
        pytest.skip(reason)
    eng = f"CN=eng,{addir.GROUPS}"
    extra = (f"ad_access_filter = (objectClass=nomatch)?DOM:{DOMAIN}:(|(memberOf={eng})"
             "(sAMAccountName=ac*))\nad_gpo_access_control = disabled\n")  # fmt: skip
    conf = adjoin.REALMD_SSSD_CONF.replace(f"[domain/{DOMAIN}]\n",
                                           f"[domain/{DOMAIN}]\n{extra}", 1)  # fmt: skip
    s = sssd.SssdDaemon(tmp_path / "sssd", "", "", pam={})
    s.config = conf
    s.prefix = host.prefix
    users = ("alice", "bob", "acdisabled", "acexpired")
    with _daemon(host, tmp_path / "cached", extra) as d, s:
        ours = {u: _account(d, u) for u in users}
        env = pamenv.PamEnv(s.pipes_dir, pamenv.make_pamd(tmp_path / "pamd", {
            sv: service_file() for sv in SERVICES}), s.mc_dir)  # fmt: skip
        theirs = {u: env.drive("login", f"{u}@{DOMAIN}", ["acct_mgmt"]).codes[0] for u in users}
    assert ours == theirs == {"alice": SUCCESS, "bob": PERM_DENIED,
                              "acdisabled": PERM_DENIED, "acexpired": ACCT_EXPIRED}, d.log_tail()


# -- GPO-based login rights --------------------------------------------------------------
#
# SYSVOL is not read over SMB here: the DC of testing/adjoin.py serves no SMB (with
# `s3fs winbindd` added to its services, its smbd fails every session setup after the
# host's Kerberos authentication succeeded, STATUS_INTERNAL_ERROR at
# smb2_sesssetup.c:147, Samba 4.17.12). The host's GPO file store is filled from the
# DC's SYSVOL directory by the same GpoFiles the backend uses (DirectorySysvol), with
# an ad_gpo_cache_timeout that keeps it fresh; everything else — the computer object,
# the site and domain links, the GPOs' security filtering, the user's SIDs from the
# cache — is read from the DC by the daemon.

FRESH = 10**8  # ad_gpo_cache_timeout: the filled store stays fresh
SITE_DN = f"CN={adjoin.SITE},CN=Sites,CN=Configuration,{addc.BASE_DN}"


def _sid(host: JoinedHost, name: str) -> str:
    assert host.dc is not None
    out = subprocess.run(
        ["ldbsearch", "-H", str(host.dc.workdir / "private" / "sam.ldb"),
         f"(sAMAccountName={name})", "objectSid"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    (sid,) = re.findall(r"^objectSid: (S-[0-9-]+)$", out, re.M)
    return str(sid)


@pytest.fixture(scope="module")
def deny_gpo(host: JoinedHost) -> Iterator[adgpo.Gpo]:
    """A GPO linked to the host's site denying interactive logon to `team`, which
    alice is in through `eng` (nesting) and carol is not; made while the DC is stopped
    (its LDAP refuses simple binds without TLS: strong auth, as a real DC). Unlinked
    when the module ends: the joined host is shared (tests/conftest.py), and the
    site had no link before."""
    dc = host.dc
    assert dc is not None
    guid = "{" + str(uuid.uuid4()).upper() + "}"
    dn = f"CN={guid},CN=Policies,CN=System,{addc.BASE_DN}"
    folder = adgpo.sysvol(dc) / DOMAIN / "Policies" / guid
    (folder / "Machine").mkdir(parents=True)
    (folder / "User").mkdir()
    gpo = adgpo.Gpo(guid, dn, folder)
    adgpo.write_rights(gpo, {"SeDenyInteractiveLogonRight": [_sid(host, "team")]})
    dc.stop()
    dc.load(
        [ADEntry(dn, {"objectClass": "groupPolicyContainer", "displayName": "deny team",
                      "gPCFileSysPath": f"\\\\{DOMAIN}\\SysVol\\{DOMAIN}\\Policies\\{guid}",
                      "gPCFunctionalityVersion": "2", "flags": "0",
                      "versionNumber": str(gpo.version),
                      "gPCMachineExtensionNames": adgpo.MACHINE_EXTENSIONS}),
         ADEntry(f"CN=User,{dn}", {"objectClass": "container"}),
         ADEntry(f"CN=Machine,{dn}", {"objectClass": "container"})],
        modify=[ADEntry(SITE_DN, {"gPLink": f"[LDAP://{dn};0]"})],
    )  # fmt: skip
    dc.start()
    yield gpo
    dc.stop()
    dc.load([], modify=[ADEntry(SITE_DN, {"gPLink": []})])
    dc.start()


def _gpo_daemon(host: JoinedHost, work: Path, extra: str = "") -> CachedDaemon:
    """A daemon whose GPO file store holds every GPO of the DC's SYSVOL, fresh."""
    assert host.dc is not None
    sysvol = adgpo.sysvol(host.dc)
    policies = sysvol / DOMAIN / "Policies"
    files = GpoFiles(work / "db" / f"gpo_{DOMAIN}" / "files", FRESH,
                     lambda: DirectorySysvol({"sysvol": sysvol}))  # fmt: skip
    for folder in policies.iterdir():
        files.rights(folder.name, "sysvol", f"{DOMAIN}/Policies/{folder.name}")
    return _daemon(host, work, f"ad_gpo_cache_timeout = {FRESH}\n{extra}")


def test_gpo_denies_interactive_logon_to_a_nested_member(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    """SeDenyInteractiveLogonRight names `team`: alice (eng, in team) may not log in
    through login or su (interactive), may through sshd (remote interactive);
    carol, not in team, may."""
    with _gpo_daemon(host, tmp_path) as d:
        assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
        assert _account(d, "alice", "su") == PERM_DENIED, d.log_tail()
        assert _account(d, "alice", "sshd") == SUCCESS, d.log_tail()
        assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
        assert "SeDenyInteractiveLogonRight lists the user" in d.log_text(), d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_gpo_permissive_allows_and_logs(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    with _gpo_daemon(host, tmp_path, "ad_gpo_access_control = permissive\n") as d:
        assert _account(d, "alice", "login") == SUCCESS, d.log_tail()
        assert "would have been denied GPO-based logon access" in d.log_text(), d.log_tail()


def test_gpo_disabled_is_not_evaluated(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    with _daemon(host, tmp_path, "ad_gpo_access_control = disabled\n") as d:
        assert _account(d, "alice", "login") == SUCCESS, d.log_tail()
        assert "GPO access of" not in d.log_text(), d.log_tail()


def test_gpo_unreadable_sysvol_denies_under_enforcing(host: JoinedHost, tmp_path: Path) -> None:
    """No GPO file stored and no SMB on the DC: the evaluation fails, SYSTEM_ERR (as
    SSSD's, whose gpo_child cannot read SYSVOL either); permissive lets the user in."""
    with _daemon(host, tmp_path / "e") as d:
        assert _account(d, "carol", "login") == SYSTEM_ERR, d.log_tail()
        assert "GPO evaluation for login failed" in d.log_text(), d.log_tail()
        # The SMB library's messages (its session setup's tokens) stay out of the log.
        assert "smbprotocol" not in d.log_text(), d.log_tail()
    with _daemon(host, tmp_path / "p", "ad_gpo_access_control = permissive\n") as d:
        assert _account(d, "carol", "login") == SUCCESS, d.log_tail()


def test_gpo_offline_uses_the_last_rights(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    """With the DC stopped, the stored rights and the user's stored SIDs decide."""
    assert host.dc is not None
    with _gpo_daemon(host, tmp_path) as d:
        assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
        assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
        host.dc.stop()
        try:
            assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
            assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
            assert "offline: last stored GPO rights" in d.log_text(), d.log_tail()
        finally:
            host.dc.start()
