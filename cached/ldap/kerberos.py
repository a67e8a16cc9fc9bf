"""The host's Kerberos identity for a GSSAPI bind (id_provider = ad); the only module
importing ``gssapi``.

The host authenticates with the keys ``adcli join`` wrote to its keytab, as SSSD's
``ldap_child`` does: a TGT for ``ldap_sasl_authid`` (``HOST$@REALM``) is got from
``ldap_krb5_keytab`` into a ticket cache of the backend's own (``<db_dir>/ccache_REALM``,
mode 0600, as SSSD's ``/var/lib/sss/db/ccache_REALM``), never the ccache of whoever
started the daemon. MIT krb5's credential store (gss_acquire_cred_from with
``client_keytab`` and ``ccache``) does the kinit: at the first bind, and again at each
bind once the ticket is past its refresh time (half its life, MIT's rule for a ticket
got from a client keytab), so the ticket is renewed before it expires with no timer of
ours. Each connection then makes one security context for ``ldap/<DC name>@REALM``,
the name used as given (no DNS canonicalization: SSSD's ``ldap_sasl_canonicalize =
false``), with mutual authentication, integrity and confidentiality asked for, so that
the SASL layer (sasl.py) can seal the session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import gssapi
from gssapi.raw.misc import GSSError

from cached.ldap.sasl import Layer, SaslError


class KerberosError(Exception):
    """The host's credentials or a service ticket could not be had (the keytab is
    missing or stale, the KDC unreachable, the DC's principal unknown)."""


def _describe(e: GSSError) -> str:
    text = e.gen_message() if hasattr(e, "gen_message") else str(e)
    return " ".join(text.split())


@dataclass(frozen=True)
class HostIdentity:
    """Who the host is: its principal, its keytab and its own ticket cache (a krb5
    ccache name, ``FILE:<path>`` or ``MEMORY:<name>``)."""

    principal: str
    keytab: str
    ccache: str
    realm: str

    def credentials(self) -> gssapi.Credentials:
        """Initiator credentials from the cache, kinit'ed from the keytab when the
        cache has none or they are past their refresh time."""
        if self.keytab and not os.access(self.keytab, os.R_OK):
            raise KerberosError(f"cannot read the keytab {self.keytab}")
        store: dict[bytes | str, bytes | str] = {b"ccache": self.ccache.encode()}
        if self.keytab:
            store[b"client_keytab"] = self.keytab.encode()
        try:
            name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
            # MIT krb5 creates a FILE ccache 0600 (cc_file.c); no umask of ours, which
            # would be the whole process's while other threads write files.
            creds = gssapi.Credentials(name=name, usage="initiate", store=store)
            lifetime = creds.lifetime  # asks now: the kinit, when one is due
        except GSSError as e:
            raise KerberosError(
                f"no Kerberos credentials for {self.principal} from the keytab "
                f"{self.keytab or '(default)'}: {_describe(e)}"
            ) from None
        if not lifetime:
            raise KerberosError(f"the Kerberos credentials of {self.principal} have expired")
        return creds

    def context(self, host: str) -> Context:
        """A security context to the LDAP service of ``host`` (a DC's DNS name)."""
        creds = self.credentials()
        target = gssapi.Name(f"ldap/{host}@{self.realm}", gssapi.NameType.kerberos_principal)
        flags = (
            gssapi.RequirementFlag.mutual_authentication
            | gssapi.RequirementFlag.integrity
            | gssapi.RequirementFlag.confidentiality
        )
        try:
            ctx = gssapi.SecurityContext(name=target, creds=creds, usage="initiate", flags=flags)
        except GSSError as e:
            raise KerberosError(f"GSSAPI context for ldap/{host}: {_describe(e)}") from None
        return Context(ctx, f"ldap/{host}@{self.realm}")


class Context:
    """One GSSAPI security context: the bind's token steps, then the wrapping of the
    SASL layer (sasl.py's :class:`~cached.ldap.sasl.Layer`)."""

    __slots__ = ("_ctx", "layer", "target")

    def __init__(self, ctx: gssapi.SecurityContext, target: str) -> None:
        self._ctx = ctx
        self.target = target
        self.layer: Layer | None = None

    @property
    def complete(self) -> bool:
        return bool(self._ctx.complete)

    def step(self, token: bytes | None) -> bytes:
        try:
            out = self._ctx.step(token)
        except GSSError as e:
            raise KerberosError(f"GSSAPI with {self.target}: {_describe(e)}") from None
        return out or b""

    def wrap(self, data: bytes, *, seal: bool) -> bytes:
        # Errors of the layer are SaslError: the stream is lost (connection.py).
        try:
            res = self._ctx.wrap(data, seal)
        except GSSError as e:
            raise SaslError(f"GSS_Wrap: {_describe(e)}") from None
        if seal and not res.encrypted:
            raise SaslError("GSS_Wrap did not encrypt a sealed message")
        return bytes(res.message)

    def unwrap(self, token: bytes, *, sealed: bool) -> bytes:
        """The message in ``token``; with a sealing layer, a token that was only
        signed is refused (a peer in the middle could have read it)."""
        try:
            res = self._ctx.unwrap(token)
        except GSSError as e:
            raise SaslError(f"GSS_Unwrap: {_describe(e)}") from None
        if sealed and not res.encrypted:
            raise SaslError("a message of a sealed session arrived unencrypted")
        return bytes(res.message)
