"""SSSD's reading of Kerberos errors (``krb5_child.c`` ``map_krb5_error`` and
``krb5_auth.c`` ``krb5_auth_done``, 2.8.2), as PAM statuses. Pure: no libkrb5."""

from __future__ import annotations

from dataclasses import dataclass

# PAM status values (Linux-PAM's).
SUCCESS = 0
SYSTEM_ERR = 4
PERM_DENIED = 6
AUTH_ERR = 7
AUTHINFO_UNAVAIL = 9
NEW_AUTHTOK_REQD = 12
ACCT_EXPIRED = 13
CRED_UNAVAIL = 14
CRED_ERR = 17
AUTHTOK_ERR = 20
AUTHTOK_LOCK_BUSY = 22

# MIT krb5's com_err codes (krb5.h).
KDC_ERR_NAME_EXP = -1765328383
KDC_ERR_C_PRINCIPAL_UNKNOWN = -1765328378
KDC_ERR_CLIENT_REVOKED = -1765328366
KDC_ERR_KEY_EXP = -1765328361
KDC_ERR_PREAUTH_FAILED = -1765328360
AP_ERR_BAD_INTEGRITY = -1765328353
AP_ERR_TKT_EXPIRED = -1765328352
AP_ERR_TKT_NYV = -1765328351
AP_ERR_SKEW = -1765328347
ERR_GENERIC = -1765328324
LIBOS_CANTREADPWD = -1765328254
KDCREP_SKEW = -1765328236
PROG_ETYPE_NOSUPP = -1765328234
REALM_UNKNOWN = -1765328230
KDC_UNREACH = -1765328228
PREAUTH_FAILED = -1765328174
REALM_CANT_RESOLVE = -1765328164

# No KDC answered, or none could be found: SSSD's ERR_NETWORK_IO, which makes the
# domain offline for the login (cached credentials). Clock skew is in SSSD's list too.
UNREACHABLE = frozenset(
    {KDCREP_SKEW, AP_ERR_SKEW, AP_ERR_TKT_EXPIRED, AP_ERR_TKT_NYV, KDC_UNREACH,
     REALM_CANT_RESOLVE, REALM_UNKNOWN}
)  # fmt: skip

_STATUS = {
    LIBOS_CANTREADPWD: CRED_UNAVAIL,  # ERR_NO_CREDS
    KDC_ERR_CLIENT_REVOKED: PERM_DENIED,  # ERR_ACCOUNT_LOCKED: disabled or locked in AD
    KDC_ERR_NAME_EXP: ACCT_EXPIRED,  # ERR_ACCOUNT_EXPIRED
    KDC_ERR_KEY_EXP: NEW_AUTHTOK_REQD,  # ERR_CREDS_EXPIRED
    AP_ERR_BAD_INTEGRITY: AUTH_ERR,  # ERR_AUTH_FAILED
    # ERR_CREDS_INVALID is PAM_CRED_ERR in krb5_auth_done, a mark for the IPA
    # provider's password migration that krb5_pam_handler_done turns into
    # PAM_AUTH_ERR before it leaves the backend: a wrong password is AUTH_ERR
    # (measured: SSSD 2.8.2 against Samba's KDC).
    PROG_ETYPE_NOSUPP: AUTH_ERR,
    PREAUTH_FAILED: AUTH_ERR,
    KDC_ERR_PREAUTH_FAILED: AUTH_ERR,
}

_REASONS = {
    KDC_ERR_CLIENT_REVOKED: "account disabled or locked (KDC_ERR_CLIENT_REVOKED)",
    KDC_ERR_NAME_EXP: "account expired (KDC_ERR_NAME_EXP)",
    KDC_ERR_KEY_EXP: "password expired (KDC_ERR_KEY_EXP)",
    KDC_ERR_PREAUTH_FAILED: "wrong password (KDC_ERR_PREAUTH_FAILED)",
    KDC_ERR_C_PRINCIPAL_UNKNOWN: "no such principal (KDC_ERR_C_PRINCIPAL_UNKNOWN)",
    AP_ERR_BAD_INTEGRITY: "wrong password (KRB_AP_ERR_BAD_INTEGRITY)",
    KDC_UNREACH: "no KDC answered (KRB5_KDC_UNREACH)",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A Kerberos error as SSSD reads it: the PAM status, and ``reachable`` false when
    the KDC could not be reached (the login goes to cached credentials)."""

    status: int
    reachable: bool = True


def verdict(code: int) -> Verdict:
    """SSSD's PAM status for the libkrb5 error ``code`` of a login; anything it has
    no case for is PAM_SYSTEM_ERR (``ERR_INTERNAL``), KRB5KRB_ERR_GENERIC included."""
    if code in UNREACHABLE:
        return Verdict(AUTHINFO_UNAVAIL, reachable=False)
    return Verdict(_STATUS.get(code, SYSTEM_ERR))


def reason(code: int, message: str = "") -> str:
    """For the log: what ``code`` means (never the password)."""
    return _REASONS.get(code) or f"krb5 error {code}" + (f": {message}" if message else "")
