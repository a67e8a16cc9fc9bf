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
from cached.config.parsers import (
    RESPONSE_FILTER_DEFAULTS,
    boolean,
    ccname_template,
    closed,
    domain_sid,
    homedir_template,
    integer,
    krb5_delta,
    name_format,
    not_supported,
    one_char,
    provider,
    response_filter,
    search_base,
    search_filter,
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


class TlsReqcert(enum.StrEnum):
    """``ldap_tls_reqcert``, in OpenLDAP's order from the least checking."""

    NEVER = "never"
    ALLOW = "allow"
    TRY = "try"
    DEMAND = "demand"
    HARD = "hard"


class AuthProvider(enum.StrEnum):
    """``auth_provider``: who checks passwords (SSSD's default is the id provider)."""

    LDAP = "ldap"
    KRB5 = "krb5"
    AD = "ad"  # krb5 with AD's defaults: realm from ad_domain, krb5_validate = true
    NONE = "none"


class ChpassProvider(enum.StrEnum):
    """``chpass_provider``: who changes passwords (SSSD's default is auth_provider)."""

    LDAP = "ldap"
    KRB5 = "krb5"
    AD = "ad"
    NONE = "none"


KERBEROS_PROVIDERS = (AuthProvider.KRB5, AuthProvider.AD)


# SSSD's responders (sssd.conf(5) ``services``): cached runs ``nss`` always, ``pam``
# when listed; the others are accepted so an existing sssd.conf loads, and do nothing.
SSSD_SERVICES = ("nss", "pam", "sudo", "autofs", "ssh", "pac", "ifp", "secrets", "kcm",
                 "session_recording")  # fmt: skip


def services_list(raw: str) -> list[str]:
    """``services``: a comma list of SSSD's responder names."""
    names = [s.lower() for s in str_list(raw)]
    for n in names:
        if n not in SSSD_SERVICES:
            raise ValueError(f"{n!r} is not an SSSD responder ({', '.join(SSSD_SERVICES)})")
    return names


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
        "`private/pam` in `pipes_dir` for `pam_sss.so` (logins); SSSD's other names are "
        "accepted and do nothing (the InfoPipe follows `dbus_address`).",
    )

    # -- Names (sssd.conf(5); sss_names.c). The domain's own full_name_format wins.
    full_name_format: str = option(
        name_format,
        "%1$s@%2$s",
        "How a qualified name is written: %1$s the name, %2$s the domain, %3$s the "
        "domain's flat name (for an LDAP domain, its name).",
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
        integer(0, 99), 50, "Refresh in the background after this % of the entry lifetime; 0 = off."
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
        "Leave the users of filter_users out of group member lists; `false` lists them "
        "(as SSSD).",
    )
    pwfield: str = option(string, "*", "The passwd field returned in passwd entries.")
    enumerate: bool = option(
        boolean, False, "Answer getpwent/getgrent with the cached entries of every domain."
    )
    client_idle_timeout: int = option(
        integer(10), 60, "Seconds before an idle client connection is closed (SSSD minimum 10)."
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
        "Days after the last online login that cached credentials stop working offline; "
        "0 = never.",
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


@dataclass(frozen=True, kw_only=True)
class DomainConfig:
    """``[domain/NAME]``: ``name`` is NAME, every other field an option."""

    name: str
    id_provider: str = computed(provider, "Must be `ldap`.", "(required)")
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
    chpass_provider: ChpassProvider = computed(
        closed(ChpassProvider),
        "Who changes passwords (PAM chauthtok): `krb5` and `ad` through the KDC's "
        "kpasswd service (RFC 3244) with the user's old password; `ldap` and `none` "
        "answer that no provider can.",
        "auth_provider's",
    )
    ad_domain: str = option(
        string, "", "The AD domain's DNS name; `auth_provider = ad` takes the realm from it."
    )
    krb5_realm: str = option(
        string,
        "",
        "The Kerberos realm of the users' principals (`name@REALM`); unset, ad_domain "
        "upper-cased, else krb5.conf's default_realm. The KDCs are krb5.conf's.",
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
        integer(1), 6, "Deadline of one whole search (all pages), seconds."
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
    override_gid: int = option(
        integer(0, MAX_ID),
        0,
        "Primary gid answered for every user of the domain (passwd entries; the groups a "
        "user is a member of are unchanged, as in SSSD); 0 = the directory's.",
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
DOMAIN_OPTIONS: dict[str, Option] = options_of(DomainConfig)
