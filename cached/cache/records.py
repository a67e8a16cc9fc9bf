"""Record encodings of the split cache. Versioned, canonical, no pickle.

Entry-store records are msgpack arrays whose first element is the format version.
They are *canonical*: multi-valued attributes are sorted before encoding, so "did
this entry change?" is a byte comparison of the new encoding with the stored one
(reference §3.4: order-insensitive, byte-exact comparison — done once, not per
attribute).

Group members are kept as the NUL-joined blob the NSS reply carries
(``m1\\0m2\\0…``): answering a 5,000-member group is then a concatenation, and the
memory-cache writer takes the same blob (reference §1.6, §2.2).

Timestamp records are a fixed little struct plus two short strings, so that
invalidating 10,000 of them is a slice-and-concatenate per record.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import msgpack

from cached.access.rules import AccessState
from cached.auth.offline import Credentials
from cached.model import Netgroup, User

# What LMDB hands back: bytes, or a memoryview with buffers=True.
Data = bytes | memoryview

# Bump when a record layout changes: a store of another format is rebuilt (one cold
# cache), whichever version finds it. 2: a group record may carry an 8th field (the
# users reached only through non-POSIX groups, by depth); a version reading format 1
# would take such a record for damage and could neither serve nor rewrite it (after a
# downgrade). 3: a user record may carry a 9th field (its SSH public keys); a version
# reading format 2 would take such a record for damage.
FORMAT = 3


class RecordError(ValueError):
    """A stored record does not decode: wrong version or damaged."""


def join_members(names: list[str] | tuple[str, ...]) -> bytes:
    """Canonical member blob: sorted, unique, each name NUL-terminated."""
    unique = sorted(set(names))
    if not unique:
        return b""
    return "\0".join(unique).encode("utf-8") + b"\0"


def split_members(blob: bytes) -> list[str]:
    if not blob:
        return []
    return blob[:-1].decode("utf-8").split("\0")


# -- cached credentials -------------------------------------------------------

# The credentials record's own version (its table is new in FORMAT 2 stores, so the
# store's FORMAT stays: a store format change would drop every cached password).
CREDS_VERSION = 1


def encode_creds(c: Credentials) -> bytes:
    data: bytes = msgpack.packb(
        [CREDS_VERSION, c.hash, c.last_online, c.last_login, c.failed, c.last_failed]
    )
    return data


def decode_creds(data: Data) -> Credentials:
    try:
        v = msgpack.unpackb(data)
        if v[0] != CREDS_VERSION or len(v) < 6:
            raise RecordError(f"credentials record of version {v[0]!r}")
        return Credentials(str(v[1]), float(v[2]), float(v[3]), int(v[4]), float(v[5]))
    except (ValueError, TypeError, IndexError, msgpack.UnpackException) as e:
        raise RecordError(f"damaged credentials record: {e}") from None


# -- access decisions -----------------------------------------------------------

# The access record's own version (its table is new, as creds' was: the store's FORMAT
# stays, a store format change would drop every cached decision and password).
ACCESS_VERSION = 1


def encode_access(a: AccessState) -> bytes:
    """Canonical: roles sorted, each role's values sorted, so an unchanged decision
    is the same bytes (it is not written again)."""
    attrs = {role: sorted(bytes(v) for v in a.attrs[role]) for role in sorted(a.attrs)}
    data: bytes = msgpack.packb(
        [ACCESS_VERSION, attrs, a.filter_allow, a.lockout_allow, a.authz_allow]
    )
    return data


def decode_access(data: Data) -> AccessState:
    try:
        v = msgpack.unpackb(data)
        if v[0] != ACCESS_VERSION or len(v) < 5 or not isinstance(v[1], dict):
            raise RecordError(f"access record of version {v[0]!r}")
        attrs: dict[str, tuple[bytes, ...]] = {}
        for k, vals in v[1].items():
            if not isinstance(k, str) or not all(isinstance(x, bytes) for x in vals):
                raise RecordError(f"access record: attribute {k!r} is not text with bytes")
            attrs[k] = tuple(vals)

        def flag(x: object) -> bool | None:
            return None if x is None else bool(x)

        return AccessState(attrs, flag(v[2]), flag(v[3]), flag(v[4]))
    except (ValueError, TypeError, IndexError, msgpack.UnpackException) as e:
        raise RecordError(f"damaged access record: {e}") from None


# -- users ---------------------------------------------------------------------


def encode_user(u: User) -> bytes:
    """The user's record; its SSH keys only when it has some (a 9th field), so a user
    without keys costs what it did before keys were stored."""
    fields = [FORMAT, u.name, u.uid, u.gid, u.gecos, u.home, u.shell, u.dn]
    if u.ssh_keys:
        fields.append(list(u.ssh_keys))
    return msgpack.packb(fields)


def decode_user(data: Data) -> User:
    try:
        fields = msgpack.unpackb(data)
        # By length, not by a starred target: a user without keys (most) builds no
        # list for them.
        if len(fields) == 8:
            v, name, uid, gid, gecos, home, shell, dn = fields
            keys = None
        else:
            v, name, uid, gid, gecos, home, shell, dn, keys = fields
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise RecordError(f"user record does not decode: {e}") from None
    if v != FORMAT:
        raise RecordError(f"user record has format {v}, expected {FORMAT}")
    if keys is None:
        return User(name, uid, gid, gecos, home, shell, dn)
    if not isinstance(keys, list) or not all(isinstance(k, bytes) for k in keys):
        raise RecordError("user record: damaged SSH keys field")
    return User(name, uid, gid, gecos, home, shell, dn, tuple(keys))


# -- groups --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group as stored: direct members as a blob, member groups by name."""

    name: str
    gid: int
    dn: str
    members: bytes  # join_members() of the direct member users
    member_count: int
    member_groups: tuple[str, ...]


def encode_group(g: GroupRecord) -> bytes:
    return _pack_group(g.name, g.gid, g.dn, g.members, g.member_count, list(g.member_groups))


def _pack_group(
    name: str, gid: int, dn: str, blob: bytes, count: int, member_groups: list[str],
    deep: list[bytes] | None = None,
) -> bytes:
    """The group record's layout (decode_group reads it), for both encoders. ``deep``
    (only when not empty, so a record without it is the same bytes as before): the
    member users reached only through non-POSIX member groups, by walk depth
    (deep[0]: first reached one level down, ...), each a join_members blob. They are
    in ``blob`` too (the group's own answer); a parent expanding this group from
    ``hop`` levels above leaves out deep[nesting - hop:] (cache._expand)."""
    if deep:
        return msgpack.packb([FORMAT, name, gid, dn, blob, count, member_groups, deep])
    return msgpack.packb([FORMAT, name, gid, dn, blob, count, member_groups])


def encode_group_of(
    name: str, gid: int, dn: str, members: Collection[str], member_groups: Collection[str],
    deep: Sequence[Collection[str]] = (),
) -> bytes | None:
    """The record of Group(name, gid, dn, members, member_groups): the members
    unique, sorted and joined (join_members), the member groups unique and sorted,
    with no GroupRecord built; None when a member name holds a NUL (it would split in
    the NUL-joined list: the caller leaves such names out). ``members`` a dict or a
    set is unique already and sorted as it is: the set built per group was most of
    join_members for the 2,085 groups of a cold initgroups of bigroupuser."""
    if not member_groups and not deep and isinstance(members, dict):
        # The usual group, member users only, in fewer steps than below (the same
        # bytes): 2.7 -> 2.1 µs a group, timed over a cold initgroups' 2,085 calls.
        unique = sorted(members)
        text = "\0".join(unique) + "\0" if unique else ""
        if text.count("\0") != len(unique):
            return None
        return msgpack.packb([FORMAT, name, gid, dn, text.encode("utf-8"), len(unique), []])
    unique = sorted(members if isinstance(members, dict | set | frozenset) else set(members))
    if unique:
        text = "\0".join(unique)
        # One NUL between each two names: any more is a NUL inside a name.
        if text.count("\0") != len(unique) - 1:
            return None
        blob = text.encode("utf-8") + b"\0"
    else:
        blob = b""
    groups = sorted(set(member_groups))
    if groups and "\0" in "".join(groups):
        return None
    layers = [join_members(list(layer)) for layer in deep]
    while layers and not layers[-1]:
        layers.pop()
    return _pack_group(name, gid, dn, blob, len(unique), groups, layers)


def decode_group(data: Data) -> GroupRecord:
    name, gid, dn, members, count, member_groups, _deep = group_fields(data)
    return GroupRecord(name, gid, dn, members, count, tuple(member_groups))


def group_fields(data: Data) -> tuple[str, int, str, bytes, int, list[str], list[bytes]]:
    """A stored group's fields (name, gid, DN, member blob, member count, member group
    names, walked-only member layers: see _pack_group) with no GroupRecord built: the
    responder reads a user's 2,085 groups for the memory-cache prefill after a cold
    initgroups, and the frozen record's
    __init__ was 1.7 µs of the ~7 µs a group took (timeit). RecordError as
    decode_group."""
    try:
        v, name, gid, dn, members, count, member_groups, *deep = msgpack.unpackb(data)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise RecordError(f"group record does not decode: {e}") from None
    if v != FORMAT:
        raise RecordError(f"group record has format {v}, expected {FORMAT}")
    if len(deep) > 1:
        raise RecordError(f"group record has {7 + len(deep)} fields, at most 8")
    return name, gid, dn, members, count, member_groups, deep[0] if deep else []


def decode_group_ident(data: Data) -> tuple[int, str, list[str]]:
    """A stored group's gid, DN and member group names, nothing else built: the
    refresh validation reads 2,000 of them at once, and a GroupRecord took three
    quarters of the time."""
    try:
        v, _name, gid, dn, _members, _count, member_groups, *deep = msgpack.unpackb(data)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise RecordError(f"group record does not decode: {e}") from None
    if v != FORMAT or not isinstance(gid, int) or not isinstance(dn, str):
        raise RecordError(f"group record has format {v}, expected {FORMAT}")
    if len(deep) > 1:
        raise RecordError(f"group record has {7 + len(deep)} fields, at most 8")
    if not isinstance(member_groups, list):
        raise RecordError("group record: member groups are not a list")
    return gid, dn, member_groups


# -- netgroups -----------------------------------------------------------------


def encode_netgroup(ng: Netgroup) -> bytes:
    """A netgroup: its triples and member netgroups in the server's order (the order
    SETNETGRENT answers them, as SSSD)."""
    triples = [list(t) for t in ng.triples]
    return msgpack.packb([FORMAT, ng.name, ng.dn, triples, list(ng.members)])


def decode_netgroup(data: Data) -> Netgroup:
    try:
        v, name, dn, triples, members = msgpack.unpackb(data)
        if v != FORMAT:
            raise RecordError(f"netgroup record has format {v}, expected {FORMAT}")
        return Netgroup(
            str(name), str(dn), tuple((str(h), str(u), str(d)) for h, u, d in triples),
            tuple(str(m) for m in members),
        )  # fmt: skip
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        if isinstance(e, RecordError):
            raise
        raise RecordError(f"netgroup record does not decode: {e}") from None


# -- initgroups ----------------------------------------------------------------


def encode_initgr(gids: list[int] | tuple[int, ...], groups: list[str] | tuple[str, ...]) -> bytes:
    """A user's transitive groups: gids as packed native u32 (the INITGR reply body
    takes them as they are, §1.6), plus the group names for the memory-cache prefill."""
    packed = array("I", sorted(set(gids))).tobytes()
    return msgpack.packb([FORMAT, packed, sorted(set(groups))])


def decode_initgr(data: Data) -> tuple[bytes, list[str]]:
    try:
        v, packed, groups = msgpack.unpackb(data)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise RecordError(f"initgroups record does not decode: {e}") from None
    if v != FORMAT or len(packed) % 4:
        raise RecordError("initgroups record is damaged")
    return packed, groups


# -- timestamps ----------------------------------------------------------------

# version, lastUpdate, dataExpireTimestamp, initgrExpireTimestamp (reference §3.2);
# then "modifyTimestamp\0entryUSN-or-CSN" as UTF-8.
_TS = struct.Struct("<Bddd")
TS_VERSION = 1
# Reference §3.7: sss_cache writes dataExpireTimestamp=1 and initgrExpireTimestamp=1.
# SSSD also resets the stored modstamp/USN (bug #5596); cached keeps them: the refresh
# after `cached cache -E` validates by them (docs/ARCHITECTURE.md §5, compatibility.md
# §9.2), and only stamps stored under the trust rule of cached/ldap/stamps.py exist.
EXPIRED = 1.0


@dataclass(frozen=True, slots=True)
class Times:
    last_update: float = 0.0
    data_expire: float = 0.0  # 0: never stored -> expired
    initgr_expire: float = 0.0
    modstamp: str = ""
    usn: str = ""


MISSING_TIMES = Times()


def encode_times(t: Times) -> bytes:
    return pack_times(t.last_update, t.data_expire, t.initgr_expire, t.modstamp, t.usn)


def pack_times(
    last_update: float, data_expire: float, initgr_expire: float, modstamp: str, usn: str
) -> bytes:
    """encode_times without a Times built (the writer stores thousands at once, and a
    frozen dataclass costs a setattr per field)."""
    tail = (modstamp + "\0" + usn).encode("utf-8")
    return _TS.pack(TS_VERSION, last_update, data_expire, initgr_expire) + tail


def decode_times(data: Data) -> Times:
    if len(data) < _TS.size + 1 or data[0] != TS_VERSION:
        raise RecordError("timestamp record is damaged")
    _, lu, de, ie = _TS.unpack_from(data)
    try:
        modstamp, usn = bytes(data[_TS.size :]).decode("utf-8").split("\0")
    except ValueError:
        raise RecordError("timestamp record is damaged") from None
    return Times(lu, de, ie, modstamp, usn)


def data_expire(data: Data | None) -> float:
    """A timestamp record's data expiry alone; 0 (expired) for none or a damaged one, as
    times_or_missing reads them. The memory-cache prefill checks 2,085 at once, and a
    Times built for each doubled its time (tests/bench/test_bench_prefill.py)."""
    if data is None or len(data) < _TS.size + 1 or data[0] != TS_VERSION:
        return 0.0
    expire: float = _TS.unpack_from(data)[2]
    return expire


def decode_stamp(data: Data) -> tuple[str, str]:
    """The (modstamp, USN/CSN) of a timestamp record, no Times built (refresh
    validation: a frozen dataclass per record was half the cost)."""
    if len(data) < _TS.size + 1 or data[0] != TS_VERSION:
        raise RecordError("timestamp record is damaged")
    try:
        modstamp, usn = bytes(data[_TS.size :]).decode("utf-8").split("\0")
    except ValueError:
        raise RecordError("timestamp record is damaged") from None
    return modstamp, usn


_INVALIDATED = struct.pack("<dd", EXPIRED, EXPIRED)
_LAST_UPDATE_END = 1 + 8  # version byte + lastUpdate
_INITGR_EXPIRE = _LAST_UPDATE_END + 8  # + dataExpireTimestamp
_EXPIRED_ONE = struct.pack("<d", EXPIRED)


def initgr_invalidated_times(data: Data) -> bytes:
    """A stored user timestamp record with its initgroups expiry set to EXPIRED, the
    rest kept: the initgroups list of a request whose groups an invalidation raced
    (cache/writer.py)."""
    return _expired_from(data, _INITGR_EXPIRE, _EXPIRED_ONE)


def invalidated_times(data: Data) -> bytes:
    """The invalidated form of a stored timestamp record: both expiries set to
    EXPIRED; lastUpdate and the modstamp/USN kept.

    Slices and a concatenation, no unpacking: invalidating 10,000 entries is a loop
    over this (budget: 50 ms; tests/bench/test_bench_cache.py)."""
    return _expired_from(data, _LAST_UPDATE_END, _INVALIDATED)


def _expired_from(data: Data, start: int, expired: bytes) -> bytes:
    """``data``, a stored timestamp record, with the expiries from byte ``start`` on
    replaced by ``expired`` (packed EXPIRED), the rest kept."""
    if len(data) < _TS.size + 1 or data[0] != TS_VERSION:
        raise RecordError("timestamp record is damaged")
    return bytes(data[:start]) + expired + bytes(data[_TS.size :])
