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
        "sudo_provider",
        "autofs_provider",
        "selinux_provider",
        "krb5_server",
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
        "ldap_pwd_policy",
        "ldap_chpass_uri",
        "timeout",
        "account_cache_expiration",
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
    return not boolean(raw)


def _is_unset(raw: str) -> bool:
    return not raw.strip()


# SSSD's default re_expression for LDAP domains (sssd.conf(5)): setting it to that is
# no change.
_SSSD_RE_EXPRESSION = "(?P<name>[^@]+)@?(?P<domain>[^@]*$)"

# Access control (who may log in) is a PAM account check: cached's PAM responder answers
# ACCT_MGMT with success for every user (access_provider = permit) until access control
# is implemented, and without `services = pam` pam_sss finds no socket and returns
# PAM_USER_UNKNOWN, which the usual account line (`[default=bad success=ok
# user_unknown=ignore] pam_sss.so`) turns into "allowed". Either way a restriction SSSD
# enforced would silently vanish: refused. SSSD's default access_provider is `permit`
# (dp_targets.c); `ldap` without ldap_access_filter denies everyone (ldap_init.c), so
# every other value restricts.
_NO_ACCESS_CONTROL = (
    "cached does not enforce access control yet (its PAM account check lets every user "
    "in, as access_provider = permit), so this login restriction would not be enforced; "
    "enforce it another way (e.g. pam_access, or a filter in ldap_user_search_base, "
    "which cached applies to who exists) and remove the option"
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
    "re_expression": Unsupported(
        lambda raw: _is_unset(raw) or raw.strip() == _SSSD_RE_EXPRESSION,
        "cached splits a domain out of a name only as SSSD's default does "
        "(name@DOMAIN); remove it",
    ),
    "krb5_renew_interval": Unsupported(
        lambda raw: _is_unset(raw) or raw.strip() in ("0", "0s"),
        "cached does not renew users' tickets in the background yet: each login gets a "
        "new TGT (renewable for krb5_renewable_lifetime, so `kinit -R` works); remove it",
    ),
    "ldap_rfc2307_fallback_to_local_users": Unsupported(
        _is_false,
        "cached lists only the members that the directory's users resolve to; remove it",
    ),
}

# Sections of sssd.conf that belong to responders cached does not have.
IGNORED_SECTIONS = (
    "sudo",
    "autofs",
    "ssh",
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
