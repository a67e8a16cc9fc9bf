"""The LDAP backend against a real slapd: exact answers, search counts, changes,
hostile names, failover, TLS."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import cached.ldap.exchange as exchange_mod
from cached.cache import State
from cached.cache.writer import WriteBatch
from cached.counters import LDAP_CONNECT, LDAP_SEARCH, Counters
from cached.ldap import ber, deref
from cached.ldap import entry as ldap_entry
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.exchange import LdapSlow, LdapTooMany, Search
from cached.ldap.provider import Outcome
from cached.ldap.schema import escape
from cached.model import User
from testing.backend import OPEN_CLIENTS, make_backend, make_domain, stored_gids, stored_members
from testing.faultproxy import FaultProxy

# -- pure parts ------------------------------------------------------------------


def test_escape_follows_rfc4515():
    assert escape("*)(uid=*") == "\\2a\\29\\28uid=\\2a"
    assert escape("a\\b\0c") == "a\\5cb\\00c"
    assert escape("Zoë") == "Zoë"


def _deref_value(items: list[tuple[str, str, dict[str, list[bytes]]]]) -> bytes:
    def tlv(tag: int, body: bytes) -> bytes:
        n = len(body)
        head = bytes([n]) if n < 0x80 else bytes([0x82, n >> 8, n & 0xFF])
        return bytes([tag]) + head + body

    res = []
    for attr, dn, vals in items:
        parts = [
            tlv(0x30, tlv(0x04, a.encode()) + tlv(0x31, b"".join(tlv(0x04, v) for v in vs)))
            for a, vs in vals.items()
        ]
        body = tlv(0x04, attr.encode()) + tlv(0x04, dn.encode())
        if parts:
            body += tlv(0xA0, b"".join(parts))
        res.append(tlv(0x30, body))
    return tlv(0x30, b"".join(res))


def test_deref_decode_round_trip_and_garbage():
    value = _deref_value(
        [
            ("member", "uid=a,ou=people", {"uid": [b"a"], "objectClass": [b"posixAccount"]}),
            ("member", "cn=g,ou=groups", {}),
        ]
    )
    got = deref.decode_response(value)
    assert [(r.dn, r.values) for r in got] == [
        ("uid=a,ou=people", {"uid": [b"a"], "objectclass": [b"posixAccount"]}),
        ("cn=g,ou=groups", {}),
    ]
    for bad in (
        b"",
        b"\x30",
        b"\x30\x05\x04\x01",
        value[:-3],
        b"\x04\x00",
        b"\x30\x84\xff\xff\xff\xff",
    ):
        with pytest.raises(ber.BerError):
            deref.decode_response(bad)
    req = deref.encode_request([("member", ["uid", "cn"])])
    assert req == bytes.fromhex("3015301304066d656d626572300904037569640402636e")


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    head = bytes([n]) if n < 0x80 else bytes([0x82, n >> 8, n & 0xFF])
    return bytes([tag]) + head + body


def test_search_entry_decoder_agrees_with_ldap3():
    from ldap3.operation.search import raw_attributes_to_dict_fast
    from ldap3.utils.asn1 import decode_message_fast

    long_value = b"x" * 300  # long-form lengths inside the value loop
    attrs = _tlv(
        0x30,
        _tlv(0x30, _tlv(0x04, b"cn") + _tlv(0x31, _tlv(0x04, b"g1")))
        + _tlv(
            0x30,
            _tlv(0x04, b"member")
            + _tlv(0x31, b"".join(_tlv(0x04, v) for v in (b"uid=a,o=x", long_value, b""))),
        ),
    )
    ctrl_value = _deref_value([("member", "uid=a,o=x", {"uid": [b"a"]})])
    control = _tlv(0x30, _tlv(0x04, deref.DEREF_OID.encode()) + _tlv(0x04, ctrl_value))
    op = _tlv(0x64, _tlv(0x04, "cn=g1,o=é".encode()) + attrs)
    msg = _tlv(0x30, _tlv(0x02, b"\x07") + op + _tlv(0xA0, control))

    got = ldap_entry.decode_search_entry(msg)
    theirs = decode_message_fast(msg)
    assert got is not None and got.message_id == theirs["messageID"] == 7
    assert got.dn == theirs["payload"][0][3]
    want = raw_attributes_to_dict_fast(theirs["payload"][1][3])
    assert {k.decode(): v for k, v in got.attrs.items()} == want
    assert got.attrs[b"member"][1] == long_value
    assert got.controls == [(deref.DEREF_OID.encode(), False, ctrl_value)]
    # Any other protocolOp is left to ldap3 (searchResDone here).
    done = _tlv(0x30, _tlv(0x02, b"\x07") + _tlv(0x65, b"\x0a\x01\x00\x04\x00\x04\x00"))
    assert ldap_entry.decode_search_entry(done) is None
    # Truncated or mislabelled input is refused, never read past its end.
    for bad in (msg[:-1], msg[:40], msg[: -len(control) - 2] + b"\xa0\x05", b"\x30\x00"):
        with pytest.raises(ber.BerError):
            ldap_entry.decode_search_entry(bad)


# -- exact answers -----------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_small_directory_every_answer_at_every_level(tmp_path, slapd_small, level):
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_group_nesting_level=level)
    p, cache, _ = make_backend(tmp_path, cfg)
    for name in exp.user_names():
        assert p.user_by_name(name).outcome is Outcome.FOUND
        assert cache.user_by_name(name).value == exp.user(name)
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, level), name
    for name in exp.group_names():
        assert p.group_by_name(name).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, level), name
        assert cache.group_by_name(name).state is State.VALID


def test_small_rfc2307_directory(tmp_path, slapd_small_2307):
    s, exp = slapd_small_2307.slapd, slapd_small_2307.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_schema="rfc2307")
    p, cache, _ = make_backend(tmp_path, cfg)
    for name in exp.user_names():
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 0)
    for name in exp.group_names():
        assert p.group_by_gid(exp.group(name).gid).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, 0)


@pytest.mark.parametrize("level,count", [(2, 2085), (3, 2086)])
def test_bigroupuser_initgroups_in_a_handful_of_searches(tmp_path, slapd_big, level, count):
    s, exp = slapd_big.slapd, slapd_big.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_group_nesting_level=level)
    p, cache, counters = make_backend(tmp_path, cfg)
    p.client.connect()  # the root DSE read is the connection's, not the request's
    before = counters.get(LDAP_SEARCH).count
    offset = s.log_offset()
    assert p.initgroups("bigroupuser").outcome is Outcome.FOUND
    assert stored_gids(cache, "bigroupuser") == exp.initgroups("bigroupuser", level)
    assert len(stored_gids(cache, "bigroupuser")) == count
    searches = counters.get(LDAP_SEARCH).count - before
    assert searches <= 10
    assert s.count_logical_searches(offset) == searches
    # Every group of the answer is stored complete: getgrgid needs no backend.
    for gid in list(stored_gids(cache, "bigroupuser"))[:300]:
        assert cache.group_by_gid(gid).state is State.VALID


def test_bigroupuser_rfc2307(tmp_path, slapd_big_2307):
    s, exp = slapd_big_2307.slapd, slapd_big_2307.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_schema="rfc2307")
    p, cache, counters = make_backend(tmp_path, cfg)
    p.client.connect()
    before = counters.get(LDAP_SEARCH).count
    assert p.initgroups("bigroupuser").outcome is Outcome.FOUND
    assert stored_gids(cache, "bigroupuser") == exp.initgroups("bigroupuser", 0)
    assert counters.get(LDAP_SEARCH).count - before <= 3


def test_large_group_in_at_most_three_searches(tmp_path, slapd_big):
    s, exp = slapd_big.slapd, slapd_big.expected
    p, cache, counters = make_backend(tmp_path, make_domain([s.uri], s.base_dn))
    p.client.connect()
    before = counters.get(LDAP_SEARCH).count
    offset = s.log_offset()
    assert p.group_by_name("large01").outcome is Outcome.FOUND
    got = stored_members(cache, "large01")
    assert got == exp.members("large01", 2) and len(got) == 5000
    searches = counters.get(LDAP_SEARCH).count - before
    assert searches <= 3
    assert s.count_logical_searches(offset) == searches


def test_the_deref_control_names_members(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=1)
    p, cache, _ = make_backend(tmp_path, cfg)
    big = max(exp.group_names(), key=lambda g: len(exp.members(g, 0)))
    offset = s.log_offset()
    assert p.group_by_name(big).outcome is Outcome.FOUND
    assert stored_members(cache, big) == exp.members(big, 2)
    bases = [op.base for op in s.searches(offset)]
    assert exp.group(big).dn in bases  # the base search that carried the deref control


def test_searches_sent_together_give_what_each_gives_alone(slapd_small):
    """client.search_many: several searches outstanding on the one connection, paged
    (3 entries a page) so slapd's one paged state per connection is in play: each
    gets exactly the entries it gets alone, an empty one and a noSuchObject base
    included."""
    s = slapd_small.slapd
    client = LdapClient(make_domain([s.uri], s.base_dn, ldap_page_size=3))
    OPEN_CLIENTS.append(client)
    filters = ["(objectClass=posixGroup)", "(uid=user0000*)", "(objectClass=posixAccount)",
               "(uid=nobody-at-all)", "(cn=*)"]  # fmt: skip
    specs = [Search(s.base_dn, f, ["cn", "uid"]) for f in filters]
    specs.append(Search(f"ou=nowhere,{s.base_dn}", "(objectClass=*)", ["cn"]))
    alone = [sorted(e.dn for e in client.search(x.base, x.filt, x.attrs)) for x in specs]
    together = client.search_many(specs)
    assert [sorted(e.dn for e in got) for got in together] == alone  # type: ignore[union-attr]
    assert len(alone[0]) > 3 and alone[3] == [] and alone[-1] == []


def _ahead_client(slapd_small, uri: str = "") -> tuple[LdapClient, list[Search]]:
    s = slapd_small.slapd
    client = LdapClient(make_domain([uri or s.uri], s.base_dn))
    OPEN_CLIENTS.append(client)
    client.connect()
    specs = [Search(s.base_dn, f, ["cn", "uid"], paged=False)
             for f in ("(objectClass=posixAccount)", "(objectClass=posixGroup)")]  # fmt: skip
    return client, specs


def _dns(answers: list[Any]) -> list[list[str]]:
    return [sorted(e.dn for e in got) for got in answers]


def test_searches_sent_ahead_are_read_by_the_search_many_that_asks_for_them(slapd_small):
    """client.send_ahead: the searches go out at once and the next search_many of the
    same Search objects reads their answers, with no second request: slapd logs each
    once, and each answer is what it is sent the usual way."""
    s = slapd_small.slapd
    client, specs = _ahead_client(slapd_small)
    usual = _dns(client.search_many(specs))
    offset = s.log_offset()
    client.send_ahead(specs)
    assert _dns(client.search_many(specs)) == usual
    assert sorted(op.filter for op in s.searches(offset)) == sorted(sp.filt for sp in specs)
    assert usual[0] and usual[1]


@pytest.mark.parametrize("then", ["other search", "drop_ahead"])
def test_searches_sent_ahead_and_not_asked_for_are_read_and_dropped(slapd_small, then):
    """A caller that sends ahead and then asks for something else (or drops them)
    leaves the connection as it found it: their answers are read and dropped, the
    other search gets its own entries, and the connection answers the next search."""
    s = slapd_small.slapd
    client, specs = _ahead_client(slapd_small)
    other = Search(s.base_dn, "(uid=user0001)", ["uid"])
    usual = _dns(client.search_many([*specs, other]))
    conn = client.conn
    assert conn is not None
    offset = s.log_offset()
    client.send_ahead(specs)
    if then == "drop_ahead":
        client.drop_ahead()
        assert len(s.searches(offset)) == 2  # slapd has sent both answers...
        sock = conn.socket
        assert sock is not None
        was = sock.gettimeout()
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):  # ... and nothing of them is left unread
            sock.recv(1, socket.MSG_PEEK)
        sock.settimeout(was)
    assert _dns(client.search_many([other])) == usual[2:]
    assert _dns(client.search_many(specs)) == usual[:2]
    assert client.conn is conn  # no reconnect: nothing on the wire was left unread


@pytest.mark.parametrize("how", ["server gone", "client replaced it"])
def test_a_connection_lost_after_sending_ahead_is_made_again_and_the_searches_resent(
    slapd_small, how
):
    """The connection goes between send_ahead and the read: it died (the server
    restarted), and search_many reconnects once, as for any search; or the client
    replaced it (back to a preferred server), and the new one is not waited on for
    the old one's answers. Either way the searches are sent again."""
    s = slapd_small.slapd
    with FaultProxy("127.0.0.1", s.port) as proxy:
        client, specs = _ahead_client(slapd_small, proxy.uri)
        usual = _dns(client.search_many(specs))
        conn = client.conn
        if how == "server gone":
            _sent_ahead_then_reset(proxy, client, specs)
        else:
            client.send_ahead(specs)
            client.close()
        assert _dns(client.search_many(specs)) == usual
        assert client.conn is not conn


def _sent_ahead_then_reset(proxy: FaultProxy, client: LdapClient, specs: list[Search]) -> None:
    """Send ahead, then the connection reset before any answer reached the client:
    the proxy holds the requests (stalled), resets every connection, then heals (its
    loop runs the three in this order)."""
    proxy.set(stall=True)
    client.send_ahead(specs)
    assert client.exchange._ahead, "nothing was sent ahead"
    proxy.drop_all()
    proxy.heal()


def test_dropping_searches_sent_ahead_on_a_dead_connection_raises_nothing(slapd_small):
    """drop_ahead runs as a lookup ends, failing or not: a connection that died with
    answers unread is closed, nothing is raised (no second error over the lookup's
    own), and the next search connects again."""
    s = slapd_small.slapd
    with FaultProxy("127.0.0.1", s.port) as proxy:
        client, specs = _ahead_client(slapd_small, proxy.uri)
        usual = _dns(client.search_many(specs))
        _sent_ahead_then_reset(proxy, client, specs)
        client.drop_ahead()
        assert client.conn is None
        assert _dns(client.search_many(specs)) == usual


@pytest.mark.parametrize("then", ["read it", "other search"])
def test_the_callers_work_after_sending_ahead_is_not_the_servers_time(slapd_small, then):
    """ldap_search_timeout runs from the read, not from send_ahead: the caller's own
    work in between (keying thousands of member DNs, a stalled host) longer than the
    timeout fails no healthy server (it took the domain offline: found in review).
    The pause is the behaviour under test, not a wait for readiness."""
    s = slapd_small.slapd
    client = LdapClient(make_domain([s.uri], s.base_dn, ldap_search_timeout=1))
    OPEN_CLIENTS.append(client)
    client.connect()
    specs = [Search(s.base_dn, "(objectClass=posixAccount)", ["uid"], paged=False)]
    other = [Search(s.base_dn, "(uid=user0001)", ["uid"])]
    usual = _dns(client.search_many([*specs, *other]))
    client.send_ahead(specs)
    time.sleep(1.2)
    if then == "read it":
        assert _dns(client.search_many(specs)) == usual[:1]
    else:
        assert _dns(client.search_many(other)) == usual[1:]
    assert client.online and not client.failed


def test_searches_sent_ahead_on_a_replaced_connection_are_counted(slapd_small):
    """Every search that went out is counted once, the one sent ahead on a
    connection since replaced included (the server may have run it), and the one
    search_many then sent again."""
    s = slapd_small.slapd
    counters = Counters()
    client = LdapClient(make_domain([s.uri], s.base_dn), counters=counters)
    OPEN_CLIENTS.append(client)
    client.connect()
    specs = [Search(s.base_dn, "(objectClass=posixAccount)", ["uid"], paged=False)]

    def searches_counted(ahead: bool) -> int:
        before = counters.get(LDAP_SEARCH).count
        if ahead:
            client.send_ahead(specs)
            assert client.exchange._ahead, "nothing was sent ahead"
        client.close()
        assert client.search_many(specs)[0]  # connecting again reads the root DSE too
        return counters.get(LDAP_SEARCH).count - before

    assert searches_counted(ahead=True) == searches_counted(ahead=False) + 1


def test_a_search_sent_ahead_on_a_closed_connection_is_sent_by_search_many(slapd_small):
    """Nothing open to send on (closed after an idle timeout, say): send_ahead sends
    nothing, and search_many connects and sends as usual."""
    client, specs = _ahead_client(slapd_small)
    usual = _dns(client.search_many(specs))
    client.close()
    client.send_ahead(specs)
    assert client.conn is None
    assert _dns(client.search_many(specs)) == usual


def test_rows_are_the_entries_search_gives(slapd_small, monkeypatch):
    """client.search_rows: each entry as (DN, the values of each attribute asked, in
    the order asked, any case), the same as search() gives, whether ldap_entry.decode_rows
    read it (small entries) or the generic reader did (entries of 130 bytes or more);
    paged (3 entries a page); bounded by max_entries like search()."""
    s = slapd_small.slapd
    client = LdapClient(make_domain([s.uri], s.base_dn, ldap_page_size=3))
    OPEN_CLIENTS.append(client)
    fast: list[bytes] = []
    decode_rows = ldap_entry.decode_rows

    def counted(msgs, i, shapes):
        got = decode_rows(msgs, i, shapes)
        fast.extend(msgs[i:got])
        return got

    monkeypatch.setattr(ldap_entry, "decode_rows", counted)
    filt = "(objectClass=posixAccount)"
    small = ["UID", "uidNumber", "gidnumber"]
    big = ["uid", "homeDirectory", "loginShell", "cn", "uidNumber", "description"]
    for attrs, by_rows in ((small, True), (big, False)):
        want = {e.dn: [e.get(a) for a in attrs] for e in client.search(s.base_dn, filt, attrs)}
        fast.clear()
        rows = client.search_rows(s.base_dn, filt, attrs)
        assert len(rows) == len(want) > 3 and dict(rows) == want
        assert all(r[1][0] and r[1][1] for r in rows)
        assert len(fast) == (len(rows) if by_rows else 0)
    with pytest.raises(LdapTooMany):
        client.search_rows(s.base_dn, filt, small, max_entries=2)


def test_plain_entries_are_the_entries_the_generic_reader_gives(slapd_small, monkeypatch):
    """Entries without controls (users, groups with their member lists) are read by
    ldap_entry.decode_entry: the same DNs and values, by the same lower-cased types, as
    the generic reader's (decode_search_entry, then client.Request.entry), paged
    or not, rows or entries; with the deref control they are left to the generic
    reader."""
    s = slapd_small.slapd
    client = LdapClient(make_domain([s.uri], s.base_dn, ldap_page_size=3))
    OPEN_CLIENTS.append(client)
    fast: list[bytes] = []
    decode_entry = ldap_entry.decode_entry

    def counted(buf, names, names_max, interned=None):
        got = decode_entry(buf, names, names_max, interned)
        if got is not None:
            fast.append(buf)
        return got

    def read(filt, attrs, specs=None):
        entries = client.search(s.base_dn, filt, attrs, deref_specs=specs)
        return sorted(((e.dn, e.attrs, e.deref) for e in entries), key=lambda t: t[0])

    searches = [
        ("(objectClass=posixGroup)", ["cn", "gidNumber", "member", "objectClass", "Member"]),
        ("(objectClass=posixAccount)", ["uid", "UIDNUMBER", "gidNumber", "homeDirectory"]),
    ]
    monkeypatch.setattr(ldap_entry, "decode_entry", lambda *_a: None)
    generic = [read(f, a) for f, a in searches]
    with_deref = read(searches[0][0], ["cn", "member"], [("member", ["uid", "cn"])])
    monkeypatch.setattr(ldap_entry, "decode_entry", counted)
    assert [read(f, a) for f, a in searches] == generic
    assert len(fast) == sum(map(len, generic)) and all(generic)
    assert any(len(e[1].get("member", [])) > 3 for e in generic[0])
    fast.clear()
    got = read(searches[0][0], ["cn", "member"], [("member", ["uid", "cn"])])
    assert got == with_deref and any(e[2] for e in got)
    assert len(fast) == sum(1 for e in got if not e[1].get("member"))  # no control: plain


def test_small_directory_exact_with_tiny_pages(tmp_path, slapd_small):
    """Every level of the walk with pages of 2 entries: the searches of one round go
    out through search_many, one paged search at a time on the connection (slapd
    keeps one paged state per connection), and every answer is exact."""
    s, exp = slapd_small.slapd, slapd_small.expected
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn, ldap_page_size=2))
    for name in exp.user_names():
        assert p.initgroups(name).outcome is Outcome.FOUND
        assert stored_gids(cache, name) == exp.initgroups(name, 2), name
    for name in exp.group_names():
        assert p.group_by_name(name).outcome is Outcome.FOUND
        assert stored_members(cache, name) == exp.members(name, 2), name


# -- changes on the server -------------------------------------------------------


def test_a_group_changed_between_its_search_and_its_deref_keeps_one_version(
    tmp_path, slapd_small_fresh
):
    """The deref control reads the group again, later than the search that found it:
    a member replaced in between is not dereferenced, yet it named a user when the
    group was read. It must be looked up, not dropped as naming nothing (the kill
    soak's reader caught a group stored as the old version's members minus the
    replaced ones: old and new intersected)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    users = exp.user_names()
    old, new = set(users[:4]), set(users[1:5])  # users[0] replaced by users[4]
    dn = f"cn=racegrp,ou=groups,{s.base_dn}"
    s.ldap_modify(
        f"dn: {dn}\nobjectClass: groupOfNames\nobjectClass: posixGroup\ncn: racegrp\n"
        f"gidNumber: 47000\n" + "".join(f"member: {exp.user(u).dn}\n" for u in sorted(old))
    )
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=1)
    p, cache, _ = make_backend(tmp_path, cfg)
    # named by deref, not by a sweep
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=10**9)
    search = p.client.search
    changed: list[bool] = []

    def change_before_deref(*args, **kw):
        if kw.get("deref_specs") and not changed:
            changed.append(True)
            s.ldap_modify(
                f"dn: {dn}\nchangetype: modify\nreplace: member\n"
                + "".join(f"member: {exp.user(u).dn}\n" for u in sorted(new))
            )
        return search(*args, **kw)

    p.client.search = change_before_deref  # type: ignore[method-assign]
    assert p.group_by_name("racegrp").outcome is Outcome.FOUND
    assert changed  # the deref search ran, after the change
    assert stored_members(cache, "racegrp") == old  # the version the search read, whole


def test_a_member_renamed_between_its_group_search_and_its_look_up_is_kept(
    tmp_path, slapd_small_fresh
):
    """A member is named by a search after the one that read its group: renamed in
    between (with referential integrity, which moves the group's member value along),
    its old DN names nothing by then, yet it is a member of both of the group's
    versions. The group must be stored as one version: its first read with the old
    name, or its second with the new, never without the member (that dropped a member
    that exists)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    users = exp.user_names()[:4]
    dn = f"cn=racegrp2,ou=groups,{s.base_dn}"
    s.ldap_modify(
        f"dn: {dn}\nobjectClass: groupOfNames\nobjectClass: posixGroup\ncn: racegrp2\n"
        f"gidNumber: 47001\n" + "".join(f"member: {exp.user(u).dn}\n" for u in users)
    )
    old_dn = exp.user(users[0]).dn
    rdn_attr, rest = old_dn.split("=", 1)[0], old_dn.split(",", 1)[1]
    assert rdn_attr == "uid"  # the login name is the RDN's value: renamed with it
    renamed = f"{users[0]}r"
    new_dn = f"{rdn_attr}={renamed},{rest}"
    # No deref and no sweep: members are named by look-ups after the group's search.
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=0)
    p, cache, _ = make_backend(tmp_path, cfg)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=10**9)
    search_many = p.client.search_many
    changed: list[bool] = []

    def rename_before_look_up(specs, *args, **kw):
        if not changed and any(escape(users[0]) in sp.filt for sp in specs):
            changed.append(True)
            s.ldap_modify(
                f"dn: {old_dn}\nchangetype: modrdn\nnewrdn: {rdn_attr}={renamed}\n"
                f"deleteoldrdn: 1\n\n"
                f"dn: {dn}\nchangetype: modify\ndelete: member\nmember: {old_dn}\n-\n"
                f"add: member\nmember: {new_dn}\n"
            )  # what the refint overlay does: the group follows its member
        return search_many(specs, *args, **kw)

    p.client.search_many = rename_before_look_up  # type: ignore[method-assign]
    assert p.group_by_name("racegrp2").outcome is Outcome.FOUND
    assert changed  # the look-up ran after the rename
    got = stored_members(cache, "racegrp2")
    assert got in (set(users), {*users[1:], renamed}), got


def _racegroup(s, exp, name: str, gid: int, members: list[str]) -> str:
    dn = f"cn={name},ou=groups,{s.base_dn}"
    s.ldap_modify(
        f"dn: {dn}\nobjectClass: groupOfNames\nobjectClass: posixGroup\ncn: {name}\n"
        f"gidNumber: {gid}\n" + "".join(f"member: {m}\n" for m in members)
    )
    return dn


def test_a_dangling_member_is_dropped_after_one_read_of_its_group_again(
    tmp_path, slapd_small_fresh
):
    """A member DN naming no entry, in a group that did not change: dropped, the group
    stored complete with its stamp, the request run once (its group searched once,
    then once more to see it unchanged)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    users = exp.user_names()[:3]
    ghost = f"uid=ghost,ou=people,{s.base_dn}"
    _racegroup(s, exp, "racegrp3", 47002, [exp.user(u).dn for u in users] + [ghost])
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=0)
    p, cache, _ = make_backend(tmp_path, cfg)
    search_many = p.client.search_many
    seen: list[str] = []

    def count(specs, *args, **kw):
        seen.extend(sp.filt for sp in specs if "racegrp3" in sp.filt)
        return search_many(specs, *args, **kw)

    p.client.search_many = count  # type: ignore[method-assign]
    assert p.group_by_name("racegrp3").outcome is Outcome.FOUND
    assert stored_members(cache, "racegrp3") == set(users)
    assert cache.group_by_name("racegrp3").state is State.VALID
    assert cache.group_stamps(["racegrp3"])["racegrp3"][1]  # its CSN: trusted
    assert len(seen) == 2, seen


def test_a_group_changing_at_every_read_is_stored_incomplete(tmp_path, slapd_small_fresh):
    """A member renamed again before every look-up: the request runs again twice, then
    stores the group incomplete (expired, no stamp), so the next lookup reads it
    again rather than trust a member list the group never had."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    users = exp.user_names()[:4]
    dn = _racegroup(s, exp, "racegrp4", 47003, [exp.user(u).dn for u in users])
    rest = exp.user(users[0]).dn.split(",", 1)[1]
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=0)
    p, cache, _ = make_backend(tmp_path, cfg)
    p.sweeps.tunables = replace(p.sweeps.tunables, min_wanted=10**9)
    search_many = p.client.search_many
    names = [users[0]]

    def rename_before_every_look_up(specs, *args, **kw):
        if any(f"(uid={escape(names[-1])})" in sp.filt for sp in specs):
            old, new = f"uid={names[-1]},{rest}", f"uid={users[0]}r{len(names)},{rest}"
            names.append(f"{users[0]}r{len(names)}")
            s.ldap_modify(
                f"dn: {old}\nchangetype: modrdn\nnewrdn: {new.split(',')[0]}\n"
                f"deleteoldrdn: 1\n\n"
                f"dn: {dn}\nchangetype: modify\ndelete: member\nmember: {old}\n-\n"
                f"add: member\nmember: {new}\n"
            )  # what the refint overlay does
        return search_many(specs, *args, **kw)

    p.client.search_many = rename_before_every_look_up  # type: ignore[method-assign]
    assert p.group_by_name("racegrp4").outcome is Outcome.FOUND
    assert len(names) == 4  # three runs, each renamed the member before its look-up
    assert cache.group_by_name("racegrp4").state is State.EXPIRED
    assert cache.group_stamps(["racegrp4"])["racegrp4"][0] == ""  # no trusted stamp


def test_a_user_moved_since_it_was_cached_keeps_its_groups(tmp_path, slapd_small_fresh):
    """initgroups walks up from the user's DN, taken from the cache when the user is
    fresh there (the getpwnam `id` makes first). Moved since (another OU, same name;
    referential integrity moves the groups' values along), the stored DN is in no
    group any more: the user, in the same groups under both DNs, was stored in none."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    u = next(n for n in exp.user_names() if exp.direct_groups(n))
    cfg = make_domain([s.uri], s.base_dn, ldap_group_nesting_level=2)
    p, cache, _ = make_backend(tmp_path, cfg)
    # Stored ten minutes ago and still valid (a getpwnam then; `id` asks only now).
    batch = WriteBatch()
    cache.put_user(batch, exp.user(u))
    cache.commit(batch, now=time.time() - 600)
    assert cache.user_by_name(u).state is State.VALID
    old_dn = exp.user(u).dn
    rdn = old_dn.split(",", 1)[0]
    moved = f"ou=moved,{s.base_dn}"
    s.ldap_modify(
        f"dn: {moved}\nobjectClass: organizationalUnit\nou: moved\n\n"
        f"dn: {old_dn}\nchangetype: modrdn\nnewrdn: {rdn}\ndeleteoldrdn: 1\n"
        f"newsuperior: {moved}\n\n"
        + "".join(
            f"dn: {exp.group(g).dn}\nchangetype: modify\ndelete: member\nmember: {old_dn}\n"
            f"-\nadd: member\nmember: {rdn},{moved}\n\n"
            for g in sorted(exp.direct_groups(u))
        )
    )  # the move, and what the refint overlay does
    assert p.initgroups(u).outcome is Outcome.FOUND
    assert stored_gids(cache, u) == exp.initgroups(u, 2)


def test_an_expired_cached_user_does_not_name_a_dangling_member(tmp_path, slapd_small_fresh):
    """Members already cached are named by DN without a search, as SSSD does for
    entries that are valid (sdap_nested_group_check_cache). One read longer ago than
    its cache timeout may be long gone from the server: a group still listing its DN
    (no referential integrity) kept it as a member though no such user existed in the
    request."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    users = exp.user_names()[:3]
    ghost = User("ghostuser", 47999, 100, "", "/home/ghostuser", "/bin/sh",
                 f"uid=ghostuser,ou=people,{s.base_dn}")  # fmt: skip
    _racegroup(s, exp, "racegrp5", 47004, [exp.user(u).dn for u in users] + [ghost.dn])
    cfg = make_domain([s.uri], s.base_dn, ldap_deref_threshold=0)
    p, cache, _ = make_backend(tmp_path, cfg)
    batch = WriteBatch()
    cache.put_user(batch, ghost)  # read long ago, deleted from the server since
    cache.commit(batch, now=time.time() - 10**6)
    assert cache.user_by_name("ghostuser").state is State.EXPIRED
    assert p.group_by_name("racegrp5").outcome is Outcome.FOUND
    assert stored_members(cache, "racegrp5") == set(users)


def test_changes_on_the_server_are_seen_after_invalidation(tmp_path, slapd_small_fresh):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    cfg = make_domain([s.uri], s.base_dn, ldap_group_nesting_level=3)
    p, cache, _ = make_backend(tmp_path, cfg)
    user = exp.big_user
    udn = exp.user(user).dn
    direct = sorted(exp.direct_groups(user))
    other = next(g for g in exp.group_names() if user not in exp.members(g, 3) and g != "users")
    assert p.initgroups(user).outcome is Outcome.FOUND
    before = stored_gids(cache, user)

    s.ldap_modify(
        f"dn: {exp.group(other).dn}\nchangetype: modify\nadd: member\nmember: {udn}\n\n"
        f"dn: {exp.group(direct[0]).dn}\nchangetype: modify\ndelete: member\nmember: {udn}\n\n"
        f"dn: {udn}\nchangetype: modify\nreplace: loginShell\nloginShell: /bin/zsh\n"
    )
    cache.invalidate_all()
    assert p.user_by_name(user).outcome is Outcome.FOUND
    u = cache.user_by_name(user).value
    assert u is not None and u.shell == "/bin/zsh"
    assert p.initgroups(user).outcome is Outcome.FOUND
    after = stored_gids(cache, user)
    assert exp.group(other).gid in after and exp.group(other).gid not in before
    # The direct group may still be reached through a parent; its own membership is gone.
    assert user not in stored_members(cache, direct[0]) or direct[0] in exp.direct_groups(user)
    assert user not in stored_members(cache, direct[0])

    # Delete a group the user is in: the next refresh deletes it from the cache.
    victim = direct[1]
    s.ldap_modify(f"dn: {exp.group(victim).dn}\nchangetype: delete\n")
    cache.invalidate_all()
    assert p.initgroups(user).outcome is Outcome.FOUND
    assert exp.group(victim).gid not in stored_gids(cache, user)
    assert cache.group_by_name(victim).state is State.MISSING
    assert p.group_by_name(victim).outcome is Outcome.NOT_FOUND
    assert p.user_by_name("nosuchuser").outcome is Outcome.NOT_FOUND


# -- hostile input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["*)(uid=*", "*", "\\", "(", ")", "a\0b", "bigroupuser)(uid=*", "x" * 300, "\udcff", "é*"],
)
def test_hostile_names_match_nothing_and_raise_nothing(tmp_path, slapd_small, name):
    s = slapd_small.slapd
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn))
    for call in (p.user_by_name, p.group_by_name, p.initgroups):
        assert call(name).outcome is Outcome.NOT_FOUND
    assert cache.counts() == {"users": 0, "groups": 0, "initgr": 0, "netgroups": 0}


# -- failover and offline --------------------------------------------------------


def _dead_uri() -> str:
    # A port nobody listens on: bind it, note it, close it (loopback only).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"ldap://127.0.0.1:{port}"


def test_failover_to_the_second_uri(tmp_path, slapd_small):
    s = slapd_small.slapd
    cfg = make_domain([_dead_uri()], s.base_dn, ldap_backup_uri=s.uri)
    p, _cache, _ = make_backend(tmp_path, cfg)
    assert p.user_by_name(slapd_small.expected.big_user).outcome is Outcome.FOUND
    assert p.client.info is not None and p.client.info.uri == s.uri


BIND_OK_TAIL = b"a\x07\n\x01\x00\x04\x00\x04\x00"  # success, no matched DN, no text


def _bind_ok(chunk: bytes) -> bytes | None:
    """The messageID (its encoded INTEGER) of slapd's successful BindResponse, when
    ``chunk`` is one (1 or 2 octets)."""
    if chunk[:1] != b"0" or chunk[2:3] != b"\x02" or not chunk.endswith(BIND_OK_TAIL):
        return None
    msgid = chunk[2 : 4 + chunk[3]]
    return msgid if chunk[1] == len(msgid) + len(BIND_OK_TAIL) == len(chunk) - 2 else None


def _unknown_result_code(msgid: bytes) -> bytes:
    """resultCode 99: no LDAP result has it (ldap3's decoder raised KeyError)."""
    return _tlv(0x30, msgid + b"a\x07\n\x01\x63\x04\x00\x04\x00")


def _deep_nesting(msgid: bytes) -> bytes:
    """3,000 nested SEQUENCEs (6 KB) where the matchedDN goes (ldap3's recursive
    decoder raised RecursionError)."""
    inner = b""
    for _ in range(3000):
        inner = _tlv(0x30, inner)
    return _tlv(0x30, msgid + _tlv(0x61, b"\n\x01\x00" + inner + b"\x04\x00"))


@pytest.mark.parametrize(("bind_answer", "reason"),
                         [(_unknown_result_code, "bind refused: result (99)"),
                          (_deep_nesting, "undecodable answer")],
                         ids=["unknown-result-code", "deep-nesting"])  # fmt: skip
def test_a_server_whose_bind_answer_is_not_ldap_is_failed_over(
    tmp_path, slapd_small, bind_answer: Callable[[bytes], bytes], reason: str
):
    """A bind answer with a resultCode no LDAP result has, or with thousands of nested
    SEQUENCEs for a field, fails that server with the reason, and the working backup
    serves: the decoding error must not escape the failover (a server never failed
    leaves lookups answering not found)."""
    s = slapd_small.slapd

    def rewrite(chunk: bytes) -> bytes:
        msgid = _bind_ok(chunk)
        return chunk if msgid is None else bind_answer(msgid)

    with FaultProxy("127.0.0.1", s.port) as hostile:
        hostile.set(rewrite=rewrite)
        cfg = make_domain([hostile.uri], s.base_dn, ldap_backup_uri=s.uri)
        p, _cache, _ = make_backend(tmp_path, cfg)
        r = p.user_by_name(slapd_small.expected.big_user)
        assert r.outcome is Outcome.FOUND, r.message
        assert p.client.info is not None and p.client.info.uri == s.uri
        assert hostile.stats.connections == 1
        assert reason in p.client.failed[hostile.uri]


def test_all_servers_dead_goes_offline_then_back(tmp_path, slapd_small_fresh):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    cfg = make_domain(
        [s.uri], s.base_dn, ldap_network_timeout=1, offline_timeout=1, ldap_opt_timeout=1
    )
    now = [1000.0]
    p, cache, _ = make_backend(tmp_path, cfg)
    counters = Counters()
    p.client.close()
    p.client = LdapClient(cfg, counters=counters, clock=lambda: now[0])
    # No server check runs beside this client: the lookup past the backoff retries.
    p.client.retry_in_lookups = True
    OPEN_CLIENTS.append(p.client)
    assert p.user_by_name(exp.big_user).outcome is Outcome.FOUND
    s.stop()
    r = p.user_by_name(exp.big_user)
    assert r.outcome is Outcome.OFFLINE and s.uri in r.message
    assert not p.client.online
    # While offline, requests fail at once: no connection attempt is made.
    attempts = counters.get(LDAP_CONNECT).count
    for _ in range(50):
        assert p.user_by_name("someone").outcome is Outcome.OFFLINE
    assert counters.get(LDAP_CONNECT).count == attempts
    assert cache.user_by_name(exp.big_user).value is not None  # still cached
    s.start()
    assert p.user_by_name(exp.big_user).outcome is Outcome.OFFLINE  # retry time not reached
    now[0] += 1.5  # offline_timeout passed
    assert p.user_by_name(exp.big_user).outcome is Outcome.FOUND
    assert p.client.online


def test_offline_detection_is_bounded_by_the_network_timeout(tmp_path, slapd_small_fresh):
    s = slapd_small_fresh.slapd
    cfg = make_domain(
        [s.uri], s.base_dn, ldap_network_timeout=1, ldap_opt_timeout=1, ldap_search_timeout=1
    )
    p, _, _ = make_backend(tmp_path, cfg)
    p.client.connect()
    s.pause()  # a frozen server: the TCP connection stays up, nothing answers
    try:
        with pytest.raises(LdapOffline):
            p.client.search(s.base_dn, "(uid=x)", ["uid"])
    finally:
        s.resume()


# -- TLS -----------------------------------------------------------------------------


def test_ldaps_and_starttls_with_the_right_ca(tmp_path, slapd_small_tls, tls_files):
    s, exp = slapd_small_tls.slapd, slapd_small_tls.expected
    for uri, starttls in ((s.ldaps_uri, "false"), (s.uri, "true")):
        cfg = make_domain(
            [uri], s.base_dn, ldap_tls_cacert=tls_files.ca_cert, ldap_id_use_start_tls=starttls
        )
        p, _cache, _ = make_backend(tmp_path / uri.split(":")[0] / starttls, cfg)
        assert p.user_by_name(exp.big_user).outcome is Outcome.FOUND


def test_wrong_ca_fails_with_a_clear_error_naming_the_uri(tmp_path, slapd_small_tls, tls_files):
    from testing.slapd import make_tls_material

    s = slapd_small_tls.slapd
    other = make_tls_material(tmp_path / "other-ca")
    # `try` refuses it as `demand` does: the server presents a certificate, and SSSD's
    # `try` ends the session on a bad one (sssd-ldap(5)).
    for reqcert in ("demand", "try"):
        for uri, starttls in ((s.ldaps_uri, "false"), (s.uri, "true")):
            cfg = make_domain(
                [uri], s.base_dn, ldap_tls_cacert=other.ca_cert, ldap_id_use_start_tls=starttls,
                ldap_tls_reqcert=reqcert,
            )  # fmt: skip
            p, _, _ = make_backend(tmp_path / reqcert / uri.split(":")[0] / starttls, cfg)
            r = p.user_by_name("anyone")
            assert r.outcome is Outcome.OFFLINE
            assert uri in r.message and "certificate" in r.message.lower()
    # ldap_tls_reqcert = never accepts it (as SSSD).
    cfg = make_domain([s.ldaps_uri], s.base_dn, ldap_tls_reqcert="never")
    p, _, _ = make_backend(tmp_path / "never", cfg)
    assert p.user_by_name(slapd_small_tls.expected.big_user).outcome is Outcome.FOUND


def test_sasl_external_bind_over_ldapi(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    cfg = make_domain([s.ldapi_uri], s.base_dn, ldap_sasl_mech="EXTERNAL")
    p, cache, _ = make_backend(tmp_path, cfg)
    assert p.user_by_name(exp.big_user).outcome is Outcome.FOUND
    assert cache.user_by_name(exp.big_user).value == exp.user(exp.big_user)
    # slapd saw a SASL EXTERNAL bind: whoami is the peer-credential identity.
    conn = p.client.conn
    assert conn is not None
    with conn.deadline_in(30):
        whoami = conn.extended("1.3.6.1.4.1.4203.1.11.3")  # Who am I? (RFC 4532)
    assert "cn=peercred,cn=external,cn=auth" in whoami.value.decode()


def test_a_search_answered_slowly_runs_past_its_timeout_up_to_its_bound(slapd_small, monkeypatch):
    """ldap_search_timeout runs again from each batch of messages read: a server that
    keeps sending, slowly, is not failed. At the bound (PROGRESS_BOUND timeouts) the
    search fails alone (LdapSlow) and the server stays in use."""
    s = slapd_small.slapd
    every = [Search(s.base_dn, "(objectClass=*)", ["objectClass"], paged=False)]
    with FaultProxy("127.0.0.1", s.port) as px:
        client = LdapClient(make_domain([px.uri], s.base_dn, ldap_search_timeout=1))
        OPEN_CLIENTS.append(client)
        client.connect()
        fast = px.stats.bytes_down
        want = _dns(client.search_many(every))
        size = px.stats.bytes_down - fast
        print(f"\nanswer: {size} bytes")
        # The answer in about 3 s, a message every few milliseconds.
        px.set(bandwidth=size / 3, piece=64)
        start = time.monotonic()
        assert _dns(client.search_many(every)) == want
        took = time.monotonic() - start
        assert took > 1 and client.online and not client.failed, took
        # A bound of 2 timeouts: the same search fails, alone.
        monkeypatch.setattr(exchange_mod, "PROGRESS_BOUND", 2)
        with pytest.raises(LdapSlow, match="the server still answering"):
            client.search_many(every)
        assert client.online and not client.failed
        px.heal()
        assert _dns(client.search_many(every)) == want

