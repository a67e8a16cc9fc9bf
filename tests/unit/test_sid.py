"""SIDs checked once where they enter (cached/ldap/sid.py, [MS-DTYP] 2.4.2): what the
reader accepts, the writer writes; a value that is not a SID is dropped with one line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cached.ldap import sid as sidmod
from cached.ldap.idmap import IdMapError, IdMapper
from cached.ldap.sid import (
    _sid,
    is_domain_sid,
    primary_group_sid,
    sid_assertion,
    sid_to_bytes,
    sid_to_str,
)
from cached.ratelimit import RateLimitedLog

DOMAIN = "S-1-5-21-1004336348-1177238915-682003330"


def raw_sid(count: int, revision: int = 1, extra: bytes = b"") -> bytes:
    head = bytes([revision, count]) + (5).to_bytes(6, "big")
    return head + b"".join((21 + i).to_bytes(4, "little") for i in range(count)) + extra


@pytest.mark.parametrize("count", [0, 1, 5, 15])
def test_every_valid_sid_round_trips(count: int) -> None:
    raw = raw_sid(count)
    text = sid_to_str(raw)
    assert text.startswith("S-1-5") and text.count("-") == 2 + count
    assert sid_to_bytes(text) == raw
    assert sid_assertion("objectSid", text).startswith("(objectSid=\\01")


@pytest.mark.parametrize(
    "raw",
    [
        raw_sid(16),  # the 16-sub-authority value the reader used to accept
        raw_sid(255),
        raw_sid(5, revision=2),
        raw_sid(5, revision=0),
        raw_sid(5, extra=b"\0"),  # longer than its count says
        raw_sid(5)[:-1],  # shorter
        b"\x01\x05\x00",
        b"",
    ],
)
def test_what_is_not_a_sid_is_refused_in_binary(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a SID"):
        sid_to_str(raw)


@pytest.mark.parametrize(
    "text",
    [
        DOMAIN + "-1" * 13,  # 16 sub-authorities
        "S-2-5-21-1-2-3",  # revision 2
        "S-1-281474976710656-1",  # authority of 49 bits
        f"{DOMAIN}-4294967296",  # a RID above 2^32-1
        "S-1-5-21-\u0663",  # an Arabic-Indic digit: isdigit() and int() take it
        "S-1",
        "X-1-5-21",
        "S-1-5--1",
    ],
)
def test_what_is_not_a_sid_is_refused_as_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a SID"):
        sid_to_bytes(text)
    assert not is_domain_sid(text)


def test_a_domain_sid_leaves_room_for_a_rid() -> None:
    assert is_domain_sid(DOMAIN)
    fourteen = sid_to_str(raw_sid(14))
    fifteen = sid_to_str(raw_sid(15))
    assert is_domain_sid(fourteen) and not is_domain_sid(fifteen)
    with pytest.raises(IdMapError, match="not a domain SID"):
        IdMapper().add_domain("D", fifteen)
    m = IdMapper()
    m.add_domain("D", fourteen)
    assert m.id_to_sid(m.sid_to_id(f"{fourteen}-1000")) == f"{fourteen}-1000"


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> Any:
    """A fresh rate limiter for sid.py's lines, and its lines captured."""
    monkeypatch.setattr(sidmod, "limited", RateLimitedLog(sidmod.log))
    caplog.set_level(logging.WARNING, logger="cached.ldap.sid")
    return caplog


def test_a_value_that_is_not_a_sid_is_dropped_with_one_line(quiet: Any) -> None:
    good = raw_sid(5)
    for _ in range(100):
        assert _sid([raw_sid(16)]) is None
    assert _sid([good]) == sid_to_str(good) and _sid([]) is None
    lines = [r for r in quiet.records if r.name == "cached.ldap.sid"]
    assert len(lines) == 1 and "not a SID" in lines[0].getMessage(), lines


def test_primary_group_sid_takes_a_rid_or_nothing(quiet: Any) -> None:
    user = f"{DOMAIN}-1105"
    assert primary_group_sid(user, [b"513"]) == f"{DOMAIN}-513"
    assert primary_group_sid(user, []) is None
    for bad in ([b"4294967296"], [b"-1"], [b"x"], [b"\xd9\xa3"]):
        assert primary_group_sid(user, bad) is None, bad
    # The user's own SID at 15 sub-authorities: its domain part plus the RID is 15 too.
    fifteen = sid_to_str(raw_sid(15))
    assert primary_group_sid(fifteen, [b"513"]) == fifteen.rsplit("-", 1)[0] + "-513"
    assert len([r for r in quiet.records if r.name == "cached.ldap.sid"]) == 1
