"""What the PAM responder tells the user about a backend's answer (PAM reference §1.6,
§1.8): ``pam_verbosity`` and the user-info items of each outcome. Pure: the responder
is built on a parsed configuration, no socket or backend."""

from __future__ import annotations

import struct

import pytest

from cached.config import parse_config
from cached.ipc.ops import AuthReply
from cached.pam.protocol import ResponseType, UserInfoType
from cached.pam.server import PamResponder

CONF = """\
[cached]
services = nss, pam
domains = LDAP
[pam]
pam_verbosity = {verbosity}
pam_account_locked_message = Locked by the directory
[domain/LDAP]
id_provider = ldap
ldap_uri = ldaps://ldap.example.test
ldap_search_base = dc=example,dc=test
"""


def subtypes(verbosity: int, reply: AuthReply) -> list[int]:
    config = parse_config(CONF.format(verbosity=verbosity))
    responder = PamResponder(config, lookups=None, backends={})  # type: ignore[arg-type]
    items = list(responder._items(reply))
    assert all(i.type == ResponseType.USER_INFO for i in items)
    return [struct.unpack_from("=I", i.data)[0] for i in items]


@pytest.mark.parametrize(
    ("verbosity", "reply", "expected"),
    [
        # Cached credentials without an expiry are mentioned from verbosity 2 only.
        (1, AuthReply(0, offline=True), []),
        (2, AuthReply(0, offline=True), [UserInfoType.OFFLINE_AUTH]),
        # With an expiry, from verbosity 1.
        (1, AuthReply(0, offline=True, expiry=1_900_000_000), [UserInfoType.OFFLINE_AUTH]),
        (0, AuthReply(0, offline=True, expiry=1_900_000_000), []),
        (1, AuthReply(6, offline=True, delayed_until=1_900_000_000),
         [UserInfoType.OFFLINE_AUTH_DELAYED]),
        (1, AuthReply(0, expires_in=3600), [UserInfoType.EXPIRE_WARN]),
        (1, AuthReply(0, grace=2), [UserInfoType.GRACE_LOGIN]),
        (1, AuthReply(6, locked=True), [UserInfoType.ACCOUNT_EXPIRED]),
        (1, AuthReply(7), []),
        (3, AuthReply(7, offline=True), []),
    ],
)  # fmt: skip
def test_user_info_of_each_answer(verbosity: int, reply: AuthReply, expected: list[int]) -> None:
    assert subtypes(verbosity, reply) == expected


def test_the_locked_message_is_the_configured_one() -> None:
    config = parse_config(CONF.format(verbosity=1))
    responder = PamResponder(config, lookups=None, backends={})  # type: ignore[arg-type]
    [item] = responder._items(AuthReply(6, locked=True))
    assert b"Locked by the directory\0" in item.data


def test_auth_request_never_shows_the_password() -> None:
    from cached.ipc.ops import AuthRequest

    req = AuthRequest("alice", "uid=alice,dc=x", b"Sekrit-123", 0)
    assert "Sekrit" not in repr(req)
    assert AuthRequest.parse(req.args()) == req
