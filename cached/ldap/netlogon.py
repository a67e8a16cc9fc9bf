"""The CLDAP netlogon ping, sans-IO: how a host learns its AD site ([MS-ADTS] 6.3.3).

A search over UDP port 389 (connectionless LDAP) of the root DSE with the filter
``(&(DnsDomain=<domain>)(NtVer=<flags>))`` for the ``Netlogon`` attribute; the DC
answers in one datagram (the entry and the result) whose value is a
NETLOGON_SAM_LOGON_RESPONSE_EX ([MS-ADTS] 6.3.1.9): the DC's and the client's site,
among others, as DNS names compressed as in RFC 1035 §4.1.4 (pointers are offsets
into the value). SSSD asks with ``NtVer = NETLOGON_NT_VERSION_5EX |
NETLOGON_NT_VERSION_WITH_CLOSEST_SITE`` and takes the client's site, else the next
closest site (ad_cldap_ping.c, ad_domain_info.c); so does :func:`site`. The UDP
exchange is discovery.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from cached.ldap import wire
from cached.ldap.entry import decode_search_entry

# [MS-ADTS] 6.3.1.1: NETLOGON_NT_VERSION_5EX, NETLOGON_NT_VERSION_5EX_WITH_IP,
# NETLOGON_NT_VERSION_WITH_CLOSEST_SITE.
NT_VERSION_5EX = 0x04
NT_VERSION_5EX_WITH_IP = 0x08
NT_VERSION_WITH_CLOSEST_SITE = 0x10
# LOGON_SAM_LOGON_RESPONSE_EX and its "user unknown" twin ([MS-ADTS] 6.3.1.7).
_OPCODES = (23, 25)


class NetlogonError(ValueError):
    """A datagram that is no netlogon answer to our ping."""


@dataclass(frozen=True)
class Netlogon:
    forest: str
    domain: str
    dc_host: str
    dc_site: str
    client_site: str
    next_closest_site: str = ""


def ping(message_id: int, domain: str) -> bytes:
    """The ping's datagram: a base search of the root DSE for ``Netlogon``."""
    flags = NT_VERSION_5EX | NT_VERSION_WITH_CLOSEST_SITE
    ntver = "".join(f"\\{b:02x}" for b in flags.to_bytes(4, "little"))
    name = "".join(c if c.isalnum() or c in ".-_" else f"\\{ord(c):02x}" for c in domain)
    filt = wire.encode_filter(f"(&(DnsDomain={name})(NtVer={ntver}))")
    return wire.encode_search(message_id, "", 0, filt, ["Netlogon"])


def answer(datagram: bytes, message_ids: set[int]) -> tuple[int, Netlogon]:
    """The netlogon value of a DC's answer to one of our pings ``message_ids``, and
    the ping it answers."""
    try:
        entry = decode_search_entry(datagram)
    except ValueError as e:
        raise NetlogonError(f"undecodable answer: {e}") from None
    if entry is None or entry.message_id not in message_ids:
        raise NetlogonError("not a search entry answering our ping")
    values = next((v for k, v in entry.attrs.items() if k.lower() == b"netlogon"), [])
    if len(values) != 1:
        raise NetlogonError(f"{len(values)} Netlogon values in the answer")
    return entry.message_id, parse(values[0])


def parse(blob: bytes) -> Netlogon:
    """A NETLOGON_SAM_LOGON_RESPONSE_EX: opcode, Sbz, flags, the domain GUID, then
    forest, domain, DC host, NetBIOS domain, NetBIOS name, user, DC site, client
    site; with the closest-site flag in the trailing NtVersion, the next closest site
    after the (optional) socket address."""
    if len(blob) < 24 + 8:
        raise NetlogonError(f"a netlogon value of {len(blob)} bytes")
    opcode = int.from_bytes(blob[0:2], "little")
    if opcode not in _OPCODES:
        raise NetlogonError(f"netlogon opcode {opcode}, not a LOGON_SAM_LOGON_RESPONSE_EX")
    pos = 24
    names: list[str] = []
    for _ in range(8):
        name, pos = _name(blob, pos)
        names.append(name)
    forest, domain, dc_host, _nb_domain, _nb_name, _user, dc_site, client_site = names
    ntver = int.from_bytes(blob[-8:-4], "little")
    next_closest = ""
    if ntver & NT_VERSION_WITH_CLOSEST_SITE:
        if ntver & NT_VERSION_5EX_WITH_IP:
            if pos >= len(blob):
                raise NetlogonError("netlogon value ends before its socket address")
            pos += 1 + blob[pos]
        if pos < len(blob) - 8:
            next_closest, pos = _name(blob, pos)
    return Netlogon(forest, domain, dc_host, dc_site, client_site, next_closest)


def site(info: Netlogon) -> str:
    """The site SSSD takes: the client's, else the next closest."""
    return info.client_site or info.next_closest_site


def _name(blob: bytes, pos: int) -> tuple[str, int]:
    """A compressed DNS name at ``pos`` and the position after it (RFC 1035 §4.1.4:
    labels, ended by a zero octet or by a pointer, which is followed at most as many
    times as the value has octets, so a loop of pointers ends)."""
    labels: list[str] = []
    end = -1
    hops = 0
    while True:
        if pos >= len(blob):
            raise NetlogonError("a name runs past the netlogon value")
        n = blob[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(blob):
                raise NetlogonError("a name pointer runs past the netlogon value")
            if end < 0:
                end = pos + 2
            pos = (n & 0x3F) << 8 | blob[pos + 1]
            hops += 1
            if hops > len(blob):
                raise NetlogonError("a loop of name pointers")
            continue
        if n & 0xC0:
            raise NetlogonError(f"a label length octet 0x{n:02x}")
        if pos + 1 + n > len(blob):
            raise NetlogonError("a label runs past the netlogon value")
        labels.append(blob[pos + 1 : pos + 1 + n].decode("utf-8", "replace"))
        pos += 1 + n
    return ".".join(labels), (end if end >= 0 else pos)
