"""An sssd.conf as SSSD 2.8.2 reads it: conf.d snippets, line syntax, repeated options
and sections, `enabled`, and the settings cached refuses or leaves out because it
cannot honour them (review of the configuration loading against SSSD 2.8.2)."""

from __future__ import annotations

import ssl

import pytest

from cached.config import ConfigError, parse_config
from tests.unit.test_config import MINIMAL


@pytest.mark.parametrize(
    ("reqcert", "verified"),
    [("never", False), ("allow", False), ("try", True), ("demand", True), ("hard", True)],
)
def test_tls_reqcert_try_verifies_as_demand(reqcert: str, verified: bool) -> None:
    from cached.ldap.client import LdapClient

    d = parse_config(MINIMAL + f"ldap_tls_reqcert = {reqcert}\n").domain("LDAP")
    tls = LdapClient(d)._tls()
    assert tls is not None
    assert tls.validate == (ssl.CERT_REQUIRED if verified else ssl.CERT_NONE)


ACCESS_REFUSED = (
    "is not supported: cached answers NSS only and has no PAM responder, so this login "
    "restriction would not be enforced (pam_sss finds no PAM socket, and the usual PAM "
    "account stack then lets the user in); enforce it another way (e.g. pam_access, or a "
    "filter in ldap_user_search_base, which cached applies to who exists) and remove the "
    "option"
)


@pytest.mark.parametrize(
    "line",
    [
        "access_provider = ldap",  # SSSD: without ldap_access_filter it denies everyone
        "access_provider = simple",
        "access_provider = deny",
        "access_provider = krb5",
        "ldap_access_filter = (employeeType=staff)",
        "ldap_access_order = expire",
        "simple_allow_users = alice",
        "simple_allow_groups = admins",
        "simple_deny_users = bob",
        "simple_deny_groups = contractors",
    ],
)
def test_access_control_is_refused_not_ignored(line: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + line + "\n", "/etc/sssd/sssd.conf")
    name, _, value = line.partition(" = ")
    assert str(e.value) == (
        f"/etc/sssd/sssd.conf: [domain/LDAP] {name} = {value!r} {ACCESS_REFUSED}"
    )


@pytest.mark.parametrize(
    "line",
    [
        "access_provider = permit",
        "access_provider = PERMIT",
        "simple_allow_users =",
        "chpass_provider = ldap",
        "ldap_pwd_policy = shadow",
        "krb5_realm = EXAMPLE.TEST",
        "krb5_server = kdc.example.test",
    ],
)
def test_permit_and_authentication_options_load_quietly(line: str) -> None:
    assert parse_config(MINIMAL + line + "\n").warnings == []


# -- line syntax, as libini reads it (sss_ini.c: INI_PARSE_NOWRAP, INI_MV1S_OVERWRITE)


def test_an_indented_line_is_an_option_of_its_own() -> None:
    """The reviewer's example: SSSD (`sssd --genconf`) stores both filters; folded into
    filter_users as a continuation, filter_groups was lost and bob's name mangled."""
    text = MINIMAL.replace(
        "filter_users = root\nfilter_groups = root\n",
        "filter_users = root, bob\n    filter_groups = root, admins\n",
    )
    cfg = parse_config(text)
    assert cfg.nss.filter_users == ["root", "bob"]
    assert cfg.nss.filter_groups == ["root", "admins"]
    assert cfg.warnings == []


def test_an_indented_search_base_is_not_swallowed_by_the_option_before() -> None:
    text = MINIMAL + "    ldap_user_search_base = ou=Staff,dc=example,dc=test\n"
    d = parse_config(text).domain("LDAP")
    assert d.ldap_user_search_base == "ou=Staff,dc=example,dc=test"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("    ldaps://ldap3.example.test",
         "<string>: line 20: cannot parse 'ldaps://ldap3.example.test': expected "
         "`option = value`, a `[section]` header or a `#` comment"),
        ("// primary directory",
         "<string>: line 20: cannot parse '// primary directory': expected "
         "`option = value`, a `[section]` header or a `#` comment"),
        ("[domain/LDAP",
         "<string>: line 20: cannot parse '[domain/LDAP': a section header is `[name]`"),
    ],
)  # fmt: skip
def test_a_line_that_is_not_an_option_is_refused_and_quoted_once(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + line + "\n")
    assert str(e.value) == message


def test_an_option_set_twice_keeps_the_last_value_with_a_warning() -> None:
    text = MINIMAL + "# site override below\nldap_search_base = dc=example,dc=org\n"
    cfg = parse_config(text, "/etc/sssd/sssd.conf")
    assert cfg.domain("LDAP").ldap_search_base == "dc=example,dc=org"
    assert cfg.warnings == [
        "/etc/sssd/sssd.conf: line 21: [domain/LDAP] option 'ldap_search_base' is set again "
        "(first at line 17); the last value is used, as SSSD does"
    ]


def test_a_repeated_section_is_merged_with_a_warning() -> None:
    text = MINIMAL + "[nss]\nfilter_users = root, bob\nentry_negative_timeout = 30\n"
    cfg = parse_config(text)
    assert cfg.nss.filter_users == ["root", "bob"]
    assert cfg.nss.filter_groups == ["root"]  # from the first [nss]
    assert cfg.nss.entry_negative_timeout == 30
    assert cfg.warnings == [
        "<string>: line 20: section [nss] appears again (first at line 6); its options are "
        "merged, as SSSD does",
        "<string>: line 21: [nss] option 'filter_users' is set again (first at line 7); the "
        "last value is used, as SSSD does",
    ]
