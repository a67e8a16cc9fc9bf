"""``ldap_schema = ad``: Active Directory read as an LDAP server, as SSSD's ``ldap``
provider with ``ldap_schema = ad`` reads it (docs/compatibility.md §6.5, §6.6).

What differs from rfc2307bis (the attribute names are the config defaults of
cached/config.py ``AD_DEFAULTS``, SSSD's ``gen_ad2008r2_*_map``):

* **initgroups by tokenGroups** (``ldap_use_tokengroups``, default true here): one base
  search on the user returns the SIDs of every group it is in, transitively, as the DC
  computes them; batched ``(|(objectSid=…)…)`` searches (objectSid is indexed) fetch
  those groups with their members. The primary group, which ``member`` never lists,
  is the domain SID + ``primaryGroupID``. BUILTIN SIDs (S-1-5-32-*) have no POSIX id
  and are skipped, as SSSD skips them; so are groups without a gid.
* **members named from their entries, never by ``(member=<DN>)``**: those filters are
  unindexed on Samba (0.4-1.2 s each, measured), and an RDN value (``CN=Full Name``)
  is no login name. A group with many unknown members is read with one ASQ base
  search over ``member`` (AD's stand-in for the deref control, which it lacks; sent
  only when the root DSE lists it, cached/ldap/client.py); the rest are looked up in
  batches of ``(name=<RDN value>)`` — ``name`` is every AD object's RDN value,
  indexed by Samba and Windows — and matched back by DN.
* **ID mapping** (``ldap_id_mapping = true``): uid and gid computed from objectSid by
  :class:`cached.ldap.idmap.IdMapper`, SSSD's algorithm and defaults, so a machine
  moving from SSSD keeps every owner; the primary gid is the mapped SID of the
  primary group. Only SIDs of the directory's own domain (the objectSid of its naming
  context, or ``ldap_idmap_default_domain_sid``) are mapped: that domain is the first
  and only one added to the mapper, so its slice is the same at every start without
  storing it (SSSD stores slices because its mapper learns trusted domains in the
  order it meets them; cached serves no trusted domains, whose SIDs are skipped).
* **validation before transfer** (cached/ldap/refresh.py, under the trust rule of
  cached/ldap/stamps.py):
  a refresh of an initgroups the cache holds (the next ``id`` after expiry) makes
  the tokenGroups search as a cold one, then asks for the token's
  groups by objectSid with their name, gid/SID and stamps only — no ``member`` value —
  and fetches whole (members named as a cold fetch names them: ASQ, batches, the sweep)
  only the POSIX groups whose stamp differs from the stored one, the new ones, those
  due a whole read (``refresh_full_interval``), and the non-POSIX token groups those
  list (walked through, as SSSD); the rest are touched. Groups that left the token are re-read as on
  the full path (``save.vanished``); one write (``refresh.store_validated``).
  Measured on Samba: adding or removing a ``member`` value and renaming the group
  (``sAMAccountName`` or its ``cn``) each move its ``uSNChanged``; a member's own
  rename does not (AD moves the ``member`` value along without writing the group),
  nor does a member's deletion (AD drops the value), which ``refresh_full_interval``
  bounds as on LDAP. So after ``cached cache -E`` no stamp is gone by
  (``stamps.distrusted``): every group is read whole, and ``-E`` hides no deletion.
  A group lookup of a group the cache holds (``getent group`` once expired) is
  validated as on rfc2307bis (``refresh.refresh_group``): its own
  filter (``(sAMAccountName=…)``, or by gid :meth:`AdHooks.group_by_gid_filter`,
  the SID with ID mapping) and its stored member groups by name, stamps only, read
  through :meth:`AdHooks.restamp` so that they compare with the stored
  DC-qualified ones; a group expanded through a non-POSIX group stores no stamp and
  is fetched whole.
* **Stamps are per DC.** ``uSNChanged`` and ``whenChanged`` are not replicated: each DC
  counts its own, so a stamp read from one DC says nothing about another's copy (nor
  about the same DC restored from a backup, which may hand out the same USNs again
  and so gets a new ``invocationId``, [MS-ADTS] 3.1.1.1.9). A group's ``uSNChanged`` is
  kept as ``<usn>@<invocationId>`` of the DC it was read from (the root DSE's
  ``dsServiceName`` names the DC's NTDS Settings object, read once per connection):
  the refresh's comparison and the store's shortcut (a group whose stamp equals the
  stored one is only touched, ``save.store_groups``) both compare it whole,
  so a stamp from another DC never matches. A group read on a connection other than
  the one identified (a reconnect or failover since the request began), or when the
  identity cannot be read (a bind DN denied reading the NTDS Settings object, or a
  value that is not one GUID: :func:`invocation_id`), has no stamp: it is fetched
  whole at its next refresh.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from cached.cache.writer import BackendCache
from cached.config import DomainConfig
from cached.counters import COUNTERS, Counters
from cached.dn import rdn_avas
from cached.ldap import ad_initgroups
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.context import Context
from cached.ldap.entries import GroupEntry, Hooks, Known
from cached.ldap.exchange import Entry, LdapError
from cached.ldap.idmap import IdMapError, IdMapper
from cached.ldap.provider import LdapProvider, Outcome, Result
from cached.ldap.schema import SchemaMap, escape, first
from cached.ldap.sid import _sid, is_domain_sid, primary_group_sid, sid_assertion
from cached.ldap.sweep import SweepTunables
from cached.ldap.walk import Lookup, Walk

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "S-1-5-32-"


def invocation_id(values: list[bytes]) -> str:
    """A DC's ``invocationId`` as read from its NTDS Settings object: one value, a GUID
    (16 bytes, [MS-DTYP] 2.3.4.2, first three fields little-endian) as text; "" for
    anything else — no value (not readable by the bind DN), several, another size, or
    the nil GUID, which no DC has — so that no stamp is kept (the module doc, "Stamps
    are per DC"): a stamp qualified with a made-up identity could match another DC's."""
    if len(values) != 1 or len(values[0]) != 16 or not any(values[0]):
        return ""
    return str(uuid.UUID(bytes_le=bytes(values[0])))


# groupType's security bit ([MS-ADTS] 2.2.12, GROUP_TYPE_SECURITY_ENABLED; the value
# is a signed 32-bit INTEGER in text, so a security group's is negative).
GROUP_TYPE_SECURITY = 0x80000000


def security_group(values: list[bytes]) -> bool:
    """Whether an AD group is a security group: a distribution group (a mail list) is
    no POSIX group, its gidNumber or SID notwithstanding, as in SSSD 2.8.2
    (sdap_save_group: "Only security groups from AD are considered for POSIX groups"):
    served, `getent group` would list a mail list and, with ldap_use_tokengroups =
    false, `id` would grant its gid. Without one readable value, a
    security group, as SSSD keeps a group POSIX when it cannot read the attribute."""
    if len(values) != 1:
        return True
    v = bytes(values[0])
    digits = v[1:] if v[:1] == b"-" else v
    if not digits.isdigit() or len(digits) > 11:
        return True
    return bool(int(v) & GROUP_TYPE_SECURITY)


class AdHooks(Hooks):
    """Active Directory read as an LDAP server: ids mapped from SIDs, filters by SID,
    member look-ups by ``name``, groups' stamps qualified by the DC that sent them
    (the module doc)."""

    # Samba evaluates an OR of equality assertions in time growing faster than its
    # length. Naming bigroupuser's 4,998 member users (Samba's CPU seconds, medians of
    # 3 in two runs, perf/results/2026-11-30-adbig): (name=…) ORs of 250: 1.3 s, of
    # 1,000: 2.2-2.7 s (an OR of 5,000 cn values fails: operationsError);
    # (distinguishedName=…) ORs of 250: 3.2-3.7 s. 250 keeps the per-name cost at its
    # floor with few round trips.
    member_batch = 250

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        cfg = ctx.cfg
        self.idmap: IdMapper | None = None
        self.domain_sid = ""
        if cfg.ldap_id_mapping:
            self.idmap = IdMapper(
                cfg.ldap_idmap_range_min,
                cfg.ldap_idmap_range_max,
                cfg.ldap_idmap_range_size,
                autorid=cfg.ldap_idmap_autorid_compat,
                helper_table_size=cfg.ldap_idmap_helper_table_size,
            )
            if cfg.ldap_idmap_default_domain_sid:
                self.domain_sid = cfg.ldap_idmap_default_domain_sid
                self.idmap.add_domain(cfg.name, self.domain_sid, default=True)
        # The DC that answers (its invocationId, read from the root DSE's
        # dsServiceName) and the connection it was read on: a group's uSNChanged is
        # stored qualified with it, and read on any other connection a group has no
        # stamp (the module doc, "Stamps are per DC").
        self.dc_id = ""
        self._dc_conn: object | None = None
        self._dc_tried: object | None = None  # the last connection identified, or tried

    def prepare(self) -> None:
        s = self.ctx.schema
        if self.idmap is not None and not self.domain_sid:
            self.domain_sid = self._read_domain_sid(s)
            self.idmap.add_domain(self.ctx.cfg.name, self.domain_sid)
        if self.ctx.client.conn is not self._dc_tried:
            self._identify_dc()

    def _identify_dc(self) -> None:
        """Read the invocationId of the DC this connection reached (two base searches,
        once per connection): the root DSE's ``dsServiceName`` names the DC's NTDS
        Settings object, which holds it. A DC restored from a backup gets a new one,
        and may hand out the same USNs again ([MS-ADTS] 3.1.1.1.9, "USN rollback").
        Unreadable: no stamp is kept from this connection (every group fetched whole)."""
        conn = self._dc_tried = self.ctx.client.conn
        self.dc_id, self._dc_conn = "", None
        try:
            root = self.ctx.client.search("", "(objectClass=*)", ["dsServiceName"], scope="base")
            dsa = first(root[0].get("dsServiceName")) if root else ""
            # No dsServiceName (not a DC): nothing to read the invocationId from.
            got = (
                self.ctx.client.search(dsa, "(objectClass=*)", ["invocationId"], scope="base")
                if dsa
                else []
            )
            ident = invocation_id(got[0].get("invocationId") if got else [])
        except LdapOffline:
            raise
        except LdapError as e:
            ident, why = "", str(e)
        else:
            why = "no dsServiceName in the root DSE" if not dsa else "no invocationId as one GUID"
        if not ident:
            log.info("domain %s: the DC's invocationId is unreadable (%s); group stamps "
                     "are not kept, every refresh reads whole", self.ctx.cfg.name, why)  # fmt: skip
            return
        # A failover during these searches: the identity may be another DC's.
        if self.ctx.client.conn is conn:
            self.dc_id, self._dc_conn = ident, conn

    # What cached/ldap/ad_initgroups.py reads SIDs with (its Sids).
    builtin_prefix = BUILTIN_PREFIX

    @staticmethod
    def sid(values: list[bytes]) -> str | None:
        return _sid(values)

    @staticmethod
    def assertion(attr: str, sid: str) -> str:
        return sid_assertion(attr, sid)

    def restamp(self, g: GroupEntry) -> None:
        # Stamps are per DC (module doc): uSNChanged qualified with the DC that sent
        # it, or no stamp at all when the connection is not the one identified (a
        # reconnect since this request began: the DC may be another).
        if g.modstamp or g.usn:
            if g.usn and self.dc_id and self.ctx.client.conn is self._dc_conn:
                g.usn = f"{g.usn}@{self.dc_id}"
            else:
                g.modstamp = g.usn = ""

    def _read_domain_sid(self, s: SchemaMap) -> str:
        """The objectSid of the naming context: the domain whose SIDs are mapped."""
        info = self.ctx.client.info
        root = (info.default_naming_context if info else "") or s.user_bases[0].dn
        entries = self.ctx.client.search(root, "(objectClass=*)", [s.user_sid], scope="base")
        sid = _sid(entries[0].get(s.user_sid)) if entries else None
        if sid is None or not is_domain_sid(sid):
            raise LdapError(
                f"domain {self.ctx.cfg.name}: {root!r} has no {s.user_sid} to map ids from; "
                "set ldap_idmap_default_domain_sid"
            )
        return sid

    def _map(self, sid: str | None) -> int | None:
        if sid is None or self.idmap is None or sid.startswith(BUILTIN_PREFIX):
            return None
        try:
            return self.idmap.sid_to_id(sid)
        except IdMapError as e:
            log.debug("%s", e)
            return None

    def user_ids(self, e: Entry) -> tuple[int | None, int | None]:
        if self.idmap is None:
            return super().user_ids(e)
        s = self.ctx.schema
        sid = _sid(e.get(s.user_sid))
        group_sid = None if sid is None else primary_group_sid(sid, e.get(s.user_primary_group))
        if sid is None or group_sid is None:
            return None, None
        # SSSD: with ID mapping the primary gid is the mapped SID of the primary group.
        return self._map(sid), self._map(group_sid)

    def group_gid(self, e: Entry) -> int | None:
        if not security_group(e.get(self.ctx.schema.group_type)):
            return None  # walked through by nesting, never answered (as SSSD)
        if self.idmap is None:
            return super().group_gid(e)
        return self._map(_sid(e.get(self.ctx.schema.group_sid)))

    def user_by_uid_filter(self, uid: int) -> str:
        if self.idmap is None:
            return super().user_by_uid_filter(uid)
        s = self.ctx.schema
        return f"(&(objectClass={s.user_oc}){self._id_assertion(s.user_sid, uid)})"

    def group_by_gid_filter(self, gid: int) -> str:
        if self.idmap is None:
            return super().group_by_gid_filter(gid)
        s = self.ctx.schema
        return s.group_filter(self._id_assertion(s.group_sid, gid))

    def _id_assertion(self, attr: str, posix_id: int) -> str:
        assert self.idmap is not None
        try:
            return sid_assertion(attr, self.idmap.id_to_sid(posix_id))
        except IdMapError:
            return "(!(objectClass=*))"  # no SID maps to it: nothing matches

    @staticmethod
    def member_assertion(dn: str) -> str | None:
        # ``name`` holds the RDN value of every AD object, whatever its RDN attribute,
        # and is indexed (Samba's @INDEXLIST, Windows' schema). A hint to batch by:
        # entries are matched back by DN. Measured 2.5-2.8x less DC time than
        # distinguishedName, which Samba resolves slowly in an OR (member_batch).
        avas = rdn_avas(dn)
        if not avas:
            return None
        return f"(name={escape(avas[0][1])})"


class AdProvider(LdapProvider):
    """The LDAP provider with AD's hooks, tokenGroups for initgroups and ASQ for a
    big group's members (cached/ldap/ad_initgroups.py)."""

    def __init__(
        self,
        cfg: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        counters: Counters = COUNTERS,
        tunables: SweepTunables | None = None,
        hooks: Callable[[Context], AdHooks] = AdHooks,
    ) -> None:
        # ASQ over large01 cost Samba 0.49-0.57 s of CPU, its sweep 0.68-0.81 s: a big
        # group's members are named by ASQ before any sweep.
        tunables = tunables or SweepTunables(before_deref=False)
        super().__init__(cfg, client, cache, counters, tunables, hooks=hooks)
        self.ad: AdHooks = self.hooks  # type: ignore[assignment]

    @property
    def dc_id(self) -> str:
        return self.ad.dc_id

    @dc_id.setter
    def dc_id(self, ident: str) -> None:
        self.ad.dc_id = ident

    @property
    def member_batch(self) -> int:
        return self.ad.member_batch

    def _name_big_group(self, w: Walk, g: GroupEntry, lookup: Lookup, known: Known) -> None:
        ad_initgroups.by_asq(w, g, lookup, known)

    def _initgroups(self, w: Walk, name: str) -> Result:
        if not self.cfg.ldap_use_tokengroups:
            return super()._initgroups(w, name)
        self._prepare()
        user, entries = self._initgroups_user(w, name)
        if user is None:
            return Result(Outcome.NOT_FOUND)
        if not ad_initgroups.initgroups(w, self.ad, user, entries, self.on_groups_stored):
            with self.cache.write() as batch:
                self.cache.delete_user(batch, name)
            return Result(Outcome.NOT_FOUND)
        return Result(Outcome.FOUND)
