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
