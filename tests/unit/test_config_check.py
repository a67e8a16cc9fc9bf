"""``cached config-check``: every option of a file and its snippets with where it is
and what loading does with it, the exit status saying whether cached would start, and
never a bind password in the output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cached.config import load_config
from cached.config.check import check_config

REALMD = """\
[sssd]
config_file_version = 2
services = nss, pam
domains = example.com

[nss]
allowed_shells = /bin/tcsh

[pam]
offline_credentials_expiration = 2

[domain/example.com]
id_provider = ldap
ldap_uri = ldap://ldap.example.com
ldap_default_bind_dn = cn=reader
ldap_default_authtok = hunter2
fallback_homedir = /home/%u@%d
default_shell = /bin/bash
shell_fallback = /bin/sh
frobnicate = 1

[domain/other]
id_provider = ldap
"""


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cached", "config-check", "-c", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_file_that_loads_is_listed_line_by_line_and_exits_0(tmp_path: Path) -> None:
    path = _write(tmp_path / "sssd.conf", REALMD)
    r = _run(path)
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert lines[:4] == [
        f"{path}:2: ignored: [sssd] config_file_version = '2': no effect: a marker of the "
        "file's format; cached reads version 2",
        f"{path}:3: loads: [sssd] services = 'nss, pam'",
        f"{path}:4: loads: [sssd] domains = 'example.com'",
        f"{path}:7: loads: [nss] allowed_shells = '/bin/tcsh'",
    ]
    assert f"{path}:10: loads: [pam] offline_credentials_expiration = '2'" in lines
    assert f"{path}:16: loads: [domain/example.com] ldap_default_authtok = '********'" in lines
    assert f"{path}:17: loads: [domain/example.com] fallback_homedir = '/home/%u@%d'" in lines
    assert (
        f"{path}:19: ignored: [domain/example.com] shell_fallback is an option of [nss], "
        "where SSSD reads it; ignored here"
    ) in lines
    assert (
        f"{path}:20: ignored: [domain/example.com] unknown option 'frobnicate' is ignored"
    ) in lines
    assert (
        f"{path}:22: ignored: [domain/other] is not listed in [sssd] domains; ignored"
    ) in lines
    assert lines[-1] == "10 load, 4 ignored, 0 refused: cached would start with this configuration"
    assert "hunter2" not in r.stdout
    # Every warning loading gives is said once, on its line: none is left over.
    assert not [line for line in lines if line.startswith("warning:")]
    assert len(load_config(str(path)).warnings) == 3


def test_refusals_are_all_listed_with_file_and_line_and_exit_1(tmp_path: Path) -> None:
    path = _write(tmp_path / "sssd.conf", REALMD.replace(
        "default_shell = /bin/bash\n",
        "default_shell = /bin/bash\nauto_private_groups = yes\n"
        "override_homedir = /home/%P\n"))  # fmt: skip
    snippet = tmp_path / "conf.d" / "10-access.conf"
    _write(snippet, "[domain/example.com]\naccess_provider = ipa\n")
    r = _run(path)
    assert r.returncode == 1
    refused = [line for line in r.stdout.splitlines() if ": refused: " in line]
    assert [line.split(" = ")[0] for line in refused] == [
        f"{path}:19: refused: [domain/example.com] auto_private_groups",
        f"{path}:20: refused: [domain/example.com] override_homedir",
        f"{snippet}:2: refused: [domain/example.com] access_provider",
    ]
    assert "is not supported: cached does not read users' principal names" in refused[1]
    assert r.stdout.splitlines()[-1].endswith(
        "3 refused: cached would not start with this configuration"
    )


def test_a_refused_combination_and_a_writable_file_are_listed(tmp_path: Path) -> None:
    text = REALMD.replace("ldap_default_bind_dn = cn=reader\n", "")
    path = _write(tmp_path / "sssd.conf", text)
    refused = [str(f) for f in check_config(str(path)).findings if f.kind == "refused"]
    assert refused == [
        f"{path}: refused: [domain/example.com] ldap_default_authtok is set but "
        "ldap_default_bind_dn is not",
    ]
    text = REALMD.replace("ldap_default_authtok = hunter2\n", "")
    path = _write(tmp_path / "sssd.conf", text, mode=0o622)
    refused = [str(f) for f in check_config(str(path)).findings if f.kind == "refused"]
    assert refused == [
        f"{path}: refused: mode 0622 lets group or others change the configuration; "
        f"run: chmod go-w {path}",
    ]


def test_a_file_that_cannot_be_parsed_exits_3(tmp_path: Path) -> None:
    path = _write(tmp_path / "sssd.conf", "[sssd]\nnot an option\n")
    r = _run(path)
    assert r.returncode == 3
    assert r.stderr == (
        f"cached: {path}: line 2: cannot parse 'not an option': expected `option = value`, "
        "a `[section]` header or a `#` comment\n"
    )


def test_help_says_what_it_does() -> None:
    r = subprocess.run([sys.executable, "-m", "cached", "config-check", "--help"],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "as sssctl config-" in text and "FILE:LINE: loads, ignored or refused" in text
    assert "Exit status 0 when cached would start with it, 1 when something is refused" in text
