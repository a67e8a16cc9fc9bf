"""What the responder may serve, and how names look when it does: one policy for the
NSS socket and D-Bus alike.

Checked every time an entry is answered, whatever the cache holds: a cache written by
an older version or under an older configuration (``min_id = 0``, a shorter
``filter_users``) must not answer what the current one refuses, online or offline
(docs/threat-model.md).

* ids: ``DomainConfig.id_in_range`` (SSSD's OUT_OF_ID_RANGE: id 0 and (uid_t)-1
  never); a user whose primary gid is out of range is not served at all (SSSD:
  "filtered out! (primary gid out of range)"), and out-of-range gids are left out of
  initgroups answers;
* names: ``filter_users``/``filter_groups`` of [nss] and of the domain's own section
  (both apply, as SSSD adds both to its negative cache); an entry ``name@domain``
  applies to that domain only (SSSD parses the domain), and in a case-insensitive
  domain the comparison is case-folded, as the domain compares every other name.
  Filtered users are also left out of group member lists (SSSD's
  filter_users_in_groups, unless false), filtered groups out of initgroups answers
  (reference §1.6);
* output names: ``case_sensitive = false`` answers lower-case names, ``preserving`` the
  stored case (sssd.conf(5)); a domain with ``use_fully_qualified_names`` answers them
  qualified (``full_name_format``), its group members too;
* lookup names: with a non-default ``re_expression`` split as SSSD splits them
  (``parse_name``); else ``name@DOMAIN`` of a configured domain (compared
  case-insensitively, SSSD's default ``re_expression``) is looked up as ``name`` in
  that domain only; an unqualified name in ``default_domain_suffix``'s domain only,
  else not in a domain with ``use_fully_qualified_names`` (SSSD's cache_req skips
  it); any other name is looked up as given; ``override_space``'s character is read back as a space;
* private groups (``auto_private_groups``): with ``true`` a user is answered with gid
  = uid (``primary_gid``), its private group (``private_group``) is looked up by the
  flow, and its directory gidNumber is one of its groups (``initgroups_gids``);
* output users: the name as above, the home directory and the login shell as the home
  and shell options make them (homeshell.py): the one place the socket's answers, the
  memory cache's records and D-Bus's properties take them from, so they never differ.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from dataclasses import replace

from cached.cache import DomainCache, GroupView, Initgroups
from cached.cache.records import join_members, split_members
from cached.config import Config, DomainConfig, PrivateGroups
from cached.config.parsers import (
    SSSD_AD_DEFAULT_RE,
    SSSD_DEFAULT_RE,
    compile_name_regex,
    name_groups,
)
from cached.model import Kind, User
from cached.responder.homeshell import HomeShell, read_etc_shells

# A group's (member count, member blob) as answered (ServePolicy.members_of).
MembersFn = Callable[[GroupView], tuple[int, bytes]]


class ServePolicy:
    def __init__(self, config: Config, etc_shells: frozenset[str] | None = None) -> None:
        """``etc_shells``: the shells of /etc/shells, read here (once, as SSSD reads
        it at its start) when allowed_shells or vetoed_shells needs them."""
        self.domains = {d.name.lower(): d for d in config.domains}
        # full_name_format per domain, as str.format: {0} name, {1} domain, {2} flat
        # name (an LDAP domain's is its name, calc_flat_name). None: plain names.
        # default_domain_suffix: unqualified names are that domain's, and every
        # domain's names are answered qualified (sss_domain_info_get_output_fqnames).
        suffix = config.daemon.default_domain_suffix.lower()
        self._default = self.domains.get(suffix) if suffix else None
        # re_expression per domain, in `domains` order: the domain's, [sssd]'s, or
        # SSSD's default for its id_provider (usertools.c sss_names_init). None when
        # every domain has SSSD's LDAP default: lookup_name's own split.
        regexes = [
            (d, d.re_expression or config.daemon.re_expression or default_re_expression(d))
            for d in config.domains
        ]
        self._regexes: list[tuple[DomainConfig, re.Pattern[str]]] | None = (
            None
            if all(r == SSSD_DEFAULT_RE for _d, r in regexes)
            else [(d, compile_name_regex(r)) for d, r in regexes]
        )
        self._qualify: dict[str, str | None] = {
            d.name: _format_of(d.full_name_format or config.daemon.full_name_format)
            if d.use_fully_qualified_names or self._default is not None
            else None
            for d in config.domains
        }
        self._in_groups = config.nss.filter_users_in_groups
        # override_space: SSSD's sss_replace_space / sss_reverse_replace_space.
        self._space = config.daemon.override_space.strip(" ")
        if etc_shells is None and HomeShell.needs_etc_shells(config.nss):
            etc_shells = read_etc_shells()
        self._homeshell = {
            d.name: HomeShell.of(d, config.nss, etc_shells or ()) for d in config.domains
        }
        self._filters: dict[tuple[str, Kind], frozenset[str]] = {}
        for d in config.domains:
            for kind, names, own in (
                (Kind.USER, config.nss.filter_users, d.filter_users),
                (Kind.GROUP, config.nss.filter_groups, d.filter_groups),
            ):
                self._filters[(d.name, kind)] = frozenset(
                    self._fold(d, n)
                    for n in self._names_for(d, [*names, *own])
                )
        # The filtered users as ``\0name\0`` to look for in member blobs (members); None
        # when a name is not ASCII (its case folding may change its length: split).
        self._needles: dict[str, tuple[bytes, ...] | None] = {}
        # members_of(domain) per domain name, with the domain it was made for.
        self._members_fns: dict[str, tuple[DomainConfig, MembersFn]] = {}
        for d in config.domains:
            drop = self._filters[(d.name, Kind.USER)]
            self._needles[d.name] = (
                tuple(f"\0{n}\0".encode() for n in drop)
                if all(n.isascii() for n in drop)
                else None
            )

    def _names_for(self, domain: DomainConfig, entries: list[str]) -> list[str]:
        """The names of ``domain`` a filter list names ([nss] and the domain's own, as
        negcache.c ``sss_ncache_prepopulate``): ``name@DOMAIN`` of this domain is
        ``name``; of another known domain it names nobody here (SSSD takes it for a
        UPN there); any other entry is the name as written, in every domain."""
        out = []
        for entry in entries:
            name, sep, dom = entry.rpartition("@")
            if sep and name and dom.lower() in self.domains:
                if dom.lower() == domain.name.lower():
                    out.append(name)
            else:
                out.append(entry)  # no (known) domain: every domain
        return out

    @staticmethod
    def _fold(domain: DomainConfig, name: str) -> str:
        return name.lower() if domain.case_insensitive else name

    # -- names -------------------------------------------------------------------------

    @staticmethod
    def short_name(domain: DomainConfig, name: str) -> str:
        """A name as answered, unqualified (SSSD's sss_output_name): lower-case when
        ``case_sensitive = false``."""
        return name.lower() if domain.case_sensitive == "false" else name

    def output_name(self, domain: DomainConfig, name: str) -> str:
        """A name as answered (NSS and D-Bus alike): qualified in a domain with
        ``use_fully_qualified_names`` (SSSD's sized_output_name)."""
        short = name.lower() if domain.case_sensitive == "false" else name
        if self._space and " " in short and self._space not in short:
            short = short.replace(" ", self._space)
        fmt = self._qualify[domain.name]
        return short if fmt is None else fmt.format(short, domain.name, domain.name)

    def qualified(self, domain: DomainConfig) -> bool:
        return self._qualify[domain.name] is not None

    @property
    def parses_names(self) -> bool:
        """A domain has an re_expression other than SSSD's LDAP default: names are
        split by :meth:`parse_name`."""
        return self._regexes is not None

    def parse_name(self, name: str) -> tuple[str, DomainConfig | None] | None:
        """(the name to look up, the only domain to look in, or None for every domain
        that takes unqualified names) as SSSD's sss_parse_name_for_domains splits
        ``name`` with each domain's re_expression, in order; None: no domain can hold
        it (an expression does not match, a domain part names no domain, or two
        expressions disagree on the name)."""
        sub = self._space
        if sub and sub in name and " " not in name:
            name = name.replace(sub, " ")
        assert self._regexes is not None
        candidate: str | None = None
        mismatch = False
        for domain, rx in self._regexes:
            # PCRE2_NOTEMPTY: an empty match is no match.
            m = next((m for m in rx.finditer(name) if m.end() > m.start()), None)
            if m is None:
                return None  # ERR_REGEX_NOMATCH ends SSSD's parse
            short = name_groups(m, "name")
            if short is None:
                continue  # EINVAL: this domain's expression found no name
            dom = name_groups(m, "domain") or ""
            if not dom:
                if candidate is None:
                    candidate = short
                elif candidate.lower() != short.lower():
                    mismatch = True
            elif dom.lower() == domain.name.lower():
                return short, domain
        if candidate is not None and not mismatch:
            return candidate, self._default
        return None  # a domain no expression's domain is: SSSD looks for a subdomain

    def lookup_name(self, name: str) -> tuple[str, DomainConfig | None]:
        """(the name to look up, the only domain to look in, or None for every domain
        that takes unqualified names): ``name@DOMAIN`` of a configured domain is
        ``name`` there, as SSSD's default re_expression parses it."""
        sub = self._space
        if sub and sub in name and " " not in name:
            name = name.replace(sub, " ")
        short, sep, dom = name.rpartition("@")
        if sep and short:
            domain = self.domains.get(dom.lower())
            if domain is not None:
                return short, domain
        return name, self._default

    def output_user(self, domain: DomainConfig, u: User) -> User:
        """A user as answered (NSS socket, memory cache and D-Bus alike): the output
        name, and the home directory and shell the home and shell options make of the
        directory's (homeshell.py; %u is the unqualified name)."""
        short = self.short_name(domain, u.name)
        name = self.output_name(domain, u.name)
        hs = self._homeshell[domain.name]
        gid = self.primary_gid(domain, u)
        if hs.changes_nothing and "%" not in u.home:
            return u if name == u.name and gid == u.gid else replace(u, name=name, gid=gid)
        return replace(
            u, name=name, gid=gid, home=hs.home(short, u.uid, u.home), shell=hs.shell(u.shell)
        )

    @staticmethod
    def primary_gid(domain: DomainConfig, u: User) -> int:
        """The primary gid a user is answered with (SSSD's sss_nss_get_gid):
        override_gid, else with ``auto_private_groups = true`` the uid (its private
        group), else the directory's."""
        if domain.override_gid:
            return domain.override_gid
        if domain.auto_private_groups == PrivateGroups.TRUE:
            return u.uid
        return u.gid

    def filter_names(self, domain: DomainConfig, kind: Kind) -> frozenset[str]:
        """The filtered names of ``kind`` in ``domain`` (INITGR: the users'), folded."""
        return self._filters[(domain.name, Kind.USER if kind is Kind.INITGR else kind)]

    def name_filtered(self, domain: DomainConfig, kind: Kind, name: str) -> bool:
        return self._fold(domain, name) in self.filter_names(domain, kind)

    # -- entries -----------------------------------------------------------------------

    def user_ok(self, domain: DomainConfig, u: User) -> bool:
        # auto_private_groups = true: the primary gid is the uid, and the directory's
        # (kept as an extra group, 0 for none) was range-checked when stored.
        return (
            domain.id_in_range(u.uid)
            and (domain.id_in_range(u.gid) or domain.auto_private_groups == PrivateGroups.TRUE)
            and not self.name_filtered(domain, Kind.USER, u.name)
        )

    def group_ok(self, domain: DomainConfig, name: str, gid: int) -> bool:
        return domain.id_in_range(gid) and not self.name_filtered(domain, Kind.GROUP, name)

    @staticmethod
    def private_group(u: User) -> GroupView:
        """A user's private group (auto_private_groups): gid = uid, the user's name, no
        members (SSSD converts the user's own entry, which has none: mpg_convert)."""
        return GroupView(u.name, u.uid, u.dn, b"", 0)

    def group_view_ok(self, domain: DomainConfig, g: GroupView) -> bool:
        return self.group_ok(domain, g.name, g.gid)

    def group_view_filter(self, domain: DomainConfig) -> Callable[[GroupView], bool]:
        """:meth:`group_view_ok` for many groups of ``domain``, the filter looked up
        once (the memory-cache prefill checks each of a user's groups: 2,085 calls
        through group_ok were a fifteenth of its CPU, py-spy)."""
        drop = self.filter_names(domain, Kind.GROUP)
        fold = domain.case_insensitive
        in_range = domain.id_in_range
        if fold:
            return lambda g: in_range(g.gid) and g.name.lower() not in drop
        return lambda g: in_range(g.gid) and g.name not in drop

    def initgroups_ok(self, domain: DomainConfig, ig: Initgroups) -> bool:
        return self.user_ok(domain, ig.user)

    def member_names(self, domain: DomainConfig, g: GroupView) -> list[str]:
        """A group's member names without the filtered users (unless
        ``filter_users_in_groups = false``), as stored."""
        drop = self._member_filter(domain)
        fold = domain.case_insensitive
        return [n for n in split_members(g.members) if (n.lower() if fold else n) not in drop]

    def _member_filter(self, domain: DomainConfig) -> frozenset[str]:
        """The users left out of member lists: filter_users, unless
        filter_users_in_groups = false (SSSD's nss_protocol_grent.c)."""
        return self.filter_names(domain, Kind.USER) if self._in_groups else frozenset()

    def members(self, domain: DomainConfig, g: GroupView) -> tuple[int, bytes]:
        """A group's (member count, NUL-joined member blob) as answered: without the
        filtered users, in the output case; empty with ``ignore_group_members``."""
        kept = self._members_fns.get(domain.name)
        if kept is None or kept[0] is not domain:
            kept = self._members_fns[domain.name] = (domain, self.members_of(domain))
        return kept[1](g)

    def members_of(self, domain: DomainConfig) -> MembersFn:
        """:meth:`members` for many groups of ``domain``, what depends on the domain
        looked up once: the memory-cache prefill of bigroupuser's 2,085 groups spent
        3.6 µs a group in members(), 1 µs this way."""
        if domain.ignore_group_members:
            return lambda _g: (0, b"")
        lower = domain.case_sensitive == "false"
        drop = self._member_filter(domain)
        fold = domain.case_insensitive
        needles = self._needles[domain.name] if drop else ()
        fmt = self._qualify[domain.name]
        dname = domain.name
        space = self._space
        # A format that only appends to the name (SSSD's default %1$s@%2$s): the
        # member blob qualified at C speed, a suffix before each NUL, rather than each
        # name split out and formatted (a fifth of the CPU of a cold `id` of
        # bigroupuser with qualified names, perf/results/2026-12-07-qualified-names).
        # Members stay in the order of their short names.
        suffix = _suffix_of(fmt, dname)
        each = fmt if suffix is None else None

        def split(g: GroupView) -> tuple[int, bytes]:
            names = [n for n in split_members(g.members) if (n.lower() if fold else n) not in drop]
            if lower:
                names = [n.lower() for n in names]
            if space:
                names = [n.replace(" ", space) if space not in n else n for n in names]
            if each is not None:
                names = [each.format(n, dname, dname) for n in names]
            blob = join_members(names)
            return blob.count(b"\0"), blob

        def qualify(plain: MembersFn) -> MembersFn:
            if suffix is None:
                return plain

            def qualified(g: GroupView) -> tuple[int, bytes]:
                count, blob = plain(g)
                return count, blob.replace(b"\0", suffix)

            return qualified

        if needles is None or lower or each is not None or space:
            return qualify(split)
        if not needles:
            return qualify(lambda g: (g.member_count, g.members))
        # A byte search first: most groups hold none of the filtered names, and splitting
        # a big member blob costs far more than looking for a few names in it. A name
        # is ``\0name\0`` inside the blob or ``name\0`` at its start.
        heads = tuple(n[1:] for n in needles)
        (one,) = needles if len(needles) == 1 else (None,)

        def search(g: GroupView) -> tuple[int, bytes]:
            blob = g.members
            if fold:
                blob = blob.lower()
            if blob.startswith(heads) or (
                one in blob if one is not None else any(n in blob for n in needles)
            ):
                return split(g)
            return g.member_count, g.members

        return qualify(search)

    def filtered_gids(self, domain: DomainConfig, cache: DomainCache) -> set[int]:
        """The gids of the groups of ``filter_groups`` that the cache knows, by the name
        they are answered under, as :meth:`group_ok` compares: a filter naming another
        value of a group's ``cn`` hid it from `id` while `getent group` served it (found
        by a differential fuzz against SSSD 2.8.2, which filters neither)."""
        out = set()
        for name in self.filter_names(domain, Kind.GROUP):
            g = cache.group_by_name(name).value
            if g is not None and self._fold(domain, g.name) == name:
                out.add(g.gid)
        return out

    @staticmethod
    def _member_of(cache: DomainCache, name: str, groups: tuple[str, ...]) -> bool:
        """Whether ``name`` is one of ``groups``, compared as the cache keys names, at C
        speed: building the set of the keys of bigroupuser's 2,086 groups for every INITGR
        was a twentieth of the responder's CPU for a warm `id` over the socket (py-spy)."""
        if cache.case_sensitive:
            return name in groups
        return name.lower() in map(str.lower, groups)

    def initgroups_gids(self, domain: DomainConfig, cache: DomainCache, ig: Initgroups) -> bytes:
        """An INITGR answer's gids (packed u32) without out-of-range gids and without the
        groups of ``filter_groups`` (reference §1.6: SSSD omits filtered groups)."""
        drop = self.filtered_gids(domain, cache)
        # SSSD lists the groups the user is a member of: the primary gid only when the
        # user is also an explicit member of that group (glibc adds it for `id`;
        # docs/compatibility.md §9.5). The cache keeps it in the list for offline answers.
        # With auto_private_groups = true the directory's gidNumber is not the primary
        # gid, and SSSD adds it to the list (nss_protocol_initgr.c, orig_gid) unless it
        # is the uid.
        gid = ig.user.gid
        if domain.auto_private_groups == PrivateGroups.TRUE and gid != ig.user.uid:
            pass
        elif (primary := cache.group_by_gid(gid).value) is None or not self._member_of(
            cache, primary.name, ig.groups
        ):
            drop.add(gid)
        ids = array("I", ig.gids)
        # The range is an interval: its ends decide for every gid between them. Then
        # the few dropped gids are taken out in C: a test per gid in Python was a
        # twelfth of the responder's CPU for `id` over the socket (py-spy).
        in_range = domain.id_in_range
        if not ids or (in_range(min(ids)) and in_range(max(ids))):
            if not drop:
                return ig.gids
            for g in drop:
                while g in ids:
                    ids.remove(g)
            return ids.tobytes()
        return array("I", [g for g in ids if g not in drop and in_range(g)]).tobytes()


def default_re_expression(domain: DomainConfig) -> str:
    """SSSD's re_expression for a domain that sets none (usertools.c
    get_id_provider_default_re): the AD one, which also reads ``DOMAIN\\name``, for
    id_provider = ad or ipa; the LDAP one otherwise."""
    return SSSD_AD_DEFAULT_RE if domain.id_provider in ("ad", "ipa") else SSSD_DEFAULT_RE


def _suffix_of(fmt: str | None, domain: str) -> bytes | None:
    """What a qualifying format (as ``_format_of`` makes it) appends to a name, with
    the NUL that ends a member: None when it does more than append (or is None)."""
    if fmt is None or not fmt.startswith("{0}") or "{0}" in fmt[3:]:
        return None
    return (fmt[3:].format("", domain, domain) + "\0").encode()


def _format_of(full_name_format: str) -> str:
    """A full_name_format (checked by the loader: %1$s %2$s %3$s %%) as str.format."""
    text = full_name_format.replace("{", "{{").replace("}", "}}")
    return (
        text.replace("%%", "\0")
        .replace("%1$s", "{0}")
        .replace("%2$s", "{1}")
        .replace("%3$s", "{2}")
        .replace("\0", "%")
    )
