"""``chpass_provider = ldap``: a user changes their own password, as the user, on a
connection of their own (SSSD's ``sdap_pam_chpass_handler_*`` in ``ldap_auth.c`` and
``sdap_exop_modify_passwd_*`` / ``sdap_modify_passwd_*`` / ``sdap_chpass_result`` in
``sdap_async.c``, 2.8.2; PAM reference §2.3), as one blocking function the backend runs
on its login thread:

* the connection is the login's (``auth.user_session``): ``ldap_chpass_uri`` then
  ``ldap_chpass_backup_uri`` (the lookup servers when unset), TLS forced, the bind as
  the user's DN with the old password and the password policy request control;
* ``CHAUTHTOK_PRELIM`` (``prelim``) only binds: accepted, or refused only because the
  password expired or was reset, is SUCCESS; refused is AUTH_ERR with "Old password
  not accepted." (PAM user-info CHPASS_ERROR);
* ``CHAUTHTOK`` binds, then changes the password on the same connection: the RFC 3062
  Password Modify extended operation with the DN, the old and the new password and the
  password policy request control (``ldap_pwmodify_mode = exop``), or a replace of
  ``userPassword`` (``ldap_modify``); constraintViolation (a quality check) is
  NEW_AUTHTOK_REQD with the server's text, any other refusal AUTHTOK_ERR with it;
* after a change, ``ldap_chpass_update_last_change`` sets ``shadowLastChange`` to
  today's day number on the same connection (its result ignored, as SSSD ignores it);
* an empty new password (pam_sss sends none when the user typed nothing) is refused
  before any server sees a request: SYSTEM_ERR, SSSD's answer after its bind.

Neither password is logged, nor kept past the request (the caller's buffers).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from cached.auth import pwexpire
from cached.config import DomainConfig
from cached.config.options import PwdPolicy, PwmodifyMode
from cached.ldap import auth, ppolicy, pwmodify, wire
from cached.ldap.connection import Connection, LdapMessageTooLarge, TransportError

log = logging.getLogger(__name__)

SUCCESS = 0
SYSTEM_ERR = 4
AUTH_ERR = 7
AUTHINFO_UNAVAIL = 9
NEW_AUTHTOK_REQD = 12
AUTHTOK_ERR = 20

CONSTRAINT_VIOLATION = 19  # RFC 4511 §4.1.9
OLD_PASSWORD_REFUSED = "Old password not accepted."
# sdap_chpass_result's text for a constraintViolation without a diagnostic.
COMPLEXITY = "Please make sure the password meets the complexity constraints."
PASSWORD_ATTRIBUTE = "userPassword"
SHADOW_LAST_CHANGE = "shadowLastChange"


@dataclass(frozen=True, slots=True)
class ChpassResult:
    """``message``: the text of a CHPASS_ERROR user-info (None: none);
    ``reachable`` false: no server answered (the caller says offline)."""

    status: int
    message: str | None = None
    reachable: bool = True
    reason: str = ""  # for the log (never a password)


def change_result(code: int, diagnostic: str) -> ChpassResult:
    """The verdict of the change operation's result (``sdap_chpass_result``)."""
    if code == 0:
        return ChpassResult(SUCCESS)
    if code == CONSTRAINT_VIOLATION:
        return ChpassResult(NEW_AUTHTOK_REQD, diagnostic or COMPLEXITY,
                            reason=f"refused by the server's password policy ({code})")  # fmt: skip
    return ChpassResult(AUTHTOK_ERR, diagnostic or None, reason=f"refused ({code})")


def _after_bind(cfg: DomainConfig, conn: Connection, dn: str, res: auth.OnlineResult) -> int:
    """May the change go on after this bind? SUCCESS, or the status that ends it
    (SSSD's checks of ``ldap_pwd_policy`` without warnings, unless the server sent
    its password policy control)."""
    if res.status == NEW_AUTHTOK_REQD:
        return SUCCESS  # an expired or reset password may be changed
    if res.status != SUCCESS:
        return AUTH_ERR if res.status == auth.AUTH_ERR and not res.locked else SYSTEM_ERR
    if res.ppolicy or cfg.ldap_pwd_policy == PwdPolicy.NONE:
        return SUCCESS
    shadow = cfg.ldap_pwd_policy == PwdPolicy.SHADOW
    names = pwexpire.SHADOW_ATTRS if shadow else pwexpire.KERBEROS_ATTRS
    try:
        attrs = auth.read_entry(conn, dn, list(names), cfg.ldap_opt_timeout)
        v = (pwexpire.shadow(attrs, time.time()) if shadow
             else pwexpire.kerberos(attrs, time.time(), None))  # fmt: skip
    except (pwexpire.PolicyDataError, TransportError, LdapMessageTooLarge, ValueError) as e:
        log.error("domain %s: password change of %s: the password policy: %s", cfg.name, dn, e)
        return SYSTEM_ERR
    if v.status == pwexpire.ACCT_EXPIRED or (not shadow and v.status == NEW_AUTHTOK_REQD):
        # SSSD: an expired account ends it; the LDAP provider cannot change a
        # Kerberos password.
        return SYSTEM_ERR
    return SUCCESS


def change_password(
    cfg: DomainConfig, dn: str, old: bytes, new: bytes, *, prelim: bool
) -> ChpassResult:
    """Check ``old`` (``prelim``), or change it to ``new``, as the user ``dn``."""
    if not prelim and not new:
        return ChpassResult(SYSTEM_ERR, reason="no new password")
    with auth.user_session(cfg, auth.chpass_uris(cfg), dn, old) as (res, conn):
        if not res.reachable:
            return ChpassResult(AUTHINFO_UNAVAIL, reachable=False, reason=res.reason)
        if conn is None or res.status not in (SUCCESS, NEW_AUTHTOK_REQD):
            if res.status == auth.AUTH_ERR and not res.locked:
                return ChpassResult(AUTH_ERR, OLD_PASSWORD_REFUSED, reason=res.reason)
            return ChpassResult(SYSTEM_ERR, reason=res.reason)
        if prelim:
            return ChpassResult(SUCCESS, reason=res.reason)
        go_on = _after_bind(cfg, conn, dn, res)
        if go_on != SUCCESS:
            return ChpassResult(go_on, reason="password policy")
        try:
            with conn.deadline_in(cfg.ldap_opt_timeout):
                if cfg.ldap_pwmodify_mode == PwmodifyMode.EXOP:
                    done = conn.extended(
                        pwmodify.PASSWD_MODIFY_OID, pwmodify.encode_request(dn, old, new),
                        controls=[ppolicy.request_control()],
                    )  # fmt: skip
                else:
                    done = conn.modify_replace(dn, PASSWORD_ATTRIBUTE, [new])
        except (TransportError, LdapMessageTooLarge, ValueError, OSError) as e:
            return ChpassResult(AUTHTOK_ERR, reason=f"the change's answer was lost: {e}")
        verdict = change_result(done.code, done.message.decode("utf-8", "replace"))
        if verdict.status != SUCCESS:
            log.info("domain %s: password change of %s refused: %s", cfg.name, dn,
                     wire.describe(done))  # fmt: skip
            return verdict
        if cfg.ldap_chpass_update_last_change:
            today = str(int(time.time()) // pwexpire.DAY).encode()
            try:
                with conn.deadline_in(cfg.ldap_opt_timeout):
                    last = conn.modify_replace(dn, SHADOW_LAST_CHANGE, [today])
            except (TransportError, LdapMessageTooLarge, ValueError, OSError) as e:
                return ChpassResult(SYSTEM_ERR, reason=f"updating {SHADOW_LAST_CHANGE}: {e}")
            if last.code != 0:
                log.warning("domain %s: %s of %s not updated: %s", cfg.name,
                            SHADOW_LAST_CHANGE, dn, wire.describe(last))  # fmt: skip
        return verdict
