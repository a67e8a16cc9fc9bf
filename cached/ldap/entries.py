"""Directory entries decoded into the model: users, groups and what a member DN names.

Names are refused whole when a value is not UTF-8 or holds a NUL (docs/threat-model.md);
ids are read as the INTEGER syntax spells them; a member is named by its *entry*
(docs/compatibility.md §9.5), never by the spelling of its DN. What differs on Active
Directory (ids mapped from SIDs, the look-up assertion, stamps per DC) is a
:class:`Hooks` object, cached/ldap/ad.py's ``AdHooks``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain, filterfalse
from typing import Final, NamedTuple

from cached.config import PrivateGroups, SearchBase
from cached.dn import ALIASED_TYPES, in_scope, normalize_dn, normalize_dns, rdn_avas
from cached.ldap.computed import URL_ATTR, computed
from cached.ldap.context import Context
from cached.ldap.exchange import Entry
from cached.ldap.schema import MEMBER_BATCH, SchemaMap, c_string, escape, first
from cached.model import User
from cached.ratelimit import RateLimitedLog

try:
    from cached.ldap import _ber
except ImportError:  # not built: the references
    _ber = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
# What one directory entry makes us say: a search can return 400,000 such entries, so
# one line per kind per minute, then a count of the rest.
limited = RateLimitedLog(log)


class MemberKind(StrEnum):
    USER = "user"
    GROUP = "group"
    WALK = "walk"  # a non-POSIX group: nesting walks through it, it is never answered


class Member(NamedTuple):
    """A resolved member DN. None stands for a DN that names nothing we may answer:
    no such entry, outside every search base, neither a user nor a group, a user
    without ids (docs/compatibility.md §9.5)."""

    kind: MemberKind
    name: str


USER, GROUP, WALK = MemberKind.USER, MemberKind.GROUP, MemberKind.WALK
# ``new_member(Member, (kind, name))``: a Member made by tuple.__new__, as cheap as the
# plain tuple it replaced. NamedTuple's own __new__ is a Python function (0.7 µs a call)
# and a member is made per user of a sweep or deref answer (5,000 for large01).
new_member: Final = tuple.__new__
UNSEEN = Member(WALK, "")  # sentinel, compared by identity: not looked up yet
Known = dict[str, Member | None]  # DN key -> what it names


def entry_names(e: Entry, attr: str) -> list[str]:
    """Every usable value of an entry's name attribute (aliases of a multi-valued name)."""
    return names_each(e.get(attr))


def names(values: list[bytes]) -> list[str] | None:
    """Name values as text, or None when one is not UTF-8 or holds a NUL: such an
    entry is refused whole (docs/threat-model.md). Replacing bad bytes with U+FFFD would let two
    directory names share one cache key, and SSSD's C strings end at a NUL."""
    try:
        if len(values) == 1:  # the common case, without the list and generator
            n = values[0].decode("utf-8")
            return None if "\0" in n else [n]
        out = [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return None
    return None if any("\0" in n for n in out) else out


def names_each(values: list[bytes]) -> list[str]:
    """Member values as text, leaving out those ``names`` would refuse. Inline rather
    than through ``names`` per value: ~100,000 values per cold initgroups of a user in
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


def int_id(values: list[bytes]) -> int | None:
    """An id as the INTEGER syntax spells it (RFC 4517 §3.3.16: ASCII digits, no sign
    for an id, no padding); None for anything else. Python's ``int`` also takes
    ``2_7``, ``+28`` and `` 28 `` (only a hostile server sends them, slapd checks the
    syntax): such a value is no id, as in SSSD's strtouint32."""
    if not values:
        return None
    v = values[0]
    return int(v) if v.isdigit() else None  # bytes.isdigit: ASCII digits only


def primary_name(dn: str, attr: str, values: list[str]) -> str:
    """The name of an entry with several values of its name attribute: the one
    its RDN spells, else the first (SSSD's sdap_get_primary_name)."""
    if len(values) == 1:
        return values[0]
    a = attr.lower()
    for rattr, rvalue in rdn_avas(dn):
        if rattr == a:
            folded = rvalue.lower()
            return next((n for n in values if n.lower() == folded), values[0])
    return values[0]


@dataclass(slots=True)
class GroupEntry:
    """A group as fetched, before its members are resolved to names."""

    entry: Entry
    name: str
    gid: int
    modstamp: str
    usn: str
    # rfc2307bis: normalize_dn of each member value (the values ``names_each`` keeps);
    # a spelling of each key is in MemberKeys.spelled.
    member_keys: list[str] = field(default_factory=list)
    posix: bool = True  # False: walked through by nesting, never stored
    several_names: bool = False  # more than one name value: aliases (group_aliases)


def group_aliases(g: GroupEntry, attr: str) -> list[str] | tuple[()]:
    """The names a group is also found by: with one name value, that value is its
    name and no alias (nothing read again for each of 2,085 groups)."""
    return names_each(g.entry.get(attr)) if g.several_names else ()


@dataclass(frozen=True, slots=True)
class GroupKeys:
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
    spec: FieldSpec  # what group_fields reads

    @classmethod
    def of(cls, s: SchemaMap) -> GroupKeys:
        asked = {a.lower() for a in s.member_attrs()}
        plain = frozenset(asked - {URL_ATTR.lower()}) if URL_ATTR.lower() in asked else None
        name, modstamp, usn = s.group_name.lower(), s.group_modstamp.lower(), s.group_usn.lower()
        oc, oc_lower = s.group_oc.encode(), s.group_oc.lower().encode()
        spec = (name, s.group_gid.lower(), modstamp, usn, oc, oc_lower, plain)
        return cls(s, name, modstamp, usn, s.group_member.lower(), oc, oc_lower, plain, spec)


# GroupKeys.spec: the lower-cased keys of a group's name, gid, modstamp and usn ("":
# none), its class as configured and lower-cased, and GroupKeys.plain.
FieldSpec = tuple[str, str | None, str, str, bytes, bytes, frozenset[str] | None]
# group_fields' answer: the name values as text (None: one is not UTF-8 or holds a
# NUL), the gid (None: none, or not the INTEGER syntax), of the group class, the
# modstamp and usn, the members computed by the server, more than one name value.
Fields = tuple[list[str] | None, int | None, bool, str, str, bool, bool]


def read_group_fields(attrs: dict[str, list[bytes]], spec: FieldSpec) -> Fields:
    """What Decoder.group_entry reads of a group entry's attributes (Entry.attrs), by
    ``spec`` (GroupKeys.spec). The reference of ``_ber.group_fields`` (cached/ldap/_ber.c),
    which gives the same answer (tests/unit/test_group_fields_c.py) and is what
    group_entry calls where it was built."""
    name, gid, modstamp, usn, oc, oc_lower, plain = spec
    name_values = attrs.get(name, [])
    ocs = attrs.get("objectclass")
    return (
        names(name_values),
        int_id(attrs.get(gid, [])) if gid is not None else None,
        not ocs or oc in ocs or oc_lower in {v.lower() for v in ocs},
        first(attrs.get(modstamp)),
        first(attrs.get(usn)) if usn else "",
        plain is not None and computed(attrs, plain),
        len(name_values) > 1,
    )


# The RDN types normalize_dn replaces, as _ber.key_new compares them.
_ALIAS_TYPES = tuple(a.encode() for a in ALIASED_TYPES)


class MemberKeys:
    """Member values read in one request: value -> DN key, and a spelling of each key
    (the member look-ups batch by its RDN value). A member of twenty groups comes
    twenty times (bigroupuser: 44,000 values, 5,000 distinct): each distinct value is
    decoded and keyed once."""

    __slots__ = ("memo", "ready", "spelled")

    def __init__(self) -> None:
        self.memo: dict[bytes, str] = {}
        self.spelled: dict[str, str] = {}
        # The keys of the member values of the last new_values' entries, read with
        # them in C: id(values) -> (values, their keys), for group_entry.
        self.ready: dict[int, tuple[Sequence[bytes], list[str]]] = {}

    def new_values(self, entries: list[Entry], member: str) -> list[bytes]:
        """The member values (attribute key ``member``) of ``entries`` not read yet,
        each once, in the order first met. Each distinct value is tested against the
        memo once: the values first made distinct (bigroupuser's first level: 44,000
        values, 5,000 distinct), rather than all tested then made distinct.

        Where the C reader is built and every new value is its own DN key (as
        directories write member values: ``uid=user00042,ou=people,dc=example``), the
        values are also read here, as :meth:`of` reads them (the later ``of`` finds
        them read): one pass in C instead of three in Python, 7 % of a cold
        initgroups of bigroupuser. A new value that is not its own key leaves them all
        to :meth:`of`. The keys are :meth:`of`'s; the spelling kept for a key is the
        first of these values, where a later :meth:`of` keeps the first it keys (an
        entry spelled two ways in one request: either spelling finds it)."""
        values: list[Sequence[bytes]] = [e.attrs.get(member, ()) for e in entries]
        if key_new is not None:
            got = key_new(values, self.memo, self.spelled, _ALIAS_TYPES)
            if got is not None:
                new, keyed = got
                pairs = zip(values, keyed, strict=True)
                self.ready = dict(zip(map(id, values), pairs, strict=True))
                return new
        self.ready = {}
        return list(filterfalse(self.memo.__contains__, dict.fromkeys(chain(*values))))

    def of(self, values: list[bytes]) -> list[str]:
        """The DN keys of member values, reading the values not read yet; a value that
        is not UTF-8 or holds a NUL names nothing (as ``names_each``) and is never put
        in the memo. The new values are decoded and keyed together (one decode,
        normalize_dns): one at a time, the 7,000 new values of a cold initgroups of
        bigroupuser were 3 % of its instructions (valgrind, perf/readpath.py's walk
        replayed)."""
        memo = self.memo
        new = list(dict.fromkeys(filterfalse(memo.__contains__, values)))
        if new:
            try:
                dns = b"\0".join(new).decode("utf-8").split("\0")
            except UnicodeDecodeError:
                dns = []
            if len(dns) != len(new):
                # A value that is not UTF-8, or holds a NUL (more DNs than values):
                # each value on its own.
                return self.each(values)
            keys = normalize_dns(dns)
            memo.update(zip(new, keys, strict=True))
            # The first spelling of each key kept (setdefault), called from C rather
            # than a Python loop per value (a cold large01 205 M -> 203 M
            # instructions, perf.replay).
            deque(map(self.spelled.setdefault, keys, dns), maxlen=0)
        return list(map(memo.__getitem__, values))

    def keys(self, values: list[bytes]) -> list[str]:
        """:meth:`of`, mapped in C when every value was read before."""
        try:
            return list(map(self.memo.__getitem__, values))
        except KeyError:
            return self.of(values)

    def each(self, values: list[bytes]) -> list[str]:
        """:meth:`of`, one value at a time."""
        memo, spelled = self.memo, self.spelled
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


class Hooks:
    """What differs between directories in reading entries and asking for them: ids
    (rfc2307's numbers here; AD maps them from SIDs, cached/ldap/ad.py), the filters
    by id, the assertion a member look-up batches by and its batch size, and the
    stamp a fetched group keeps."""

    member_batch = MEMBER_BATCH  # member look-ups per search

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def prepare(self) -> None:
        """Called at the start of every request, once connected."""

    def user_ids(self, e: Entry) -> tuple[int | None, int | None]:
        s = self.ctx.schema
        return int_id(e.get(s.user_uid)), int_id(e.get(s.user_gid))

    def group_gid(self, e: Entry) -> int | None:
        return int_id(e.get(self.ctx.schema.group_gid))

    def user_by_uid_filter(self, uid: int) -> str:
        return self.ctx.schema.user_by_uid(uid)

    def group_by_gid_filter(self, gid: int) -> str:
        return self.ctx.schema.group_by_gid(gid)

    @staticmethod
    def member_assertion(dn: str) -> str | None:
        """The assertion a member look-up batches by: the DN's RDN value (a hint,
        never the answer: entries are matched back by DN); None for a value that is
        not a DN."""
        avas = rdn_avas(dn)
        if not avas or not avas[0][0]:
            return None
        return f"({avas[0][0]}={escape(avas[0][1])})"

    def restamp(self, g: GroupEntry) -> None:
        """Adjust the stamp a fetched group keeps (AD: per DC)."""


class Decoder:
    """Entries to users, groups and members, by the domain's schema and ranges."""

    def __init__(self, ctx: Context, hooks: Hooks) -> None:
        self.ctx = ctx
        self.hooks = hooks
        self._group_keys: GroupKeys | None = None  # gkeys', for ctx.schema
        # The gid as group_fields reads it (rfc2307's number), or by the hooks (AD).
        self._own_gid = type(hooks).group_gid is Hooks.group_gid

    def to_user(self, e: Entry) -> User | None:
        named = self.user_name_ids(e)
        if named is None:
            return None
        name, uid, gid = named
        s = self.ctx.schema
        gecos = c_string(e.get(s.user_gecos)) or c_string(e.get("cn"))
        # Empty values are skipped, as SSSD's responder skips them.
        keys = tuple(k for k in e.get(s.user_ssh_key) or () if k) if s.user_ssh_key else ()
        return User(
            name, uid, gid, gecos, c_string(e.get(s.user_home)), c_string(e.get(s.user_shell)),
            e.dn, keys,
        )  # fmt: skip

    def user_name_ids(self, e: Entry) -> tuple[str, int, int] | None:
        """A POSIX user's name, uid and gid, or None for an entry that is no user
        of this domain: what names a member (no gecos, home, shell or User built for
        the thousands of members of a sweep)."""
        return self.name_ids(e.dn, e.get(self.ctx.schema.user_name), *self.hooks.user_ids(e))

    def name_ids(
        self, dn: str, name_values: list[bytes], uid: int | None, gid: int | None
    ) -> tuple[str, int, int] | None:
        """user_name_ids from the entry's DN, its name values and its ids."""
        s = self.ctx.schema
        cfg = self.ctx.cfg
        got = names(name_values)
        if got is None:
            limited.log("not-utf8-user", logging.WARNING, "%s: %s is not UTF-8 text; user ignored",
                        dn, s.user_name)  # fmt: skip
            return None
        if not got:
            return None
        # A multi-valued name attribute: the value the RDN spells, whatever was asked
        # (SSSD's primary name, docs/compatibility.md §9.5).
        name = got[0] if len(got) == 1 else primary_name(dn, s.user_name, got)
        if cfg.auto_private_groups == PrivateGroups.TRUE and uid is not None:
            # SSSD's MPG domain (sdap_save_user): the primary gid is the uid, the
            # directory's gidNumber only an extra group of the user (kept here; 0 for
            # none), and neither needed nor range-checked.
            gid = gid if gid is not None and cfg.id_in_range(gid) else 0
        elif uid is None or gid is None:
            limited.log("not-posix-user", logging.WARNING, "%s: no numeric %s/%s; not a POSIX user",
                        dn, s.user_uid, s.user_gid)  # fmt: skip
            return None
        if not cfg.id_in_range(uid):
            return None
        if gid and not cfg.id_in_range(gid):
            # SSSD: "filtered out! (primary gid out of range)"; gid 0 always is.
            log.debug("%s: primary gid %d out of range; user filtered out", dn, gid)
            return None
        return name, uid, gid

    def gkeys(self) -> GroupKeys:
        """The group attributes as Entry.attrs keys, for the current schema."""
        keys = self._group_keys
        if keys is None or keys.schema is not self.ctx.schema:
            keys = self._group_keys = GroupKeys.of(self.ctx.schema)
        return keys

    def group_entry(
        self, e: Entry, want: MemberKind | None, member_keys: MemberKeys
    ) -> GroupEntry | None:
        """A POSIX group, or — with ``want=WALK`` — any group, POSIX or not (a
        non-POSIX group is walked through by nesting, never answered). Its member
        values keyed through ``member_keys``, the request's."""
        s = self.ctx.schema
        keys = self.gkeys()
        # The fields in one call (group_fields: in C where it was built): per group in
        # Python they were 18 % of a cold initgroups of a user in 2,000 groups.
        got, gid, of_class, modstamp, usn, dynamic, several = group_fields(e.attrs, keys.spec)
        if not self._own_gid:
            gid = self.hooks.group_gid(e)
        if got is None:
            limited.log("not-utf8-group", logging.WARNING,
                        "%s: %s is not UTF-8 text; group ignored", e.dn, s.group_name)  # fmt: skip
            return None
        posix = bool(got) and gid is not None and self.ctx.cfg.id_in_range(gid)
        if not of_class:
            # Not of the group class: no group at all, not even one to walk through
            # (SSSD's searches ask for the class). Where users and groups share a
            # base, a user entry with member values comes back with the walk's
            # searches and must not be climbed through as a group.
            return None
        if not posix and want != WALK:
            return None
        name = primary_name(e.dn, s.group_name, got) if got else ""
        if posix and gid is not None and not self.ctx.cache.storable_group(name, gid, e.dn):
            return None  # skipped alone, one log line; the rest is stored (docs/threat-model.md)
        if dynamic:
            # Members the server computes (a dynamic group): its stamps stay when they
            # change, so it has none to go by and is read whole at every refresh.
            modstamp = usn = ""
        g = GroupEntry(
            e, name, gid if posix and gid is not None else 0, modstamp, usn,
            posix=posix, several_names=several,
        )  # fmt: skip
        if s.bis:
            # Member values to DN keys, each distinct value read once per request.
            values = e.attrs.get(keys.member, [])
            ready = member_keys.ready.get(id(values))
            if ready is not None and ready[0] is values:
                g.member_keys = ready[1]  # read with the round's others (new_values)
            else:
                g.member_keys = member_keys.keys(values)
        self.hooks.restamp(g)
        return g

    def in_bases(self, key: str, bases: tuple[SearchBase, ...]) -> bool:
        return any(in_scope(key, normalize_dn(b.dn), b.scope) for b in bases)

    def user_base_keys(self) -> Callable[[str], bool]:
        """in_bases(key, user bases) for thousands of members at once (the walk):
        subtree bases by one ``str.endswith`` of their suffixes (in_scope's test,
        dn.is_under), in C; in_scope per key took 9 ms for bigroupuser's 5,000."""
        bases = [(normalize_dn(b.dn), b.scope) for b in self.ctx.schema.user_bases]
        if any(scope == "sub" and not b for b, scope in bases):
            return lambda _key: True  # the root DSE's whole tree
        subs = tuple("," + b for b, scope in bases if scope == "sub")
        tops = {b for b, scope in bases if scope == "sub"}
        rest = [(b, scope) for b, scope in bases if scope != "sub"]
        return lambda key: (
            key.endswith(subs) or key in tops or any(in_scope(key, b, sc) for b, sc in rest)
        )

    def as_user(self, ocs: set[bytes], key: str, from_group_bases: bool = True) -> bool:
        """Is a member entry of these classes (lower-cased) a user? A user first, as
        SSSD tries one, where it may be one: of the user class and, found under the
        group bases, under a user base too. Found under the group bases only, an
        entry of both classes is the group, not a user outside the user bases."""
        s = self.ctx.schema
        return s.user_oc.lower().encode() in ocs and (
            not from_group_bases or self.in_bases(key, s.user_bases)
        )

    def user_member(self, e: Entry, key: str, from_group_bases: bool) -> Member | None:
        if from_group_bases and not self.in_bases(key, self.ctx.schema.user_bases):
            return None  # outside every user base: not a member
        named = self.user_name_ids(e)
        return new_member(Member, (USER, named[0])) if named is not None else None

    def classify(
        self, e: Entry, key: str, from_group_bases: bool, member_keys: MemberKeys
    ) -> Member | GroupEntry | None:
        """What a member DN names, from its entry: a user (named by its entry, with
        ids: SSSD drops members without uidNumber/gidNumber), a group (POSIX or
        walked through), or nothing."""
        s = self.ctx.schema
        ocs = {v.lower() for v in e.get("objectclass")}
        if self.as_user(ocs, key, from_group_bases):
            return self.user_member(e, key, False)
        if s.group_oc.lower().encode() in ocs:
            if not from_group_bases:
                return None
            return self.group_entry(e, WALK, member_keys)
        return None

    def member_user_attrs(self) -> list[str]:
        """What names a member user: its name and ids (AD: the SIDs they map from)."""
        s = self.ctx.schema
        attrs = [s.user_name, s.user_uid, s.user_gid]
        if s.ad:
            attrs += [s.user_sid, s.user_primary_group]  # ID mapping names users by SID
        return attrs


# read_group_fields in C where it was built, and MemberKeys.new_values' reading of own
# keys (docs/ARCHITECTURE.md, "The C entry reader").
group_fields = _ber.group_fields if _ber is not None else read_group_fields
key_new = _ber.key_new if _ber is not None else None
