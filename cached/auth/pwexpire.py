"""Password expiry after an online login: ``ldap_pwd_policy`` (SSSD's
``check_pwexpire_shadow``, ``check_pwexpire_kerberos`` and ``check_pwexpire_ldap`` in
``src/providers/ldap/ldap_auth.c``, 2.8.2) as pure functions of the user's attributes,
the time and the warning option. The backend reads the attributes from the user's entry
as the user, right after the bind, and applies these; a password policy control in the
bind's answer replaces them (``ppolicy``), as in SSSD.

==============================  ====================================================
policy                          verdict
==============================  ====================================================
``shadow`` (days since 1970)    shadowLastChange unset or <= 0: NEW_AUTHTOK_REQD;
                                shadowExpire reached, or the password older than
                                shadowMax + shadowInactive: ACCT_EXPIRED; older than
                                shadowMax: NEW_AUTHTOK_REQD; within shadowWarning days
                                of shadowMax: a warning of the seconds left (on the day
                                itself, those to midnight UTC)
``mit_kerberos``                krbPasswordExpiration (``YYYYMMDDHHMMSSZ``) past:
                                NEW_AUTHTOK_REQD; else a warning when it is within the
                                warning period (default 7 days; 0: always)
password policy control         graceAuthNsRemaining: a grace-login note; else
                                timeBeforeExpiration: a warning unless it is further
                                than a warning period that is set (0: always)
==============================  ====================================================

A value that is not a number (a day count below -1) makes the login a SYSTEM_ERR, as
SSSD's ``string_to_shadowpw_days`` does; so does a policy whose attributes the entry
lacks (shadowLastChange for ``shadow``, krbLastPwdChange for ``mit_kerberos``: SSSD
then "denies access").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cached.gentime import TimeForm, generalized_time

DAY = 86400
# sss_krb5.h KERBEROS_PWEXPIRE_WARNING_TIME: mit_kerberos's warning without an option.
KERBEROS_WARNING = 7 * DAY

# PAM status values (Linux-PAM's).
SUCCESS = 0
SYSTEM_ERR = 4
NEW_AUTHTOK_REQD = 12
ACCT_EXPIRED = 13

SHADOW_ATTRS = (
    "shadowLastChange", "shadowMin", "shadowMax", "shadowWarning", "shadowInactive",
    "shadowExpire",
)  # fmt: skip
KERBEROS_ATTRS = ("krbLastPwdChange", "krbPasswordExpiration")
# The domain option naming each attribute on the server (sssd-ldap(5)); the functions
# here take them by their standard names.
OPTION_OF = {
    "shadowLastChange": "ldap_user_shadow_last_change",
    "shadowMin": "ldap_user_shadow_min",
    "shadowMax": "ldap_user_shadow_max",
    "shadowWarning": "ldap_user_shadow_warning",
    "shadowInactive": "ldap_user_shadow_inactive",
    "shadowExpire": "ldap_user_shadow_expire",
    "krbLastPwdChange": "ldap_user_krb_last_pwd_change",
    "krbPasswordExpiration": "ldap_user_krb_password_expiration",
}


_DAYS = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+").fullmatch


class PolicyDataError(ValueError):
    """An attribute of the policy is missing or not what it must be."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status``: SUCCESS, NEW_AUTHTOK_REQD or ACCT_EXPIRED; ``warn``: seconds before
    the password expires, to tell the user (None: nothing to tell); ``grace``: grace
    logins left (the password policy control)."""

    status: int = SUCCESS
    warn: int | None = None
    grace: int | None = None
    reason: str = ""


def days(value: str | None) -> int:
    """A shadow day count as SSSD reads it: unset or empty is -1."""
    if value is None or value == "":
        return -1
    # strtol's syntax: leading white space and a sign, then digits to the end.
    if not _DAYS(value):
        raise PolicyDataError(f"{value!r} is not a number of days")
    n = int(value)
    if n < -1:
        raise PolicyDataError(f"{value!r} is a negative number of days")
    return n


def shadow(attrs: dict[str, str], now: float) -> Verdict:
    """``ldap_pwd_policy = shadow``; ``attrs`` by the names of :data:`SHADOW_ATTRS`."""
    if attrs.get("shadowLastChange") is None:
        raise PolicyDataError("no shadowLastChange for the shadow password policy")
    last, _min, max_, warn, inactive, expire = (days(attrs.get(a)) for a in SHADOW_ATTRS)
    if last <= 0:
        return Verdict(NEW_AUTHTOK_REQD, reason="shadowLastChange unset: a new password is due")
    today = int(now // DAY)
    age = today - last
    if age < 0:  # the last change in the future: nothing is known
        return Verdict()
    if (expire != -1 and today >= expire) or (
        max_ != -1 and inactive != -1 and age > max_ + inactive
    ):
        return Verdict(ACCT_EXPIRED, reason="account expired (shadow)")
    if max_ != -1 and age > max_:
        return Verdict(NEW_AUTHTOK_REQD, reason="password expired (shadow)")
    if max_ != -1 and warn != -1 and age > max_ - warn:
        left = (max_ - age) * DAY
        if left == 0:
            left = (today + 1) * DAY - int(now)  # to midnight
        return Verdict(warn=left)
    return Verdict()


def parse_generalized_time(value: str) -> int:
    """``YYYYMMDDHHMMSSZ`` (krbPasswordExpiration) as seconds since 1970."""
    at = generalized_time(value, TimeForm.SECONDS)
    if at is None:
        raise PolicyDataError(f"{value!r} is not a time YYYYMMDDHHMMSSZ")
    return int(at)


def kerberos(attrs: dict[str, str], now: float, warning: int | None) -> Verdict:
    """``ldap_pwd_policy = mit_kerberos``; ``warning``: seconds (the domain's
    pwd_expiration_warning), None for the default."""
    if attrs.get("krbLastPwdChange") is None:
        raise PolicyDataError("no krbLastPwdChange for the mit_kerberos password policy")
    value = attrs.get("krbPasswordExpiration")
    if value is None:
        return Verdict()
    expires = parse_generalized_time(value)
    if now > expires:
        return Verdict(NEW_AUTHTOK_REQD, reason="password expired (krbPasswordExpiration)")
    period = KERBEROS_WARNING if warning is None else warning
    if period == 0 or now + period > expires:
        return Verdict(warn=int(expires - now))
    return Verdict()


def ppolicy(expires_in: int | None, grace: int | None, warning: int | None) -> Verdict:
    """The password policy control of a successful bind: grace logins first, else the
    seconds before expiry unless further than ``warning`` seconds (None or 0: always)."""
    if grace is not None:
        return Verdict(grace=grace)
    if expires_in is not None and expires_in > 0:
        if warning and expires_in > warning:
            return Verdict()
        return Verdict(warn=expires_in)
    return Verdict()
