"""The options of password changes and expiry as the loader reads them: SSSD's
defaults (chpass_provider follows auth_provider; the chpass servers are the lookup
servers unless ldap_chpass_uri is set, and ldap_chpass_backup_uri counts only beside
it), the closed values, and the warning's unset value."""

from __future__ import annotations

import pytest

from cached.config import ConfigError, DomainConfig, parse_config

BASE = """[cached]
domains = LDAP
[domain/LDAP]
id_provider = ldap
ldap_uri = ldaps://a.example
ldap_backup_uri = ldaps://b.example
"""


def domain(extra: str = "") -> DomainConfig:
    return parse_config(BASE + extra).domain("LDAP")


def test_the_defaults_are_sssds() -> None:
    d = domain()
    assert d.chpass_provider == "ldap" and d.ldap_pwmodify_mode == "exop"
    assert d.ldap_chpass_uri == ["ldaps://a.example"]
    assert d.ldap_chpass_backup_uri == ["ldaps://b.example"]
    assert d.ldap_pwd_policy == "none" and not d.ldap_chpass_update_last_change
    assert d.pwd_expiration_warning == -1
    assert domain("auth_provider = none\n").chpass_provider == "none"
    assert domain("auth_provider = none\nchpass_provider = ldap\n").chpass_provider == "ldap"


def test_chpass_servers() -> None:
    d = domain("ldap_chpass_backup_uri = ldaps://c.example\n")
    assert d.ldap_chpass_uri == ["ldaps://a.example"]  # the backup alone is not read
    assert d.ldap_chpass_backup_uri == ["ldaps://b.example"]
    d = domain("ldap_chpass_uri = ldaps://p.example\nldap_chpass_backup_uri = ldaps://c.example\n")
    assert (d.ldap_chpass_uri, d.ldap_chpass_backup_uri) == (
        ["ldaps://p.example"], ["ldaps://c.example"]
    )
    assert domain("ldap_chpass_uri = ldaps://p.example\n").ldap_chpass_backup_uri == []


@pytest.mark.parametrize(
    "line",
    ["chpass_provider = ipa\n", "ldap_pwmodify_mode = exop_force\n",
     "ldap_pwd_policy = ppolicy\n", "pwd_expiration_warning = -2\n"],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_option(line: str) -> None:
    with pytest.raises(ConfigError, match=line.split(" =")[0]):
        domain(line)


def test_the_pam_warning() -> None:
    cfg = parse_config(BASE + "[pam]\npam_pwd_expiration_warning = 3\n")
    assert cfg.pam.pam_pwd_expiration_warning == 3
    assert parse_config(BASE).pam.pam_pwd_expiration_warning == -1
