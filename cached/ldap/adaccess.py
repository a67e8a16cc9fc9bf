"""The backend's side of ``access_provider = ad`` (``Op.ACCESS``), as SSSD 2.8.2's
``ad_access.c``: first the LDAP provider's checks with the order the AD provider sets
(``ad_init.c`` ``ad_init_sdap_access_ctx``), then the GPOs.

1. ``expire`` with ``ldap_account_expire_policy`` (``ad`` by default under
   ``id_provider = ad``: userAccountControl's ACCOUNTDISABLE denies,
   ``accountExpires`` in the past is ACCT_EXPIRED, with SSSD's texts), then, when
   ``ad_access_filter`` is set, ``filter`` with the entry of it that applies to this
   domain (:mod:`cached.access.adfilter`; none applies: denied). These are
   :class:`cached.ldap.access.AccessChecks`' reads, stored for offline decisions.
2. When those allow and ``ad_gpo_access_control`` is not ``disabled``: the GPO-based
   login rights (:func:`cached.ldap.gpo.decide`) for the user's SIDs. With ID mapping
   (realmd's ``ldap_id_mapping = True``) the SIDs are the cache's: the user's uid and
   the gids of its initgroups (nested groups, the primary group) mapped back by the
   domain's ID-mapping slices, as SSSD reads them from its sysdb; without it, the
   DC's ``objectSid`` and ``tokenGroups`` of the user's entry. They are stored with
   the access record, so an offline check has them. SYSVOL is read over SMB from the
   DC the LDAP connection is on (its name from the connection's URI, which SRV
   discovery fills with the DC's DNS name, the name its ``cifs/`` principal has),
   with the host's ticket (``KRB5CCNAME`` is the host's ccache, kinit'ed from the
   keytab when due). The rules, the GPO files and the last resultant rights are kept
   under ``<db_dir>/gpo_<domain>/``; offline, the last rights decide.

PAM statuses as ``ad_pam_access_handler_done``: denied by a GPO PERM_DENIED; a GPO
evaluation that failed SYSTEM_ERR under ``enforcing``, allowed (logged) under
``permissive``.
"""

from __future__ import annotations

import logging
import os
import struct
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from cached.access import rules
from cached.access.adfilter import applicable
from cached.access.rules import AccessState
from cached.config import DomainConfig
from cached.config.gpomap import GpoMode
from cached.config.options import AccessRule
from cached.ipc.ops import AccessReply, AccessRequest
from cached.ldap import gpo
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.exchange import LdapError
from cached.ldap.gpo_fetch import GpoFiles, SmbSysvol, SysvolReader
from cached.ldap.idmap import IdMapError, IdMapper
from cached.ldap.kerberos import KerberosError
from cached.ldap.schema import SchemaMap
from cached.ldap.sid import sid_to_str

from .access import AccessChecks

if TYPE_CHECKING:
    from cached.cache.writer import BackendCache

log = logging.getLogger(__name__)

# The access record's role holding the user's SIDs (the user's first), as text.
SIDS = "sids"
BUILTIN_PREFIX = "S-1-5-32-"


def domain_to_dn(domain: str) -> str:
    """``a.b`` -> ``DC=a,DC=b``: the domain's naming context when the root DSE named
    none."""
    return ",".join(f"DC={label}" for label in domain.split(".") if label)


class AdAccessChecks(AccessChecks):
    """``idmap``: the AD provider's ID mapping, None without it; ``state_dir``: where
    the GPO files and the last rights are kept; ``sysvol``: the SYSVOL reader of a DC
    by name (default: SMB with the host's ticket)."""

    def __init__(
        self,
        domain: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        prepare: Callable[[], SchemaMap],
        idmap: Callable[[], IdMapper | None],
        state_dir: Path,
        sysvol: Callable[[str], SysvolReader] | None = None,
    ) -> None:
        super().__init__(domain, client, cache, prepare)
        self.idmap = idmap
        self.state_dir = state_dir
        self.sysvol = sysvol or self._smb
        self.order = (AccessRule.EXPIRE, AccessRule.FILTER) if domain.ad_access_filter else (
            AccessRule.EXPIRE,)  # fmt: skip
        # SSSD compares a FOREST: entry with the domain's forest; cached serves one
        # domain and names its forest by ad_domain (docs/compatibility.md §9.10).
        self.access_filter = applicable(domain.ad_access_filter, domain.name,
                                        domain.ad_domain or domain.name) or ""  # fmt: skip
        self.filter_option = "ad_access_filter"
        if domain.ad_access_filter and not self.access_filter:
            log.warning("domain %s: no entry of ad_access_filter applies to this domain, "
                        "so every user is denied (as SSSD)", domain.name)  # fmt: skip
        self.gpo_settings = gpo.GpoSettings.of(domain, site=domain.ad_site)
        # smbprotocol and pyspnego log every SMB message at DEBUG, the session setup's
        # Kerberos tokens included: never into the daemon's log.
        for name in ("smbprotocol", "smbclient", "spnego"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.gpo_checks = 0
        self.gpo_denied = 0
        self._read_sids: tuple[str, ...] | None = None

    # -- the user's SIDs (lookup thread) -------------------------------------------

    def _read(self, req: AccessRequest) -> AccessState:
        state = super()._read(req)
        self._read_sids = None
        if self.gpo_settings.mode == GpoMode.DISABLED:
            return state
        try:
            sids = self._sids(req)
        except (IdMapError, ValueError, LdapError) as e:
            if isinstance(e, LdapOffline):
                raise
            log.error("domain %s: the SIDs of %r are unknown: %s", self.domain.name,
                      req.name, e)  # fmt: skip
            return state
        self._read_sids = sids
        return replace(state, attrs={**state.attrs, SIDS: tuple(s.encode() for s in sids)})

    def _sids(self, req: AccessRequest) -> tuple[str, ...]:
        idmap = self.idmap()
        if idmap is not None:
            user = idmap.id_to_sid(req.user_uid)
            initgr = self.cache.initgroups(req.name).value
            if initgr is None:
                raise ValueError("not in the cache")
            count = len(initgr.gids) // 4
            gids = struct.unpack(f"={count}I", initgr.gids[: count * 4])
            groups = []
            for gid in gids:
                try:
                    groups.append(idmap.id_to_sid(gid))
                except IdMapError as e:
                    log.debug("domain %s: gid %d of %r: %s", self.domain.name, gid, req.name, e)
            return (user, *groups)
        # No ID mapping: the DC's own view of the user's SIDs (tokenGroups is computed
        # for a base search only: nested groups and the primary group).
        found = self.client.search(req.dn, "(objectClass=*)", ["objectSid", "tokenGroups"],
                                   scope="base")  # fmt: skip
        if not found or not found[0].get("objectSid"):
            raise LdapError(f"{req.dn} has no objectSid")
        entry = found[0]
        user = sid_to_str(entry.get("objectSid")[0])
        groups = [s for v in entry.get("tokenGroups") if not (s := sid_to_str(v)).startswith(
            BUILTIN_PREFIX)]  # fmt: skip
        return (user, *groups)

    # -- the decision ------------------------------------------------------------

    def decide(self, req: AccessRequest) -> AccessReply:
        self._read_sids = None
        reply = super().decide(req)
        if reply.status != rules.SUCCESS or self.gpo_settings.mode == GpoMode.DISABLED:
            return reply
        sids = self._read_sids
        if sids is None:
            stored = self.cache.access_state(req.name)
            raw = stored.attrs.get(SIDS, ()) if stored is not None else ()
            sids = tuple(v.decode("utf-8", "replace") for v in raw)
        self.gpo_checks += 1
        if not sids:
            decision = gpo.GpoDecision(
                False, "the user's SIDs are unknown", error=True
            ) if self.gpo_settings.mode == GpoMode.ENFORCING else gpo.GpoDecision(
                True, "the user's SIDs are unknown", would_deny=True, error=True)  # fmt: skip
        else:
            decision = self._gpo(req, sids)
        log.debug("domain %s: GPO access of %r (service %r): %s (%s)", self.domain.name,
                  req.name, req.service, "allowed" if decision.allowed else "denied",
                  decision.reason)  # fmt: skip
        if decision.allowed:
            return reply
        self.gpo_denied += 1
        self.denied += 1
        status = rules.SYSTEM_ERR if decision.error else rules.PERM_DENIED
        return AccessReply(status, "", reply.offline or decision.offline, self.client.online,
                           self.client.retry_in)  # fmt: skip

    def _gpo(self, req: AccessRequest, sids: tuple[str, ...]) -> gpo.GpoDecision:
        readers: list[SysvolReader] = []

        def connect() -> SysvolReader:
            reader = self.sysvol(self._dc_name())
            readers.append(reader)
            return reader

        info = self.client.info
        domain_dn = (info.default_naming_context if info else "") or domain_to_dn(
            self.domain.ad_domain or self.domain.name)  # fmt: skip
        files = GpoFiles(self.state_dir / "files", self.domain.ad_gpo_cache_timeout, connect)
        host = (self.domain.ad_hostname or os.uname().nodename).split(".", 1)[0]
        try:
            return gpo.decide(
                self.client, files,
                domain=self.domain.ad_domain or self.domain.name, domain_dn=domain_dn,
                host=host, user_sid=sids[0], group_sids=sids[1:], service=req.service,
                settings=self.gpo_settings, state_dir=self.state_dir,
            )  # fmt: skip
        except Exception as e:  # the SMB and SPNEGO stack raises its own errors
            # Whatever failed, the GPOs were not evaluated: as gpo.decide's errors,
            # denied under enforcing, allowed (logged) under permissive.
            log.error("domain %s: GPO evaluation for %r failed: %s: %s", self.domain.name,
                      req.name, type(e).__name__, e)  # fmt: skip
            permissive = self.gpo_settings.mode == GpoMode.PERMISSIVE
            return gpo.GpoDecision(permissive, f"GPO evaluation failed: {e}",
                                   would_deny=permissive, error=True)  # fmt: skip
        finally:
            for r in readers:
                close = getattr(r, "close", None)
                if close is not None:
                    close()

    def _dc_name(self) -> str:
        """The DC the LDAP connection is on, by the name in its URI."""
        info = self.client.info
        host = urllib.parse.urlsplit(info.uri).hostname if info else None
        if not host:
            raise OSError("no DC to read SYSVOL from: the domain is offline")
        return host

    def _smb(self, server: str) -> SysvolReader:
        """SYSVOL on ``server`` over SMB with the host's Kerberos ticket."""
        identity = self.client.identity
        if identity is not None:
            try:
                identity.credentials()  # a fresh ticket in the host's ccache (kinit when due)
            except KerberosError as e:
                raise OSError(f"SYSVOL of {server}: {e}") from None
            # smbprotocol's Kerberos (GSSAPI) reads the default ccache: the host's.
            os.environ["KRB5CCNAME"] = identity.ccache
        return SmbSysvol(server)

    def status(self) -> dict[str, int]:
        return {**super().status(), "gpo_checks": self.gpo_checks,
                "gpo_denied": self.gpo_denied}  # fmt: skip
