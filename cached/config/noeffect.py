"""Why each SSSD option cached accepts without using changes no answer.

``NO_EFFECT`` maps an option SSSD 2.8.2 documents (sssd.conf(5), sssd-ldap(5),
sssd-ldap-attributes(5), sssd-ad(5); the list is cached/config/sssd_documented.py) to
the reason cached may load it and do nothing: it is read only by a part of SSSD that
cached does not have and whose absence the file's other options already settle (a
provider cached refuses, a responder it does not run), or it tunes how SSSD works
without changing what it answers. An option that would change an answer is never
here: cached implements it (options.py) or refuses it (sssd.py ``UNSUPPORTED``).
The loader accepts these quietly; ``cached config-check`` and the option table of
docs/compatibility.md say why."""

from __future__ import annotations

_LOGGING = "logging only: cached logs through its own --log-level"
_TUNING = "how SSSD's processes run, not what they answer"
_KERBEROS = (
    "Kerberos details cached leaves to MIT krb5 and krb5.conf (the KDCs, the replay "
    "cache, the realm's spelling, the host ticket's lifetime): the host's GSSAPI bind "
    "always takes its TGT from ldap_krb5_keytab as ldap_sasl_authid, and logins "
    "(auth_provider = krb5 | ad) ask krb5.conf's KDCs; no passwd or group answer "
    "depends on it"
)
_CHPASS = (
    "DNS discovery of the password change servers (`_srv_`), which cached does not do: "
    "ldap_chpass_uri names them (the lookup servers when unset)"
)
_SUBDOMAINS = "trusted subdomains, which cached does not serve (only the domains listed)"
_OTHER_MAPS = (
    "a map cached does not serve (hosts, services, networks, autofs, SSH host keys): "
    "its lookups are never asked of cached's sockets"
)
_PROXY = "id_provider = proxy, which cached refuses"
_AD_PROVIDER = (
    "an AD provider setting that changes no answer cached gives: it serves the one "
    "domain of the section (no other enabled domains, no remote domain-local groups), "
    "renews no machine password (keep `adcli update` in a timer) and reads the DCs "
    "over a sealed GSSAPI session instead of LDAPS; see docs/compatibility.md, "
    "\"AD-joined hosts\""
)
_IFP_ONLY = (
    "an attribute SSSD keeps for its InfoPipe (D-Bus) and lookups by it; no passwd or "
    "group answer shows it"
)
_NO_DNS = (
    "DNS service discovery and resolver tuning: cached reads no _srv_ URI (ldap_uri "
    "refuses it) and resolves each URI's host as the system does"
)
_PAM_LOGIN = "logins (PAM): it changes no passwd or group answer"

NO_EFFECT: dict[str, str] = {
    # -- every section
    "debug": _LOGGING,
    "debug_level": _LOGGING,
    "debug_timestamps": _LOGGING,
    "debug_microseconds": _LOGGING,
    "debug_backtrace_enabled": _LOGGING,
    "ldap_library_debug_level": _LOGGING,
    "timeout": "SSSD's watchdog of its own processes; cached's monitor restarts a child "
    "that exits",
    # -- [sssd]
    "config_file_version": "a marker of the file's format; cached reads version 2",
    "reconnection_retries": "how often an SSSD responder reconnects to its backend; "
    "cached's responder answers from the cache meanwhile (invariant 4)",
    "user": "the user SSSD drops to; cached's daemons run as root (the NSS socket is "
    "root's)",
    "monitor_resolv_conf": _NO_DNS,
    "try_inotify": _NO_DNS,
    "krb5_rcache_dir": _KERBEROS,
    "certificate_verification": "smart-card logins (PAM), which cached does not offer",
    "disable_netlink": "SSSD goes online on network changes; cached retries its "
    "servers on its own timers (invariant 4)",
    "enable_files_domain": "SSSD's implicit files domain serves /etc/passwd and "
    "/etc/group, which glibc's own files module answers first (files before sss in "
    "nsswitch.conf, as Debian writes it)",
    "implicit_pac_responder": "the PAC responder (Kerberos tickets of AD users), which "
    "cached does not have",
    "core_dumpable": _TUNING,
    # -- the services' general options
    "fd_limit": _TUNING + "; cached bounds its clients with max_clients",
    "responder_idle_timeout": "SSSD's socket-activated responders exit when idle; "
    "cached's responder runs as long as the daemon",
    # -- [nss]
    "enum_cache_timeout": "how long SSSD keeps an enumeration; cached enumerates its "
    "cache at each setpwent (enumerate, docs/compatibility.md §9.1)",
    "local_negative_timeout": "SSSD does not answer names /etc/passwd and /etc/group "
    "hold; glibc's files module, before sss, answers them first",
    "get_domains_timeout": _SUBDOMAINS,
    "user_attributes": _IFP_ONLY,
    "memcache_size_sid": "the SID memory cache, read only by libsss_nss_idmap (SID "
    "lookups), which cached does not answer",
    # -- domain
    "subdomain_enumerate": _SUBDOMAINS,
    "subdomains_provider": _SUBDOMAINS,
    "subdomain_inherit": _SUBDOMAINS,
    "subdomain_homedir": _SUBDOMAINS,
    "entry_cache_service_timeout": _OTHER_MAPS,
    "entry_cache_resolver_timeout": _OTHER_MAPS,
    "entry_cache_autofs_timeout": _OTHER_MAPS,
    "entry_cache_ssh_host_timeout": _OTHER_MAPS,
    "entry_cache_computer_timeout": "computer objects (GPO access control), which "
    "cached does not read",
    "account_cache_expiration": "days before SSSD drops a user not looked up; cached "
    "keeps entries until the server says they are gone, and serves them offline "
    "whatever their age (invariant 4)",
    "cache_credentials_minimal_first_factor_length": "two-factor logins, whose first "
    "factor SSSD may cache; cached's logins take one password",
    "autofs_provider": _OTHER_MAPS,
    "selinux_provider": "SELinux user maps from IPA, which cached does not read",
    "session_provider": "IPA's session recording rules, which cached does not read",
    "hostid_provider": _OTHER_MAPS,
    "resolver_provider": _OTHER_MAPS,
    "lookup_family_order": "which address family SSSD tries first when it connects; "
    "cached connects to each URI's host as the system resolves it",
    "dns_resolver_server_timeout": _NO_DNS,
    "dns_resolver_op_timeout": _NO_DNS,
    "dns_resolver_timeout": _NO_DNS,
    "dns_resolver_use_search_list": _NO_DNS,
    "dns_discovery_domain": _NO_DNS,
    "realmd_tags": "realmd's own notes; SSSD does not read them either",
    "cached_auth_timeout": _PAM_LOGIN,
    "proxy_pam_target": _PROXY,
    "proxy_lib_name": _PROXY,
    "proxy_resolver_lib_name": _PROXY,
    "proxy_fast_alias": _PROXY,
    "proxy_max_children": _PROXY,
    # -- sssd-ldap(5)
    "ldap_chpass_dns_service_name": _CHPASS,
    "ldap_force_upper_case_realm": _KERBEROS,
    "ldap_sasl_realm": _KERBEROS,
    "ldap_sasl_canonicalize": _KERBEROS,
    "ldap_sasl_maxssf": "SASL security layers: cached binds with SASL only as EXTERNAL "
    "over ldapi://, a local socket",
    "ldap_krb5_init_creds": _KERBEROS,
    "ldap_krb5_ticket_lifetime": _KERBEROS,
    "krb5_server": _KERBEROS,
    "krb5_backup_server": _KERBEROS,
    "krb5_canonicalize": _KERBEROS,
    "krb5_use_kdcinfo": _KERBEROS,
    "krb5_confd_path": _KERBEROS,
    "ldap_host_search_base": _OTHER_MAPS,
    "ldap_service_search_base": _OTHER_MAPS,
    "ldap_iphost_search_base": _OTHER_MAPS,
    "ldap_ipnetwork_search_base": _OTHER_MAPS,
    "ldap_autofs_search_base": _OTHER_MAPS,
    "ldap_enumeration_refresh_timeout": "SSSD's periodic reading of the whole "
    "directory for enumerate; cached enumerates its cache (§9.1)",
    "ldap_enumeration_search_timeout": "SSSD's periodic reading of the whole "
    "directory for enumerate; cached enumerates its cache (§9.1)",
    "ldap_purge_cache_timeout": "SSSD's purge of users not looked up; cached keeps "
    "entries until the server says they are gone",
    "ldap_connection_idle_timeout": "when SSSD closes an idle connection; cached keeps "
    "one until ldap_connection_expire_timeout, which it implements",
    "ldap_ignore_unreadable_references": "cached always leaves a member it cannot read "
    "out, as SSSD does with `true`; with `false` (its default) SSSD fails the lookup "
    "instead (docs/compatibility.md §9.5, unreadable members)",
    "ldap_disable_paging": "cached asks for paged results only where the server "
    "offers the control, and reads a whole answer either way",
    "ldap_dns_service_name": _NO_DNS,
    "ldap_tls_reqsan": "a SAN check SSSD makes with GSSAPI binds, which cached does "
    "not make",
    "wildcard_limit": "the most entries of an InfoPipe wildcard search; cached's "
    "InfoPipe answers lookups by name or id only",
    # -- sssd-ldap-attributes(5)
    "ldap_user_uuid": _IFP_ONLY,
    "ldap_group_uuid": _IFP_ONLY,
    "ldap_user_extra_attrs": _IFP_ONLY,
    "ldap_user_fullname": _IFP_ONLY,
    "ldap_user_certificate": _IFP_ONLY,
    "ldap_user_email": _IFP_ONLY,
    "ldap_user_principal": "Kerberos principal names: SSSD also finds a user by it "
    "(name@REALM); cached looks a name up as given or as name@DOMAIN "
    "(docs/compatibility.md, \"Qualified lookups\"), and refuses %P in home templates",
    "ldap_user_member_of": "a user's memberOf, which SSSD reads for IPA's initgroups; "
    "cached finds a user's groups by their member values, as SSSD's LDAP provider does",
    "ldap_group_type": "AD's groupType, which SSSD reads to leave out domain-local "
    "groups of trusted domains; cached serves no trusted domain",
    "ldap_group_external_member": "IPA's members from trusted domains, which cached "
    "does not serve",
    # -- sssd-ad(5): the AD provider's
    **{
        name: _AD_PROVIDER
        for name in (
            "ad_enabled_domains", "ad_maximum_machine_account_password_age",
            "ad_machine_account_password_renewal_opts",
            "ad_update_samba_machine_account_password", "ad_use_ldaps",
            "ad_allow_remote_domain_local_groups",
        )
    },
    **{
        name: "dynamic DNS updates of the host's own address, which cached does not make"
        for name in (
            "dyndns_update", "dyndns_ttl", "dyndns_iface", "dyndns_refresh_interval",
            "dyndns_update_ptr", "dyndns_force_tcp", "dyndns_auth", "dyndns_auth_ptr",
            "dyndns_server", "dyndns_update_per_family",
        )
    },
}
