"""``auth_provider = ldap``: a simple bind as the user's DN, on a connection of its own.

SSSD's LDAP auth (``ldap_auth.c``, ``sdap_async_connection.c`` ``simple_bind_*``, 2.8.2;
PAM reference §2.1), as one blocking function the backend runs off its event loop:

* the connection is new for each login and closed after it: the lookup connection's
  identity (the service bind DN, or anonymous) is never replaced by a user's;
* a password is only sent over TLS: ``ldaps://``, or ``ldap://`` with StartTLS, which
  the login's connection runs whatever ``ldap_id_use_start_tls`` says (SSSD's
  ``auth_connect_send`` forces TLS on the authentication connection: the lookups may
  go in the clear, the password never). A server refusing StartTLS fails like a
  server that does not answer: the next one, then offline (cached credentials), as
  SSSD. Another scheme (``ldapi://``) fails the login with one log line, as SSSD's
  "No encryption detected on LDAP connection";
  ``ldap_auth_disable_tls_never_use_in_production = true`` lifts both (SSSD's own tests
  set it);
* the bind carries the password policy request control, whose answer becomes the PAM
  status and messages; AD's ``data 775`` (account locked) becomes PERM_DENIED, its other
  diagnostics (``data 533`` account disabled, ``532`` password expired, ...) stay
  AUTH_ERR as in SSSD and are named in the log;
* every step runs against ``ldap_network_timeout`` (connect) and one
  ``ldap_opt_timeout`` deadline (StartTLS and the bind): a server that hangs or trickles
  costs a login at most those, then the next server, then offline (cached credentials).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cached.config import DomainConfig
from cached.ldap import ppolicy
from cached.ldap.client import verifies_certificates
from cached.ldap.connection import BindRefused, Connection, LdapMessageTooLarge, TransportError
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# PAM status values (Linux-PAM's): the backend answers in them.
SUCCESS = 0
PERM_DENIED = 6
AUTH_ERR = 7
AUTHINFO_UNAVAIL = 9
NEW_AUTHTOK_REQD = 12

INVALID_CREDENTIALS = 49  # RFC 4511 §4.1.9
# AD's diagnostic of a bind refused for a locked account ([MS-ADTS] 3.1.1.3.1.8.1,
# ERROR_ACCOUNT_LOCKED_OUT = 0x775), matched as SSSD matches it.
AD_LOCKED = "data 775,"
# The other Win32 errors AD puts in a refused bind's diagnostic ("...AcceptSecurityContext
# error, data 533, v4563"; [MS-ERREF] 2.2): only for the log. SSSD's simple bind
# (sdap_async_connection.c) maps none of them, so neither does cached: each is
# PAM_AUTH_ERR like any invalidCredentials (an access provider, not the bind, says more).
AD_DIAGNOSTICS = {
    "525": "no such user",
    "52e": "wrong password",
    "530": "not permitted to log on at this time",
    "531": "not permitted to log on at this workstation",
    "532": "password expired",
    "533": "account disabled",
    "701": "account expired",
    "773": "password must be reset",
}


@dataclass(frozen=True, slots=True)
class OnlineResult:
    """How an online login went. ``reachable`` false: no server answered (go offline).
    ``expires_in`` (seconds) and ``grace`` come from the password policy control;
    ``locked``: AD said the account is locked."""

    status: int
    reachable: bool = True
    expires_in: int | None = None
    grace: int | None = None
    locked: bool = False
    reason: str = ""  # for the log: why it failed (never the password)


def encrypted_uri(uri: str) -> bool:
    """Whether a password sent to ``uri`` can travel over TLS: ``ldaps://``, or
    ``ldap://`` with the StartTLS every login connection runs."""
    return uri.split("://", 1)[0].lower() in ("ldaps", "ldap")


def starts_tls(cfg: DomainConfig, uri: str) -> bool:
    """Whether the login's connection to ``uri`` runs StartTLS before the bind."""
    if uri.split("://", 1)[0].lower() != "ldap":
        return False
    return cfg.ldap_id_use_start_tls or not cfg.ldap_auth_disable_tls_never_use_in_production


def _result(ok: bool, response_controls: dict[bytes, bytes | None], message: str) -> OnlineResult:
    """The PAM verdict of a bind that succeeded (``ok``) or was refused with
    invalidCredentials, from its controls and diagnostic."""
    value = response_controls.get(ppolicy.PPOLICY_OID.encode())
    try:
        pp = ppolicy.decode_response(value)
    except ValueError:
        pp = ppolicy.PolicyResponse()
    if ok:
        if pp.error == ppolicy.PolicyError.CHANGE_AFTER_RESET:
            return OnlineResult(NEW_AUTHTOK_REQD, reason="password reset: must change")
        expires_in = pp.expires_in
        expiring = response_controls.get(ppolicy.NETSCAPE_EXPIRING_OID.encode())
        if expires_in is None and expiring and expiring.strip().isdigit():
            expires_in = int(expiring.strip())
        return OnlineResult(SUCCESS, expires_in=expires_in, grace=pp.grace)
    # A grace count wins over an expiry error (389-DS sends both).
    if pp.error == ppolicy.PolicyError.PASSWORD_EXPIRED and pp.grace is None:
        return OnlineResult(NEW_AUTHTOK_REQD, reason="password expired")
    if ppolicy.NETSCAPE_EXPIRED_OID.encode() in response_controls:
        return OnlineResult(NEW_AUTHTOK_REQD, reason="password expired")
    if AD_LOCKED in message:
        return OnlineResult(PERM_DENIED, locked=True, reason="account locked")
    return OnlineResult(AUTH_ERR, reason="invalid credentials" + _ad_diagnostic(message))


def _ad_diagnostic(message: str) -> str:
    """What AD said of a refused bind (`` (AD: account disabled)``), or ""."""
    _, sep, rest = message.partition(", data ")
    code = rest.split(",", 1)[0].strip().lower()
    if not sep or code not in AD_DIAGNOSTICS:
        return ""
    return f" (AD: {AD_DIAGNOSTICS[code]}, data {code})"


def bind_as_user(
    cfg: DomainConfig, dn: str, password: bytes, uris: list[str] | None = None
) -> OnlineResult:
    """Bind as ``dn`` with ``password`` on each server in turn (``uris``: the domain
    client's, with ad_server's ``_srv_`` expanded; default ``ldap_uri``, then
    ``ldap_backup_uri``) until one answers."""
    if not password:
        # Never a bind with an empty password: RFC 4513 §5.1.2's unauthenticated
        # bind succeeds on most servers.
        return OnlineResult(AUTH_ERR, reason="empty password")
    if not dn:
        # A simple bind with an empty name is anonymous whatever the password
        # (RFC 4513 §5.1.1): it proves nothing.
        return OnlineResult(AUTH_ERR, reason="no DN for the user in the cache")
    if uris is None:
        uris = list(cfg.ldap_uri) + list(cfg.ldap_backup_uri)
    failures: list[str] = []
    for uri in uris:
        if not encrypted_uri(uri) and not cfg.ldap_auth_disable_tls_never_use_in_production:
            limited.log(("cleartext", cfg.name, uri), logging.ERROR,
                        "domain %s: refusing to send a password over the unencrypted "
                        "connection to %s: use ldaps:// or ldap:// (StartTLS)",
                        cfg.name, uri)  # fmt: skip
            return OnlineResult(AUTH_ERR, reason="no encryption on the LDAP connection")
        try:
            conn = Connection.open(
                uri,
                connect_timeout=cfg.ldap_network_timeout,
                receive_timeout=cfg.ldap_opt_timeout,
                tls_verify=verifies_certificates(cfg),
                ca_file=cfg.ldap_tls_cacert,
                ca_dir=cfg.ldap_tls_cacertdir,
            )
        except TransportError as e:
            failures.append(f"{uri}: {e}")
            continue
        try:
            with conn.deadline_in(cfg.ldap_opt_timeout):
                if starts_tls(cfg, uri):
                    conn.start_tls()
                try:
                    res = conn.bind(dn, password, controls=[ppolicy.request_control()])
                except BindRefused as e:
                    if e.code == INVALID_CREDENTIALS and e.response is not None:
                        msg = e.response.message.decode("utf-8", "replace")
                        return _result(False, e.response.controls, msg)
                    return OnlineResult(AUTH_ERR, reason=str(e))
                return _result(True, res.controls, "")
        except (TransportError, LdapMessageTooLarge, ValueError, OSError) as e:
            failures.append(f"{uri}: {e}")
        finally:
            conn.unbind()
    return OnlineResult(AUTHINFO_UNAVAIL, reachable=False, reason="; ".join(failures))
