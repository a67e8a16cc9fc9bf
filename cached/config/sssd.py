"""What SSSD's options mean to cached, beyond its own: the SSSD options it accepts and
has no use for, those it refuses unless set to a value that changes nothing, the
sections of responders it does not have, and SSSD's list of enabled domains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cached.config.errors import ConfigError
from cached.config.ini import Ini
from cached.config.parsers import boolean

# SSSD options that cached accepts without using, so an existing sssd.conf loads
# without a wall of warnings. Anything not here and not an option warns.
ACCEPTED_UNUSED = frozenset(
    {
        "config_file_version",
        "debug_level",
        "debug_timestamps",
        "debug_microseconds",
        "debug_backtrace_enabled",
        "reconnection_retries",
        "user",
        "autofs_provider",
        "selinux_provider",
        "krb5_server",
        # realmd's own record of how it joined (`realm list` reads it).
        "realmd_tags",
        # The KDCs and kpasswd servers are krb5.conf's; the principal is name@REALM
        # (docs/compatibility.md, "Kerberos logins").
        "krb5_backup_server",
        "krb5_kpasswd",
        "krb5_backup_kpasswd",
        "krb5_use_kdcinfo",
        "krb5_use_enterprise_principal",
        "krb5_canonicalize",
        "krb5_auth_timeout",
        "ldap_tls_reqsan",
        "timeout",
        "account_cache_expiration",
        "memcache_size_sid",
        "entry_cache_service_timeout",
        "entry_cache_autofs_timeout",
        "entry_cache_ssh_host_timeout",
        "entry_cache_resolver_timeout",
        "ldap_enumeration_refresh_timeout",
        "ldap_purge_cache_timeout",
        # [ssh]: certificates are not read (SshConfig.ssh_use_certificate_keys).
        "ca_db",
        "ssh_use_certificate_matching_rules",
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
    return not boolean(raw)


def _is_unset(raw: str) -> bool:
    return not raw.strip()


UNSUPPORTED: dict[str, Unsupported] = {
    "ldap_rfc2307_fallback_to_local_users": Unsupported(
        _is_false,
        "cached lists only the members that the directory's users resolve to; remove it",
    ),
    # SSSD 2.8.2's documented options that change answers and that cached does not
    # implement (the option table of docs/compatibility.md lists every one).
    "domain_resolution_order": Unsupported(
        _is_unset,
        "cached looks names up in the order of `domains`; list the domains in that "
        "order there and remove it",
    ),
    "cache_first": Unsupported(
        _is_false,
        "cached asks each domain in turn, its cache then its server, as SSSD's "
        "default; with several domains, true would answer a later domain's cached "
        "entry before an earlier domain's server; remove it",
    ),
    "ldap_min_id": Unsupported(
        lambda raw: _is_unset(raw) or raw.strip() == "0",
        "cached limits the ids it serves with min_id and max_id; use those",
    ),
    "ldap_max_id": Unsupported(
        lambda raw: _is_unset(raw) or raw.strip() == "0",
        "cached limits the ids it serves with min_id and max_id; use those",
    ),
    "ldap_deref": Unsupported(
        lambda raw: raw.strip().lower() in ("", "never"),
        "cached never dereferences aliases (SSSD's default, `never`): entries behind an "
        "alias would be found by SSSD and not by cached; remove it",
    ),
    "ldap_disable_range_retrieval": Unsupported(
        _is_false,
        "cached always reads every value of a ranged attribute (AD's member;1500-*), so "
        "big groups keep all their members where SSSD would cut them; remove it",
    ),
    **{
        name: Unsupported(
            _is_unset,
            "cached presents no client certificate and uses OpenSSL's default ciphers "
            "(a server that requires either refuses it); remove it",
        )
        for name in ("ldap_tls_cert", "ldap_tls_key", "ldap_tls_cipher_suite")
    },
}

# Sections of sssd.conf that belong to responders cached does not have.
IGNORED_SECTIONS = (
    "autofs",
    "pac",
    "ifp",
    "secrets",
    "kcm",
    "session_recording",
)


def unsupported_problem(section: str, name: str, raw: str, u: Unsupported) -> str | None:
    """Why ``name = raw`` is refused, or None for a value under which SSSD answers as
    cached (it loads quietly)."""
    what = f"[{section}] {name} = {raw.strip()!r}"
    try:
        harmless = u.harmless(raw)
    except ValueError as e:
        return f"{what} is invalid: {e}"
    return None if harmless else f"{what} is not supported: {u.instead}"


def enabled_domains(
    ini: Ini, main_name: str, listed: list[str], domain_sections: dict[str, str]
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
            enabled = boolean(raw)
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
