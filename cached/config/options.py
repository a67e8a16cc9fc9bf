"""The options: one row per option in the table of its section (its parser, SSSD's
default and its documentation), and the dataclass of each section. The README tables and
cached.conf(5) are generated from the rows (``python -m cached.docgen``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cached.config.errors import ConfigError
from cached.config.parsers import (
    boolean,
    case_sensitive,
    choice,
    domain_sid,
    integer,
    not_supported,
    provider,
    search_base,
    search_filter,
    str_list,
    string,
    uri_list,
)

# The highest uid/gid a directory entry may carry: (uid_t)-1 = 4294967295 is the
# "no id" value of the system calls, never an id.
MAX_ID = 0xFFFFFFFE


@dataclass(frozen=True)
class Option:
    """One option: its parser, SSSD's default and its documentation, in one row. The
    README tables and cached.conf(5) are generated from these rows (``python -m
    cached.docgen``); ``shown_default`` is the default as documented when the value
    itself does not say it (a default computed from other options, a required one)."""

    parse: Callable[[str], Any]
    default: Any
    doc: str
    shown_default: str = ""


# ---------------------------------------------------------------------------
# The option tables. Defaults are SSSD 2.8.2's (reference §6.1) unless the doc says.

DAEMON_OPTIONS: dict[str, Option] = {
    "domains": Option(str_list, [], "Domains to serve, in lookup order.", "(required)"),
    "pipes_dir": Option(string, "/var/lib/sss/pipes", "Directory of the NSS socket `nss`."),
    "mc_dir": Option(string, "/var/lib/sss/mc", "Directory of the memory-cache files."),
    "db_dir": Option(string, "/var/lib/cached/db", "Directory of the LMDB cache files."),
    "pid_file": Option(string, "/run/cached.pid", "PID file of the monitor (`cached serve`)."),
    "ts_sync_interval": Option(
        integer(1), 60, "Seconds between syncs of the no-sync timestamp store to disk."
    ),
    "dbus_address": Option(
        string, "system", "D-Bus bus of the InfoPipe interface: `system`, an address, or `none`."
    ),
}

NSS_OPTIONS: dict[str, Option] = {
    "entry_negative_timeout": Option(integer(0), 15, "Seconds a name not found stays not found."),
    "entry_cache_nowait_percentage": Option(
        integer(0, 99), 50, "Refresh in the background after this % of the entry lifetime; 0 = off."
    ),
    "cache_first_wait": Option(
        integer(0, 3600),
        1,
        "cached: seconds an expired cached entry waits for its refresh before the cached "
        "entry is answered (the refresh goes on); 0 = wait as SSSD does.",
    ),
    "memcache_timeout": Option(
        integer(0), 300, "Lifetime of memory-cache records, seconds; 0 = off."
    ),
    "memcache_size_passwd": Option(integer(0), 8, "Size of mc/passwd in MiB; 0 disables it."),
    "memcache_size_group": Option(integer(0), 6, "Size of mc/group in MiB; 0 disables it."),
    "memcache_size_initgroups": Option(integer(0), 10, "Size of mc/initgroups in MiB; 0 = off."),
    "filter_users": Option(str_list, ["root"], "Users never answered (NOTFOUND)."),
    "filter_groups": Option(str_list, ["root"], "Groups never answered (NOTFOUND)."),
    "pwfield": Option(string, "*", "The passwd field returned in passwd entries."),
    "enumerate": Option(
        boolean, False, "Answer getpwent/getgrent with the cached entries of every domain."
    ),
    "client_idle_timeout": Option(
        integer(10), 60, "Seconds before an idle client connection is closed (SSSD minimum 10)."
    ),
    "max_clients": Option(
        integer(1), 1024, "Cap on concurrent NSS connections (cached; SSSD relies on ulimit)."
    ),
    # The NSS socket is open to every local user (reference §1.9); these three keep one
    # user from taking what the others need (docs/threat-model.md).
    # 256: libnss_sss keeps one connection per thread, so a busy multi-threaded daemon
    # needs tens; a quarter of the default max_clients leaves room for three more.
    "max_clients_per_uid": Option(
        integer(1), 256, "cached: cap on concurrent NSS connections of one non-root uid."
    ),
    # 32: root's logins (sshd, login, cron, systemd) still resolve when non-root users
    # hold every other connection; at most half of max_clients.
    "root_reserved_clients": Option(
        integer(0), 32, "cached: NSS connections only root may use (at most max_clients / 2)."
    ),
    # 16 MiB: ten replies of a 200,000-member group (1.6 MB each), a thousand of a
    # 1,000-member one; no client of one user leaves more unread. 1,000 never-reading
    # connections took 2.9 GB without it; with it, 16 MiB per attacking uid.
    "max_reply_buffer_per_uid": Option(
        integer(1), 16, "cached: MiB of replies one uid may leave unread before it must wait."
    ),
}

DOMAIN_OPTIONS: dict[str, Option] = {
    "id_provider": Option(provider, None, "Must be `ldap`.", "(required)"),
    "enabled": Option(
        boolean,
        None,
        "As SSSD: `true` serves the domain even when `domains` does not list it (after the "
        "listed ones), `false` never serves it, even when listed.",
    ),
    "domain_type": Option(
        choice("posix", "application"),
        "posix",
        "`application` domains are not served over NSS (as SSSD): such a domain, like an "
        "`[application/NAME]` section, is left out with a warning.",
    ),
    "ldap_uri": Option(uri_list, [], "Servers, tried in order (failover).", "(required)"),
    "ldap_backup_uri": Option(uri_list, [], "Servers tried after every ldap_uri failed."),
    "ldap_search_base": Option(
        search_base,
        "",
        "Default search base, `dn` or SSSD's `dn?scope?filter[?dn?scope?filter...]`; "
        "read from the root DSE if unset.",
    ),
    "ldap_user_search_base": Option(
        search_base, "", "Base(s) of user searches, same syntax (default: search base)."
    ),
    "ldap_group_search_base": Option(
        search_base, "", "Base(s) of group searches, same syntax (default: search base)."
    ),
    "ldap_user_search_filter": Option(
        search_filter,
        "",
        "Deprecated, applied as SSSD 2.8.2 applies it: the filter of a plain "
        "ldap_user_search_base (one DN, or the root DSE's); with the `dn?scope?filter` "
        "syntax it is ignored (as SSSD), with a warning.",
    ),
    "ldap_group_search_filter": Option(
        search_filter, "", "Deprecated, the same for ldap_group_search_base."
    ),
    "ldap_schema": Option(
        not_supported(
            ("rfc2307", "rfc2307bis", "ad"),
            {
                "ipa": "cached has no IPA schema (no views or overrides); write "
                "ldap_schema = rfc2307bis to read an IPA server's users and groups"
            },
        ),
        "rfc2307",
        "`rfc2307`, `rfc2307bis` or `ad` (Active Directory: SSSD's AD attribute names as "
        "defaults of the ldap_user_*/ldap_group_* options, objectSid, primaryGroupID, "
        "tokenGroups).",
    ),
    "ldap_use_tokengroups": Option(
        boolean,
        None,
        "Initgroups from the user's tokenGroups (AD's transitive closure, one base "
        "search) and batched objectSid searches.",
        "true with ad, else false",
    ),
    "ldap_referrals": Option(
        boolean,
        False,
        "cached never chases referrals (SSSD's advice for AD); continuation references "
        "are ignored, `true` warns.",
    ),
    "ldap_id_mapping": Option(
        boolean,
        False,
        "Map objectSid to uid/gid as SSSD does (same slices: files keep their owners); "
        "uidNumber/gidNumber are then ignored. Only with ldap_schema = ad.",
    ),
    "ldap_idmap_range_min": Option(integer(0), 200000, "Lowest id of ID mapping."),
    "ldap_idmap_range_max": Option(integer(1), 2000200000, "End of the ID-mapping range."),
    "ldap_idmap_range_size": Option(integer(1), 200000, "Ids per domain slice."),
    "ldap_idmap_default_domain_sid": Option(
        domain_sid, "", "Domain SID mapped to slice 0 (default: by hash, as SSSD)."
    ),
    "ldap_idmap_autorid_compat": Option(
        boolean, False, "Place slices as winbind's autorid does (first free slice)."
    ),
    "ldap_idmap_helper_table_size": Option(
        integer(0), 10, "Secondary slices precomputed per domain (RIDs above range_size)."
    ),
    "ldap_user_objectsid": Option(string, "objectSid", "User SID attribute (ad)."),
    "ldap_user_primary_group": Option(string, "primaryGroupID", "Primary group RID (ad)."),
    "ldap_group_objectsid": Option(string, "objectSid", "Group SID attribute (ad)."),
    "ldap_default_bind_dn": Option(string, "", "Bind DN; anonymous when unset."),
    "ldap_default_authtok_type": Option(
        not_supported(
            ("password",),
            {
                "obfuscated_password": "cached does not read sss_obfuscate's obfuscated "
                "passwords (anyone who can read the file can undo them); write the password "
                "itself with ldap_default_authtok_type = password, in a file of mode 0600",
            },
        ),
        "password",
        "Only `password`.",
    ),
    "ldap_default_authtok": Option(string, "", "Bind password (the file must then be mode 0600)."),
    "ldap_sasl_mech": Option(
        not_supported(
            ("external",),
            {
                m: "cached binds with SASL only as EXTERNAL (ldapi:// peer credentials); "
                "no Kerberos: bind with ldap_default_bind_dn and ldap_default_authtok instead"
                for m in ("gssapi", "gss-spnego")
            },
        ),
        "",
        "`EXTERNAL` for ldapi:// peer-credential binds.",
    ),
    "ldap_id_use_start_tls": Option(boolean, False, "Use StartTLS on ldap:// URIs."),
    "ldap_tls_reqcert": Option(
        choice("never", "allow", "try", "demand", "hard"),
        "demand",
        "Server certificate check; `try`/`demand`/`hard` verify it and refuse a bad one "
        "(a server always presents one, so SSSD's `try` acts as `demand`); `never`/`allow` "
        "do not.",
    ),
    "ldap_tls_cacert": Option(string, "", "CA certificate file (PEM)."),
    "ldap_tls_cacertdir": Option(string, "", "CA certificate directory (c_rehash'ed)."),
    "ldap_user_object_class": Option(string, "posixAccount", "User object class."),
    "ldap_user_name": Option(string, "uid", "User name attribute."),
    "ldap_user_uid_number": Option(string, "uidNumber", "UID attribute."),
    "ldap_user_gid_number": Option(string, "gidNumber", "Primary GID attribute."),
    "ldap_user_gecos": Option(string, "gecos", "GECOS attribute (falls back to `cn`)."),
    "ldap_user_home_directory": Option(string, "homeDirectory", "Home directory attribute."),
    "ldap_user_shell": Option(string, "loginShell", "Login shell attribute."),
    "ldap_user_modify_timestamp": Option(string, "modifyTimestamp", "Change-time attribute."),
    "ldap_user_entry_usn": Option(string, "", "USN attribute (e.g. entryUSN), unset by default."),
    "ldap_group_object_class": Option(string, "posixGroup", "Group object class."),
    "ldap_group_name": Option(string, "cn", "Group name attribute."),
    "ldap_group_gid_number": Option(string, "gidNumber", "GID attribute."),
    "ldap_group_member": Option(
        string,
        "",
        "Member attribute: `memberUid` (rfc2307) or `member` (rfc2307bis).",
        "memberUid / member",
    ),
    "ldap_group_modify_timestamp": Option(string, "modifyTimestamp", "Change-time attribute."),
    "ldap_group_entry_usn": Option(string, "", "USN attribute, unset by default."),
    "ldap_group_nesting_level": Option(
        integer(0, 100), 2, "Nested levels followed (rfc2307bis); 0 = direct groups only."
    ),
    "ldap_deref_threshold": Option(
        integer(0),
        10,
        "Deref control on the nesting walk's searches, and for a group with more unnamed "
        "members than this; 0 = never.",
    ),
    "ignore_group_members": Option(boolean, False, "Do not fetch or return group members."),
    "ldap_member_rdn_shortcut": Option(
        boolean,
        True,
        "Deprecated and ignored (docs/compatibility.md §9.3): member names always come from "
        "the member "
        "entries, never from the spelling of their DN.",
    ),
    "entry_cache_timeout": Option(integer(0), 5400, "Lifetime of cached entries, seconds."),
    "entry_cache_user_timeout": Option(
        integer(0), None, "Lifetime of cached users, seconds.", "entry_cache_timeout"
    ),
    "entry_cache_group_timeout": Option(
        integer(0), None, "Lifetime of cached groups, seconds.", "entry_cache_timeout"
    ),
    "refresh_expired_interval": Option(
        integer(0), 0, "Seconds between background refreshes of expiring entries; 0 = off."
    ),
    "refresh_full_interval": Option(
        integer(0),
        None,
        "Seconds after which a refresh by change stamps reads a user's groups, or a group, "
        "whole again (members named from their entries: a member's own entry renamed or "
        "deleted leaves its groups' stamps unchanged, docs/compatibility.md §9.2); counted "
        "across restarts (kept in the timestamp store, whose loss makes every group due); "
        "0 = always by stamps. With ldap_schema = ad the default is the groups' lifetime: "
        "AD drops a deleted member's value without moving its groups' stamps, so a "
        "deletion is seen within entry_cache_group_timeout, as with SSSD, and a name "
        "given to a new account never inherits the old one's groups for longer "
        "(docs/compatibility.md §6.6); set it higher to validate AD groups by stamps at "
        "expiry.",
        "86400 (ad: entry_cache_group_timeout)",
    ),
    "offline_timeout": Option(integer(1), 60, "First retry after going offline, seconds."),
    "offline_timeout_max": Option(integer(0), 3600, "Retry backoff cap, seconds."),
    "offline_timeout_random_offset": Option(integer(0), 30, "Random seconds added to each retry."),
    "ldap_network_timeout": Option(integer(1), 6, "Connect timeout per server, seconds."),
    "ldap_search_timeout": Option(
        integer(1), 6, "Deadline of one whole search (all pages), seconds."
    ),
    "ldap_opt_timeout": Option(
        integer(1), 8, "Deadline of StartTLS, bind and root DSE read together, seconds."
    ),
    "failover_primary_timeout": Option(
        integer(1),
        31,
        "While an ldap_backup_uri server serves, seconds between tries of the ldap_uri "
        "servers (SSSD: 31, its minimum; cached accepts less for tests).",
    ),
    "ldap_page_size": Option(integer(0), 1000, "Paged-results page size; 0 = no paging."),
    "case_sensitive": Option(case_sensitive, "true", "`true`, `false` or `preserving`."),
    "min_id": Option(
        integer(0), 1, "Lowest uid/gid served; id 0 is never served, whatever it says."
    ),
    "max_id": Option(integer(0, MAX_ID), 0, "Highest uid/gid served; 0 = no limit."),
    "enumerate": Option(
        boolean, False, "Answer getpwent/getgrent with this domain's cached entries (no LDAP)."
    ),
    "filter_users": Option(
        str_list,
        [],
        "Users of this domain never answered, in addition to [nss] filter_users (as SSSD; "
        "`name@OTHER` for another domain is ignored here).",
    ),
    "filter_groups": Option(
        str_list, [], "Groups of this domain never answered, in addition to [nss] filter_groups."
    ),
}


# ---------------------------------------------------------------------------
# The parsed configuration.


@dataclass(frozen=True)
class DaemonConfig:
    domains: list[str]
    pipes_dir: str
    mc_dir: str
    db_dir: str
    pid_file: str
    ts_sync_interval: int
    dbus_address: str


@dataclass(frozen=True)
class NssConfig:
    entry_negative_timeout: int
    entry_cache_nowait_percentage: int
    cache_first_wait: int
    memcache_timeout: int
    memcache_size_passwd: int
    memcache_size_group: int
    memcache_size_initgroups: int
    filter_users: list[str]
    filter_groups: list[str]
    pwfield: str
    enumerate: bool
    client_idle_timeout: int
    max_clients: int
    max_clients_per_uid: int
    root_reserved_clients: int
    max_reply_buffer_per_uid: int

    @property
    def group_memcache(self) -> bool:
        """The responder keeps a group memory-cache file: a size and a lifetime, 0
        disabling it (§2.1; memcache.MemoryCache.open makes no file then)."""
        return self.memcache_timeout > 0 and self.memcache_size_group > 0


@dataclass(frozen=True)
class DomainConfig:
    name: str
    id_provider: str
    enabled: bool | None
    domain_type: str
    ldap_uri: list[str]
    ldap_backup_uri: list[str]
    ldap_search_base: str
    ldap_user_search_base: str
    ldap_group_search_base: str
    ldap_user_search_filter: str
    ldap_group_search_filter: str
    ldap_schema: str
    ldap_use_tokengroups: bool
    ldap_referrals: bool
    ldap_id_mapping: bool
    ldap_idmap_range_min: int
    ldap_idmap_range_max: int
    ldap_idmap_range_size: int
    ldap_idmap_default_domain_sid: str
    ldap_idmap_autorid_compat: bool
    ldap_idmap_helper_table_size: int
    ldap_user_objectsid: str
    ldap_user_primary_group: str
    ldap_group_objectsid: str
    ldap_default_bind_dn: str
    ldap_default_authtok_type: str
    ldap_default_authtok: str
    ldap_sasl_mech: str
    ldap_id_use_start_tls: bool
    ldap_tls_reqcert: str
    ldap_tls_cacert: str
    ldap_tls_cacertdir: str
    ldap_user_object_class: str
    ldap_user_name: str
    ldap_user_uid_number: str
    ldap_user_gid_number: str
    ldap_user_gecos: str
    ldap_user_home_directory: str
    ldap_user_shell: str
    ldap_user_modify_timestamp: str
    ldap_user_entry_usn: str
    ldap_group_object_class: str
    ldap_group_name: str
    ldap_group_gid_number: str
    ldap_group_member: str
    ldap_group_modify_timestamp: str
    ldap_group_entry_usn: str
    ldap_group_nesting_level: int
    ldap_deref_threshold: int
    ignore_group_members: bool
    ldap_member_rdn_shortcut: bool
    entry_cache_timeout: int
    entry_cache_user_timeout: int
    entry_cache_group_timeout: int
    refresh_expired_interval: int
    refresh_full_interval: int
    offline_timeout: int
    offline_timeout_max: int
    offline_timeout_random_offset: int
    ldap_network_timeout: int
    ldap_search_timeout: int
    ldap_opt_timeout: int
    failover_primary_timeout: int
    ldap_page_size: int
    case_sensitive: str
    min_id: int
    max_id: int
    enumerate: bool
    filter_users: list[str]
    filter_groups: list[str]

    @property
    def case_insensitive(self) -> bool:
        return self.case_sensitive != "true"

    def id_in_range(self, n: int) -> bool:
        """SSSD's OUT_OF_ID_RANGE, negated: id 0 is always out of range whatever
        ``min_id`` says (no directory entry may be root), and (uid_t)-1 is not an id
        (setuid(-1) means "leave unchanged"; chown(-1) likewise)."""
        return 0 < n <= MAX_ID and n >= self.min_id and (self.max_id == 0 or n <= self.max_id)

    def id_bounds(self) -> tuple[int, int]:
        """(lo, hi): ``lo <= n <= hi`` exactly when ``id_in_range(n)``, for a loop over
        thousands of ids (a method call per id was a tenth of naming a swept member)."""
        return max(1, self.min_id), MAX_ID if self.max_id == 0 else min(self.max_id, MAX_ID)


@dataclass(frozen=True)
class Config:
    path: str
    daemon: DaemonConfig
    nss: NssConfig
    domains: list[DomainConfig]
    warnings: list[str] = field(default_factory=list)

    def domain(self, name: str) -> DomainConfig:
        for d in self.domains:
            if d.name == name:
                return d
        known = ", ".join(d.name for d in self.domains)
        raise ConfigError(f"{self.path}: no domain named {name!r} (configured: {known})")
