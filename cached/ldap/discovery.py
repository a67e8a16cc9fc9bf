"""Finding a domain's controllers in DNS (``ad_server = _srv_``), as SSSD's AD
provider does (ad_srv.c, RFC 2782).

The SRV records ``_ldap._tcp.<domain>`` name every DC of the domain; with a site,
``_ldap._tcp.<site>._sites.<domain>`` names the site's, which SSSD tries first (its
primary servers) with the domain-wide ones as backups. Records are ordered by
priority, then by weight (heavier first), then by name, so the order is the same at
every lookup; a DC named twice keeps its first place. The site is ``ad_site``, or, as
SSSD finds it when that is unset (``ad_enable_dns_sites``), the one the DCs name in
their answer to a CLDAP netlogon ping (netlogon.py): sent at once to the first
``MAX_PINGS`` domain-wide DCs over UDP, the first answer taken.
"""

from __future__ import annotations

import logging
import socket
import time

import dns.exception
import dns.rdtypes.IN.SRV
import dns.resolver

from cached.ldap import netlogon

log = logging.getLogger(__name__)

# DCs pinged at once (SSSD's ad_cldap_ping pings a few in parallel too).
MAX_PINGS = 5
CLDAP_PORT = 389


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


def domain_controllers(
    domain: str, site: str, timeout: float, *, find_site: bool = True
) -> tuple[list[str], list[str], str]:
    """``ldap://`` URIs of the domain's DCs: the site's (primary) and the others
    (backup), and the site; without a site every DC is primary. ``find_site``: ask
    the DCs for it (CLDAP) when ``site`` is empty."""
    hosts = srv_hosts(f"_ldap._tcp.{domain}", timeout)
    everyone = [_uri(h, p) for h, p in hosts]
    if not site and find_site and hosts:
        site = cldap_site([h for h, _ in hosts[:MAX_PINGS]], domain, timeout)
    if not site:
        return everyone, [], ""
    try:
        local = [_uri(h, p) for h, p in srv_hosts(f"_ldap._tcp.{site}._sites.{domain}", timeout)]
    except DiscoveryError:
        local = []
    return local, [u for u in everyone if u not in local], site


def cldap_site(hosts: list[str], domain: str, timeout: float) -> str:
    """The site the first DC to answer the netlogon ping names ("" when none answers
    within ``timeout`` or none names one)."""
    socks: dict[int, socket.socket] = {}
    ids: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        for i, host in enumerate(hosts, 1):
            try:
                family, _, _, _, addr = socket.getaddrinfo(
                    host, CLDAP_PORT, type=socket.SOCK_DGRAM
                )[0]
                sock = socks.get(family)
                if sock is None:
                    sock = socks[family] = socket.socket(family, socket.SOCK_DGRAM)
                sock.sendto(netlogon.ping(i, domain), addr)
                ids.add(i)
            except OSError as e:
                log.debug("CLDAP ping to %s: %s", host, e)
        while ids and (left := deadline - time.monotonic()) > 0:
            for sock in socks.values():
                sock.settimeout(max(0.01, left / len(socks)))
                try:
                    data = sock.recv(65536)
                except (TimeoutError, OSError):
                    continue
                try:
                    msgid, info = netlogon.answer(data, ids)
                except netlogon.NetlogonError as e:
                    log.debug("CLDAP answer ignored: %s", e)
                    continue
                found = netlogon.site(info)
                log.debug("CLDAP: %s says the site is %r", info.dc_host, found)
                if found:
                    return found
                ids.discard(msgid)
    finally:
        for sock in socks.values():
            sock.close()
    return ""


def _uri(host: str, port: int) -> str:
    return f"ldap://{host}" if port == 389 else f"ldap://{host}:{port}"
