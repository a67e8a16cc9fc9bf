"""The options: each is one field of the dataclass of its section, whose metadata holds
its parser, SSSD's default and its documentation (``option``). The loader (load.py)
reads a section through these fields, and the README tables and cached.conf(5) are
generated from them (``python -m cached.docgen``); ``option`` ties the parser's and the
default's type to the field's, so mypy checks each parser against its field. Defaults
are SSSD 2.8.2's (reference §6.1) unless the doc says. The closed sets are ``StrEnum``s:
a value compares equal to its string (``cfg.ldap_schema == "ad"``)."""

# option() and computed() return a dataclasses.field(), as RUF009 asks of a default that
# is a call; ruff cannot see through them.
# ruff: noqa: RUF009

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar, cast

from cached.config.errors import ConfigError
from cached.config.gpomap import DEFAULT_MAPS, GpoMode, GpoRight, map_items
from cached.config.parsers import (
    RESPONSE_FILTER_DEFAULTS,
    authz_filter,
    boolean,
    ccname_template,
    closed,
    domain_sid,
    homedir_template,
    integer,
    krb5_delta,
    name_format,
    name_regex,
    not_supported,
    one_char,
    provider,
    response_filter,
    search_base,
    search_filter,
    space_list,
    str_list,
    string,
    uri_list,
)

T = TypeVar("T")

# The highest uid/gid a directory entry may carry: (uid_t)-1 = 4294967295 is the
# "no id" value of the system calls, never an id.
MAX_ID = 0xFFFFFFFE


class Schema(enum.StrEnum):
    """``ldap_schema``: how the directory names its attributes and holds members."""

    RFC2307 = "rfc2307"
    RFC2307BIS = "rfc2307bis"
    AD = "ad"


class CaseSensitive(enum.StrEnum):
    """``case_sensitive``: ``false`` folds names to lower case, ``preserving`` matches
    any case and answers the directory's spelling."""

    TRUE = "true"
    FALSE = "false"
    PRESERVING = "preserving"


class PrivateGroups(enum.StrEnum):
    """``auto_private_groups`` (SSSD's mpg_mode): ``true`` answers every user with a
    group of its own (gid = uid, named as the user), ``hybrid`` only for a user whose
    gidNumber equals its uid and names no real group."""

    TRUE = "true"
    FALSE = "false"
    HYBRID = "hybrid"


class TlsReqcert(enum.StrEnum):
    """``ldap_tls_reqcert``, in OpenLDAP's order from the least checking."""

    NEVER = "never"
    ALLOW = "allow"
    TRY = "try"
    DEMAND = "demand"
    HARD = "hard"


class AuthProvider(enum.StrEnum):
    """``auth_provider``: who checks passwords (SSSD's default is the id provider);
    also ``chpass_provider``: who changes them (SSSD's default is the auth provider)."""

    LDAP = "ldap"
    KRB5 = "krb5"
    AD = "ad"  # krb5 with AD's defaults: realm from ad_domain, krb5_validate = true
    NONE = "none"


class PwmodifyMode(enum.StrEnum):
    """``ldap_pwmodify_mode``: how a password is changed (sssd-ldap(5))."""

    EXOP = "exop"  # RFC 3062 Password Modify extended operation
    LDAP_MODIFY = "ldap_modify"  # replace userPassword


class PwdPolicy(enum.StrEnum):
    """``ldap_pwd_policy``: the password expiry checked after an online login."""

    NONE = "none"
    SHADOW = "shadow"
    MIT_KERBEROS = "mit_kerberos"


class AccessProvider(enum.StrEnum):
    """``access_provider``: who decides, at PAM's account check, whether a user may log
    in (sssd.conf(5); SSSD's default is ``permit``)."""

    PERMIT = "permit"
    DENY = "deny"
    SIMPLE = "simple"
    LDAP = "ldap"
    AD = "ad"


_ACCESS_PROVIDERS_REFUSED = {
    "ipa": "cached has no IPA provider",
    "krb5": "cached has no Kerberos provider",
    "proxy": "cached has no proxy provider",
}


class AccessRule(enum.StrEnum):
    """One entry of ``ldap_access_order`` (sssd-ldap(5); sdap_access.h)."""

    FILTER = "filter"
    LOCKOUT = "lockout"
    PPOLICY = "ppolicy"
    EXPIRE = "expire"
    AUTHORIZED_SERVICE = "authorized_service"
    HOST = "host"
    RHOST = "rhost"
    # ldap_pwd_policy's verdict at the account check (sdap_access.c
    # perform_pwexpire_policy): an expired password denies, warns or asks for a new one.
    PWD_EXPIRE_REJECT = "pwd_expire_policy_reject"
    PWD_EXPIRE_WARN = "pwd_expire_policy_warn"
    PWD_EXPIRE_RENEW = "pwd_expire_policy_renew"
    # cached's own: nslcd's pam_authz_search (cached/access/rules.py).
    AUTHZ_SEARCH = "pam_authz_search"


def access_order(raw: str) -> list[AccessRule]:
    """``ldap_access_order``: a comma list of rules, each at most once (SSSD's
    get_access_order_list refuses duplicates and unknown names at start); empty is
    SSSD's default, ``filter``."""
    if not str_list(raw):
        return [AccessRule.FILTER]
    out: list[AccessRule] = []
    for name in (n.lower() for n in str_list(raw)):
        try:
            rule = AccessRule(name)
        except ValueError:
            known = ", ".join(r.value for r in AccessRule)
            raise ValueError(f"{name!r} is not an access rule ({known})") from None
        if rule in out:
            raise ValueError(f"{name!r} is listed twice")
        out.append(rule)
    return out


class ExpirePolicy(enum.StrEnum):
    """``ldap_account_expire_policy``: which attributes the ``expire`` rule reads
    (sdap_access.c sdap_account_expired); unset denies everyone when ``expire`` is in
    the order, as SSSD."""

    UNSET = ""
    SHADOW = "shadow"
    AD = "ad"
    RHDS = "rhds"
    IPA = "ipa"
    DS389 = "389ds"
    NDS = "nds"


class ChpassProvider(enum.StrEnum):
    """``chpass_provider``: who changes passwords (SSSD's default is auth_provider)."""

    LDAP = "ldap"
    KRB5 = "krb5"
    AD = "ad"
    NONE = "none"


KERBEROS_PROVIDERS = (AuthProvider.KRB5, AuthProvider.AD)


# SSSD's responders (sssd.conf(5) ``services``): cached runs ``nss`` always, ``pam``
# and ``sudo`` when listed; the others are accepted so an existing sssd.conf loads,
# and do nothing.
SSSD_SERVICES = ("nss", "pam", "sudo", "autofs", "ssh", "pac", "ifp", "secrets", "kcm",
                 "session_recording")  # fmt: skip


def services_list(raw: str) -> list[str]:
    """``services``: a comma list of SSSD's responder names."""
    names = [s.lower() for s in str_list(raw)]
    for n in names:
        if n not in SSSD_SERVICES:
            raise ValueError(f"{n!r} is not an SSSD responder ({', '.join(SSSD_SERVICES)})")
    return names


class SudoProvider(enum.StrEnum):
    """``sudo_provider``: where sudo rules come from."""

    LDAP = "ldap"
    NONE = "none"


class DomainType(enum.StrEnum):
    """``domain_type``: SSSD serves ``application`` domains to its InfoPipe only."""

    POSIX = "posix"
    APPLICATION = "application"


# ---------------------------------------------------------------------------
# The declaration of one option.

# The metadata key of a field that is an option.
OPTION = "cached.option"


@dataclass(frozen=True)
class Option:
    """What a field's metadata says of its option: the parser, SSSD's default, the
    documentation (the README tables and cached.conf(5) print it) and ``shown_default``,
    the default as documented when the value itself does not say it (one computed from
    other options, a required one). ``ad_default`` replaces ``default`` when
    ``ldap_schema = ad`` and the file leaves the option unset (SSSD's AD maps). The
    types are checked where the field is declared (``option``), not here: the loader
    handles every option alike."""

    parse: Callable[[str], Any]
    default: Any
    doc: str
    shown_default: str = ""
    ad_default: Any = None
    # No default of its own: rules.py computes it from other options, or requires it.
    computed: bool = False


def option(
    parse: Callable[[str], T],
    default: T,
    doc: str,
    shown_default: str = "",
    *,
    ad: T | None = None,
) -> T:
    """A field that is an option: ``parse`` turns the file's text into the field's
    type, ``default`` is the value when the file leaves it unset. Typed as the value,
    so that ``x: int = option(string, ...)`` is a mypy error."""
    meta = {OPTION: Option(parse, default, doc, shown_default, ad)}
    if isinstance(default, list):
        items = list(default)
        return cast(T, field(default_factory=lambda: list(items), metadata=meta))
    return field(default=default, metadata=meta)


def computed(parse: Callable[[str], T], doc: str, shown_default: str) -> T:
    """A field that is an option without a default of its own: rules.py sets it from
    other options when the file does not, or refuses a file without it;
    ``shown_default`` documents which."""
    opt = Option(parse, None, doc, shown_default, computed=True)
    return cast(T, field(metadata={OPTION: opt}))


def option_of(f: Field[Any]) -> Option | None:
    """The option a dataclass field declares, or None for a field that is not one."""
    opt = f.metadata.get(OPTION)
    return opt if isinstance(opt, Option) else None


def options_of(cls: type) -> dict[str, Option]:
    """The options of a section's dataclass, by name, in declaration order (the order
    of the documentation)."""
    found = {f.name: option_of(f) for f in fields(cls)}
    return {name: opt for name, opt in found.items() if opt is not None}


# ---------------------------------------------------------------------------
# The sections.


@dataclass(frozen=True, kw_only=True)
class DaemonConfig:
    """``[cached]`` (alias ``[sssd]``)."""

    domains: list[str] = option(str_list, [], "Domains to serve, in lookup order.", "(required)")
    pipes_dir: str = option(string, "/var/lib/sss/pipes", "Directory of the NSS socket `nss`.")
    mc_dir: str = option(string, "/var/lib/sss/mc", "Directory of the memory-cache files.")
    db_dir: str = option(string, "/var/lib/cached/db", "Directory of the LMDB cache files.")
    pid_file: str = option(string, "/run/cached.pid", "PID file of the monitor (`cached serve`).")
    machine_id_file: str = option(
        string,
        "/etc/machine-id",
        "The host's identity, from which the per-host offsets of the background work "
        "are derived (keyed hash; the id itself is never stored or logged); without one, "
        "a seed drawn once is kept in db_dir.",
    )
    ts_sync_interval: int = option(
        integer(1), 60, "Seconds between syncs of the no-sync timestamp store to disk."
    )
    dbus_address: str = option(
        string, "system", "D-Bus bus of the InfoPipe interface: `system`, an address, or `none`."
    )
    services: list[str] = option(
        services_list,
        ["nss"],
        "Responders to run: `nss` always runs; `pam` adds the PAM sockets `pam` and "
        "`private/pam` in `pipes_dir` for `pam_sss.so` (logins); `ssh` the socket `ssh` "
        "for `sss_ssh_authorizedkeys` (users' keys); `sudo` the socket `sudo` for "
        "`libsss_sudo` (sudo rules) and the backends' rule refreshes; SSSD's other names "
        "are accepted and do nothing (the InfoPipe follows `dbus_address`).",
    )

    # -- Names (sssd.conf(5); sss_names.c). The domain's own full_name_format wins.
    full_name_format: str = option(
        name_format,
        "%1$s@%2$s",
        "How a qualified name is written: %1$s the name, %2$s the domain, %3$s the "
        "domain's flat name (for an LDAP domain, its name).",
    )
    re_expression: str = option(
        name_regex,
        "",
        "How a looked-up name splits into name and domain, for the domains that set "
        "none: a regular expression (Python `re`, verbose as SSSD's PCRE) with a "
        "(?P<name>...) group and, optionally, a (?P<domain>...) group.",
        "SSSD's default for the domain's id_provider",
    )
    default_domain_suffix: str = option(
        string,
        "",
        "As SSSD: an unqualified name is looked up in this domain (one of `domains`), and "
        "every domain's names are answered qualified.",
    )
    override_space: str = option(
        one_char,
        "",
        "As SSSD: answer names with this character for each space (a name already holding "
        "it keeps its spaces), and read it back as a space in the names looked up.",
    )


@dataclass(frozen=True, kw_only=True)
class NssConfig:
    """``[nss]``."""

    entry_negative_timeout: int = option(
        integer(0), 15, "Seconds a name not found stays not found."
    )
    entry_cache_nowait_percentage: int = option(
        integer(0, 99),
        50,
        "Refresh in the background after this % of the entry lifetime; 0 = off. With "
        "refresh ahead on, by an early refresh-ahead run, not a request per entry.",
    )
    cache_first_wait: int = option(
        integer(0, 3600),
        1,
        "cached: seconds an expired cached entry waits for its refresh before the cached "
        "entry is answered (the refresh goes on); 0 = wait as SSSD does.",
    )
    memcache_timeout: int = option(
        integer(0), 300, "Lifetime of memory-cache records, seconds; 0 = off."
    )
    memcache_size_passwd: int = option(integer(0), 8, "Size of mc/passwd in MiB; 0 disables it.")
    memcache_size_group: int = option(integer(0), 6, "Size of mc/group in MiB; 0 disables it.")
    memcache_size_initgroups: int = option(integer(0), 10, "Size of mc/initgroups in MiB; 0 = off.")
    filter_users: list[str] = option(str_list, ["root"], "Users never answered (NOTFOUND).")
    filter_groups: list[str] = option(str_list, ["root"], "Groups never answered (NOTFOUND).")
    filter_users_in_groups: bool = option(
        boolean,
        True,
        "Leave the users of filter_users out of group member lists; `false` lists them (as SSSD).",
    )
    pwfield: str = option(string, "*", "The passwd field returned in passwd entries.")
    enumerate: bool = option(
        boolean, False, "Answer getpwent/getgrent with the cached entries of every domain."
    )
    client_idle_timeout: int = option(
        integer(10), 60, "Seconds before an idle client connection is closed (SSSD minimum 10)."
    )
    # 10 s: the clients write header and body back to back (microseconds apart), so
    # this is far beyond any scheduling delay, and short enough that trickling one byte
    # at a time cannot keep a connection (docs/threat-model.md: one byte every 40 s
    # kept 1,024 connections forever). Shorter in tests that wait for it.
    client_request_timeout: int = option(
        integer(1, 3600),
        10,
        "cached: seconds a client has to send a whole request from its first byte "
        "(NSS, PAM, SSH and sudo sockets); trickling bytes cannot keep a connection.",
    )
    max_clients: int = option(
        integer(1), 1024, "Cap on concurrent NSS connections (cached; SSSD relies on ulimit)."
    )
    # The NSS socket is open to every local user (reference §1.9); these three keep one
    # user from taking what the others need (docs/threat-model.md).
    # 256: libnss_sss keeps one connection per thread, so a busy multi-threaded daemon
    # needs tens; a quarter of the default max_clients leaves room for three more.
    max_clients_per_uid: int = option(
        integer(1), 256, "cached: cap on concurrent NSS connections of one non-root uid."
    )
    # 32: root's logins (sshd, login, cron, systemd) still resolve when non-root users
    # hold every other connection; at most half of max_clients.
    root_reserved_clients: int = option(
        integer(0), 32, "cached: NSS connections only root may use (at most max_clients / 2)."
    )
    # 16 MiB: ten replies of a 200,000-member group (1.6 MB each), a thousand of a
    # 1,000-member one; no client of one user leaves more unread. 1,000 never-reading
    # connections took 2.9 GB without it; with it, 16 MiB per attacking uid.
    max_reply_buffer_per_uid: int = option(
        integer(1), 16, "cached: MiB of replies one uid may leave unread before it must wait."
    )

    # -- Home directory and shell (sssd.conf(5) "NSS configuration options"; read as
    # nsssrv.c and responder_common.c read them). override_homedir, fallback_homedir,
    # homedir_substring, override_shell and default_shell may also be set in a domain,
    # whose value comes first (policy.py, UserShape).
    override_homedir: str = option(
        homedir_template,
        "",
        "Home directory of every user, a template: %u name, %U uid, %d domain, %f "
        "name@domain, %l first letter of the name, %o the directory's home directory, "
        "%h the same lower-cased, %H homedir_substring, %% a percent sign.",
    )
    fallback_homedir: str = option(
        homedir_template, "", "Home directory of users the directory gives none, a template."
    )
    homedir_substring: str = option(
        string, "/home", "What %H in a home directory template (or the directory's) expands to."
    )
    override_shell: str = option(string, "", "Login shell of every user.")
    default_shell: str = option(string, "", "Login shell of users the directory gives none.")
    allowed_shells: list[str] = option(
        str_list,
        [],
        "Shells a user may have that /etc/shells lacks: answered as shell_fallback; any other "
        "shell missing from /etc/shells is answered as /sbin/nologin. `*` allows every shell.",
    )
    vetoed_shells: list[str] = option(
        str_list, [], "Shells answered as shell_fallback, even when in /etc/shells."
    )
    shell_fallback: str = option(
        string, "/bin/sh", "The shell answered for an allowed shell /etc/shells lacks."
    )

    @property
    def group_memcache(self) -> bool:
        """The responder keeps a group memory-cache file: a size and a lifetime, 0
        disabling it (§2.1; memcache.MemoryCache.open makes no file then)."""
        return self.memcache_timeout > 0 and self.memcache_size_group > 0


@dataclass(frozen=True, kw_only=True)
class PamConfig:
    """``[pam]``: the PAM responder (``services = nss, pam``)."""

    pam_verbosity: int = option(
        integer(0, 3),
        1,
        "How much the user is told: at 1 a login with cached credentials that expire says "
        "when; at 2 every login with cached credentials says so.",
    )
    pam_id_timeout: int = option(
        integer(0),
        5,
        "Seconds a user resolved for one PAM command is not looked up again for the next "
        "ones of the same login.",
    )
    offline_credentials_expiration: int = option(
        integer(0),
        0,
        "Days after the last online login that cached credentials stop working offline; 0 = never.",
    )
    offline_failed_login_attempts: int = option(
        integer(0),
        0,
        "Failed offline logins after which offline logins are delayed; 0 = no limit.",
    )
    offline_failed_login_delay: int = option(
        integer(0),
        5,
        "Minutes offline logins are refused after `offline_failed_login_attempts` failures; "
        "0 = until the next online login.",
    )
    pam_response_filter: list[str] = option(
        response_filter,
        list(RESPONSE_FILTER_DEFAULTS),
        "Environment items not to send to the client (SSSD's `ENV`, `ENV:NAME`, "
        "`ENV:NAME:service`); items all prefixed `+`/`-` add to or remove from the "
        "default, which keeps KRB5CCNAME from sudo and sudo-i.",
    )
    pam_account_locked_message: str = option(
        string,
        "",
        "Text shown after `Permission denied.` when the server says the account is locked.",
    )
    pam_account_expired_message: str = option(
        string,
        "",
        "Text shown after `Permission denied.` when the account check finds the account "
        "expired (PAM_ACCT_EXPIRED), to `sshd` logins, and to every service at "
        "pam_verbosity 2 or more (as SSSD's code; its man page says 3).",
    )
    pam_pwd_expiration_warning: int = option(
        integer(-1),
        -1,
        "Days before its expiry that the server's password expiry warning is shown (the "
        "domains' `pwd_expiration_warning` when they leave theirs at -1); 0 = always; "
        "-1: each policy's own (the password policy control: always; mit_kerberos: "
        "7 days; shadow: shadowWarning).",
    )


@dataclass(frozen=True, kw_only=True)
class SshConfig:
    """``[ssh]``: the SSH responder (``services = nss, ssh``), for
    ``sss_ssh_authorizedkeys``. cached serves users' keys only: no host keys, so no
    known_hosts file (docs/compatibility.md, "SSH keys")."""

    ssh_hash_known_hosts: bool = option(
        boolean,
        False,
        "Accepted, no effect: SSSD hashes the names in the known_hosts file it writes from "
        "host keys; cached serves no host keys and writes no such file.",
    )
    ssh_known_hosts_timeout: int = option(
        integer(0),
        180,
        "Accepted, no effect: how long SSSD keeps a host in its known_hosts file; cached "
        "writes none.",
    )
    ssh_use_certificate_keys: bool = option(
        boolean,
        True,
        "Accepted, no effect: SSSD derives keys from certificates that verify against "
        "`ca_db`; cached reads no certificates, so only the key attribute's keys are served.",
    )


@dataclass(frozen=True, kw_only=True)
class SudoConfig:
    """``[sudo]``: the sudo responder (``services = nss, sudo``), for ``libsss_sudo``."""

    sudo_timed: bool = option(
        boolean,
        False,
        "Leave out the rules outside their sudoNotBefore/sudoNotAfter window (sudo checks "
        "them itself only when built to).",
    )
    sudo_threshold: int = option(
        integer(0),
        50,
        "A sudo call whose user has more expired rules than this refreshes all rules "
        "rather than those.",
    )
    sudo_inverse_order: bool = option(
        boolean,
        False,
        "Send the rules lowest sudoOrder first (SSSD's old order); default highest first.",
    )


@dataclass(frozen=True, kw_only=True)
class DomainConfig:
    """``[domain/NAME]``: ``name`` is NAME, every other field an option."""

    name: str
    id_provider: str = computed(
        provider,
        "`ldap`, or `ad` for a host joined to an Active Directory domain (`realm join`, "
        "`adcli join`): SSSD's AD defaults (ldap_schema = ad, ldap_id_mapping = true, a "
        "SASL GSSAPI bind with the host's keytab, signed and sealed; the DCs from "
        "ad_server, found in DNS by default).",
        "(required)",
    )
    ad_domain: str = computed(
        string, "The AD domain's DNS name (id_provider = ad).", "the domain's name"
    )
    ad_server: list[str] = option(
        str_list,
        ["_srv_"],
        "DCs to use, by name, tried in order (id_provider = ad); `_srv_`: the DNS SRV "
        "records `_ldap._tcp.<ad_domain>` (with ad_site, that site's records first).",
    )
    ad_backup_server: list[str] = option(
        str_list, [], "DCs tried after every ad_server failed (`_srv_` allowed)."
    )
    ad_site: str = option(
        string,
        "",
        "The AD site whose DCs are preferred (`_ldap._tcp.<site>._sites.<ad_domain>`); "
        "unset: the site the DCs name (ad_enable_dns_sites).",
    )
    ad_enable_dns_sites: bool = option(
        boolean,
        True,
        "Without ad_site, ask the domain's DCs for this host's site (a CLDAP netlogon "
        "ping, as SSSD) and prefer that site's DCs.",
    )
    ad_hostname: str = computed(
        string,
        "This host's name in the domain; its first label, upper case, names the host's "
        "principal (`HOST$@REALM`).",
        "the host's name (gethostname)",
    )
    ad_enable_gc: bool = option(
        boolean,
        True,
        "Accepted for SSSD's files: cached reads the one domain it serves from its DCs' "
        "LDAP port, where every attribute it needs is, and uses no Global Catalog (which "
        "SSSD uses for other domains of the forest and universal groups across them).",
    )
    krb5_realm: str = computed(
        string,
        "Kerberos realm of the host's principal and of the users' (`name@REALM`, "
        "auth_provider = krb5 | ad); the KDCs are krb5.conf's.",
        "ad_domain in upper case",
    )
    ldap_krb5_keytab: str = option(
        string, "/etc/krb5.keytab", "Keytab of the host's principal (GSSAPI binds)."
    )
    ldap_sasl_authid: str = computed(
        string,
        "Principal the GSSAPI bind authenticates as, from ldap_krb5_keytab.",
        "`SHORTNAME$@REALM` from ad_hostname and krb5_realm",
    )
    ldap_sasl_minssf: int = option(
        integer(-1),
        -1,
        "Least security of the SASL layer: 0 accepts none, 1 signing, more sealing; "
        "-1 (unset) takes sealing when offered, else signing, else none.",
    )
    enabled: bool | None = option(
        boolean,
        None,
        "As SSSD: `true` serves the domain even when `domains` does not list it (after the "
        "listed ones), `false` never serves it, even when listed.",
    )
    domain_type: DomainType = option(
        closed(DomainType),
        DomainType.POSIX,
        "`application` domains are not served over NSS (as SSSD): such a domain, like an "
        "`[application/NAME]` section, is left out with a warning.",
    )
    ldap_uri: list[str] = option(uri_list, [], "Servers, tried in order (failover).", "(required)")
    ldap_backup_uri: list[str] = option(uri_list, [], "Servers tried after every ldap_uri failed.")
    ldap_search_base: str = option(
        search_base,
        "",
        "Default search base, `dn` or SSSD's `dn?scope?filter[?dn?scope?filter...]`; "
        "read from the root DSE if unset.",
    )
    ldap_user_search_base: str = option(
        search_base, "", "Base(s) of user searches, same syntax (default: search base)."
    )
    ldap_group_search_base: str = option(
        search_base, "", "Base(s) of group searches, same syntax (default: search base)."
    )
    ldap_netgroup_search_base: str = option(
        search_base, "", "Base(s) of netgroup searches, same syntax (default: search base)."
    )
    ldap_user_search_filter: str = option(
        search_filter,
        "",
        "Deprecated, applied as SSSD 2.8.2 applies it: the filter of a plain "
        "ldap_user_search_base (one DN, or the root DSE's); with the `dn?scope?filter` "
        "syntax it is ignored (as SSSD), with a warning.",
    )
    ldap_group_search_filter: str = option(
        search_filter, "", "Deprecated, the same for ldap_group_search_base."
    )
    ldap_schema: Schema = option(
        closed(
            Schema,
            {
                "ipa": "cached has no IPA schema (no views or overrides); write "
                "ldap_schema = rfc2307bis to read an IPA server's users and groups"
            },
        ),
        Schema.RFC2307,
        "`rfc2307`, `rfc2307bis` or `ad` (Active Directory: SSSD's AD attribute names as "
        "defaults of the ldap_user_*/ldap_group_* options, objectSid, primaryGroupID, "
        "tokenGroups).",
    )
    ldap_use_tokengroups: bool = computed(
        boolean,
        "Initgroups from the user's tokenGroups (AD's transitive closure, one base "
        "search) and batched objectSid searches.",
        "true with ad, else false",
    )
    ldap_referrals: bool = option(
        boolean,
        False,
        "cached never chases referrals (SSSD's advice for AD); continuation references "
        "are ignored, `true` warns.",
    )
    ldap_id_mapping: bool = option(
        boolean,
        False,
        "Map objectSid to uid/gid as SSSD does (same slices: files keep their owners); "
        "uidNumber/gidNumber are then ignored. Only with ldap_schema = ad.",
    )
    ldap_idmap_range_min: int = option(integer(0), 200000, "Lowest id of ID mapping.")
    ldap_idmap_range_max: int = option(integer(1), 2000200000, "End of the ID-mapping range.")
    ldap_idmap_range_size: int = option(integer(1), 200000, "Ids per domain slice.")
    ldap_idmap_default_domain_sid: str = option(
        domain_sid, "", "Domain SID mapped to slice 0 (default: by hash, as SSSD)."
    )
    ldap_idmap_autorid_compat: bool = option(
        boolean, False, "Place slices as winbind's autorid does (first free slice)."
    )
    ldap_idmap_helper_table_size: int = option(
        integer(0), 10, "Secondary slices precomputed per domain (RIDs above range_size)."
    )
    ldap_user_objectsid: str = option(string, "objectSid", "User SID attribute (ad).")
    ldap_user_primary_group: str = option(string, "primaryGroupID", "Primary group RID (ad).")
    ldap_group_objectsid: str = option(string, "objectSid", "Group SID attribute (ad).")
    ldap_default_bind_dn: str = option(string, "", "Bind DN; anonymous when unset.")
    ldap_default_authtok_type: str = option(
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
    )
    ldap_default_authtok: str = option(
        string, "", "Bind password (the file must then be mode 0600)."
    )
    ldap_sasl_mech: str = option(
        not_supported(("external", "gssapi", "gss-spnego"), {}),
        "",
        "`EXTERNAL` for ldapi:// peer-credential binds; `GSSAPI` for a Kerberos bind as "
        "ldap_sasl_authid with ldap_krb5_keytab (`GSS-SPNEGO`, SSSD's AD default, binds "
        "as GSSAPI: the same ticket and security layer).",
    )
    ldap_id_use_start_tls: bool = option(boolean, False, "Use StartTLS on ldap:// URIs.")
    auth_provider: AuthProvider = option(
        closed(AuthProvider),
        AuthProvider.LDAP,
        "Who checks passwords (PAM): `ldap` binds as the user's DN, over TLS only "
        "(`ldaps://`, or StartTLS, which a login runs on `ldap://` whatever "
        "`ldap_id_use_start_tls` says); `krb5` gets the user's TGT from the KDC "
        "(validated with `krb5_validate`) into the ccache krb5_ccname_template names; "
        "`ad` is `krb5` with AD's defaults; `none` refuses every password.",
    )
    krb5_keytab: str = option(
        string, "", "The host keytab `krb5_validate` checks TGTs with.", "/etc/krb5.keytab"
    )
    krb5_validate: bool = computed(
        boolean,
        "Validate each login's TGT: a ticket for the keytab's host principal, accepted "
        "with its key, so that a KDC that does not know the host's key (a rogue one) "
        "logs no one in.",
        "false; true with auth_provider = ad",
    )
    krb5_ccname_template: str = option(
        ccname_template,
        "FILE:%d/krb5cc_%U_XXXXXX",
        "The user's ccache, handed to the PAM stack as KRB5CCNAME: `FILE:` only; `%u` "
        "login name, `%U` uid, `%p` principal, `%r` realm, `%h` home, `%d` "
        "krb5_ccachedir; a trailing `XXXXXX` is made unique.",
    )
    krb5_ccachedir: str = option(string, "/tmp", "What `%d` in krb5_ccname_template is.")
    krb5_lifetime: int = option(
        krb5_delta, 0, "TGT lifetime asked for (`s`, `m`, `h`, `d`).", "krb5.conf's"
    )
    krb5_renewable_lifetime: int = option(
        krb5_delta, 0, "Renewable lifetime asked for (`s`, `m`, `h`, `d`).", "krb5.conf's"
    )
    krb5_renew_interval: int = option(
        krb5_delta,
        0,
        "How often the backend looks for users' TGTs to renew (`s`, `m`, `h`, `d`); 0 "
        "never. A login's renewable TGT is renewed in its ccache once half its lifetime "
        "has passed, until its renewable lifetime ends; while offline, once back.",
    )
    krb5_store_password_if_offline: bool = option(
        boolean,
        False,
        "After an offline login (cached credentials), keep the password in the "
        "backend's memory and get the user's TGT into the login's ccache once a KDC "
        "answers again.",
    )
    cache_credentials: bool = option(
        boolean,
        False,
        "Keep a SHA-512-crypt hash of each password an online login accepted, for "
        "logins while the servers are unreachable.",
    )
    chpass_provider: ChpassProvider = computed(
        closed(ChpassProvider),
        "Who changes passwords (PAM `passwd`): `ldap` binds as the user (over TLS, on "
        "`ldap_chpass_uri`) and changes the password as the user; `krb5` and `ad` through "
        "the KDC's kpasswd service (RFC 3244) with the user's old password; `none` "
        "refuses every change (PAM_MODULE_UNKNOWN).",
        "auth_provider's",
    )
    ldap_chpass_uri: list[str] = option(
        uri_list, [], "Servers for password changes, tried in order.", "ldap_uri"
    )
    ldap_chpass_backup_uri: list[str] = option(
        uri_list,
        [],
        "Servers for password changes tried after every ldap_chpass_uri failed.",
        "ldap_backup_uri (when ldap_chpass_uri is unset)",
    )
    ldap_pwmodify_mode: PwmodifyMode = option(
        closed(PwmodifyMode),
        PwmodifyMode.EXOP,
        "`exop`: the RFC 3062 Password Modify extended operation with the old and new "
        "password; `ldap_modify`: replace `userPassword` (the user needs write access to "
        "it; the server hashes it, e.g. slapd's ppolicy_hash_cleartext).",
    )
    ldap_chpass_update_last_change: bool = option(
        boolean,
        False,
        "After a password change, set the user's shadowLastChange to today (days since "
        "1970) as the user.",
    )
    ldap_pwd_policy: PwdPolicy = option(
        closed(PwdPolicy),
        PwdPolicy.NONE,
        "Password expiry checked after an online login, from the user's entry read as the "
        "user: `shadow` (shadowLastChange, shadowMax, shadowWarning, shadowInactive, "
        "shadowExpire), `mit_kerberos` (krbPasswordExpiration); a password policy "
        "control in the bind's answer overrides both, as in SSSD.",
    )
    pwd_expiration_warning: int = option(
        integer(-1),
        -1,
        "Days before its expiry that the server's password expiry warning is shown; "
        "0 = always; -1: `[pam] pam_pwd_expiration_warning`.",
    )
    # -- Access control (PAM's account check): sssd.conf(5), sssd-simple(5),
    # sssd-ldap(5); cached/access/.
    access_provider: AccessProvider = option(
        closed(AccessProvider, _ACCESS_PROVIDERS_REFUSED),
        AccessProvider.PERMIT,
        "Who may log in (PAM account check): `permit` everyone, `deny` no one, `simple` "
        "by the simple_* lists, `ldap` by ldap_access_order, `ad` (id_provider = ad) by "
        "the account's expiry, ad_access_filter and the GPOs (ad_gpo_access_control).",
    )
    simple_allow_users: list[str] = option(
        str_list,
        [],
        "access_provider = simple: users allowed (`name` or `name@DOMAIN`); with "
        "simple_allow_groups unset too, everyone not denied is allowed.",
    )
    simple_deny_users: list[str] = option(
        str_list, [], "access_provider = simple: users denied, whatever else allows them."
    )
    simple_allow_groups: list[str] = option(
        str_list,
        [],
        "access_provider = simple: members of these groups are allowed, nested "
        "membership and the primary group included.",
    )
    simple_deny_groups: list[str] = option(
        str_list,
        [],
        "access_provider = simple: members of these groups are denied, even when allowed "
        "by name.",
    )
    ldap_access_order: list[AccessRule] = option(
        access_order,
        [AccessRule.FILTER],
        "access_provider = ldap: the rules, in order; the first that denies decides. "
        "`filter`, `expire`, `ppolicy`, `lockout`, `authorized_service`, `host`, `rhost`, "
        "`pwd_expire_policy_reject`/`_warn`/`_renew` (ldap_pwd_policy: an expired "
        "password denies, allows without the later rules, or asks for a new one), and "
        "cached's `pam_authz_search`.",
        "filter",
    )
    ldap_access_filter: str = option(
        search_filter,
        "",
        "The `filter` rule: the user may log in when a base search of the user's entry "
        "with this filter finds it; unset, the rule denies everyone (as SSSD).",
    )
    ldap_account_expire_policy: ExpirePolicy = option(
        closed(ExpirePolicy, expected="shadow, ad, rhds, ipa, 389ds or nds"),
        ExpirePolicy.UNSET,
        "The `expire` rule's attributes: `shadow` (shadowExpire), `ad` "
        "(userAccountControl, accountExpires), `rhds`/`ipa`/`389ds` (nsAccountLock; "
        "`ipa` then as `ad` too), `nds` (loginDisabled, loginExpirationTime, "
        "loginAllowedTimeMap); unset, the rule denies everyone (as SSSD).",
    )
    ldap_pwdlockout_dn: str = option(
        string,
        "",
        "The password policy entry the `ppolicy`/`lockout` rules read pwdLockout and "
        "pwdLockoutDuration from; unset: cn=ppolicy,ou=policies under each search base.",
    )
    pam_authz_search: str = option(
        authz_filter,
        "",
        "The `pam_authz_search` rule (nslcd's option, not SSSD's): a filter searched "
        "under the search bases with $username, $service, $rhost, $ruser, $tty, "
        "$hostname, $fqdn, $dn and $uid replaced by the login's values, escaped (RFC "
        "4515); the user may log in when it finds an entry.",
    )
    ldap_user_shadow_expire: str = option(
        string, "shadowExpire", "Account expiry, days since 1970 (`expire`, `shadow`)."
    )
    # The password policy's attributes (ldap_pwd_policy at login and in the
    # pwd_expire_policy rules; cached/auth/pwexpire.py OPTION_OF).
    ldap_user_shadow_last_change: str = option(
        string, "shadowLastChange", "Day of the last password change (`ldap_pwd_policy = shadow`)."
    )
    ldap_user_shadow_min: str = option(
        string, "shadowMin", "Days before the password may change (`shadow`; unused, as SSSD)."
    )
    ldap_user_shadow_max: str = option(
        string, "shadowMax", "Days the password is valid (`ldap_pwd_policy = shadow`)."
    )
    ldap_user_shadow_warning: str = option(
        string, "shadowWarning", "Days of warning before the password expires (`shadow`)."
    )
    ldap_user_shadow_inactive: str = option(
        string, "shadowInactive", "Days after expiry before the account expires (`shadow`)."
    )
    ldap_user_krb_last_pwd_change: str = option(
        string, "krbLastPwdChange", "Time of the last password change (`mit_kerberos`)."
    )
    ldap_user_krb_password_expiration: str = option(
        string, "krbPasswordExpiration", "Time the password expires (`mit_kerberos`)."
    )
    ldap_ns_account_lock: str = option(
        string, "nsAccountLock", "Account lock flag (`expire`, `rhds`/`ipa`/`389ds`)."
    )
    ldap_user_ad_account_expires: str = option(
        string, "accountExpires", "AD account expiry, 100 ns since 1601 (`expire`, `ad`)."
    )
    ldap_user_ad_user_account_control: str = option(
        string, "userAccountControl", "AD account flags (`expire`, `ad`: 0x2 disabled)."
    )
    ldap_user_nds_login_disabled: str = option(
        string, "loginDisabled", "NDS login disabled flag (`expire`, `nds`)."
    )
    ldap_user_nds_login_expiration_time: str = option(
        string, "loginExpirationTime", "NDS account expiry (`expire`, `nds`)."
    )
    ldap_user_nds_login_allowed_time_map: str = option(
        string, "loginAllowedTimeMap", "NDS weekly login hours (`expire`, `nds`)."
    )
    ldap_user_authorized_service: str = option(
        string, "authorizedService", "PAM services the user may use (`authorized_service`)."
    )
    ldap_user_authorized_host: str = option(
        string, "host", "Hosts the user may log in to (`host`)."
    )
    ldap_user_authorized_rhost: str = option(
        string, "rhost", "Remote hosts the user may log in from (`rhost`)."
    )
    ldap_auth_disable_tls_never_use_in_production: bool = option(
        boolean,
        False,
        "Send passwords over unencrypted `ldap://` (tests only; SSSD's option).",
    )
    ldap_tls_reqcert: TlsReqcert = option(
        closed(TlsReqcert),
        TlsReqcert.DEMAND,
        "Server certificate check; `try`/`demand`/`hard` verify it and refuse a bad one "
        "(a server always presents one, so SSSD's `try` acts as `demand`); `never`/`allow` "
        "do not.",
    )
    ldap_tls_cacert: str = option(string, "", "CA certificate file (PEM).")
    ldap_tls_cacertdir: str = option(string, "", "CA certificate directory (c_rehash'ed).")
    ldap_user_object_class: str = option(string, "posixAccount", "User object class.", ad="user")
    ldap_user_name: str = option(string, "uid", "User name attribute.", ad="sAMAccountName")
    ldap_user_uid_number: str = option(string, "uidNumber", "UID attribute.")
    ldap_user_gid_number: str = option(string, "gidNumber", "Primary GID attribute.")
    ldap_user_gecos: str = option(string, "gecos", "GECOS attribute (falls back to `cn`).")
    ldap_user_home_directory: str = option(
        string, "homeDirectory", "Home directory attribute.", ad="unixHomeDirectory"
    )
    ldap_user_shell: str = option(string, "loginShell", "Login shell attribute.")
    ldap_user_ssh_public_key: str = option(
        string,
        "sshPublicKey",
        "SSH public keys attribute (openssh-lpk), fetched with the user; empty: none. "
        "SSSD's AD map has none by default.",
        ad="",
    )
    ldap_user_modify_timestamp: str = option(
        string, "modifyTimestamp", "Change-time attribute.", ad="whenChanged"
    )
    ldap_user_entry_usn: str = option(
        string, "", "USN attribute (e.g. entryUSN), unset by default.", ad="uSNChanged"
    )
    ldap_group_object_class: str = option(string, "posixGroup", "Group object class.", ad="group")
    ldap_group_name: str = option(string, "cn", "Group name attribute.", ad="sAMAccountName")
    ldap_group_gid_number: str = option(string, "gidNumber", "GID attribute.")
    ldap_group_member: str = option(
        string,
        "",
        "Member attribute: `memberUid` (rfc2307) or `member` (rfc2307bis).",
        "memberUid / member",
        ad="member",
    )
    ldap_group_modify_timestamp: str = option(
        string, "modifyTimestamp", "Change-time attribute.", ad="whenChanged"
    )
    ldap_group_entry_usn: str = option(
        string, "", "USN attribute, unset by default.", ad="uSNChanged"
    )
    ldap_netgroup_object_class: str = option(string, "nisNetgroup", "Netgroup object class.")
    ldap_netgroup_name: str = option(string, "cn", "Netgroup name attribute.")
    ldap_netgroup_member: str = option(
        string,
        "memberNisNetgroup",
        "Member netgroups attribute: names, or DNs of netgroups (named from their entries).",
    )
    ldap_netgroup_triple: str = option(
        string, "nisNetgroupTriple", "Netgroup triple attribute, `(host,user,domain)`."
    )
    ldap_netgroup_modify_timestamp: str = option(
        string, "modifyTimestamp", "Change-time attribute of netgroups."
    )
    ldap_group_nesting_level: int = option(
        integer(0, 100), 2, "Nested levels followed (rfc2307bis); 0 = direct groups only."
    )
    ldap_deref_threshold: int = option(
        integer(0),
        10,
        "Deref control on the nesting walk's searches, and for a group with more unnamed "
        "members than this; 0 = never.",
    )
    ignore_group_members: bool = option(boolean, False, "Do not fetch or return group members.")
    ldap_member_rdn_shortcut: bool = option(
        boolean,
        True,
        "Deprecated and ignored (docs/compatibility.md §9.3): member names always come from "
        "the member "
        "entries, never from the spelling of their DN.",
    )
    entry_cache_timeout: int = option(integer(0), 5400, "Lifetime of cached entries, seconds.")
    entry_cache_user_timeout: int = computed(
        integer(0), "Lifetime of cached users, seconds.", "entry_cache_timeout"
    )
    entry_cache_group_timeout: int = computed(
        integer(0), "Lifetime of cached groups, seconds.", "entry_cache_timeout"
    )
    entry_cache_netgroup_timeout: int = computed(
        integer(0), "Lifetime of cached netgroups, seconds.", "entry_cache_timeout"
    )
    refresh_full_interval: int = computed(
        integer(0),
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
    )
    offline_timeout: int = option(integer(1), 60, "First retry after going offline, seconds.")
    offline_timeout_max: int = option(integer(0), 3600, "Retry backoff cap, seconds.")
    # -- background work and its per-host offsets (cached/jitter.py) ------------------
    # SSSD draws these offsets at random, or not at all (its defaults of 0); here each is
    # this host's fraction of the spread, from /etc/machine-id: a fleet restarted
    # together stays spread (docs/compatibility.md §9.7).
    offline_timeout_random_offset: int = option(
        integer(0),
        30,
        "Seconds of spread added to each retry while offline: this host's fraction of it "
        "(from /etc/machine-id, the same after every restart), not a new random draw.",
    )
    refresh_expired_interval: int = computed(
        integer(0),
        "Seconds between background refreshes of the entries that would expire before the "
        "next one (refresh ahead; validated by change stamps, skipped while offline); "
        "0 = off. On by default, unlike SSSD: the interval SSSD's rule shrinks a too long "
        "one to, 70 % of the shortest entry lifetime, so no lookup waits on an expiry.",
        "70 % of the shorter entry lifetime",
    )
    refresh_expired_interval_offset: int = computed(
        integer(0),
        "Seconds of spread added to each refresh_expired_interval: this host's fraction "
        "of it (from /etc/machine-id). SSSD's default is 0 and its offset random.",
        "10 % of refresh_expired_interval",
    )
    ldap_connection_expire_timeout: int = option(
        integer(0),
        900,
        "Seconds a connection to the server is used before it is replaced by a new one "
        "(made off the lookup path, to the first ldap_uri server that answers); "
        "0 = kept until it fails.",
    )
    ldap_connection_expire_offset: int = option(
        integer(0),
        900,
        "Seconds of spread added to ldap_connection_expire_timeout: this host's fraction "
        "of it (from /etc/machine-id). SSSD's default is 0: every host reconnects in step "
        "(SSSD PR #951); one whole timeout of spread leaves a fleet started together as "
        "evenly spread as one started at random.",
    )
    ldap_network_timeout: int = option(integer(1), 6, "Connect timeout per server, seconds.")
    ldap_search_timeout: int = option(
        integer(1),
        6,
        "Deadline of one search (all pages), seconds; it runs again from each answer"
        " read, up to ten times this from the search's start.",
    )
    ldap_opt_timeout: int = option(
        integer(1), 8, "Deadline of StartTLS, bind and root DSE read together, seconds."
    )
    failover_primary_timeout: int = option(
        integer(1),
        31,
        "While an ldap_backup_uri server serves, seconds between tries of the ldap_uri "
        "servers (SSSD: 31, its minimum; cached accepts less for tests).",
    )
    ldap_page_size: int = option(integer(0), 1000, "Paged-results page size; 0 = no paging.")
    case_sensitive: CaseSensitive = option(
        closed(CaseSensitive, expected="true, false or preserving"),
        CaseSensitive.TRUE,
        "`true`, `false` or `preserving`.",
    )
    min_id: int = option(
        integer(0), 1, "Lowest uid/gid served; id 0 is never served, whatever it says."
    )
    max_id: int = option(integer(0, MAX_ID), 0, "Highest uid/gid served; 0 = no limit.")
    enumerate: bool = option(
        boolean, False, "Answer getpwent/getgrent with this domain's cached entries (no LDAP)."
    )
    filter_users: list[str] = option(
        str_list,
        [],
        "Users of this domain never answered, in addition to [nss] filter_users (as SSSD; "
        "`name@OTHER` for another domain is ignored here).",
    )
    filter_groups: list[str] = option(
        str_list, [], "Groups of this domain never answered, in addition to [nss] filter_groups."
    )

    # -- access_provider = ad (sssd-ad(5); ad_access.c, ad_gpo.c; cached/ldap/adaccess.py).
    ad_access_filter: str = option(
        string,
        "",
        "access_provider = ad: the user may log in when a base search of its entry with "
        "this filter finds it. `?`-separated entries, each `FILTER`, `DOM:<domain>:FILTER` "
        "or `FOREST:<forest>:FILTER`; the most specific that names this domain applies "
        "(none: everyone is denied). Unset: no filter is checked.",
    )
    ad_gpo_access_control: GpoMode = option(
        closed(GpoMode),
        GpoMode.ENFORCING,
        "GPO-based login rights of `access_provider = ad`: `enforcing` denies what the "
        "GPOs deny, `permissive` logs it and allows, `disabled` does not evaluate GPOs.",
    )
    ad_gpo_implicit_deny: bool = option(
        boolean,
        False,
        "With GPO access control, deny a user when no applicable GPO sets the allow "
        "right of the login's service.",
    )
    ad_gpo_ignore_unreadable: bool = option(
        boolean,
        False,
        "With GPO access control, skip a GPO whose attributes the host cannot read "
        "instead of denying every login.",
    )
    ad_gpo_cache_timeout: int = option(
        integer(0),
        5,
        "Seconds a GPO's files fetched from SYSVOL are used without asking the DC again.",
    )
    ad_gpo_map_interactive: list[str] = option(
        map_items,
        [],
        "PAM services (`+name` added, `-name` removed) checked against "
        "SeInteractiveLogonRight and SeDenyInteractiveLogonRight, besides SSSD's: "
        + ", ".join(DEFAULT_MAPS[GpoRight.INTERACTIVE])
        + ".",
    )
    ad_gpo_map_remote_interactive: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) checked against the remote interactive logon "
        "rights, besides SSSD's: " + ", ".join(DEFAULT_MAPS[GpoRight.REMOTE_INTERACTIVE]) + ".",
    )
    ad_gpo_map_network: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) checked against the network logon rights, "
        "besides SSSD's: " + ", ".join(DEFAULT_MAPS[GpoRight.NETWORK]) + ".",
    )
    ad_gpo_map_batch: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) checked against the batch logon rights, "
        "besides SSSD's: " + ", ".join(DEFAULT_MAPS[GpoRight.BATCH]) + ".",
    )
    ad_gpo_map_service: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) checked against the service logon rights "
        "(none by default).",
    )
    ad_gpo_map_permit: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) always allowed by GPO access control, besides "
        "SSSD's: " + ", ".join(DEFAULT_MAPS[GpoRight.PERMIT]) + ".",
    )
    ad_gpo_map_deny: list[str] = option(
        map_items,
        [],
        "PAM services (`+name`, `-name`) always denied by GPO access control (none by default).",
    )
    ad_gpo_default_right: GpoRight = option(
        closed(GpoRight),
        GpoRight.DENY,
        "What GPO access control applies to a PAM service no ad_gpo_map_* option names: "
        "one of the map names (`interactive`, `remote_interactive`, `network`, `batch`, "
        "`service`, `permit`, `deny`).",
    )

    # -- Names: qualified names (sssd.conf(5) "DOMAIN SECTIONS"; cache_req, sss_names.c).
    use_fully_qualified_names: bool = option(
        boolean,
        False,
        "Answer this domain's names qualified (full_name_format, `alice@DOMAIN`), and "
        "find its users and groups only by qualified names, as SSSD.",
    )
    full_name_format: str = option(
        name_format, "", "full_name_format for this domain.", "[sssd] full_name_format"
    )
    re_expression: str = option(
        name_regex,
        "",
        "re_expression for this domain: how a looked-up name splits into name and "
        "domain, as SSSD (each domain's expression is tried in `domains` order).",
        "[sssd] re_expression, else `(?P<name>[^@]+)@?(?P<domain>[^@]*$)`",
    )

    # -- Home directory and shell: as the [nss] options of the same names, for this
    # domain's users; set here, they take precedence (confdb.c
    # confdb_init_domain_user_info, nss_protocol_pwent.c).
    override_homedir: str = option(
        homedir_template, "", "Home directory template of every user of the domain."
    )
    fallback_homedir: str = option(
        homedir_template, "", "Home directory template of the domain's users without one."
    )
    homedir_substring: str = option(
        string, "", "What %H expands to for this domain's users.", "[nss] homedir_substring"
    )
    override_shell: str = option(string, "", "Login shell of every user of the domain.")
    default_shell: str = option(string, "", "Login shell of the domain's users without one.")

    # -- Ids (sssd.conf(5); nss_protocol_pwent.c sss_nss_get_gid).
    auto_private_groups: PrivateGroups = option(
        closed(PrivateGroups, expected="true, false or hybrid"),
        PrivateGroups.FALSE,
        "`true`: each user's primary group is a group of its own, gid = uid, named as "
        "the user, with no members (answered by getgrgid and getgrnam when no real "
        "group has that gid or name); gidNumber is ignored (none needed) and its group "
        "is added to the user's groups. `hybrid`: that group only for users whose "
        "gidNumber equals their uid and names no real group. SSSD's default for a "
        "configured domain is `false` (its `true` for ID-mapped domains is for trusted "
        "subdomains, which cached does not serve).",
    )
    override_gid: int = option(
        integer(0, MAX_ID),
        0,
        "Primary gid answered for every user of the domain (passwd entries; the groups a "
        "user is a member of are unchanged, as in SSSD); 0 = the directory's.",
    )

    # -- Sudo rules (sssd-ldap(5) "SUDO OPTIONS", sssd-sudo(5); cached/ldap/sudo.py).
    # Used with `services = ..., sudo` only, as SSSD loads its sudo provider only then.
    sudo_provider: SudoProvider = option(
        closed(
            SudoProvider,
            {
                "ipa": "cached reads sudoRole entries only (no IPA sudo rules)",
                "ad": "cached reads sudoRole entries only; use sudo_provider = ldap",
            },
        ),
        SudoProvider.LDAP,
        "`ldap`: sudoRole entries under ldap_sudo_search_base, for `services = ..., sudo`; "
        "`none`: no rules.",
        "ldap (the id provider)",
    )
    ldap_sudo_search_base: str = option(
        search_base, "", "Base(s) of the sudoRole entries (default: ldap_search_base)."
    )
    ldap_sudo_full_refresh_interval: int = option(
        integer(0),
        21600,
        "Seconds between full refreshes of the rules (every rule read; deleted rules "
        "dropped); 0 = off.",
    )
    ldap_sudo_smart_refresh_interval: int = option(
        integer(0),
        900,
        "Seconds between smart refreshes (rules changed since the newest stamp held, "
        "by modifyTimestamp; deleted rules are not seen, as in SSSD); 0 = off.",
    )
    ldap_sudo_random_offset: int | None = option(
        integer(0),
        None,
        "Seconds of spread added to each full and smart refresh: this host's fraction of "
        "it (from /etc/machine-id, the same after every restart); 0 = none. Unset: a "
        "tenth of each refresh's own interval (SSSD's default is 0: every host in step).",
        "10 % of each interval",
    )
    ldap_sudo_use_host_filter: bool = option(
        boolean, True, "Read only the rules whose sudoHost may match this host."
    )
    ldap_sudo_hostnames: list[str] = option(
        space_list,
        [],
        "Space-separated host names and FQDNs the host filter matches (default: this "
        "host's name and its fully qualified name).",
    )
    ldap_sudo_ip: list[str] = option(
        space_list,
        [],
        "Space-separated IPv4/IPv6 addresses or networks the host filter matches (default: "
        "the addresses and networks of this host's interfaces).",
    )
    ldap_sudo_include_netgroups: bool = option(
        boolean, True, "The host filter also takes rules whose sudoHost is a +netgroup."
    )
    ldap_sudo_include_regexp: bool = option(
        boolean, False, "The host filter also takes rules whose sudoHost has wildcards."
    )
    ldap_sudorule_object_class: str = option(string, "sudoRole", "Object class of sudo rules.")
    ldap_sudorule_name: str = option(string, "cn", "Rule name attribute.")
    ldap_sudorule_command: str = option(string, "sudoCommand", "Command attribute.")
    ldap_sudorule_host: str = option(string, "sudoHost", "Host attribute.")
    ldap_sudorule_user: str = option(string, "sudoUser", "User attribute.")
    ldap_sudorule_option: str = option(string, "sudoOption", "Option attribute.")
    ldap_sudorule_runas: str = option(string, "sudoRunAs", "Run-as attribute (deprecated).")
    ldap_sudorule_runasuser: str = option(string, "sudoRunAsUser", "Run-as user attribute.")
    ldap_sudorule_runasgroup: str = option(string, "sudoRunAsGroup", "Run-as group attribute.")
    ldap_sudorule_notbefore: str = option(string, "sudoNotBefore", "Start of validity attribute.")
    ldap_sudorule_notafter: str = option(string, "sudoNotAfter", "End of validity attribute.")
    ldap_sudorule_order: str = option(string, "sudoOrder", "Ordering attribute.")
    ldap_sudorule_entry_usn: str = option(
        string,
        "",
        "USN attribute compared with modifyTimestamp by the smart refresh (default: "
        "entryCSN, which OpenLDAP keeps; a server without it returns none).",
    )
    entry_cache_sudo_timeout: int = option(
        integer(0),
        5400,
        "Seconds a sudo rule stays valid; a sudo call for a user with an expired rule "
        "refreshes that user's rules first (online).",
    )

    @property
    def case_insensitive(self) -> bool:
        return self.case_sensitive != CaseSensitive.TRUE

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
    pam: PamConfig = field(default_factory=PamConfig)
    ssh: SshConfig = field(default_factory=SshConfig)
    sudo: SudoConfig = field(default_factory=SudoConfig)
    warnings: list[str] = field(default_factory=list)

    def domain(self, name: str) -> DomainConfig:
        for d in self.domains:
            if d.name == name:
                return d
        known = ", ".join(d.name for d in self.domains)
        raise ConfigError(f"{self.path}: no domain named {name!r} (configured: {known})")


# The options of each section, read from the fields (a view, not a second table).
DAEMON_OPTIONS: dict[str, Option] = options_of(DaemonConfig)
NSS_OPTIONS: dict[str, Option] = options_of(NssConfig)
PAM_OPTIONS: dict[str, Option] = options_of(PamConfig)
SSH_OPTIONS: dict[str, Option] = options_of(SshConfig)
SUDO_OPTIONS: dict[str, Option] = options_of(SudoConfig)
DOMAIN_OPTIONS: dict[str, Option] = options_of(DomainConfig)
