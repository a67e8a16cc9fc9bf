"""``access_provider = ad`` on a host joined with ``adcli join`` (testing/adjoin.py),
with realmd's sssd.conf as written, through the real ``pam_sss.so``: the AD account
expiry (a disabled account, an expired one), ``ad_access_filter`` (with its ``DOM:``
entries) and the GPO-based login rights (``ad_gpo_access_control``), each an
``acct_mgmt`` of pam_sss against ``cached serve`` running in the host's namespaces.

One DC and one join for the run, shared with test_adjoin.py (tests/conftest.py
joined_host); each test its own daemon (its own options).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import addc, addir, adgpo, adjoin, pamenv, sssd
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
    same acct_mgmt statuses for the expiry and the filter (GPOs disabled here: they
    are compared in test_gpo_as_sssd)."""
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
# The DC serves SYSVOL over SMB (JoinedHost(smb=True)): the GPO is made with samba-tool
# on the host (gpo create, setlink), its rights saved into SYSVOL over SMB as the Group
# Policy editor saves them (testing/adgpo.py), and the daemon reads GPT.INI and
# GptTmpl.inf from the DC over SMB with the host's Kerberos ticket (from its keytab), as
# SSSD's gpo_child does; the computer object, the site and domain links, the GPOs'
# security filtering and the user's SIDs come from the DC's LDAP.

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
    alice is in through `eng` (nesting) and carol is not. Unlinked when the module
    ends: the joined host is shared (tests/conftest.py), and the site had no link
    before."""
    gpo = adgpo.create_gpo_on(host, "deny team")
    adgpo.set_logon_rights_on(host, gpo, {"SeDenyInteractiveLogonRight": [_sid(host, "team")]})
    adgpo.link_on(host, SITE_DN, gpo)
    yield gpo
    adgpo.samba_tool_gpo(host, "dellink", SITE_DN, gpo.guid)


def test_gpo_denies_interactive_logon_to_a_nested_member(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    """SeDenyInteractiveLogonRight names `team`: alice (eng, in team) may not log in
    through login or su (interactive), may through sshd (remote interactive);
    carol, not in team, may. The GPO's files come over the DC's SMB."""
    with _daemon(host, tmp_path) as d:
        assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
        assert _account(d, "alice", "su") == PERM_DENIED, d.log_tail()
        assert _account(d, "alice", "sshd") == SUCCESS, d.log_tail()
        assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
        assert "SeDenyInteractiveLogonRight lists the user" in d.log_text(), d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()
    stored = tmp_path / "db" / f"gpo_{DOMAIN}" / "files"
    assert any(p.name.lower() == "gpttmpl.inf" for p in stored.rglob("*")), "not read over SMB"


def test_gpo_permissive_allows_and_logs(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    with _daemon(host, tmp_path, "ad_gpo_access_control = permissive\n") as d:
        assert _account(d, "alice", "login") == SUCCESS, d.log_tail()
        assert "would have been denied GPO-based logon access" in d.log_text(), d.log_tail()


def test_gpo_disabled_is_not_evaluated(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    with _daemon(host, tmp_path, "ad_gpo_access_control = disabled\n") as d:
        assert _account(d, "alice", "login") == SUCCESS, d.log_tail()
        assert "GPO access of" not in d.log_text(), d.log_tail()


@contextlib.contextmanager
def _unreadable(gpo: adgpo.Gpo) -> Iterator[None]:
    """The GPO's SYSVOL folder closed to everyone but root on the DC's disk: smbd,
    which opens files as the session's user, answers ACCESS_DENIED."""
    mode = gpo.folder.stat().st_mode
    gpo.folder.chmod(0o700)
    try:
        yield
    finally:
        gpo.folder.chmod(mode)


def test_gpo_unreadable_sysvol_denies_under_enforcing(
    host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path
) -> None:
    """A GPO whose files cannot be read: the evaluation fails, SYSTEM_ERR (as SSSD's);
    permissive lets the user in."""
    with _unreadable(deny_gpo):
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
    with _daemon(host, tmp_path) as d:
        assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
        assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
        host.dc.stop()
        try:
            assert _account(d, "alice", "login") == PERM_DENIED, d.log_tail()
            assert _account(d, "carol", "login") == SUCCESS, d.log_tail()
            assert "offline: last stored GPO rights" in d.log_text(), d.log_tail()
        finally:
            host.dc.start()


def test_gpo_as_sssd(host: JoinedHost, deny_gpo: adgpo.Gpo, tmp_path: Path) -> None:
    """SSSD 2.8.2 beside cached with realmd's sssd.conf unchanged (GPOs enforcing, its
    default) and the same keytab: its gpo_child reads the same GPO over the DC's SMB;
    the same acct_mgmt status for each user and service."""
    reason = sssd.skip_reason()
    if reason:
        pytest.skip(reason)
    s = sssd.SssdDaemon(tmp_path / "sssd", "", "", pam={})
    s.config = adjoin.REALMD_SSSD_CONF
    s.prefix = host.prefix
    users = ("alice", "carol")
    with _daemon(host, tmp_path / "cached") as d, s:
        ours = {(u, sv): _account(d, u, sv) for u in users for sv in SERVICES}
        env = pamenv.PamEnv(s.pipes_dir, pamenv.make_pamd(tmp_path / "pamd", {
            sv: service_file() for sv in SERVICES}), s.mc_dir)  # fmt: skip
        theirs = {(u, sv): env.drive(sv, f"{u}@{DOMAIN}", ["acct_mgmt"]).codes[0]
                  for u in users for sv in SERVICES}  # fmt: skip
        sssd_log = s.log_tail(80)
    expected = {(u, sv): SUCCESS for u in users for sv in SERVICES}
    expected[("alice", "login")] = expected[("alice", "su")] = PERM_DENIED
    assert ours == expected, d.log_tail()
    assert theirs == expected, sssd_log
