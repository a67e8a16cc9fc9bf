"""Schema maps: attribute and object-class names from the config, filters, DN helpers.

rfc2307 groups list member *names* in ``memberUid`` and cannot nest; rfc2307bis
groups list member *DNs* in ``member``, users and groups alike, and nest (reference
§6.1-§6.3). Every value that reaches a filter goes through ``escape`` (RFC 4515 §3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cached.config import DomainConfig, SearchBase, parse_search_bases
from cached.dn import is_under, normalize_dn
from cached.ldap.computed import URL_ATTR

# Bound on the number of assertions in one OR-filter of a batched search. OpenLDAP
# accepts far more, but AD's default MaxQueryDuration and 389-ds' filter parsing cost
# grow with filter size; 1,000 keeps a 2,000-group level at two searches.
BATCH = 1000

# Bound on the member look-ups (RDN values) in one search. slapd tests every candidate
# entry against the whole OR, so a batch of n values costs ~n²/2 comparisons: measured
# on bigroupuser, 2,500 uid values took 1.0-1.3 s of slapd time in one search, while
# 1,000 cost ~0.15 s each. They ride along the walk's searches where they can.
MEMBER_BATCH = 1000


_ESCAPES = str.maketrans({ch: f"\\{ord(ch):02x}" for ch in "*()\\\0"})
_SPECIAL = re.compile("[*()\\\\\0]")


def escape(value: str) -> str:
    """Escape an assertion value per RFC 4515 §3: ``*``, ``(``, ``)``, ``\\`` and NUL
    always; every other byte is passed as UTF-8. (One ``str.translate``: a loop per
    character was 3 % of a refresh's CPU, escaping the 2,000 DNs of a walk level. The
    translate itself, with its multi-character replacements, takes 1.8 µs for a
    40-character DN, the search that finds nothing to escape 0.3 µs: most values.)"""
    return value.translate(_ESCAPES) if _SPECIAL.search(value) else value


def assertions(attr: str, values: list[str]) -> list[str]:
    """The equality assertions ``(attr=value)`` of ``values``, escaped (:func:`escape`).
    One search of all the values joined finds that none needs escaping (the DNs of a
    walk level: 2,000 searches of 0.3 µs each, and as many calls, were 2 % of a cold
    initgroups of bigroupuser, py-spy on perf.replay)."""
    if _SPECIAL.search("".join(values)):
        return [f"({attr}={escape(v)})" for v in values]
    head = "(" + attr + "="
    return [head + v + ")" for v in values]


def first(values: list[bytes] | None) -> str:
    if not values:
        return ""
    return values[0].decode("utf-8", errors="replace")


def c_string(values: list[bytes] | None) -> str:
    """A gecos, home or shell: the first value up to its first NUL, the C string SSSD
    serves (its responder reads these attributes as ``const char *``). A NUL is legal
    in IA5String, gecos's syntax, and users often write their own gecos: kept, it made
    the user's passwd record unencodable, so he was not found and enumeration failed
    for the whole domain."""
    return first(values).partition("\0")[0]


def _with_filter(raw: str, old_filter: str) -> tuple[SearchBase, ...]:
    """The search bases of ``raw``; a plain DN (no ``?``) gets the deprecated
    ldap_{user,group}_search_filter as its filter, as SSSD's common_parse_search_base
    gives it (with the ``base?scope?filter`` syntax SSSD ignores it, and so does this)."""
    bases = parse_search_bases(raw)
    if old_filter and len(bases) == 1 and "?" not in raw:
        return (SearchBase(bases[0].dn, "sub", old_filter),)
    return bases


@dataclass(frozen=True)
class SchemaMap:
    bis: bool  # rfc2307bis: DN members, nesting
    user_oc: str
    user_name: str
    user_uid: str
    user_gid: str
    user_gecos: str
    user_home: str
    user_shell: str
    user_ssh_key: str  # "": keys are not fetched
    user_modstamp: str
    user_usn: str
    group_oc: str
    group_name: str
    group_gid: str
    group_member: str
    group_modstamp: str
    group_usn: str
    user_bases: tuple[SearchBase, ...]  # SSSD's base?scope?filter list (§6.1)
    group_bases: tuple[SearchBase, ...]
    nesting_level: int
    # ldap_schema = ad: objectSid and primaryGroupID are read; with id_mapping the ids
    # come from objectSid, never from uidNumber/gidNumber (docs/compatibility.md §6.5).
    ad: bool = False
    id_mapping: bool = False
    user_sid: str = "objectSid"
    user_primary_group: str = "primaryGroupID"
    group_sid: str = "objectSid"
    # AD's group kind: without the security bit a group is no POSIX group (SSSD's
    # sdap_save_group, "Only security groups from AD are considered for POSIX groups").
    group_type: str = "groupType"
    # The deprecated ldap_{user,group}_search_filter: the filter of a base read from
    # the root DSE (with_default_base), as SSSD's sdap_set_search_base applies it.
    user_search_filter: str = ""
    group_search_filter: str = ""
    # Netgroups (ldap_netgroup_*; cached/ldap/netgroups.py).
    netgroup_oc: str = "nisNetgroup"
    netgroup_name: str = "cn"
    netgroup_member: str = "memberNisNetgroup"
    netgroup_triple: str = "nisNetgroupTriple"
    netgroup_modstamp: str = "modifyTimestamp"
    netgroup_bases: tuple[SearchBase, ...] = ()

    @classmethod
    def from_config(cls, d: DomainConfig) -> SchemaMap:
        return cls(
            # AD groups list member DNs and nest, as rfc2307bis ones.
            bis=d.ldap_schema in ("rfc2307bis", "ad"),
            user_oc=d.ldap_user_object_class,
            user_name=d.ldap_user_name,
            user_uid=d.ldap_user_uid_number,
            user_gid=d.ldap_user_gid_number,
            user_gecos=d.ldap_user_gecos,
            user_home=d.ldap_user_home_directory,
            user_shell=d.ldap_user_shell,
            user_ssh_key=d.ldap_user_ssh_public_key,
            user_modstamp=d.ldap_user_modify_timestamp,
            user_usn=d.ldap_user_entry_usn,
            group_oc=d.ldap_group_object_class,
            group_name=d.ldap_group_name,
            group_gid=d.ldap_group_gid_number,
            group_member=d.ldap_group_member,
            group_modstamp=d.ldap_group_modify_timestamp,
            # Unset: entryCSN, which OpenLDAP keeps on every entry, unique per change
            # (microseconds and a counter); a server without it returns nothing and the
            # modifyTimestamp rule of cached/ldap/stamps.py applies alone.
            group_usn=d.ldap_group_entry_usn or ("" if d.ldap_schema == "ad" else "entryCSN"),
            user_bases=_with_filter(d.ldap_user_search_base, d.ldap_user_search_filter),
            group_bases=_with_filter(d.ldap_group_search_base, d.ldap_group_search_filter),
            user_search_filter=d.ldap_user_search_filter,
            group_search_filter=d.ldap_group_search_filter,
            # rfc2307 cannot nest (§6.1: the level is ignored there).
            nesting_level=d.ldap_group_nesting_level if d.ldap_schema != "rfc2307" else 0,
            ad=d.ldap_schema == "ad",
            id_mapping=d.ldap_id_mapping,
            user_sid=d.ldap_user_objectsid,
            user_primary_group=d.ldap_user_primary_group,
            group_sid=d.ldap_group_objectsid,
            netgroup_oc=d.ldap_netgroup_object_class,
            netgroup_name=d.ldap_netgroup_name,
            netgroup_member=d.ldap_netgroup_member,
            netgroup_triple=d.ldap_netgroup_triple,
            netgroup_modstamp=d.ldap_netgroup_modify_timestamp,
            netgroup_bases=parse_search_bases(d.ldap_netgroup_search_base),
        )

    def with_default_base(self, base: str) -> SchemaMap:
        """The same map with unset search bases set to ``base`` (from the root DSE)."""
        from dataclasses import replace

        return replace(
            self,
            user_bases=self.user_bases or (SearchBase(base, "sub", self.user_search_filter),),
            group_bases=self.group_bases or (SearchBase(base, "sub", self.group_search_filter),),
            netgroup_bases=self.netgroup_bases or (SearchBase(base, "sub", ""),),
        )

    @property
    def fold(self) -> bool:
        """Can one search under the group bases also find the users asked for? Yes
        when no base has a filter and every user base lies inside a subtree group
        base: user entries are then checked against the user bases by DN."""
        if any(b.filter for b in self.user_bases + self.group_bases):
            return False
        gkeys = [(normalize_dn(b.dn), b.scope) for b in self.group_bases]
        return all(
            any(
                is_under(normalize_dn(u.dn), gk)
                and (gs == "sub" or (gs == u.scope and normalize_dn(u.dn) == gk))
                for gk, gs in gkeys
            )
            for u in self.user_bases
        )

    # -- attribute lists ---------------------------------------------------------

    @property
    def user_attrs(self) -> list[str]:
        attrs = [
            self.user_name,
            self.user_uid,
            self.user_gid,
            self.user_gecos,
            "cn",
            self.user_home,
            self.user_shell,
            self.user_modstamp,
        ]
        if self.user_ssh_key:
            # With the user, as SSSD: keys cost no search of their own.
            attrs.append(self.user_ssh_key)
        if self.user_usn:
            attrs.append(self.user_usn)
        if self.ad:
            attrs += [self.user_sid, self.user_primary_group]
        return attrs

    def group_attrs(self, members: bool = True) -> list[str]:
        # objectClass: a group is a POSIX group by its class, and an entry listing
        # members without it is walked through, never answered (docs/compatibility.md §9.5).
        attrs = [self.group_name, self.group_gid, self.group_modstamp, "objectClass"]
        if self.group_usn:
            attrs.append(self.group_usn)
        if self.ad:
            attrs += [self.group_sid, self.group_type]
        else:
            # The URLs of a dynamic group: its stamps do not cover its members
            # (cached/ldap/computed.py). AD has no such group.
            attrs.append(URL_ATTR)
        if members:
            attrs.append(self.group_member)
        return attrs

    def member_attrs(self, members: bool = True) -> list[str]:
        """Attributes of a search that may return users and groups alike: what names
        and types a member (a user's name and ids), and whole groups. Not a user's
        gecos, home or shell: a member is named, not stored (less to decode for the
        thousands of users of a big initgroups)."""
        user = {self.user_name, self.user_uid, self.user_gid}
        if self.ad:
            user |= {self.user_sid, self.user_primary_group}
        return sorted(user | set(self.group_attrs(members)))

    @property
    def deref_attrs(self) -> list[str]:
        """What the deref control returns per member: enough to name and type it,
        and to drop users without ids (SSSD, docs/compatibility.md §9.5)."""
        attrs = {"objectClass", self.user_name, self.user_uid, self.user_gid, self.group_name,
                 self.group_gid}  # fmt: skip
        if self.ad:
            attrs |= {self.user_sid, self.user_primary_group, self.group_sid, self.group_type}
        return sorted(attrs)

    # -- filters -----------------------------------------------------------------

    def user_by_name(self, name: str) -> str:
        return f"(&(objectClass={self.user_oc})({self.user_name}={escape(name)}))"

    def user_by_uid(self, uid: int) -> str:
        return f"(&(objectClass={self.user_oc})({self.user_uid}={uid}))"

    def group_filter(self, assertion: str) -> str:
        # (name=*) and a non-zero gid, as SSSD (§6.3): non-POSIX groups are skipped.
        # With ID mapping every group with a SID has a gid (BUILTIN ones are dropped
        # when mapped).
        if self.id_mapping:
            return (
                f"(&(objectClass={self.group_oc}){assertion}({self.group_name}=*)"
                f"({self.group_sid}=*))"
            )
        return (
            f"(&(objectClass={self.group_oc}){assertion}({self.group_name}=*)"
            f"(&({self.group_gid}=*)(!({self.group_gid}=0))))"
        )

    def group_by_name(self, name: str) -> str:
        return self.group_filter(f"({self.group_name}={escape(name)})")

    def group_by_gid(self, gid: int) -> str:
        return self.group_filter(f"({self.group_gid}={gid})")

    def member_classes(self) -> str:
        """Entries a member DN may name: users and groups of the configured classes
        (a group of the class without a gidNumber is walked through, as SSSD)."""
        return f"(|(objectClass={self.user_oc})(objectClass={self.group_oc}))"

    def groups_with_members(self, values: list[str]) -> str:
        """Groups that list any of ``values`` (member DNs, or names for memberUid)."""
        attr = self.group_member
        if len(values) == 1:
            return self.group_filter(f"({attr}={escape(values[0])})")
        inner = "".join(assertions(attr, values))
        return self.group_filter(f"(|{inner})")

    @staticmethod
    def with_base(filt: str, base: SearchBase) -> str:
        """``filt`` ANDed with the base's own filter (SSSD's ``base?scope?filter``)."""
        return f"(&{filt}{base.filter})" if base.filter else filt

    @staticmethod
    def any_of(attr: str, values: list[str]) -> str:
        if len(values) == 1:
            return f"({attr}={escape(values[0])})"
        return "(|" + "".join(assertions(attr, values)) + ")"
