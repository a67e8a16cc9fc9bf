"""Who may log in: ``access_provider`` at PAM's account check, through Debian's
``pam_sss.so`` (the ctypes driver, and ``pamtester``) against ``cached serve`` with
``services = nss, pam`` and a real slapd.

The slapd carries, besides the usual users, the account attributes of other servers'
schemas (``testing/access.schema``: nsAccountLock, authorizedService,
userAccountControl and accountExpires, rhost) on entries made extensibleObject, and
groups nested three levels deep above USER. Statuses are SSSD 2.8.2's
(``sdap_access.c``, ``simple_access_check.c``): 6 PERM_DENIED, 13 ACCT_EXPIRED.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testing.daemon import CachedDaemon
from testing.pamenv import PamEnv, service_file, skip_reason
from testing.slapd import ACCESS_SCHEMA, Dataset, LiveDirectory, Slapd, TLSFiles

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-login"
USER = "user00001"
OTHER = "user00002"
THIRD = "user00003"
PASSWORD = "Zq7-acc-Secret-xK4"
OK, PERM_DENIED, NEW_AUTHTOK_REQD, ACCT_EXPIRED = 0, 6, 12, 13
DAY = 86400
# AD time: 100 ns since 1601-01-01.
AD_EPOCH = 11644473600


def dn(server: Slapd, user: str) -> str:
    return f"uid={user},ou=people,{server.base_dn}"


def group_dn(server: Slapd, name: str) -> str:
    return f"cn={name},ou=groups,{server.base_dn}"


def set_attrs(server: Slapd, user: str, **attrs: str | list[str] | None) -> None:
    """Replace (None: delete) attributes of ``user``'s entry."""
    lines = [f"dn: {dn(server, user)}", "changetype: modify"]
    for name, value in attrs.items():
        if value is None:
            lines += [f"delete: {name}", "-"]
            continue
        values = [value] if isinstance(value, str) else value
        lines += [f"replace: {name}", *(f"{name}: {v}" for v in values), "-"]
    server.ldap_modify("\n".join(lines) + "\n")


@pytest.fixture
def directory(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A private TLS slapd where USER, OTHER and THIRD have PASSWORD and may carry the
    access attributes; acc-l1 > acc-l2 > acc-l3 > USER (groups of groups), acc-deny
    holds OTHER."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_access"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
        schemas=(ACCESS_SCHEMA,),
    ) as s:
        for user in (USER, OTHER, THIRD):
            s.ldap_modify(
                f"dn: {dn(s, user)}\nchangetype: modify\nadd: objectClass\n"
                "objectClass: extensibleObject\n-\nreplace: userPassword\n"
                f"userPassword: {PASSWORD}\n"
            )
        groups = [("acc-l3", 30001, dn(s, USER)), ("acc-l2", 30002, group_dn(s, "acc-l3")),
                  ("acc-l1", 30003, group_dn(s, "acc-l2")), ("acc-deny", 30004, dn(s, OTHER))]
        for name, gid, member in groups:
            s.ldap_modify(
                f"dn: {group_dn(s, name)}\nchangetype: add\nobjectClass: groupOfNames\n"
                f"objectClass: posixGroup\ncn: {name}\ngidNumber: {gid}\nmember: {member}\n"
            )  # fmt: skip
        yield LiveDirectory(slapd=s, expected=small_2307bis.expected)


@pytest.fixture
def access_daemon(
    daemon_factory: Callable[..., CachedDaemon], directory: LiveDirectory, tls_files: TLSFiles
) -> Callable[..., tuple[CachedDaemon, PamEnv]]:
    """``make(pam={}, **domain_opts)``: a daemon with those access options (over
    ldaps://) and PAM clients for it: SERVICE, and ``sshd``."""

    def make(pam: dict[str, Any] | None = None, **opts: Any) -> tuple[CachedDaemon, PamEnv]:
        s = directory.slapd
        d = daemon_factory(
            directory,
            uris=[s.ldaps_uri],
            daemon={"services": "nss, pam"},
            pam=pam or {},
            ldap_tls_cacert=tls_files.ca_cert,
            **opts,
        )
        return d, d.pam_env({SERVICE: service_file(), "sshd": service_file()})

    return make


def account(env: PamEnv, user: str, service: str = SERVICE, **items: str) -> int:
    """acct_mgmt alone, as after a key-based ssh login."""
    (rc,) = env.drive(service, user, ["acct_mgmt"], items=items).codes
    return rc


def login(env: PamEnv, user: str) -> list[int]:
    return env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[PASSWORD]).codes


# -- permit, deny ---------------------------------------------------------------------


def test_permit_and_deny(access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]]) -> None:
    _, env = access_daemon()  # SSSD's default: permit
    assert login(env, USER) == [OK, OK]
    _, env = access_daemon(access_provider="deny")
    assert login(env, USER) == [OK, PERM_DENIED]
    r = env.pamtester(SERVICE, USER, ["acct_mgmt"])
    assert r.returncode == 1 and "Permission denied" in r.stderr + r.stdout, r


# -- simple ---------------------------------------------------------------------------


def test_simple_allows_a_group_reached_only_through_nesting(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    # USER is in acc-l3 only; acc-l3 is in acc-l2, which is in acc-l1.
    _, env = access_daemon(access_provider="simple", simple_allow_groups="acc-l1",
                           ldap_schema="rfc2307bis", ldap_group_nesting_level="3")  # fmt: skip
    assert login(env, USER) == [OK, OK]
    assert account(env, OTHER) == PERM_DENIED
    r = env.pamtester(SERVICE, USER, ["acct_mgmt"])
    assert r.returncode == 0, r


def test_simple_deny_beats_allow(access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]]) -> None:
    _, env = access_daemon(
        access_provider="simple", ldap_schema="rfc2307bis", ldap_group_nesting_level="3",
        simple_allow_users=f"{USER}, {OTHER}, {THIRD}@LDAP", simple_allow_groups="acc-l1",
        simple_deny_groups="acc-deny", simple_deny_users=THIRD,
    )  # fmt: skip
    assert account(env, USER) == OK
    assert account(env, OTHER) == PERM_DENIED  # allowed by name, denied by group
    assert account(env, THIRD) == PERM_DENIED  # allowed and denied by name


def test_simple_allow_users_alone_and_unknown_names(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _, env = access_daemon(access_provider="simple", simple_allow_users=f"nosuchuser, {OTHER}",
                           simple_deny_groups="nosuchgroup")  # fmt: skip
    assert account(env, OTHER) == OK
    assert account(env, USER) == PERM_DENIED


# -- ldap: filter ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filt", "allowed"),
    [
        ("(employeeType=staff)", {USER}),
        ("employeeType=staff", {USER}),  # parenthesised, as SSSD does
        ("(|(employeeType=staff)(employeeType=contractor))", {USER, OTHER}),
        ("(&(employeeType=*)(!(employeeType=contractor)))", {USER}),
        ("(employeeType=st*f)", {USER}),
        ("(memberOf=*)", set()),  # no memberOf overlay: nobody
        ("(uid=user0000*)", {USER, OTHER, THIRD}),
    ],
)
def test_ldap_filter(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory,
    filt: str, allowed: set[str],
) -> None:  # fmt: skip
    s = directory.slapd
    set_attrs(s, USER, employeeType="staff")
    set_attrs(s, OTHER, employeeType="contractor")
    _, env = access_daemon(access_provider="ldap", ldap_access_filter=filt)
    for user in (USER, OTHER, THIRD):
        assert account(env, user) == (OK if user in allowed else PERM_DENIED), user


def test_ldap_without_a_filter_denies_everyone(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _, env = access_daemon(access_provider="ldap")
    assert login(env, USER) == [OK, PERM_DENIED]


def test_a_filter_change_on_the_server_is_seen_at_the_next_check(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    _, env = access_daemon(access_provider="ldap", ldap_access_filter="(employeeType=staff)")
    assert account(env, USER) == PERM_DENIED
    set_attrs(directory.slapd, USER, employeeType="staff")
    assert account(env, USER) == OK


# -- ldap: expire ---------------------------------------------------------------------


def test_expire_shadow(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    today = int(time.time()) // DAY
    for user in (USER, OTHER):
        s.ldap_modify(f"dn: {dn(s, user)}\nchangetype: modify\nadd: objectClass\n"
                      "objectClass: shadowAccount\n")  # fmt: skip
    set_attrs(s, USER, shadowExpire=str(today - 1))
    set_attrs(s, OTHER, shadowExpire=str(today + 30))
    _, env = access_daemon(access_provider="ldap", ldap_access_order="expire",
                           ldap_account_expire_policy="shadow",
                           pam={"pam_account_expired_message": "Ask the help desk."})  # fmt: skip
    assert login(env, OTHER) == [OK, OK]
    assert account(env, THIRD) == OK  # no shadowExpire
    r = env.drive(SERVICE, USER, ["authenticate", "acct_mgmt"], answers=[PASSWORD])
    assert r.codes == [OK, ACCT_EXPIRED]
    assert r["acct_mgmt"].infos == []  # the message is for sshd (pam_verbosity 1)
    r = env.drive("sshd", USER, ["acct_mgmt"])
    assert r.codes == [ACCT_EXPIRED]
    assert r["acct_mgmt"].infos == ["Permission denied. Server message: Ask the help desk."]
    p = env.pamtester(SERVICE, USER, ["acct_mgmt"])
    assert p.returncode == 1 and "User account has expired" in p.stderr + p.stdout, p


@pytest.mark.parametrize(
    ("rule", "expired_status"),
    [("pwd_expire_policy_reject", PERM_DENIED), ("pwd_expire_policy_warn", OK),
     ("pwd_expire_policy_renew", NEW_AUTHTOK_REQD)],
)  # fmt: skip
def test_pwd_expire_policy_shadow(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory,
    rule: str, expired_status: int,
) -> None:
    """ldap_pwd_policy = shadow at the account check (sdap_access.c
    perform_pwexpire_policy): USER's password is older than shadowMax, OTHER's is
    not but within its warning days; THIRD's account is past shadowMax +
    shadowInactive (ACCT_EXPIRED). _warn allows the expired password and checks no
    later rule (the filter that would deny USER)."""
    s = directory.slapd
    today = int(time.time()) // DAY
    for user in (USER, OTHER, THIRD):
        s.ldap_modify(f"dn: {dn(s, user)}\nchangetype: modify\nadd: objectClass\n"
                      "objectClass: shadowAccount\n")  # fmt: skip
    set_attrs(s, USER, shadowLastChange=str(today - 40), shadowMax="30")
    set_attrs(s, OTHER, shadowLastChange=str(today - 10), shadowMax="30",
              shadowWarning="25")  # fmt: skip
    set_attrs(s, THIRD, shadowLastChange=str(today - 40), shadowMax="30", shadowInactive="5")
    _, env = access_daemon(access_provider="ldap", ldap_pwd_policy="shadow",
                           ldap_access_order=f"{rule}, filter",
                           ldap_access_filter=f"(uid={OTHER})")  # fmt: skip
    assert account(env, USER) == expired_status
    # Within shadowWarning days of shadowMax: allowed, with the warning SSSD adds.
    r = env.drive(SERVICE, OTHER, ["acct_mgmt"])
    assert r.codes == [OK], r
    assert r["acct_mgmt"].infos == ["Your password will expire in 20 day(s)."], r
    assert account(env, THIRD) == ACCT_EXPIRED


def test_pwd_expire_policy_reads_the_attributes_the_options_name(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    """ldap_user_shadow_max names the attribute holding the maximum age: here
    shadowMin (USER has no shadowMax, so by the standard name its password never
    expires)."""
    s = directory.slapd
    today = int(time.time()) // DAY
    s.ldap_modify(f"dn: {dn(s, USER)}\nchangetype: modify\nadd: objectClass\n"
                  "objectClass: shadowAccount\n")  # fmt: skip
    set_attrs(s, USER, shadowLastChange=str(today - 40), shadowMin="30")
    _, env = access_daemon(access_provider="ldap", ldap_pwd_policy="shadow",
                           ldap_access_order="pwd_expire_policy_reject",
                           ldap_user_shadow_max="shadowMin")  # fmt: skip
    assert account(env, USER) == PERM_DENIED


@pytest.mark.parametrize("policy", ["rhds", "ipa", "389ds"])
def test_expire_nsaccountlock(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory,
    policy: str,
) -> None:  # fmt: skip
    s = directory.slapd
    set_attrs(s, USER, nsAccountLock="TRUE")
    set_attrs(s, OTHER, nsAccountLock="false")
    _, env = access_daemon(access_provider="ldap", ldap_access_order="expire",
                           ldap_account_expire_policy=policy)  # fmt: skip
    assert login(env, USER) == [OK, PERM_DENIED]
    assert account(env, OTHER) == OK
    assert account(env, THIRD) == OK
    set_attrs(s, USER, nsAccountLock=None)
    assert account(env, USER) == OK


def test_expire_ad_attributes(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    past = (int(time.time()) - DAY + AD_EPOCH) * 10_000_000
    set_attrs(s, USER, userAccountControl="514")  # NORMAL_ACCOUNT | ACCOUNTDISABLE
    set_attrs(s, OTHER, userAccountControl="512", accountExpires=str(past))
    set_attrs(s, THIRD, userAccountControl="512", accountExpires="9223372036854775807")
    _, env = access_daemon(access_provider="ldap", ldap_access_order="expire",
                           ldap_account_expire_policy="ad")  # fmt: skip
    assert account(env, USER) == PERM_DENIED
    assert account(env, OTHER) == ACCT_EXPIRED
    assert account(env, THIRD) == OK


def test_expire_without_a_policy_denies_everyone(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _, env = access_daemon(access_provider="ldap", ldap_access_order="expire")
    assert account(env, USER) == PERM_DENIED


# -- ldap: authorized_service, host, rhost -------------------------------------------


def test_authorized_service_host_and_rhost(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    import socket

    s = directory.slapd
    set_attrs(s, USER, authorizedService=["sshd", "!" + SERVICE], host=socket.gethostname(),
              rhost=["*", "!192.0.2.66"])  # fmt: skip
    set_attrs(s, OTHER, authorizedService="*", host="!" + socket.gethostname())
    _, env = access_daemon(access_provider="ldap",
                           ldap_access_order="authorized_service, host, rhost")  # fmt: skip
    assert account(env, USER, "sshd") == OK
    assert account(env, USER, SERVICE) == PERM_DENIED
    assert account(env, USER, "sshd", rhost="192.0.2.1") == OK
    assert account(env, USER, "sshd", rhost="192.0.2.66") == PERM_DENIED
    assert account(env, OTHER, "sshd") == PERM_DENIED  # !this host
    assert account(env, THIRD, "sshd") == PERM_DENIED  # no authorizedService


# -- pam_authz_search -------------------------------------------------------------------


def test_pam_authz_search(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    set_attrs(s, USER, authorizedService="sshd", rhost="192.0.2.1")
    set_attrs(s, OTHER, authorizedService="login", rhost="192.0.2.1")
    _, env = access_daemon(
        access_provider="ldap", ldap_access_order="pam_authz_search",
        pam_authz_search="(&(objectClass=posixAccount)(uid=$username)"
                         "(authorizedService=$service)(rhost=${rhost}))",
    )  # fmt: skip
    assert account(env, USER, "sshd", rhost="192.0.2.1") == OK
    assert account(env, OTHER, "sshd", rhost="192.0.2.1") == PERM_DENIED
    assert account(env, USER, "sshd", rhost="192.0.2.2") == PERM_DENIED
    # A value cannot widen the filter: `*` is escaped, not a presence test.
    assert account(env, USER, "sshd", rhost="*") == PERM_DENIED
    assert account(env, USER, "sshd", rhost="*)(uid=*") == PERM_DENIED


# -- offline: the last online decision stands ---------------------------------------------


def test_offline_the_last_online_decision_stands(
    access_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    set_attrs(s, USER, employeeType="staff")
    set_attrs(s, OTHER, employeeType="contractor", nsAccountLock="TRUE")
    d, env = access_daemon(access_provider="ldap", ldap_access_order="filter, expire",
                           ldap_account_expire_policy="rhds",
                           ldap_access_filter="(|(employeeType=staff)(employeeType=contractor))",
                           cache_credentials="true")  # fmt: skip
    assert login(env, USER) == [OK, OK]
    assert account(env, OTHER) == PERM_DENIED  # locked
    # THIRD is resolved (in the cache) but never checked.
    assert env.drive(SERVICE, THIRD, ["setcred"]).codes == [OK]
    s.stop()
    assert login(env, USER) == [OK, OK]  # cached credentials, stored decision
    assert account(env, USER) == OK
    assert account(env, OTHER) == PERM_DENIED
    assert account(env, THIRD) == PERM_DENIED  # never checked online: nothing stands
    report = d.cli("status").stdout
    assert "account checks (access_provider = ldap): " in report, report
    assert "decided from the last online check" in report, report
    d.stop()  # the decisions are in the entry store, not in memory
    d.start()
    assert account(env, USER) == OK
    assert account(env, OTHER) == PERM_DENIED


# -- ldap: ppolicy, lockout -------------------------------------------------------------


@pytest.fixture
def ppolicy_directory(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A TLS slapd with the password policy overlay and a policy that locks an account
    for 60 s after 2 failed binds; USER and OTHER have PASSWORD."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_lockout"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
        ppolicy=True,
    ) as s:
        s.ldap_modify(
            f"dn: ou=policies,{s.base_dn}\nobjectClass: organizationalUnit\nou: policies\n\n"
            f"dn: cn=default,ou=policies,{s.base_dn}\nobjectClass: device\n"
            "objectClass: pwdPolicy\ncn: default\npwdAttribute: userPassword\n"
            "pwdLockout: TRUE\npwdMaxFailure: 2\npwdLockoutDuration: 60\n"
        )
        for user in (USER, OTHER):
            set_attrs(s, user, userPassword=PASSWORD)
        yield LiveDirectory(slapd=s, expected=small_2307bis.expected)


def locked_time(server: Slapd, user: str) -> str | None:
    out = subprocess.run(
        ["ldapsearch", "-LLL", "-x", "-H", server.uri, "-D", server.root_dn,
         "-w", server.root_pw, "-b", dn(server, user), "-s", "base", "pwdAccountLockedTime"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        if line.startswith("pwdAccountLockedTime: "):
            return line.split(": ", 1)[1]
    return None


def test_ppolicy_lockout_and_its_end(
    daemon_factory: Callable[..., CachedDaemon], ppolicy_directory: LiveDirectory,
    tls_files: TLSFiles,
) -> None:  # fmt: skip
    s = ppolicy_directory.slapd

    def make(order: str) -> PamEnv:
        d = daemon_factory(
            ppolicy_directory, uris=[s.ldaps_uri], daemon={"services": "nss, pam"},
            ldap_tls_cacert=tls_files.ca_cert, access_provider="ldap",
            ldap_access_order=order,
            ldap_pwdlockout_dn=f"cn=default,ou=policies,{s.base_dn}",
        )  # fmt: skip
        return d.pam_env({SERVICE: service_file()})

    env = make("ppolicy")
    assert login(env, USER) == [OK, OK]
    for _ in range(2):
        r = env.drive(SERVICE, USER, ["authenticate"], answers=["not-" + PASSWORD])
        assert r.codes == [7], r
    at = locked_time(s, USER)
    assert at is not None and at.endswith("Z"), at
    assert account(env, USER) == PERM_DENIED  # locked, for 60 s
    assert account(env, OTHER) == OK
    # The lock began 2 minutes ago: its 60 s are over. (SSSD 2.8.2 reads the duration
    # from the user's entry, where slapd does not put it, and would still deny.)
    ago = time.strftime("%Y%m%d%H%M%SZ", time.gmtime(time.time() - 120))
    set_attrs(s, USER, pwdAccountLockedTime=ago)
    assert account(env, USER) == OK
    set_attrs(s, USER, pwdAccountLockedTime="000001010000Z")  # until an administrator
    assert account(env, USER) == PERM_DENIED
    # The legacy `lockout` rule counts only the permanent lock.
    env = make("lockout")
    assert account(env, USER) == PERM_DENIED
    set_attrs(s, USER, pwdAccountLockedTime=at)
    assert account(env, USER) == OK
