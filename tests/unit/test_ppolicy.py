"""The password policy response control (draft-behera-ldap-password-policy-10 §6.2) and
how a bind's answer becomes a PAM status (cached.ldap.auth; PAM reference §2.1)."""

from __future__ import annotations

import pytest

from cached.ldap import auth, ppolicy
from cached.ldap.ber import BerError

OID = ppolicy.PPOLICY_OID.encode()


def test_decodes_expiry_warning_grace_and_errors() -> None:
    # SEQUENCE { warning [0] { timeBeforeExpiration [0] 3600 } }
    assert ppolicy.decode_response(bytes.fromhex("3006a00480020e10")).expires_in == 3600
    # SEQUENCE { warning [0] { graceAuthNsRemaining [1] 2 } }
    assert ppolicy.decode_response(bytes.fromhex("3005a003810102")).grace == 2
    # SEQUENCE { error [1] changeAfterReset }
    got = ppolicy.decode_response(bytes.fromhex("3003810102"))
    assert got.error is ppolicy.PolicyError.CHANGE_AFTER_RESET
    # both, as slapd sends with an expired password and grace logins
    got = ppolicy.decode_response(bytes.fromhex("3008a003810101810100"))
    assert (got.grace, got.error) == (1, ppolicy.PolicyError.PASSWORD_EXPIRED)
    assert ppolicy.decode_response(b"") == ppolicy.PolicyResponse()
    assert ppolicy.decode_response(bytes.fromhex("3000")) == ppolicy.PolicyResponse()


@pytest.mark.parametrize("value", ["3103810101", "3003820101", "3004a0028200", "3003810180",
                                   "30058103"])  # fmt: skip
def test_refuses_what_is_not_a_response(value: str) -> None:
    with pytest.raises(BerError):
        ppolicy.decode_response(bytes.fromhex(value))


def test_bind_answers_become_pam_statuses() -> None:
    ok = auth._result(True, {}, "")
    assert (ok.status, ok.expires_in, ok.grace) == (auth.SUCCESS, None, None)
    warn = auth._result(True, {OID: bytes.fromhex("3006a00480020e10")}, "")
    assert (warn.status, warn.expires_in) == (auth.SUCCESS, 3600)
    grace = auth._result(True, {OID: bytes.fromhex("3005a003810102")}, "")
    assert (grace.status, grace.grace) == (auth.SUCCESS, 2)
    reset = auth._result(True, {OID: bytes.fromhex("3003810102")}, "")
    assert reset.status == auth.NEW_AUTHTOK_REQD
    expired = auth._result(False, {OID: bytes.fromhex("3003810100")}, "")
    assert expired.status == auth.NEW_AUTHTOK_REQD
    # A grace count wins over passwordExpired (389-DS sends both).
    both = auth._result(False, {OID: bytes.fromhex("3008a003810101810100")}, "")
    assert both.status == auth.AUTH_ERR
    ad = auth._result(False, {}, "80090308: LdapErr: DSID-0C09044E, comment: "
                      "AcceptSecurityContext error, data 775, v4563")  # fmt: skip
    assert (ad.status, ad.locked) == (auth.PERM_DENIED, True)
    assert auth._result(False, {}, "invalid credentials").status == auth.AUTH_ERR
    netscape = auth._result(False, {ppolicy.NETSCAPE_EXPIRED_OID.encode(): b"0"}, "")
    assert netscape.status == auth.NEW_AUTHTOK_REQD
    expiring = auth._result(True, {ppolicy.NETSCAPE_EXPIRING_OID.encode(): b"86400"}, "")
    assert expiring.expires_in == 86400


@pytest.mark.parametrize(
    ("data", "named"),
    [("533", "account disabled"), ("532", "password expired"), ("701", "account expired"),
     ("773", "password must be reset"), ("52e", "wrong password")],
)  # fmt: skip
def test_other_ad_diagnostics_are_auth_err_as_in_sssd_and_named(data: str, named: str) -> None:
    """SSSD's simple bind maps only AD's ``data 775``; the others are PAM_AUTH_ERR."""
    res = auth._result(False, {}, "80090308: LdapErr: DSID-0C09042A, comment: "
                       f"AcceptSecurityContext error, data {data}, v4563")  # fmt: skip
    assert (res.status, res.locked) == (auth.AUTH_ERR, False)
    assert res.reason == f"invalid credentials (AD: {named}, data {data})"


def test_an_unknown_or_absent_ad_diagnostic_is_plain_auth_err() -> None:
    for message in ("", "invalid credentials", "AcceptSecurityContext error, data 999, v1"):
        res = auth._result(False, {}, message)
        assert (res.status, res.reason) == (auth.AUTH_ERR, "invalid credentials")


def test_no_bind_without_a_password_or_a_dn() -> None:
    from cached.config import parse_config

    cfg = parse_config(
        "[cached]\ndomains = D\n[domain/D]\nid_provider = ldap\n"
        "ldap_uri = ldaps://192.0.2.1\n"
    ).domains[0]
    # Neither reaches a server (none answers at that address): refused before.
    assert auth.bind_as_user(cfg, "uid=a,dc=x", b"").status == auth.AUTH_ERR
    assert auth.bind_as_user(cfg, "", b"secret").status == auth.AUTH_ERR


# -- which connections a password may travel over (auth.bind_as_user) ------------------


def test_a_password_is_never_sent_over_ldapi_without_the_override(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from cached.ldap import connection
    from testing.backend import make_domain

    opened: list[str] = []

    def refuse_to_open(uri: str, **_: object) -> None:
        opened.append(uri)
        raise connection.TransportError("not in a unit test")

    monkeypatch.setattr(connection.Connection, "open", staticmethod(refuse_to_open))
    cfg = make_domain(["ldapi://%2Frun%2Fslapd%2Fldapi"], "dc=example,dc=test")
    with caplog.at_level("ERROR", logger=auth.__name__):
        got = auth.bind_as_user(cfg, "uid=alice,dc=example,dc=test", b"secret")
    assert got.status == auth.AUTH_ERR and opened == []  # no connection at all
    assert "unencrypted" in caplog.text and "ldaps://" in caplog.text
    assert "secret" not in caplog.text


@pytest.mark.parametrize(("uri", "start_tls", "override", "expect"), [
    ("ldap://h", False, False, True),   # StartTLS whatever ldap_id_use_start_tls says
    ("ldap://h", True, False, True),
    ("ldap://h", False, True, False),   # the override, and no StartTLS asked for
    ("ldap://h", True, True, True),
    ("ldaps://h", False, False, False),  # TLS from the first byte
])  # fmt: skip
def test_a_login_runs_starttls_on_ldap_uris(
    uri: str, start_tls: bool, override: bool, expect: bool
) -> None:
    from testing.backend import make_domain

    cfg = make_domain([uri], "dc=example,dc=test", ldap_id_use_start_tls=start_tls,
                      ldap_auth_disable_tls_never_use_in_production=override)  # fmt: skip
    assert auth.starts_tls(cfg, uri) is expect
