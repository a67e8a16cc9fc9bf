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
* **validation before transfer** (cached/ldap/validate.py, whose trust rule applies):
  a refresh of an initgroups the cache holds (the next ``id`` after expiry) makes
  the tokenGroups search as a cold one, then asks for the token's
  groups by objectSid with their name, gid/SID and stamps only — no ``member`` value —
  and fetches whole (members named as a cold fetch names them: ASQ, batches, the sweep)
  only the POSIX groups whose stamp differs from the stored one, the new ones, those
  due a whole read (``refresh_full_interval``), and the non-POSIX token groups those
  list (item 8); the rest are touched. Groups that left the token are re-read as on
  the full path (``LdapProvider._vanished``); one write (``validate.store_validated``).
  Measured on Samba: adding or removing a ``member`` value and renaming the group
  (``sAMAccountName`` or its ``cn``) each move its ``uSNChanged``; a member's own
  rename does not (AD moves the ``member`` value along without writing the group),
  nor does a member's deletion (AD drops the value), which ``refresh_full_interval``
  bounds as on LDAP. So after ``cached cache -E`` no stamp is gone by
  (``validate.distrusted``): every group is read whole, and ``-E`` hides no deletion.
  A group lookup of a group the cache holds (``getent group`` once expired) is
  validated as on rfc2307bis (``validate.refresh_group``): its own
  filter (``(sAMAccountName=…)``, or by gid :meth:`AdProvider._group_by_gid_filter`,
  the SID with ID mapping) and its stored member groups by name, stamps only, read
  through :meth:`AdProvider._group_entry` so that they compare with the stored
  DC-qualified ones; a group expanded through a non-POSIX group stores no stamp and
  is fetched whole.
* **Stamps are per DC.** ``uSNChanged`` and ``whenChanged`` are not replicated: each DC
  counts its own, so a stamp read from one DC says nothing about another's copy (nor
  about the same DC restored from a backup, which may hand out the same USNs again
  and so gets a new ``invocationId``, [MS-ADTS] 3.1.1.1.9). A group's ``uSNChanged`` is
  kept as ``<usn>@<invocationId>`` of the DC it was read from (the root DSE's
  ``dsServiceName`` names the DC's NTDS Settings object, read once per connection):
  the refresh's comparison and the store's shortcut (a group whose stamp equals the
  stored one is only touched, ``LdapProvider._store_groups``) both compare it whole,
  so a stamp from another DC never matches. A group read on a connection other than
  the one identified (a reconnect or failover since the request began), or when the
  identity cannot be read (a bind DN denied reading the NTDS Settings object, or a
  value that is not one GUID: :func:`invocation_id`), has no stamp: it is fetched
  whole at its next refresh.
"""

from __future__ import annotations

import logging
import uuid

from cached.cache.writer import BackendCache
from cached.config import DomainConfig
from cached.counters import COUNTERS, NESTED_RESOLVE, VALIDATE, VALIDATE_FETCHED, Counters
from cached.dn import normalize_dn, rdn_avas
from cached.ldap import validate
from cached.ldap.client import (
    ASQ_OID,
    Entry,
    LdapClient,
    LdapError,
    LdapOffline,
)
from cached.ldap.idmap import IdMapError, IdMapper
from cached.ldap.provider import (
    WALK,
    LdapProvider,
    Member,
    Outcome,
    Result,
    _GroupEntry,
    _Job,
)
from cached.ldap.schema import SchemaMap, escape, first
from cached.ldap.sid import _sid, is_domain_sid, primary_group_sid, sid_assertion
from cached.model import User

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
    (sdap_save_group: "Only security groups from AD are considered for POSIX groups");
    found by a differential fuzz against it, where `getent group` served one and, with
    ldap_use_tokengroups = false, `id` granted its gid. Without one readable value, a
    security group, as SSSD keeps a group POSIX when it cannot read the attribute."""
    if len(values) != 1:
        return True
    v = bytes(values[0])
    digits = v[1:] if v[:1] == b"-" else v
    if not digits.isdigit() or len(digits) > 11:
        return True
    return bool(int(v) & GROUP_TYPE_SECURITY)


class AdProvider(LdapProvider):
    # Samba evaluates an OR of equality assertions in time growing faster than its
    # length. Naming bigroupuser's 4,998 member users (Samba's CPU seconds, medians of
    # 3 in two runs, perf/results/2026-11-30-adbig): (name=…) ORs of 250: 1.3 s, of
    # 1,000: 2.2-2.7 s (an OR of 5,000 cn values fails: operationsError);
    # (distinguishedName=…) ORs of 250: 3.2-3.7 s. 250 keeps the per-name cost at its
    # floor with few round trips.
    member_batch = 250
    # ASQ over large01 cost Samba 0.49-0.57 s of CPU, its sweep 0.68-0.81 s.
    sweep_before_deref = False
    # Groups per (|(objectSid=…)…) search, whole or stamps only: the same superlinear
    # OR. bigroupuser's 2,086 token groups on Samba (perf/adrefresh.py's DC, CPU
    # seconds of the DC, two runs each): stamps only in ORs of 1,000 0.69-0.77 s, of
    # 250 0.37-0.43, of 100 0.34-0.37; whole (cold), of 1,000 2.8-4.2 s, of 250 2.0-2.5.
    sid_batch = 250

    def __init__(
        self,
        cfg: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        counters: Counters = COUNTERS,
    ) -> None:
        super().__init__(cfg, client, cache, counters)
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

    def _prepare(self) -> SchemaMap:
        s = super()._prepare()
        if self.idmap is not None and not self.domain_sid:
            self.domain_sid = self._read_domain_sid(s)
            self.idmap.add_domain(self.cfg.name, self.domain_sid)
        if self.client.conn is not self._dc_tried:
            self._identify_dc()
        return s

    def _identify_dc(self) -> None:
        """Read the invocationId of the DC this connection reached (two base searches,
        once per connection): the root DSE's ``dsServiceName`` names the DC's NTDS
        Settings object, which holds it. A DC restored from a backup gets a new one,
        and may hand out the same USNs again ([MS-ADTS] 3.1.1.1.9, "USN rollback").
        Unreadable: no stamp is kept from this connection (every group fetched whole)."""
        conn = self._dc_tried = self.client.conn
        self.dc_id, self._dc_conn = "", None
        try:
            root = self.client.search("", "(objectClass=*)", ["dsServiceName"], scope="base")
            dsa = first(root[0].get("dsServiceName")) if root else ""
            # No dsServiceName (not a DC): nothing to read the invocationId from.
            got = (
                self.client.search(dsa, "(objectClass=*)", ["invocationId"], scope="base")
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
                     "are not kept, every refresh reads whole", self.cfg.name, why)  # fmt: skip
            return
        # A failover during these searches: the identity may be another DC's.
        if self.client.conn is conn:
            self.dc_id, self._dc_conn = ident, conn

    def _group_entry(self, e: Entry, want: str | None = None) -> _GroupEntry | None:
        # Stamps are per DC (module doc): uSNChanged qualified with the DC that sent
        # it, or no stamp at all when the connection is not the one identified (a
        # reconnect since this request began: the DC may be another).
        g = super()._group_entry(e, want)
        if g is not None and (g.modstamp or g.usn):
            if g.usn and self.dc_id and self.client.conn is self._dc_conn:
                g.usn = f"{g.usn}@{self.dc_id}"
            else:
                g.modstamp = g.usn = ""
        return g

    def _read_domain_sid(self, s: SchemaMap) -> str:
        """The objectSid of the naming context: the domain whose SIDs are mapped."""
        info = self.client.info
        root = (info.default_naming_context if info else "") or s.user_bases[0].dn
        entries = self.client.search(root, "(objectClass=*)", [s.user_sid], scope="base")
        sid = _sid(entries[0].get(s.user_sid)) if entries else None
        if sid is None or not is_domain_sid(sid):
            raise LdapError(
                f"domain {self.cfg.name}: {root!r} has no {s.user_sid} to map ids from; "
                "set ldap_idmap_default_domain_sid"
            )
        return sid

    # -- ids -------------------------------------------------------------------------

    def _map(self, sid: str | None) -> int | None:
        if sid is None or self.idmap is None or sid.startswith(BUILTIN_PREFIX):
            return None
        try:
            return self.idmap.sid_to_id(sid)
        except IdMapError as e:
            log.debug("%s", e)
            return None

    def _user_ids(self, e: Entry) -> tuple[int | None, int | None]:
        if self.idmap is None:
            return super()._user_ids(e)
        s = self.schema
        sid = _sid(e.get(s.user_sid))
        group_sid = None if sid is None else primary_group_sid(sid, e.get(s.user_primary_group))
        if sid is None or group_sid is None:
            return None, None
        # SSSD: with ID mapping the primary gid is the mapped SID of the primary group.
        return self._map(sid), self._map(group_sid)

    def _group_gid(self, e: Entry) -> int | None:
        if not security_group(e.get(self.schema.group_type)):
            return None  # walked through by nesting, never answered (item 8)
        if self.idmap is None:
            return super()._group_gid(e)
        return self._map(_sid(e.get(self.schema.group_sid)))

    def _user_by_uid_filter(self, uid: int) -> str:
        if self.idmap is None:
            return super()._user_by_uid_filter(uid)
        s = self.schema
        return f"(&(objectClass={s.user_oc}){self._id_assertion(s.user_sid, uid)})"

    def _group_by_gid_filter(self, gid: int) -> str:
        if self.idmap is None:
            return super()._group_by_gid_filter(gid)
        s = self.schema
        return s.group_filter(self._id_assertion(s.group_sid, gid))

    def _id_assertion(self, attr: str, posix_id: int) -> str:
        assert self.idmap is not None
        try:
            return sid_assertion(attr, self.idmap.id_to_sid(posix_id))
        except IdMapError:
            return "(!(objectClass=*))"  # no SID maps to it: nothing matches

    @staticmethod
    def _member_assertion(dn: str) -> str | None:
        # ``name`` holds the RDN value of every AD object, whatever its RDN attribute,
        # and is indexed (Samba's @INDEXLIST, Windows' schema). A hint to batch by:
        # entries are matched back by DN. Measured 2.5-2.8x less DC time than
        # distinguishedName, which Samba resolves slowly in an OR (class comment).
        avas = rdn_avas(dn)
        if not avas:
            return None
        return f"(name={escape(avas[0][1])})"

    # -- group members ---------------------------------------------------------------

    def _asq_usable(self, unknown: int) -> bool:
        """ASQ for a group with ``unknown`` members to name: when the root DSE lists
        it (never sent critical otherwise), past ``ldap_deref_threshold`` (0 turns it
        off, as SSSD), and no base has a filter (an entry ASQ returns could not be
        checked against it, as on the deref path)."""
        s = self.schema
        info = self.client.info
        threshold = self.cfg.ldap_deref_threshold
        return (
            0 < threshold < unknown
            and info is not None
            and ASQ_OID in info.controls
            and not any(b.filter for b in s.user_bases + s.group_bases)
        )

    def _by_deref(
        self,
        g: _GroupEntry,
        lookup: dict[str, tuple[str, int]],
        known: dict[str, Member],
    ) -> None:
        """AD has no deref control but ASQ: one base search on a big group returns the
        entries its ``member`` values name (SSSD uses it the same way, past
        ``ldap_deref_threshold``; measured in :meth:`_asq_big_groups`). Member groups
        to expand are left to the look-ups, which fetch their members too, and so are
        the members ASQ does not return: it reads the group's values again, later than
        the search that found it, so one replaced in between is missing from its answer
        yet named a user when the group was read (taking it for a dangling DN stored the
        old and new versions intersected; a dangling one costs a look-up, rare)."""
        s = self.schema
        if not self._asq_usable(len(lookup)):
            return
        entries = self.client.search(
            g.entry.dn, "(objectClass=*)", s.deref_attrs, scope="base", asq=s.group_member
        )
        for e in entries:
            k = normalize_dn(e.dn)
            if k not in lookup:
                continue
            # ASQ ignores the search bases: each entry is checked against them here.
            m = self._classify(e, k, True)
            if isinstance(m, _GroupEntry) and not self._in_bases(k, s.group_bases):
                known[k] = None
            elif isinstance(m, _GroupEntry):
                if lookup[k][1] >= 0:
                    continue  # to be fetched with its members
                known[k] = ("group" if m.posix else WALK, m.name)
            else:
                known[k] = m
            del lookup[k]

    def _asq_big_groups(
        self, found: dict[str, _GroupEntry], budget: dict[str, int], known: dict[str, Member]
    ) -> None:
        """Name the members of the groups with the most unknown members by ASQ, one
        base search each, biggest first: a group qualifies while at least
        ``member_batch`` of its members (one batched search's worth) and half of them
        are still unknown, since ASQ returns every member, known or not. Measured on
        bigroupuser (Samba's CPU seconds, medians of 3 in two runs): ASQ over large01
        named its 5,000 members in 0.49-0.57 s, against 1.3 s for 20 batches of
        (name=…) and 0.68-0.81 s for a paged search of every user of the domain (whose
        cost grows with the directory: LdapProvider._sweep_users bounds it)."""
        lookup = self._unknown(found, budget, known)
        if len(lookup) < self.member_batch:
            return
        unknown = {k: [mk for mk in g.member_keys if mk in lookup] for k, g in found.items()}
        for k in sorted(unknown, key=lambda k: len(unknown[k]), reverse=True):
            g = found[k]
            mine = {mk: lookup[mk] for mk in unknown[k] if mk in lookup}
            if len(mine) < self.member_batch:
                break  # sorted: no later group qualifies either
            if 2 * len(mine) < len(g.member_keys):
                continue
            if not self._asq_usable(len(mine)):
                return
            self._by_deref(g, mine, known)
            for mk in unknown[k]:
                if mk in known:
                    lookup.pop(mk, None)

    # -- initgroups ------------------------------------------------------------------

    def _initgroups(self, name: str) -> Result:
        if not self.cfg.ldap_use_tokengroups:
            return super()._initgroups(name)
        s = self._prepare()
        user, entries = self._initgroups_user(name)
        if user is None:
            return Result(Outcome.NOT_FOUND)

        # One base search: every group the user is in, transitively, plus the primary
        # group by RID (AD's member attribute never lists it).
        tok = self.client.search(
            user.dn, "(objectClass=*)", ["tokenGroups", s.user_sid, s.user_primary_group],
            scope="base",
        )  # fmt: skip
        if not tok:
            with self.cache.write() as batch:
                self.cache.delete_user(batch, name)
            return Result(Outcome.NOT_FOUND)
        sids = {sid for v in tok[0].get("tokenGroups") if (sid := _sid([v])) is not None}
        user_sid = _sid(tok[0].get(s.user_sid))
        if user_sid is not None:
            primary = primary_group_sid(user_sid, tok[0].get(s.user_primary_group))
            if primary is not None:
                sids.add(primary)
        # BUILTIN groups (S-1-5-32-545 Users, ...) have no POSIX id: skipped, as SSSD.
        wanted = sorted(sid for sid in sids if not sid.startswith(BUILTIN_PREFIX))

        stored = self.cache.initgroups(user.name).value
        if not self.cfg.ignore_group_members and stored is not None and stored.fetched:
            # A refresh: stamps first, whole entries only for what changed (validate.py;
            # the AD rule in the module doc).
            self._refresh_token_groups(user, entries, wanted)
            return Result(Outcome.FOUND)
        known: dict[str, Member] = {}
        with self.counters.timer(NESTED_RESOLVE):
            found = self._token_groups(wanted)
            mine = {k for k, g in found.items() if g.posix}
            self._name_members(found, known)
        return self._store_initgroups(name, user, entries, found, known, mine)

    def _token_groups(self, sids: list[str]) -> dict[str, _GroupEntry]:
        """The groups of these SIDs, whole (by DN key), in batched ``(objectSid=…)``
        searches: every one, POSIX or not, since a POSIX group's members are expanded
        through the non-POSIX groups between (item 8)."""
        s = self.schema
        found: dict[str, _GroupEntry] = {}
        attrs = s.group_attrs(members=not self.cfg.ignore_group_members)
        n = self.sid_batch
        for i in range(0, len(sids), n):
            part = "".join(sid_assertion(s.group_sid, sid) for sid in sids[i : i + n])
            filt = f"(&(objectClass={s.group_oc})(|{part}))"
            for e in self._search(s.group_bases, filt, attrs):
                g = self._group_entry(e, WALK)
                if g is not None:
                    found.setdefault(normalize_dn(e.dn), g)
        return found

    def _name_members(self, found: dict[str, _GroupEntry], known: dict[str, Member]) -> None:
        """Name every member of the fetched token groups (budget 0: member groups
        outside the token are named, not fetched; their parents are stored expired,
        §6.3 step 4): the big groups' by ASQ, the rest in batches (the closure sweeps
        the user bases first when thousands remain)."""
        if self.cfg.ignore_group_members:
            return
        budget = {k: 0 for k in found}
        self._asq_big_groups(found, budget, known)
        self._closure(found, budget, known, [])

    def _token_stamps(self, sids: list[str]) -> dict[str, _GroupEntry]:
        """The groups of these SIDs with their stamps only (validate.stamp_attrs: no
        member value), by DN key, POSIX or not; the batches unpaged, so that they go
        out together (answers of one small entry per SID; a size limit cuts them as
        it cuts paged ones, and the split handles it). Windows caps an unpaged answer
        at MaxPageSize (1,000 by default); Samba 4.17 caps none by count (measured:
        all 1,609 users of an unpaged search with MaxPageSize=5 set and the DC
        restarted, and with a request sizeLimit of 5), only a reply past 256 MiB, so
        the split is tested on slapd's sizelimit (tests/integration/test_refresh.py,
        test_exactness.py), not here."""
        s = self.schema
        attrs = validate.stamp_attrs(self)
        items = [("g", sid_assertion(s.group_sid, sid)) for sid in sids]
        n = self.sid_batch
        jobs: list[_Job] = [
            (s.group_bases, items[i : i + n], attrs, None) for i in range(0, len(items), n)
        ]
        out: dict[str, _GroupEntry] = {}
        for entries in self._split_search_many(jobs, self._round_filter, paged=False):
            for e in entries:
                g = self._group_entry(e, WALK)
                if g is not None:
                    out.setdefault(normalize_dn(e.dn), g)
        return out

    def _refresh_token_groups(self, user: User, entries: list[Entry], sids: list[str]) -> None:
        """initgroups of ``user`` whose groups the cache holds, validated before
        transfer (validate.py, the AD rule in the module doc): the token's groups
        with their stamps only; the POSIX ones whose stamp differs from the stored one
        (or that are new, or due a whole read) fetched whole by SID with the
        non-POSIX token groups they list, and their members named as the cold path
        names them; the rest touched. Stored in one write (validate.store_validated)."""
        s = self.schema
        with self.counters.timer(NESTED_RESOLVE):
            stamps = self._token_stamps(sids)
        posix = {k: g for k, g in stamps.items() if g.posix}
        names = [g.name for g in posix.values()]
        stored = self.cache.group_stamps(names)
        # One read of the timestamp store each for all: due a whole read, or `-E`
        # invalidated (validate.distrusted: AD's stamps miss a deleted member).
        due = validate.due(self, names)
        self._from_entries = bool(due)  # a whole read names members from their entries
        late = due | validate.distrusted(self, names)
        stale = {
            k
            for k, g in posix.items()
            if not validate.unchanged(g, stored.get(g.name)) or g.name in late
        }
        stale |= validate.stale_below(self, posix, stale, stored)
        self.counters.add(VALIDATE, 1, 0.0, len(posix))
        full: dict[str, _GroupEntry] = {}
        known: dict[str, Member] = {}
        if stale:
            with self.counters.timer(NESTED_RESOLVE):
                want = [stamps[k] for k in sorted(stale)]
                while want:
                    got = self._token_groups(
                        [sid for g in want if (sid := _sid(g.entry.get(s.group_sid)))]
                    )
                    full.update((k, g) for k, g in got.items() if k not in full)
                    # A token group a fetched group lists, fetched whole too, as the cold
                    # path fetches every token group: a non-POSIX one's members count as
                    # the lister's (item 8), and a POSIX one only named would leave the
                    # lister stored incomplete (expired, no stamp: §6.3 step 4), to be
                    # fetched again at every refresh (found in review).
                    listed = {mk for g in got.values() for mk in g.member_keys}
                    want = [stamps[k] for k in sorted(listed)
                            if k in stamps and k not in full]  # fmt: skip
                self._name_members(full, known)
        self.counters.add(VALIDATE_FETCHED, 0, 0.0, len(full))
        validate.store_validated(self, user, entries, posix, stale, full, known, set(posix))
