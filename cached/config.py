"""Configuration: sssd.conf syntax, so an existing /etc/sssd/sssd.conf loads unchanged.

Sections: ``[cached]`` (alias ``[sssd]``), ``[nss]``, ``[domain/NAME]``. Every option is
declared once in a table below with its type, SSSD's default (reference §6.1) and its
limits; that table is both the validator and the source of the option tables in
README.md and of cached.conf(5) (``python -m cached.docgen`` writes them). Errors name
the file, section, option and value; unknown options warn and name the option; SSSD
options that cached accepts but has no use for (``services``, ``auth_provider``, ...)
are accepted quietly so a real sssd.conf loads; SSSD options that would change who is
who (``use_fully_qualified_names = true``, ...) are refused unless set to a value that
changes nothing (``UNSUPPORTED``).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "/etc/cached/cached.conf"
# The highest uid/gid a directory entry may carry: (uid_t)-1 = 4294967295 is the
# "no id" value of the system calls, never an id.
MAX_ID = 0xFFFFFFFE


class ConfigError(Exception):
    """A configuration problem the administrator must fix; the message says how."""


# ---------------------------------------------------------------------------
# Value parsers. Each takes the raw string and returns the value or raises
# ValueError with a short description of what was expected.


class NotSupported(ValueError):
    """A value SSSD accepts that cached does not support: the message says why and
    what to write instead (reported as "is not supported", never "is invalid")."""


def _not_supported(
    choices: tuple[str, ...], why: dict[str, str]
) -> Callable[[str], str]:
    """One of ``choices``; an SSSD value in ``why`` is refused with its reason."""

    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v in choices:
            return v
        if v in why:
            raise NotSupported(why[v])
        raise ValueError("expected one of " + ", ".join(choices))

    return parse


def _bool(raw: str) -> bool:
    # SSSD's ini parser accepts true/false case-insensitively; yes/no/1/0 are common in
    # hand-written files, so accept them as well.
    v = raw.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            v = int(raw.strip(), 10)
        except ValueError:
            raise ValueError("expected an integer") from None
        if lo is not None and v < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and v > hi:
            raise ValueError(f"must be at most {hi}")
        return v

    return parse


def _str(raw: str) -> str:
    return raw.strip()


def _list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v not in choices:
            raise ValueError("expected one of " + ", ".join(choices))
        return v

    return parse


def _uri_list(raw: str) -> list[str]:
    uris = _list(raw)
    for uri in uris:
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme not in ("ldap", "ldaps", "ldapi"):
            raise ValueError(f"{uri!r} is not an ldap://, ldaps:// or ldapi:// URI")
    return uris


def _id_provider(raw: str) -> str:
    v = raw.strip().lower()
    if v == "ad":
        raise ValueError(
            "cached has no AD provider; read Active Directory as an LDAP server: write "
            "`id_provider = ldap` with its `ldap_uri`, `ldap_schema = ad` and a bind DN "
            "(`ldap_default_bind_dn`, `ldap_default_authtok`); add `ldap_id_mapping = true` "
            "when the users have no uidNumber/gidNumber (SSSD's numbers)"
        )
    if v in ("files", "proxy", "ipa", "krb5", "local"):
        raise NotSupported(
            {
                "files": "SSSD's files provider serves /etc/passwd and /etc/group, which "
                "glibc's own `files` module answers (keep `files` before `sss` in "
                "nsswitch.conf); remove this domain from `domains`",
                "ipa": "cached has no IPA provider (HBAC, views, trusts); it supports "
                "`id_provider = ldap`, with which an IPA server's users and groups can be "
                "read as rfc2307bis",
            }.get(v, f"cached has no {v} provider; it supports only `id_provider = ldap`")
        )
    if v != "ldap":
        raise ValueError("expected one of ldap")  # as _choice says it
    return v


def _domain_sid(raw: str) -> str:
    v = raw.strip()
    parts = v.split("-")
    if v and (
        len(parts) < 4 or parts[0].upper() != "S" or not all(p.isdigit() for p in parts[1:])
    ):
        raise ValueError("expected a domain SID such as S-1-5-21-1-2-3")
    return v


@dataclass(frozen=True)
class SearchBase:
    """One search base of SSSD's ``base?scope?filter`` syntax (sssd-ldap(5))."""

    dn: str
    scope: str = "sub"  # "base" | "one" | "sub"
    filter: str = ""  # with its parentheses, or ""


_SCOPES = {"": "sub", "sub": "sub", "subtree": "sub", "one": "one", "onelevel": "one",
           "base": "base"}  # fmt: skip


def parse_search_bases(raw: str) -> tuple[SearchBase, ...]:
    """SSSD's search-base syntax (``common_parse_search_base``): a plain DN, or
    ``base?scope?filter`` repeated (``b1?subtree?(f1)?b2?onelevel?``); scope
    ``base``, ``onelevel`` (``one``) or ``subtree`` (``sub``, the default when
    empty); a filter without parentheses gets them. Empty: no base (the root DSE's)."""
    raw = raw.strip()
    if not raw:
        return ()
    parts = raw.split("?")
    if len(parts) == 1:
        return (SearchBase(raw),)
    if len(parts) % 3:
        raise ValueError(
            "expected a DN or base?scope?filter (several separated by '?'): "
            f"{len(parts)} '?'-separated fields is not a multiple of 3"
        )
    out = []
    for i in range(0, len(parts), 3):
        dn, scope, filt = parts[i].strip(), parts[i + 1].strip().lower(), parts[i + 2].strip()
        if not dn or "=" not in dn:
            raise ValueError(f"base {i // 3 + 1}: {dn!r} is not a DN")
        if scope not in _SCOPES:
            raise ValueError(
                f"base {i // 3 + 1}: unknown scope {parts[i + 1]!r}; "
                "expected base, onelevel or subtree"
            )
        try:
            filt = _search_filter(filt)
        except ValueError as e:
            raise ValueError(f"base {i // 3 + 1}: {e}") from None
        out.append(SearchBase(dn, _SCOPES[scope], filt))
    return tuple(out)


def _search_filter(raw: str) -> str:
    """An LDAP filter, parenthesised as the filters of search bases are."""
    filt = raw.strip()
    if filt and not filt.startswith("("):
        filt = f"({filt})"
    depth = 0
    for ch in filt:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth != 0:
        raise ValueError(f"filter {filt!r} has unbalanced parentheses")
    return filt


def _search_base(raw: str) -> str:
    parse_search_bases(raw)  # validated here, so the error names the option
    return raw.strip()


def _case_sensitive(raw: str) -> str:
    v = raw.strip().lower()
    if v in ("true", "false", "preserving"):
        return v
    raise ValueError("expected true, false or preserving")


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
    "domains": Option(_list, [], "Domains to serve, in lookup order.", "(required)"),
    "pipes_dir": Option(_str, "/var/lib/sss/pipes", "Directory of the NSS socket `nss`."),
    "mc_dir": Option(_str, "/var/lib/sss/mc", "Directory of the memory-cache files."),
    "db_dir": Option(_str, "/var/lib/cached/db", "Directory of the LMDB cache files."),
    "pid_file": Option(_str, "/run/cached.pid", "PID file of the monitor (`cached serve`)."),
    "ts_sync_interval": Option(
        _int(1), 60, "Seconds between syncs of the no-sync timestamp store to disk."
    ),
    "dbus_address": Option(
        _str, "system", "D-Bus bus of the InfoPipe interface: `system`, an address, or `none`."
    ),
}

NSS_OPTIONS: dict[str, Option] = {
    "entry_negative_timeout": Option(_int(0), 15, "Seconds a name not found stays not found."),
    "entry_cache_nowait_percentage": Option(
        _int(0, 99), 50, "Refresh in the background after this % of the entry lifetime; 0 = off."
    ),
    "cache_first_wait": Option(
        _int(0, 3600),
        1,
        "cached: seconds an expired cached entry waits for its refresh before the cached "
        "entry is answered (the refresh goes on); 0 = wait as SSSD does.",
    ),
    "memcache_timeout": Option(_int(0), 300, "Lifetime of memory-cache records, seconds; 0 = off."),
    "memcache_size_passwd": Option(_int(0), 8, "Size of mc/passwd in MiB; 0 disables it."),
    "memcache_size_group": Option(_int(0), 6, "Size of mc/group in MiB; 0 disables it."),
    "memcache_size_initgroups": Option(_int(0), 10, "Size of mc/initgroups in MiB; 0 = off."),
    "filter_users": Option(_list, ["root"], "Users never answered (NOTFOUND)."),
    "filter_groups": Option(_list, ["root"], "Groups never answered (NOTFOUND)."),
    "pwfield": Option(_str, "*", "The passwd field returned in passwd entries."),
    "enumerate": Option(
        _bool, False, "Answer getpwent/getgrent with the cached entries of every domain."
    ),
    "client_idle_timeout": Option(
        _int(10), 60, "Seconds before an idle client connection is closed (SSSD minimum 10)."
    ),
    "max_clients": Option(
        _int(1), 1024, "Cap on concurrent NSS connections (cached; SSSD relies on ulimit)."
    ),
    # The NSS socket is open to every local user (reference §1.9); these three keep one
    # user from taking what the others need (docs/threat-model.md).
    # 256: libnss_sss keeps one connection per thread, so a busy multi-threaded daemon
    # needs tens; a quarter of the default max_clients leaves room for three more.
    "max_clients_per_uid": Option(
        _int(1), 256, "cached: cap on concurrent NSS connections of one non-root uid."
    ),
    # 32: root's logins (sshd, login, cron, systemd) still resolve when non-root users
    # hold every other connection; at most half of max_clients.
    "root_reserved_clients": Option(
        _int(0), 32, "cached: NSS connections only root may use (at most max_clients / 2)."
    ),
    # 16 MiB: ten replies of a 200,000-member group (1.6 MB each), a thousand of a
    # 1,000-member one; no client of one user leaves more unread. 1,000 never-reading
    # connections took 2.9 GB without it; with it, 16 MiB per attacking uid.
    "max_reply_buffer_per_uid": Option(
        _int(1), 16, "cached: MiB of replies one uid may leave unread before it must wait."
    ),
}

DOMAIN_OPTIONS: dict[str, Option] = {
    "id_provider": Option(_id_provider, None, "Must be `ldap`.", "(required)"),
    "enabled": Option(
        _bool,
        None,
        "As SSSD: `true` serves the domain even when `domains` does not list it (after the "
        "listed ones), `false` never serves it, even when listed.",
    ),
    "domain_type": Option(
        _choice("posix", "application"),
        "posix",
        "`application` domains are not served over NSS (as SSSD): such a domain, like an "
        "`[application/NAME]` section, is left out with a warning.",
    ),
    "ldap_uri": Option(_uri_list, [], "Servers, tried in order (failover).", "(required)"),
    "ldap_backup_uri": Option(_uri_list, [], "Servers tried after every ldap_uri failed."),
    "ldap_search_base": Option(
        _search_base,
        "",
        "Default search base, `dn` or SSSD's `dn?scope?filter[?dn?scope?filter...]`; "
        "read from the root DSE if unset.",
    ),
    "ldap_user_search_base": Option(
        _search_base, "", "Base(s) of user searches, same syntax (default: search base)."
    ),
    "ldap_group_search_base": Option(
        _search_base, "", "Base(s) of group searches, same syntax (default: search base)."
    ),
    "ldap_user_search_filter": Option(
        _search_filter,
        "",
        "Deprecated, applied as SSSD 2.8.2 applies it: the filter of a plain "
        "ldap_user_search_base (one DN, or the root DSE's); with the `dn?scope?filter` "
        "syntax it is ignored (as SSSD), with a warning.",
    ),
    "ldap_group_search_filter": Option(
        _search_filter, "", "Deprecated, the same for ldap_group_search_base."
    ),
    "ldap_schema": Option(
        _not_supported(
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
        _bool,
        None,
        "Initgroups from the user's tokenGroups (AD's transitive closure, one base "
        "search) and batched objectSid searches.",
        "true with ad, else false",
    ),
    "ldap_referrals": Option(
        _bool,
        False,
        "cached never chases referrals (SSSD's advice for AD); continuation references "
        "are ignored, `true` warns.",
    ),
    "ldap_id_mapping": Option(
        _bool,
        False,
        "Map objectSid to uid/gid as SSSD does (same slices: files keep their owners); "
        "uidNumber/gidNumber are then ignored. Only with ldap_schema = ad.",
    ),
    "ldap_idmap_range_min": Option(_int(0), 200000, "Lowest id of ID mapping."),
    "ldap_idmap_range_max": Option(_int(1), 2000200000, "End of the ID-mapping range."),
    "ldap_idmap_range_size": Option(_int(1), 200000, "Ids per domain slice."),
    "ldap_idmap_default_domain_sid": Option(
        _domain_sid, "", "Domain SID mapped to slice 0 (default: by hash, as SSSD)."
    ),
    "ldap_idmap_autorid_compat": Option(
        _bool, False, "Place slices as winbind's autorid does (first free slice)."
    ),
    "ldap_idmap_helper_table_size": Option(
        _int(0), 10, "Secondary slices precomputed per domain (RIDs above range_size)."
    ),
    "ldap_user_objectsid": Option(_str, "objectSid", "User SID attribute (ad)."),
    "ldap_user_primary_group": Option(_str, "primaryGroupID", "Primary group RID (ad)."),
    "ldap_group_objectsid": Option(_str, "objectSid", "Group SID attribute (ad)."),
    "ldap_default_bind_dn": Option(_str, "", "Bind DN; anonymous when unset."),
    "ldap_default_authtok_type": Option(
        _not_supported(
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
    "ldap_default_authtok": Option(_str, "", "Bind password (the file must then be mode 0600)."),
    "ldap_sasl_mech": Option(
        _not_supported(
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
    "ldap_id_use_start_tls": Option(_bool, False, "Use StartTLS on ldap:// URIs."),
    "ldap_tls_reqcert": Option(
        _choice("never", "allow", "try", "demand", "hard"),
        "demand",
        "Server certificate check; `try`/`demand`/`hard` verify it and refuse a bad one "
        "(a server always presents one, so SSSD's `try` acts as `demand`); `never`/`allow` "
        "do not.",
    ),
    "ldap_tls_cacert": Option(_str, "", "CA certificate file (PEM)."),
    "ldap_tls_cacertdir": Option(_str, "", "CA certificate directory (c_rehash'ed)."),
    "ldap_user_object_class": Option(_str, "posixAccount", "User object class."),
    "ldap_user_name": Option(_str, "uid", "User name attribute."),
    "ldap_user_uid_number": Option(_str, "uidNumber", "UID attribute."),
    "ldap_user_gid_number": Option(_str, "gidNumber", "Primary GID attribute."),
    "ldap_user_gecos": Option(_str, "gecos", "GECOS attribute (falls back to `cn`)."),
    "ldap_user_home_directory": Option(_str, "homeDirectory", "Home directory attribute."),
    "ldap_user_shell": Option(_str, "loginShell", "Login shell attribute."),
    "ldap_user_modify_timestamp": Option(_str, "modifyTimestamp", "Change-time attribute."),
    "ldap_user_entry_usn": Option(_str, "", "USN attribute (e.g. entryUSN), unset by default."),
    "ldap_group_object_class": Option(_str, "posixGroup", "Group object class."),
    "ldap_group_name": Option(_str, "cn", "Group name attribute."),
    "ldap_group_gid_number": Option(_str, "gidNumber", "GID attribute."),
    "ldap_group_member": Option(
        _str,
        "",
        "Member attribute: `memberUid` (rfc2307) or `member` (rfc2307bis).",
        "memberUid / member",
    ),
    "ldap_group_modify_timestamp": Option(_str, "modifyTimestamp", "Change-time attribute."),
    "ldap_group_entry_usn": Option(_str, "", "USN attribute, unset by default."),
    "ldap_group_nesting_level": Option(
        _int(0, 100), 2, "Nested levels followed (rfc2307bis); 0 = direct groups only."
    ),
    "ldap_deref_threshold": Option(
        _int(0),
        10,
        "Deref control on the nesting walk's searches, and for a group with more unnamed "
        "members than this; 0 = never.",
    ),
    "ignore_group_members": Option(_bool, False, "Do not fetch or return group members."),
    "ldap_member_rdn_shortcut": Option(
        _bool,
        True,
        "Deprecated and ignored (docs/compatibility.md §9.3): member names always come from "
        "the member "
        "entries, never from the spelling of their DN.",
    ),
    "entry_cache_timeout": Option(_int(0), 5400, "Lifetime of cached entries, seconds."),
    "entry_cache_user_timeout": Option(
        _int(0), None, "Lifetime of cached users, seconds.", "entry_cache_timeout"
    ),
    "entry_cache_group_timeout": Option(
        _int(0), None, "Lifetime of cached groups, seconds.", "entry_cache_timeout"
    ),
    "refresh_expired_interval": Option(
        _int(0), 0, "Seconds between background refreshes of expiring entries; 0 = off."
    ),
    "refresh_full_interval": Option(
        _int(0),
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
    "offline_timeout": Option(_int(1), 60, "First retry after going offline, seconds."),
    "offline_timeout_max": Option(_int(0), 3600, "Retry backoff cap, seconds."),
    "offline_timeout_random_offset": Option(_int(0), 30, "Random seconds added to each retry."),
    "ldap_network_timeout": Option(_int(1), 6, "Connect timeout per server, seconds."),
    "ldap_search_timeout": Option(_int(1), 6, "Deadline of one whole search (all pages), seconds."),
    "ldap_opt_timeout": Option(
        _int(1), 8, "Deadline of StartTLS, bind and root DSE read together, seconds."
    ),
    "failover_primary_timeout": Option(
        _int(1),
        31,
        "While an ldap_backup_uri server serves, seconds between tries of the ldap_uri "
        "servers (SSSD: 31, its minimum; cached accepts less for tests).",
    ),
    "ldap_page_size": Option(_int(0), 1000, "Paged-results page size; 0 = no paging."),
    "case_sensitive": Option(_case_sensitive, "true", "`true`, `false` or `preserving`."),
    "min_id": Option(_int(0), 1, "Lowest uid/gid served; id 0 is never served, whatever it says."),
    "max_id": Option(_int(0, MAX_ID), 0, "Highest uid/gid served; 0 = no limit."),
    "enumerate": Option(
        _bool, False, "Answer getpwent/getgrent with this domain's cached entries (no LDAP)."
    ),
    "filter_users": Option(
        _list,
        [],
        "Users of this domain never answered, in addition to [nss] filter_users (as SSSD; "
        "`name@OTHER` for another domain is ignored here).",
    ),
    "filter_groups": Option(
        _list, [], "Groups of this domain never answered, in addition to [nss] filter_groups."
    ),
}

# SSSD options that cached accepts without using, so an existing sssd.conf loads
# without a wall of warnings. Anything not here and not in a table above warns.
ACCEPTED_UNUSED = frozenset(
    {
        "config_file_version",
        "services",
        "debug_level",
        "debug_timestamps",
        "debug_microseconds",
        "debug_backtrace_enabled",
        "reconnection_retries",
        "user",
        "auth_provider",
        "chpass_provider",
        "sudo_provider",
        "autofs_provider",
        "selinux_provider",
        "cache_credentials",
        "krb5_realm",
        "krb5_server",
        "ldap_tls_reqsan",
        "ldap_pwd_policy",
        "ldap_chpass_uri",
        "ldap_connection_expire_timeout",
        "timeout",
        "full_name_format",
        "shell_fallback",
        "account_cache_expiration",
        "offline_credentials_expiration",
        "offline_failed_login_attempts",
        "offline_failed_login_delay",
        "pam_verbosity",
        "memcache_size_sid",
        "entry_cache_netgroup_timeout",
        "entry_cache_service_timeout",
        "entry_cache_sudo_timeout",
        "entry_cache_autofs_timeout",
        "entry_cache_ssh_host_timeout",
        "entry_cache_resolver_timeout",
        "ldap_enumeration_refresh_timeout",
        "ldap_purge_cache_timeout",
    }
)


@dataclass(frozen=True)
class Unsupported:
    """An SSSD option cached does not implement. ``harmless(raw)`` is true for the
    values under which SSSD answers as cached does (they load quietly); any other value
    stops the start, naming the option and what cached does ``instead``: a migration
    must never silently change who is who, or what their entries say."""

    harmless: Callable[[str], bool]
    instead: str


def _is_false(raw: str) -> bool:
    return not _bool(raw)


def _is_unset(raw: str) -> bool:
    return not raw.strip()


# SSSD's default re_expression for LDAP domains (sssd.conf(5)): setting it to that is
# no change.
_SSSD_RE_EXPRESSION = "(?P<name>[^@]+)@?(?P<domain>[^@]*$)"

# Access control (who may log in) is a PAM account check: cached answers NSS only and
# has no PAM responder, so pam_sss finds no socket, returns PAM_USER_UNKNOWN, and the
# usual account line (`[default=bad success=ok user_unknown=ignore] pam_sss.so`) lets the
# user in. A restriction SSSD enforced would silently vanish: refused. SSSD's default
# access_provider is `permit` (dp_targets.c); `ldap` without ldap_access_filter denies
# everyone (ldap_init.c), so every other value restricts.
_NO_ACCESS_CONTROL = (
    "cached answers NSS only and has no PAM responder, so this login restriction would "
    "not be enforced (pam_sss finds no PAM socket, and the usual PAM account stack then "
    "lets the user in); enforce it another way (e.g. pam_access, or a filter in "
    "ldap_user_search_base, which cached applies to who exists) and remove the option"
)
_ACCESS_OPTIONS = (
    "ldap_access_filter",
    "ldap_access_order",
    "simple_allow_users",
    "simple_allow_groups",
    "simple_deny_users",
    "simple_deny_groups",
)

UNSUPPORTED: dict[str, Unsupported] = {
    "access_provider": Unsupported(
        lambda raw: raw.strip().lower() in ("", "permit"), _NO_ACCESS_CONTROL
    ),
    **{name: Unsupported(_is_unset, _NO_ACCESS_CONTROL) for name in _ACCESS_OPTIONS},
    "auto_private_groups": Unsupported(
        lambda raw: raw.strip().lower() == "false",
        "cached serves each user's primary gid as the directory holds it and makes no group "
        "named after the user (SSSD would answer gid = uid with such a group: primary "
        "groups and file group owners would change); set it to false or remove it",
    ),
    "use_fully_qualified_names": Unsupported(
        _is_false,
        "cached answers with plain names (alice, never alice@DOMAIN); set it to false or "
        "remove it (names in files, ACLs and sudoers that carry @DOMAIN must change)",
    ),
    "default_domain_suffix": Unsupported(
        _is_unset, "cached answers with plain names and does not qualify them; remove it"
    ),
    "override_space": Unsupported(
        _is_unset, "cached serves names as the directory holds them, spaces included; remove it"
    ),
    "re_expression": Unsupported(
        lambda raw: _is_unset(raw) or raw.strip() == _SSSD_RE_EXPRESSION,
        "cached looks names up exactly as given and splits no domain out of them; remove it",
    ),
    "override_homedir": Unsupported(
        _is_unset, "cached serves the directory's home directory unchanged; remove it"
    ),
    "fallback_homedir": Unsupported(
        _is_unset,
        "cached serves the directory's home directory, empty when it has none; remove it",
    ),
    "override_shell": Unsupported(
        _is_unset, "cached serves the directory's login shell unchanged; remove it"
    ),
    "default_shell": Unsupported(
        _is_unset,
        "cached serves the directory's login shell, empty (so /bin/sh) when it has none; remove it",
    ),
    "allowed_shells": Unsupported(
        _is_unset, "cached serves the directory's login shell unchanged; remove it"
    ),
    "vetoed_shells": Unsupported(
        _is_unset, "cached serves the directory's login shell unchanged; remove it"
    ),
    "override_gid": Unsupported(
        _is_unset, "cached serves the directory's primary gid unchanged; remove it"
    ),
    "filter_users_in_groups": Unsupported(
        lambda raw: not _is_false(raw),
        "cached always leaves the users of filter_users out of group member lists "
        "(SSSD's default, true); remove it",
    ),
    "ldap_rfc2307_fallback_to_local_users": Unsupported(
        _is_false,
        "cached lists only the members that the directory's users resolve to; remove it",
    ),
}

# Sections of sssd.conf that belong to responders cached does not have.
IGNORED_SECTIONS = (
    "pam",
    "sudo",
    "autofs",
    "ssh",
    "pac",
    "ifp",
    "secrets",
    "kcm",
    "session_recording",
)


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


# ---------------------------------------------------------------------------
# Loading.


class _Ini:
    """The sections of a file (and, later, its snippets) as SSSD's libini reads them
    (sss_ini.c ``sss_ini_parse``: INI_PARSE_NOWRAP, INI_MV1S_OVERWRITE, sections merged),
    with the file that set each option, so a message names the file at fault."""

    def __init__(self, path: str) -> None:
        self.path = path  # the main file
        self.sections: dict[str, dict[str, str]] = {}  # in order of first appearance
        self.origin: dict[tuple[str, str], str] = {}  # (section, option) -> file
        self.section_origin: dict[str, str] = {}  # section -> file it first appeared in
        # Every file that set the bind password, not only the last (its mode is checked).
        self.secret_files: dict[str, set[str]] = {}  # section -> files
        self._folded: dict[str, str] = {}  # a section name case-folded -> its name here

    def canonical(self, name: str) -> str:
        """A section's name as this reader keeps it: SSSD's confdb stores a section as
        a case-insensitive ``cn``, so ``[NSS]`` is ``[nss]`` and ``[domain/LDAP]`` is
        ``[DOMAIN/ldap]`` (found in review: ``[NSS]`` was ignored with its
        ``filter_users``). The kind (``nss``, ``domain/``...) is lower-cased; a
        domain's name keeps the spelling it first had."""
        kind, slash, rest = name.partition("/")
        return self._folded.setdefault(name.lower(), kind.lower() + slash + rest)

    def where(self, section: str, option: str | None = None) -> str:
        """The file that set ``option`` of ``section`` (or that holds the section)."""
        if option is not None and (section, option) in self.origin:
            return self.origin[(section, option)]
        return self.section_origin.get(section, self.path)

    # `option = value`. Only `=`, as libini ("Equal sign is missing"): with `:` too, a
    # wrapped `ldaps://host` line would be an option `ldaps`.
    _OPTION = re.compile(r"(?P<key>[^=]*?)\s*=\s*(?P<value>.*)")

    def read(self, text: str, path: str, warnings: list[str]) -> None:
        """Add the sections of ``text`` (the file ``path``); what it sets overrides
        what an earlier file set. Every line stands alone, as in libini: leading blanks
        are dropped, and an indented line is never a continuation of the one before.
        The one exception is libini's C comment: ``/*`` in the first column to a line
        ending in ``*/`` (_ends_c_comment); ``//`` there comments out its line."""
        current: str | None = None
        header_line: dict[str, int] = {}  # in this file
        option_line: dict[tuple[str, str], int] = {}
        # A leading byte-order mark is no part of the first line (editors on other
        # systems write one). Lines end at "\n" only, as libini's: str.splitlines()
        # also ends one at a form feed, a vertical tab, U+2028..., so a comment holding
        # one became an option (found in review: `# retired<FF>ldap_tls_reqcert =
        # never` turned certificate checks off for cached only).
        comment_from = 0  # the line of an open `/*`
        for lineno, raw_line in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
            if comment_from:
                if _ends_c_comment(raw_line, 2):
                    comment_from = 0
                continue
            if raw_line.startswith(("//", "/*")):
                # C comments, which libini reads as SSSD calls it (no
                # INI_PARSE_NO_C_COMMENTS): only from the line's first column, as
                # there; an indented one is an `option = value` line in both.
                if raw_line.startswith("/*") and not _ends_c_comment(raw_line, 3):
                    comment_from = lineno
                continue
            line = raw_line.strip()
            if not line or line[0] in "#;":
                continue
            if line[0] == "[":
                name = line[1:-1].strip() if line.endswith("]") else ""
                if not name:
                    raise ConfigError(
                        f"{path}: line {lineno}: cannot parse {line!r}: a section header "
                        "is `[name]`"
                    )
                name = self.canonical(name)
                if name in header_line:
                    warnings.append(
                        f"{path}: line {lineno}: section [{name}] appears again (first at "
                        f"line {header_line[name]}); its options are merged, as SSSD does"
                    )
                header_line.setdefault(name, lineno)
                self.sections.setdefault(name, {})
                self.section_origin.setdefault(name, path)
                current = name
                continue
            m = self._OPTION.fullmatch(line)
            if m is None or not m["key"]:
                raise ConfigError(
                    f"{path}: line {lineno}: cannot parse {line!r}: expected "
                    "`option = value`, a `[section]` header or a `#` comment"
                )
            if current is None:
                raise ConfigError(f"{path}: line {lineno}: option outside any section: {line!r}")
            key = m["key"].lower()
            if (current, key) in option_line:
                warnings.append(
                    f"{path}: line {lineno}: [{current}] option {key!r} is set again (first "
                    f"at line {option_line[(current, key)]}); the last value is used, as "
                    "SSSD does"
                )
            option_line[(current, key)] = lineno
            self.sections[current][key] = m["value"]
            self.origin[(current, key)] = path
            if key == "ldap_default_authtok" and m["value"]:
                self.secret_files.setdefault(current, set()).add(path)
        if comment_from:
            # SSSD refuses the file ("Incomplete comment at the end of the file").
            raise ConfigError(
                f"{path}: line {comment_from}: the comment opened by `/*` is never closed: "
                "SSSD ends one only at a line ending in `*/` with something before the `*/` "
                "on that line (a line of just `*/` does not end it)"
            )


# libini (ding-libs ini_parse.c, check_for_comment): a line ends a C comment when its
# last non-blank characters are `*/` with the `/` at index 2 or more (on the opening
# line 3 or more, so `/*/` opens one and `/**/` is whole). SSSD 2.8.2's `sssctl
# config-check` accepts `/* a` then ` b */` and refuses `/*` then `*/`.
_BLANKS = " \t\n\v\f\r"  # C isspace() in the C locale


def _ends_c_comment(raw_line: str, least: int) -> bool:
    """Whether ``raw_line`` closes a C comment: it ends in ``*/`` (blanks after it
    aside) whose ``/`` is at index ``least`` or more, counting leading blanks."""
    line = raw_line.rstrip(_BLANKS)
    return line.endswith("*/") and len(line) - 1 >= least


def _enabled_domains(
    ini: _Ini, main_name: str, listed: list[str], domain_sections: dict[str, str]
) -> list[str]:
    """SSSD's domain list (confdb.c ``confdb_get_enabled_domain_list``): ``domains``,
    then, domain by domain, ``enabled = true`` adds one not listed (at the end) and
    ``enabled = false`` removes one that is; names compared case-insensitively."""
    names = list(listed)
    for dname, sname in domain_sections.items():
        raw = ini.sections[sname].get("enabled")
        if raw is None:
            continue
        try:
            enabled = _bool(raw)
        except ValueError as e:
            raise ConfigError(
                f"{ini.where(sname, 'enabled')}: [{sname}] enabled = {raw.strip()!r} is "
                f"invalid: {e}"
            ) from None
        present = [n for n in names if n.lower() == dname.lower()]
        if enabled and not present:
            names.append(dname)
        elif not enabled:
            names = [n for n in names if n not in present]
    return names


def _read_section(
    ini: _Ini,
    section: str,
    table: dict[str, Option],
    warnings: list[str],
) -> dict[str, Any]:
    values: dict[str, Any] = {name: opt.default for name, opt in table.items()}
    for name, raw in ini.sections.get(section, {}).items():
        path = ini.where(section, name)
        opt = table.get(name)
        if opt is None:
            unsupported = UNSUPPORTED.get(name)
            if unsupported is not None:
                _check_unsupported(path, section, name, raw, unsupported)
            elif name not in ACCEPTED_UNUSED:
                warnings.append(f"{path}: [{section}] unknown option {name!r} is ignored")
            continue
        try:
            values[name] = opt.parse(raw)
        except NotSupported as e:
            raise ConfigError(
                f"{path}: [{section}] {name} = {raw.strip()!r} is not supported: {e}"
            ) from None
        except ValueError as e:
            raise ConfigError(
                f"{path}: [{section}] {name} = {raw.strip()!r} is invalid: {e}"
            ) from None
    return values


def _check_unsupported(path: str, section: str, name: str, raw: str, u: Unsupported) -> None:
    where = f"{path}: [{section}] {name} = {raw.strip()!r}"
    try:
        harmless = u.harmless(raw)
    except ValueError as e:
        raise ConfigError(f"{where} is invalid: {e}") from None
    if not harmless:
        raise ConfigError(f"{where} is not supported: {u.instead}")


# SSSD's defaults for ldap_schema = ad (ldap_opts.c gen_ad2008r2_user_map,
# gen_ad2008r2_group_map, gen_ad_attr_map): used for the options the file leaves unset.
AD_DEFAULTS = {
    "ldap_user_object_class": "user",
    "ldap_user_name": "sAMAccountName",
    "ldap_user_home_directory": "unixHomeDirectory",
    "ldap_user_modify_timestamp": "whenChanged",
    "ldap_user_entry_usn": "uSNChanged",
    "ldap_group_object_class": "group",
    "ldap_group_name": "sAMAccountName",
    "ldap_group_member": "member",
    "ldap_group_modify_timestamp": "whenChanged",
    "ldap_group_entry_usn": "uSNChanged",
}


def _schema_defaults(
    path: str, sname: str, vals: dict[str, Any], given: Any, warnings: list[str]
) -> None:
    """The defaults that depend on ldap_schema, and the checks across options."""
    schema = vals["ldap_schema"]
    if schema == "ad":
        for name, value in AD_DEFAULTS.items():
            if name not in given:
                vals[name] = value
    if not vals["ldap_group_member"]:
        vals["ldap_group_member"] = "memberUid" if schema == "rfc2307" else "member"
    if vals["refresh_full_interval"] is None:
        vals["refresh_full_interval"] = (
            vals["entry_cache_group_timeout"] if schema == "ad" else 86400
        )
    if vals["ldap_use_tokengroups"] is None:
        vals["ldap_use_tokengroups"] = schema == "ad"
    elif vals["ldap_use_tokengroups"] and schema != "ad":
        raise ConfigError(
            f"{path}: [{sname}] ldap_use_tokengroups = true needs ldap_schema = ad "
            "(tokenGroups and objectSid are Active Directory's)"
        )
    if vals["ldap_id_mapping"] and schema != "ad":
        raise ConfigError(
            f"{path}: [{sname}] ldap_id_mapping = true needs ldap_schema = ad "
            "(the ids are computed from objectSid)"
        )
    if vals["ldap_referrals"]:
        warnings.append(
            f"{path}: [{sname}] ldap_referrals = true: cached never chases referrals; "
            "continuation references are ignored"
        )
    if vals["ldap_id_mapping"]:
        lo, hi, size = (vals[f"ldap_idmap_range_{k}"] for k in ("min", "max", "size"))
        if hi <= lo or hi - lo < size:
            raise ConfigError(
                f"{path}: [{sname}] ldap_idmap_range_min = {lo}, ldap_idmap_range_max = {hi} "
                f"and ldap_idmap_range_size = {size} leave no slice: the range must hold "
                "at least one slice"
            )


def _check_secret_permissions(path: str, st: os.stat_result, section: str) -> None:
    """Refuse a bind password readable by others, as SSSD refuses such an sssd.conf."""
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{path}: [{section}] holds ldap_default_authtok, but the file is mode "
            f"{stat.S_IMODE(st.st_mode):04o} (readable by group or others); "
            f"run: chmod 600 {path}"
        )


def parse_config(text: str, path: str = "<string>", st: os.stat_result | None = None) -> Config:
    """Parse sssd.conf-syntax ``text``; ``st`` is the file's stat for the permission check."""
    warnings: list[str] = []
    ini = _Ini(path)
    ini.read(text, path, warnings)
    return _config(ini, {path: st}, warnings)


def _config(ini: _Ini, stats: dict[str, os.stat_result | None], warnings: list[str]) -> Config:
    """The configuration the sections of ``ini`` say; ``stats`` holds each file's stat
    for the permission check of a bind password."""
    path = ini.path
    sections = list(ini.sections)
    main = [s for s in sections if s in ("cached", "sssd")]
    if len(main) > 1:
        raise ConfigError(f"{path}: both [cached] and [sssd] are present; keep one of them")
    if not main:
        raise ConfigError(f"{path}: no [cached] section (or [sssd]); it must list `domains`")
    main_name = main[0]
    daemon_vals = _read_section(ini, main_name, DAEMON_OPTIONS, warnings)
    nss_vals = _read_section(ini, "nss", NSS_OPTIONS, warnings)

    domain_sections = {s[len("domain/") :]: s for s in sections if s.startswith("domain/")}
    app_sections = {
        s[len("application/") :]: s for s in sections if s.startswith("application/")
    }
    names = _enabled_domains(ini, main_name, daemon_vals["domains"], domain_sections)
    # `domains` names its sections case-insensitively too (confdb's cn): a domain is
    # called as its section spells it.
    spelled = {d.lower(): d for d in [*domain_sections, *app_sections]}
    names = list(dict.fromkeys(spelled.get(n.lower(), n) for n in names))
    if not names:
        raise ConfigError(
            f"{ini.where(main_name, 'domains')}: [{main_name}] domains is not set; "
            "list at least one domain (or set `enabled = true` in a [domain/NAME] section)"
        )
    left_out: set[str] = set()
    for dname in list(names):
        sname = domain_sections.get(dname)
        dtype = ini.sections[sname].get("domain_type", "") if sname else ""
        if dname in app_sections or dtype.strip().lower() == "application":
            where = ini.where(sname, "domain_type") if sname else ini.where(app_sections[dname])
            warnings.append(
                f"{where}: domain {dname!r} is an application domain; left out, as SSSD "
                "does not serve application domains over NSS"
            )
            names.remove(dname)
            left_out.add(dname)
    if not names:
        raise ConfigError(
            f"{ini.where(main_name, 'domains')}: [{main_name}] domains lists only "
            "application domains, which are not served over NSS; nothing to serve"
        )
    for s in sections:
        if s in (main_name, "nss") or s.startswith(("domain/", "application/")):
            continue
        if s in IGNORED_SECTIONS:
            log.debug("%s: section [%s] is for an SSSD responder cached does not have", path, s)
        else:
            warnings.append(f"{ini.where(s)}: unknown section [{s}] is ignored")
    for dname, sname in domain_sections.items():
        quiet = dname in left_out or "enabled" in ini.sections[sname]
        if dname not in names and not quiet:
            warnings.append(
                f"{ini.where(sname)}: [{sname}] is not listed in [{main_name}] domains; ignored"
            )

    domains: list[DomainConfig] = []
    for dname in names:
        if dname not in domain_sections:
            raise ConfigError(
                f"{ini.where(main_name, 'domains')}: [{main_name}] domains lists {dname!r} but "
                f"there is no [domain/{dname}] section"
            )
        sname = domain_sections[dname]
        given = ini.sections[sname]
        vals = _read_section(ini, sname, DOMAIN_OPTIONS, warnings)
        if vals["id_provider"] is None:
            raise ConfigError(
                f"{ini.where(sname)}: [{sname}] id_provider is not set; cached supports `ldap`"
            )
        if not vals["ldap_uri"]:
            raise ConfigError(
                f"{ini.where(sname)}: [{sname}] ldap_uri is not set; give at least one server"
            )
        # Every file that set a password, not only the one whose value won, and even
        # when a later one empties it: a password in a world-readable main file stays
        # readable whatever a snippet sets later (found in review).
        for holder in sorted(ini.secret_files.get(sname, ())):
            st = stats.get(holder)
            if st is not None:
                _check_secret_permissions(holder, st, sname)
        if vals["ldap_default_authtok"]:
            holder = ini.where(sname, "ldap_default_authtok")
            if not vals["ldap_default_bind_dn"]:
                raise ConfigError(
                    f"{holder}: [{sname}] ldap_default_authtok is set but "
                    "ldap_default_bind_dn is not"
                )
        for timeout in ("entry_cache_user_timeout", "entry_cache_group_timeout"):
            if vals[timeout] is None:
                vals[timeout] = vals["entry_cache_timeout"]
        _schema_defaults(ini.where(sname), sname, vals, given, warnings)
        if "ldap_member_rdn_shortcut" in given:
            warnings.append(
                f"{ini.where(sname, 'ldap_member_rdn_shortcut')}: [{sname}] "
                "ldap_member_rdn_shortcut is deprecated and ignored: member names come from "
                "the member entries"
            )
        for base in ("ldap_user_search_base", "ldap_group_search_base"):
            if not vals[base]:
                vals[base] = vals["ldap_search_base"]
        for kind in ("user", "group"):
            opt = f"ldap_{kind}_search_filter"
            if not vals[opt]:
                continue
            where = f"{ini.where(sname, opt)}: [{sname}] {opt}"
            if "?" in vals[f"ldap_{kind}_search_base"]:
                warnings.append(
                    f"{where} is ignored, as SSSD ignores it, because "
                    f"ldap_{kind}_search_base uses the base?scope?filter syntax; put the "
                    "filter there"
                )
            else:
                warnings.append(
                    f"{where} is deprecated (applied, as SSSD does); write it into "
                    f"ldap_{kind}_search_base as BASE?subtree?FILTER"
                )
        if vals["enumerate"]:
            # A documented difference (docs/compatibility.md §9.1), said where the admin
            # looks: found in the configuration review.
            warnings.append(
                f"{ini.where(sname, 'enumerate')}: [{sname}] enumerate = true lists the "
                "users and groups cached so far (those looked up), not the whole directory "
                "as SSSD does"
            )
        if vals["max_id"] and vals["max_id"] < vals["min_id"]:
            raise ConfigError(
                f"{ini.where(sname, 'max_id')}: [{sname}] max_id = {vals['max_id']} is below "
                f"min_id = {vals['min_id']}"
            )
        domains.append(DomainConfig(name=dname, **vals))

    return Config(
        path=path,
        daemon=DaemonConfig(**daemon_vals),
        nss=NssConfig(**nss_vals),
        domains=domains,
        warnings=warnings,
    )


def _read_file(path: str) -> tuple[str, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; create it (see contrib/cached.conf) or pass -c FILE"
        ) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {e.start})") from None


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def _check_file_permissions(path: str, st: os.stat_result) -> None:
    """Whoever can write the configuration chooses the servers, so every uid and group
    membership: refuse a file that another user owns or that group or others may write
    (SSSD refuses any sssd.conf not root-owned and mode 0600/0400)."""
    if not _owner_ok(st):
        raise ConfigError(
            f"{path}: owned by uid {st.st_uid}; the configuration must belong to root (or to "
            f"the user running cached); run: chown root:root {path}"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others change the "
            f"configuration; run: chmod go-w {path}"
        )


# SSSD's snippets (sss_ini.c sss_ini_add_snippets): files of conf.d whose names match
# this, merged in alphabetical order.
SNIPPET_NAME = re.compile(r"[^.].*\.conf")


def _snippets(
    path: str, warnings: list[str], tool: bool = False
) -> list[tuple[str, str, os.stat_result]]:
    """The conf.d snippets of ``path`` as SSSD merges them: ``conf.d`` beside the file,
    names ending in ``.conf`` and not starting with ``.``, in alphabetical order. A
    snippet that fails SSSD's access check (owned by root:root, nothing for group or
    others; cached also takes a file owned by the user running it and its group) is
    skipped with a warning, as SSSD skips it with a log line."""
    confd = os.path.join(os.path.dirname(path) or ".", "conf.d")
    try:
        names = sorted(n for n in os.listdir(confd) if SNIPPET_NAME.fullmatch(n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise ConfigError(f"{confd}: cannot read the snippet directory: {e.strerror}") from None
    out = []
    for name in names:
        spath = os.path.join(confd, name)
        try:
            regular = stat.S_ISREG(os.stat(spath).st_mode)
        except OSError as e:
            raise ConfigError(f"{spath}: cannot read: {e.strerror}") from None
        if not regular:
            warnings.append(f"{spath}: not a regular file; skipped")
            continue
        if tool and os.geteuid() != 0 and not os.access(spath, os.R_OK):
            # A tool run by a user (cached status, getent, id) reads what it may: a
            # snippet only root may read, as it must be, stopped them all (found in
            # review). The daemon never skips one: started unprivileged, it would
            # lose what the snippet sets (TLS checks, the bind), so it stops instead.
            log.debug("%s: only root may read it; skipped (run as root to use it)", spath)
            continue
        text, st = _read_file(spath)
        # SSSD's check is uid, gid and mode (libini ini_access_check with 0, 0, 0600 in
        # sss_ini.c): a root-owned 0600 snippet of group `wheel` is skipped there too
        # (sssctl config-check: "did not pass access check. Skipping."), so cached must
        # not apply what SSSD leaves out.
        group_ok = st.st_gid in (0, os.getegid())
        if not _owner_ok(st) or not group_ok or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"{spath}: skipped, as SSSD skips it: a snippet must belong to root:root (or "
                "to the user running cached) and give group and others no access, but it is "
                f"owned by {st.st_uid}:{st.st_gid} with mode {stat.S_IMODE(st.st_mode):04o}; "
                f"run: chown root:root {spath}; chmod 600 {spath}"
            )
            continue
        out.append((spath, text, st))
    return out


def load_config(path: str = DEFAULT_CONFIG, *, tool: bool = False) -> Config:
    """Read and validate ``path`` and the snippets of the ``conf.d`` directory beside
    it, which override it (sssd.conf(5), "CONFIGURATION SNIPPETS FROM INCLUDE
    DIRECTORY"). Raises ConfigError with a message for the administrator. ``tool``:
    for a command other than the daemon's, which as a user skips the snippets only
    root may read."""
    text, st = _read_file(path)
    _check_file_permissions(path, st)
    warnings: list[str] = []
    ini = _Ini(path)
    ini.read(text, path, warnings)
    stats: dict[str, os.stat_result | None] = {path: st}
    for spath, stext, sst in _snippets(path, warnings, tool):
        try:
            _Ini(spath).read(stext, spath, [])  # whole, or not at all
        except ConfigError as e:
            # SSSD skips a snippet it cannot parse, with a log line, and starts.
            warnings.append(f"{e}; the snippet is skipped, as SSSD skips it")
            continue
        ini.read(stext, spath, warnings)
        stats[spath] = sst
    return _config(ini, stats, warnings)
