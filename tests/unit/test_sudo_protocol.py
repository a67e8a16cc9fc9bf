"""The sudo socket codec (cached/sudo/protocol.py) against SSSD 2.8.2's framing and
``sss_sudo_parse_response``, and the choice of rules (cached/sudo/rules.py) against
``sudosrv_get_sudorules.c`` and ``sysdb_sudo.c``."""

from __future__ import annotations

import struct

import pytest

from cached.model import SudoRule
from cached.sudo import protocol as p
from cached.sudo import rules as r

U32 = struct.Struct("=I")


def _request(cmd: int, body: bytes) -> bytes:
    return p.encode_request(cmd, body)


def test_get_version_is_answered_with_version_1_whatever_is_asked() -> None:
    conn = p.server_connection()
    conn.receive_data(_request(p.Command.GET_VERSION, U32.pack(7)))
    assert isinstance(conn.next_request(), p.GetVersion)
    reply = p.version_reply()
    assert U32.unpack_from(reply, 0)[0] == len(reply) == 20
    assert U32.unpack_from(reply, 16)[0] == 1


def test_a_query_is_uid_and_name_and_arrives_in_pieces() -> None:
    conn = p.server_connection()
    data = _request(p.Command.GET_SUDORULES, p.query_body(10001, "alice"))
    for i in range(len(data) - 1):
        conn.receive_data(data[i : i + 1])
        assert conn.next_request() is p.NEED_DATA
    conn.receive_data(data[-1:])
    assert conn.next_request() == p.Query(p.Command.GET_SUDORULES, 10001, "alice")
    assert conn.next_request() is p.NEED_DATA


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "holds no uid"),
        (U32.pack(1) + b"\0", "holds no uid"),  # no character before the NUL
        (U32.pack(1) + b"alice", "not NUL-terminated"),
        (U32.pack(1) + b"ali\0ce\0", "holds a NUL"),
        (U32.pack(1) + b"\xff\xfe\0", "not UTF-8"),
    ],
)
def test_a_bad_query_is_answered_einval_and_the_connection_goes_on(body: bytes, why: str) -> None:
    conn = p.server_connection()
    conn.receive_data(_request(p.Command.GET_DEFAULTS, body))
    got = conn.next_request()
    assert isinstance(got, p.BadQuery) and why in got.reason
    reply = p.error_reply(got.cmd, p.EINVAL)
    assert U32.unpack_from(reply, 8)[0] == 0  # the header's status stays 0 (SSSD)
    assert p.decode_reply(reply[16:]) == p.Reply(p.EINVAL, [])
    conn.receive_data(_request(p.Command.GET_VERSION, U32.pack(1)))
    assert isinstance(conn.next_request(), p.GetVersion)


@pytest.mark.parametrize(
    "data",
    [
        U32.pack(8) + b"\0" * 12,  # shorter than the header
        U32.pack(2000) + U32.pack(0xC1) + b"\0" * 8,  # over the 1024-byte cap
        _request(0x00C3, b"x"),  # a command the sudo socket does not serve
        _request(0x0011, b"x"),  # an NSS command
    ],
)
def test_bad_framing_closes(data: bytes) -> None:
    conn = p.server_connection()
    conn.receive_data(data)
    with pytest.raises(p.ProtocolError):
        conn.next_request()
    with pytest.raises(p.ProtocolError):
        conn.receive_data(b"more")


def test_the_reply_layout_is_sss_sudo_parse_response_s() -> None:
    rule = [("cn", ["r1"]), ("sudoCommand", ["/bin/ls", "/bin/id"]), ("sudoUser", ["#1"])]
    body = p.rules_reply(p.Command.GET_SUDORULES, [rule])[16:]
    expect = (
        U32.pack(0) + b"\0" + U32.pack(1) + U32.pack(3)
        + b"cn\0" + U32.pack(1) + b"r1\0"
        + b"sudoCommand\0" + U32.pack(2) + b"/bin/ls\0/bin/id\0"
        + b"sudoUser\0" + U32.pack(1) + b"#1\0"
    )  # fmt: skip
    assert body == expect
    assert p.decode_reply(body) == p.Reply(0, [rule])
    empty = p.rules_reply(p.Command.GET_DEFAULTS, [])[16:]
    assert empty == U32.pack(0) + b"\0" + U32.pack(0)
    with pytest.raises(ValueError, match="NUL"):
        p.rules_reply(p.Command.GET_SUDORULES, [[("cn", ["a\0b"])]])


# -- the rules ----------------------------------------------------------------------


def rule(name: str, *attrs: tuple[str, tuple[str, ...]]) -> SudoRule:
    return SudoRule(name, f"cn={name},ou=sudoers,dc=example,dc=com", (("cn", (name,)), *attrs))


ALICE = r.SudoUser("alice", 10001, ("inner", "admins", "alice"), "LDAP")


def names(out: list[p.Rule]) -> list[str]:
    return [dict(x)["cn"][0] for x in out]


def test_a_rule_is_sent_for_its_name_uid_group_or_all_without_its_sudousers() -> None:
    rules = [
        rule("by-name", ("sudoUser", ("alice",)), ("sudoCommand", ("/bin/a",))),
        rule("by-uid", ("sudoUser", ("#10001",))),
        rule("by-group", ("sudoUser", ("%admins",))),
        rule("by-all", ("sudoUser", ("ALL", "!alice"))),
        rule("qualified", ("sudoUser", ("alice@ldap",))),
        rule("other-domain", ("sudoUser", ("alice@other",))),
        rule("two-at", ("sudoUser", ("alice@ldap@x",))),
        rule("by-gid", ("sudoUser", ("%#20001",))),  # SSSD's filter has no %#gid term
        rule("nonposix", ("sudoUser", ("%:admins",))),
        rule("bob", ("sudoUser", ("bob", "%other"))),
    ]
    out = r.rules_for(rules, ALICE, 10001)
    assert sorted(names(out)) == ["by-all", "by-group", "by-name", "by-uid", "qualified"]
    for x in out:
        d = dict(x)
        # Every sudoUser value replaced by the client's #uid: a negation beside ALL is
        # not passed on (as SSSD).
        assert d["sudoUser"] == ("#10001",)
        assert d["objectClass"] == ("sudoRule",)
    assert dict(out[names(out).index("by-name")])["sudoCommand"] == ("/bin/a",)


def test_uid_0_has_no_uid_term_and_case_folds_only_when_asked() -> None:
    root = r.SudoUser("admin", 0, (), "LDAP")
    assert r.rules_for([rule("x", ("sudoUser", ("#0",)))], root, 0) == []
    upper = [rule("x", ("sudoUser", ("ALICE",)))]
    assert r.rules_for(upper, ALICE, 10001) == []
    folded = r.SudoUser("alice", 10001, (), "LDAP", case_sensitive=False)
    assert names(r.rules_for(upper, folded, 10001)) == ["x"]


def test_netgroup_rules_are_sent_whole_for_sudo_to_match() -> None:
    ng = rule("ng", ("sudoUser", ("+admins-ng", "bob")), ("sudoCommand", ("/bin/n",)))
    both = rule("both", ("sudoUser", ("+admins-ng", "alice")))
    out = r.rules_for([ng, both], ALICE, 10001)
    got = {dict(x)["cn"][0]: dict(x)["sudoUser"] for x in out}
    # A rule also selecting the user is a user rule; the other keeps its values,
    # names qualified as SSSD stores them.
    assert got == {"both": ("#10001",), "ng": ("+admins-ng", "bob@ldap")}


def test_sudo_order_highest_first_or_lowest_with_inverse_order() -> None:
    rules = [
        rule("a", ("sudoUser", ("ALL",)), ("sudoOrder", ("5",))),
        rule("b", ("sudoUser", ("ALL",)), ("sudoOrder", ("10",))),
        rule("c", ("sudoUser", ("ALL",))),  # no sudoOrder: 0
        rule("d", ("sudoUser", ("+ng",)), ("sudoOrder", ("7",))),
    ]
    assert names(r.rules_for(rules, ALICE, 1)) == ["b", "d", "a", "c"]
    assert names(r.rules_for(rules, ALICE, 1, inverse_order=True)) == ["c", "a", "d", "b"]


def test_runas_names_of_this_domain_are_sent_short() -> None:
    x = rule("x", ("sudoUser", ("ALL",)), ("sudoRunAsUser", ("bob@LDAP", "carol@other", "dan")))
    (out,) = r.rules_for([x], ALICE, 1)
    assert dict(out)["sudoRunAsUser"] == ("bob", "carol@other", "dan")


def test_defaults_is_the_rule_named_defaults() -> None:
    rules = [
        rule("defaults", ("sudoOption", ("!lecture", "env_keep+=SSH_AUTH_SOCK"))),
        rule("other", ("sudoUser", ("ALL",)), ("sudoOption", ("!authenticate",))),
    ]
    (d,) = r.defaults_of(rules, "LDAP")
    assert dict(d)["sudoOption"] == ("!lecture", "env_keep+=SSH_AUTH_SOCK")


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("20261207120000Z", 1796644800.0),
        ("2026120712Z", 1796644800.0),
        ("202612071200Z", 1796644800.0),
        ("20261207120000.0Z", 1796644800.0),
        ("20261207130000+0100", 1796644800.0),
        ("20261207110000-0100", 1796644800.0),
        ("20261307120000Z", None),
        ("2026120712", None),
        ("tomorrow", None),
    ],
)
def test_generalized_times_as_sssd_parses_them(text: str, when: float | None) -> None:
    assert r.parse_time(text) == when


def test_sudo_timed_leaves_out_rules_outside_their_window() -> None:
    now = 1796644800.0
    rules = [
        rule("open", ("sudoUser", ("ALL",))),
        rule("now", ("sudoUser", ("ALL",)), ("sudoNotBefore", ("20261207000000Z",)),
             ("sudoNotAfter", ("20261208000000Z",))),
        rule("later", ("sudoUser", ("ALL",)), ("sudoNotBefore", ("20270101000000Z",))),
        # Several values: the earliest sudoNotBefore, the latest sudoNotAfter.
        rule("several", ("sudoUser", ("ALL",)),
             ("sudoNotBefore", ("20270101000000Z", "20200101000000Z")),
             ("sudoNotAfter", ("20200101000000Z", "20300101000000Z"))),
        rule("bad", ("sudoUser", ("ALL",)), ("sudoNotAfter", ("soon",))),
    ]  # fmt: skip
    assert sorted(names(r.rules_for(rules, ALICE, 1, timed=True, now=now))) == [
        "now", "open", "several"
    ]  # fmt: skip
    assert len(r.rules_for(rules, ALICE, 1)) == 5  # not timed: sudo checks them itself
