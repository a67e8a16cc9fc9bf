"""The home directory and login shell answered under sssd.conf's home and shell
options, as SSSD's NSS responder computes them (nss_protocol_pwent.c,
responder_utils.c ``sss_resp_get_shell_override``, sss_nss.c
``expand_homedir_template``): the template expansion, the precedence of a domain's
options over [nss]'s, and the loader's refusal of a template SSSD cannot expand."""

from __future__ import annotations

from pathlib import Path

import pytest

from cached.config import ConfigError, parse_config
from cached.model import User
from cached.responder.homeshell import (
    NOLOGIN_SHELL,
    HomeShell,
    expand_homedir,
    read_etc_shells,
)
from cached.responder.policy import ServePolicy
from tests.unit.test_config import MINIMAL


def _config(nss: str = "", domain: str = "", case: str = "true") -> str:
    text = MINIMAL.replace("filter_groups = root\n", f"filter_groups = root\n{nss}")
    return text + f"case_sensitive = {case}\n{domain}"


def _policy(nss: str = "", domain: str = "", case: str = "true", shells=()) -> ServePolicy:
    return ServePolicy(parse_config(_config(nss, domain, case)), frozenset(shells))


@pytest.mark.parametrize(
    ("template", "want"),
    [
        ("/home/%u", "/home/Alice"),
        ("/home/%U", "/home/10001"),
        ("/home/%d/%u", "/home/LDAP/Alice"),
        ("/home/%f", "/home/Alice@LDAP"),
        ("/home/%l/%u", "/home/A/Alice"),
        ("%o", "/Export/Alice"),
        ("%h", "/export/alice"),
        ("%H/%u", "/srv/home/Alice"),
        ("/home/100%%/%u", "/home/100%/Alice"),
        ("/home/plain", "/home/plain"),
        ("", ""),
    ],
)
def test_every_template_sssd_expands(template: str, want: str) -> None:
    assert expand_homedir(template, "Alice", 10001, "LDAP", "/Export/Alice", "/srv/home") == want


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/home/%u%", "is invalid: a single % at the end (write %% for a percent sign)"),
        ("/home/%x", "is invalid: unknown template %x (known: %u %U %d %f %l %o %h %H %%)"),
        ("/home/%P", "is not supported: cached does not read users' principal names"),
        ("/home/%F/%u", "is not supported: an LDAP domain has no flat (NetBIOS) name"),
    ],
)
@pytest.mark.parametrize("option", ["override_homedir", "fallback_homedir"])
@pytest.mark.parametrize("section", ["nss", "domain/LDAP"])
def test_a_template_sssd_cannot_expand_is_refused_with_where_and_why(
    value: str, why: str, option: str, section: str
) -> None:
    line = f"{option} = {value}\n"
    text = _config(nss=line) if section == "nss" else _config(domain=line)
    with pytest.raises(ConfigError) as e:
        parse_config(text, "/etc/sssd/sssd.conf")
    assert str(e.value).startswith(f"/etc/sssd/sssd.conf: [{section}] {option} = {value!r} {why}")


def test_the_nss_only_shell_options_are_ignored_with_a_warning_in_a_domain() -> None:
    cfg = parse_config(_config(domain="allowed_shells = *\nshell_fallback = /bin/bash\n"))
    assert [w.split(": ", 1)[1] for w in cfg.warnings] == [
        "[domain/LDAP] allowed_shells is an option of [nss], where SSSD reads it; ignored here",
        "[domain/LDAP] shell_fallback is an option of [nss], where SSSD reads it; ignored here",
    ]


ALICE = User("Alice", 10001, 20000, "Alice A", "/Export/Alice", "/bin/tcsh")


def test_without_options_the_directory_values_are_answered_as_they_are() -> None:
    p = _policy()
    assert p.output_user(p.domains["ldap"], ALICE) is ALICE


def test_home_precedence_domain_over_nss_override_over_fallback() -> None:
    nss = "override_homedir = /nss/%u\nfallback_homedir = /nssfb/%u\n"
    p = _policy(nss=nss)
    d = p.domains["ldap"]
    assert p.output_user(d, ALICE).home == "/nss/Alice"
    p = _policy(nss=nss, domain="override_homedir = /dom/%d/%u\n")
    assert p.output_user(p.domains["ldap"], ALICE).home == "/dom/LDAP/Alice"
    # fallback_homedir: only for a user without a home directory; the domain's first.
    p = _policy(nss="fallback_homedir = /nssfb/%u\n", domain="fallback_homedir = /fb/%U\n")
    d = p.domains["ldap"]
    assert p.output_user(d, ALICE).home == "/Export/Alice"
    assert p.output_user(d, User("bob", 10002, 20000)).home == "/fb/10002"
    # homedir_substring: [nss]'s default /home, the domain's before it.
    p = _policy(nss="override_homedir = %H/%u\n")
    assert p.output_user(p.domains["ldap"], ALICE).home == "/home/Alice"
    p = _policy(nss="override_homedir = %H/%u\n", domain="homedir_substring = /srv\n")
    assert p.output_user(p.domains["ldap"], ALICE).home == "/srv/Alice"


def test_names_in_templates_are_the_answered_names() -> None:
    p = _policy(nss="override_homedir = /home/%u\n", case="false")
    out = p.output_user(p.domains["ldap"], ALICE)
    assert (out.name, out.home) == ("alice", "/home/alice")
    p = _policy(nss="override_homedir = /home/%l/%u\n", case="preserving")
    out = p.output_user(p.domains["ldap"], ALICE)
    assert (out.name, out.home) == ("Alice", "/home/A/Alice")


def test_a_template_in_the_directory_is_expanded_as_sssd_expands_it() -> None:
    p = _policy()
    d = p.domains["ldap"]
    assert p.output_user(d, User("ann", 10003, 20000, home="/home/%u")).home == "/home/ann"
    # One SSSD cannot expand: SSSD answers an empty home directory.
    assert p.output_user(d, User("ann", 10003, 20000, home="/home/50%")).home == ""


@pytest.mark.parametrize(
    ("nss", "domain", "shell", "want"),
    [
        ("", "", "/bin/tcsh", "/bin/tcsh"),
        ("", "", "", ""),
        ("default_shell = /bin/bash\n", "", "", "/bin/bash"),
        ("default_shell = /bin/bash\n", "", "/bin/tcsh", "/bin/tcsh"),
        ("default_shell = /bin/bash\n", "default_shell = /bin/zsh\n", "", "/bin/zsh"),
        ("override_shell = /bin/bash\n", "", "/bin/tcsh", "/bin/bash"),
        ("override_shell = /bin/bash\n", "", "", "/bin/bash"),
        ("override_shell = /bin/bash\n", "override_shell = /bin/zsh\n", "/bin/sh", "/bin/zsh"),
        # allowed_shells: in /etc/shells it stays; allowed, shell_fallback; else nologin.
        ("allowed_shells = /bin/tcsh\n", "", "/bin/bash", "/bin/bash"),
        ("allowed_shells = /bin/tcsh\n", "", "/bin/tcsh", "/bin/sh"),
        ("allowed_shells = /bin/tcsh\nshell_fallback = /bin/bash\n", "", "/bin/tcsh",
         "/bin/bash"),
        ("allowed_shells = /bin/tcsh\n", "", "/bin/ksh", NOLOGIN_SHELL),
        # /sbin/nologin, when /etc/shells lacks it (Debian's): not allowed, so nologin;
        # with `*` every shell /etc/shells lacks is shell_fallback, nologin included.
        ("allowed_shells = /bin/tcsh\n", "", "/sbin/nologin", "/sbin/nologin"),
        ("allowed_shells = *\n", "", "/sbin/nologin", "/bin/sh"),
        ("allowed_shells = *\n", "", "/bin/ksh", "/bin/sh"),
        ("allowed_shells = *\n", "", "/bin/bash", "/bin/bash"),
        # vetoed_shells: shell_fallback even when in /etc/shells; alone, a shell
        # /etc/shells lacks is nologin.
        ("vetoed_shells = /bin/bash\n", "", "/bin/bash", "/bin/sh"),
        ("vetoed_shells = /bin/bash\n", "", "/bin/ksh", NOLOGIN_SHELL),
        ("vetoed_shells = /bin/bash\n", "", "", ""),
        ("vetoed_shells = /bin/bash\ndefault_shell = /bin/bash\n", "", "", "/bin/bash"),
    ],
)  # fmt: skip
def test_shell_as_sssd_answers_it(nss: str, domain: str, shell: str, want: str) -> None:
    p = _policy(nss=nss, domain=domain, shells=("/bin/sh", "/bin/bash"))
    user = User("ann", 10003, 20000, home="/home/ann", shell=shell)
    assert p.output_user(p.domains["ldap"], user).shell == want


def test_etc_shells_is_read_as_getusershell_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "shells"
    path.write_text("# /bin/no\n/bin/sh\n\n  /bin/bash# trailing\nx/bin/zsh y\n")
    assert read_etc_shells(str(path)) == {"/bin/sh", "/bin/bash", "/bin/zsh"}
    assert read_etc_shells(str(tmp_path / "missing")) == {"/bin/sh", "/bin/csh"}


def test_the_domain_options_win_over_nss() -> None:
    cfg = parse_config(_config(nss="default_shell = /a\n", domain="default_shell = /b\n"))
    assert HomeShell.of(cfg.domains[0], cfg.nss).default_shell == "/b"
