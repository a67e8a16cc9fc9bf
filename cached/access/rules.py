"""``access_provider = ldap``: the rules of ``ldap_access_order`` (sssd-ldap(5); SSSD
2.8.2 ``sdap_access.c``, ``ldap_access.c``) as pure functions of what the backend read
of the user's entry, the login (PAM service, remote host) and the time.

Rules are taken in order; the first that does not allow decides. PAM status of each
outcome (``sdap_pam_access_handler_done``): denied PERM_DENIED (6), expired
ACCT_EXPIRED (13), an attribute that does not parse SYSTEM_ERR (4). Each refusal
SSSD explains carries its text as SYSTEM_INFO (``pam_sss`` writes it to syslog).

==========================  ===========================================================
rule                        allows when
==========================  ===========================================================
``filter``                  a base search of the user's entry with
                            ``(&(<name attr>=<name>)(objectclass=<user class>)<filter>)``
                            found it (online; offline: the last online answer). Unset
                            ``ldap_access_filter``: nobody
``expire``                  by ``ldap_account_expire_policy`` (:func:`expire`); unset:
                            nobody
``ppolicy``, ``lockout``    the entry has no ``pwdAccountLockedTime``, or the password
                            policy has no ``pwdLockout: TRUE``, or (``ppolicy`` only) the
                            lock is in the future or its duration is over
                            (:func:`locked`); offline: the last online answer
``authorized_service``      ``authorizedService`` has the PAM service or ``*`` and not
                            ``!service`` (case-insensitive)
``host``                    ``host`` has this host's name (or its canonical name) or
                            ``*``, and not ``!name``
``rhost``                   the login has no remote host, or ``rhost`` has it or ``*``,
                            and not ``!rhost``
``pwd_expire_policy_*``      ``ldap_pwd_policy`` (cached.auth.pwexpire) on the entry's
                            shadow or Kerberos attributes: an expired account
                            ACCT_EXPIRED; an expired password ``_reject`` PERM_DENIED,
                            ``_warn`` allowed and no later rule checked, ``_renew``
                            NEW_AUTHTOK_REQD; policy ``none``: allowed
``pam_authz_search``        (cached's, nslcd's option) a search of the user bases with
                            the filter, its ``$`` variables replaced, found an entry;
                            offline: the last online answer
==========================  ===========================================================
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cached.auth import pwexpire
from cached.config.options import AccessRule, ExpirePolicy, PwdPolicy
from cached.gentime import TimeForm, generalized_time

# PAM status values (Linux-PAM's): the verdict carries the number.
SUCCESS = 0
SYSTEM_ERR = 4
PERM_DENIED = 6
NEW_AUTHTOK_REQD = 12
ACCT_EXPIRED = 13

# The pwd_expire_policy rules: the status of an expired password (ldap_access.c
# sdap_pam_access_handler_done: ERR_PASSWORD_EXPIRED_REJECT, _WARN, _RENEW).
PWD_EXPIRED = {
    AccessRule.PWD_EXPIRE_REJECT: PERM_DENIED,
    AccessRule.PWD_EXPIRE_WARN: SUCCESS,
    AccessRule.PWD_EXPIRE_RENEW: NEW_AUTHTOK_REQD,
}
# The role of each password policy attribute: "pwd:" and its (standard) name.
PWD_ROLE = "pwd:"

# The roles of the attributes the rules read, keys of :attr:`AccessState.attrs`
# (the LDAP names are the domain's options, ``attribute_names``).
SHADOW_EXPIRE = "shadow_expire"
NS_ACCOUNT_LOCK = "ns_account_lock"
AD_ACCOUNT_EXPIRES = "ad_account_expires"
AD_USER_ACCOUNT_CONTROL = "ad_user_account_control"
NDS_LOGIN_DISABLED = "nds_login_disabled"
NDS_LOGIN_EXPIRATION_TIME = "nds_login_expiration_time"
NDS_LOGIN_ALLOWED_TIME_MAP = "nds_login_allowed_time_map"
AUTHORIZED_SERVICE = "authorized_service"
AUTHORIZED_HOST = "authorized_host"
AUTHORIZED_RHOST = "authorized_rhost"

# SSSD's texts (sdap_access.c), sent as SYSTEM_INFO.
SHADOW_EXPIRED_MSG = "Account expired according to shadow attributes"
AD_DISABLED_MSG = "The user account is disabled on the AD server"
AD_EXPIRED_MSG = "The user account is expired on the AD server"
RHDS_LOCKED_MSG = "The user account is locked on the server"
NDS_DISABLED_MSG = "The user account is disabled on the server"
NDS_EXPIRED_MSG = "The user account is expired"
NDS_TIME_MAP_MSG = "The user account is not allowed at this time"
SERVICE_MISSING_MSG = "Authorized service attribute missing, access denied"
SERVICE_DENIED_MSG = "Access denied by authorized service attribute"
SERVICE_NO_MATCH_MSG = "Authorized service attribute has no matching rule, access denied"

# pwdAccountLockedTime of an account locked until an administrator unlocks it.
PERMANENTLY_LOCKED = "000001010000Z"
# accountExpires: 0 and this mean "never" (MS-ADA1 2.2 Account-Expires).
AD_NEVER = 0x7FFFFFFFFFFFFFFF
AD_EPOCH_OFFSET = 11644473600  # seconds from 1601-01-01 to 1970-01-01
UAC_ACCOUNTDISABLE = 0x2


def attribute_roles(
    order: Sequence[AccessRule], policy: ExpirePolicy
) -> tuple[str, ...]:
    """The roles whose attributes ``order`` reads from the user's entry."""
    roles: list[str] = []
    if AccessRule.EXPIRE in order:
        roles += {
            ExpirePolicy.SHADOW: [SHADOW_EXPIRE],
            ExpirePolicy.AD: [AD_USER_ACCOUNT_CONTROL, AD_ACCOUNT_EXPIRES],
            ExpirePolicy.RHDS: [NS_ACCOUNT_LOCK],
            ExpirePolicy.DS389: [NS_ACCOUNT_LOCK],
            ExpirePolicy.IPA: [NS_ACCOUNT_LOCK, AD_USER_ACCOUNT_CONTROL, AD_ACCOUNT_EXPIRES],
            ExpirePolicy.NDS: [
                NDS_LOGIN_DISABLED, NDS_LOGIN_EXPIRATION_TIME, NDS_LOGIN_ALLOWED_TIME_MAP
            ],
        }.get(policy, [])
    if AccessRule.AUTHORIZED_SERVICE in order:
        roles.append(AUTHORIZED_SERVICE)
    if AccessRule.HOST in order:
        roles.append(AUTHORIZED_HOST)
    if AccessRule.RHOST in order:
        roles.append(AUTHORIZED_RHOST)
    return tuple(roles)


def pwd_attributes(order: Sequence[AccessRule], pwd_policy: PwdPolicy) -> tuple[str, ...]:
    """The password policy attributes the pwd_expire_policy rules of ``order`` read."""
    if pwd_policy == PwdPolicy.NONE or not any(r in PWD_EXPIRED for r in order):
        return ()
    if pwd_policy == PwdPolicy.SHADOW:
        return pwexpire.SHADOW_ATTRS
    return pwexpire.KERBEROS_ATTRS


@dataclass(frozen=True, slots=True)
class AccessState:
    """What the last online check learnt of a user: the attributes the rules read (by
    role) and the answers of the rules that ask the server (None: never asked). The
    backend stores it, so offline the last online decision stands (as SSSD keeps
    ``ldap_access_filter_allow`` and the user's attributes in its cache)."""

    attrs: Mapping[str, Sequence[bytes]] = field(default_factory=dict)
    filter_allow: bool | None = None
    lockout_allow: bool | None = None
    authz_allow: bool | None = None
    checked: float = 0.0  # when the server was last asked (time.time()); 0: never


@dataclass(frozen=True, slots=True)
class Login:
    """What PAM says of the login being checked."""

    service: str = ""
    rhost: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    status: int
    info: str = ""  # SYSTEM_INFO for the client's syslog, "" none
    why: str = ""  # for the log
    final: bool = False  # allowed, and no later rule is checked (pwd_expire_policy_warn)
    warn: int | None = None  # allowed: seconds before the password expires, to tell

    @property
    def allowed(self) -> bool:
        return self.status == SUCCESS


ALLOW = Verdict(SUCCESS)


def evaluate(
    order: Sequence[AccessRule],
    policy: ExpirePolicy,
    state: AccessState,
    login: Login,
    hostnames: Sequence[str],
    now: float,
    *,
    has_filter: bool = True,
    pwd_policy: PwdPolicy = PwdPolicy.NONE,
    warning: int | None = None,
) -> Verdict:
    """The decision of ``order`` for a user whose entry and server answers are
    ``state``; ``hostnames``: this host's name and canonical name (``host``);
    ``warning``: the password expiry warning period in seconds (mit_kerberos's;
    None its default). An allowed verdict carries the expiry warning a
    pwd_expire_policy rule found (SSSD adds it to the answer: add_expired_warning)."""
    if not order:
        return Verdict(PERM_DENIED, why="ldap_access_order is empty")
    warn = None
    for rule in order:
        if rule in PWD_EXPIRED:
            v = pwd_expire(rule, pwd_policy, state.attrs, now, warning)
            warn = v.warn if v.warn is not None else warn
        else:
            v = _rule(rule, policy, state, login, hostnames, now, has_filter)
        if not v.allowed or v.final:
            return v
    return ALLOW if warn is None else Verdict(SUCCESS, warn=warn)


def pwd_expire(
    rule: AccessRule,
    pwd_policy: PwdPolicy,
    attrs: Mapping[str, Sequence[bytes]],
    now: float,
    warning: int | None = None,
) -> Verdict:
    """A pwd_expire_policy rule (sdap_access.c perform_pwexpire_policy with
    ldap_auth.c check_pwexpire_policy): ``attrs`` holds the policy's attributes
    under PWD_ROLE + name."""
    if pwd_policy == PwdPolicy.NONE:
        return ALLOW
    names = pwd_attributes([rule], pwd_policy)
    values = {n: t for n in names if (t := _text(attrs.get(PWD_ROLE + n, ()))) is not None}
    try:
        v = (pwexpire.shadow(values, now) if pwd_policy == PwdPolicy.SHADOW
             else pwexpire.kerberos(values, now, warning))  # fmt: skip
    except pwexpire.PolicyDataError as e:
        return Verdict(SYSTEM_ERR, why=f"{rule}: {e}")
    if v.status == pwexpire.ACCT_EXPIRED:
        return Verdict(ACCT_EXPIRED, why=f"{rule}: {v.reason}")
    if v.status == pwexpire.NEW_AUTHTOK_REQD:
        return Verdict(PWD_EXPIRED[rule], why=f"{rule}: {v.reason}", final=True)
    return ALLOW if v.warn is None else Verdict(SUCCESS, warn=v.warn)


def _rule(
    rule: AccessRule,
    policy: ExpirePolicy,
    state: AccessState,
    login: Login,
    hostnames: Sequence[str],
    now: float,
    has_filter: bool,
) -> Verdict:
    if rule is AccessRule.FILTER:
        if not has_filter:
            return Verdict(PERM_DENIED, why="filter: ldap_access_filter is not set")
        return _answer(state.filter_allow, "filter: the entry does not match")
    if rule in (AccessRule.PPOLICY, AccessRule.LOCKOUT):
        return _answer(state.lockout_allow, f"{rule}: the account is locked")
    if rule is AccessRule.AUTHZ_SEARCH:
        return _answer(state.authz_allow, "pam_authz_search: nothing found")
    if rule is AccessRule.EXPIRE:
        return expire(policy, state.attrs, now)
    if rule is AccessRule.AUTHORIZED_SERVICE:
        return authorized_service(state.attrs.get(AUTHORIZED_SERVICE, ()), login.service)
    if rule is AccessRule.HOST:
        return authorized_host(state.attrs.get(AUTHORIZED_HOST, ()), hostnames)
    if rule is AccessRule.RHOST:
        return authorized_rhost(state.attrs.get(AUTHORIZED_RHOST, ()), login.rhost)
    return Verdict(PERM_DENIED, why=f"unknown rule {rule}")  # pragma: no cover


def _answer(allow: bool | None, why: str) -> Verdict:
    if allow:
        return ALLOW
    return Verdict(PERM_DENIED, why=why if allow is False else why + " (never checked online)")


def _text(values: Sequence[bytes]) -> str | None:
    """The first value as text (ldb_msg_find_attr_as_string), None when absent."""
    if not values:
        return None
    return values[0].decode("utf-8", "replace")


def _c_bool(values: Sequence[bytes]) -> bool:
    """ldb_msg_find_attr_as_bool with default false: TRUE/FALSE, any case."""
    v = _text(values)
    return v is not None and v.upper() == "TRUE"


def _c_unsigned(values: Sequence[bytes], bits: int) -> int:
    """ldb_msg_find_attr_as_uint/uint64 with default 0: strtoul of the whole value
    (a negative one wraps, as strtoul's does); 0 when it does not parse."""
    v = _text(values)
    if v is None:
        return 0
    s = v.strip()
    try:
        n = int(s, 10)
    except ValueError:
        return 0
    return n % (1 << bits)


def expire(policy: ExpirePolicy, attrs: Mapping[str, Sequence[bytes]], now: float) -> Verdict:
    """The ``expire`` rule (sdap_account_expired)."""
    if policy is ExpirePolicy.UNSET:
        return Verdict(PERM_DENIED, why="expire: ldap_account_expire_policy is not set")
    if policy is ExpirePolicy.SHADOW:
        return _shadow(attrs.get(SHADOW_EXPIRE, ()), now)
    if policy is ExpirePolicy.AD:
        return _ad(attrs, now)
    if policy in (ExpirePolicy.RHDS, ExpirePolicy.IPA, ExpirePolicy.DS389):
        if _c_bool(attrs.get(NS_ACCOUNT_LOCK, ())):
            return Verdict(PERM_DENIED, RHDS_LOCKED_MSG, "expire: nsAccountLock is TRUE")
        return _ad(attrs, now) if policy is ExpirePolicy.IPA else ALLOW
    return _nds(attrs, now)


def _shadow(values: Sequence[bytes], now: float) -> Verdict:
    v = _text(values)
    if v is None or v == "":
        return ALLOW
    try:
        days = int(v, 10)
    except ValueError:
        return Verdict(SYSTEM_ERR, why=f"expire: shadowExpire {v!r} is not a number")
    if days < -1:
        return Verdict(SYSTEM_ERR, why=f"expire: shadowExpire {v!r} is negative")
    today = int(now // 86400)
    if days > 0 and today >= days:
        return Verdict(ACCT_EXPIRED, SHADOW_EXPIRED_MSG, "expire: past shadowExpire")
    return ALLOW


def _ad(attrs: Mapping[str, Sequence[bytes]], now: float) -> Verdict:
    uac = _c_unsigned(attrs.get(AD_USER_ACCOUNT_CONTROL, ()), 32)
    expires = _c_unsigned(attrs.get(AD_ACCOUNT_EXPIRES, ()), 64)
    if uac & UAC_ACCOUNTDISABLE:
        return Verdict(PERM_DENIED, AD_DISABLED_MSG, "expire: the account is disabled")
    if expires not in (0, AD_NEVER) and (int(now) + AD_EPOCH_OFFSET) * 10_000_000 > expires:
        return Verdict(ACCT_EXPIRED, AD_EXPIRED_MSG, "expire: past accountExpires")
    return ALLOW


def _nds(attrs: Mapping[str, Sequence[bytes]], now: float) -> Verdict:
    if _c_bool(attrs.get(NDS_LOGIN_DISABLED, ())):
        return Verdict(PERM_DENIED, NDS_DISABLED_MSG, "expire: loginDisabled is TRUE")
    exp = _text(attrs.get(NDS_LOGIN_EXPIRATION_TIME, ()))
    if exp is not None:
        # SSSD parses it with strptime "%Y%m%d%H%M%SZ": anything else is expired.
        at = generalized_time(exp, TimeForm.SECONDS)
        if at is None or now > at:
            return Verdict(PERM_DENIED, NDS_EXPIRED_MSG, "expire: past loginExpirationTime")
    tmap = attrs.get(NDS_LOGIN_ALLOWED_TIME_MAP, ())
    if tmap and not nds_time_allowed(tmap[0], now):
        return Verdict(PERM_DENIED, NDS_TIME_MAP_MSG, "expire: outside loginAllowedTimeMap")
    return ALLOW


def nds_time_allowed(time_map: bytes, now: float) -> bool:
    """loginAllowedTimeMap (42 bytes, one bit per half hour of the week from Sunday
    00:00 UTC) allows ``now``: as SSSD's nds_check_time_map, whose bit 0 of a byte is
    never tested (its mask for the first half hour of each byte is 0)."""
    if len(time_map) != 42:
        return False
    tm = time.gmtime(now)
    wday = (tm.tm_wday + 1) % 7  # Python: Monday 0; C: Sunday 0
    index = wday * 48 + tm.tm_hour * 2 + (0 if tm.tm_min < 30 else 1)
    quot, rem = divmod(index, 8)
    mask = 1 << rem if rem > 0 else 0
    return bool(time_map[quot] & mask)


def locked(
    locked_time: str | None,
    duration: str | None,
    now: float,
    *,
    permanent_only: bool,
) -> bool:
    """Whether ``pwdAccountLockedTime`` = ``locked_time`` locks the account
    (sdap_access.c is_account_locked). ``permanent_only`` (the legacy ``lockout``
    rule): only ``000001010000Z`` locks. ``duration``: pwdLockoutDuration in seconds
    (0: until unlocked). A value that does not parse locks, as SSSD."""
    if locked_time is None:
        return False
    if locked_time.upper() == PERMANENTLY_LOCKED:
        return True
    if permanent_only:
        return False
    at = generalized_time(locked_time, TimeForm.FRACTION)
    if at is None:
        return True
    if at > now:
        return False
    if duration is None:
        return True
    try:
        seconds = int(duration.strip(), 0)
    except ValueError:
        return True
    if not 0 <= seconds < 1 << 32:
        return True
    return not (seconds != 0 and now - at > seconds)


def _listed(values: Sequence[bytes], wanted: Sequence[str]) -> bool | None:
    """SSSD's allow/deny walk over ``host``-like values: False on a ``!name`` of any
    of ``wanted``, True on a name of one or ``*``, None when nothing matches."""
    found: bool | None = None
    for raw in values:
        v = raw.decode("utf-8", "replace")
        for w in wanted:
            if v.startswith("!") and v[1:].casefold() == w.casefold():
                return False
            if v.casefold() == w.casefold() or v == "*":
                found = True
    return found


def authorized_service(values: Sequence[bytes], service: str) -> Verdict:
    if not values:
        return Verdict(PERM_DENIED, SERVICE_MISSING_MSG, "authorized_service: none listed")
    got = _listed(values, [service])
    if got is False:
        return Verdict(PERM_DENIED, SERVICE_DENIED_MSG, f"authorized_service: !{service}")
    if got is None:
        return Verdict(PERM_DENIED, SERVICE_NO_MATCH_MSG, f"authorized_service: no {service}")
    return ALLOW


def authorized_host(values: Sequence[bytes], hostnames: Sequence[str]) -> Verdict:
    """SSSD tries the host name, then (when that matched nothing) its canonical name."""
    if not values:
        return Verdict(PERM_DENIED, why="host: none listed")
    for name in hostnames:
        got = _listed(values, [name])
        if got is False:
            return Verdict(PERM_DENIED, why=f"host: !{name}")
        if got:
            return ALLOW
    return Verdict(PERM_DENIED, why="host: no rule for this host")


def authorized_rhost(values: Sequence[bytes], rhost: str) -> Verdict:
    if not rhost:
        return ALLOW  # a local login: SSSD checks nothing
    if not values:
        return Verdict(PERM_DENIED, why="rhost: none listed")
    got = _listed(values, [rhost])
    if got is False:
        return Verdict(PERM_DENIED, why=f"rhost: !{rhost}")
    if got is None:
        return Verdict(PERM_DENIED, why=f"rhost: no rule for {rhost}")
    return ALLOW
