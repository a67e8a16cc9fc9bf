"""AD logins through cached: Debian's ``pam_sss.so`` against ``cached serve`` with
``ldap_schema = ad`` and ``services = nss, pam``, whose backend binds as the user's DN to
a real Samba AD DC over ldaps (port 636) or ldap:// with StartTLS (port 389).

The DC (testing/addc.py) runs in a network namespace of its own, where its compiled-in
ports cannot clash with the host's; the tests reach its 636 and 389 through forwarders
on host ports whose outgoing sockets are made inside that namespace (``setns(2)`` on the
forwarding thread). Samba serves TLS with a certificate for ``localhost`` and
127.0.0.1 signed by a throwaway CA (``tls certfile``/``keyfile``/``cafile``), which
cached verifies (``ldap_tls_cacert``, ``ldap_tls_reqcert = demand``): the login's
password travels over verified TLS, as in production.

The DC is the session's shared ``ad`` DC (tests/conftest.py), which serves that TLS:
this module adds users with passwords to it, one disabled, one expired and one it
locks, and the lockout threshold that locks it, and removes them all when it ends,
so the modules after it see the DC as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ldap3
import pytest

from testing import addc, addir
from testing.daemon import CachedDaemon
from testing.netnsfwd import NetnsForwarder
from testing.pamenv import PamEnv, service_file, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-login"
AUTH_OK, PERM_DENIED, AUTH_ERR, ACCT_EXPIRED = 0, 6, 7, 13
USERS_GID = 10000  # gidNumber given to Domain Users, the users' primary group
FIRST_UID = 20101  # above the uids of testing/addir.py's users on the same DC
# Samba's default password policy wants complexity and 7+ characters.
PASSWORDS = {
    "adalice": "Ad-Al1ce-Secret7",
    "addora": "Ad-D0ra-Secret7",
    "adlena": "Ad-L3na-Secret7",
    "adexp": "Ad-Exp1red-Secret7",
}
DISABLED = "addora"
# Its accountExpires is the fixture's "now" (samba-tool user setexpiry --days=0).
EXPIRED = "adexp"
# Locked by its test's wrong passwords. The other users' wrong passwords stay under the
# threshold: each test's right password, accepted, resets AD's badPwdCount.
LOCKED = "adlena"
LOCKOUT_THRESHOLD = 3
PORTS = {"ldaps": 636, "starttls": 389}  # compiled into Samba


@pytest.fixture(scope="module")
def ad_dc(
    ad: tuple[addc.SambaDC, addir.ADDirectory],
) -> Iterator[tuple[addc.SambaDC, Path, dict[str, int]]]:
    """The shared ``ad`` DC (it serves TLS with a CA of the test's own) with the users
    of PASSWORDS added (DISABLED disabled, EXPIRED expired) and an account locked after
    LOCKOUT_THRESHOLD wrong passwords; yields it, the CA certificate and the host port
    of each transport. The users and the threshold are removed when the module ends."""
    dc, _ = ad
    assert dc.pid is not None and dc.tls is not None
    # The users' primary group: Domain Users, with its gidNumber from testing/addir.py.
    assert addir.DOMAIN_USERS_GID == USERS_GID
    (domain,) = dc.search(dc.base_dn, "(objectClass=*)", ["lockoutThreshold"], ldap3.BASE)
    threshold = list(domain["attributes"]["lockoutThreshold"])  # its values
    fwds: dict[str, NetnsForwarder] = {}
    try:
        # lockoutThreshold on the domain object is what samba-tool domain
        # passwordsettings set --account-lockout-threshold writes.
        dc.add_users(
            [addc.ADUser(login, password, FIRST_UID + n, USERS_GID,
                         disabled=login == DISABLED, expired=login == EXPIRED)
             for n, (login, password) in enumerate(sorted(PASSWORDS.items()))],
            modify=[addc.ADEntry(dc.base_dn, {"lockoutThreshold": str(LOCKOUT_THRESHOLD)})],
        )  # fmt: skip
        fwds = {t: NetnsForwarder(dc.pid, port) for t, port in PORTS.items()}
        yield dc, dc.tls.ca_cert, {t: f.port for t, f in fwds.items()}
    finally:
        for f in fwds.values():
            f.close()
        conn = dc.connect()
        try:
            for login in PASSWORDS:
                conn.search(dc.base_dn, f"(sAMAccountName={login})", ldap3.SUBTREE)
                for entry in [r for r in conn.response or [] if r.get("type") == "searchResEntry"]:
                    conn.delete(entry["dn"])
            conn.modify(dc.base_dn, {"lockoutThreshold": [(ldap3.MODIFY_REPLACE, threshold)]})
            names = "".join(f"(sAMAccountName={login})" for login in PASSWORDS)
            conn.search(dc.base_dn, f"(|{names})", ldap3.SUBTREE)
            left = [r["dn"] for r in conn.response or [] if r.get("type") == "searchResEntry"]
            assert not left, f"users left on the shared DC: {left}"
        finally:
            conn.unbind()


@pytest.fixture
def ad_login(
    tmp_path: Path, ad_dc: tuple[addc.SambaDC, Path, dict[str, int]]
) -> Iterator[Callable[..., tuple[CachedDaemon, PamEnv]]]:
    """``make(transport="ldaps"|"starttls", **domain_opts)``: a daemon with ``ldap_schema = ad`` on
    the DC over ``ldaps://``, or ``ldap://`` (the login runs StartTLS), and its PAM
    clients."""
    dc, ca, ports = ad_dc
    started: list[CachedDaemon] = []

    def make(transport: str = "ldaps", **opts: Any) -> tuple[CachedDaemon, PamEnv]:
        scheme = "ldaps" if transport == "ldaps" else "ldap"
        d = CachedDaemon(
            tmp_path / f"cached{len(started)}",
            [f"{scheme}://localhost:{ports[transport]}"],
            dc.base_dn,
            daemon={"services": "nss, pam"},
            ldap_schema="ad",
            ldap_default_bind_dn=dc.admin_dn,
            ldap_default_authtok=dc.admin_pw,
            ldap_tls_cacert=ca,
            ldap_tls_reqcert="demand",
            **opts,
        )
        started.append(d)
        d.start()
        return d, d.pam_env({SERVICE: service_file()})

    yield make
    for d in started:
        d.stop()


def login(env: PamEnv, user: str, password: str) -> list[int]:
    """authenticate + acct_mgmt (the driver stops at the first failure)."""
    return env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[password]).codes


@pytest.mark.parametrize("transport", ["ldaps", "starttls"])
def test_an_ad_user_logs_in_and_a_wrong_password_is_auth_err(
    ad_login: Callable[..., tuple[CachedDaemon, PamEnv]], transport: str
) -> None:
    d, env = ad_login(transport)
    assert login(env, "adalice", PASSWORDS["adalice"]) == [AUTH_OK, AUTH_OK], d.log_tail()
    assert login(env, "adalice", "Not-The-Password1") == [AUTH_ERR], d.log_tail()
    assert "(AD: wrong password, data 52e)" in d.log_text(), d.log_tail()
    # A wrong password leaves the right one working.
    assert login(env, "adalice", PASSWORDS["adalice"]) == [AUTH_OK, AUTH_OK], d.log_tail()
    assert "Traceback" not in d.log_text(), d.log_tail()


def test_a_disabled_ad_account_is_auth_err_as_sssd(
    ad_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """AD refuses the bind of a disabled account with invalidCredentials, diagnostic
    ``data 533`` ([MS-ERREF] ERROR_ACCOUNT_DISABLED); SSSD's LDAP auth has no case for
    it, so it is PAM_AUTH_ERR (an access provider, not the bind, would say more)."""
    d, env = ad_login()
    assert login(env, DISABLED, PASSWORDS[DISABLED]) == [AUTH_ERR], d.log_tail()
    # Refused by the DC for being disabled, not for want of a user or a server.
    assert "(AD: account disabled, data 533)" in d.log_text(), d.log_tail()
    assert "Traceback" not in d.log_text(), d.log_tail()



def test_a_locked_ad_account_is_perm_denied(
    ad_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """After LOCKOUT_THRESHOLD wrong passwords the DC locks the account and refuses
    even the right one with ``data 775``: PAM_PERM_DENIED, as SSSD's ERR_ACCOUNT_LOCKED."""
    d, env = ad_login()
    for _ in range(LOCKOUT_THRESHOLD):
        assert login(env, LOCKED, "Not-The-Password1") == [AUTH_ERR], d.log_tail()
    assert login(env, LOCKED, PASSWORDS[LOCKED]) == [PERM_DENIED], d.log_tail()
    assert "account locked" in d.log_text(), d.log_tail()


def test_the_account_check_of_disabled_and_expired_ad_accounts(
    ad_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """``ldap_account_expire_policy = ad`` reads userAccountControl and accountExpires
    as the DC keeps them (SSSD's sdap_account_expired_ad): disabled is PAM_PERM_DENIED,
    expired PAM_ACCT_EXPIRED, with the expired message for sshd."""
    d, env = ad_login(access_provider="ldap", ldap_access_order="expire",
                      ldap_account_expire_policy="ad")  # fmt: skip
    env = d.pam_env({SERVICE: service_file(), "sshd": service_file()})

    def account(user: str, service: str = SERVICE) -> int:
        (rc,) = env.drive(service, user, ["acct_mgmt"]).codes
        return rc

    assert login(env, "adalice", PASSWORDS["adalice"]) == [AUTH_OK, AUTH_OK], d.log_tail()
    assert account(DISABLED) == PERM_DENIED, d.log_tail()
    assert account(EXPIRED) == ACCT_EXPIRED, d.log_tail()
    r = env.drive("sshd", EXPIRED, ["acct_mgmt"])
    # pam_sss prints "Permission denied. " and the message, empty by default.
    assert r.codes == [ACCT_EXPIRED] and r["acct_mgmt"].infos == ["Permission denied. "], r
    # The bind itself is refused too (AD: data 701, account expired): PAM_AUTH_ERR.
    assert login(env, EXPIRED, PASSWORDS[EXPIRED]) == [AUTH_ERR], d.log_tail()
