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

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from cached.auth import pwexpire
from cached.config import DomainConfig
from cached.config.options import PwdPolicy
from cached.ldap import ppolicy, wire
from cached.ldap.client import verifies_certificates
from cached.ldap.connection import BindRefused, Connection, LdapMessageTooLarge, TransportError
from cached.ldap.entry import decode_search_entry
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# PAM status values (Linux-PAM's): the backend answers in them.
SUCCESS = 0
SYSTEM_ERR = 4
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
    ``expires_in`` (seconds: a warning to show) and ``grace`` (logins left) come
    from the password policy control or ``ldap_pwd_policy``; ``ppolicy``: the bind's
    answer carried a password policy control (it then decides, as in SSSD);
    ``locked``: AD said the account is locked."""

    status: int
    reachable: bool = True
    expires_in: int | None = None
    grace: int | None = None
    locked: bool = False
    reason: str = ""  # for the log: why it failed (never the password)
    ppolicy: bool = False


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
    expiring = response_controls.get(ppolicy.NETSCAPE_EXPIRING_OID.encode())
    # SSSD's simple_bind_done: either control makes the policy the server's.
    control = ppolicy.PPOLICY_OID.encode() in response_controls or expiring is not None
    try:
        pp = ppolicy.decode_response(value)
    except ValueError:
        pp = ppolicy.PolicyResponse()
    if ok:
        if pp.error == ppolicy.PolicyError.CHANGE_AFTER_RESET:
            return OnlineResult(NEW_AUTHTOK_REQD, reason="password reset: must change",
                                ppolicy=True)  # fmt: skip
        if ppolicy.NETSCAPE_EXPIRED_OID.encode() in response_controls and pp.grace is None:
            return OnlineResult(NEW_AUTHTOK_REQD, reason="password expired", ppolicy=True)
        expires_in = pp.expires_in
        if expires_in is None and expiring and expiring.strip().isdigit():
            expires_in = int(expiring.strip())
        return OnlineResult(SUCCESS, expires_in=expires_in, grace=pp.grace, ppolicy=control)
    if pp.error == ppolicy.PolicyError.ACCOUNT_LOCKED:
        # slapd's lockout (pwdLockout): SSSD 2.8.2 maps it to no status of its own.
        return OnlineResult(AUTH_ERR, reason="account locked (password policy)")
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
    cfg: DomainConfig,
    dn: str,
    password: bytes,
    pam_warning: int = -1,
    uris: list[str] | None = None,
) -> OnlineResult:
    """Bind as ``dn`` with ``password`` on each server in turn (``uris``: the domain
    client's, with ad_server's ``_srv_`` expanded; default ``ldap_uri``, then
    ``ldap_backup_uri``) until one answers; then the password expiry the policy says
    (``ldap_pwd_policy``, or the bind's password policy control); ``pam_warning``:
    ``[pam] pam_pwd_expiration_warning``."""
    with user_session(cfg, login_uris(cfg) if uris is None else uris, dn, password) as (
        res,
        conn,
    ):
        if conn is not None and res.status == SUCCESS:
            return expiry(cfg, conn, dn, res, warning_seconds(cfg, pam_warning))
        return res


def login_uris(cfg: DomainConfig) -> list[str]:
    return list(cfg.ldap_uri) + list(cfg.ldap_backup_uri)


def chpass_uris(cfg: DomainConfig) -> list[str]:
    """``ldap_chpass_uri`` and its backups (the lookup servers when unset: rules.py)."""
    return list(cfg.ldap_chpass_uri) + list(cfg.ldap_chpass_backup_uri)


def warning_seconds(cfg: DomainConfig, pam_warning: int) -> int | None:
    """The warning period in seconds: the domain's ``pwd_expiration_warning``, else
    ``[pam] pam_pwd_expiration_warning``, else None (each policy's own; -1 is unset,
    as in SSSD's confdb_init_domain_pwd_expire)."""
    value = cfg.pwd_expiration_warning
    if value < 0:
        value = pam_warning
    return None if value < 0 else value * pwexpire.DAY


def expiry(
    cfg: DomainConfig, conn: Connection, dn: str, res: OnlineResult, warning: int | None
) -> OnlineResult:
    """After a successful bind: the password policy control's warning or grace
    logins when the server sent the control (it overrides ``ldap_pwd_policy``, as in
    SSSD), else ``ldap_pwd_policy`` on the user's entry read as the user (at login
    time, on the login's own connection: the lookups do not fetch these attributes,
    and the server's values of the moment decide, as the bind does); ``warning``:
    the warning period in seconds (:func:`warning_seconds`)."""
    if res.ppolicy:
        v = pwexpire.ppolicy(res.expires_in, res.grace, warning)
        return dataclasses.replace(res, expires_in=v.warn, grace=v.grace)
    if cfg.ldap_pwd_policy == PwdPolicy.NONE:
        return dataclasses.replace(res, expires_in=None, grace=None)
    shadow = cfg.ldap_pwd_policy == PwdPolicy.SHADOW
    standard = pwexpire.SHADOW_ATTRS if shadow else pwexpire.KERBEROS_ATTRS
    names = {std: getattr(cfg, pwexpire.OPTION_OF[std]) for std in standard}
    try:
        read = read_entry(conn, dn, list(dict.fromkeys(names.values())), cfg.ldap_opt_timeout)
        attrs = {std: read[n] for std, n in names.items() if n in read}
        now = time.time()
        v = pwexpire.shadow(attrs, now) if shadow else pwexpire.kerberos(attrs, now, warning)
    except pwexpire.PolicyDataError as e:
        limited.log(("pwd policy", cfg.name, str(e)), logging.ERROR,
                    "domain %s: ldap_pwd_policy = %s: %s in %s: login refused",
                    cfg.name, cfg.ldap_pwd_policy, e, dn)  # fmt: skip
        return OnlineResult(SYSTEM_ERR, reason=f"password policy: {e}")
    except (TransportError, LdapMessageTooLarge, ValueError, OSError) as e:
        return OnlineResult(SYSTEM_ERR, reason=f"reading the password policy attributes: {e}")
    return OnlineResult(v.status, expires_in=v.warn, reason=v.reason)


def read_entry(conn: Connection, dn: str, attrs: list[str], timeout: float) -> dict[str, str]:
    """The first value of each of ``attrs`` in the entry ``dn``, read with a base
    search on ``conn`` (as whoever it is bound as), by the attribute names asked."""
    msgid = conn.next_id()
    req = wire.encode_search(msgid, dn, wire.SCOPES["base"],
                             wire.encode_filter("(objectClass=*)"), attrs)  # fmt: skip
    wanted = {a.lower(): a for a in attrs}
    out: dict[str, str] = {}
    with conn.deadline_in(timeout):
        conn.send(req)
        while True:
            messages = conn.receive()
            if not messages:
                raise TransportError("session terminated by server")
            for m in messages:
                e = decode_search_entry(m)
                if e is not None:
                    for name, values in e.attrs.items():
                        key = wanted.get(name.decode("ascii", "replace").lower())
                        if key is not None and values:
                            out[key] = values[0].decode("utf-8", "replace")
                    continue
                res = wire.decode_response(m)
                if res.message_id != msgid:
                    continue
                if res.op == wire.SEARCH_RESULT_DONE:
                    if res.code != 0:
                        raise TransportError(f"base search of {dn}: {wire.describe(res)}")
                    return out


@contextlib.contextmanager
def user_session(
    cfg: DomainConfig, uris: list[str], dn: str, password: bytes
) -> Iterator[tuple[OnlineResult, Connection | None]]:
    """Bind as ``dn`` with ``password`` on each of ``uris`` in turn until one
    answers; yields the verdict and, when a server answered the bind (accepted or
    refused), its connection (bound as the user, or not bound), closed after the
    block. A refusal before any bind yields no connection."""
    if not password:
        # Never a bind with an empty password: RFC 4513 §5.1.2's unauthenticated
        # bind succeeds on most servers.
        yield OnlineResult(AUTH_ERR, reason="empty password"), None
        return
    if not dn:
        # A simple bind with an empty name is anonymous whatever the password
        # (RFC 4513 §5.1.1): it proves nothing.
        yield OnlineResult(AUTH_ERR, reason="no DN for the user in the cache"), None
        return
    failures: list[str] = []
    for uri in uris:
        if not encrypted_uri(uri) and not cfg.ldap_auth_disable_tls_never_use_in_production:
            limited.log(("cleartext", cfg.name, uri), logging.ERROR,
                        "domain %s: refusing to send a password over the unencrypted "
                        "connection to %s: use ldaps:// or ldap:// (StartTLS)",
                        cfg.name, uri)  # fmt: skip
            yield OnlineResult(AUTH_ERR, reason="no encryption on the LDAP connection"), None
            return
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
            try:
                with conn.deadline_in(cfg.ldap_opt_timeout):
                    if starts_tls(cfg, uri):
                        conn.start_tls()
                    try:
                        bound = conn.bind(dn, password, controls=[ppolicy.request_control()])
                        res = _result(True, bound.controls, "")
                    except BindRefused as e:
                        if e.code == INVALID_CREDENTIALS and e.response is not None:
                            msg = e.response.message.decode("utf-8", "replace")
                            res = _result(False, e.response.controls, msg)
                        else:
                            res = OnlineResult(AUTH_ERR, reason=str(e))
            except (TransportError, LdapMessageTooLarge, ValueError, OSError) as e:
                failures.append(f"{uri}: {e}")
                continue
            yield res, conn
            return
        finally:
            conn.unbind()
    yield OnlineResult(AUTHINFO_UNAVAIL, reachable=False, reason="; ".join(failures)), None
