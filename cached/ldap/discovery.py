"""Finding a domain's controllers in DNS (``ad_server = _srv_``), as SSSD's AD
provider does (ad_srv.c, RFC 2782).

The SRV records ``_ldap._tcp.<domain>`` name every DC of the domain; with a site
(``ad_site``), ``_ldap._tcp.<site>._sites.<domain>`` names the site's, which SSSD
tries first (its primary servers) with the domain-wide ones as backups. Records are
ordered by priority, then by weight (heavier first), then by name, so the order is
the same at every lookup; a DC named twice keeps its first place. SSSD finds the
site itself with a CLDAP netlogon ping to a domain-wide DC when ``ad_site`` is unset;
cached does not send that ping yet and uses the domain-wide records (the site-specific
ones only with ``ad_site``): docs/compatibility.md, "AD-joined hosts".
"""

from __future__ import annotations

import dns.exception
import dns.rdtypes.IN.SRV
import dns.resolver


class DiscoveryError(Exception):
    """No record names a DC (no such name, no answer, DNS unreachable)."""


def srv_hosts(name: str, timeout: float) -> list[tuple[str, int]]:
    """The (host, port) pairs of the SRV records of ``name``, in RFC 2782 order."""
    try:
        answer = dns.resolver.resolve(name, "SRV", lifetime=timeout, search=False)
    except (dns.exception.DNSException, OSError) as e:
        raise DiscoveryError(f"DNS SRV {name}: {e or type(e).__name__}") from None
    return ordered(
        [
            (int(r.priority), int(r.weight), r.target.to_text(omit_final_dot=True), int(r.port))
            for r in answer
            if isinstance(r, dns.rdtypes.IN.SRV.SRV)
        ]
    )


def ordered(records: list[tuple[int, int, str, int]]) -> list[tuple[str, int]]:
    """(priority, weight, host, port) records as (host, port) in the order tried: by
    priority, then the heavier first, then by name; a host named twice keeps its first
    place; "." (RFC 2782: the service is not offered there) is left out."""
    out: list[tuple[str, int]] = []
    for _prio, _weight, host, port in sorted(records, key=lambda r: (r[0], -r[1], r[2].lower())):
        name = host.lower().rstrip(".")
        if name and (name, port) not in out:
            out.append((name, port))
    return out


def domain_controllers(domain: str, site: str, timeout: float) -> tuple[list[str], list[str]]:
    """``ldap://`` URIs of the domain's DCs: the site's (primary) and the others
    (backup); without a site every DC is primary."""
    everyone = [_uri(h, p) for h, p in srv_hosts(f"_ldap._tcp.{domain}", timeout)]
    if not site:
        return everyone, []
    try:
        local = [_uri(h, p) for h, p in srv_hosts(f"_ldap._tcp.{site}._sites.{domain}", timeout)]
    except DiscoveryError:
        local = []
    return local, [u for u in everyone if u not in local]


def _uri(host: str, port: int) -> str:
    return f"ldap://{host}" if port == 389 else f"ldap://{host}:{port}"
