"""Kerberos logins (``auth_provider = ad``, ``chpass_provider = ad``): Debian's
``pam_sss.so`` against ``cached serve``, whose backend gets the user's TGT from a real
Samba AD DC's KDC, validates it against the host keytab, and writes it to a ccache the
user owns, named in the PAM environment (KRB5CCNAME) as SSSD names it.

The DC, its KDC and the host's keytab are :mod:`testing.adkrb`'s, shared with
test_pam_krb5_sssd.py (tests/conftest.py ``kdc``); the KDC is reached
through a private krb5.conf (``KRB5_CONFIG``, in the daemon's environment as in
klist's). Each ccache is checked by ``klist`` run as the user.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing import adkrb
from testing.daemon import CachedDaemon
from testing.pamenv import PamEnv, service_file, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-krb5"
SUCCESS, SYSTEM_ERR, PERM_DENIED, AUTH_ERR = 0, 4, 6, 7
NEW_AUTHTOK_REQD, AUTHTOK_ERR = 12, 20
KLIST = shutil.which("klist") or "/usr/bin/klist"
UIDS = {name: 30001 + n for n, name in enumerate(sorted(adkrb.PASSWORDS))}


@pytest.fixture
def ccdir() -> Iterator[Path]:
    """krb5_ccachedir: a sticky world-writable directory as /tmp is (pytest's own are
    0700, which a user could not enter to read a ccache), removed after the test."""
    d = Path(tempfile.mkdtemp(prefix="cached-krb5-test-"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def krb_login(
    tmp_path: Path, kdc: adkrb.KerberosDC, ccdir: Path
) -> Iterator[Callable[..., tuple[CachedDaemon, PamEnv]]]:
    started: list[CachedDaemon] = []

    def make(**opts: Any) -> tuple[CachedDaemon, PamEnv]:
        d = CachedDaemon(
            tmp_path / f"cached{len(started)}",
            [kdc.ldapi_uri],
            kdc.dc.base_dn,
            daemon={"services": "nss, pam"},
            **kdc.domain_options(krb5_ccachedir=str(ccdir), **opts),
        )
        started.append(d)
        d.start()
        return d, d.pam_env({SERVICE: service_file()})

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def expired_again(kdc: adkrb.KerberosDC) -> Iterator[None]:
    """EXPIRED's password and "must change at next logon" as testing/adkrb.py made
    them, after a test that changes them: the DC is shared by the run
    (test_pam_krb5_sssd.py's cases find that user expired)."""
    yield
    kdc.samba_tool("user", "setpassword", adkrb.EXPIRED,
                   f"--newpassword={adkrb.PASSWORDS[adkrb.EXPIRED]}",
                   "--must-change-at-next-login")  # fmt: skip


def klist_as(user: str, ccname: str, *args: str) -> subprocess.CompletedProcess[str]:
    """klist run as ``user`` (its uid and primary gid) on ``ccname``."""
    uid = UIDS[user]
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={adkrb.USERS_GID}", "--clear-groups",
         KLIST, *args, ccname],
        capture_output=True, text=True, timeout=60, check=False,
        # No KRB5_CONFIG: klist reads the ccache only, and the test's krb5.conf sits
        # where the user cannot read it.
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def login(env: PamEnv, user: str, password: str) -> tuple[list[int], dict[str, str]]:
    res = env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[password])
    return res.codes, res.env


def test_a_password_login_leaves_a_valid_tgt_in_a_ccache_the_user_owns(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]], kdc: adkrb.KerberosDC
) -> None:
    d, env = krb_login()
    codes, penv = login(env, "kalice", adkrb.PASSWORDS["kalice"])
    assert codes == [SUCCESS, SUCCESS], d.log_tail()
    ccname = penv.get("KRB5CCNAME", "")
    assert ccname.startswith("FILE:"), (penv, d.log_tail())
    path = Path(ccname[5:])
    st = path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (UIDS["kalice"], adkrb.USERS_GID, 0o600)
    assert path.name.startswith(f"krb5cc_{UIDS['kalice']}_") and len(path.name) == len(
        f"krb5cc_{UIDS['kalice']}_XXXXXX"
    )
    # Valid (klist -s: a TGT not expired), for the user's principal.
    assert klist_as("kalice", ccname, "-s").returncode == 0
    out = klist_as("kalice", ccname).stdout
    assert f"Default principal: kalice@{adkrb.REALM}" in out, out
    assert f"krbtgt/{adkrb.REALM}@{adkrb.REALM}" in out, out
    # Validated against the keytab before it was stored.
    assert "TGT validation failed" not in d.log_text()
    assert "Traceback" not in d.log_text(), d.log_tail()
    # The password is in no log (debug level) and no file of the daemon's.
    secret = adkrb.PASSWORDS["kalice"].encode()
    for f in d.workdir.rglob("*"):
        if f.is_file():
            assert secret not in f.read_bytes(), f


def test_a_wrong_password_is_auth_err_as_sssd(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """KDC_ERR_PREAUTH_FAILED: SSSD's ERR_CREDS_INVALID, PAM_AUTH_ERR by the time it
    leaves its backend."""
    d, env = krb_login()
    codes, penv = login(env, "kbob", "Not-The-Passw0rd")
    assert codes == [AUTH_ERR], d.log_tail()
    assert "KRB5CCNAME" not in penv
    assert "wrong password (KDC_ERR_PREAUTH_FAILED)" in d.log_text(), d.log_tail()
    codes, _ = login(env, "kbob", adkrb.PASSWORDS["kbob"])
    assert codes == [SUCCESS, SUCCESS], d.log_tail()


def test_a_disabled_account_is_perm_denied(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    d, env = krb_login()
    codes, _ = login(env, adkrb.DISABLED, adkrb.PASSWORDS[adkrb.DISABLED])
    assert codes == [PERM_DENIED], d.log_tail()
    assert "KDC_ERR_CLIENT_REVOKED" in d.log_text(), d.log_tail()


def test_a_tgt_the_keytab_cannot_vouch_for_logs_no_one_in(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]], kdc: adkrb.KerberosDC
) -> None:
    """krb5_validate: the KDC answered for the right password, but the host's key it
    used is not the keytab's (as a rogue KDC's would not be): the service ticket does
    not decrypt (KRB5KRB_AP_ERR_BAD_INTEGRITY), PAM_AUTH_ERR as SSSD's, no ccache.
    With validation off the same login succeeds."""
    d, env = krb_login(krb5_keytab=str(kdc.rogue_keytab))
    codes, penv = login(env, "kerin", adkrb.PASSWORDS["kerin"])
    assert codes == [AUTH_ERR], d.log_tail()
    assert "KRB5CCNAME" not in penv
    assert "TGT validation failed" in d.log_text(), d.log_tail()
    d2, env2 = krb_login(krb5_keytab=str(kdc.rogue_keytab), krb5_validate="false")
    codes, penv = login(env2, "kerin", adkrb.PASSWORDS["kerin"])
    assert codes == [SUCCESS, SUCCESS], d2.log_tail()


def test_an_expired_password_is_changed_through_the_pam_stack(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]], kdc: adkrb.KerberosDC,
    expired_again: None,
) -> None:
    """pwdLastSet = 0: the KDC answers KDC_ERR_KEY_EXP; the right password makes it
    NEW_AUTHTOK_REQD (pam_sss: authenticate succeeds, acct_mgmt says must change),
    chauthtok changes it through kpasswd, and the new password logs in."""
    d, env = krb_login()
    user, old, new = adkrb.EXPIRED, adkrb.PASSWORDS[adkrb.EXPIRED], "Kr-N3w-Car0l-pw"
    res = env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[old])
    assert res.codes == [SUCCESS, NEW_AUTHTOK_REQD], d.log_tail()
    # A wrong password is not told it may change it.
    res = env.drive(SERVICE, user, ["authenticate"], answers=["Not-The-Passw0rd"])
    assert res.codes != [SUCCESS], d.log_tail()
    # The change in the login's own transaction, as login does after acct_mgmt's
    # answer: pam_sss asks the old password (it knows it must be changed), then the
    # new one twice; kpasswd changes it, and the new TGT is in the PAM environment.
    res = env.drive(SERVICE, user, ["authenticate", "acct_mgmt", ("chauthtok", 0x20)],
                    answers=[old, old, new, new])  # fmt: skip
    assert res.codes == [SUCCESS, NEW_AUTHTOK_REQD, SUCCESS], (res, d.log_tail())
    assert res["chauthtok"].prompts == ["Current Password: ", "New Password: ",
                                        "Reenter new Password: "], res  # fmt: skip
    assert klist_as(user, res.env["KRB5CCNAME"], "-s").returncode == 0
    assert "password of 'kcarol' changed" in d.log_text(), d.log_tail()
    codes, penv = login(env, user, new)
    assert codes == [SUCCESS, SUCCESS], d.log_tail()
    assert klist_as(user, penv["KRB5CCNAME"], "-s").returncode == 0
    codes, _ = login(env, user, old)
    assert codes == [AUTH_ERR], d.log_tail()


def test_offline_login_then_the_tgt_once_the_kdc_is_back(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]], kdc: adkrb.KerberosDC
) -> None:
    """The DC stops: the cached credentials of the last online login log the user in
    (a wrong password does not), KRB5CCNAME names a ccache the user owns with the
    principal and no ticket; krb5_store_password_if_offline: once the DC is back the
    backend gets the TGT into that very ccache."""
    d, env = krb_login(offline_timeout=2, offline_timeout_random_offset=0)
    user, password = "kbob", adkrb.PASSWORDS["kbob"]
    codes, _ = login(env, user, password)
    assert codes == [SUCCESS, SUCCESS], d.log_tail()
    kdc.stop()
    try:
        res = env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[password])
        assert res.codes == [SUCCESS, SUCCESS], d.log_tail()
        assert "offline login of 'kbob': PAM status 0" in d.log_text(), d.log_tail()
        ccname = res.env["KRB5CCNAME"]
        st = Path(ccname[5:]).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (UIDS[user], 0o600)
        assert klist_as(user, ccname, "-s").returncode != 0  # no ticket yet
        assert f"Default principal: {user}@{adkrb.REALM}" in klist_as(user, ccname).stdout
        codes, _ = login(env, user, "Not-The-Passw0rd")
        assert codes == [AUTH_ERR], d.log_tail()
    finally:
        kdc.start()
    # Polled: the backend's server check and its KDC retry run on their own timers.
    deadline = time.monotonic() + 120
    while klist_as(user, ccname, "-s").returncode != 0:
        assert time.monotonic() < deadline, d.log_tail()
        time.sleep(0.5)
    assert f"krbtgt/{adkrb.REALM}@{adkrb.REALM}" in klist_as(user, ccname).stdout
    assert "logged in offline, is now in" in d.log_text(), d.log_tail()
    # Held in memory only: in no log and no file.
    for f in d.workdir.rglob("*"):
        if f.is_file():
            assert password.encode() not in f.read_bytes(), f


def test_a_change_the_server_refuses_shows_its_reason_and_a_wrong_old_password_fails(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """A user's own chauthtok (pam_sss asks the current password first): a new password
    the domain's policy refuses is PAM_AUTHTOK_ERR with the kpasswd server's own text
    (Samba's; SSSD shows it as well); a wrong current password is
    PAM_SYSTEM_ERR with "Old password not accepted." (SSSD's changepw_child). The
    password is unchanged."""
    d, env = krb_login()
    user, password = "kerin", adkrb.PASSWORDS["kerin"]
    res = env.drive(SERVICE, user, ["chauthtok"], answers=[password, "short", "short"],
                    as_user=True)  # fmt: skip
    assert res.codes == [AUTHTOK_ERR], (res, d.log_tail())
    assert ("Password change failed. Server message: Password too short, password must be "
            "at least 7 characters long.") in res["chauthtok"].infos, res  # fmt: skip
    res = env.drive(SERVICE, user, ["chauthtok"], answers=["Not-The-Passw0rd"], as_user=True)
    assert res.codes == [SYSTEM_ERR], (res, d.log_tail())
    assert ("Password change failed. Server message: Old password not accepted."
            in res["chauthtok"].infos), res
    codes, _ = login(env, user, password)
    assert codes == [SUCCESS, SUCCESS], d.log_tail()


def test_sudo_is_not_handed_the_ccache_by_default(
    krb_login: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    """SSSD's default pam_response_filter (ENV:KRB5CCNAME:sudo, ENV:KRB5CCNAME:sudo-i):
    sudo's PAM stack authenticates the user, but does not get the ccache's name."""
    d, _ = krb_login()
    env = d.pam_env({"sudo": service_file(), SERVICE: service_file()})
    res = env.drive("sudo", "kalice", ["authenticate"], answers=[adkrb.PASSWORDS["kalice"]])
    assert res.codes == [SUCCESS] and "KRB5CCNAME" not in res.env, (res, d.log_tail())
    res = env.drive(SERVICE, "kalice", ["authenticate"], answers=[adkrb.PASSWORDS["kalice"]])
    assert res.codes == [SUCCESS] and "KRB5CCNAME" in res.env, (res, d.log_tail())
