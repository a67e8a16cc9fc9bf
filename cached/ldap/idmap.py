"""SID → POSIX id mapping, computed the way SSSD's ``libsss_idmap`` computes it.

A machine that moves from SSSD (``ldap_id_mapping = true``) to cached must keep every
uid and gid, or files on disk change owners. So this module follows SSSD 2.8.2's
``src/lib/idmap/sss_idmap.c`` and ``src/providers/ldap/sdap_idmap.c`` step by step
(docs/compatibility.md §6.5):

* The id space ``[range_min, range_max)`` is cut into ``(range_max - range_min) //
  range_size`` slices (defaults 200000, 2000200000, 200000: 10,000 slices).
* A domain's primary slice is ``murmurhash3(domain_sid, seed 0xdeadbeef) % slices``
  — the hash of the SID *string*, without its NUL — or slice 0 for
  ``ldap_idmap_default_domain_sid``; in autorid-compatible mode the first free slice
  from 0. A slice that overlaps one already taken moves to the next, wrapping.
* ``id = slice_min + (rid - first_rid)``; the primary slice covers RIDs
  ``[0, range_size)``.
* Larger RIDs live in secondary slices named ``"<domain SID>-<first_rid>"`` and placed
  by the same hash. ``ldap_idmap_helper_table_size`` (10) of them are computed when the
  domain is added (RIDs up to 11 × range_size); others when a RID first needs one. A
  secondary slice becomes taken only when first used, as in SSSD, so placements that
  collide depend on the order of first use — SSSD's order-dependence, kept on purpose.
* SIDs of the BUILTIN domain (``S-1-5-32-*``) are never mapped.

Pure logic: no I/O. The numbers are checked against the real ``libsss_idmap.so.0``
(``tests/unit/data/idmap_oracle.json`` was written by ``perf/idmap_oracle.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cached.ldap.sid import is_domain_sid
from cached.memcache.murmur import murmurhash3

__all__ = ["IdMapError", "IdMapper", "Slice"]

#: SSSD's seed for slice hashing (sss_idmap.c, sss_idmap_calculate_range).
SLICE_SEED = 0xDEADBEEF
#: Defaults of ldap_idmap_range_min/_max/_size and ldap_idmap_helper_table_size
#: (SSSD 2.8.2 src/providers/ldap/ldap_opts.c).
RANGE_MIN = 200_000
RANGE_MAX = 2_000_200_000
RANGE_SIZE = 200_000
HELPER_TABLE_SIZE = 10

_UINT32_MAX = 0xFFFFFFFF
_BUILTIN_PREFIX = "S-1-5-32-"


class IdMapError(Exception):
    """A SID cannot be mapped (BUILTIN, unknown domain, bad RID, no free slice)."""


@dataclass(frozen=True)
class Slice:
    """One mapped range: ids ``[min_id, max_id]`` for RIDs from ``first_rid``."""

    range_id: str
    min_id: int
    max_id: int
    first_rid: int

    def id_for(self, rid: int) -> int | None:
        # compute_id() in sss_idmap.c.
        if rid >= self.first_rid and _UINT32_MAX - self.min_id > rid - self.first_rid:
            uid = self.min_id + (rid - self.first_rid)
            if uid <= self.max_id:
                return uid
        return None


@dataclass
class _Domain:
    name: str
    sid: str
    primary: Slice
    helpers: dict[str, Slice] = field(default_factory=dict)
    spawned: list[Slice] = field(default_factory=list)


class IdMapper:
    """SSSD's ID map for the domains of one cached domain (primary + trusted SIDs)."""

    def __init__(
        self,
        range_min: int = RANGE_MIN,
        range_max: int = RANGE_MAX,
        range_size: int = RANGE_SIZE,
        *,
        autorid: bool = False,
        helper_table_size: int = HELPER_TABLE_SIZE,
    ) -> None:
        if range_size <= 0 or range_max <= range_min or range_max - range_min < range_size:
            raise ValueError(
                f"ID-mapping range [{range_min}, {range_max}) does not hold one slice of "
                f"{range_size}"
            )
        self.lower, self.upper, self.size = range_min, range_max, range_size
        self.autorid = autorid
        self.helper_table_size = helper_table_size
        self.slices = (range_max - range_min) // range_size
        # Every range in use, in the order SSSD's list holds them (newest first).
        self._domains: list[_Domain] = []

    # -- slices --------------------------------------------------------------------

    def _taken(self) -> list[Slice]:
        out: list[Slice] = []
        for d in self._domains:
            out.append(d.primary)
            out.extend(d.spawned)
        return out

    def _place(self, range_id: str, first_rid: int, slice_num: int | None = None) -> Slice:
        """sss_idmap_calculate_range(): the slice for ``range_id``, moved past every
        range already taken."""
        taken = self._taken()

        def overlaps(lo: int, hi: int) -> bool:
            return any(
                (lo >= t.min_id and lo <= t.max_id) or (hi >= t.min_id and hi <= t.max_id)
                for t in taken
            )

        if slice_num is not None:
            lo = self.lower + slice_num * self.size
            if overlaps(lo, lo + self.size - 1):
                raise IdMapError(f"slice {slice_num} of {range_id} is already in use")
            return Slice(range_id, lo, lo + self.size - 1, first_rid)
        start = 0 if self.autorid else murmurhash3(range_id.encode(), SLICE_SEED) % self.slices
        n = start
        while True:
            lo = self.lower + n * self.size
            if not overlaps(lo, lo + self.size - 1):
                return Slice(range_id, lo, lo + self.size - 1, first_rid)
            n = (n + 1) % self.slices
            if n == start:
                raise IdMapError(f"no free ID-mapping slice left for {range_id}")

    def add_domain(self, name: str, sid: str, *, default: bool = False) -> Slice:
        """Add a domain by its SID; ``default`` puts it in slice 0, as
        ``ldap_idmap_default_domain_sid`` does. Returns its primary slice. A SID that
        cannot be a domain's (not a SID, or 15 sub-authorities: no room for a RID,
        cached/ldap/sid.py) is refused: none of its accounts could be mapped."""
        if not is_domain_sid(sid):
            raise IdMapError(f"{sid[:80]!r} is not a domain SID")
        for d in self._domains:
            if d.sid.lower() == sid.lower():
                return d.primary
        primary = self._place(sid, 0, 0 if default else None)
        dom = _Domain(name, sid, primary)
        self._domains.insert(0, dom)
        # get_helpers(): placed against the domains present now, not taken yet.
        first_rid = self.size
        for _ in range(self.helper_table_size):
            sec = f"{sid}-{first_rid}"
            dom.helpers[sec] = self._place(sec, first_rid)
            first_rid += self.size
        return primary

    # -- mapping -------------------------------------------------------------------

    def sid_to_id(self, sid: str) -> int:
        """The POSIX id of ``sid`` (sss_idmap_sid_to_unix)."""
        if sid.startswith(_BUILTIN_PREFIX):
            raise IdMapError(f"{sid} is a BUILTIN SID; BUILTIN groups are not mapped")
        matched: tuple[_Domain, int] | None = None
        for d in self._domains:
            ranges = [d.primary, *d.spawned]
            rid = _rid(sid, d.sid)
            if rid is None:
                continue
            for r in ranges:
                uid = r.id_for(rid)
                if uid is not None:
                    return uid
            matched = (d, rid)
        if matched is None:
            raise IdMapError(f"{sid} is in no known domain")
        d, rid = matched
        if self.helper_table_size == 0:
            raise IdMapError(f"{sid}: RID {rid} is outside the domain's slice")
        # add_dom_for_sid(): a slice of the helper table computed at add time, else a new
        # placement.
        first_rid = (rid // self.size) * self.size
        sec = f"{d.sid}-{first_rid}"
        placed = d.helpers.get(sec) or self._place(sec, first_rid)
        if any(t.min_id <= placed.max_id and placed.min_id <= t.max_id for t in self._taken()):
            raise IdMapError(f"{sid}: the slice for RID {rid} collides with one in use")
        d.spawned.append(placed)
        uid = placed.id_for(rid)
        if uid is None:
            raise IdMapError(f"{sid}: RID {rid} does not fit its slice")
        return uid

    def id_to_sid(self, posix_id: int) -> str:
        """The SID that maps to ``posix_id`` (sss_idmap_unix_to_sid): the slices in
        use, then the helper slices computed when the domain was added (a RID above
        range_size whose slice is not taken yet: taking it maps the same way)."""
        for d in self._domains:
            for r in (d.primary, *d.spawned, *d.helpers.values()):
                if r.min_id <= posix_id <= r.max_id:
                    sid = f"{d.sid}-{r.first_rid + posix_id - r.min_id}"
                    if self.sid_to_id(sid) == posix_id:
                        return sid
        raise IdMapError(f"{posix_id} is in no ID-mapping slice")


def _rid(sid: str, dom_sid: str) -> int | None:
    """The RID of ``sid`` when it belongs to ``dom_sid`` (is_sid_from_dom, parse_rid)."""
    n = len(dom_sid)
    if len(sid) <= n or sid[n] != "-" or sid[:n] != dom_sid:
        return None
    tail = sid[n + 1 :]
    if not tail.isdigit():
        raise IdMapError(f"{sid}: the RID is not a number")
    rid = int(tail)
    if rid > _UINT32_MAX:
        raise IdMapError(f"{sid}: the RID is larger than 2^32-1")
    return rid
