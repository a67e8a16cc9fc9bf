"""A password change through the KDC's kpasswd service (SSSD's ``krb5_child``
``changepw_child``, 2.8.2; RFC 3244): a ``kadmin/changepw`` ticket got with the old
password, the change sent with it, then a fresh TGT with the new password.

SSSD's answers, kept: an old password the KDC does not take (or no KDC for the
ticket) is PAM_SYSTEM_ERR with "Old password not accepted." (``changepw_child``
returns libkrb5's code unmapped, which ``krb5_auth_done`` has no case for); a change
the server refuses is PAM_AUTHTOK_ERR with the server's text, or, for a soft error
whose text is not printable (AD sends its policy as 30 binary octets), "Please make
sure the password meets the complexity constraints."; no kpasswd server is
PAM_AUTHTOK_LOCK_BUSY. Without a new password (CHAUTHTOK_PRELIM) only the ticket is
got: the old password is checked before the PAM stack asks for a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

import krb5

from cached.kerberos import kinit
from cached.kerberos import status as st

OLD_REFUSED = "Old password not accepted."
COMPLEXITY = "Please make sure the password meets the complexity constraints."
SOFTERROR = 4  # KRB5_KPASSWD_SOFTERROR


@dataclass(frozen=True, slots=True)
class Change:
    """How a change went: the PAM status, ``message`` for the user, ``reachable``
    false when no kpasswd server answered, ``ccname`` the new TGT's ccache."""

    status: int
    message: str = ""
    reachable: bool = True
    ccname: str = ""
    reason: str = ""  # for the log
    tgt: kinit.Result | None = None  # the login with the new password


def change(settings: kinit.Settings, user: kinit.User, old: bytes, new: bytes | None) -> Change:
    ctx = krb5.init_context()
    principal = kinit.principal_of(ctx, settings, user.name)
    princ = krb5.parse_name_flags(ctx, principal.encode())
    try:
        creds = krb5.get_init_creds_password(
            ctx, princ, kinit.changepw_options(ctx), old, in_tkt_service=kinit.CHANGEPW_SERVICE
        )
    except krb5.Krb5Error as e:
        return Change(st.SYSTEM_ERR, OLD_REFUSED, reason=st.reason(e.err_code, str(e)))
    if new is None:
        return Change(st.SUCCESS)
    try:
        result = krb5.set_password(ctx, creds, new)
    except krb5.Krb5Error as e:
        if e.err_code == st.KDC_UNREACH:
            return Change(st.AUTHTOK_LOCK_BUSY, reachable=False, reason=st.reason(e.err_code))
        return Change(st.AUTHTOK_ERR, reason=st.reason(e.err_code, str(e)))
    code = int(result.result_code)
    if code != 0:
        return Change(st.AUTHTOK_ERR, _message(code, result.result_code_string,
                                               result.server_response),
                      reason=f"kpasswd result {code}")  # fmt: skip
    got = kinit.login(settings, user, new)
    return Change(got.status, ccname=got.ccname, reason=got.reason, tgt=got)


def _message(code: int, code_string: bytes, server: bytes) -> str:
    """SSSD's text for a refused change: the server's string when it has one that
    does not start with a NUL, else the code's, with the complexity hint for a soft
    error."""
    if server and server[:1] != b"\0":
        return server.decode("utf-8", "replace")
    if code == SOFTERROR:
        return COMPLEXITY
    return code_string.decode("utf-8", "replace")
