"""Configuration: sssd.conf syntax, defaults, and the exact messages a user sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cached.config import ConfigError, load_config, parse_config
from testing.asuser import open_the_way, run_python

MINIMAL = """\
[sssd]
config_file_version = 2
services = nss, pam
domains = LDAP

[nss]
filter_users = root
filter_groups = root

[pam]
offline_credentials_expiration = 2

[domain/LDAP]
id_provider = ldap
auth_provider = ldap
ldap_uri = ldap://ldap1.example.test, ldaps://ldap2.example.test
ldap_search_base = dc=example,dc=test
ldap_schema = rfc2307bis
cache_credentials = true
"""


def write(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "cached.conf"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_an_sssd_conf_loads_unchanged_with_sssd_defaults(tmp_path):
    cfg = load_config(str(write(tmp_path, MINIMAL)))
    assert cfg.warnings == []
    d = cfg.domain("LDAP")
    assert d.ldap_uri == ["ldap://ldap1.example.test", "ldaps://ldap2.example.test"]
    assert d.ldap_group_member == "member"  # the rfc2307bis default
    assert d.ldap_user_search_base == d.ldap_group_search_base == "dc=example,dc=test"
    # SSSD 2.8.2 defaults (reference §6.1).
    assert d.ldap_group_nesting_level == 2
    assert d.ldap_deref_threshold == 10
    assert d.entry_cache_timeout == d.entry_cache_user_timeout == 5400
    assert d.ldap_network_timeout == d.ldap_search_timeout == 6
    assert d.ldap_page_size == 1000
    assert d.offline_timeout == 60
    assert d.ldap_tls_reqcert == "demand"
    assert cfg.nss.entry_negative_timeout == 15
    assert cfg.nss.entry_cache_nowait_percentage == 50
    assert cfg.nss.memcache_timeout == 300
    assert cfg.daemon.pipes_dir == "/var/lib/sss/pipes"
    assert cfg.daemon.db_dir == "/var/lib/cached/db"


def test_rfc2307_member_default_and_per_type_timeouts():
    text = MINIMAL.replace("ldap_schema = rfc2307bis", "entry_cache_timeout = 60\n"
                           "entry_cache_group_timeout = 30")  # fmt: skip
    d = parse_config(text).domain("LDAP")
    assert d.ldap_schema == "rfc2307" and d.ldap_group_member == "memberUid"
    assert (d.entry_cache_user_timeout, d.entry_cache_group_timeout) == (60, 30)


@pytest.mark.parametrize(
    "change,message",
    [
        (
            ("ldap_schema = rfc2307bis", "ldap_schema = ad2"),
            "<string>: [domain/LDAP] ldap_schema = 'ad2' is invalid: "
            "expected one of rfc2307, rfc2307bis, ad",
        ),
        (
            ("cache_credentials = true", "ldap_group_nesting_level = two"),
            "<string>: [domain/LDAP] ldap_group_nesting_level = 'two' is invalid: "
            "expected an integer",
        ),
        (
            ("[nss]", "[nss]\nentry_cache_nowait_percentage = 100"),
            "<string>: [nss] entry_cache_nowait_percentage = '100' is invalid: must be at most 99",
        ),
        (
            (
                "ldap_uri = ldap://ldap1.example.test, ldaps://ldap2.example.test",
                "ldap_uri = ldap1.example.test",
            ),
            "<string>: [domain/LDAP] ldap_uri = 'ldap1.example.test' is invalid: "
            "'ldap1.example.test' is not an ldap://, ldaps:// or ldapi:// URI",
        ),
        (
            ("domains = LDAP", "domains = LDAP, OTHER"),
            "<string>: [sssd] domains lists 'OTHER' but there is no [domain/OTHER] section",
        ),
        (
            ("domains = LDAP", "domains ="),
            "<string>: [sssd] domains is not set; list at least one domain (or set "
            "`enabled = true` in a [domain/NAME] section)",
        ),
        (
            ("id_provider = ldap", "id_provider = nis"),
            "<string>: [domain/LDAP] id_provider = 'nis' is invalid: expected one of ldap, ad",
        ),
        (
            ("[sssd]", "[cached]\ndomains = LDAP\n[sssd]"),
            "<string>: both [cached] and [sssd] are present; keep one of them",
        ),
    ],
)
def test_invalid_configurations_name_file_section_option_and_value(change, message):
    old, new = change
    assert old in MINIMAL
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL.replace(old, new, 1))
    assert str(e.value) == message


def test_unknown_options_and_sections_warn_by_name():
    text = MINIMAL + "ldap_user_nmae = uid\n[nsss]\nfoo = 1\n"
    cfg = parse_config(text)
    assert cfg.warnings == [
        "<string>: unknown section [nsss] is ignored",
        "<string>: [domain/LDAP] unknown option 'ldap_user_nmae' is ignored",
    ]


def test_missing_file(tmp_path):
    path = tmp_path / "nope.conf"
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert (
        str(e.value) == f"{path}: no such file; create it (see contrib/cached.conf) or pass -c FILE"
    )


def test_unreadable_file_as_an_unprivileged_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user (CI runs as root)")
    tmp_path.chmod(0o755)
    path = write(tmp_path, MINIMAL, 0o600)
    open_the_way(path)
    code = f"from cached.config import load_config; load_config({str(path)!r})"
    proc = run_python(["-c", code])
    assert proc.returncode != 0
    message = f"cached.config.errors.ConfigError: {path}: cannot read: Permission denied"
    assert message in proc.stderr
    # The same user reads it once it is readable: the denial above was the file's mode.
    path.chmod(0o644)
    proc = run_python(["-c", code])
    assert (proc.returncode, proc.stderr) == (0, "")


def test_password_in_a_world_readable_file_is_refused(tmp_path):
    text = MINIMAL.replace(
        "cache_credentials = true",
        "ldap_default_bind_dn = cn=reader,dc=example,dc=test\nldap_default_authtok = s3cret",
    )
    path = write(tmp_path, text, 0o644)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == (
        f"{path}: [domain/LDAP] holds ldap_default_authtok, but the file is mode 0644 "
        f"(readable by group or others); run: chmod 600 {path}"
    )
    path.chmod(0o600)
    assert load_config(str(path)).domain("LDAP").ldap_default_authtok == "s3cret"


def test_the_cli_reports_config_errors_with_status_3(tmp_path):
    path = write(tmp_path, MINIMAL.replace("ldap_schema = rfc2307bis", "ldap_schema = x"))
    proc = subprocess.run(
        [sys.executable, "-m", "cached", "status", "-c", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        f"cached: {path}: [domain/LDAP] ldap_schema = 'x' is invalid: "
        "expected one of rfc2307, rfc2307bis, ad"
    )


def test_readme_documents_every_option():
    from cached.config import DAEMON_OPTIONS, DOMAIN_OPTIONS, NSS_OPTIONS, PAM_OPTIONS

    readme = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for table in (DAEMON_OPTIONS, NSS_OPTIONS, PAM_OPTIONS, DOMAIN_OPTIONS):
        for name in table:
            assert f"| `{name}` |" in readme, f"docs/configuration.md does not document {name}"


def test_the_ssh_section_and_the_netgroup_options() -> None:
    """[ssh] is read (its known_hosts and certificate options load with no effect,
    SSSD's own certificate options quietly); the netgroup options take SSSD's
    defaults, the search base and entry_cache_timeout where they are unset."""
    text = MINIMAL.replace("services = nss, pam", "services = nss, pam, ssh") + (
        "entry_cache_timeout = 600\n"
        "\n[ssh]\nssh_hash_known_hosts = true\nssh_known_hosts_timeout = 30\n"
        "ssh_use_certificate_keys = false\nca_db = /etc/sssd/pki/ca.pem\n"
    )
    cfg = parse_config(text)
    assert cfg.daemon.services == ["nss", "pam", "ssh"]
    assert (cfg.ssh.ssh_hash_known_hosts, cfg.ssh.ssh_known_hosts_timeout,
            cfg.ssh.ssh_use_certificate_keys) == (True, 30, False)  # fmt: skip
    assert cfg.warnings == []
    d = cfg.domain("LDAP")
    assert d.ldap_user_ssh_public_key == "sshPublicKey"
    assert (d.ldap_netgroup_object_class, d.ldap_netgroup_name, d.ldap_netgroup_triple,
            d.ldap_netgroup_member) == ("nisNetgroup", "cn", "nisNetgroupTriple",
                                        "memberNisNetgroup")  # fmt: skip
    assert d.ldap_netgroup_search_base == "dc=example,dc=test"
    assert d.entry_cache_netgroup_timeout == 600
    ad = parse_config(MINIMAL.replace("rfc2307bis", "ad")).domain("LDAP")
    assert ad.ldap_user_ssh_public_key == ""  # SSSD's AD map has none
    with pytest.raises(ConfigError, match=r"\[ssh\] ssh_known_hosts_timeout = 'x' is invalid"):
        parse_config(text.replace("ssh_known_hosts_timeout = 30", "ssh_known_hosts_timeout = x"))
    unknown = parse_config(text + "ssh_no_such_option = 1\n")
    assert any("unknown option 'ssh_no_such_option'" in w for w in unknown.warnings)
