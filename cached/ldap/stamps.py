"""The stamp-trust rule: when a group's stored stamp may stand for its member list
(docs/ARCHITECTURE.md §5). Pure rules over the configuration and the cache; the
refresh that applies them is cached/ldap/refresh.py, the store that records them
cached/ldap/save.py.

* A stamp is a group's (``modifyTimestamp``, CSN/USN) as fetched *with* the member
  values it describes; a group stored incomplete (§6.3 step 4) stores none.
* With a CSN or USN the pair is trusted: both change with every write of the entry.
* ``modifyTimestamp`` alone has one-second resolution, so a change in the same second
  as the fetch would keep it: such a stamp is stored only when it is older than the
  fetch by ``STAMP_MARGIN`` (which also covers the server's clock running behind
  ours), else the group stores no stamp and is fetched whole next time.
* A group whose members were expanded through a non-POSIX group (walked through,
  never stored) stores no stamp: that group's own entry may change without the
  parent's stamp changing.
* A group whose members the server computes (a dynamic group, cached/ldap/computed.py)
  has no stamp, in a stamp search as in a whole read: a member's own entry starting
  or ceasing to match its URL leaves the group's entry, and so its stamps, alone.
* ``cached cache -E`` keeps the stamps (it expires, it does not distrust); a full
  fetch of a group invalidated that way never takes the unchanged-stamp shortcut.
* What no stamp covers — a member's own entry renamed or deleted without referential
  integrity, or its name changed where the name attribute is not in its DN, which
  leave its groups' entries alone (docs/compatibility.md §9.2) —
  is bounded in time: a group not stored whole (members named from their entries)
  within ``refresh_full_interval`` (a day by default) is read whole at its next
  refresh, stamp or not. When it was is kept in the timestamp store's ``read_whole``
  table (wall-clock time, written in the commit that stores the group), so a restart
  does not make every group due; a missing record (never read whole, the store
  recreated) or one in the future (the clock moved back) counts as due. ``cached
  cache`` invalidation keeps it, as it keeps the stamps; a request that an
  invalidation raced records none (``BackendCache.commit``).
"""

from __future__ import annotations

import time

from cached.cache.cache import Stamped
from cached.cache.records import EXPIRED
from cached.dn import normalize_dn
from cached.gentime import TimeForm, generalized_time
from cached.ldap.context import Context
from cached.ldap.entries import GroupEntry
from cached.ldap.schema import SchemaMap

# Seconds a modifyTimestamp-only stamp must lie before the fetch to be stored. Kerberos'
# default allowed clock skew: directories in a realm keep within it. A group changed
# less than this before a fetch is simply fetched whole at its next refresh.
STAMP_MARGIN = 300.0


def epoch(stamp: str) -> float | None:
    """A GeneralizedTime's seconds (``YYYYmmddHHMMSS``, UTC as servers send it): what
    follows the seconds (a fraction, the zone) is not read."""
    return generalized_time(stamp[:14] + "Z", TimeForm.SECONDS)


def trusted_stamp(modstamp: str, usn: str, fetched: float) -> str:
    """The modstamp to store for a group fetched at ``fetched`` (our clock), or ""
    when the stamp cannot vouch for the content (the rule in the module doc)."""
    if not modstamp or "\0" in modstamp + usn:
        return ""  # a NUL would split the stored record's "modstamp\0usn" tail
    if usn:
        return modstamp
    t = epoch(modstamp)
    return modstamp if t is not None and t < fetched - STAMP_MARGIN else ""


def unchanged(g: GroupEntry, stored: Stamped | None) -> bool:
    """Does the stored group (``DomainCache.group_stamps``) still describe ``g``? Same
    stamp, gid and DN."""
    if stored is None:
        return False
    modstamp, usn, gid, dn, _below = stored
    return (
        bool(modstamp)
        and modstamp == g.modstamp
        and usn == g.usn
        and gid == g.gid
        and (dn == g.entry.dn or normalize_dn(dn) == normalize_dn(g.entry.dn))
    )


def stamp_attrs(s: SchemaMap) -> list[str]:
    """What a stamp search asks for: name, gid, modifyTimestamp, CSN/USN. No
    objectClass: every filter asks for the group class already."""
    return [a for a in s.group_attrs(members=False) if a.lower() != "objectclass"]


def due(ctx: Context, names: list[str]) -> set[str]:
    """Those of these groups that must be read whole again (empty: none): not stored
    read whole within ``refresh_full_interval`` (the module doc's last rule), by the
    records the commits keep (``BackendCache.read_whole``)."""
    every = ctx.cfg.refresh_full_interval
    if every <= 0:
        return set()
    now = time.time()
    read = ctx.cache.read_whole_times(names)
    # No record, an old one, or one from the future (our clock moved back: how long
    # ago is unknown).
    return {n for n in names if (t := read.get(n)) is None or not now - every < t <= now}


def distrusted(ctx: Context, names: list[str]) -> set[str]:
    """Those of these groups whose stored stamps a refresh may not go by, though stored
    under the trust rule: on AD, the ones ``cached cache`` invalidated. AD takes a
    deleted member's value out of every group listing it without moving the groups'
    ``uSNChanged`` or ``whenChanged`` (measured on Samba 4, tests/integration/test_ad.py),
    so a stamp shows every change of a group's member list but that one, common on
    AD. Expiry validates by stamps, the deletion seen within ``refresh_full_interval``
    (due); after ``-E`` — an administrator asking for the directory's answer now — the
    groups are read whole, as the store's shortcut already refuses them
    (``save.store_groups``), and ``-E`` hides no change. On LDAP a deletion
    moves the group's stamps (the refint overlay rewrites the group) or leaves its
    member value in place (no referential integrity, docs/compatibility.md §9.2)."""
    if not ctx.schema.ad:
        return set()
    return {n for n, t in ctx.cache.times("group", names).items() if t.data_expire == EXPIRED}


# Seconds a cached user's DN is walked up from without searching the user again
# (LdapProvider's initgroups). The walk looks for groups listing that DN: a user
# moved or renamed since it was stored is in none under its old DN, and was stored in
# no group though in the same ones under both. Valid for hours (entry_cache_timeout),
# the stored DN could be that old; the getpwnam that `id` or a login sends just before
# its initgroups stored it within this bound, so their initgroups costs no user search.
USER_JUST_STORED = 30.0
