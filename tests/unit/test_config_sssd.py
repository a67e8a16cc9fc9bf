"""An sssd.conf as SSSD 2.8.2 reads it: conf.d snippets, line syntax, repeated options
and sections, `enabled`, and the settings cached refuses or leaves out because it
cannot honour them (review of the configuration loading against SSSD 2.8.2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cached.config import ConfigError, load_config, parse_config
from tests.unit.test_config import MINIMAL


@pytest.mark.parametrize(
    ("reqcert", "verified"),
    [("never", False), ("allow", False), ("try", True), ("demand", True), ("hard", True)],
)
def test_tls_reqcert_try_verifies_as_demand(reqcert: str, verified: bool) -> None:
    from cached.ldap.client import verifies_certificates

    d = parse_config(MINIMAL + f"ldap_tls_reqcert = {reqcert}\n").domain("LDAP")
    assert verifies_certificates(d) is verified


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("access_provider = krb5", "is not supported: cached has no Kerberos provider"),
        ("access_provider = sometimes",
         "is invalid: expected one of permit, deny, simple, ldap, ad"),
        ("ldap_access_order = filter, expire, filter", "is invalid: 'filter' is listed twice"),
        ("ldap_access_order = filter, hosts",
         "is invalid: 'hosts' is not an access rule (filter, lockout, ppolicy, expire, "
         "authorized_service, host, rhost, pwd_expire_policy_reject, "
         "pwd_expire_policy_warn, pwd_expire_policy_renew, pam_authz_search)"),
        ("access_provider = ad",
         "access_provider = ad needs id_provider = ad (the host's keytab, its computer "
         "account and the DC's SYSVOL); with id_provider = ldap use access_provider = "
         "ldap with ldap_account_expire_policy = ad"),
        ("ldap_account_expire_policy = never",
         "is invalid: expected shadow, ad, rhds, ipa, 389ds or nds"),
        ("pam_authz_search = (uid=$user)",
         "is invalid: $user is not a variable of pam_authz_search (username, service, "
         "ruser, rhost, tty, hostname, fqdn, domain, dn, uid)"),
    ],
)  # fmt: skip
def test_access_values_sssd_refuses_or_cached_does_not_implement(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + line + "\n", "/etc/sssd/sssd.conf")
    assert message in str(e.value)
    assert "/etc/sssd/sssd.conf" in str(e.value) and line.split(" = ")[0] in str(e.value)


@pytest.mark.parametrize(
    "line",
    [
        "access_provider = simple",
        "access_provider = deny",
        "ldap_access_filter = (employeeType=staff)",
        "ldap_access_order = expire, ppolicy, lockout, authorized_service, host, rhost",
        "ldap_access_order = filter, pwd_expire_policy_reject",
        "ldap_account_expire_policy = 389ds",
        "simple_allow_users = alice",
        "simple_allow_groups = admins",
        "simple_deny_users = bob",
        "simple_deny_groups = contractors",
        "pam_authz_search = (&(uid=$username)(|(host=$hostname)(host=${fqdn})))",
    ],
)
def test_access_control_options_load(line: str) -> None:
    assert parse_config(MINIMAL + line + "\n").warnings == []


def test_an_ldap_access_order_that_lets_nobody_in_is_warned_of() -> None:
    # SSSD says so at start too (ldap_init.c): the options load, everyone is denied.
    cfg = parse_config(MINIMAL + "access_provider = ldap\nldap_access_order = expire,filter\n")
    assert cfg.domain("LDAP").ldap_access_order == ["expire", "filter"]
    assert [w.split(": ", 2)[2] for w in cfg.warnings] == [
        "ldap_access_order has `filter` but ldap_access_filter is not set, so every user "
        "of the domain is denied (as SSSD)",
        "ldap_access_order has `expire` but ldap_account_expire_policy is not set, so every "
        "user of the domain is denied (as SSSD)",
    ]
    empty = parse_config(MINIMAL + "ldap_access_order =\nldap_access_filter = (a=b)\n")
    assert empty.domain("LDAP").ldap_access_order == ["filter"]


@pytest.mark.parametrize(
    "line",
    [
        "access_provider = permit",
        "access_provider = PERMIT",
        "simple_allow_users =",
        "chpass_provider = ldap",
        "ldap_pwd_policy = shadow",
        "krb5_realm = EXAMPLE.TEST",
        "krb5_server = kdc.example.test",
    ],
)
def test_permit_and_authentication_options_load_quietly(line: str) -> None:
    assert parse_config(MINIMAL + line + "\n").warnings == []


# -- line syntax, as libini reads it (sss_ini.c: INI_PARSE_NOWRAP, INI_MV1S_OVERWRITE)


def test_an_indented_line_is_an_option_of_its_own() -> None:
    """The reviewer's example: SSSD (`sssd --genconf`) stores both filters; folded into
    filter_users as a continuation, filter_groups was lost and bob's name mangled."""
    text = MINIMAL.replace(
        "filter_users = root\nfilter_groups = root\n",
        "filter_users = root, bob\n    filter_groups = root, admins\n",
    )
    cfg = parse_config(text)
    assert cfg.nss.filter_users == ["root", "bob"]
    assert cfg.nss.filter_groups == ["root", "admins"]
    assert cfg.warnings == []


def test_an_indented_search_base_is_not_swallowed_by_the_option_before() -> None:
    text = MINIMAL + "    ldap_user_search_base = ou=Staff,dc=example,dc=test\n"
    d = parse_config(text).domain("LDAP")
    assert d.ldap_user_search_base == "ou=Staff,dc=example,dc=test"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("    ldaps://ldap3.example.test",
         "<string>: line 20: cannot parse 'ldaps://ldap3.example.test': expected "
         "`option = value`, a `[section]` header or a `#` comment"),
        ("  // primary directory",  # indented: not a comment in libini either
         "<string>: line 20: cannot parse '// primary directory': expected "
         "`option = value`, a `[section]` header or a `#` comment"),
        ("[domain/LDAP",
         "<string>: line 20: cannot parse '[domain/LDAP': a section header is `[name]`"),
    ],
)  # fmt: skip
def test_a_line_that_is_not_an_option_is_refused_and_quoted_once(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + line + "\n")
    assert str(e.value) == message


NEVER = "ldap_tls_reqcert = never"


@pytest.mark.parametrize(
    ("lines", "applied"),
    [
        ("// primary directory", False),
        ("//" + NEVER, False),
        ("/* primary directory */", False),
        (f"/* retired\n{NEVER}\n until the new CA */", False),
        (f"/*\n{NEVER}\n  */", False),  # the `/` at index 3
        (f"/*/\n{NEVER}\n x */", False),  # `/*/` opens one
        (f"/* a\n[domain/OTHER]\n{NEVER}\n b */", False),  # a header inside is text
        (f"/* a\n{NEVER}\n b */ x\n c */", False),  # ends at the line ending in */
        (f"/* a\r\n{NEVER}\r\n b */\r", False),  # edited on Windows
        (f"/**/\n{NEVER}", True),  # whole on its line
        (f"/* a */\n/* b */\n{NEVER}", True),
    ],
)  # fmt: skip
def test_c_comments_are_read_as_libini_reads_them(lines: str, applied: bool) -> None:
    """Every case as SSSD 2.8.2 reads it (`sssctl config-check` with an unknown option
    in place of the value: reported where applied, silent where commented out)."""
    d = parse_config(MINIMAL + lines + "\n").domain("LDAP")
    assert (d.ldap_tls_reqcert == "never") is applied


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (f"/*\n{NEVER}\n*/", 20),  # a lone `*/`: the `/` at index 1
        (f"/* a */{NEVER}", 20),  # text after the `*/`: still open
        (f"{NEVER}\n/* b\n", 21),
    ],
)
def test_a_c_comment_never_closed_is_refused_as_sssd_refuses_it(lines: str, line: int) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + lines + "\n")
    assert str(e.value) == (
        f"<string>: line {line}: the comment opened by `/*` is never closed: SSSD ends one "
        "only at a line ending in `*/` with something before the `*/` on that line (a "
        "line of just `*/` does not end it)"
    )


def test_an_option_set_twice_keeps_the_last_value_with_a_warning() -> None:
    text = MINIMAL + "# site override below\nldap_search_base = dc=example,dc=org\n"
    cfg = parse_config(text, "/etc/sssd/sssd.conf")
    assert cfg.domain("LDAP").ldap_search_base == "dc=example,dc=org"
    assert cfg.warnings == [
        "/etc/sssd/sssd.conf: line 21: [domain/LDAP] option 'ldap_search_base' is set again "
        "(first at line 17); the last value is used, as SSSD does"
    ]


def test_a_repeated_section_is_merged_with_a_warning() -> None:
    text = MINIMAL + "[nss]\nfilter_users = root, bob\nentry_negative_timeout = 30\n"
    cfg = parse_config(text)
    assert cfg.nss.filter_users == ["root", "bob"]
    assert cfg.nss.filter_groups == ["root"]  # from the first [nss]
    assert cfg.nss.entry_negative_timeout == 30
    assert cfg.warnings == [
        "<string>: line 20: section [nss] appears again (first at line 6); its options are "
        "merged, as SSSD does",
        "<string>: line 21: [nss] option 'filter_users' is set again (first at line 7); the "
        "last value is used, as SSSD does",
    ]


# -- conf.d snippets and file permissions (sss_ini.c sss_ini_add_snippets, access checks)


def write_conf(tmp_path: Path, text: str = MINIMAL, mode: int = 0o600) -> Path:
    path = tmp_path / "sssd.conf"
    path.write_text(text)
    path.chmod(mode)
    return path


def snippet(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> Path:
    confd = tmp_path / "conf.d"
    confd.mkdir(exist_ok=True)
    path = confd / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_conf_d_snippets_override_the_file_in_alphabetical_order(tmp_path: Path) -> None:
    path = write_conf(tmp_path)
    snippet(tmp_path, "50-restrict.conf", "[domain/LDAP]\n"
            "ldap_user_search_base = ou=People,dc=example,dc=test?subtree?(employeeType=staff)\n"
            "[nss]\nfilter_users = root, bob\n")  # fmt: skip
    snippet(tmp_path, "10-first.conf",
            "[nss]\nfilter_users = overridden\nfilter_groups = root, admins\n")  # fmt: skip
    snippet(tmp_path, ".50-hidden.conf", "[nss]\nfilter_users = hidden\n")
    snippet(tmp_path, "60-notes.conf.rpmsave", "[nss]\nfilter_users = not a snippet\n")
    (tmp_path / "conf.d" / "70-dir.conf").mkdir()
    cfg = load_config(str(path))
    assert cfg.nss.filter_users == ["root", "bob"]
    assert cfg.nss.filter_groups == ["root", "admins"]
    d = cfg.domain("LDAP")
    assert d.ldap_user_search_base == "ou=People,dc=example,dc=test?subtree?(employeeType=staff)"
    assert d.ldap_search_base == "dc=example,dc=test"  # from sssd.conf, merged
    assert cfg.warnings == [f"{tmp_path}/conf.d/70-dir.conf: not a regular file; skipped"]


def test_an_error_in_a_snippet_names_the_snippet(tmp_path: Path) -> None:
    path = write_conf(tmp_path)
    bad = snippet(tmp_path, "20-schema.conf", "[domain/LDAP]\nldap_schema = rfc2307x\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == (
        f"{bad}: [domain/LDAP] ldap_schema = 'rfc2307x' is invalid: "
        "expected one of rfc2307, rfc2307bis, ad"
    )
    # A snippet SSSD cannot parse it skips, and starts: so does cached.
    bad.write_text("[nss]\n  filter_users root\n")
    cfg = load_config(str(path))
    (w,) = [w for w in cfg.warnings if str(bad) in w]
    assert w.startswith(f"{bad}: line 2: cannot parse 'filter_users root'")
    assert w.endswith("the snippet is skipped, as SSSD skips it")
    bad.write_text("filter_users = alice\n[nss]\nfilter_users = bob\n")  # nothing of it
    cfg = load_config(str(path))
    assert "bob" not in cfg.nss.filter_users and "alice" not in cfg.nss.filter_users


def test_a_snippet_others_may_read_or_write_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = write_conf(tmp_path)
    loose = snippet(tmp_path, "50-restrict.conf", "[nss]\nfilter_users = root, bob\n", 0o644)
    cfg = load_config(str(path))
    assert cfg.nss.filter_users == ["root"]
    assert cfg.warnings == [
        f"{loose}: skipped, as SSSD skips it: a snippet must belong to root:root (or to the "
        f"user running cached) and give group and others no access, but it is owned by "
        f"{os.geteuid()}:{os.getegid()} with mode 0644; run: chown root:root {loose}; "
        f"chmod 600 {loose}"
    ]
    loose.chmod(0o600)
    assert load_config(str(path)).nss.filter_users == ["root", "bob"]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files away")


@needs_root
def test_a_snippet_of_another_user_is_skipped(tmp_path: Path) -> None:
    path = write_conf(tmp_path)
    theirs = snippet(tmp_path, "50-x.conf", "[nss]\nfilter_users = root, bob\n")
    os.chown(theirs, 65534, 65534)
    cfg = load_config(str(path))
    assert cfg.nss.filter_users == ["root"]
    assert cfg.warnings[0].startswith(f"{theirs}: skipped, as SSSD skips it")


@needs_root
def test_a_root_snippet_of_another_group_is_skipped_as_sssd_skips_it(tmp_path: Path) -> None:
    """SSSD 2.8.2 checks the group too: `sssctl config-check` skips a root-owned 0600
    snippet of group `daemon` ("did not pass access check"), so cached must not apply
    what it sets."""
    path = write_conf(tmp_path)
    theirs = snippet(tmp_path, "50-x.conf", "[domain/LDAP]\nldap_tls_reqcert = never\n")
    os.chown(theirs, 0, 1)
    cfg = load_config(str(path))
    assert cfg.domain("LDAP").ldap_tls_reqcert == "demand"
    assert cfg.warnings == [
        f"{theirs}: skipped, as SSSD skips it: a snippet must belong to root:root (or to the "
        "user running cached) and give group and others no access, but it is owned by 0:1 "
        f"with mode 0600; run: chown root:root {theirs}; chmod 600 {theirs}"
    ]
    os.chown(theirs, 0, 0)
    assert load_config(str(path)).domain("LDAP").ldap_tls_reqcert == "never"


def test_a_file_group_or_others_may_write_is_refused(tmp_path: Path) -> None:
    path = write_conf(tmp_path, mode=0o666)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == (
        f"{path}: mode 0666 lets group or others change the configuration; "
        f"run: chmod go-w {path}"
    )
    path.chmod(0o620)
    with pytest.raises(ConfigError, match="mode 0620 lets group or others change"):
        load_config(str(path))
    path.chmod(0o644)  # readable is fine without a password in it
    assert load_config(str(path)).warnings == []


@needs_root
def test_a_file_of_another_user_is_refused_even_with_mode_0600(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "cache_credentials = true",
        "ldap_default_bind_dn = cn=reader,dc=example,dc=test\nldap_default_authtok = s3cret",
    )
    path = write_conf(tmp_path, text)
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == (
        f"{path}: owned by uid 65534; the configuration must belong to root (or to the user "
        f"running cached); run: chown root:root {path}"
    )


# -- which domains are served: `enabled` (confdb.c), application domains


STAFF = """
[domain/STAFF]
enabled = true
id_provider = ldap
ldap_uri = ldap://ldap1.example.test
ldap_search_base = dc=example,dc=test
ldap_user_search_base = ou=People,dc=example,dc=test?subtree?(employeeType=staff)
"""


def test_enabled_false_removes_a_listed_domain_and_true_adds_one() -> None:
    text = MINIMAL + "enabled = false\n" + STAFF
    cfg = parse_config(text)
    assert [d.name for d in cfg.domains] == ["STAFF"]
    assert cfg.warnings == []


def test_enabled_true_appends_after_the_listed_domains() -> None:
    cfg = parse_config(MINIMAL + STAFF)
    assert [d.name for d in cfg.domains] == ["LDAP", "STAFF"]


def test_domains_may_be_unset_when_a_domain_is_enabled() -> None:
    text = MINIMAL.replace("domains = LDAP\n", "").replace(
        "cache_credentials = true", "cache_credentials = true\nenabled = true"
    )
    assert [d.name for d in parse_config(text).domains] == ["LDAP"]


def test_no_domain_left_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + "enabled = false\n")
    assert str(e.value) == (
        "<string>: [sssd] domains is not set; list at least one domain (or set "
        "`enabled = true` in a [domain/NAME] section)"
    )
    with pytest.raises(ConfigError, match=r"\[domain/LDAP\] enabled = 'maybe' is invalid"):
        parse_config(MINIMAL + "enabled = maybe\n")


def test_application_domains_are_left_out_with_a_warning() -> None:
    text = MINIMAL.replace("domains = LDAP", "domains = LDAP, appdom") + (
        "\n[application/appdom]\ninherit_from = LDAP\n"
    )
    cfg = parse_config(text)
    assert [d.name for d in cfg.domains] == ["LDAP"]
    assert cfg.warnings == [
        "<string>: domain 'appdom' is an application domain; left out, as SSSD does not "
        "serve application domains over NSS"
    ]
    text = MINIMAL.replace("domains = LDAP", "domains = LDAP, STAFF") + STAFF.replace(
        "enabled = true", "domain_type = application"
    )
    cfg = parse_config(text)
    assert [d.name for d in cfg.domains] == ["LDAP"]
    assert cfg.warnings == [
        "<string>: domain 'STAFF' is an application domain; left out, as SSSD does not "
        "serve application domains over NSS"
    ]
    with pytest.raises(ConfigError, match="lists only application domains"):
        parse_config(MINIMAL + "domain_type = application\n")


@pytest.mark.parametrize(("value", "mode"), [("true", "true"), ("HYBRID", "hybrid"),
                                             ("False", "false")])  # fmt: skip
def test_auto_private_groups_loads(value: str, mode: str) -> None:
    cfg = parse_config(MINIMAL + f"auto_private_groups = {value}\n")
    assert cfg.domains[0].auto_private_groups == mode
    assert cfg.warnings == []
    assert parse_config(MINIMAL).domains[0].auto_private_groups == "false"


def test_auto_private_groups_other_values_are_refused() -> None:
    # SSSD takes any other value for false with a log line (str_to_domain_mpg_mode):
    # a typo must not silently leave every user without the group it was meant to have.
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + "auto_private_groups = yes\n")
    assert str(e.value) == (
        "<string>: [domain/LDAP] auto_private_groups = 'yes' is invalid: expected true, "
        "false or hybrid"
    )


# -- filters of a domain section (negcache.c), deprecated search filters (ldap_options.c)


def test_filter_users_and_groups_in_a_domain_apply_to_that_domain() -> None:
    from cached.model import Kind
    from cached.responder.policy import ServePolicy

    text = MINIMAL.replace("domains = LDAP", "domains = LDAP, STAFF") + (
        "filter_users = bob, carol@LDAP, dave@STAFF\nfilter_groups = admins\n"
    ) + STAFF.replace("enabled = true\n", "")
    cfg = parse_config(text)
    assert cfg.warnings == []
    ldap, staff = cfg.domain("LDAP"), cfg.domain("STAFF")
    assert ldap.filter_users == ["bob", "carol@LDAP", "dave@STAFF"]
    policy = ServePolicy(cfg)
    # [nss] filter_users = root still applies; dave@STAFF names another domain (SSSD: a
    # UPN), so it filters nobody in LDAP; and LDAP's list does not reach STAFF.
    assert policy.filter_names(ldap, Kind.USER) == {"root", "bob", "carol"}
    assert policy.filter_names(ldap, Kind.GROUP) == {"root", "admins"}
    assert policy.filter_names(staff, Kind.USER) == {"root"}
    assert policy.filter_names(staff, Kind.GROUP) == {"root"}


def test_deprecated_search_filters_apply_to_a_plain_base() -> None:
    from cached.config import SearchBase
    from cached.ldap.schema import SchemaMap

    text = MINIMAL + "ldap_user_search_filter = employeeType=staff\n" \
        "ldap_group_search_filter = (cn=users)\n"  # fmt: skip
    cfg = parse_config(text)
    d = cfg.domain("LDAP")
    assert d.ldap_user_search_filter == "(employeeType=staff)"
    s = SchemaMap.from_config(d)
    assert s.user_bases == (SearchBase("dc=example,dc=test", "sub", "(employeeType=staff)"),)
    assert s.group_bases == (SearchBase("dc=example,dc=test", "sub", "(cn=users)"),)
    assert cfg.warnings == [
        f"<string>: [domain/LDAP] ldap_{k}_search_filter is deprecated (applied, as SSSD "
        f"does); write it into ldap_{k}_search_base as BASE?subtree?FILTER"
        for k in ("user", "group")
    ]
    # A base read from the root DSE gets it too (sdap_set_search_base).
    rootdse = SchemaMap.from_config(
        parse_config(text.replace("ldap_search_base = dc=example,dc=test\n", "")).domain("LDAP")
    ).with_default_base("dc=example,dc=org")
    assert rootdse.user_bases == (SearchBase("dc=example,dc=org", "sub", "(employeeType=staff)"),)


def test_deprecated_search_filter_with_the_base_scope_filter_syntax_is_ignored() -> None:
    from cached.ldap.schema import SchemaMap

    text = MINIMAL + (
        "ldap_user_search_base = ou=People,dc=example,dc=test?onelevel?\n"
        "ldap_user_search_filter = (employeeType=staff)\n"
    )
    cfg = parse_config(text)
    s = SchemaMap.from_config(cfg.domain("LDAP"))
    assert [(b.dn, b.scope, b.filter) for b in s.user_bases] == [
        ("ou=People,dc=example,dc=test", "one", "")
    ]
    assert cfg.warnings == [
        "<string>: [domain/LDAP] ldap_user_search_filter is ignored, as SSSD ignores it, "
        "because ldap_user_search_base uses the base?scope?filter syntax; put the filter there"
    ]
    with pytest.raises(ConfigError, match="unbalanced parentheses"):
        parse_config(MINIMAL + "ldap_user_search_filter = (uid=a\n")


# -- SSSD values cached does not support say so, and why (not "invalid")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("id_provider = ldap", "id_provider = files",
         "id_provider = 'files' is not supported: SSSD's files provider serves /etc/passwd "
         "and /etc/group, which glibc's own `files` module answers (keep `files` before `sss` "
         "in nsswitch.conf); remove this domain from `domains`"),
        ("id_provider = ldap", "id_provider = proxy",
         "id_provider = 'proxy' is not supported: cached has no proxy provider; it supports "
         "`id_provider = ldap` and `ad`"),
        ("ldap_schema = rfc2307bis", "ldap_schema = IPA",
         "ldap_schema = 'IPA' is not supported: cached has no IPA schema (no views or "
         "overrides); write ldap_schema = rfc2307bis to read an IPA server's users and groups"),
        ("cache_credentials = true", "ldap_default_authtok_type = obfuscated_password",
         "ldap_default_authtok_type = 'obfuscated_password' is not supported: cached does not "
         "read sss_obfuscate's obfuscated passwords (anyone who can read the file can undo "
         "them); write the password itself with ldap_default_authtok_type = password, in a "
         "file of mode 0600"),
    ],
)  # fmt: skip
def test_sssd_values_cached_does_not_support_say_why(old: str, new: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL.replace(old, new))
    assert str(e.value) == f"<string>: [domain/LDAP] {message}"


def test_section_names_are_case_insensitive_as_in_sssd() -> None:
    """SSSD's confdb keeps a section as a case-insensitive cn: [NSS] is [nss], and its
    filter_users applies rather than being ignored with an unknown-section warning."""
    cfg = parse_config(
        MINIMAL.replace("[sssd]", "[SSSD]").replace("[domain/LDAP]", "[Domain/ldap]")
        + "[NSS]\nfilter_users = root, bob\n"
    )
    assert [d.name for d in cfg.domains] == ["ldap"]  # as its section spells it
    assert "bob" in cfg.nss.filter_users
    assert not [w for w in cfg.warnings if "unknown section" in w]


def test_enumeration_says_it_lists_only_what_is_cached() -> None:
    """Review S10: a documented difference from SSSD, said at start too."""
    quiet = parse_config(MINIMAL)
    assert not [w for w in quiet.warnings if "enumerate" in w]
    cfg = parse_config(MINIMAL + "enumerate = true\n")
    assert cfg.domains[0].enumerate
    (w,) = [w for w in cfg.warnings if "enumerate" in w]
    assert "cached so far" in w and "not the whole directory" in w


def test_lines_end_at_a_newline_only_as_in_libini() -> None:
    """Found in review: str.splitlines() also ended a line at a form feed, so a
    comment holding one turned certificate checks off."""
    for sep in ("\x0c", "\x0b", "\r", "\x1c", "\x85", "\u2028"):
        cfg = parse_config(MINIMAL + f"# retired{sep}ldap_tls_reqcert = never\n")
        assert cfg.domains[0].ldap_tls_reqcert == "demand", repr(sep)
    crlf = parse_config(MINIMAL.replace("\n", "\r\n"))  # a file edited on Windows
    assert crlf.domains[0].ldap_uri == parse_config(MINIMAL).domains[0].ldap_uri
    bom = parse_config("\ufeff" + MINIMAL)
    assert bom.domains[0].name == "LDAP"


def test_a_password_in_a_readable_file_is_refused_whatever_a_snippet_sets(tmp_path: Path) -> None:
    """Found in review: only the file whose value won was checked, so a 0600 snippet
    setting the password again let the main file, 0644 with the password, load."""
    path = write_conf(tmp_path, MINIMAL + "ldap_default_bind_dn = cn=b\n"
                      "ldap_default_authtok = old\n", mode=0o644)  # fmt: skip
    snippet(tmp_path, "10-pw.conf", "[domain/LDAP]\nldap_default_authtok = new\n")
    with pytest.raises(ConfigError, match=rf"^{path}: "):
        load_config(str(path))
    path.chmod(0o600)
    assert load_config(str(path)).domains[0].ldap_default_authtok == "new"


def test_a_password_emptied_by_a_snippet_is_still_a_password_in_a_readable_file(
    tmp_path: Path,
) -> None:
    """Found in review: the check ran only when the final value was set."""
    path = write_conf(tmp_path, MINIMAL + "ldap_default_bind_dn = cn=b\n"
                      "ldap_default_authtok = secret\n", mode=0o644)  # fmt: skip
    snippet(tmp_path, "10-pw.conf", "[domain/LDAP]\nldap_default_authtok =\n")
    with pytest.raises(ConfigError, match=rf"^{path}: "):
        load_config(str(path))
