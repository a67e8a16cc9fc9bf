"""The password change's codecs: RFC 3062's request value (checked against ldap3's
pyasn1 definition, an independent encoder), the ExtendedRequest and ModifyRequest
around it, and the verdicts of the change's result (SSSD's sdap_chpass_result)."""

from __future__ import annotations

import random

import pytest
from ldap3.protocol.rfc3062 import PasswdModifyRequestValue
from pyasn1.codec.ber import encoder  # type: ignore[import-untyped]

from cached.ipc.ops import BadMessage, ChpassReply, ChpassRequest
from cached.ldap import chpass, ppolicy, pwmodify, wire
from cached.ldap.ber import BerError


def _pyasn1(user: str | None, old: bytes | None, new: bytes | None) -> bytes:
    v = PasswdModifyRequestValue()
    if user is not None:
        v["userIdentity"] = user.encode()
    if old is not None:
        v["oldPasswd"] = old
    if new is not None:
        v["newPasswd"] = new
    return bytes(encoder.encode(v))


@pytest.mark.parametrize(
    ("user", "old", "new"),
    [
        ("uid=alice,ou=people,dc=example,dc=com", b"old-pw", b"new-pw"),
        ("uid=bj\u00f6rn,dc=x", "g\u00e9h\u00e9im".encode(), b"\x00\xff" * 100),
        ("uid=a,dc=x", b"", b"n"),  # an empty oldPasswd is still sent when given
        ("cn=" + "x" * 300, b"o" * 200, b"n" * 200),  # long form lengths
    ],
)
def test_the_request_value_is_rfc_3062s(user: str, old: bytes, new: bytes) -> None:
    got = pwmodify.encode_request(user, old, new)
    assert got == _pyasn1(user, old, new)
    assert pwmodify.decode_request(got) == (user, old, new)


def test_absent_fields_are_left_out() -> None:
    assert pwmodify.encode_request("", None, b"n") == _pyasn1(None, None, b"n")
    assert pwmodify.encode_request("uid=a", b"o", None) == _pyasn1("uid=a", b"o", None)
    assert pwmodify.encode_request("", None, None) == bytes.fromhex("3000")


def test_random_requests_round_trip_and_damage_is_an_error() -> None:
    rng = random.Random(3062)
    for _ in range(300):
        user = "".join(rng.choice("abc=,\u00e9") for _ in range(rng.randrange(0, 40)))
        old = rng.randbytes(rng.randrange(0, 300)) if rng.random() < 0.8 else None
        new = rng.randbytes(rng.randrange(0, 300)) if rng.random() < 0.8 else None
        value = pwmodify.encode_request(user, old, new)
        assert value == _pyasn1(user or None, old, new)
        assert pwmodify.decode_request(value) == (user, old, new)
        cut = rng.randrange(0, len(value))
        with pytest.raises(BerError):
            pwmodify.decode_request(value[:cut])


def test_the_extended_request_carries_the_value_and_the_policy_control() -> None:
    value = pwmodify.encode_request("uid=a,dc=x", b"old", b"new")
    msg = wire.encode_extended(7, pwmodify.PASSWD_MODIFY_OID, value,
                               [ppolicy.request_control()])  # fmt: skip
    oid = pwmodify.PASSWD_MODIFY_OID.encode()
    # LDAPMessage { 7, [APPLICATION 23] { [0] oid, [1] value }, [0] controls }
    op = bytes([0x77, 2 + len(oid) + 2 + len(value)]) + bytes([0x80, len(oid)]) + oid
    op += bytes([0x81, len(value)]) + value
    ctl_oid = ppolicy.PPOLICY_OID.encode()
    controls = bytes([0xA0, 2 + 2 + len(ctl_oid), 0x30, 2 + len(ctl_oid), 0x04, len(ctl_oid)])
    controls += ctl_oid
    body = bytes([0x02, 0x01, 0x07]) + op + controls
    assert msg == bytes([0x30, len(body)]) + body
    # Without a value: StartTLS's request, as before.
    assert wire.encode_extended(1, wire.START_TLS_OID) == bytes.fromhex(
        "301d02010177188016312e332e362e312e342e312e313436362e3230303337"
    )


def test_the_modify_request_replaces_one_attribute() -> None:
    msg = wire.encode_modify_replace(3, "uid=a,dc=x", "userPassword", [b"pw"])
    # { 3, [APPLICATION 6] { dn, { { replace(2), { type, SET { value } } } } } }
    partial = bytes.fromhex("3014040c7573657250617373776f7264") + bytes.fromhex("3104") + (
        b"\x04\x02pw"
    )
    change = bytes([0x30, 3 + len(partial)]) + b"\x0a\x01\x02" + partial
    changes = bytes([0x30, len(change)]) + change
    dn = b"\x04\x0auid=a,dc=x"
    op = bytes([0x66, len(dn) + len(changes)]) + dn + changes
    assert msg == bytes([0x30, 3 + len(op)]) + b"\x02\x01\x03" + op


def test_a_modify_response_is_read_as_a_result() -> None:
    res = wire.decode_response(bytes.fromhex("300c0201026707" "0a0113" "0400" "0400"))
    assert (res.op, res.code) == (wire.MODIFY_RESPONSE, 19)


def test_the_change_result_as_sssd_maps_it() -> None:
    assert chpass.change_result(0, "") == chpass.ChpassResult(chpass.SUCCESS)
    quality = chpass.change_result(19, "Password fails quality checking policy")
    assert (quality.status, quality.message) == (
        chpass.NEW_AUTHTOK_REQD, "Password fails quality checking policy"
    )
    assert chpass.change_result(19, "").message == chpass.COMPLEXITY
    other = chpass.change_result(50, "no write access")
    assert (other.status, other.message) == (chpass.AUTHTOK_ERR, "no write access")
    assert chpass.change_result(53, "").message is None


def test_the_change_password_messages_round_trip_and_hide_the_passwords() -> None:
    req = ChpassRequest("alice", "uid=alice,dc=x", b"old-secret", b"new-secret", False, 1000,
                        True)  # fmt: skip
    assert ChpassRequest.parse(req.args()) == req
    assert "secret" not in repr(req)
    for bad in ({**req.args(), "new": "text"}, {**req.args(), "prelim": 1},
                {**req.args(), "name": ""}):  # fmt: skip
        with pytest.raises(BadMessage):
            ChpassRequest.parse(bad)
    assert not ChpassRequest.parse({**req.args(), "priv": "yes"}).priv
    reply = ChpassReply(12, "Password fails quality checking policy", True, 0.0)
    assert ChpassReply.parse(reply.fields()) == reply
    with pytest.raises(BadMessage):
        ChpassReply.parse({"status": True})
    with pytest.raises(BadMessage):
        ChpassReply.parse({"status": 0, "message": b"x"})
