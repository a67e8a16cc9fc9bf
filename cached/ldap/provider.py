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
* member DN -> name without a search per member: the RDN when it is the name
  attribute under the right search base (``ldap_member_rdn_shortcut``, as nslcd),
  else the cache's DN index, else — for a group with more such members than
  ``ldap_deref_threshold`` — one base search of that group with the deref control,
  else batched searches by RDN value.

Why the RDN before the deref control: measured on the bigroupuser directory, a cold
initgroups took 0.6 s on the RDN path and 1.7-2.2 s with the deref control on every
group search (the server dereferences 44,000 member values and the client walks
their BER). The price of the shortcut: a member DN naming a deleted entry is listed
until the group entry is corrected. ``ldap_member_rdn_shortcut = false`` gives
SSSD's exact behaviour at the deref control's cost.

rfc2307 has no nesting: one search answers initgroups (``memberUid=<name>``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cached.cache import DomainCache, State, StoreWriteError, WriteBatch
from cached.config import DomainConfig
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
from cached.dn import first_rdn, is_under, normalize_dn
from cached.ldap import deref
from cached.ldap.client import Entry, LdapClient, LdapError, LdapOffline
from cached.ldap.schema import BATCH, SchemaMap, first
from cached.model import Group, User

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not-found"  # the server says it does not exist (cache entry deleted)
    OFFLINE = "offline"  # no server reachable: serve what is cached
    ERROR = "error"  # the server refused the request: serve what is cached


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    message: str = ""


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _names(values: list[bytes]) -> list[str] | None:
    """Name values as text, or None when one is not UTF-8 or holds a NUL: such an
    entry is refused whole (docs/threat-model.md). Replacing bad bytes with U+FFFD would let two
    directory names share one cache key, and SSSD's C strings end at a NUL."""
    try:
        names = [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return None
    return None if any("\0" in n for n in names) else names


def _names_each(values: list[bytes]) -> list[str]:
    """Member values as text, leaving out those ``_names`` would refuse."""
    return [n[0] for v in values if (n := _names([v]))]


def _int(values: list[bytes]) -> int | None:
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None


# A resolved member: ("user" | "group", name), or None for an entry that is neither
# (or does not exist).
Member = tuple[str, str] | None


@dataclass
class _GroupEntry:
    """A group as fetched, before its members are resolved to names."""

    entry: Entry
    name: str
    gid: int
    modstamp: str
    usn: str
    member_dns: list[str] = field(default_factory=list)  # rfc2307bis
    member_keys: list[str] = field(default_factory=list)  # normalize_dn of member_dns
    group_like: list[tuple[str, str]] | None = None  # (key, dn) of members that may be groups


class LdapProvider:
    def __init__(
        self,
        cfg: DomainConfig,
        client: LdapClient,
        cache: DomainCache,
        counters: Counters = COUNTERS,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.cache = cache
        self.counters = counters
        self.schema = SchemaMap.from_config(cfg)
        self._bases_known = bool(self.schema.user_base and self.schema.group_base)
        self._maybe_group_memo: dict[str, bool] = {}

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
            self.schema = self.schema.with_bases(
                self.schema.user_base or base, self.schema.group_base or base
            )
            self._bases_known = True
            self._maybe_group_memo.clear()
        return self.schema

    def _run(self, stat: str, kind: str, key: str, fn: Callable[[], Result]) -> Result:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            # Not a name any directory can hold (the NSS codec already refuses such
            # bytes; this guards other callers).
            return Result(Outcome.NOT_FOUND, "name is not valid UTF-8")
        with self.counters.timer(stat):
            try:
                return fn()
            except LdapOffline as e:
                return Result(Outcome.OFFLINE, str(e))
            except StoreWriteError as e:
                # The cache could not be written (full filesystem): one line, and the
                # responder serves what the cache holds.
                log.error("%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))
            except LdapError as e:
                log.error("%s %s: %s", kind, key, e)
                return Result(Outcome.ERROR, str(e))

    # -- users ---------------------------------------------------------------------

    def _to_user(self, e: Entry, want: str | None = None) -> User | None:
        s = self.schema
        names = _names(e.get(s.user_name))
        if names is None:
            log.warning("%s: %s is not UTF-8 text; user ignored", e.dn, s.user_name)
            return None
        if not names:
            return None
        name = names[0]
        if want is not None:
            # A multi-valued name attribute: answer with the value that was asked for.
            name = (
                want
                if want in names
                else next((n for n in names if n.lower() == want.lower()), name)
            )
        uid, gid = _int(e.get(s.user_uid)), _int(e.get(s.user_gid))
        if uid is None or gid is None:
            log.warning("%s: no numeric %s/%s; not a POSIX user", e.dn, s.user_uid, s.user_gid)
            return None
        if not self.cfg.id_in_range(uid):
            return None
        if not self.cfg.id_in_range(gid):
            # SSSD: "filtered out! (primary gid out of range)"; gid 0 always is.
            log.debug("%s: primary gid %d out of range; user filtered out", e.dn, gid)
            return None
        gecos = first(e.get(s.user_gecos)) or first(e.get("cn"))
        return User(
            name, uid, gid, gecos, first(e.get(s.user_home)), first(e.get(s.user_shell)), e.dn
        )

    def _store_users(
        self, batch: WriteBatch, entries: list[Entry], want: str | None
    ) -> User | None:
        found = None
        s = self.schema
        for e in entries:
            u = self._to_user(e, want)
            if u is None:
                continue
            usn = first(e.get(s.user_usn)) if s.user_usn else ""
            self.cache.put_user(batch, u, first(e.get(s.user_modstamp)), usn)
            if found is None:
                found = u
        return found

    def user_by_name(self, name: str) -> Result:
        def run() -> Result:
            s = self._prepare()
            entries = self.client.search(s.user_base, s.user_by_name(name), s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                user = self._store_users(batch, entries, name)
                if user is None:
                    self.cache.delete_user(batch, name)
                    return Result(Outcome.NOT_FOUND)
            # case_sensitive = true and the server matched another case: not this name.
            if self.cache.key(user.name) != self.cache.key(name):
                return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", name, run)

    def user_by_uid(self, uid: int) -> Result:
        def run() -> Result:
            s = self._prepare()
            if not self.cfg.id_in_range(uid):
                return Result(Outcome.NOT_FOUND)
            entries = self.client.search(s.user_base, s.user_by_uid(uid), s.user_attrs)
            with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
                if self._store_users(batch, entries, None) is None:
                    old = self.cache.user_by_uid(uid).value
                    if old is not None:
                        self.cache.delete_user(batch, old.name)
                    return Result(Outcome.NOT_FOUND)
            return Result(Outcome.FOUND)

        return self._run(REQ_USER, "user", str(uid), run)

    # -- groups: fetching ----------------------------------------------------------

    def _group_entry(self, e: Entry, want: str | None = None) -> _GroupEntry | None:
        s = self.schema
        names = _names(e.get(s.group_name))
        gid = _int(e.get(s.group_gid))
        if names is None:
            log.warning("%s: %s is not UTF-8 text; group ignored", e.dn, s.group_name)
            return None
        if not names or gid is None or not self.cfg.id_in_range(gid):
            return None
        name = names[0]
        if want is not None:
            name = next((n for n in names if n.lower() == want.lower()), name)
        if not self.cache.storable_group(name, gid, e.dn):
            return None  # skipped alone, one log line; the rest is stored (docs/threat-model.md)
        g = _GroupEntry(
            e, name, gid, first(e.get(s.group_modstamp)),
            first(e.get(s.group_usn)) if s.group_usn else "",
        )  # fmt: skip
        if s.bis:
            g.member_dns = _names_each(e.get(s.group_member))
            g.member_keys = [normalize_dn(dn) for dn in g.member_dns]
        return g

    def _search_groups(self, filt: str) -> list[_GroupEntry]:
        s = self.schema
        entries = self.client.search(
            s.group_base, filt, s.group_attrs(members=not self.cfg.ignore_group_members)
        )
        return [g for e in entries if (g := self._group_entry(e)) is not None]

    def _fetch_groups_by_dn(self, dns: list[str]) -> list[_GroupEntry]:
        """Groups by DN, batched: an OR-filter of their RDN values under the group
        base, keeping only entries whose DN is one asked for."""
        s = self.schema
        wanted = {normalize_dn(dn) for dn in dns}
        by_attr: dict[str, set[str]] = {}
        for dn in dns:
            attr, value = first_rdn(dn)
            if attr:
                by_attr.setdefault(attr, set()).add(value)
        out: list[_GroupEntry] = []
        for attr, values in by_attr.items():
            for chunk in _chunks(sorted(values), BATCH):
                for g in self._search_groups(s.group_filter(s.any_of(attr, chunk))):
                    if normalize_dn(g.entry.dn) in wanted:
                        out.append(g)
        return out

    def _maybe_group(self, key: str, dn: str) -> bool:
        """Could this member DN be a group? A guess from where it lives and its RDN;
        fetching it as a group settles it (users are simply not found)."""
        guess = self._maybe_group_memo.get(key)
        if guess is None:
            s = self.schema
            gkey, ukey = normalize_dn(s.group_base), normalize_dn(s.user_base)
            attr = first_rdn(dn)[0]
            uname, gname = s.user_name.lower(), s.group_name.lower()
            guess = is_under(key, gkey) and not (is_under(key, ukey) and attr == uname != gname)
            if len(self._maybe_group_memo) > 200_000:
                self._maybe_group_memo.clear()
            self._maybe_group_memo[key] = guess
        return guess

    def _group_like(self, g: _GroupEntry) -> list[tuple[str, str]]:
        """The members of ``g`` that may be groups, computed once per fetched group."""
        if g.group_like is None:
            g.group_like = [
                (k, dn)
                for dn, k in zip(g.member_dns, g.member_keys, strict=True)
                if self._maybe_group(k, dn)
            ]
        return g.group_like

    def _walk_down(self, found: dict[str, _GroupEntry], roots: list[str], levels: int) -> None:
        """Fetch the member groups of ``roots`` (DN keys) level by level, ``levels``
        deep, into ``found`` (reference §6.2, batched)."""
        frontier = roots
        for _ in range(levels):
            missing: dict[str, str] = {}
            for key in frontier:
                for k, dn in self._group_like(found[key]):
                    if k not in found and k not in missing:
                        missing[k] = dn
            if not missing:
                return
            self.counters.add(NESTED_LEVELS, 1, 0.0, 1)
            frontier = []
            for g in self._fetch_groups_by_dn(list(missing.values())):
                k = normalize_dn(g.entry.dn)
                if k not in found:
                    found[k] = g
                    frontier.append(k)

    # -- groups: members to names --------------------------------------------------

    def _resolve_members(self, todo: dict[str, _GroupEntry], found: dict[str, _GroupEntry]
                         ) -> dict[str, tuple[list[str], list[str]]]:  # fmt: skip
        """For each group in ``todo``: (member user names, member group names)."""
        s = self.schema
        if self.cfg.ignore_group_members:
            return {k: ([], []) for k in todo}
        if not s.bis:
            return {k: (_names_each(g.entry.get(s.group_member)), []) for k, g in todo.items()}
        with self.counters.timer(NESTED_RESOLVE):
            known: dict[str, Member] = {k: ("group", g.name) for k, g in found.items()}
            pending: dict[str, str] = {}
            for g in todo.values():
                for dn, k in zip(g.member_dns, g.member_keys, strict=True):
                    if k not in known:
                        pending[k] = dn
            if pending and self.cfg.ldap_member_rdn_shortcut:
                self._by_rdn(pending, known)
            if pending:
                for dn, kind_name in self.cache.resolve_dns(list(pending.values())).items():
                    k = normalize_dn(dn)
                    known[k] = kind_name
                    pending.pop(k, None)
            if pending:
                self._by_deref(todo, pending, known)
            if pending:
                known.update(self._lookup_dns(pending))
        out: dict[str, tuple[list[str], list[str]]] = {}
        for k, g in todo.items():
            users: list[str] = []
            groups: list[str] = []
            for mk in g.member_keys:
                member = known.get(mk)
                if member is not None:
                    (users if member[0] == "user" else groups).append(member[1])
            out[k] = (users, groups)
        return out

    def _by_rdn(self, pending: dict[str, str], known: dict[str, Member]) -> None:
        """Name members by their RDN when it is unambiguous: the user-name attribute
        under the user base, or the group-name attribute under the group base."""
        s = self.schema
        ukey, gkey = normalize_dn(s.user_base), normalize_dn(s.group_base)
        uname, gname = s.user_name.lower(), s.group_name.lower()
        for k, dn in list(pending.items()):
            attr, value = first_rdn(dn)
            in_u, in_g = is_under(k, ukey), is_under(k, gkey)
            if in_u and attr == uname and not (in_g and attr == gname):
                known[k] = ("user", value)
            elif in_g and attr == gname and not (in_u and attr == uname):
                known[k] = ("group", value)
            else:
                continue
            del pending[k]

    def _by_deref(
        self, todo: dict[str, _GroupEntry], pending: dict[str, str], known: dict[str, Member]
    ) -> None:
        """One deref search per group with more unnamed members than the threshold
        (reference §6.2 step 3); a member the server does not return does not exist."""
        info = self.client.info
        threshold = self.cfg.ldap_deref_threshold
        if threshold <= 0 or info is None or deref.DEREF_OID not in info.controls:
            return
        s = self.schema
        specs = [(s.group_member, s.deref_attrs)]
        user_oc, group_oc = s.user_oc.lower(), s.group_oc.lower()
        uname, gname = s.user_name.lower(), s.group_name.lower()
        for g in todo.values():
            unnamed = [k for k in g.member_keys if k in pending]
            if len(unnamed) <= threshold:
                continue
            entries = self.client.search(
                g.entry.dn, "(objectClass=*)", [s.group_gid], scope="base", deref_specs=specs
            )
            results = entries[0].deref if entries else None
            if results is None:
                continue
            for r in results:
                ocs = {
                    v.decode("utf-8", "replace").lower() for v in r.values.get("objectclass", [])
                }
                k = normalize_dn(r.dn)
                if group_oc in ocs and r.values.get(gname):
                    known[k] = ("group", first(r.values[gname]))
                elif user_oc in ocs and r.values.get(uname):
                    known[k] = ("user", first(r.values[uname]))
                else:
                    known[k] = None
            for k in unnamed:
                known.setdefault(k, None)
                pending.pop(k, None)

    def _lookup_dns(self, dns: dict[str, str]) -> dict[str, Member]:
        """Batched searches by RDN value for member DNs nothing else could name."""
        s = self.schema
        out: dict[str, Member] = dict.fromkeys(dns)
        by_attr: dict[str, set[str]] = {}
        for dn in dns.values():
            attr, value = first_rdn(dn)
            if attr:
                by_attr.setdefault(attr, set()).add(value)
        for attr, values in by_attr.items():
            for chunk in _chunks(sorted(values), BATCH):
                filt = s.any_of(attr, chunk)
                for e in self.client.search(
                    s.user_base, f"(&(objectClass={s.user_oc}){filt})", [s.user_name]
                ):
                    k = normalize_dn(e.dn)
                    if k in out and e.get(s.user_name):
                        out[k] = ("user", first(e.get(s.user_name)))
                for e in self.client.search(s.group_base, s.group_filter(filt), [s.group_name]):
                    k = normalize_dn(e.dn)
                    if k in out and out[k] is None and e.get(s.group_name):
                        out[k] = ("group", first(e.get(s.group_name)))
        return out

    # -- groups: storing -----------------------------------------------------------

    def _complete(self, found: dict[str, _GroupEntry]) -> set[str]:
        """Groups whose member groups, down to the nesting level, were all fetched,
        so their expanded member list is exact. The others are stored already
        expired, as SSSD stores the incomplete groups of initgroups (§6.3 step 4):
        a direct lookup refreshes them first."""
        levels = self.schema.nesting_level
        children = {k: [mk for mk, _ in self._group_like(g)] for k, g in found.items()}
        complete = set()
        for k in found:
            ok, seen, frontier = True, {k}, [k]
            for _ in range(levels):
                nxt = []
                for f in frontier:
                    for child in children.get(f, ()):
                        if child not in found:
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

    def _store_groups(self, batch: WriteBatch, found: dict[str, _GroupEntry]) -> None:
        """Store every fetched group. A group whose modifyTimestamp matches the
        stored one is only touched (the shortcut of §3.4; invalidation clears the
        stored value so it cannot hide a change, SSSD #5596)."""
        if not found:
            return
        stored = self.cache.times("group", [g.name for g in found.values()])
        complete = self._complete(found)
        todo: dict[str, _GroupEntry] = {}
        with self.counters.timer(NESTED_COMPARE):
            for k, g in found.items():
                t = stored.get(g.name)
                if g.modstamp and k in complete and t is not None and t.modstamp == g.modstamp:
                    self.cache.touch_group(batch, g.name, g.modstamp, g.usn)
                else:
                    todo[k] = g
        resolved = self._resolve_members(todo, found)
        with self.counters.timer(NESTED_COMPARE):
            for k, g in todo.items():
                users, groups = resolved[k]
                ok = k in complete
                self.cache.put_group(
                    batch,
                    Group(g.name, g.gid, g.entry.dn, tuple(users), tuple(groups)),
                    g.modstamp if ok else "",
                    g.usn,
                    complete=ok,
                )

    def _group(self, filt: str, name: str | None, gid: int | None) -> Result:
        s = self._prepare()
        top = None
        for g in self._search_groups(filt):
            if name is None or self.cache.key(g.name) == self.cache.key(name):
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
        found = {normalize_dn(top.entry.dn): top}
        if s.bis and not self.cfg.ignore_group_members:
            self._walk_down(found, list(found), s.nesting_level)
        with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
            self._store_groups(batch, found)
        return Result(Outcome.FOUND)

    def group_by_name(self, name: str) -> Result:
        def run() -> Result:
            s = self._prepare()
            return self._group(s.group_by_name(name), name, None)

        return self._run(REQ_GROUP, "group", name, run)

    def group_by_gid(self, gid: int) -> Result:
        def run() -> Result:
            s = self._prepare()
            if not self.cfg.id_in_range(gid):
                return Result(Outcome.NOT_FOUND)
            return self._group(s.group_by_gid(gid), None, gid)

        return self._run(REQ_GROUP, "group", str(gid), run)

    # -- initgroups ----------------------------------------------------------------

    def initgroups(self, name: str) -> Result:
        return self._run(REQ_INITGR, "initgroups", name, lambda: self._initgroups(name))

    def _initgroups(self, name: str) -> Result:
        s = self._prepare()
        # The user: from the cache when it is fresh (the getpwnam that `id` makes
        # first has just stored it), else one search.
        cached = self.cache.user_by_name(name)
        entries: list[Entry] = []
        user = cached.value if cached.state is State.VALID else None
        if user is None or not user.dn:
            entries = self.client.search(s.user_base, s.user_by_name(name), s.user_attrs)
            user = next((u for e in entries if (u := self._to_user(e, name))), None)
            if user is None or self.cache.key(user.name) != self.cache.key(name):
                with self.cache.write() as batch:
                    self.cache.delete_user(batch, name)
                return Result(Outcome.NOT_FOUND)

        found: dict[str, _GroupEntry] = {}
        if s.bis:
            frontier = [user.dn]
            for _level in range(s.nesting_level + 1):
                new: list[str] = []
                for chunk in _chunks(frontier, BATCH):
                    for g in self._search_groups(s.groups_with_members(chunk)):
                        k = normalize_dn(g.entry.dn)
                        if k not in found:
                            found[k] = g
                            new.append(g.entry.dn)
                self.counters.add(NESTED_LEVELS, 1, 0.0, 1)
                if not new:
                    break
                frontier = new
            # Every group of the upward walk is one the user reaches within the level.
            mine = list(found)
            if not self.cfg.ignore_group_members:
                # Member groups of these that the user is not in (siblings): fetched
                # so every stored group's expanded member list is exact.
                self._walk_down(found, list(found), s.nesting_level)
        else:
            for g in self._search_groups(s.groups_with_members([user.name])):
                found[normalize_dn(g.entry.dn)] = g
            mine = list(found)

        # The primary group, when the cache does not hold it (§6.3 step 5).
        if self.cache.group_by_gid(user.gid).state is State.MISSING and not any(
            g.gid == user.gid for g in found.values()
        ):
            for g in self._search_groups(s.group_by_gid(user.gid))[:1]:
                found[normalize_dn(g.entry.dn)] = g

        gone = self._vanished(name, found)
        with self.counters.timer(LDAP_DECODE), self.cache.write() as batch:
            if entries:
                self._store_users(batch, entries, name)
            self._store_groups(batch, found)
            for g_name in gone:
                self.cache.delete_group(batch, g_name)
            gids = {user.gid} | {found[k].gid for k in mine}
            self.cache.put_initgroups(batch, user.name, gids, [found[k].name for k in mine])
        return Result(Outcome.FOUND)

    def _vanished(self, name: str, found: dict[str, _GroupEntry]) -> list[str]:
        """Groups the user was in at the last refresh but not now: the membership was
        removed or the group deleted. Re-read them into ``found`` so the change is
        stored; return the names of those that no longer exist (§7, PR #543)."""
        old = self.cache.initgroups(name).value
        if old is None or not old.groups:
            return []
        now = {self.cache.key(g.name) for g in found.values()}
        vanished = [g for g in old.groups if self.cache.key(g) not in now]
        present = set()
        s = self.schema
        for chunk in _chunks(vanished, BATCH):
            for g in self._search_groups(s.group_filter(s.any_of(s.group_name, chunk))):
                found.setdefault(normalize_dn(g.entry.dn), g)
                present.add(self.cache.key(g.name))
        return [g for g in vanished if self.cache.key(g) not in present]
