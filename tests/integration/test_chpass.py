"""Password changes and password policy through cached: Debian's ``pam_sss.so`` (the
ctypes driver, ``testing.pamdriver``) against ``cached serve`` with ``services = nss,
pam`` and ``chpass_provider = ldap``, whose backend binds to a real slapd over ldaps://
as the user and changes the password as the user (the RFC 3062 exop, or a replace of
userPassword), and a slapd with the password policy overlay (slo-ppolicy) for
expiry warnings, grace logins, lockout, forced changes and quality checks.

Each test has a private slapd (with Debian's access rules: a user may write their own
userPassword) and a private daemon. Times of the policy are made short (a lockout of
a few seconds, a password age of one second) and waited for by polling the server's
answer with a generous deadline.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import ldap3
import pytest

from testing.daemon import CachedDaemon
from testing.pamenv import PamEnv, service_file, skip_reason
from testing.slapd import Dataset, LiveDirectory, PasswordPolicy, Slapd, TLSFiles

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-passwd"
USER = "user00001"
PASSWORD = "Zq7-chpass-Secret-xK4"
NEW_PASSWORD = "Wm3-chpass-Changed-hT8"
# PAM_CHANGE_EXPIRED_AUTHTOK (security/_pam_types.h): change only an expired password.
CHANGE_EXPIRED_AUTHTOK = 0x20

SUCCESS, SYSTEM_ERR, PERM_DENIED, AUTH_ERR = 0, 4, 6, 7
NEW_AUTHTOK_REQD, AUTHTOK_ERR, MODULE_UNKNOWN = 12, 20, 28
DEADLINE = 120.0


def user_dn(server: Slapd, user: str) -> str:
    return f"uid={user},ou=people,{server.base_dn}"


def set_password(server: Slapd, user: str, password: str) -> None:
    server.ldap_modify(
        f"dn: {user_dn(server, user)}\nchangetype: modify\nreplace: userPassword\n"
        f"userPassword: {password}\n"
    )


def binds(server: Slapd, user: str, password: str) -> bool:
    """Does ``password`` bind as ``user`` (a check of the server's own state)?"""
    conn = ldap3.Connection(
        ldap3.Server(server.uri, get_info=ldap3.NONE, connect_timeout=30),
        user=user_dn(server, user), password=password, receive_timeout=30,
    )  # fmt: skip
    try:
        return bool(conn.bind())
    finally:
        conn.unbind()


@pytest.fixture
def server(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A private TLS slapd with the password policy overlay (no policy yet) and
    Debian's access rules; USER has PASSWORD."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_chpass"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
        ppolicy=True,
        self_write=True,
    ) as s:
        set_password(s, USER, PASSWORD)
        yield LiveDirectory(slapd=s, expected=small_2307bis.expected)


@pytest.fixture
def make(
    daemon_factory: Callable[..., CachedDaemon], server: LiveDirectory, tls_files: TLSFiles
) -> Callable[..., tuple[CachedDaemon, PamEnv]]:
    """``make(pam={}, **domain_opts)``: a daemon serving PAM over ldaps://, and the PAM
    clients for it."""

    def start(pam: dict[str, Any] | None = None, **opts: Any) -> tuple[CachedDaemon, PamEnv]:
        opts.setdefault("chpass_provider", "ldap")
        d = daemon_factory(
            server, uris=[server.slapd.ldaps_uri], daemon={"services": "nss, pam"},
            pam=pam or {}, ldap_tls_cacert=tls_files.ca_cert, **opts,
        )  # fmt: skip
        return d, d.pam_env({SERVICE: service_file()})

    return start


def passwd(env: PamEnv, user: str, old: str, new: str, *, as_user: bool = True,
           again: str | None = None) -> Any:  # fmt: skip
    """``pam_chauthtok`` as a user's ``passwd`` runs it (uid 65534: pam_sss asks for
    the old password), answering the old, the new and the new again."""
    answers = [old, new, new if again is None else again] if as_user else [new, new]
    return env.drive(SERVICE, user, ["chauthtok"], answers=answers, as_user=as_user)


def login(env: PamEnv, user: str, password: str, *ops: str | tuple[str, int],
          answers: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """authenticate + acct_mgmt (+ ``ops``), as root (the driver stops at a failure)."""
    return env.drive(SERVICE, user, ["authenticate", "acct_mgmt", *ops],
                     answers=[password, *answers])  # fmt: skip


def changed_time(server: Slapd, user: str) -> float:
    """The user's pwdChangedTime (the password policy overlay's), in seconds."""
    with server.connect(bind=True) as conn:
        conn.search(user_dn(server, user), "(objectClass=*)", search_scope="BASE",
                    attributes=["pwdChangedTime"])  # fmt: skip
        value = conn.response[0]["attributes"]["pwdChangedTime"]
    if isinstance(value, list):
        value = value[0]
    if isinstance(value, str):  # GeneralizedTime ldap3 did not parse
        return float(calendar.timegm(time.strptime(value[:14], "%Y%m%d%H%M%S")))
    return float(value.timestamp())


def wait_until(when: float) -> None:
    """Until the wall clock is past ``when`` (a password's age in the server's
    policy is counted in wall-clock seconds)."""
    deadline = time.monotonic() + DEADLINE
    while time.time() <= when:
        assert time.monotonic() < deadline, "the wall clock did not advance"
        time.sleep(0.1)


# -- passwd ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["exop", "ldap_modify"])
def test_a_user_changes_their_password_the_new_binds_the_old_does_not(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory, mode: str
) -> None:
    s = server.slapd
    d, env = make(ldap_pwmodify_mode=mode, cache_credentials="true")
    assert login(env, USER, PASSWORD).codes == [SUCCESS, SUCCESS]
    r = passwd(env, USER, PASSWORD, NEW_PASSWORD)
    assert r.codes == [SUCCESS], r
    assert r["chauthtok"].prompts == ["Current Password: ", "New Password: ",
                                      "Reenter new Password: "]  # fmt: skip
    assert binds(s, USER, NEW_PASSWORD) and not binds(s, USER, PASSWORD)
    assert login(env, USER, NEW_PASSWORD).codes == [SUCCESS, SUCCESS]
    assert login(env, USER, PASSWORD).codes == [AUTH_ERR]
    # The cached hash is the new password's: offline, the old one no longer works.
    s.stop()
    assert login(env, USER, NEW_PASSWORD).codes == [SUCCESS, SUCCESS]
    assert login(env, USER, PASSWORD).codes == [AUTH_ERR]
    d.stop()
    for path in d.workdir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert PASSWORD.encode() not in data and NEW_PASSWORD.encode() not in data, path


def test_a_wrong_old_password_is_not_accepted(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    _d, env = make()
    r = passwd(env, USER, "not-" + PASSWORD, NEW_PASSWORD)
    assert r.codes == [AUTH_ERR], r
    assert r["chauthtok"].infos == [
        "Password change failed. Server message: Old password not accepted."
    ]
    assert binds(server.slapd, USER, PASSWORD)


def test_an_empty_new_password_is_refused_before_the_server_sees_it(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    _d, env = make()
    offset = s.log_offset()
    r = passwd(env, USER, PASSWORD, "")
    # pam_sss sends no new password when none was typed: SYSTEM_ERR, as SSSD answers.
    assert r.codes == [SYSTEM_ERR], r
    log = s.log_path.read_text(errors="replace")[offset:]
    assert "oid=1.3.6.1.4.1.4203.1.11.1" not in log and " MOD " not in log, log
    assert binds(s, USER, PASSWORD)


def test_root_is_refused_a_change_without_the_old_password(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    _d, env = make()
    r = passwd(env, USER, "", NEW_PASSWORD, as_user=False)
    assert r.codes == [PERM_DENIED], r
    assert r["chauthtok"].infos == ["Password reset by root is not supported."]
    assert binds(server.slapd, USER, PASSWORD)


def test_offline_a_password_change_is_refused(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    _d, env = make(cache_credentials="true")
    assert login(env, USER, PASSWORD).codes == [SUCCESS, SUCCESS]
    server.slapd.stop()
    assert login(env, USER, PASSWORD).codes == [SUCCESS, SUCCESS]  # offline now
    r = passwd(env, USER, PASSWORD, NEW_PASSWORD)
    assert r.codes == [AUTHTOK_ERR], r
    assert r["chauthtok"].infos == ["System is offline, password change not possible"]


def test_without_a_chpass_provider_a_change_is_module_unknown(
    make: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _d, env = make(chpass_provider="none")
    assert passwd(env, USER, PASSWORD, NEW_PASSWORD).codes == [MODULE_UNKNOWN]


# -- the server's password policy -------------------------------------------------------


def test_a_password_failing_the_quality_check_is_refused_with_the_servers_text(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    s.set_policy(PasswordPolicy(must_change=False))
    _d, env = make()
    r = passwd(env, USER, PASSWORD, "Sh0rt")
    assert r.codes == [NEW_AUTHTOK_REQD], r
    assert r["chauthtok"].infos == [
        "Password change failed. Server message: Password fails quality checking policy"
    ]
    assert binds(s, USER, PASSWORD) and not binds(s, USER, "Sh0rt")


def test_the_expiry_warning_and_pwd_expiration_warning(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    s.set_policy(PasswordPolicy(must_change=False))
    set_password(s, USER, PASSWORD)  # pwdChangedTime now: 30 days left, warned from 60
    _d, env = make()
    r = login(env, USER, PASSWORD)
    assert r.codes == [SUCCESS, SUCCESS]
    # 30 days less the seconds since the change (0 or more): pam_sss rounds down.
    assert len(r["authenticate"].infos) == 1, r
    assert re.fullmatch(r"Your password will expire in (29|30) day\(s\)\.",
                        r["authenticate"].infos[0]), r  # fmt: skip
    # Warned only within pwd_expiration_warning days of the expiry.
    _d, env = make(pwd_expiration_warning=7)
    r = login(env, USER, PASSWORD)
    assert r.codes == [SUCCESS, SUCCESS] and r["authenticate"].infos == [], r


def test_grace_logins_then_a_forced_change(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    s.set_policy(PasswordPolicy(max_age=1, must_change=False))
    set_password(s, USER, PASSWORD)
    wait_until(changed_time(s, USER) + 2)  # the password is older than pwdMaxAge
    _d, env = make()
    for left in (1, 0):
        r = login(env, USER, PASSWORD)
        assert r.codes == [SUCCESS, SUCCESS], r
        assert r["authenticate"].infos == [
            f"Your password has expired. You have {left} grace login(s) remaining."
        ], r
    # No grace login left: the password is right but expired, so authenticate lets it
    # pass and acct_mgmt asks for a new one, which the user sets.
    r = login(env, USER, PASSWORD, ("chauthtok", CHANGE_EXPIRED_AUTHTOK),
              answers=(PASSWORD, NEW_PASSWORD, NEW_PASSWORD))  # fmt: skip
    # The change runs in the same transaction, as login(1) runs it.
    assert [c.rc for c in r.calls] == [SUCCESS, NEW_AUTHTOK_REQD, SUCCESS], r
    assert "Password expired. Change your password now." in r["acct_mgmt"].infos, r
    assert binds(s, USER, NEW_PASSWORD)
    assert login(env, USER, NEW_PASSWORD).codes == [SUCCESS, SUCCESS]


def test_a_reset_password_must_be_changed_at_the_next_login(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    s.set_policy(PasswordPolicy(must_change=True))
    set_password(s, USER, PASSWORD)  # by the administrator: pwdReset
    _d, env = make()
    r = login(env, USER, PASSWORD)
    assert r.codes == [SUCCESS, NEW_AUTHTOK_REQD], r
    assert "Password expired. Change your password now." in r["acct_mgmt"].infos, r
    r = env.drive(SERVICE, USER, ["authenticate", ("chauthtok", CHANGE_EXPIRED_AUTHTOK)],
                  answers=[PASSWORD, PASSWORD, NEW_PASSWORD, NEW_PASSWORD])  # fmt: skip
    assert r.codes == [SUCCESS, SUCCESS], r
    assert binds(s, USER, NEW_PASSWORD) and not binds(s, USER, PASSWORD)
    assert login(env, USER, NEW_PASSWORD).codes == [SUCCESS, SUCCESS]


def test_lockout_after_failures_and_its_end(
    make: Callable[..., tuple[CachedDaemon, PamEnv]], server: LiveDirectory
) -> None:
    s = server.slapd
    s.set_policy(PasswordPolicy(must_change=False, max_failure=3, lockout_duration=3))
    _d, env = make()
    for _ in range(3):
        assert login(env, USER, "not-" + PASSWORD).codes == [AUTH_ERR]
    # Locked: the right password is refused too (slapd says accountLocked; SSSD 2.8.2
    # answers AUTH_ERR like any refused bind).
    assert login(env, USER, PASSWORD).codes == [AUTH_ERR]
    assert "account locked (password policy)" in _d.log_text()
    # pwdLockoutDuration later the lock is over: polled, with a generous deadline.
    deadline = time.monotonic() + DEADLINE
    while login(env, USER, PASSWORD).codes != [SUCCESS, SUCCESS]:
        assert time.monotonic() < deadline, "the lockout did not end"
        time.sleep(0.5)


# -- ldap_pwd_policy = shadow (a server without the password policy overlay) ------------


@pytest.fixture
def plain_server(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A private TLS slapd without the password policy overlay (so no control decides
    instead of ldap_pwd_policy), with Debian's access rules; USER has PASSWORD and a
    shadowAccount."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_shadow"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
        self_write=True,
    ) as s:
        set_password(s, USER, PASSWORD)
        s.ldap_modify(f"dn: {user_dn(s, USER)}\nchangetype: modify\n"
                      "add: objectClass\nobjectClass: shadowAccount\n")  # fmt: skip
        yield LiveDirectory(slapd=s, expected=small_2307bis.expected)


def set_shadow(server: Slapd, **values: int) -> None:
    server.ldap_modify(
        f"dn: {user_dn(server, USER)}\nchangetype: modify\n"
        + "-\n".join(f"replace: {k}\n{k}: {v}\n" for k, v in values.items())
    )


def test_the_shadow_policy_warns_forces_a_change_and_expires_the_account(
    daemon_factory: Callable[..., CachedDaemon], plain_server: LiveDirectory,
    tls_files: TLSFiles,
) -> None:  # fmt: skip
    s = plain_server.slapd
    today = int(time.time()) // 86400
    d = daemon_factory(
        plain_server, uris=[s.ldaps_uri], daemon={"services": "nss, pam"}, pam={},
        ldap_tls_cacert=tls_files.ca_cert, ldap_pwd_policy="shadow",
        ldap_chpass_update_last_change="true",
    )  # fmt: skip
    env = d.pam_env({SERVICE: service_file()})
    # No shadowLastChange: SSSD refuses the login (SYSTEM_ERR).
    assert login(env, USER, PASSWORD).codes == [SYSTEM_ERR]
    set_shadow(s, shadowLastChange=today - 5, shadowMax=7, shadowWarning=3)
    r = login(env, USER, PASSWORD)
    assert r.codes == [SUCCESS, SUCCESS], r
    assert r["authenticate"].infos == ["Your password will expire in 2 day(s)."], r
    assert login(env, USER, "not-" + PASSWORD).codes == [AUTH_ERR]
    # Older than shadowMax: the login passes, the account check asks for a change,
    # which sets shadowLastChange to today (ldap_chpass_update_last_change).
    set_shadow(s, shadowLastChange=today - 10)
    r = login(env, USER, PASSWORD, ("chauthtok", CHANGE_EXPIRED_AUTHTOK),
              answers=(PASSWORD, NEW_PASSWORD, NEW_PASSWORD))  # fmt: skip
    # The change runs in the same transaction, as login(1) runs it.
    assert [c.rc for c in r.calls] == [SUCCESS, NEW_AUTHTOK_REQD, SUCCESS], r
    with s.connect(bind=True) as conn:
        conn.search(user_dn(s, USER), "(objectClass=*)", search_scope="BASE",
                    attributes=["shadowLastChange"])  # fmt: skip
        [last] = conn.response[0]["attributes"]["shadowLastChange"]
        assert int(last) in (today, today + 1)
    r = login(env, USER, NEW_PASSWORD)
    assert r.codes == [SUCCESS, SUCCESS] and r["authenticate"].infos == [], r
    # shadowExpire reached: the account has expired.
    set_shadow(s, shadowExpire=today)
    assert login(env, USER, NEW_PASSWORD).codes == [13]


def test_the_change_goes_to_ldap_chpass_uri_then_its_backup(
    daemon_factory: Callable[..., CachedDaemon], server: LiveDirectory, tls_files: TLSFiles
) -> None:
    s = server.slapd
    dead = "ldaps://127.0.0.1:1"  # nothing listens on port 1
    opts = dict(daemon={"services": "nss, pam"}, pam={}, ldap_tls_cacert=tls_files.ca_cert,
                ldap_network_timeout=2, ldap_opt_timeout=3)  # fmt: skip
    # Logins use ldap_uri; the change only ldap_chpass_uri: no server, so "offline".
    d = daemon_factory(server, uris=[s.ldaps_uri], ldap_chpass_uri=dead, **opts)
    env = d.pam_env({SERVICE: service_file()})
    assert login(env, USER, PASSWORD).codes == [SUCCESS, SUCCESS]
    r = passwd(env, USER, PASSWORD, NEW_PASSWORD)
    assert r.codes == [AUTHTOK_ERR], r
    assert r["chauthtok"].infos == ["System is offline, password change not possible"]
    assert binds(s, USER, PASSWORD)
    # With the server as ldap_chpass_backup_uri, the change reaches it.
    d = daemon_factory(server, uris=[s.ldaps_uri], ldap_chpass_uri=dead,
                       ldap_chpass_backup_uri=s.ldaps_uri, **opts)  # fmt: skip
    env = d.pam_env({SERVICE: service_file()})
    assert passwd(env, USER, PASSWORD, NEW_PASSWORD).codes == [SUCCESS]
    assert binds(s, USER, NEW_PASSWORD)
