"""Ranged values ([MS-ADTS] 3.1.1.3.1.3.3, ``member;range=0-1499``) from a server whose
ranges never end: a real slapd behind a rewriting proxy that answers every read of one
group with one more ``member;range=K-K`` and never the final ``member;range=K-*``. The
client stops after RANGE_ROUNDS reads of the attribute, fails that search with an error
naming the server and the attribute, and keeps the server and the domain online."""

from __future__ import annotations

from cached.ldap import ber
from cached.ldap import entry as ldap_entry
from cached.ldap.client import LdapClient
from cached.ldap.exchange import RANGE_ROUNDS, LdapRangeError
from cached.ldap.framing import MessageBuffer
from testing.backend import OPEN_CLIENTS, make_domain
from testing.faultproxy import FaultProxy


class EndlessRanges:
    """A FaultProxy rewrite (server -> client, one connection): every SearchResultEntry
    of ``dn`` comes back with its ``member`` values replaced by ``member;range=K-K``,
    K one more each time; other messages pass unchanged. The stream is cut into
    whole messages (framing.MessageBuffer) so that entries can be re-encoded."""

    def __init__(self, dn: str) -> None:
        self.dn = dn.lower().encode()
        self.buffer = MessageBuffer()
        self.rounds = 0

    def __call__(self, chunk: bytes) -> bytes:
        return b"".join(map(self._message, self.buffer.feed(chunk)))

    def _message(self, m: bytes) -> bytes:
        e = ldap_entry.decode_search_entry(m)
        if e is None or e.dn.lower() != self.dn:
            return m
        k = self.rounds
        self.rounds += 1
        attrs = {t: v for t, v in e.attrs.items() if not t.lower().startswith(b"member")}
        attrs[f"member;range={k}-{k}".encode()] = [b"uid=user%05d,ou=people" % k]
        listed = b"".join(
            ber.tlv(0x30, ber.tlv(0x04, t) + ber.tlv(0x31, b"".join(ber.tlv(0x04, v) for v in vs)))
            for t, vs in attrs.items()
        )
        op = ber.tlv(0x64, ber.tlv(0x04, e.dn) + ber.tlv(0x30, listed))
        return ber.tlv(0x30, ber.integer(0x02, e.message_id) + op)


def test_ranged_values_without_an_end_fail_the_search_after_the_cap(slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    dn = exp.group(sorted(exp.group_names())[0]).dn
    endless = EndlessRanges(dn)
    with FaultProxy("127.0.0.1", s.port) as px:
        px.set(rewrite=endless)
        # The cap's reads take a few seconds; without the cap the reads go on until
        # the search timeout, which then fails the server and takes the domain offline.
        client = LdapClient(make_domain([px.uri], s.base_dn, ldap_search_timeout=60))
        OPEN_CLIENTS.append(client)
        client.connect()
        offset = s.log_offset()
        try:
            client.search(dn, "(objectClass=*)", ["cn", "member"], scope="base")
        except LdapRangeError as e:
            error = str(e)
        else:
            raise AssertionError("the endless ranges were taken as an answer")
        searches = [op for op in s.searches(offset) if op.base.lower() == dn.lower()]
        assert px.stats.connections == 1
    # The group's search, then one read per range up to the cap: bounded.
    assert len(searches) == 1 + RANGE_ROUNDS == endless.rounds, (len(searches), endless.rounds)
    assert px.uri in error and "member" in error and dn in error, error
    # The data's fault, not the server's: nothing failed over, the domain is online.
    assert client.online and not client.failed, (client.failed, client.last_error)
