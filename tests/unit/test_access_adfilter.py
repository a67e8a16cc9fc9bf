"""ad_access_filter's entries (SSSD 2.8.2 ad_access.c ad_parse_access_filter)."""

from __future__ import annotations

import pytest

from cached.access.adfilter import applicable

DOM, FOREST = "ad.example", "example.test"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("(memberOf=cn=a)", "(memberOf=cn=a)"),
        ("memberOf=cn=a", "(memberOf=cn=a)"),  # put in parentheses
        # The most specific that names this domain wins, in any order.
        ("(g=1)?FOREST:example.test:(f=1)?DOM:ad.example:(d=1)", "(d=1)"),
        ("DOM:ad.example:(d=1)?(g=1)", "(d=1)"),
        ("(g=1)?FOREST:example.test:(f=1)", "(f=1)"),
        ("ad.example:(d=1)?(g=1)", "(d=1)"),  # one keyword: a domain name
        ("AD.EXAMPLE:(d=1)", "(d=1)"),  # names compared without case
        # Entries of other domains or forests do not apply.
        ("DOM:other:(d=1)?(g=1)", "(g=1)"),
        ("FOREST:other:(f=1)", None),
        ("DOM:other:(d=1)", None),
        # Malformed entries are skipped.
        ("DOM::(d=1)?(g=1)", "(g=1)"),
        ("DOM:ad.example:d=1?(g=1)", "(g=1)"),
        ("XYZ:ad.example:(d=1)", None),
        # Among equals the first; empty entries dropped.
        ("?(a=1)? ?(b=1)", "(a=1)"),
        ("", None),
    ],
)
def test_applicable(value: str, expected: str | None) -> None:
    assert applicable(value, DOM, FOREST) == expected
