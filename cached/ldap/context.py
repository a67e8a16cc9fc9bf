"""What the requests of one domain share for the backend's life: the configuration,
the connection, the cache and the schema (filled from the root DSE on first use).
SSSD's ``sdap_options`` and ``sdap_domain``: every request module reads them here,
and keeps what is its own (a running request's state) in its own object."""

from __future__ import annotations

from dataclasses import dataclass, field

from cached.cache.writer import BackendCache
from cached.config import DomainConfig
from cached.counters import Counters
from cached.ldap.client import LdapClient
from cached.ldap.controls import AD_CAPABILITY_OID
from cached.ldap.schema import SchemaMap


@dataclass(eq=False)
class Context:
    cfg: DomainConfig
    client: LdapClient
    cache: BackendCache
    counters: Counters
    schema: SchemaMap
    # Servers (URIs) whose own limit cut an unpaged walk-up search (one capping unpaged
    # answers only: 389-ds' nsslapd-sizelimit below its paged limit, slapd's
    # size.pr): the walk goes paged there from then on (walk.Walk.round).
    walk_paged: set[str] = field(default_factory=set)

    def ad_dc(self) -> bool:
        """The server is an AD DC: ``ldap_schema = ad``, or a root DSE listing the AD
        capability whatever the schema. Windows caps unpaged answers at MaxPageSize
        (1,000) where pages go on; Samba ignores a request's sizeLimit (measured on
        4.17: a sizeLimit of 5 returned all 1,609 users), so nothing would bound an
        unpaged sweep. Searches that must not be cut go paged there."""
        info = self.client.info
        return self.schema.ad or (info is not None and AD_CAPABILITY_OID in info.capabilities)
