"""A login's TGT (SSSD's ``krb5_child`` ``tgt_req_child``, 2.8.2): the AS exchange with
the user's password, ``krb5_validate`` against the host keytab, the ccache written for
the user. Blocking: it runs on the backend's login thread.

* The AS request asks for ``krb5_lifetime`` and ``krb5_renewable_lifetime`` when set
  (else krb5.conf's ``ticket_lifetime``/``renew_lifetime``). The KDCs are libkrb5's:
  krb5.conf's ``[realms]`` or DNS, as for ``kinit``.
* An expired password (KDC_ERR_KEY_EXP) is answered NEW_AUTHTOK_REQD only once the
  password is shown right by a ticket for ``kadmin/changepw`` (the KDC answers
  KEY_EXP whether or not the password is right), as SSSD: the PAM stack then asks
  for a new one (``pam_sss`` turns it into acct_mgmt's NEW_AUTHTOK_REQD).
* Validation (SSSD's ``validate_tgt``): the keytab's first principal of the
  credentials' realm (else its last) is the service; a ticket for it is asked for
  with the new TGT and accepted with the keytab's key (GSSAPI, as
  ``krb5_verify_init_creds`` does with ``ap_req_nofail``). Only the real KDC knows the
  host's key, so a KDC that answered for the user's password without knowing it (a
  rogue one, or a spoofed answer) logs no one in: PAM_AUTH_ERR for a ticket the key
  does not decrypt, PAM_SYSTEM_ERR for a keytab without a key to try, as SSSD's.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

import gssapi
import gssapi.raw
import krb5

from cached.kerberos import ccache
from cached.kerberos import status as st

log = logging.getLogger(__name__)

CHANGEPW_SERVICE = b"kadmin/changepw"


@dataclass(frozen=True, slots=True)
class Settings:
    """The domain's Kerberos options, as the login needs them."""

    realm: str  # "": libkrb5's default realm
    keytab: str  # "": libkrb5's default keytab (/etc/krb5.keytab)
    validate: bool
    lifetime: int  # seconds; 0: krb5.conf's
    renewable_lifetime: int
    ccname_template: str
    ccachedir: str


@dataclass(frozen=True, slots=True)
class User:
    name: str  # the login name the directory gives (sAMAccountName, uid)
    uid: int
    gid: int
    home: str = ""


@dataclass(frozen=True, slots=True)
class Times:
    """A TGT's start, end and renew-till times (seconds since the epoch; renew_till
    0 when it is not renewable)."""

    start: int
    end: int
    renew_till: int


@dataclass(frozen=True, slots=True)
class Result:
    """How a Kerberos login went: a PAM status; ``reachable`` false when no KDC
    answered (cached credentials instead); ``ccname`` the ccache written, with the
    TGT's ``principal`` and ``times``."""

    status: int
    reachable: bool = True
    ccname: str = ""
    reason: str = ""  # for the log, never the password
    principal: str = ""
    times: Times | None = None


def principal_of(ctx: krb5.Context, settings: Settings, name: str) -> str:
    """The user's principal: ``name@REALM`` (SSSD's simple UPN when the entry has no
    userPrincipalName)."""
    realm = settings.realm or krb5.get_default_realm(ctx).decode()
    return f"{name}@{realm.upper()}"


def _options(ctx: krb5.Context, settings: Settings) -> krb5.GetInitCredsOpt:
    opt = krb5.get_init_creds_opt_alloc(ctx)
    if settings.lifetime:
        krb5.get_init_creds_opt_set_tkt_life(opt, settings.lifetime)
    if settings.renewable_lifetime:
        krb5.get_init_creds_opt_set_renew_life(opt, settings.renewable_lifetime)
    return opt


def get_tgt(ctx: krb5.Context, settings: Settings, principal: str, password: bytes
            ) -> krb5.Creds | Result:  # fmt: skip
    """The TGT for ``principal``, or the :class:`Result` that ends the login."""
    princ = krb5.parse_name_flags(ctx, principal.encode())
    try:
        return krb5.get_init_creds_password(ctx, princ, _options(ctx, settings), password)
    except krb5.Krb5Error as e:
        code = e.err_code
        if code != st.KDC_ERR_KEY_EXP:
            v = st.verdict(code)
            return Result(v.status, v.reachable, reason=st.reason(code, str(e)))
    # Expired: is the password right? Only a changepw ticket tells.
    try:
        krb5.get_init_creds_password(
            ctx, princ, changepw_options(ctx), password, in_tkt_service=CHANGEPW_SERVICE
        )
    except krb5.Krb5Error as e:
        v = st.verdict(e.err_code)
        return Result(v.status, v.reachable, reason=st.reason(e.err_code, str(e)))
    return Result(st.NEW_AUTHTOK_REQD, reason=st.reason(st.KDC_ERR_KEY_EXP))


def changepw_options(ctx: krb5.Context) -> krb5.GetInitCredsOpt:
    """SSSD's for kadmin/changepw: short-lived, neither forwardable nor proxiable."""
    opt = krb5.get_init_creds_opt_alloc(ctx)
    krb5.get_init_creds_opt_set_tkt_life(opt, 5 * 60)
    krb5.get_init_creds_opt_set_renew_life(opt, 0)
    krb5.get_init_creds_opt_set_forwardable(opt, False)
    krb5.get_init_creds_opt_set_proxiable(opt, False)
    return opt


def validation_principal(ctx: krb5.Context, keytab: str, realm: str) -> str:
    """SSSD's choice: the keytab's first principal of ``realm``, else its last.
    Raises ``krb5.Krb5Error`` (an unreadable keytab) or LookupError (an empty one)."""
    kt = krb5.kt_resolve(ctx, keytab.encode()) if keytab else krb5.kt_default(ctx)
    last = ""
    for entry in kt:
        name = (entry.principal.name or b"").decode("utf-8", "replace")
        if name.rpartition("@")[2] == realm:
            return name
        last = name
    if not last:
        raise LookupError(f"keytab {keytab or 'default'} has no entries")
    return last


def validate(ctx: krb5.Context, settings: Settings, creds: krb5.Creds) -> tuple[int, str]:
    """``(0, "")`` when the TGT ``creds`` is vouched for by the keytab, else the
    libkrb5 error code (0 when there is none) and why not."""
    realm = (creds.client.name or b"").decode("utf-8", "replace").rpartition("@")[2]
    keytab = settings.keytab or krb5.kt_default_name(ctx).decode()
    if keytab.startswith("FILE:"):
        keytab = keytab[5:]
    try:
        service = validation_principal(ctx, keytab, realm)
    except krb5.Krb5Error as e:
        return e.err_code, f"cannot read the keytab {keytab}: {e}"
    except (LookupError, OSError) as e:
        return 0, f"cannot read the keytab {keytab}: {e}"
    mem = b"MEMORY:cached-validate-" + secrets.token_hex(8).encode()
    cc = krb5.cc_resolve(ctx, mem)
    try:
        krb5.cc_initialize(ctx, cc, creds.client)
        krb5.cc_store_cred(ctx, cc, creds)
        target = gssapi.Name(service, gssapi.NameType.kerberos_principal)
        initiator = gssapi.Credentials(usage="initiate", store={b"ccache": mem})
        ictx = gssapi.SecurityContext(
            name=target, creds=initiator, usage="initiate", mech=gssapi.MechType.kerberos
        )
        token = ictx.step()
        acceptor = gssapi.Credentials(usage="accept", name=target,
                                      store={b"keytab": keytab.encode()})  # fmt: skip
        actx = gssapi.SecurityContext(creds=acceptor, usage="accept")
        actx.step(token)
        if not actx.complete:
            return 0, f"the ticket for {service} was not accepted"
        return 0, ""
    except gssapi.raw.GSSError as e:
        # The minor status is libkrb5's error code (unsigned 32 bits).
        minor = e.min_code - (1 << 32) if e.min_code >= (1 << 31) else e.min_code
        return minor, f"a ticket for {service} was not accepted with the keytab {keytab}: {e}"
    finally:
        krb5.cc_destroy(ctx, cc)


def delayed(settings: Settings, user: User, password: bytes, ccname: str) -> Result:
    """The TGT of an offline login, into the ccache it was given
    (``krb5_store_password_if_offline``)."""
    ctx = krb5.init_context()
    principal = principal_of(ctx, settings, user.name)
    got = get_tgt(ctx, settings, principal, password)
    if isinstance(got, Result):
        return got
    return save(ctx, settings, user, principal, got, ccname)


def login(settings: Settings, user: User, password: bytes) -> Result:
    """SSSD's online Kerberos login for ``user``: TGT, validation, ccache."""
    ctx = krb5.init_context()
    principal = principal_of(ctx, settings, user.name)
    got = get_tgt(ctx, settings, principal, password)
    if isinstance(got, Result):
        return got
    return save(ctx, settings, user, principal, got)


def save(ctx: krb5.Context, settings: Settings, user: User, principal: str,
         creds: krb5.Creds, ccname: str = "") -> Result:  # fmt: skip
    """Validate ``creds`` when asked, then write them to the user's ccache
    (``ccname``, or a new one the template names)."""
    if settings.validate:
        code, why = validate(ctx, settings, creds)
        if why:
            # SSSD maps validate_tgt's error as any other (map_krb5_error): a ticket the
            # keytab's key cannot decrypt is KRB5KRB_AP_ERR_BAD_INTEGRITY, PAM_AUTH_ERR;
            # a keytab without the key, PAM_SYSTEM_ERR.
            return Result(st.verdict(code).status if code else st.SYSTEM_ERR,
                          reason=f"TGT validation failed: {why}")  # fmt: skip
    name = ccname or template_name(settings, user, principal)

    def fill(staged: str) -> None:
        cc = krb5.cc_resolve(ctx, staged.encode())
        krb5.cc_initialize(ctx, cc, creds.client)
        krb5.cc_store_cred(ctx, cc, creds)

    try:
        written = ccache.write(name, user.uid, user.gid, fill)
    except (OSError, krb5.Krb5Error) as e:
        return Result(st.SYSTEM_ERR, reason=f"cannot write the ccache {name}: {e}")
    t = creds.times
    # starttime is 0 when the KDC left it out: the ticket starts at authtime (RFC 4120).
    times = Times(t.starttime or t.authtime, t.endtime, t.renew_till)
    return Result(st.SUCCESS, ccname=written, principal=principal, times=times)


def template_name(settings: Settings, user: User, principal: str) -> str:
    return ccache.expand(
        settings.ccname_template, name=user.name, uid=user.uid, principal=principal,
        home=user.home, ccachedir=settings.ccachedir,
    )  # fmt: skip


def empty_ccache(settings: Settings, user: User) -> str:
    """An offline login's ccache (SSSD's ``create_empty_ccache``): the principal and no
    credentials, so KRB5CCNAME names a file the user owns; filled when the KDC is back
    (``krb5_store_password_if_offline``). "" when it cannot be written."""
    ctx = krb5.init_context()
    principal = principal_of(ctx, settings, user.name)

    def fill(staged: str) -> None:
        cc = krb5.cc_resolve(ctx, staged.encode())
        krb5.cc_initialize(ctx, cc, krb5.parse_name_flags(ctx, principal.encode()))

    try:
        return ccache.write(template_name(settings, user, principal), user.uid, user.gid, fill)
    except (OSError, krb5.Krb5Error) as e:
        log.error("cannot write the offline ccache of %r: %s", user.name, e)
        return ""
