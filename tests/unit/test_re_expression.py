"""re_expression: a looked-up name split into name and domain as SSSD 2.8.2's
sss_parse_name_for_domains splits it (usertools.c), each domain's expression in
`domains` order, SSSD's PCRE options (EXTENDED, DUPNAMES) read as Python ``re``."""

from __future__ import annotations

import pytest

from cached.config import parse_config
from cached.config.parsers import (
    SSSD_AD_DEFAULT_RE,
    SSSD_DEFAULT_RE,
    compile_name_regex,
    name_groups,
)
from cached.responder.policy import ServePolicy

AD_STYLE = SSSD_AD_DEFAULT_RE


def _policy(first: str = "", second: str = "", main: str = "", suffix: str = "") -> ServePolicy:
    def dom(name: str, rx: str) -> str:
        own = f"re_expression = {rx}\n" if rx else ""
        return (f"[domain/{name}]\nid_provider = ldap\nldap_uri = ldap://127.0.0.1:9\n"
                f"ldap_search_base = dc=t\n{own}")  # fmt: skip

    text = (
        "[sssd]\ndomains = ONE, TWO\n"
        + (f"re_expression = {main}\n" if main else "")
        + (f"default_domain_suffix = {suffix}\n" if suffix else "")
        + dom("ONE", first) + dom("TWO", second)
    )  # fmt: skip
    return ServePolicy(parse_config(text))


def _parsed(policy: ServePolicy, name: str) -> tuple[str, str | None] | None:
    got = policy.parse_name(name)
    return None if got is None else (got[0], None if got[1] is None else got[1].name)


def test_sssd_default_needs_no_parse() -> None:
    """Every domain at SSSD's LDAP default: names are split as before (lookup_name)."""
    assert not _policy().parses_names
    assert not _policy(SSSD_DEFAULT_RE, main=SSSD_DEFAULT_RE).parses_names


def test_ad_style_expression_reads_both_spellings() -> None:
    p = _policy(main=AD_STYLE)
    assert p.parses_names
    assert _parsed(p, "TWO\\alice") == ("alice", "TWO")
    assert _parsed(p, "one\\alice") == ("alice", "ONE")
    assert _parsed(p, "alice@two") == ("alice", "TWO")
    assert _parsed(p, "alice") == ("alice", None)
    # A domain part naming no domain: SSSD looks for a subdomain, and finds none.
    assert _parsed(p, "OTHER\\alice") is None
    assert _parsed(p, "alice@other") is None
    assert _parsed(_policy(main=AD_STYLE, suffix="TWO"), "alice") == ("alice", "TWO")


def test_each_domain_its_own_expression_in_order() -> None:
    """Each domain's expression in turn: one that does not match the name ends the
    parse (SSSD's ERR_REGEX_NOMATCH); a domain part naming another domain leaves the
    name to the next expression."""
    p = _policy(first="^(?P<name>[a-z]+)(\\+(?P<domain>\\w+))?$", second=SSSD_DEFAULT_RE)
    assert _parsed(p, "alice+ONE") == ("alice", "ONE")
    assert _parsed(p, "alice") == ("alice", None)
    # ONE's expression names another domain, TWO's a name without one: that name.
    assert _parsed(p, "alice+TWO") == ("alice+TWO", None)
    assert _parsed(p, "Alice") is None  # ONE's expression does not match
    # Two expressions disagreeing on the name without a domain: nobody.
    q = _policy(first="(?P<name>[a-z]+)", second="(?P<name>.+)")
    assert _parsed(q, "alice") == ("alice", None)
    assert _parsed(q, "x-alice") is None


@pytest.mark.parametrize(
    ("pattern", "text", "want"),
    [
        (AD_STYLE, "D\\u", ("u", "D")),
        (AD_STYLE, "u@D", ("u", "D")),
        (AD_STYLE, "u", ("u", None)),
        (SSSD_DEFAULT_RE, "u@D", ("u", "D")),
        (SSSD_DEFAULT_RE, "u", ("u", "")),
        # EXTENDED: blanks and comments are not part of the pattern.
        ("(?P<name> [^@]+ )  # the user\n", "u v", ("u v", None)),
    ],
)
def test_pcre_options_in_python(pattern: str, text: str, want: tuple[str, str | None]) -> None:
    m = compile_name_regex(pattern).search(text)
    assert m is not None
    assert (name_groups(m, "name"), name_groups(m, "domain")) == want
