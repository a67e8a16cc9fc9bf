"""SSSD options that would change who is who: refused with what cached does instead.

A value under which SSSD answers as cached does loads quietly; any other stops the
start with the file, section, option, value and cached's behaviour in one message.
"""

from __future__ import annotations

import pytest

from cached.config import ACCEPTED_UNUSED, DOMAIN_OPTIONS, UNSUPPORTED, ConfigError, parse_config
from tests.unit.test_config import MINIMAL


def with_domain_option(line: str) -> str:
    return MINIMAL + line + "\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ldap_rfc2307_fallback_to_local_users = true",
         "ldap_rfc2307_fallback_to_local_users = 'true' is not supported: cached lists only "
         "the members that the directory's users resolve to; remove it"),
    ],
)  # fmt: skip
def test_semantics_changing_values_are_refused(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(with_domain_option(line), "/etc/sssd/sssd.conf")
    assert str(e.value) == f"/etc/sssd/sssd.conf: [domain/LDAP] {message}"


@pytest.mark.parametrize(
    "line",
    [
        "use_fully_qualified_names = false",
        "use_fully_qualified_names = False",
        "ldap_id_mapping = false",
        "re_expression = (?P<name>[^@]+)@?(?P<domain>[^@]*$)",
        "fallback_homedir =",
        "full_name_format = %1$s@%2$s",
    ],
)
def test_values_that_change_nothing_load_quietly(line: str) -> None:
    assert parse_config(with_domain_option(line)).warnings == []


def test_sections_other_than_the_domain_are_checked_too() -> None:
    text = MINIMAL.replace("domains = LDAP\n", "domains = LDAP\ndefault_domain_suffix = x\n")
    with pytest.raises(ConfigError, match=r"\[sssd\] default_domain_suffix = 'x' is not supp"):
        parse_config(text)


def test_a_value_that_is_not_a_boolean_is_invalid() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(with_domain_option("ldap_rfc2307_fallback_to_local_users = maybe"))
    assert str(e.value) == (
        "<string>: [domain/LDAP] ldap_rfc2307_fallback_to_local_users = 'maybe' is invalid: "
        "expected true or false"
    )


def test_id_provider_ipa_says_what_to_write_instead() -> None:
    with pytest.raises(ConfigError, match=r"id_provider = 'ipa' is not supported: cached has no"):
        parse_config(MINIMAL.replace("id_provider = ldap", "id_provider = ipa"))


def test_the_tables_do_not_overlap() -> None:
    assert not set(UNSUPPORTED) & ACCEPTED_UNUSED
    assert not set(UNSUPPORTED) & set(DOMAIN_OPTIONS)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("(?P<domain>[^@]+)@(?P<user>.+)",
         "it has no (?P<name>...) group, so it would find no name to look up"),
        ("(?P<name>[a-z", "not a regular expression cached can read (Python re): "
         "unterminated character set at position 9"),
    ],
)  # fmt: skip
def test_an_re_expression_cached_cannot_use_is_invalid(value: str, message: str) -> None:
    for section in ("[domain/LDAP]", "[sssd]"):
        text = (with_domain_option(f"re_expression = {value}") if section != "[sssd]" else
                MINIMAL.replace("domains = LDAP\n", f"domains = LDAP\nre_expression = {value}\n"))
        with pytest.raises(ConfigError) as e:
            parse_config(text)
        what = f"{section} re_expression = {value!r}"
        assert str(e.value) == f"<string>: {what} is invalid: {message}"
