"""GeneralizedTime in each form SSSD reads (cached/gentime.py): every accepted and
refused shape, per form."""

from __future__ import annotations

import calendar

import pytest

from cached.gentime import TimeForm, generalized_time

NOW = calendar.timegm((2026, 12, 7, 10, 15, 0))  # 20261207101500Z
NOON = 1796644800.0  # 20261207120000Z
S, F, SUDO = TimeForm.SECONDS, TimeForm.FRACTION, TimeForm.SUDO


@pytest.mark.parametrize(
    ("text", "seconds", "fraction", "sudo"),
    [
        # to the second, UTC: every form
        ("20261207101500Z", NOW, NOW, NOW),
        # a leap second, as strptime reads it: the next minute (SSSD's strptime
        # formats); sudo reads a calendar time
        ("20261207101460Z", NOW, NOW, None),
        ("20261207101461Z", NOW + 1, NOW + 1, None),
        # a fraction after a dot: pwdAccountLockedTime's form; sudo: only .0 or ,0
        ("20261207101500.5Z", None, NOW + 0.5, None),
        ("20261207101500.25Z", None, NOW + 0.25, None),
        ("20261207101500.Z", None, NOW, None),
        ("20261207101500.0Z", None, NOW, NOW),
        ("20261207101500,0Z", None, None, NOW),
        ("20261207101500,5Z", None, None, None),
        # no seconds, no minutes: sudo's alone
        ("2026120712Z", None, None, NOON),
        ("202612071200Z", None, None, NOON),
        ("202612071200.0Z", None, None, NOON),
        # an offset: sudo's alone
        ("20261207130000+0100", None, None, NOON),
        ("20261207110000-0100", None, None, NOON),
        ("2026120713+0100", None, None, NOON),
        # no zone, a short or non-digit field, trailing bytes
        ("20261207101500", None, None, None),
        ("2026120712", None, None, None),
        ("2026120710150Z", None, None, None),
        ("2026120710150aZ", None, None, None),
        ("20261207101500Zx", None, None, None),
        ("20261207101500z", None, None, None),
        ("2026-12-07", None, None, None),
        ("tomorrow", None, None, None),
        ("", None, None, None),
        ("２０２６１２０７１０１５００Z", None, None, None),  # digits, but not ASCII ones
        # dates and times that do not exist
        ("20261307101500Z", None, None, None),
        ("20260230101500Z", None, None, None),
        ("20261200101500Z", None, None, None),
        ("20261207241500Z", None, None, None),
        ("20261207106000Z", None, None, None),
        ("00001207101500Z", None, None, None),
        ("20240229120000Z", *[calendar.timegm((2024, 2, 29, 12, 0, 0))] * 3),
    ],
)
def test_each_form_accepts_and_refuses(
    text: str, seconds: float | None, fraction: float | None, sudo: float | None
) -> None:
    got = [generalized_time(text, form) for form in (S, F, SUDO)]
    assert got == [seconds, fraction, sudo]


def test_the_access_rules_cases() -> None:
    assert generalized_time("20261207101500Z", F) == NOW
    assert generalized_time("20261207101500.5Z", F) == NOW + 0.5
    for bad in ("20261207101500", "2026120710150Z", "2026120710150aZ", "20261307101500Z"):
        assert generalized_time(bad, F) is None


def test_a_modify_timestamp_is_read_to_its_second() -> None:
    # cached.ldap.stamps: the first 14 characters, what follows not read
    from cached.ldap.stamps import epoch

    for stamp in ("20261207101500Z", "20261207101500.0Z", "20261207101500.7Z",
                  "20261207101500+0100", "20261207101500"):  # fmt: skip
        assert epoch(stamp) == NOW, stamp
    for bad in ("", "2026120710", "202612071015", "2026120710150aZ", "20261307101500Z"):
        assert epoch(bad) is None, bad
