"""Sudo rules in the split cache, as SSSD's sysdb keeps them under ``cn=sudorules``.

The entry store's ``sudo`` table holds each rule's body under its name (``cn``): a
msgpack array ``[SUDO_VERSION, dn, [[attribute, [values...]], ...]]`` in the server's
order (sudo applies ``sudoOption`` values in order), so "did the rule change?" is a
byte comparison and a refresh that finds every rule as it was writes nothing durable
(docs/ARCHITECTURE.md, invariant 2). The timestamp store's ``sudo`` table holds, under
the same key, the rule's :class:`~cached.cache.records.Times` (lastUpdate, expiry
after ``entry_cache_sudo_timeout``, and the server's ``modifyTimestamp`` and CSN/USN
that the smart refresh compares), and its ``meta`` table when the last full and smart
refreshes succeeded and how many times the rules were invalidated. Losing the
timestamp store makes every rule expired and the next refresh a full one; the rules
are still served (invariant 3).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import lmdb
import msgpack

from cached.cache import records as rec
from cached.cache.records import RecordError, Times
from cached.cache.store import Op, Store
from cached.model import SudoRule

TABLE = "sudo"
SUDO_VERSION = 1
# In the timestamp store's meta table.
LAST_FULL = b"sudo_last_full"
LAST_SMART = b"sudo_last_smart"
INVALIDATED = b"invalidations_sudo"
_TIME = struct.Struct(">d")
_COUNT = struct.Struct(">Q")
# The expiry of rules with entry_cache_sudo_timeout = 0 (0.0 would read as never stored).
_NEVER = float(2**53)


def encode_rule(rule: SudoRule) -> bytes:
    data: bytes = msgpack.packb(
        [SUDO_VERSION, rule.dn, [[name, list(values)] for name, values in rule.attrs]]
    )
    return data


def decode_rule(name: str, data: rec.Data) -> SudoRule:
    try:
        v = msgpack.unpackb(data)
        if v[0] != SUDO_VERSION:
            raise RecordError(f"sudo rule record of version {v[0]!r}")
        attrs = tuple((str(a), tuple(str(x) for x in values)) for a, values in v[2])
        return SudoRule(name, str(v[1]), attrs)
    except (ValueError, TypeError, IndexError, msgpack.UnpackException) as e:
        raise RecordError(f"damaged sudo rule record {name!r}: {e}") from None


@dataclass(frozen=True, slots=True)
class SudoState:
    """When the rules were last refreshed whole and by stamps (0: never), and how many
    times they were invalidated (``cached cache -R``)."""

    last_full: float = 0.0
    last_smart: float = 0.0
    invalidations: int = 0


def _float(data: rec.Data | None) -> float:
    return float(_TIME.unpack(data)[0]) if data is not None and len(data) == _TIME.size else 0.0


def _int(data: rec.Data | None) -> int:
    return int(_COUNT.unpack(data)[0]) if data is not None and len(data) == _COUNT.size else 0


def read_state(ts: Store | None) -> SudoState:
    if ts is None or TABLE not in ts.tables:
        return SudoState()
    meta = ts.tables["meta"]
    with ts.read() as txn:
        return SudoState(
            _float(txn.get(LAST_FULL, db=meta)),
            _float(txn.get(LAST_SMART, db=meta)),
            _int(txn.get(INVALIDATED, db=meta)),
        )


def read_rules(entries: Store, txn: lmdb.Transaction) -> list[SudoRule]:
    """Every stored rule, by name; a damaged record is skipped (the next full refresh
    writes it again)."""
    db = entries.tables.get(TABLE)
    if db is None:
        return []
    out = []
    for key, data in txn.cursor(db=db):
        name = bytes(key).decode("utf-8", "replace")
        try:
            out.append(decode_rule(name, data))
        except RecordError:
            continue
    return out


def read_times(ts: Store | None) -> dict[str, Times]:
    if ts is None or TABLE not in ts.tables:
        return {}
    out = {}
    with ts.read() as txn:
        for key, data in txn.cursor(db=ts.tables[TABLE]):
            try:
                out[bytes(key).decode("utf-8", "replace")] = rec.decode_times(data)
            except RecordError:
                continue
    return out


def invalidate(ts: Store, names: Iterable[str] | None) -> int:
    """Expire the timestamp records of ``names`` (None: every rule) and count one more
    invalidation, in one write transaction (a refresh running across it stores what it
    read expired: :func:`refresh_ops`). Returns how many records were expired."""
    db, meta = ts.tables[TABLE], ts.tables["meta"]
    done = 0

    def build(txn: lmdb.Transaction) -> list[Op]:
        nonlocal done
        if names is None:
            keys = [bytes(k) for k, _ in txn.cursor(db=db)]
        else:
            keys = [n.encode("utf-8") for n in names if txn.get(n.encode("utf-8"), db=db)]
        ops: list[Op] = []
        for k in keys:
            data = txn.get(k, db=db)
            if data is not None:
                try:
                    ops.append((TABLE, k, rec.invalidated_times(data)))
                except RecordError:
                    ops.append((TABLE, k, None))
        done = len(ops)
        ops.append(("meta", INVALIDATED, _COUNT.pack(_int(txn.get(INVALIDATED, db=meta)) + 1)))
        return ops

    ts.write_built(build)
    return done


@dataclass(frozen=True, slots=True)
class Stamp:
    """A rule's change stamps as the server gave them."""

    modstamp: str = ""
    usn: str = ""


def entry_ops(
    txn: lmdb.Transaction, entries: Store, rules: Iterable[SudoRule], delete: Iterable[str]
) -> tuple[list[Op], list[str]]:
    """The entry-store writes that store ``rules`` and delete ``delete``: only the rules
    whose bytes differ from the stored ones. Returns them and the names changed."""
    db = entries.tables[TABLE]
    ops: list[Op] = []
    changed = []
    for rule in rules:
        key = rule.name.encode("utf-8")
        body = encode_rule(rule)
        old = txn.get(key, db=db)
        if old is None or bytes(old) != body:
            ops.append((TABLE, key, body))
            changed.append(rule.name)
    for name in delete:
        key = name.encode("utf-8")
        if txn.get(key, db=db) is not None:
            ops.append((TABLE, key, None))
            changed.append(name)
    return ops, changed


def ts_ops(
    txn: lmdb.Transaction,
    ts: Store,
    stamps: Mapping[str, Stamp],
    delete: Iterable[str],
    *,
    now: float,
    lifetime: int,
    since: int,
    full: bool,
) -> list[Op]:
    """The timestamp-store writes of a refresh that read ``stamps`` (rule name ->
    stamps) and found ``delete`` gone: each rule valid for ``lifetime`` seconds (0:
    never expires), or expired when the rules were invalidated since the refresh began
    (``since``: the count then), because what it read may predate the change the
    administrator invalidated for. Records the refresh's time as the last full or
    smart one."""
    meta = ts.tables["meta"]
    invalidated = _int(txn.get(INVALIDATED, db=meta)) != since
    expire = rec.EXPIRED if invalidated else (now + lifetime if lifetime else _NEVER)
    ops: list[Op] = [
        (TABLE, name.encode("utf-8"), rec.pack_times(now, expire, expire, s.modstamp, s.usn))
        for name, s in stamps.items()
    ]
    ops += [(TABLE, name.encode("utf-8"), None) for name in delete]
    if not invalidated:
        ops.append(("meta", LAST_FULL if full else LAST_SMART, _TIME.pack(now)))
    return ops


def invalidations(ts: Store | None) -> int:
    return read_state(ts).invalidations
