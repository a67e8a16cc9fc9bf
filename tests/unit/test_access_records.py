"""The access op's messages (cached/ipc/ops.py) and the stored access record
(cached/cache/records.py): hostile input refused with BadMessage/RecordError, and the
record canonical, so an unchanged decision is the same bytes and is not written again."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from cached.access.rules import AccessState
from cached.cache import records as rec
from cached.ipc.ops import AccessReply, AccessRequest, BadMessage


def test_the_request_round_trips_and_takes_no_wrong_types() -> None:
    req = AccessRequest("alice", "uid=alice,dc=x", "sshd", "192.0.2.1", "bob", "pts/1", 1001, 0)
    assert AccessRequest.parse(req.args()) == req
    assert AccessRequest.parse({"name": "a", "dn": ""}) == AccessRequest("a", "")
    for bad in ({"name": "", "dn": "x"}, {"name": "a"}, {"name": 1, "dn": "x"},
                {"name": "a", "dn": "x", "service": b"sshd"},
                {"name": "a", "dn": "x", "rhost": ["h"]}):  # fmt: skip
        with pytest.raises(BadMessage):
            AccessRequest.parse(bad)
    # Ids that are not ints are dropped, not trusted.
    got = AccessRequest.parse({"name": "a", "dn": "x", "user_uid": True, "uid": "0"})
    assert (got.user_uid, got.uid) == (0, None)


def test_the_reply_round_trips_and_takes_no_wrong_types() -> None:
    reply = AccessReply(13, "The user account is expired on the AD server", True, False, 2.5)
    assert AccessReply.parse(reply.fields()) == reply
    warned = AccessReply(0, expires_in=86400)
    assert AccessReply.parse(warned.fields()) == warned
    bad: list[dict[str, Any]] = [{}, {"status": "0"}, {"status": True}, {"status": 0, "info": 7},
                                 {"status": 0, "expires_in": -1},
                                 {"status": 0, "expires_in": "5"}]  # fmt: skip
    for b in bad:
        with pytest.raises(BadMessage):
            AccessReply.parse(b)


def test_the_record_is_canonical_and_round_trips() -> None:
    a = AccessState({"b": [b"2", b"1"], "a": [b"x"]}, True, None, False)
    b = AccessState({"a": (b"x",), "b": (b"1", b"2")}, True, None, False)
    assert rec.encode_access(a) == rec.encode_access(b)
    back = rec.decode_access(rec.encode_access(a))
    assert back == AccessState({"a": (b"x",), "b": (b"1", b"2")}, True, None, False)
    assert rec.encode_access(back) == rec.encode_access(a)


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", msgpack.packb([2, {}, True, True, True]), msgpack.packb([1, [], True]),
     msgpack.packb([1, {"a": [1]}, True, True, True]), msgpack.packb("x")],
)  # fmt: skip
def test_a_damaged_record_is_a_record_error(data: bytes) -> None:
    with pytest.raises(rec.RecordError):
        rec.decode_access(data)
