"""ldap_pwd_policy's rules (cached/auth/pwexpire.py) against SSSD 2.8.2's
check_pwexpire_shadow / _kerberos / _ldap, case by case: the day arithmetic, the
boundaries (age == max is not yet expired, today == shadowExpire is), the warning on
the last day (seconds to midnight), unset values (-1, empty) and bad ones."""

from __future__ import annotations

import calendar

import pytest

from cached.auth import pwexpire as pw

DAY = pw.DAY
NOON = 20_000 * DAY + 12 * 3600  # day 20000, 12:00 UTC
TODAY = 20_000


def sh(**kw: int | str) -> dict[str, str]:
    names = {
        "last": "shadowLastChange", "min": "shadowMin", "max": "shadowMax",
        "warn": "shadowWarning", "inactive": "shadowInactive", "expire": "shadowExpire",
    }  # fmt: skip
    return {names[k]: str(v) for k, v in kw.items()}


@pytest.mark.parametrize(
    ("attrs", "verdict"),
    [
        (sh(last=0), pw.Verdict(pw.NEW_AUTHTOK_REQD)),  # never set: change now
        (sh(last=TODAY - 10), pw.Verdict()),  # no max: never expires
        (sh(last=TODAY + 3, max=1), pw.Verdict()),  # changed "in the future"
        (sh(last=TODAY - 10, max=10), pw.Verdict()),  # age == max: not yet
        (sh(last=TODAY - 11, max=10), pw.Verdict(pw.NEW_AUTHTOK_REQD)),
        (sh(last=TODAY - 11, max=10, inactive=1), pw.Verdict(pw.NEW_AUTHTOK_REQD)),
        (sh(last=TODAY - 12, max=10, inactive=1), pw.Verdict(pw.ACCT_EXPIRED)),
        (sh(last=TODAY - 1, expire=TODAY), pw.Verdict(pw.ACCT_EXPIRED)),  # reached today
        (sh(last=TODAY - 1, expire=TODAY + 1), pw.Verdict()),
        (sh(last=TODAY - 5, max=7, warn=3), pw.Verdict(warn=2 * DAY)),
        (sh(last=TODAY - 4, max=7, warn=3), pw.Verdict()),  # age 4 == max - warn: no
        (sh(last=TODAY - 7, max=7, warn=3), pw.Verdict(warn=12 * 3600)),  # to midnight
        (sh(last=TODAY - 5, max=7, warn=-1), pw.Verdict()),
        (sh(last=TODAY - 5, max=-1, warn=3), pw.Verdict()),
        ({**sh(last=TODAY - 5, max=7, warn=3), "shadowExpire": ""}, pw.Verdict(warn=2 * DAY)),
    ],
)
def test_shadow(attrs: dict[str, str], verdict: pw.Verdict) -> None:
    got = pw.shadow(attrs, NOON)
    assert (got.status, got.warn, got.grace) == (verdict.status, verdict.warn, verdict.grace)


@pytest.mark.parametrize("bad", ["x", "-2", "1.5", "3 ", "1_0", "\u0663"])
def test_shadow_refuses_what_is_not_a_day_count(bad: str) -> None:
    with pytest.raises(pw.PolicyDataError):
        pw.shadow({"shadowLastChange": str(TODAY), "shadowMax": bad}, NOON)


def test_day_counts_read_as_strtol_reads_them() -> None:
    assert [pw.days(v) for v in (None, "", " 3", "+4", "-1", "007")] == [-1, -1, 3, 4, -1, 7]


def test_shadow_without_last_change_is_an_error() -> None:
    with pytest.raises(pw.PolicyDataError):
        pw.shadow(sh(max=7), NOON)


def _gt(t: float) -> str:
    import time

    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(t))


def test_kerberos() -> None:
    last = {"krbLastPwdChange": _gt(NOON - 100 * DAY)}
    assert pw.kerberos(last, NOON, None) == pw.Verdict()  # no expiration: none
    soon = {**last, "krbPasswordExpiration": _gt(NOON + 3 * DAY)}
    assert pw.kerberos(soon, NOON, None).warn == 3 * DAY  # within the default 7 days
    assert pw.kerberos(soon, NOON, 2 * DAY).warn is None
    assert pw.kerberos(soon, NOON, 0).warn == 3 * DAY  # 0: always
    late = {**last, "krbPasswordExpiration": _gt(NOON + 30 * DAY)}
    assert pw.kerberos(late, NOON, None).warn is None
    past = {**last, "krbPasswordExpiration": _gt(NOON - 1)}
    assert pw.kerberos(past, NOON, None).status == pw.NEW_AUTHTOK_REQD
    with pytest.raises(pw.PolicyDataError):
        pw.kerberos({"krbPasswordExpiration": _gt(NOON)}, NOON, None)
    with pytest.raises(pw.PolicyDataError):
        pw.kerberos({**last, "krbPasswordExpiration": "2026-12-07"}, NOON, None)
    assert pw.parse_generalized_time("20261207000000Z") == calendar.timegm(
        (2026, 12, 7, 0, 0, 0)
    )


def test_the_password_policy_control() -> None:
    assert pw.ppolicy(None, 2, None) == pw.Verdict(grace=2)
    assert pw.ppolicy(3600, 0, None) == pw.Verdict(grace=0)  # grace first
    assert pw.ppolicy(3600, None, None) == pw.Verdict(warn=3600)
    assert pw.ppolicy(3600, None, 0) == pw.Verdict(warn=3600)  # 0: always
    assert pw.ppolicy(10 * DAY, None, 7 * DAY) == pw.Verdict()
    assert pw.ppolicy(7 * DAY, None, 7 * DAY) == pw.Verdict(warn=7 * DAY)
    assert pw.ppolicy(None, None, None) == pw.Verdict()
    assert pw.ppolicy(0, None, None) == pw.Verdict()
