"""id_provider = ad: SSSD's AD defaults from realmd's sssd.conf (config/rules.py), the
SASL security layer's codec (ldap/sasl.py) and the order of discovered DCs
(ldap/discovery.py). The GSSAPI exchange itself runs against a real Samba DC in
tests/integration/test_adjoin.py."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cached.config import ConfigError, DomainConfig, parse_config
from cached.ldap import netlogon, sasl, wire
from cached.ldap.discovery import ordered
from cached.ldap.kerberos import HostIdentity, KerberosError

REALMD = """\
[sssd]
domains = example.com
config_file_version = 2
services = nss, pam

[domain/example.com]
default_shell = /bin/bash
krb5_store_password_if_offline = True
cache_credentials = True
krb5_realm = EXAMPLE.COM
realmd_tags = manages-system joined-with-adcli
id_provider = ad
fallback_homedir = /home/%u@%d
ad_domain = example.com
use_fully_qualified_names = True
ldap_id_mapping = True
"""


def _domain(extra: str = "", text: str = REALMD) -> DomainConfig:
    return parse_config(text + extra).domains[0]


def test_realmd_file_gets_sssd_ad_defaults() -> None:
    cfg = parse_config(REALMD + "ad_hostname = web01.example.com\n")
    assert cfg.warnings == []
    d = cfg.domains[0]
    assert d.ldap_schema == "ad" and d.ldap_id_mapping and d.ldap_use_tokengroups
    assert d.case_sensitive == "false"  # sssd.conf(5): False for the AD provider
    assert d.ldap_sasl_mech == "gssapi" and d.ldap_sasl_authid == "WEB01$@EXAMPLE.COM"
    assert d.ldap_krb5_keytab == "/etc/krb5.keytab" and not d.ldap_default_bind_dn
    assert d.ldap_uri == ["ldap://_srv_"] and d.ldap_backup_uri == []
    assert not d.ldap_referrals
    assert d.fallback_homedir == "/home/%u@%d"  # realmd's line
    # SSSD's AD default, the domain's own, so it wins over [nss]'s.
    text = REALMD.replace("fallback_homedir = /home/%u@%d\n", "")
    text = text.replace("[domain/", "[nss]\nfallback_homedir = /srv/%u\n[domain/")
    assert parse_config(text).domains[0].fallback_homedir == "/home/%d/%u"


def test_realm_and_domain_default_from_the_section() -> None:
    text = REALMD.replace("krb5_realm = EXAMPLE.COM\n", "").replace("ad_domain = example.com\n", "")
    d = _domain("ad_hostname = a-very-long-host-name.example.com\n", text)
    assert (d.ad_domain, d.krb5_realm) == ("example.com", "EXAMPLE.COM")
    # NetBIOS names have 15 characters at most (adcli's computer name).
    assert d.ldap_sasl_authid == "A-VERY-LONG-HOS$@EXAMPLE.COM"


def test_named_servers_and_backups() -> None:
    d = _domain("ad_server = DC2.example.com, _srv_\nad_backup_server = dc9.example.com:3268\n")
    assert d.ldap_uri == ["ldap://dc2.example.com", "ldap://_srv_"]
    assert d.ldap_backup_uri == ["ldap://dc9.example.com:3268"]
    with pytest.raises(ConfigError, match=r"ad_server is empty"):
        _domain("ad_server =\n")


def test_explicit_authid_mech_and_schema() -> None:
    d = _domain("ldap_sasl_authid = host/web01.example.com\nldap_sasl_mech = GSS-SPNEGO\n")
    assert d.ldap_sasl_authid == "host/web01.example.com@EXAMPLE.COM"
    assert d.ldap_sasl_mech == "gssapi"  # the same ticket and layer as GSSAPI
    cfg = parse_config(REALMD + "ldap_schema = rfc2307\n")
    assert cfg.domains[0].ldap_schema == "ad"
    assert any("ldap_schema = rfc2307 is ignored with id_provider = ad" in w for w in cfg.warnings)


def test_gssapi_with_the_ldap_provider_needs_a_realm() -> None:
    text = (
        "[sssd]\ndomains = L\n[domain/L]\nid_provider = ldap\nldap_uri = ldap://h\n"
        "ldap_sasl_mech = GSSAPI\n"
    )
    with pytest.raises(ConfigError, match=r"ldap_sasl_mech = GSSAPI needs krb5_realm"):
        parse_config(text)
    d = parse_config(text + "krb5_realm = R.TEST\nad_hostname = h1.r.test\n").domains[0]
    assert d.ldap_sasl_authid == "host/h1.r.test@R.TEST"


# -- the SASL layer ------------------------------------------------------------------


def test_layer_choice() -> None:
    offer = bytes([7]) + (0x989680).to_bytes(3, "big")  # Samba's and Windows' offer
    layer = sasl.choose_layer(offer, min_ssf=-1)
    assert (layer.kind, layer.server_max, layer.name) == (4, 0x989680, "seal")
    assert sasl.layer_reply(layer) == b"\x04\xff\xff\xff"
    sign_only = bytes([2, 0, 0x10, 0])
    assert sasl.choose_layer(sign_only, min_ssf=1).name == "sign"
    with pytest.raises(sasl.SaslError, match="no security layer"):
        sasl.choose_layer(sign_only, min_ssf=56)
    assert sasl.choose_layer(b"\x01\x00\x00\x00", min_ssf=0).name == "none"
    with pytest.raises(sasl.SaslError, match="no security layer"):
        sasl.choose_layer(b"\x01\x00\x00\x00", min_ssf=-1 + 2)
    with pytest.raises(sasl.SaslError, match="3 octets"):
        sasl.choose_layer(b"\x04\x00\x00", min_ssf=0)


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_buffers_split_anywhere(tokens: list[bytes], data: st.DataObject) -> None:
    wire = sasl.frames(tokens)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    buf = sasl.SaslBuffer()
    got: list[bytes] = []
    for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True):
        got += buf.feed(wire[a:b])
    assert got == tokens and buf.pending == 0


def test_a_buffer_over_the_limit_is_refused() -> None:
    buf = sasl.SaslBuffer(limit=100)
    with pytest.raises(sasl.SaslError, match="over the 100 limit"):
        buf.feed((101).to_bytes(4, "big"))


def test_pieces_fit_the_servers_buffer() -> None:
    layer = sasl.Layer(sasl.LAYER_CONFIDENTIALITY, 4096)
    data = bytes(range(256)) * 100
    parts = sasl.pieces(data, layer)
    assert b"".join(parts) == data and all(len(p) <= 4096 - 64 for p in parts)
    assert sasl.pieces(b"x" * 10, layer) == [b"x" * 10]


# -- discovery order -------------------------------------------------------------------


def test_srv_order() -> None:
    records = [
        (10, 100, "dc3.example.com.", 389),
        (0, 50, "DC2.example.com.", 389),
        (0, 100, "dc1.example.com.", 389),
        (0, 100, "dc1.example.com.", 389),
        (0, 0, ".", 389),
    ]
    assert ordered(records) == [
        ("dc1.example.com", 389),
        ("dc2.example.com", 389),
        ("dc3.example.com", 389),
    ]


# -- the CLDAP netlogon ping -------------------------------------------------------------


def _label(name: str) -> bytes:
    return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"


def _netlogon(client_site: str, next_closest: str = "", *, with_ip: bool = False) -> bytes:
    """A NETLOGON_SAM_LOGON_RESPONSE_EX as a DC writes it: names after the first
    compressed with pointers to the forest name (offset 24)."""
    head = (23).to_bytes(2, "little") + b"\0\0" + (0x3F1FD).to_bytes(4, "little") + bytes(16)
    forest = _label("cached.test")
    ptr = bytes([0xC0, 24])
    body = (
        forest + ptr  # forest, domain (the same name)
        + bytes([3]) + b"dc1" + ptr  # DC host: dc1 + pointer
        + _label("CACHED") + _label("DC1") + b"\0"  # NetBIOS domain, name, no user
        + _label("Default-First-Site-Name")  # DC site
        + (_label(client_site) if client_site else b"\0")
    )  # fmt: skip
    ntver = 0x05 | 0x10
    if with_ip:
        ntver |= 0x08
        body += bytes([16]) + bytes(16)
    body += _label(next_closest) if next_closest else b"\0"
    return head + body + ntver.to_bytes(4, "little") + b"\xff\xff\xff\xff"


def test_netlogon_names_and_site() -> None:
    info = netlogon.parse(_netlogon("Branch"))
    assert (info.forest, info.domain, info.dc_host) == ("cached.test",) * 2 + ("dc1.cached.test",)
    assert (info.dc_site, info.client_site) == ("Default-First-Site-Name", "Branch")
    assert netlogon.site(info) == "Branch"
    # No site of its own for the client's address: the next closest, as SSSD.
    info = netlogon.parse(_netlogon("", "Hub", with_ip=True))
    assert (info.client_site, netlogon.site(info)) == ("", "Hub")


def test_netlogon_hostile_values_are_refused() -> None:
    blob = _netlogon("Branch")
    for bad in (
        blob[:30],  # cut
        (5).to_bytes(2, "little") + blob[2:],  # another opcode
        blob[:24] + bytes([0xC0, 24]) + blob[26:],  # a pointer to itself: a loop
        blob[:24] + bytes([0x80]) + blob[25:],  # a reserved label type
        blob[:24] + bytes([63]) + blob[25:40],  # a label past the end
    ):
        with pytest.raises(netlogon.NetlogonError):
            netlogon.parse(bad)


@given(st.data())
def test_netlogon_damaged_values_parse_or_are_refused(data: st.DataObject) -> None:
    """A DC's value with bytes changed and cut anywhere: names or NetlogonError,
    never another exception (the datagram comes from the network)."""
    blob = bytearray(_netlogon("Branch", "Hub", with_ip=True))
    for _ in range(data.draw(st.integers(1, 4))):
        blob[data.draw(st.integers(4, len(blob) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    with contextlib.suppress(netlogon.NetlogonError):
        netlogon.parse(bytes(blob[:cut]))


def test_ping_asks_for_netlogon_with_sssds_flags() -> None:
    msg = netlogon.ping(7, "cached.test")
    assert wire.decode_response(msg).message_id == 7
    assert b"DnsDomain" in msg and b"cached.test" in msg and b"Netlogon" in msg
    assert b"NtVer\x04\x04\x14\x00\x00\x00" in msg  # 5EX | WITH_CLOSEST_SITE, LE


def test_a_missing_keytab_is_named() -> None:
    """The bind fails with the keytab's path (the server is then failed over like one
    that refuses the bind), before any KDC is asked."""
    keytab = "/nonexistent/krb5.keytab"
    ident = HostIdentity("WEB01$@EXAMPLE.COM", keytab, "MEMORY:t", "EXAMPLE.COM")
    with pytest.raises(KerberosError, match=r"cannot read the keytab /nonexistent/krb5\.keytab"):
        ident.credentials()
