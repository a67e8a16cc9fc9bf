"""Security identifiers ([MS-DTYP] 2.4.2), checked once where they enter.

A SID is a revision (1), a sub-authority count of at most 15, a 48-bit big-endian
identifier authority and ``count`` little-endian 32-bit sub-authorities: exactly
``8 + 4 * count`` bytes; its string form is ``S-1-<authority>-<sub>…`` in decimal
([MS-DTYP] 2.4.2.1). A directory server hands out binary SIDs (``objectSid``,
``tokenGroups``) and a number to append (``primaryGroupID``); cached writes them back
into filters (``sid_assertion``) and maps them to ids (cached/ldap/idmap.py).

Every value is checked here, as it arrives, against all of these rules: a value
accepted by the reader and refused by the writer is a lookup that fails with a
traceback on every request (a 16-sub-authority ``tokenGroups`` value did so).
A value that is not a SID is *dropped*, with one rate-limited log line: the entry it
came with is kept, the lookup answered without that value.
"""

from __future__ import annotations

import logging

from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

#: [MS-DTYP] 2.4.2: SID_MAX_SUB_AUTHORITIES.
MAX_SUB_AUTHORITIES = 15
#: [MS-DTYP] 2.4.2: "Revision (1 byte): ... MUST be set to 0x01".
REVISION = 1
_U32 = 0xFFFFFFFF
# The most bytes of a refused value the log line shows: a SID is at most 68.
_SHOWN = 80


def sid_to_str(raw: bytes) -> str:
    """A binary SID as ``S-1-5-21-…``; ValueError for anything that is not one."""
    count = raw[1] if len(raw) >= 8 else -1
    if raw[:1] != b"\x01" or not 0 <= count <= MAX_SUB_AUTHORITIES or len(raw) != 8 + 4 * count:
        raise ValueError(f"not a SID: {bytes(raw[:_SHOWN]).hex()}")
    auth = int.from_bytes(raw[2:8], "big")
    subs = [int.from_bytes(raw[8 + 4 * i : 12 + 4 * i], "little") for i in range(count)]
    return "S-" + "-".join(str(x) for x in (raw[0], auth, *subs))


def sid_to_bytes(sid: str) -> bytes:
    """A SID's string form as its binary one; ValueError for anything that is not one
    (another revision, more than 15 sub-authorities, a number out of range, a digit
    that is not ASCII)."""
    parts = sid.split("-")
    if (
        len(parts) < 3
        or parts[0].upper() != "S"
        or not all(p.isascii() and p.isdigit() for p in parts[1:])
        or int(parts[1]) != REVISION
    ):
        raise ValueError(f"not a SID: {sid[:_SHOWN]!r}")
    subs = [int(p) for p in parts[3:]]
    if len(subs) > MAX_SUB_AUTHORITIES or any(x > _U32 for x in subs) or int(parts[2]) >= 1 << 48:
        raise ValueError(f"not a SID: {sid[:_SHOWN]!r}")
    out = bytes([REVISION, len(subs)]) + int(parts[2]).to_bytes(6, "big")
    return out + b"".join(x.to_bytes(4, "little") for x in subs)


def is_domain_sid(sid: str) -> bool:
    """Whether ``sid`` is a SID with room for one more sub-authority (a RID): a domain's
    SID, whose accounts are ``<sid>-<rid>``."""
    try:
        return len(sid_to_bytes(sid)) <= 8 + 4 * (MAX_SUB_AUTHORITIES - 1)
    except ValueError:
        return False


def sid_assertion(attr: str, sid: str) -> str:
    """``(objectSid=\\01\\05…)``: a binary value is written byte by byte (RFC 4515 §3)."""
    return f"({attr}=" + "".join(f"\\{b:02x}" for b in sid_to_bytes(sid)) + ")"


def _dropped(what: str, e: ValueError) -> None:
    limited.log(("not a SID", what), logging.WARNING,
                "ignoring a %s value from the server: %s", what, e)  # fmt: skip


def _sid(values: list[bytes], what: str = "SID") -> str | None:
    """The first of an attribute's values as a SID's string form; None when there is
    none, or when it is not a SID (dropped, with one rate-limited line)."""
    if not values:
        return None
    try:
        return sid_to_str(values[0])
    except ValueError as e:
        _dropped(what, e)
        return None


def _domain_of(sid: str) -> str:
    return sid.rsplit("-", 1)[0]


def primary_group_sid(user_sid: str, rid: list[bytes]) -> str | None:
    """The SID of a user's primary group: the domain part of ``user_sid`` and the
    ``primaryGroupID`` value ``rid``. None when there is no value, or when it is not a
    RID (not digits, above 2^32-1; dropped with one rate-limited line)."""
    if not rid:
        return None
    value = bytes(rid[0])
    sid = f"{_domain_of(user_sid)}-{int(value)}" if value.isdigit() else ""
    try:
        sid_to_bytes(sid)
    except ValueError:
        _dropped("primaryGroupID", ValueError(f"not a RID: {value[:_SHOWN]!r}"))
        return None
    return sid
