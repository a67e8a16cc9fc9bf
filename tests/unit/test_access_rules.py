"""access_provider = ldap: the rules of ldap_access_order as SSSD 2.8.2's sdap_access.c
decides them, from the attributes read, the login and the time."""

from __future__ import annotations

import calendar
import time

import pytest

from cached.access import rules as r
from cached.access.authz import expand
from cached.access.rules import AccessState, Login
from cached.config.options import AccessRule, ExpirePolicy, PwdPolicy
from cached.ldap.schema import escape

NOW = calendar.timegm((2026, 12, 7, 10, 15, 0, 0, 0, 0))  # a Monday
DAY = 86400
F, E, P, L = AccessRule.FILTER, AccessRule.EXPIRE, AccessRule.PPOLICY, AccessRule.LOCKOUT
SVC, HOST, RHOST = AccessRule.AUTHORIZED_SERVICE, AccessRule.HOST, AccessRule.RHOST


def state(**attrs: list[str]) -> AccessState:
    return AccessState({k: [v.encode() for v in vals] for k, vals in attrs.items()},
                       filter_allow=True, lockout_allow=True, authz_allow=True)  # fmt: skip


SSHD = Login("sshd", "")


def decide(order: list[AccessRule], st: AccessState, policy: ExpirePolicy = ExpirePolicy.UNSET,
           login: Login = SSHD, hosts: tuple[str, ...] = ("h1", "h1.example"),
           has_filter: bool = True) -> r.Verdict:  # fmt: skip
    return r.evaluate(order, policy, st, login, hosts, NOW, has_filter=has_filter)


def test_filter_is_the_last_online_answer_and_unset_denies() -> None:
    assert decide([F], AccessState(filter_allow=True)).status == r.SUCCESS
    assert decide([F], AccessState(filter_allow=False)).status == r.PERM_DENIED
    assert decide([F], AccessState(filter_allow=None)).status == r.PERM_DENIED
    assert decide([F], AccessState(filter_allow=True), has_filter=False).status == r.PERM_DENIED
    assert decide([], AccessState()).status == r.PERM_DENIED


@pytest.mark.parametrize(
    ("value", "status"),
    [
        (None, r.SUCCESS),
        ("", r.SUCCESS),
        ("-1", r.SUCCESS),
        ("0", r.SUCCESS),
        (str(NOW // DAY + 1), r.SUCCESS),
        (str(NOW // DAY), r.ACCT_EXPIRED),  # today >= shadowExpire
        ("1", r.ACCT_EXPIRED),
        ("-2", r.SYSTEM_ERR),
        ("soon", r.SYSTEM_ERR),
    ],
)
def test_expire_shadow(value: str | None, status: int) -> None:
    st = state() if value is None else state(shadow_expire=[value])
    v = decide([E], st, ExpirePolicy.SHADOW)
    assert v.status == status
    if status == r.ACCT_EXPIRED:
        assert v.info == "Account expired according to shadow attributes"


def nt(t: float) -> str:
    return str(int((t + r.AD_EPOCH_OFFSET) * 10_000_000))


@pytest.mark.parametrize(
    ("uac", "expires", "status", "info"),
    [
        ("512", None, r.SUCCESS, ""),
        ("514", None, r.PERM_DENIED, "The user account is disabled on the AD server"),
        ("66050", nt(NOW - DAY), r.PERM_DENIED, "The user account is disabled on the AD server"),
        ("512", nt(NOW - DAY), r.ACCT_EXPIRED, "The user account is expired on the AD server"),
        ("512", nt(NOW + DAY), r.SUCCESS, ""),
        ("512", "0", r.SUCCESS, ""),
        ("512", str(0x7FFFFFFFFFFFFFFF), r.SUCCESS, ""),
        ("junk", "junk", r.SUCCESS, ""),  # ldb's default for what does not parse: 0
        (None, None, r.SUCCESS, ""),
    ],
)
def test_expire_ad(uac: str | None, expires: str | None, status: int, info: str) -> None:
    attrs = {}
    if uac is not None:
        attrs["ad_user_account_control"] = [uac]
    if expires is not None:
        attrs["ad_account_expires"] = [expires]
    v = decide([E], state(**attrs), ExpirePolicy.AD)
    assert (v.status, v.info) == (status, info)


@pytest.mark.parametrize("policy", [ExpirePolicy.RHDS, ExpirePolicy.IPA, ExpirePolicy.DS389])
def test_expire_nsaccountlock(policy: ExpirePolicy) -> None:
    assert decide([E], state(ns_account_lock=["TRUE"]), policy).status == r.PERM_DENIED
    assert decide([E], state(ns_account_lock=["true"]), policy).info == (
        "The user account is locked on the server")
    for value in ("FALSE", "yes", ""):
        assert decide([E], state(ns_account_lock=[value]), policy).allowed
    # ipa goes on to the AD attributes.
    disabled = state(ns_account_lock=["FALSE"], ad_user_account_control=["514"])
    assert decide([E], disabled, policy).allowed is (policy is not ExpirePolicy.IPA)


def test_expire_unset_policy_denies() -> None:
    assert decide([E], state()).status == r.PERM_DENIED


def test_expire_nds() -> None:
    p = ExpirePolicy.NDS
    assert decide([E], state(), p).allowed
    assert decide([E], state(nds_login_disabled=["TRUE"]), p).info == (
        "The user account is disabled on the server")
    assert decide([E], state(nds_login_expiration_time=["20261206000000Z"]), p).info == (
        "The user account is expired")
    assert decide([E], state(nds_login_expiration_time=["20271206000000Z"]), p).allowed
    assert not decide([E], state(nds_login_expiration_time=["garbage"]), p).allowed
    # Monday 10:15 UTC: index 1*48 + 20 = 68, byte 8, bit 4.
    tmap = bytearray(42)
    tmap[8] = 1 << 4
    st = AccessState({"nds_login_allowed_time_map": [bytes(tmap)]}, True, True, True)
    assert decide([E], st, p).allowed
    tmap[8] = 0xFF ^ (1 << 4)
    st = AccessState({"nds_login_allowed_time_map": [bytes(tmap)]}, True, True, True)
    assert decide([E], st, p).info == "The user account is not allowed at this time"
    st = AccessState({"nds_login_allowed_time_map": [b"short"]}, True, True, True)
    assert not decide([E], st, p).allowed


def gt(t: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(t))


@pytest.mark.parametrize(
    ("locked_time", "duration", "ppolicy", "lockout"),
    [
        (None, None, False, False),
        ("000001010000Z", None, True, True),
        (gt(NOW - 10), None, True, False),  # no duration: locked until unlocked
        (gt(NOW - 10), "60", True, False),
        (gt(NOW - 100), "60", False, False),  # the lockout is over
        (gt(NOW - 100), "0", True, False),  # 0: until unlocked
        (gt(NOW + 100), "60", False, False),  # not yet
        (gt(NOW - 10)[:-1] + ".123456Z", "60", True, False),
        ("yesterday", "60", True, False),  # does not parse: locked, as SSSD
        (gt(NOW - 10), "x", True, False),
    ],
)
def test_lockout(locked_time: str | None, duration: str | None, ppolicy: bool,
                 lockout: bool) -> None:  # fmt: skip
    assert r.locked(locked_time, duration, NOW, permanent_only=False) is ppolicy
    assert r.locked(locked_time, duration, NOW, permanent_only=True) is lockout


def test_lockout_rules_read_the_last_online_answer() -> None:
    for rule in (P, L):
        assert decide([rule], AccessState(lockout_allow=True)).allowed
        assert decide([rule], AccessState(lockout_allow=False)).status == r.PERM_DENIED
        assert decide([rule], AccessState()).status == r.PERM_DENIED


@pytest.mark.parametrize(
    ("values", "service", "status", "info"),
    [
        ([], "sshd", r.PERM_DENIED, "Authorized service attribute missing, access denied"),
        (["sshd"], "sshd", r.SUCCESS, ""),
        (["SSHD"], "sshd", r.SUCCESS, ""),
        (["*"], "login", r.SUCCESS, ""),
        (["*", "!su"], "su", r.PERM_DENIED, "Access denied by authorized service attribute"),
        (["!su", "su"], "su", r.PERM_DENIED, "Access denied by authorized service attribute"),
        (["login"], "sshd", r.PERM_DENIED,
         "Authorized service attribute has no matching rule, access denied"),
    ],
)  # fmt: skip
def test_authorized_service(values: list[str], service: str, status: int, info: str) -> None:
    v = decide([SVC], state(authorized_service=values), login=Login(service, ""))
    assert (v.status, v.info) == (status, info)


def test_host_tries_the_name_then_the_canonical_name() -> None:
    assert decide([HOST], state()).status == r.PERM_DENIED
    assert decide([HOST], state(authorized_host=["h1"])).allowed
    assert decide([HOST], state(authorized_host=["H1.EXAMPLE"])).allowed
    assert decide([HOST], state(authorized_host=["*"])).allowed
    assert not decide([HOST], state(authorized_host=["*", "!h1"])).allowed
    assert not decide([HOST], state(authorized_host=["other"])).allowed
    # A denial of the canonical name counts only when the short name matched nothing.
    assert decide([HOST], state(authorized_host=["h1", "!h1.example"])).allowed


def test_rhost() -> None:
    local, remote = Login("sshd", ""), Login("sshd", "10.0.0.9")
    assert decide([RHOST], state(), login=local).allowed  # a local login: no check
    assert not decide([RHOST], state(), login=remote).allowed
    assert decide([RHOST], state(authorized_rhost=["10.0.0.9"]), login=remote).allowed
    assert decide([RHOST], state(authorized_rhost=["*"]), login=remote).allowed
    assert not decide([RHOST], state(authorized_rhost=["*", "!10.0.0.9"]), login=remote).allowed
    assert not decide([RHOST], state(authorized_rhost=["10.0.0.8"]), login=remote).allowed


def test_the_first_rule_that_denies_decides() -> None:
    st = AccessState({"shadow_expire": [b"1"]}, filter_allow=False, lockout_allow=True)
    assert decide([E, F], st, ExpirePolicy.SHADOW).status == r.ACCT_EXPIRED
    assert decide([F, E], st, ExpirePolicy.SHADOW).status == r.PERM_DENIED


def test_attribute_roles() -> None:
    assert r.attribute_roles([F], ExpirePolicy.SHADOW) == ()
    assert r.attribute_roles([E, SVC, HOST, RHOST], ExpirePolicy.IPA) == (
        "ns_account_lock", "ad_user_account_control", "ad_account_expires",
        "authorized_service", "authorized_host", "authorized_rhost")  # fmt: skip


def test_authz_values_are_escaped() -> None:
    template = "(&(uid=$username)(|(host=$hostname)(host=${fqdn}))(x=$rhost)(y=$nothing))"
    got = expand(template, {"username": "a*)(uid=*", "hostname": "h", "fqdn": "h.x",
                            "rhost": "\\"}, escape)  # fmt: skip
    assert got == r"(&(uid=a\2a\29\28uid=\2a)(|(host=h)(host=h.x))(x=\5c)(y=))"


TODAY = NOW // DAY
REJECT, WARN, RENEW = (AccessRule.PWD_EXPIRE_REJECT, AccessRule.PWD_EXPIRE_WARN,
                       AccessRule.PWD_EXPIRE_RENEW)  # fmt: skip


def shadow_state(last: int, max_: int = 30, **more: str) -> AccessState:
    attrs = {"shadowLastChange": str(last), "shadowMax": str(max_), **more}
    st = state(**{r.PWD_ROLE + k: [v] for k, v in attrs.items()})
    return st


@pytest.mark.parametrize(
    ("rule", "status"), [(REJECT, r.PERM_DENIED), (WARN, r.SUCCESS), (RENEW, r.NEW_AUTHTOK_REQD)]
)
def test_pwd_expire_policy_of_an_expired_shadow_password(rule: AccessRule, status: int) -> None:
    """sdap_access.c: ERR_PASSWORD_EXPIRED_REJECT/_WARN/_RENEW; _warn allows and
    checks no later rule (here a filter that would deny)."""
    v = r.evaluate([rule, F], ExpirePolicy.UNSET, shadow_state(TODAY - 40), SSHD, (), NOW,
                   has_filter=False, pwd_policy=PwdPolicy.SHADOW)  # fmt: skip
    assert v.status == status, v


def test_pwd_expire_policy_allows_a_current_password_and_checks_on() -> None:
    v = r.evaluate([REJECT, F], ExpirePolicy.UNSET, shadow_state(TODAY - 10), SSHD, (), NOW,
                   has_filter=False, pwd_policy=PwdPolicy.SHADOW)  # fmt: skip
    assert v.status == r.PERM_DENIED and v.why.startswith("filter"), v


def test_pwd_expire_policy_account_expired_missing_and_none() -> None:
    def run(st: AccessState, policy: PwdPolicy = PwdPolicy.SHADOW) -> int:
        return r.evaluate([WARN], ExpirePolicy.UNSET, st, SSHD, (), NOW,
                          pwd_policy=policy).status  # fmt: skip

    assert run(shadow_state(TODAY - 40, shadowInactive="5")) == r.ACCT_EXPIRED
    assert run(state()) == r.SYSTEM_ERR  # no shadowLastChange: SSSD denies
    assert run(state(), PwdPolicy.NONE) == r.SUCCESS
    krb = state(**{r.PWD_ROLE + "krbLastPwdChange": ["20260101000000Z"],
                   r.PWD_ROLE + "krbPasswordExpiration": ["20260201000000Z"]})  # fmt: skip
    assert r.evaluate([RENEW], ExpirePolicy.UNSET, krb, SSHD, (), NOW,
                      pwd_policy=PwdPolicy.MIT_KERBEROS).status == r.NEW_AUTHTOK_REQD


def test_pwd_expire_policy_carries_the_expiry_warning() -> None:
    """Within shadowWarning days of shadowMax the verdict allows with the seconds left
    (SSSD's add_expired_warning), through the later rules."""
    st = shadow_state(TODAY - 10, 30, shadowWarning="25")
    v = r.evaluate([REJECT, F], ExpirePolicy.UNSET, st, SSHD, (), NOW,
                   pwd_policy=PwdPolicy.SHADOW)  # fmt: skip
    assert v.allowed and v.warn == 20 * DAY, v
    assert not decide([F], st, has_filter=False).allowed
