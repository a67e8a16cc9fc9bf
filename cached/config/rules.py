"""The rules across options of a domain: the defaults that depend on other options
(``ldap_schema = ad``'s attribute names, the per-kind lifetimes, the search bases), the
options a domain must set, the combinations refused, and the warnings for options that
are deprecated or act otherwise than in SSSD. Each works on the values of one section,
by option name, before they become a DomainConfig."""

from __future__ import annotations

import socket
from typing import Any

from cached.config.errors import ConfigError
from cached.config.gpomap import GpoRight, service_table
from cached.config.ini import Ini
from cached.config.options import (
    DOMAIN_OPTIONS,
    AccessProvider,
    AccessRule,
    AuthProvider,
    CaseSensitive,
    ChpassProvider,
    ExpirePolicy,
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
            f"{ini.where(sname)}: [{sname}] id_provider is not set; cached supports `ldap` "
            "and `ad`"
        )
    if not vals["ldap_uri"] and vals["id_provider"] != "ad":
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
    for timeout in (
        "entry_cache_user_timeout",
        "entry_cache_group_timeout",
        "entry_cache_netgroup_timeout",
    ):
        vals.setdefault(timeout, vals["entry_cache_timeout"])
    _refresh_ahead_defaults(vals)
    _kerberos_defaults(ini, sname, vals, given, warnings)
    _login_defaults(ini, sname, vals, given)
    # The chpass servers default to the lookup ones (ldap_init.c: no chpass service of
    # its own); ldap_chpass_backup_uri counts only beside ldap_chpass_uri (ldap_common.c
    # sdap_service_init for the chpass service).
    if not vals["ldap_chpass_uri"]:
        vals["ldap_chpass_uri"] = list(vals["ldap_uri"])
        vals["ldap_chpass_backup_uri"] = list(vals["ldap_backup_uri"])
    _schema_defaults(ini.where(sname), sname, vals, given, warnings)
    if "ldap_member_rdn_shortcut" in given:
        warnings.append(
            f"{ini.where(sname, 'ldap_member_rdn_shortcut')}: [{sname}] "
            "ldap_member_rdn_shortcut is deprecated and ignored: member names come from "
            "the member entries"
        )
    for base in ("ldap_user_search_base", "ldap_group_search_base", "ldap_netgroup_search_base",
                 "ldap_sudo_search_base"):
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
    try:
        service_table({r: vals[f"ad_gpo_map_{r.value}"] for r in GpoRight})
    except ValueError as e:
        raise ConfigError(f"{ini.where(sname)}: [{sname}] ad_gpo_map_*: {e}") from None
    _access_warnings(ini.where(sname), sname, vals, warnings)
    if vals["max_id"] and vals["max_id"] < vals["min_id"]:
        raise ConfigError(
            f"{ini.where(sname, 'max_id')}: [{sname}] max_id = {vals['max_id']} is below "
            f"min_id = {vals['min_id']}"
        )


def _kerberos_defaults(
    ini: Ini, sname: str, vals: dict[str, Any], given: dict[str, str], warnings: list[str]
) -> None:
    """id_provider = ad's defaults, as SSSD's ad_common.c sets them over the LDAP
    provider's (ad_opts.c ad_def_ldap_opts; ad_set_sdap_options): the AD schema, ID
    mapping, a SASL GSSAPI bind as the host's principal (``SHORTNAME$@REALM``, the
    account adcli join made) with the keytab, referrals off, the DCs from ad_server
    (SRV records by default). The GSSAPI options of id_provider = ldap too."""
    ad = vals["id_provider"] == "ad"
    domain = sname.split("/", 1)[-1]
    vals.setdefault("ad_domain", domain.lower() if ad else "")
    vals.setdefault("ad_hostname", socket.gethostname() if ad else "")
    vals.setdefault("krb5_realm", vals["ad_domain"].upper())
    if ad:
        if "ldap_schema" in given and vals["ldap_schema"] != Schema.AD:
            warnings.append(
                f"{ini.where(sname, 'ldap_schema')}: [{sname}] ldap_schema = "
                f"{vals['ldap_schema']} is ignored with id_provider = ad (as SSSD: the AD "
                "provider reads the AD schema)"
            )
        vals["ldap_schema"] = Schema.AD
        if "ldap_id_mapping" not in given:
            vals["ldap_id_mapping"] = True
        if "ldap_account_expire_policy" not in given:
            # ad_opts.c ad_def_ldap_opts: the AD provider's expire rule reads
            # userAccountControl and accountExpires (access_provider = ad).
            vals["ldap_account_expire_policy"] = ExpirePolicy.AD
        if "case_sensitive" not in given:
            # sssd.conf(5): "Default: True (False for AD provider)".
            vals["case_sensitive"] = CaseSensitive.FALSE
        if "fallback_homedir" not in given:
            # sssd-ad(5): the AD provider's default, the domain's, so it wins over
            # [nss] (confdb.c confdb_get_domain_internal).
            vals["fallback_homedir"] = "/home/%d/%u"
        if "ldap_sasl_mech" not in given:
            vals["ldap_sasl_mech"] = "gssapi"
        if "ldap_uri" not in given:
            vals["ldap_uri"] = [ad_uri(s) for s in vals["ad_server"]]
        if "ldap_backup_uri" not in given:
            vals["ldap_backup_uri"] = [ad_uri(s) for s in vals["ad_backup_server"]]
        if not vals["ldap_uri"]:
            raise ConfigError(
                f"{ini.where(sname, 'ad_server')}: [{sname}] ad_server is empty; name the "
                "domain's DCs or `_srv_`"
            )
    if vals["ldap_sasl_mech"] == "gss-spnego":
        vals["ldap_sasl_mech"] = "gssapi"
    if vals["ldap_sasl_mech"] != "gssapi":
        vals.setdefault("ldap_sasl_authid", "")
        return
    if not vals["krb5_realm"]:
        raise ConfigError(
            f"{ini.where(sname, 'ldap_sasl_mech')}: [{sname}] ldap_sasl_mech = GSSAPI needs "
            "krb5_realm (the realm of the host's principal and of the servers')"
        )
    if "ldap_sasl_authid" not in vals:
        host = vals["ad_hostname"] or socket.gethostname()
        # AD: the computer account's name, the short host name, at most 15 characters
        # (NetBIOS), upper case, then `$` (adcli's default --computer-name); LDAP:
        # SSSD's default for the LDAP provider.
        primary = host.split(".", 1)[0][:15].upper() + "$" if ad else f"host/{host}"
        vals["ldap_sasl_authid"] = f"{primary}@{vals['krb5_realm']}"
    elif "@" not in vals["ldap_sasl_authid"]:
        vals["ldap_sasl_authid"] += f"@{vals['krb5_realm']}"


# ad_server's marker: the DCs come from DNS (discovery.py).
SRV_MARKER = "_srv_"


def ad_uri(server: str) -> str:
    """The URI of an ad_server entry: ``ldap://NAME[:PORT]``; ``_srv_`` kept as
    ``ldap://_srv_`` for the client to expand."""
    server = server.strip()
    return f"ldap://{server.lower()}" if "://" not in server else server


def _login_defaults(ini: Ini, sname: str, vals: dict[str, Any], given: dict[str, str]) -> None:
    """SSSD's: auth_provider is id_provider's (dp_targets.c), chpass_provider is
    auth_provider's, and the AD provider validates TGTs and takes its realm from
    ad_domain (ad_opts.c, ad_common.c)."""
    if "auth_provider" not in given and vals["id_provider"] == "ad":
        vals["auth_provider"] = AuthProvider.AD
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


def _access_warnings(path: str, sname: str, vals: dict[str, Any], warnings: list[str]) -> None:
    """SSSD's start-up warnings of an ``ldap`` access order that lets nobody in
    (ldap_init.c set_access_rules): said at load, where the administrator looks.
    ``access_provider = ad`` needs the AD provider's identity, as SSSD's
    (ad_init.c: its access context is built on the AD id context)."""
    if vals["access_provider"] == AccessProvider.AD and vals["id_provider"] != "ad":
        raise ConfigError(
            f"{path}: [{sname}] access_provider = ad needs id_provider = ad (the host's "
            "keytab, its computer account and the DC's SYSVOL); with id_provider = "
            f"{vals['id_provider']} use access_provider = ldap with "
            "ldap_account_expire_policy = ad"
        )
    if vals["access_provider"] != AccessProvider.LDAP:
        return
    order = vals["ldap_access_order"]
    why = []
    if AccessRule.FILTER in order and not vals["ldap_access_filter"]:
        why.append("ldap_access_order has `filter` but ldap_access_filter is not set")
    if AccessRule.EXPIRE in order and not vals["ldap_account_expire_policy"]:
        why.append("ldap_access_order has `expire` but ldap_account_expire_policy is not set")
    if AccessRule.AUTHZ_SEARCH in order and not vals["pam_authz_search"]:
        why.append("ldap_access_order has `pam_authz_search` but pam_authz_search is not set")
    for w in why:
        warnings.append(
            f"{path}: [{sname}] access_provider = ldap: {w}, so every user of the domain "
            "is denied (as SSSD)"
        )
