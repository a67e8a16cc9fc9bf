"""The rules across options of a domain: the defaults that depend on other options
(``ldap_schema = ad``'s attribute names, the per-kind lifetimes, the search bases), the
options a domain must set, the combinations refused, and the warnings for options that
are deprecated or act otherwise than in SSSD. Each works on the values of one section,
by option name, before they become a DomainConfig."""

from __future__ import annotations

from typing import Any

from cached.config.errors import ConfigError
from cached.config.ini import Ini
from cached.config.options import (
    DOMAIN_OPTIONS,
    AuthProvider,
    ChpassProvider,
    Schema,
)

# SSSD's defaults for ldap_schema = ad (ldap_opts.c gen_ad2008r2_user_map,
# gen_ad2008r2_group_map, gen_ad_attr_map), declared with each option (``ad=``): used for
# the options the file leaves unset.
AD_DEFAULTS: dict[str, Any] = {
    name: opt.ad_default for name, opt in DOMAIN_OPTIONS.items() if opt.ad_default is not None
}


def check_required(ini: Ini, sname: str, vals: dict[str, Any]) -> None:
    """The options without which a domain cannot be served."""
    if vals.get("id_provider") is None:
        raise ConfigError(
            f"{ini.where(sname)}: [{sname}] id_provider is not set; cached supports `ldap`"
        )
    if not vals["ldap_uri"]:
        raise ConfigError(
            f"{ini.where(sname)}: [{sname}] ldap_uri is not set; give at least one server"
        )


def complete_domain(ini: Ini, sname: str, vals: dict[str, Any], warnings: list[str]) -> None:
    """Fill in the defaults computed from other options and check the combinations,
    in place; a warning for each option that acts otherwise than the file may expect."""
    given = ini.sections[sname]
    if vals["ldap_default_authtok"] and not vals["ldap_default_bind_dn"]:
        raise ConfigError(
            f"{ini.where(sname, 'ldap_default_authtok')}: [{sname}] ldap_default_authtok "
            "is set but ldap_default_bind_dn is not"
        )
    for timeout in ("entry_cache_user_timeout", "entry_cache_group_timeout"):
        vals.setdefault(timeout, vals["entry_cache_timeout"])
    _refresh_ahead_defaults(vals)
    _kerberos_defaults(ini, sname, vals)
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
        # looks.
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


def _kerberos_defaults(ini: Ini, sname: str, vals: dict[str, Any]) -> None:
    """SSSD's: chpass_provider is auth_provider's, and the AD provider validates TGTs
    and takes its realm from ad_domain (ad_opts.c, ad_common.c)."""
    auth = vals["auth_provider"]
    vals.setdefault("chpass_provider", ChpassProvider(str(auth)))
    vals.setdefault("krb5_validate", auth == AuthProvider.AD)
    if auth == AuthProvider.AD and not vals["krb5_realm"]:
        if not vals["ad_domain"]:
            raise ConfigError(
                f"{ini.where(sname, 'auth_provider')}: [{sname}] auth_provider = ad needs "
                "ad_domain (or krb5_realm): the realm of the users' principals"
            )
        vals["krb5_realm"] = vals["ad_domain"].upper()


def _refresh_ahead_defaults(vals: dict[str, Any]) -> None:
    """Refresh ahead on unless set to 0: SSSD's rule for an interval that would outlast
    the entries (confdb.c: 70 % of the lifetime, the offset 10 % of that) is the
    default interval, so every entry is refreshed before it expires (reference §6.4)."""
    lifetime = min(vals["entry_cache_user_timeout"], vals["entry_cache_group_timeout"])
    # In integers: 0.7 * 5400 is 3779.999... in floating point.
    vals.setdefault("refresh_expired_interval", lifetime * 7 // 10)
    vals.setdefault("refresh_expired_interval_offset", vals["refresh_expired_interval"] // 10)


def _schema_defaults(
    path: str, sname: str, vals: dict[str, Any], given: dict[str, str], warnings: list[str]
) -> None:
    """The defaults that depend on ldap_schema, and the checks across options."""
    schema = vals["ldap_schema"]
    if schema == Schema.AD:
        for name, value in AD_DEFAULTS.items():
            if name not in given:
                vals[name] = value
    if not vals["ldap_group_member"]:
        vals["ldap_group_member"] = "memberUid" if schema == Schema.RFC2307 else "member"
    if "refresh_full_interval" not in vals:
        vals["refresh_full_interval"] = (
            vals["entry_cache_group_timeout"] if schema == Schema.AD else 86400
        )
    if "ldap_use_tokengroups" not in vals:
        vals["ldap_use_tokengroups"] = schema == Schema.AD
    elif vals["ldap_use_tokengroups"] and schema != Schema.AD:
        raise ConfigError(
            f"{path}: [{sname}] ldap_use_tokengroups = true needs ldap_schema = ad "
            "(tokenGroups and objectSid are Active Directory's)"
        )
    if vals["ldap_id_mapping"] and schema != Schema.AD:
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
