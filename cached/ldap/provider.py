"""The backend's requests: user, group and initgroups, each ending in one cache write.

Where SSSD walks nesting one group at a time and then looks each group up again
(2,089 searches for a cold initgroups of a user in 2,086 groups, §9.3), these
requests ask for whole levels at once:

* initgroups (rfc2307bis): the user's direct groups in one search, then each level
  of parents with OR-filters of up to ``schema.BATCH`` group DNs, until a level
  finds nothing new or ``ldap_group_nesting_level`` is reached (reference §6.3).
  Member lists come with the groups, so every group is stored complete and the
  ``getgrgid`` calls ``id`` makes next are answered from the cache;
* group (rfc2307bis): the group with its members, then its member groups level by
  level, downwards, to the nesting level (§6.2), batched the same way;
* member DN -> name from the member's *entry* (docs/compatibility.md §9.5): its name attribute (the
  value its RDN spells when several, as SSSD), its kind from its objectClass, its
  existence and base membership from the server; the DN's spelling is never the
  answer. Users already cached serve by DN (the cache's DN index); thousands of
  unknown members are named by one bounded sweep of the user bases (_sweep_users;
  unpaged, sent ahead as soon as an answer calls for it and read with the next
  searches, _sweep_ahead, _closure); where the server has the
  deref control (and no base has a filter), the walk's group searches carry it —
  not on the first level when a sweep is possible, nor after one (_deref_walk) — so
  every group comes with its members' names and classes; the rest are looked up by
  RDN value — a hint to batch by, matched back by DN — folded into the walk's
  searches where users and groups share a base. A member that exists
  nowhere, lies outside every search base, is neither user nor group of the
  configured classes or has no ids is dropped, and the group stays complete.

Measured on bigroupuser, cold ``id`` through the socket (searches counted by slapd,
root DSE and getpwnam included; see perf/results/2026-11-30-compat for wall times): uid-named
people 7 searches before and after; cn-named people 4,264 searches and a wrong
large01 before, 7 after. Without the deref control (Debian's slapd) the look-ups
add two searches (batches of 1,000 RDN values: slapd tests each candidate entry
against the whole OR, so bigger batches cost quadratically more server time).

rfc2307 has no nesting: one search answers initgroups (``memberUid=<name>``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from itertools import chain, filterfalse, repeat
from operator import itemgetter

from cached import gcpause
from cached.cache import State, StoreWriteError
from cached.cache.cache import Stamped
from cached.cache.records import EXPIRED
from cached.cache.writer import BackendCache, WriteBatch
from cached.config import DomainConfig, SearchBase
from cached.counters import (
    COUNTERS,
    LDAP_DECODE,
    NESTED_COMPARE,
    NESTED_LEVELS,
    NESTED_RESOLVE,
    REQ_GROUP,
    REQ_INITGR,
    REQ_USER,
    Counters,
)
from cached.dn import in_scope, normalize_dn, normalize_dns, rdn_avas
from cached.ipc.ops import Outcome as Outcome  # re-exported: the provider returns it
from cached.ldap import deref, validate
from cached.ldap.client import (
    AD_CAPABILITY_OID,
    PAGED_RESULTS_OID,
    Entry,
    LdapClient,
    LdapError,
    LdapLimitExceeded,
    LdapOffline,
    LdapTooMany,
    Row,
    Search,
)
from cached.ldap.computed import URL_ATTR, computed
from cached.ldap.schema import (
    BATCH,
    MEMBER_BATCH,
    SchemaMap,
    assertions,
    c_string,
    escape,
    first,
)
from cached.model import User
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
# What one directory entry makes us say: a search can return 400,000 such entries (found
# in review: one line each), so one line per kind per minute, then a count of the rest.
limited = RateLimitedLog(log)


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    message: str = ""


_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class _NamePart:
    """Entries whose name starts with ``prefix`` and then one of ``chars`` — plus,
    with ``rest``, those whose name is ``prefix`` or goes on with any other
    character. Halving ``chars`` and lengthening ``prefix`` partitions any set of
    names (matching is case-insensitive, so lower case covers upper)."""

    prefix: str
    chars: str
    rest: bool

    def filter(self, attr: str) -> str:
        p = escape(self.prefix)
        terms = [f"({attr}={p}{c}*)" for c in self.chars]
        if self.rest:
            alnum = "".join(f"({attr}={p}{c}*)" for c in _ALNUM)
            terms.append(f"(&({attr}={p}*)(!(|{alnum})))")
        return terms[0] if len(terms) == 1 else "(|" + "".join(terms) + ")"

    def split(self) -> list[_NamePart]:
        if len(self.chars) > 1:
            h = len(self.chars) // 2
            return [
                _NamePart(self.prefix, self.chars[:h], False),
                _NamePart(self.prefix, self.chars[h:], self.rest),
            ]
        if len(self.chars) == 1 and len(self.prefix) < 64:
            out = [_NamePart(self.prefix + self.chars, _ALNUM, True)]
            if self.rest:
                out.append(_NamePart(self.prefix, "", True))
            return out
        return []


def _entry_names(e: Entry, attr: str) -> list[str]:
    """Every usable value of an entry's name attribute (aliases of a multi-valued name)."""
    return _names_each(e.get(attr))


def _group_aliases(g: _GroupEntry, attr: str) -> list[str] | tuple[()]:
    """The names a group is also found by: with one name value, that value is its
    name and no alias (nothing read again for each of 2,085 groups)."""
    return _names_each(g.entry.get(attr)) if g.several_names else ()


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _names(values: list[bytes]) -> list[str] | None:
    """Name values as text, or None when one is not UTF-8 or holds a NUL: such an
    entry is refused whole (docs/threat-model.md). Replacing bad bytes with U+FFFD would let two
    directory names share one cache key, and SSSD's C strings end at a NUL."""
    try:
        if len(values) == 1:  # the common case, without the list and generator
            n = values[0].decode("utf-8")
            return None if "\0" in n else [n]
        names = [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return None
    return None if any("\0" in n for n in names) else names


def _names_each(values: list[bytes]) -> list[str]:
    """Member values as text, leaving out those ``_names`` would refuse. Inline rather
    than through ``_names`` per value: ~100,000 values per cold initgroups of a user in
    2,000 groups, where the list and generator per value were 10 % of the profile."""
    out = []
    for v in values:
        try:
            n = v.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\0" not in n:
            out.append(n)
    return out


def _int(values: list[bytes]) -> int | None:
    """An id as the INTEGER syntax spells it (RFC 4517 §3.3.16: ASCII digits, no sign
    for an id, no padding); None for anything else. Python's ``int`` also takes
    ``2_7``, ``+28`` and `` 28 `` (found in review; only a hostile server sends them,
    slapd checks the syntax): such a value is no id, as in SSSD's strtouint32."""
    if not values:
        return None
    v = values[0]
    return int(v) if v.isdigit() else None  # bytes.isdigit: ASCII digits only


# A resolved member: ("user" | "group" | WALK, name), or None for a DN that names
# nothing we may answer: no such entry, outside every search base, neither a user
# nor a group, a user without ids (docs/compatibility.md §9.5).
Member = tuple[str, str] | None
# Groups per early commit of an initgroups answer (_early_commits): the responder's
# prefill of one chunk takes about as long as the backend's encoding of the next.
EARLY_CHUNK = 512
WALK = "walk"  # a non-POSIX group: nesting walks through it, it is never answered
_UNSEEN: Member = ("", "")  # sentinel: not looked up yet
# One batched search of a round: (bases, assertions, attributes, deref specs).
_DerefSpecs = list[tuple[str, list[str]]]
_Job = tuple[tuple[SearchBase, ...], list[tuple[str, str]], list[str], _DerefSpecs | None]


@dataclass(slots=True)
class _GroupEntry:
    """A group as fetched, before its members are resolved to names."""

    entry: Entry
    name: str
    gid: int
    modstamp: str
    usn: str
    # rfc2307bis: normalize_dn of each member value (the values ``_names_each`` keeps);
    # a spelling of each key is in LdapProvider._member_dn.
    member_keys: list[str] = field(default_factory=list)
    posix: bool = True  # False: walked through by nesting, never stored (item 8)
    several_names: bool = False  # more than one name value: aliases (_group_aliases)


@dataclass(frozen=True, slots=True)
class _GroupKeys:
    """The schema's group attributes as keys of Entry.attrs (lower-cased, as
    Entry.get looks them up) and its group class as bytes, computed once per schema."""

    schema: SchemaMap
    name: str
    modstamp: str
    usn: str
    member: str
    oc: bytes  # as configured
    oc_lower: bytes
    # The attributes asked for by their own names, for computed.computed; None where
    # groups are never computed (AD: URL_ATTR is not asked for).
    plain: frozenset[str] | None

    @classmethod
    def of(cls, s: SchemaMap) -> _GroupKeys:
        asked = {a.lower() for a in s.member_attrs()}
        plain = frozenset(asked - {URL_ATTR.lower()}) if URL_ATTR.lower() in asked else None
        return cls(
            s, s.group_name.lower(), s.group_modstamp.lower(), s.group_usn.lower(),
            s.group_member.lower(), s.group_oc.encode(), s.group_oc.lower().encode(), plain,
        )  # fmt: skip


@dataclass(slots=True)
class _Scan:
    """One fetched group's member list, read once for storing (LdapProvider._scan)."""

    users: dict[str, None] = field(default_factory=dict)  # direct member users' names
    groups: dict[str, None] = field(default_factory=dict)  # direct member POSIX groups
    children: list[str] = field(default_factory=list)  # keys of the member groups
    walk: list[str] = field(default_factory=list)  # fetched non-POSIX member groups
    unknown: bool = False  # a member was never looked up
    through: bool = False  # a non-POSIX member group: walked through (item 8)


class LdapProvider:
    member_batch = MEMBER_BATCH  # member look-ups per search
    # The user sweep (_sweep_users): one paged search for every user of the user
    # bases, worth it in place of at least a thousand member look-ups; it gives up
    # past ``sweep_factor`` times the users wanted.
    sweep_min = 1000
    sweep_factor = 2
    # Members of the first level still unnamed after the sweep (or without one) from
    # which its search runs again with deref: look-up batches of n RDN values cost
    # slapd ~n²/2 comparisons (schema.MEMBER_BATCH), 250 of them ~10 ms.
    deref_again_min = 250
    # A big group's members: swept before the deref control is asked (LDAP: large01's
    # 5,000 users for 0.6x our CPU and the same slapd CPU, perf/readpath.py --group);
    # Samba's ASQ costs the DC less than its sweep (cached/ldap/ad.py).
    sweep_before_deref = True

    def __init__(
        self,
        cfg: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        counters: Counters = COUNTERS,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.cache = cache
        self.counters = counters
        self.schema = SchemaMap.from_config(cfg)
        self._group_keys: _GroupKeys | None = None  # _group_entry's, for self.schema
        self._bases_known = bool(self.schema.user_bases and self.schema.group_bases)
        # The last lookup a server limit cut beyond splitting (shown by `cached status`
        # until the same lookup succeeds: the limit was raised or the data shrank).
        self.limit_error = ""
        self._limit_lookup: tuple[str, str] | None = None
        # DNs dereferenced in this request: later copies are not decoded again.
        self._deref_seen: set[bytes] = set()
        self.limit_time = 0.0
        self.request_started = 0.0
        # The users of this request's sweep of the user bases (once at most), by DN
        # key, as rows of _member_user_attrs(): members of later rounds are named
        # from it; None: not swept.
        self._swept: dict[str, Row] | None = None
        # This request reads groups whole because they were due (validate.due): their
        # members are named from entries fetched now, never from the users the cache
        # holds. A member renamed where the name attribute is not in the DN changes
        # no group's stamp, and its cached user entry, refreshed by a login before
        # the rename, would name it the old way and reset the group's clock: the
        # blind spot refresh_full_interval bounds went on past it (found by fuzzing
        # the refresh).
        self._from_entries = False
        # The users a sweep had passed when it gave up at its bound (0: none did): the
        # user bases hold at least that many, so a sweep whose bound is below it is
        # not tried (a lower bound: a directory that shrank costs a sweep not tried).
        self.users_at_least = 0
        # A server size limit cut a sweep: it caps every search of the user bases
        # (Debian's slapd: sizelimit 500, paged searches included), so no sweep is
        # tried again and the first level keeps the deref control (_deref_walk).
        self.sweep_cut = False
        # Servers (URIs) whose own size limit cut an unpaged sweep: paged sweeps there.
        self._sweep_paged: set[str] = set()
        # Servers whose own limit cut an unpaged walk-up search (one capping unpaged
        # answers only: 389-ds' nsslapd-sizelimit below its paged limit, slapd's
        # size.pr): the walk goes paged there from then on (_round).
        self._walk_paged: set[str] = set()
        # _unknown's groups that need nothing more, at their budget, for one ``known``.
        self._settled: dict[str, int] = {}
        self._settled_known: dict[str, Member] | None = None
        # Member values read in this request (_group_entry): value -> DN key, and a
        # spelling of each key (the member look-ups batch by its RDN value).
        self._member_memo: dict[bytes, str] = {}
        self._member_dn: dict[str, str] = {}
        # Members the look-ups found nowhere in this request (_closure), and whether
        # this is its last run: validate.changed_since_read.
        self.missing: set[str] = set()
        self._last_run = False
        # Told the names of a user's groups stored ahead of the rest of an initgroups
        # answer (_store_initgroups; the service tells the responder): None, nobody.
        self.on_groups_stored: Callable[[str, list[str]], None] | None = None

    # -- plumbing ------------------------------------------------------------------

    def _prepare(self) -> SchemaMap:
        """Connect, and fill unset search bases from the root DSE (as SSSD does)."""
        self.client.connect()
        if not self._bases_known:
            info = self.client.info
            base = ""
            if info is not None:
                base = info.default_naming_context or (
                    info.naming_contexts[0] if info.naming_contexts else ""
                )
            if not base:
                raise LdapError(
                    f"domain {self.cfg.name}: ldap_search_base is not set and the server "
                    "publishes no naming context; set ldap_search_base"
                )
            self.schema = self.schema.with_default_base(base)
            self._bases_known = True
        return self.schema

    def _run(self, stat: str, kind: str, key: str, fn: Callable[[], Result]) -> Result:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            # Not a name any directory can hold (the NSS codec already refuses such
            # bytes; this guards other callers).
            return Result(Outcome.NOT_FOUND, "name is not valid UTF-8")
        # cache.request(): what this request stores is stored expired if an invalidation
        # commits while it runs (docs/ARCHITECTURE.md §5, "Invalidation and the
        # backend's writes").
        with self.counters.timer(stat), gcpause.paused(), self.cache.request():
            # Every entry this request stores was read after this moment (the stamp
            # trust rule, cached/ldap/validate.py).
            self.request_started = time.time()
            try:
                result = self._runs(fn)
                if self._limit_lookup == (kind, key):
                    self.limit_error, self._limit_lookup = "", None
                return result
            except LdapOffline as e:
                return Result(Outcome.OFFLINE, str(e))
            except StoreWriteError as e:
                # The cache could not be written (full filesystem): one line, and the
                # responder serves what the cache holds.
                log.error("%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            except LdapLimitExceeded as e:
                # A truncated answer is never stored: the request fails, loudly, and
                # `cached status` shows the last such failure (docs/compatibility.md §9.5).
                self.limit_error = f"{kind} {key}: {e}"
                self._limit_lookup = (kind, key)
                self.limit_time = time.time()
                log.error("%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            except LdapError as e:
                log.error("%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            finally:
                # A sweep sent ahead and not read (_sweep_ahead): its answer is read
                # and dropped before the request ends, so no server thread is left
                # writing to a connection nobody reads.
                self.client.drop_ahead()
                # What one request read to name members is not kept past it.
                self._swept, self._settled_known = None, None
                self._member_memo, self._member_dn = {}, {}
                self.missing = set()
                self._from_entries = False

    def _runs(self, fn: Callable[[], Result]) -> Result:
        """``fn`` again when a group changed under it (validate.changed_since_read),
        at most CHANGED_RETRIES times; its last run stores such groups incomplete."""
        for _ in range(validate.CHANGED_RETRIES):
            try:
                return fn()
            except validate.ChangedDuringRequest as e:
                log.info("%s; reading again", e)
                self._swept, self._settled_known, self.missing = None, None, set()
        self._last_run = True
        try:
            return fn()
        finally:
            self._last_run = False

    # -- ids and filters (the AD provider, cached/ldap/ad.py, maps SIDs instead) ----

    def _user_ids(self, e: Entry) -> tuple[int | None, int | None]:
        s = self.schema
        return _int(e.get(s.user_uid)), _int(e.get(s.user_gid))

    def _group_gid(self, e: Entry) -> int | None:
        return _int(e.get(self.schema.group_gid))

    def _user_by_uid_filter(self, uid: int) -> str:
        return self.schema.user_by_uid(uid)

    def _group_by_gid_filter(self, gid: int) -> str:
        return self.schema.group_by_gid(gid)

    @staticmethod
    def _member_assertion(dn: str) -> str | None:
        """The assertion a member look-up batches by: the DN's RDN value (a hint,
        never the answer: entries are matched back by DN); None for a value that is
        not a DN."""
        avas = rdn_avas(dn)
        if not avas or not avas[0][0]:
            return None
        return f"({avas[0][0]}={escape(avas[0][1])})"

    # -- users ---------------------------------------------------------------------

    def _to_user(self, e: Entry) -> User | None:
        named = self._user_name_ids(e)
        if named is None:
            return None
        name, uid, gid = named
        s = self.schema
        gecos = c_string(e.get(s.user_gecos)) or c_string(e.get("cn"))
        return User(
            name, uid, gid, gecos, c_string(e.get(s.user_home)), c_string(e.get(s.user_shell)),
            e.dn,
        )  # fmt: skip

    def _user_name_ids(self, e: Entry) -> tuple[str, int, int] | None:
        """A POSIX user's name, uid and gid, or None for an entry that is no user
        of this domain: what names a member (no gecos, home, shell or User built for
        the thousands of members of a sweep)."""
        return self._name_ids(e.dn, e.get(self.schema.user_name), *self._user_ids(e))

    def _name_ids(
        self, dn: str, name_values: list[bytes], uid: int | None, gid: int | None
    ) -> tuple[str, int, int] | None:
        """_user_name_ids from the entry's DN, its name values and its ids."""
        s = self.schema
        names = _names(name_values)
        if names is None:
            limited.log("not-utf8-user", logging.WARNING, "%s: %s is not UTF-8 text; user ignored",
                        dn, s.user_name)  # fmt: skip
            return None
        if not names:
            return None
        # A multi-valued name attribute: the value the RDN spells, whatever was asked
        # (SSSD's primary name, docs/compatibility.md §9.5).
        name = names[0] if len(names) == 1 else self._primary_name(dn, s.user_name, names)
        if uid is None or gid is None:
            limited.log("not-posix-user", logging.WARNING, "%s: no numeric %s/%s; not a POSIX user",
                        dn, s.user_uid, s.user_gid)  # fmt: skip
            return None
        if not self.cfg.id_in_range(uid):
            return None
        if not self.cfg.id_in_range(gid):
            # SSSD: "filtered out! (primary gid out of range)"; gid 0 always is.
            log.debug("%s: primary gid %d out of range; user filtered out", dn, gid)
            return None
        return name, uid, gid

    def _store_users(self, batch: WriteBatch, entries: list[Entry]) -> User | None:
        found = None
        s = self.schema
        keys: set[bytes] = set()
        for e in entries:
            u = self._to_user(e)
            if u is None:
                continue
            key = self.cache.key(u.name)
            if key in keys:
                # Two users whose names differ only in case, in a domain that folds
                # case: the first in the server's answer is the user, as for
                # _initgroups_user (found by a differential fuzz against SSSD 2.8.2,
                # which answers the first too: the last stored took the name, so a
                # login got one user's uid with the other's groups).
                limited.log(("same-name-user", key), logging.WARNING,
                            "%s: another user of this answer is named %r too (names "
                            "differing only in case); the first is used", e.dn, u.name)  # fmt: skip
                continue
            keys.add(key)
            usn = first(e.get(s.user_usn)) if s.user_usn else ""
            self.cache.put_user(
                batch, u, first(e.get(s.user_modstamp)), usn, aliases=_entry_names(e, s.user_name)
            )
            if found is None:
                found = u
        return found

    def user_by_name(self, name: str) -> Result:
        def run() -> Result:
            s = self._prepare()
            entries = self._search(s.user_bases, s.user_by_name(name), s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                user = self._store_users(batch, entries)
                if user is None:
                    self.cache.delete_user(batch, name)
                    return Result(Outcome.NOT_FOUND)
            # case_sensitive = true and the server matched another case: not this name.
            # Another value of a multi-valued name finds the user (item 9).
            if self.cache.key(name) not in {
                self.cache.key(n) for e in entries for n in _entry_names(e, s.user_name)
            }:
                return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", name, run)

    def user_by_uid(self, uid: int) -> Result:
        def run() -> Result:
            s = self._prepare()
            if not self.cfg.id_in_range(uid):
                return Result(Outcome.NOT_FOUND)
            entries = self._search(s.user_bases, self._user_by_uid_filter(uid), s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                if self._store_users(batch, entries) is None:
                    old = self.cache.user_by_uid(uid).value
                    if old is not None:
                        self.cache.delete_user(batch, old.name)
                    return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", str(uid), run)

    # -- groups: fetching ----------------------------------------------------------

    def _group_entry(self, e: Entry, want: str | None = None) -> _GroupEntry | None:
        """A POSIX group, or — with ``want=WALK`` — any group, POSIX or not (a
        non-POSIX group is walked through by nesting, never answered: item 8)."""
        s = self.schema
        keys = self._gkeys()
        # The entry's values by the lower-cased names Entry.get would use, read from
        # its dict directly: five Entry.get calls per group were a tenth of this
        # method for the 2,085 groups of a cold initgroups (perf/readpath.py).
        get = e.attrs.get
        name_values = get(keys.name, [])
        names = _names(name_values)
        gid = self._group_gid(e)
        if names is None:
            limited.log("not-utf8-group", logging.WARNING,
                        "%s: %s is not UTF-8 text; group ignored", e.dn, s.group_name)  # fmt: skip
            return None
        posix = bool(names) and gid is not None and self.cfg.id_in_range(gid)
        ocs = get("objectclass")
        # The class as configured is usually spelled as sent: a list search in C
        # before the case-folded set (2,085 groups per cold initgroups).
        if ocs and keys.oc not in ocs and keys.oc_lower not in {v.lower() for v in ocs}:
            # Not of the group class: no group at all, not even one to walk through
            # (SSSD's searches ask for the class). Where users and groups share a
            # base, a user entry with member values came back with the walk's
            # searches and was climbed through as a group (found by fuzzing shapes).
            return None
        if not posix and want != WALK:
            return None
        name = self._primary_name(e.dn, s.group_name, names) if names else ""
        if posix and gid is not None and not self.cache.storable_group(name, gid, e.dn):
            return None  # skipped alone, one log line; the rest is stored (docs/threat-model.md)
        modstamp, usn = first(get(keys.modstamp)), first(get(keys.usn)) if keys.usn else ""
        if keys.plain is not None and computed(e.attrs, keys.plain):
            # Members the server computes (a dynamic group): its stamps stay when they
            # change, so it has none to go by and is read whole at every refresh.
            modstamp = usn = ""
        g = _GroupEntry(
            e, name, gid if posix and gid is not None else 0, modstamp, usn,
            posix=posix, several_names=len(name_values) > 1,
        )  # fmt: skip
        if s.bis:
            # Member values to DN keys, each distinct value read once per request: a
            # member of twenty groups comes twenty times (bigroupuser: 44,000 values,
            # 5,000 distinct). Values read before map in C; a group with a value not
            # read yet (or not text) takes the loop.
            values = get(keys.member, [])
            try:
                g.member_keys = list(map(self._member_memo.__getitem__, values))
            except KeyError:
                g.member_keys = self._member_keys(values)
        return g

    def _new_member_values(self, entries: list[Entry]) -> list[bytes]:
        """The member values of ``entries`` not read yet in this request, each once, in
        the order first met. Each distinct value is tested against the memo once: the
        values first made distinct (bigroupuser's first level: 44,000 values, 5,000
        distinct), rather than all tested then made distinct."""
        member = self._gkeys().member
        values = [e.attrs.get(member, ()) for e in entries]
        return list(filterfalse(self._member_memo.__contains__, dict.fromkeys(chain(*values))))

    def _gkeys(self) -> _GroupKeys:
        """The group attributes as Entry.attrs keys, for the current schema."""
        keys = self._group_keys
        if keys is None or keys.schema is not self.schema:
            keys = self._group_keys = _GroupKeys.of(self.schema)
        return keys

    def _member_keys(self, values: list[bytes]) -> list[str]:
        """The DN keys of member values, reading the values not read yet in this
        request; a value that is not UTF-8 or holds a NUL names nothing (as
        ``_names_each``) and is never put in the memo. The new values are decoded
        and keyed together (one decode, normalize_dns): one at a time, the 7,000
        new values of a cold initgroups of bigroupuser were 3 % of its
        instructions (valgrind, perf/readpath.py's walk replayed)."""
        memo = self._member_memo
        new = list(dict.fromkeys(filterfalse(memo.__contains__, values)))
        if new:
            try:
                dns = b"\0".join(new).decode("utf-8").split("\0")
            except UnicodeDecodeError:
                dns = []
            if len(dns) != len(new):
                # A value that is not UTF-8, or holds a NUL (more DNs than values):
                # each value on its own.
                return self._member_keys_each(values)
            keys = normalize_dns(dns)
            memo.update(zip(new, keys, strict=True))
            # The first spelling of each key kept (setdefault), called from C rather
            # than a Python loop per value (with _swept_unpaged's DNs taken by
            # itemgetter: a cold large01 205 M -> 203 M instructions, perf.replay).
            deque(map(self._member_dn.setdefault, keys, dns), maxlen=0)
        return list(map(memo.__getitem__, values))

    def _member_keys_each(self, values: list[bytes]) -> list[str]:
        """_member_keys, one value at a time."""
        memo, spelled = self._member_memo, self._member_dn
        keys = []
        for v in values:
            k = memo.get(v)
            if k is None:
                try:
                    dn = v.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if "\0" in dn:
                    continue
                k = memo[v] = normalize_dn(dn)
                spelled.setdefault(k, dn)
            keys.append(k)
        return keys

    @staticmethod
    def _primary_name(dn: str, attr: str, names: list[str]) -> str:
        """The name of an entry with several values of its name attribute: the one
        its RDN spells, else the first (SSSD's sdap_get_primary_name, item 9)."""
        if len(names) == 1:
            return names[0]
        a = attr.lower()
        for rattr, rvalue in rdn_avas(dn):
            if rattr == a:
                folded = rvalue.lower()
                return next((n for n in names if n.lower() == folded), names[0])
        return names[0]

    def _search(
        self,
        bases: tuple[SearchBase, ...],
        filt: str,
        attrs: list[str],
        deref_specs: list[tuple[str, list[str]]] | None = None,
    ) -> list[Entry]:
        """One search per base (SSSD's ``base?scope?filter`` list), the base's filter
        ANDed in (item 7)."""
        out: list[Entry] = []
        seen = self._deref_seen if deref_specs else None
        for b in bases:
            out += self.client.search(
                b.dn, self.schema.with_base(filt, b), attrs, scope=b.scope,
                deref_specs=deref_specs, deref_seen=seen,
            )  # fmt: skip
        return out

    def _deref_walk(
        self, level: int, again: bool = False, sweeping: bool = False
    ) -> list[tuple[str, list[str]]] | None:
        """The deref control for the walk's searches, where the server has it and no
        base has a filter (which a dereferenced entry could not be checked against,
        as SSSD decides, §6.2): every group found comes with its members' names and
        classes, so members need no look-up of their own.

        Not on the first level when the user bases could be swept, nor after a
        sweep: slapd returns one deref result per member *value*, not per member —
        bigroupuser's 2,000 direct groups came with 42,000 results for 5,000
        distinct users (245 bytes each, 0.2 s of slapd CPU to build, 39 % of ours to
        read). Its groups without the control and one sweep of the user bases name
        the same members for a third of slapd's CPU and a quarter of the bytes
        (perf/readpath.py). A user in few groups has few unknown members: no sweep,
        and they are looked up with the next level's searches; when hundreds are
        left unnamed (no sweep, or it gave up at its bound in a big directory), the
        first level's search runs again with deref (_closure), rather than look-up
        batches whose cost on slapd grows with the square of their size."""
        s = self.schema
        info = self.client.info
        if not again and (
            self._swept  # named by the sweep (empty: it gave up at its bound)
            or sweeping  # the sweep goes out with this round's searches
            or (level == 0 and self._sweep_possible())
        ):
            return None
        if (
            self.cfg.ldap_deref_threshold <= 0
            or self.cfg.ignore_group_members
            or info is None
            or deref.DEREF_OID not in info.controls
            or any(b.filter for b in s.user_bases + s.group_bases)
        ):
            return None
        return [(s.group_member, s.deref_attrs)]

    def _search_groups(self, filt: str) -> list[_GroupEntry]:
        entries = self._search_group_bases(filt)
        return [g for e in entries if (g := self._group_entry(e)) is not None]

    def _search_group_bases(self, filt: str) -> list[Entry]:
        s = self.schema
        return self._search(
            s.group_bases, filt, s.group_attrs(members=not self.cfg.ignore_group_members)
        )

    def _jobs_by_name(self, names: list[str], attrs: list[str]) -> list[_Job]:
        """Searches of groups by name under the group bases, ORs of up to BATCH names
        (``g`` items: _round_filter asks for the group class), for _split_search_many:
        the refresh's stamps and whole groups, and changed_since_read."""
        s = self.schema
        items = [("g", f"({s.group_name}={escape(n)})") for n in names]
        return [(s.group_bases, items[i : i + BATCH], attrs, None)
                for i in range(0, len(items), BATCH)]  # fmt: skip

    def _groups_by_name(self, names: list[str]) -> list[_GroupEntry]:
        """POSIX groups by name, whole; an answer a server's size limit cuts is split
        (_split_search_many), as the walk's are. The refresh's fetch of changed groups
        and _vanished's re-read of groups left went as one OR unsplit: with more of
        them than the limit the refresh failed at every lookup, where a cold one
        succeeds (found by fuzzing the refresh, slapd ``sizelimit 5``)."""
        attrs = self.schema.group_attrs(members=not self.cfg.ignore_group_members)
        got = self._split_search_many(self._jobs_by_name(names, attrs), self._round_filter)
        return [g for entries in got for e in entries if (g := self._group_entry(e)) is not None]

    def _in_bases(self, key: str, bases: tuple[SearchBase, ...]) -> bool:
        return any(in_scope(key, normalize_dn(b.dn), b.scope) for b in bases)

    def _user_base_keys(self) -> Callable[[str], bool]:
        """_in_bases(key, user bases) for thousands of members at once (_closure):
        subtree bases by one ``str.endswith`` of their suffixes (in_scope's test,
        dn.is_under), in C; in_scope per key took 9 ms for bigroupuser's 5,000."""
        bases = [(normalize_dn(b.dn), b.scope) for b in self.schema.user_bases]
        if any(scope == "sub" and not b for b, scope in bases):
            return lambda _key: True  # the root DSE's whole tree
        subs = tuple("," + b for b, scope in bases if scope == "sub")
        tops = {b for b, scope in bases if scope == "sub"}
        rest = [(b, scope) for b, scope in bases if scope != "sub"]
        return lambda key: (
            key.endswith(subs) or key in tops or any(in_scope(key, b, sc) for b, sc in rest)
        )

    # -- groups: members to names --------------------------------------------------

    def _classify(self, e: Entry, key: str, from_group_bases: bool) -> Member | _GroupEntry:
        """What a member DN names, from its entry: a user (named by its entry, with
        ids: SSSD drops members without uidNumber/gidNumber, item 5), a group
        (POSIX or walked through), or nothing."""
        s = self.schema
        ocs = {v.lower() for v in e.get("objectclass")}
        if self._as_user(ocs, key, from_group_bases):
            return self._user_member(e, key, False)
        if s.group_oc.lower().encode() in ocs:
            if not from_group_bases:
                return None
            return self._group_entry(e, WALK)
        return None

    def _as_user(self, ocs: set[bytes], key: str, from_group_bases: bool = True) -> bool:
        """Is a member entry of these classes (lower-cased) a user? A user first, as
        SSSD tries one, where it may be one: of the user class and, found under the
        group bases, under a user base too. Found under the group bases only, an
        entry of both classes is the group (found by fuzzing shapes: it was dropped
        as a user outside the user bases)."""
        s = self.schema
        return s.user_oc.lower().encode() in ocs and (
            not from_group_bases or self._in_bases(key, s.user_bases)
        )

    def _user_member(self, e: Entry, key: str, from_group_bases: bool) -> Member:
        if from_group_bases and not self._in_bases(key, self.schema.user_bases):
            return None  # outside every user base: not a member (item 3)
        named = self._user_name_ids(e)
        return ("user", named[0]) if named is not None else None

    def _unknown(
        self, found: dict[str, _GroupEntry], budget: dict[str, int], known: dict[str, Member]
    ) -> dict[str, tuple[str, int]]:
        """Members of fetched groups still to look up: {key: (dn, levels still to
        fetch below it)}. A member group is fetched, with its members, while its
        parent has levels left; beyond, it is only named (§6.2)."""
        out: dict[str, tuple[str, int]] = {}
        # Groups whose every member was found or named at their budget need nothing
        # from any later round (``found`` and ``known`` only grow, a name never
        # changes): skipped, instead of reading all their members again each round
        # (bigroupuser: 42,000 member values a round, 8 % of a cold initgroups).
        if self._settled_known is not known:
            self._settled, self._settled_known = {}, known
        settled = self._settled
        # Members needing nothing: found, or named (below a group with levels left, a
        # member group not yet found is still to be fetched). Set look-ups, so a
        # settled group is checked at C speed.
        named = found.keys() | known.keys()
        deep = found.keys() | {mk for mk, m in known.items() if m is None or m[0] == "user"}
        # The members of the groups with something left, pooled by the group's budget,
        # then each distinct member taken once, at the highest budget, in C where it
        # can be (bigroupuser's first round: 44,000 values, 5,000 distinct).
        pools: dict[int, list[str]] = {}
        for k, g in found.items():
            b = budget.get(k, -1)
            if b < 0 or settled.get(k) == b:
                continue
            done = deep if b >= 1 else named
            if done.issuperset(g.member_keys):
                settled[k] = b
                continue
            pool = pools.get(b)
            if pool is None:
                pool = pools[b] = []
            pool += g.member_keys
        spelled = self._member_dn
        for b in sorted(pools, reverse=True):
            done = deep if b >= 1 else named
            # Each new key with its spelling and budget, built in C (a loop per
            # member here, and resolve_dns below, cost a cold large01 213 M -> 205 M
            # instructions, perf.replay).
            fresh = filterfalse(done.__contains__, dict.fromkeys(pools[b]))
            new = list(filterfalse(out.__contains__, fresh))
            out.update(zip(new, zip(map(spelled.__getitem__, new), repeat(b - 1)), strict=True))
        if out and not self._from_entries:
            # Users already cached serve by DN (the cache's DN index), no search; by
            # the keys at hand (each spelling normalized again, and each DN found
            # normalized back, were 5,000 normalize_dn calls in a cold large01).
            for k, member in self.cache.resolve_keys(out.keys()).items():
                if member[0] == "user":
                    known[k] = member
                    del out[k]
        return out

    def _closure(
        self,
        found: dict[str, _GroupEntry],
        budget: dict[str, int],
        known: dict[str, Member],
        up: list[str],
        primary_gid: int | None = None,
    ) -> set[str]:
        """Fetch, in rounds of batched searches: the groups above ``up`` level by
        level (initgroups, §6.3), the member groups of every fetched group down to
        its level budget (§6.2), and the entry of every member, so each member is
        named by its entry or dropped (docs/compatibility.md §9.5). The walk up and the
        member look-ups share each round's searches, so naming members costs no
        extra round trip. Returns the keys of the POSIX groups found walking up."""
        s = self.schema
        self._deref_seen = set()
        mine: set[str] = set()
        walked = {normalize_dn(dn) for dn in up}
        level = 0
        lookup = self._unknown(found, budget, known)
        extra = self._group_by_gid_filter(primary_gid) if primary_gid is not None else ""
        # The first level goes without deref for a sweep (_deref_walk): its search
        # runs again with it when hundreds of its members are left unnamed.
        first_up = up if up and self._deref_walk(0) is None else []
        # The sweep sent ahead when a round's answer called for it (_sweep_ahead):
        # the next round reads it as the sweep it would have sent.
        ahead: tuple[int, list[Search]] = (0, [])
        while up or lookup or extra:
            # The sweep, when due, goes out unpaged with this round's searches: slapd
            # streams it on one thread while it works on the walk-up on another. The
            # members it could name (in a user base) wait for it; those it does not
            # name are looked up in the next round. Cold initgroups of bigroupuser on
            # an idle 2-core machine (n=20 each, medians): backend 318 -> 281 ms, LDAP
            # wait 65 -> 27 ms; the unpaged sweep alone, before the round, 321 ms. On
            # a machine loaded 3-7x over its cores the overlap gained nothing.
            sweep: list[Search] = []
            later: dict[str, tuple[str, int]] = {}
            if ahead[1] or (self._sweep_due(len(lookup)) and self._sweep_unpaged()):
                cap, sweep = ahead if ahead[1] else self._sweep_bound(len(lookup))
                ahead = (0, [])
                in_users = self._user_base_keys()
                for k in [k for k in lookup if in_users(k)]:
                    later[k] = lookup.pop(k)
            else:
                self._sweep_users(lookup, known)
                if level == 1 and not self._swept and len(lookup) >= self.deref_again_min:
                    self._first_level_again(first_up, lookup, known)
            up_keys = {normalize_dn(dn) for dn in up}
            up_next: list[str] = []
            named: set[str] = set()
            swept: list[list[Entry] | LdapLimitExceeded] = []
            got = self._round(up, lookup, extra, level, sweep=(sweep, swept))
            groups = [e for e, f, _o in got if f]
            new_values = self._new_member_values(groups)
            # Whether any of the round's groups has its members read: walked up to,
            # or looked up with levels left (budget -1: named only, members never
            # read; a sweep for them went unread: found in review).
            expands = bool(up or extra) or any(b >= 0 for _dn, b in lookup.values())
            if not sweep and expands and not any(e.deref is not None for e in groups):
                # Their members are named by neither a sweep nor deref: when they
                # call for one, the sweep goes out now, read by the next round, as
                # the entries are keyed and classified (cold initgroups of
                # bigroupuser: the user's 2,000 groups, 17 ms of reading them).
                ahead = self._sweep_ahead(len(new_values))
            if sweep:
                wanted = len(lookup) + len(later)
                self._swept = self._swept_unpaged(cap, sweep, swept)
                if self._swept is None:
                    self._swept = self._sweep(wanted)  # the paged sweep: a server limit
                self._sweep_users(later, known)
                if level == 1 and not self._swept and len(later) >= self.deref_again_min:
                    self._first_level_again(first_up, later, known)
            # The entries' DN keys at once (normalize_dns): a group's DN is new to
            # the memo when its parents' member lists come later (bigroupuser: the
            # 2,000 groups of the first level), and parsing each was 4 % of a cold
            # initgroups (valgrind, perf.readpath's walk replayed). So are the
            # member values of the round's groups, read below (_group_entry).
            keys = normalize_dns([e.dn for e, _from_groups, _only_up in got])
            self._member_keys(new_values)
            for (e, from_groups, only_up), k in zip(got, keys, strict=True):
                # A member waiting for the sweep is named by an entry the round found
                # all the same (a member group walked up to).
                want = lookup.get(k) or later.get(k)
                if want is not None:
                    m = self._classify(e, k, from_groups)
                    if m is None and k in named:
                        continue  # found as a user or group by another of the searches
                    named.add(k)
                    if isinstance(m, _GroupEntry):
                        if want[1] >= 0:
                            found.setdefault(k, m)
                            budget[k] = max(budget.get(k, -1), want[1])
                        known[k] = ("group" if m.posix else WALK, m.name)
                    else:
                        known[k] = m
                if e.deref is not None:
                    self._named_by_deref(e, known)
                if not from_groups or not (up_keys or extra):
                    continue
                g = found.get(k) or self._group_entry(e, WALK)
                if g is None:
                    continue
                if up_keys and (only_up or not up_keys.isdisjoint(g.member_keys)):
                    found.setdefault(k, g)
                    budget[k] = s.nesting_level
                    if g.posix:
                        mine.add(k)
                    if k not in walked:
                        walked.add(k)
                        up_next.append(e.dn)
                if extra and g.posix and g.gid == primary_gid:
                    found.setdefault(k, g)
                    budget[k] = max(budget.get(k, -1), s.nesting_level)
            for k, (dn, _b) in lookup.items():
                if k not in known:
                    known[k] = None  # exists nowhere we may look: not a member
                    # ... unless renamed since its group was read (a DN in a base:
                    # one that never named an entry there is dropped whatever).
                    if self._member_assertion(dn) is not None and self._in_bases(
                        k, s.user_bases + s.group_bases
                    ):
                        self.missing.add(k)
            self.counters.add(NESTED_LEVELS, 1, 0.0, 1)
            level += 1
            up = up_next if level <= s.nesting_level else []
            extra = ""
            lookup = self._unknown(found, budget, known)
        return mine

    def _first_level_again(
        self, up: list[str], lookup: dict[str, tuple[str, int]], known: dict[str, Member]
    ) -> None:
        """The first level went without deref for a sweep that did not name its
        members (too few for one, or it gave up at its bound): its search again,
        with the control, names them (a no-op without it, where the look-ups do)."""
        if not up or self._deref_walk(0, again=True) is None:
            return
        for e, _from_groups, _only_up in self._round(up, {}, "", 0, again=True):
            if e.deref is not None:
                self._named_by_deref(e, known)
        for k in [k for k in lookup if k in known]:
            del lookup[k]

    def _named_by_deref(self, e: Entry, known: dict[str, Member]) -> None:
        """Name the members of a group entry from the deref control's answer: users
        by their entry (in a user base, with ids), groups of the class by name (a
        group to expand is still looked up with its members); a member value the
        server did not dereference names no entry. Each DN comes once per walk (the
        first copy the client read, whichever entry it came in: see
        deref.decode_counted), so naming does not depend on the order of entries."""
        s = self.schema
        group_oc = s.group_oc.lower().encode()
        for r in e.deref or ():
            k = normalize_dn(r.dn)
            if k in known:
                continue
            ocs = {v.lower() for v in r.values.get("objectclass", [])}
            entry = Entry(r.dn, r.values)
            if self._as_user(ocs, k):
                known[k] = self._user_member(entry, k, False)
            elif group_oc in ocs and self._in_bases(k, s.group_bases):
                g = self._group_entry(entry, WALK)
                known[k] = None if g is None else ("group" if g.posix else WALK, g.name)
            else:
                known[k] = None
        members = e.get(s.group_member)
        if e.deref_total >= len(members) or e.deref_raw is None:
            return  # every value was dereferenced (the common case: no dangling DN)
        # Some member names no entry the server could dereference: read this
        # entry's results again, copies included, to find which (rare: dangling or
        # unreadable members).
        returned = {normalize_dn(r.dn) for r in deref.decode_response(e.deref_raw)}
        for dn in _names_each(members):
            k = normalize_dn(dn)
            if k not in returned:
                known.setdefault(k, None)

    def _member_user_attrs(self) -> list[str]:
        """What names a member user: its name and ids (AD: the SIDs they map from)."""
        s = self.schema
        attrs = [s.user_name, s.user_uid, s.user_gid]
        if s.ad:
            attrs += [s.user_sid, s.user_primary_group]  # ID mapping names users by SID
        return attrs

    def _sweep_possible(self) -> bool:
        """Paged results: the paged sweep is the one that runs where a server's own
        limit cuts the unpaged one (_sweep_unpaged), and AD's."""
        info = self.client.info
        return (
            not self.sweep_cut
            and self.cfg.ldap_page_size > 0
            and info is not None
            and PAGED_RESULTS_OID in info.controls
        )

    def _sweep_users(self, lookup: dict[str, tuple[str, int]], known: dict[str, Member]) -> None:
        """Name thousands of unknown members with one search of the user bases for
        every user, when that search is bounded by the answer: it runs only for at
        least ``sweep_min`` unknown members, once per request, and stops (its own
        sizeLimit, or :class:`LdapTooMany` when paged, _sweep) once it passes
        ``sweep_factor`` times their number,
        leaving them to the batched look-ups. A directory of 500,000 users thus
        costs at most twice the names wanted, never the whole directory. The users
        it returns name the later rounds' members too, with no look-up; the
        members it does not return (groups, users outside the bases or without the
        class, deleted entries) are left to the look-ups, which apply the naming
        rules of docs/compatibility.md §9.5. Measured on bigroupuser: see
        perf/readpath.py (LDAP) and perf/results/2026-11-30-adbig (Samba, where it
        took 0.68-0.81 s of DC CPU in one search against 1.3 s in 20 batches)."""
        if self._swept is None:
            if not self._sweep_due(len(lookup)):
                return
            self._swept = self._sweep(len(lookup))
        swept = self._swept
        hits = list(filter(swept.__contains__, lookup))
        if len(hits) == len(lookup):
            lookup.clear()  # the usual: every member wanted is a swept user
        else:
            for k in hits:
                del lookup[k]
        if self.schema.ad:  # ids mapped from SIDs (cached/ldap/ad.py)
            for k in hits:
                known[k] = self._swept_member(swept[k])
            return
        # The usual user inline (one name, numeric ids in range): what _swept_member
        # gives, without its five calls per user; the id range as two bounds, not a
        # call of id_in_range per id, and the hits taken out of ``lookup`` at once
        # (large01's 5,000 members: 218 M -> 213 M instructions, perf.replay).
        lo, hi = self.cfg.id_bounds()
        # Whether each gidNumber value met is a number in range: users share a few
        # primary groups, so their 5,000 values are read a handful of times.
        gid_ok: dict[bytes, bool] = {}
        for k, row in zip(hits, map(swept.__getitem__, hits), strict=True):
            names, uids, gids = row[1]
            if len(names) == 1 and uids and gids:
                ok = gid_ok.get(gids[0])
                if ok is None:
                    # _int's rule (ASCII digits only); else _swept_member says why.
                    ok = gid_ok[gids[0]] = gids[0].isdigit() and lo <= int(gids[0]) <= hi
                if ok and uids[0].isdigit():
                    try:
                        name, uid = names[0].decode("utf-8"), int(uids[0])
                    except ValueError:
                        pass  # not UTF-8: _swept_member says why
                    else:
                        if lo <= uid <= hi and "\0" not in name:
                            known[k] = ("user", name)
                            continue
            known[k] = self._swept_member(row)

    def _swept_member(self, row: Row) -> Member:
        """A swept user as a member: named by its entry, with ids, as _user_member
        (in a user base: the sweep searched only those)."""
        dn, values = row
        if self.schema.ad:  # ids mapped from SIDs (cached/ldap/ad.py)
            attrs = [a.lower() for a in self._member_user_attrs()]
            return self._user_member(Entry(dn, dict(zip(attrs, values, strict=True))), "", False)
        named = self._name_ids(dn, values[0], _int(values[1]), _int(values[2]))
        return ("user", named[0]) if named is not None else None

    def _sweep_due(self, wanted: int) -> bool:
        """A sweep is worth trying for this many unknown members (_sweep_users)."""
        return (
            self._swept is None
            and wanted >= self.sweep_min
            and self.sweep_factor * wanted >= self.users_at_least
            and self._sweep_possible()
        )

    def _sweep_ahead(self, values: int) -> tuple[int, list[Search]]:
        """The unpaged sweep that ``values`` member values just read call for, sent
        before they are read (a looked-up group's, _group; a walk's round, _closure):
        the server sends the user bases while the member DNs are keyed and checked
        against the cache. Sent when at least ``sweep_min`` of them cannot be stored
        members (more values than DNs the cache holds, or members not taken from
        it: _unknown), so a group whose members are cached costs no sweep. Returns
        the sweep's bound and searches, read by the search_many that asks for them
        (_swept_unpaged); (0, []) when none went out. Cold ``getent group
        large01`` (5,000 members): the sweep goes out 3.1 ms earlier (the keying
        and _unknown it now overlaps), and the lookup took 20 ms instead of 28:
        docs/compatibility.md §9.3."""
        s = self.schema
        if (
            not (s.bis and self.sweep_before_deref)
            or self.cfg.ignore_group_members
            or not self._sweep_due(values)  # at most this many unknown: no cache read
        ):
            return 0, []
        unknown = values if self._from_entries else values - self.cache.dn_count()
        if not (self._sweep_due(unknown) and self._sweep_unpaged()):
            return 0, []
        cap, searches = self._sweep_bound(values)
        self.client.send_ahead(searches)
        return cap, searches

    def _sweep_bound(self, wanted: int) -> tuple[int, list[Search]]:
        """The unpaged sweep for ``wanted`` names: its bound and its searches."""
        cap = self.sweep_factor * wanted
        return cap, self._sweep_searches(cap)

    def _sweep_unpaged(self) -> bool:
        """The sweep as one unpaged search per user base, bounded by the request's own
        sizeLimit (RFC 4511 §4.5.1): no page round trips (bigroupuser: 6 pages of
        1,000 one after the other), and it can go out with a round's paged searches
        (_closure). Not on an AD DC (``ldap_schema = ad`` or the root DSE's AD
        capability: Windows' MaxPageSize caps unpaged answers at 1,000 where paged
        ones go on, Samba ignores the request's sizeLimit), nor on a server whose
        own size limit cut it once (Debian's slapd: ``sizelimit 500``) or that sent
        more than it asked: there the paged sweep decides (_sweep)."""
        info = self.client.info
        return info is not None and not self._ad_dc() and info.uri not in self._sweep_paged

    def _ad_dc(self) -> bool:
        """The server is an AD DC: ``ldap_schema = ad``, or a root DSE listing the AD
        capability whatever the schema. Windows caps unpaged answers at MaxPageSize
        (1,000) where pages go on; Samba ignores a request's sizeLimit (measured on
        4.17: a sizeLimit of 5 returned all 1,609 users), so nothing would bound an
        unpaged sweep. Searches that must not be cut go paged there."""
        info = self.client.info
        return self.schema.ad or (info is not None and AD_CAPABILITY_OID in info.capabilities)

    def _sweep_searches(self, cap: int) -> list[Search]:
        """The unpaged sweep's searches: every user of each user base, as rows, at
        most ``cap + 1`` (one more than the cap shows the bases pass it)."""
        s = self.schema
        # No objectClass asked for: the filter admits users of the class only.
        # Rows: name, uid, gid (then AD's SIDs), no Entry per user (Search.rows).
        attrs = self._member_user_attrs()
        filt = f"(objectClass={s.user_oc})"
        return [
            Search(
                b.dn, s.with_base(filt, b), attrs, b.scope, paged=False, size_limit=cap + 1, rows=[]
            )
            for b in s.user_bases
        ]

    def _swept_unpaged(
        self, cap: int, searches: list[Search], answers: list[list[Entry] | LdapLimitExceeded]
    ) -> dict[str, Row] | None:
        """What the unpaged sweep's answers name, as _sweep's; None when the server's
        own size limit cut it below what was asked (the paged sweep is to run)."""
        rows: list[Row] = []
        for sp, got in zip(searches, answers, strict=True):
            if isinstance(got, LdapLimitExceeded):
                if got.code == "sizeLimitExceeded" and got.partial > cap:
                    return self._sweep_gave_up(cap)  # our own sizeLimit: past the cap
                if got.code == "sizeLimitExceeded":
                    uri = self.client.info.uri if self.client.info else ""
                    self._sweep_paged.add(uri)
                    log.info("unpaged sweep of the user bases cut by %s's size limit after "
                             "%d entries: paged sweeps from now on", uri, got.partial)  # fmt: skip
                    return None
                return self._sweep_cut_by(got)
            assert sp.rows is not None
            if len(sp.rows) > sp.size_limit:
                # The server ignored the request's sizeLimit (as Samba does): this
                # answer is past the cap, given up as below, and nothing would bound
                # the next one: paged sweeps on this server from now on.
                uri = self.client.info.uri if self.client.info else ""
                self._sweep_paged.add(uri)
                log.info("%s ignored the unpaged sweep's size limit (%d entries for %d): "
                         "paged sweeps from now on", uri, len(sp.rows), sp.size_limit)  # fmt: skip
            rows += sp.rows
        if len(rows) > cap:
            return self._sweep_gave_up(cap)  # several bases, each under the cap
        return dict(zip(normalize_dns(list(map(itemgetter(0), rows))), rows, strict=True))

    def _sweep_gave_up(self, cap: int) -> dict[str, Row]:
        log.debug("the user bases passed %d entries: member users left to batched look-ups", cap)
        # It passed the cap: the bases hold more than ``cap`` users, so a request
        # with as many unknown members would give up again.
        self.users_at_least = max(self.users_at_least, cap + 1)
        return {}

    def _sweep_cut_by(self, cut: LdapLimitExceeded) -> dict[str, Row]:
        # Not an error of the lookup: the members are named as without a sweep
        # (deref, or the look-ups, which split under a limit: §9.5).
        if cut.code == "sizeLimitExceeded":
            self.sweep_cut = True
        log.info("sweep of the user bases cut by the server (%s after %d entries): "
                 "members named by deref or look-ups", cut.code, cut.partial)  # fmt: skip
        return {}

    def _sweep(self, wanted: int) -> dict[str, Row]:
        """Every user of the user bases by DN key, or none past the bound."""
        s = self.schema
        cap = self.sweep_factor * wanted
        if self._sweep_unpaged():
            searches = self._sweep_searches(cap)
            swept = self._swept_unpaged(cap, searches, self.client.search_many(searches))
            if swept is not None:
                return swept
        attrs = self._member_user_attrs()
        entries: list[Row] = []
        try:
            for b in s.user_bases:
                left = cap - len(entries)  # > 0: max_entries=0 would mean no bound
                if left <= 0:
                    raise LdapTooMany(f"the user bases passed {cap} entries")
                entries += self.client.search_rows(
                    b.dn, s.with_base(f"(objectClass={s.user_oc})", b), attrs, scope=b.scope,
                    max_entries=left,
                )  # fmt: skip
        except LdapTooMany:
            return self._sweep_gave_up(cap)
        except LdapLimitExceeded as cut:
            return self._sweep_cut_by(cut)
        return dict(zip(normalize_dns([r[0] for r in entries]), entries, strict=True))

    def _round(
        self,
        up: list[str],
        lookup: dict[str, tuple[str, int]],
        extra: str,
        level: int,
        again: bool = False,
        sweep: tuple[list[Search], list[list[Entry] | LdapLimitExceeded]] | None = None,
    ) -> list[tuple[Entry, bool, bool]]:
        """One round's searches: (entry, found under the group bases, the search
        had only walk-up assertions). Member look-ups go by RDN value — a hint to
        batch by, never the answer: entries are matched back by DN. ``sweep``:
        searches sent first with the round's, and the list their answers go in."""
        s = self.schema
        rdn: list[str] = []
        seen: set[str] = set()
        for dn, _ in lookup.values():
            a = self._member_assertion(dn)
            if a is None:
                continue  # not a DN: names nothing
            if a not in seen:
                seen.add(a)
                rdn.append(a)
        ups = assertions(s.group_member, up)
        members = not self.cfg.ignore_group_members
        out: list[tuple[Entry, bool, bool]] = []
        specs = self._deref_walk(level, again, sweeping=bool(sweep and sweep[0])) if ups else None
        # The searches of one round are independent: sent together (several message
        # ids outstanding), so a round costs one round trip, not one per search.
        jobs: list[_Job] = []
        tags: list[tuple[bool, bool]] = []  # per job: (under the group bases, only up)
        if s.fold and members:
            # Users and groups under one base: one search finds both (docs/compatibility.md §9.5:
            # names at no extra round trip).
            n = max(-(-len(ups) // BATCH), -(-len(rdn) // self.member_batch), 1 if extra else 0)
            for i in range(n):
                part_up, part_rdn = ups[i::n], rdn[i::n]
                items = [("u", a) for a in part_up] + [("m", a) for a in part_rdn]
                if i == 0 and extra:
                    items.append(("x", extra))
                with_specs = specs if part_up else None
                jobs.append((s.group_bases, items, s.member_attrs(), with_specs))
                tags.append((True, False))
        else:
            # Users and groups apart: member look-ups under each kind's bases. Without
            # member lists (ignore_group_members) a group is a parent because the search
            # that found it asked only for parents.
            attrs = s.group_attrs(members)
            batches = [([("u", a) for a in chunk], True) for chunk in _chunks(ups, BATCH)]
            if extra:
                batches.append(([("x", extra)], False))
            for items, only_up in batches:
                jobs.append((s.group_bases, items, attrs, specs))
                tags.append((True, only_up and not members))
            uattrs = [*self._member_user_attrs(), "objectClass"]
            for chunk in _chunks(rdn, self.member_batch):
                jobs.append((s.group_bases, [("g", a) for a in chunk], attrs, None))
                tags.append((True, False))
                jobs.append((s.user_bases, [("s", a) for a in chunk], uattrs, None))
                tags.append((False, False))
        # Past the first level the walk's answers are small (bigroupuser's level 2:
        # two ORs of 1,000 DNs, 78 entries each, 20 ms of slapd each): unpaged, they go
        # out together and slapd works on them on two threads. The first level (the
        # user's own groups: 2,000 there) stays paged, as AD does throughout: its
        # MaxPageSize cuts an unpaged answer at 1,000, where pages go on (so on any AD
        # DC). A size limit that cuts an unpaged answer splits it (_split_search_many),
        # as a paged one, and makes the walk paged on that server (_walk_paged).
        info = self.client.info
        paged = level == 0 or again or info is None or self._ad_dc() or info.uri in self._walk_paged
        for (from_groups, only_up), entries in zip(
            tags, self._split_search_many(jobs, self._round_filter, paged, sweep), strict=True
        ):
            out += [(e, from_groups, only_up) for e in entries]
        return out

    def _round_filter(self, items: list[tuple[str, str]]) -> str:
        s = self.schema
        parts = {kind: [a for k, a in items if k == kind] for kind in ("u", "m", "g", "s", "x")}

        def any_of(assertions: list[str]) -> str:
            return assertions[0] if len(assertions) == 1 else "(|" + "".join(assertions) + ")"

        branches = []
        if parts["m"]:
            # First: slapd tests each candidate against the branches in order, and
            # most candidates are the members looked up (measured: 3x less slapd time).
            branches.append(f"(&{s.member_classes()}{any_of(parts['m'])})")
        if parts["u"]:
            # Walking up passes through groups of the class without a gidNumber (as
            # SSSD, item 8); they are never answered.
            branches.append(f"(&(objectClass={s.group_oc}){any_of(parts['u'])})")
        if parts["g"]:
            branches.append(f"(&(objectClass={s.group_oc}){any_of(parts['g'])})")
        if parts["s"]:
            branches.append(f"(&(objectClass={s.user_oc}){any_of(parts['s'])})")
        branches += parts["x"]
        return any_of(branches)

    def _split_search_many(
        self,
        jobs: list[_Job],
        build: Callable[[list[tuple[str, str]]], str],
        paged: bool | list[bool] = True,
        also: tuple[list[Search], list[list[Entry] | LdapLimitExceeded]] | None = None,
    ) -> list[list[Entry]]:
        """Search with the OR of each job's items, all jobs at once; when the server's
        size limit cuts an answer, split that batch in two and search again
        (docs/compatibility.md §9.5). A single assertion still cut (a user in more
        groups than the limit) is split by name: entries whose name starts with one
        half of the letters and digits, then the other half and the rest, refining
        the prefix as needed. Only a part that cannot be split further fails the
        request: a cut answer is never stored. Returns each job's entries.
        ``paged`` (one flag, or one per job): False sends a job without the paging
        control, so that it goes out together with the others (slapd keeps one
        paged state per connection); a size limit cuts it like a paged one.
        ``also``: searches sent first, with the first wave (unpaged, they go out at
        once), and the list their answers are put in, limits not split.
        """
        out: list[list[Entry]] = [[] for _ in jobs]
        wave: list[tuple[int, list[tuple[str, str]], _NamePart | None]] = [
            (j, items, None) for j, (_b, items, _a, _d) in enumerate(jobs) if items
        ]
        extra, extra_answers = also or ([], [])
        while wave or extra:
            searches: list[Search] = list(extra)
            spans: list[int] = []
            for j, chunk, part in wave:
                bases, _items, attrs, specs = jobs[j]
                filt = build(chunk)
                if part is not None:
                    filt = f"(&{filt}{part.filter(self._name_attr(bases))})"
                for b in bases:
                    pg = paged if isinstance(paged, bool) else paged[j]
                    searches.append(Search(b.dn, self.schema.with_base(filt, b), attrs,
                                           b.scope, specs, paged=pg))  # fmt: skip
                spans.append(len(bases))
            got = self.client.search_many(searches, self._deref_seen)
            extra_answers += got[: len(extra)]
            nxt: list[tuple[int, list[tuple[str, str]], _NamePart | None]] = []
            pos = len(extra)
            extra = []
            for (j, chunk, part), span in zip(wave, spans, strict=True):
                per_base = got[pos : pos + span]
                pos += span
                cut = next((a for a in per_base if isinstance(a, LdapLimitExceeded)), None)
                if cut is None:
                    for a in per_base:
                        if not isinstance(a, LdapLimitExceeded):
                            out[j] += a
                    continue
                pg = paged if isinstance(paged, bool) else paged[j]
                if not pg and cut.code == "sizeLimitExceeded" and self.client.info:
                    self._walk_paged.add(self.client.info.uri)
                if len(chunk) > 1:
                    log.info("%s; splitting a batch of %d assertions", cut.code, len(chunk))
                    half = len(chunk) // 2
                    nxt += [(j, chunk[:half], None), (j, chunk[half:], None)]
                    continue
                parts = (part or _NamePart("", _ALNUM, True)).split()
                if not parts:
                    raise cut
                log.info("%s; splitting by %s prefix", cut.code, self._name_attr(jobs[j][0]))
                nxt += [(j, chunk, p) for p in parts]
            wave = nxt
        return out

    def _name_attr(self, bases: tuple[SearchBase, ...]) -> str:
        s = self.schema
        return s.group_name if bases == s.group_bases else s.user_name

    def _by_deref(
        self,
        g: _GroupEntry,
        lookup: dict[str, tuple[str, int]],
        known: dict[str, Member],
    ) -> None:
        """Name the members of one big group with the deref control (one base search,
        §6.2 step 3), checking each member's search base and object class as a
        search would. Member groups that must be expanded are left to the look-ups."""
        s = self.schema
        info = self.client.info
        threshold = self.cfg.ldap_deref_threshold
        if (
            threshold <= 0
            or len(lookup) <= threshold
            or info is None
            or deref.DEREF_OID not in info.controls
            or any(b.filter for b in s.user_bases + s.group_bases)  # as SSSD: no filters
        ):
            return
        # The member values come along: this search reads the group again, later than
        # the search that found it, and only a member it still lists and did not
        # dereference names nothing. One replaced in between is left to the look-ups
        # (dropping it stored the old and new versions' intersection: the kill soak).
        entries = self.client.search(
            g.entry.dn, "(objectClass=*)", [s.group_member], scope="base",
            deref_specs=[(s.group_member, s.deref_attrs)],
        )  # fmt: skip
        results = entries[0].deref if entries else None
        if results is None:
            return
        for r in results:
            k = normalize_dn(r.dn)
            if k not in lookup:
                continue
            e = Entry(r.dn, r.values)
            ocs = {v.lower() for v in r.values.get("objectclass", [])}
            m: Member
            if self._as_user(ocs, k):
                m = self._user_member(e, k, False)
            elif self._in_bases(k, s.group_bases):  # a group, if of the class (_classify)
                grp = self._group_entry(e, WALK)
                if grp is None or lookup[k][1] >= 0:
                    continue  # to be fetched with its members
                m = ("group" if grp.posix else WALK, grp.name)
            else:
                m = None
            known[k] = m
            del lookup[k]
        returned = {normalize_dn(r.dn) for r in results}
        listed = set(self._member_keys(entries[0].get(s.group_member)))
        for k in [k for k in lookup if k not in returned and k in listed]:
            known[k] = None  # the server dereferences only entries that exist
            del lookup[k]

    # -- groups: storing -----------------------------------------------------------

    def _scan(self, found: dict[str, _GroupEntry], known: dict[str, Member]) -> dict[str, _Scan]:
        """Read every fetched group's member list once (bigroupuser: 44,000 member
        values) into what storing needs: the direct member users and POSIX groups, the
        member groups, whether a member is still unknown, and the non-POSIX member
        groups walked through (item 8). A member fetched as a group counts as that
        group, whatever else named it. Four passes over the lists were 20 % of a cold
        initgroups's storing (py-spy, perf.readpath). The member users, most of the
        values, are named in C (a map over a dict of the users); the loop reads the
        rest, usually none."""
        out: dict[str, _Scan] = {}
        get, fget = known.get, found.get
        users = {mk: m[1] for mk, m in known.items() if m is not None and m[0] == "user"}
        for mk in found.keys() & users.keys():
            del users[mk]  # fetched as a group: counts as the group
        is_user, user_name = users.__contains__, users.__getitem__
        for k, g in found.items():
            sc = _Scan()
            keys = g.member_keys
            try:
                # Every member a user (bigroupuser's 2,000 direct groups): one pass.
                sc.users = dict.fromkeys(map(user_name, keys))
                out[k] = sc
                continue
            except KeyError:
                rest = list(filterfalse(is_user, keys))
                sc.users = dict.fromkeys(map(user_name, filter(is_user, keys)))
            for mk in rest:
                f = fget(mk)
                if f is not None:
                    sc.children.append(mk)
                    if f.posix:
                        sc.groups[f.name] = None
                    else:
                        sc.through = True
                        sc.walk.append(mk)
                    continue
                m = get(mk, _UNSEEN)
                if m is None:
                    continue  # names nothing: not a member
                if m is _UNSEEN:
                    sc.unknown = True
                elif m[0] == "user":
                    sc.users[m[1]] = None
                else:
                    sc.children.append(mk)
                    if m[0] == "group":
                        sc.groups[m[1]] = None
                    else:
                        sc.through = True  # walked through, not fetched: adds nothing
            out[k] = sc
        return out

    def _members(
        self, k: str, g: _GroupEntry, scans: dict[str, _Scan]
    ) -> tuple[Collection[str], Collection[str], list[list[str]]]:
        """(member user names, member POSIX group names) of ``g``. A non-POSIX member
        group is walked through: its members count one level deeper (item 8), each
        walked group at the depth it is first reached. The scan's own dicts when
        nothing is walked through (the caller only reads them): a dict is unique,
        so the record's encoding sorts it with no set built (encode_group_of). Third:
        the users reached only through walked groups, by depth (deep[0]: one level
        down): a parent that expands this group from levels above must leave the
        deeper ones out (records._pack_group, cache._expand)."""
        s = self.schema
        if self.cfg.ignore_group_members:
            return (), (), []
        if not s.bis:
            return _names_each(g.entry.get(s.group_member)), (), []
        levels = s.nesting_level
        sc = scans[k]
        if levels <= 0:
            return sc.users, (), []
        if not sc.walk:
            return sc.users, sc.groups, []
        users, groups = dict(sc.users), dict(sc.groups)
        # Through a walked group, the POSIX groups below count at their depth too,
        # flattened here: named in the record, a member group is expanded as one
        # level below this group, and the walked levels above it are lost (found by
        # fuzzing shapes: once a lookup of such a group stored its own member groups,
        # this group listed members past the nesting level). Breadth first, so each
        # group counts at the depth it is first reached.
        seen = {k}
        queue: deque[tuple[str, int]] = deque()
        for child in sc.walk:
            if child not in seen:
                seen.add(child)
                queue.append((child, 1))
        # Each user at the depth it is first reached (breadth first: its least), so
        # that a parent expanding this group from ``hop`` levels above keeps only
        # those within its own nesting level (found by fuzzing the cold path: after
        # an initgroups stored both, a parent listed a walked group's users one level
        # past the nesting level, where a cold lookup of it did not).
        deep: list[list[str]] = [[] for _ in range(levels)]
        while queue:
            cur, depth = queue.popleft()
            cs = scans[cur]
            layer = deep[depth - 1]
            for u in cs.users:
                if u not in users:
                    users[u] = None
                    layer.append(u)
            if depth < levels:
                for child in cs.children:
                    if child not in seen and child in scans:
                        seen.add(child)
                        queue.append((child, depth + 1))
        return list(users), list(groups), deep

    def _complete(self, found: dict[str, _GroupEntry], scans: dict[str, _Scan]) -> set[str]:
        """Groups whose member groups, down to the nesting level, were all fetched,
        so their expanded member list is exact. The others are stored already
        expired, as SSSD stores the incomplete groups of initgroups (§6.3 step 4):
        a direct lookup refreshes them first. A member that names nothing (deleted,
        outside the bases, neither user nor group) leaves a group complete."""
        levels = self.schema.nesting_level
        complete = set()
        for k in found:
            ok, seen, frontier = not scans[k].unknown, {k}, [k]
            for _ in range(levels):
                nxt = []
                for f in frontier:
                    for child in scans[f].children if f in scans else ():
                        if child not in found or scans[child].unknown:
                            ok = False
                        elif child not in seen:
                            seen.add(child)
                            nxt.append(child)
                if not ok or not nxt:
                    break
                frontier = nxt
            if ok:
                complete.add(k)
        return complete

    def _store_groups(
        self,
        batch: WriteBatch,
        found: dict[str, _GroupEntry],
        known: dict[str, Member],
        early: Callable[[WriteBatch], None] | None = None,
    ) -> None:
        """Store every fetched POSIX group. A group whose stamp (modifyTimestamp and
        CSN/USN) matches a stored, trusted one is only touched (the shortcut of §3.4);
        stamps are stored under validate.py's trust rule, and a group `cached cache -E`
        expired is always written again (SSSD resets the stamp instead, #5596), and so
        is a group not read whole within refresh_full_interval (validate.py)."""
        posix = {k: g for k, g in found.items() if g.posix}
        if not posix:
            return
        changed = validate.changed_since_read(self, found) if self.missing else set()
        if changed and not self._last_run:
            raise validate.ChangedDuringRequest(
                f"{len(changed)} group(s) changed while their members were named, e.g. "
                f"{found[next(iter(changed))].entry.dn}"
            )
        stored = self.cache.times("group", [g.name for g in posix.values()])
        scans = self._scan(found, known) if self.schema.bis else {}
        for k in changed:
            scans[k].unknown = True  # still changing: stored incomplete (expired)
        complete = self._complete(found, scans) if self.schema.bis else set(posix)
        with self.counters.timer(NESTED_COMPARE):
            # Only a stamp stored under the trust rule matches (validate.py); and not
            # for a group `cached cache -E` expired: its members are here anyway, so
            # they are named again (what SSSD's reset of the stamp does, #5596).
            same = [
                g
                for k, g in posix.items()
                if g.modstamp
                and k in complete
                and (t := stored.get(g.name)) is not None
                and t.data_expire != EXPIRED
                and (t.modstamp, t.usn) == (g.modstamp, g.usn)
            ]
            touch: set[str] = set()
            if same:
                # Touched only with the stored gid and DN too (validate.unchanged): the
                # same stamp can map to another gid (ID mapping, or ldap_group_gid_number
                # changed before a restart) — found in review — and not when due a whole
                # read. One read of each store for all of them, none on a cold fetch.
                names = [g.name for g in same]
                idents, late = self.cache.group_stamps(names), validate.due(self, names)
                unchanged = validate.unchanged
                # And only when the member groups named now are the stored ones: the
                # group's stamp covers its member values, not what each value names.
                # A member group deleted or renamed without referential integrity, no
                # longer of the group class, or an entry become a group, leaves the
                # stamp alone, and touched, the record kept expanding the old member
                # groups though this read named the new ones (found by fuzzing the
                # refresh: a deleted member group's users listed after expiry).
                key, keys = self.cache.key, {g.name: k for k, g in posix.items()}

                def same_below(g: _GroupEntry, held: Stamped) -> bool:
                    named = self._members(keys[g.name], g, scans)[1]
                    return {key(n) for n in held[4]} == {key(n) for n in named}

                touch = {g.name for g in same
                         if g.name not in late and unchanged(g, held := idents.get(g.name))
                         and held is not None and same_below(g, held)}  # fmt: skip
            put, name_attr = self.cache.put_group_of, self.schema.group_name
            trusted, started = validate.trusted_stamp, self.request_started
            if early is not None:
                # Every group this batch may get, before the first is put
                # (BackendCache.plan_early: what two of them write goes in the last commit).
                self.cache.plan_early(batch, [
                    (g.name, g.gid, k, _group_aliases(g, name_attr) if g.several_names else ())
                    for k, g in posix.items()
                ])  # fmt: skip
            for i, (k, g) in enumerate(posix.items()):
                if early is not None and i and not i % EARLY_CHUNK:
                    early(batch)  # each EARLY_CHUNK groups, while more follow
                ok = k in complete
                if g.name in touch:
                    self.cache.touch_group(batch, g.name, g.modstamp, g.usn)
                    continue
                users, groups, deep = self._members(k, g, scans)
                stamp = ""
                # A non-POSIX member group's members count as the group's own (item
                # 8): its stamp does not cover them (validate.py).
                if ok and not (k in scans and scans[k].through):
                    stamp = trusted(g.modstamp, g.usn, started)
                # Every posix _GroupEntry passed storable_group in _group_entry with
                # this name, gid and DN: not checked again (checked=True).
                put(batch, g.name, g.gid, g.entry.dn, users, groups, stamp, g.usn, ok,
                    _group_aliases(g, name_attr), checked=True, whole=True,
                    deep=deep)  # fmt: skip

    def _group(self, filt: str, name: str | None, gid: int | None) -> Result:
        s = self._prepare()
        # The stored group and the groups below it its answer is expanded from.
        held = validate.stored_closure(self, name, gid)
        self._from_entries = bool(held and validate.due(self, held))
        if (
            held
            and not self._from_entries
            and not self.cfg.ignore_group_members
            and validate.refresh_group(self, filt, name, held)
        ):
            # Held, and unchanged with every group below it: validated by stamps, no
            # member value fetched (validate.py).
            return Result(Outcome.FOUND)
        entries = self._search_group_bases(filt)
        member = self._gkeys().member
        cap, sweep = self._sweep_ahead(max((len(e.attrs.get(member, ())) for e in entries),
                                           default=0))  # fmt: skip
        top = None
        for g in [g for e in entries if (g := self._group_entry(e)) is not None]:
            if name is None or self.cache.key(name) in {
                self.cache.key(n) for n in _entry_names(g.entry, s.group_name)
            }:
                top = g
                break
        if top is None:
            with self.cache.write() as batch:
                old = (
                    name
                    if gid is None
                    else getattr(self.cache.group_by_gid(gid).value, "name", None)
                )
                if old is not None:
                    self.cache.delete_group(batch, old)
            return Result(Outcome.NOT_FOUND)
        key = normalize_dn(top.entry.dn)
        found = {key: top}
        known: dict[str, Member] = {}
        if s.bis and not self.cfg.ignore_group_members:
            budget = {key: s.nesting_level}
            with self.counters.timer(NESTED_RESOLVE):
                first_round = self._unknown(found, budget, known)
                if sweep:  # its answer read now (None: a server limit cut it, paged)
                    self._swept = self._swept_unpaged(cap, sweep, self.client.search_many(sweep))
                # Deref names what a sweep did not (groups, or all when not swept).
                if self.sweep_before_deref:
                    self._sweep_users(first_round, known)
                self._by_deref(top, first_round, known)
                self._closure(found, budget, known, [])
        with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
            self._store_groups(batch, found, known)
            if gid is not None and top.posix:
                # Another group of the closure may share the gid (stored below its
                # level, incomplete): the answer is the group looked up.
                self.cache.own_gid(batch, top.name, top.gid)
        return Result(Outcome.FOUND)

    def group_by_name(self, name: str) -> Result:
        def run() -> Result:
            s = self._prepare()
            return self._group(s.group_by_name(name), name, None)

        return self._run(REQ_GROUP, "group", name, run)

    def group_by_gid(self, gid: int) -> Result:
        def run() -> Result:
            self._prepare()
            if not self.cfg.id_in_range(gid):
                return Result(Outcome.NOT_FOUND)
            return self._group(self._group_by_gid_filter(gid), None, gid)

        return self._run(REQ_GROUP, "group", str(gid), run)

    # -- initgroups ----------------------------------------------------------------

    def initgroups(self, name: str) -> Result:
        return self._run(REQ_INITGR, "initgroups", name, lambda: self._initgroups(name))

    def _initgroups_user(self, name: str) -> tuple[User | None, list[Entry]]:
        """The user of an initgroups: from the cache when it was stored within
        ``validate.USER_JUST_STORED`` seconds (the getpwnam that `id` or a login makes
        first), else one search; (None, []) and the cached entry deleted when the server
        has no such user."""
        s = self.schema
        cached = self.cache.user_by_name(name)
        user = cached.value if cached.state is State.VALID else None
        if (
            user is not None
            and user.dn
            and time.time() - cached.times.last_update < validate.USER_JUST_STORED
        ):
            return user, []
        entries = self._search(s.user_bases, s.user_by_name(name), s.user_attrs)
        key = self.cache.key(name)
        # Any value of a multi-valued name finds the user (SSSD's nameAlias); the
        # groups are stored under its primary name (docs/compatibility.md §9.5).
        user = next(
            (
                u
                for e in entries
                if key in {self.cache.key(n) for n in _entry_names(e, s.user_name)}
                and (u := self._to_user(e))
            ),
            None,
        )
        if user is None:
            with self.cache.write() as batch:
                self.cache.delete_user(batch, name)
            return None, []
        return user, entries

    def _initgroups(self, name: str) -> Result:
        s = self._prepare()
        user, entries = self._initgroups_user(name)
        if user is None:
            return Result(Outcome.NOT_FOUND)

        found: dict[str, _GroupEntry] = {}
        known: dict[str, Member] = {}
        # The primary group, when the cache does not hold it (§6.3 step 5): asked in
        # the first search of the walk, not in a search of its own.
        primary_state = self.cache.group_by_gid(user.gid).state
        primary = user.gid if primary_state is State.MISSING else None
        stored = self.cache.initgroups(user.name).value
        if not s.ad and not self.cfg.ignore_group_members and stored and stored.fetched:
            # A refresh: stamps first, whole entries only for what changed (validate.py).
            # The primary group expired too (`cached cache -E`) is validated in the same
            # round trip, so `id`'s getgrgid of it is answered from the cache.
            expired = primary_state in (State.MISSING, State.EXPIRED)
            validate.refresh_initgroups(self, user, entries, user.gid if expired else None)
            return Result(Outcome.FOUND)
        if s.bis:
            with self.counters.timer(NESTED_RESOLVE):
                mine = self._closure(found, {}, known, [user.dn], primary)
        else:
            # Split where a size limit cuts it, as the refresh's search of the same
            # filter (validate.walk_stamps) is: a user in more groups than the limit.
            attrs = s.group_attrs(members=not self.cfg.ignore_group_members)
            walk: list[_Job] = [(s.group_bases, [("x", s.groups_with_members([user.name]))],
                                 attrs, None)]  # fmt: skip
            for e in self._split_search_many(walk, self._round_filter)[0]:
                if (g := self._group_entry(e)) is not None:
                    found[normalize_dn(e.dn)] = g
            mine = set(found)
            if primary is not None and not any(g.gid == primary for g in found.values()):
                for g in self._search_groups(self._group_by_gid_filter(primary))[:1]:
                    found[normalize_dn(g.entry.dn)] = g

        return self._store_initgroups(name, user, entries, found, known, mine)

    def _store_initgroups(
        self,
        name: str,
        user: User,
        entries: list[Entry],
        found: dict[str, _GroupEntry],
        known: dict[str, Member],
        mine: set[str],
    ) -> Result:
        """Store an initgroups answer in one write: the user when it was searched, every
        fetched group, the groups the user left (re-read, or deleted when gone) and the
        user's list of ``mine`` (the LDAP and AD providers share it)."""
        gone = self._vanished(name, found, known)
        with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
            if entries:
                self._store_users(batch, entries)
            self._store_groups(batch, found, known, self._early_commits(name, found, mine))
            for g_name in gone:
                self.cache.delete_group(batch, g_name)
            gids = {user.gid} | {found[k].gid for k in mine}
            self.cache.put_initgroups(batch, user.name, gids, [found[k].name for k in mine])
        return Result(Outcome.FOUND)

    def _early_commits(
        self, name: str, found: dict[str, _GroupEntry], mine: set[str]
    ) -> Callable[[WriteBatch], None] | None:
        """What _store_groups calls after each EARLY_CHUNK groups of a big answer:
        the groups new to the cache are committed at once, and the user's among
        them told to on_groups_stored, so the responder puts them in the memory
        cache while the rest are encoded (BackendCache.commit_new_groups)."""
        hook = self.on_groups_stored
        if hook is None or len(mine) < 2 * EARLY_CHUNK:
            return None
        key = self.cache.key
        names = {key(found[k].name): found[k].name for k in mine}

        def commit(batch: WriteBatch) -> None:
            ours = [names[k] for k in self.cache.commit_new_groups(batch) if k in names]
            if ours:
                hook(name, ours)

        return commit

    def _vanished(
        self, name: str, found: dict[str, _GroupEntry], known: dict[str, Member]
    ) -> list[str]:
        """Groups the user was in at the last refresh but not now: the membership was
        removed or the group deleted. Re-read them into ``found``, their members
        named like any fetched group's, so the change is stored valid and exact;
        return the names of those that no longer exist (§7, PR #543)."""
        old = self.cache.initgroups(name).value
        if old is None or not old.groups:
            return []
        now = {self.cache.key(g.name) for g in found.values()}
        vanished = [g for g in old.groups if self.cache.key(g) not in now]
        present = set()
        s = self.schema
        reread: dict[str, int] = {}
        for g in self._groups_by_name(vanished):
            k = normalize_dn(g.entry.dn)
            if k not in found:
                found[k] = g
                reread[k] = s.nesting_level
            present.add(self.cache.key(g.name))
        if reread and s.bis and not self.cfg.ignore_group_members:
            with self.counters.timer(NESTED_RESOLVE):
                self._closure(found, reread, known, [])
        return [g for g in vanished if self.cache.key(g) not in present]
