"""contrib/cached.conf and contrib/MIGRATING-FROM-SSSD.md against cached/config.py and cli.py.

The sample names every option in its section, shows each commented-out default as
config.py has it, and loads without warnings. The migration notes name every option
and section that config.py accepts and ignores, their configuration examples load, and
they call a tool "planned" only while cli.py does not have it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Final

import pytest

from cached.cli import build_parser
from cached.config import (
    ACCEPTED_UNUSED,
    DAEMON_OPTIONS,
    DOMAIN_OPTIONS,
    IGNORED_SECTIONS,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    UNSUPPORTED,
    ConfigError,
    Option,
    load_config,
    parse_config,
)

REPO: Final = Path(__file__).resolve().parents[2]
SAMPLE: Final = REPO / "contrib" / "cached.conf"
MIGRATING: Final = REPO / "contrib" / "MIGRATING-FROM-SSSD.md"
TABLES: Final[dict[str, dict[str, Option]]] = {
    "cached": DAEMON_OPTIONS,
    "nss": NSS_OPTIONS,
    "pam": PAM_OPTIONS,
    "ssh": SSH_OPTIONS,
    "sudo": SUDO_OPTIONS,
    "domain/LDAP": DOMAIN_OPTIONS,
}
# `option = value` or `#option = value` at the start of a line. Examples in the prose
# are written `#   e.g. option = value`, so they do not match.
ASSIGNMENT: Final = re.compile(r"^(#?)([a-z][a-z0-9_]*)[ \t]*=[ \t]*(.*)$")


def sample_assignments() -> dict[str, list[tuple[bool, str, str]]]:
    """Per section: (commented out, option, value) for every assignment line."""
    out: dict[str, list[tuple[bool, str, str]]] = {}
    section = ""
    for line in SAMPLE.read_text().splitlines():
        header = re.fullmatch(r"\[([^\]]+)\]", line.strip())
        if header:
            section = header[1]
            out.setdefault(section, [])
            continue
        m = ASSIGNMENT.match(line)
        if m:
            assert section, f"{SAMPLE}: {line!r} before any section"
            out[section].append((m[1] == "#", m[2], m[3].strip()))
    return out


def test_sample_loads_without_warnings() -> None:
    config = parse_config(SAMPLE.read_text(), str(SAMPLE), SAMPLE.stat())
    assert config.warnings == []
    [domain] = config.domains
    # The example the file promises: rfc2307bis over StartTLS, checked against a CA file.
    assert domain.name == "LDAP" and domain.ldap_schema == "rfc2307bis"
    assert domain.ldap_id_use_start_tls and domain.ldap_tls_reqcert == "demand"
    assert domain.ldap_tls_cacert and all(u.startswith("ldap://") for u in domain.ldap_uri)


def test_sample_names_every_option_with_its_default() -> None:
    found = sample_assignments()
    assert set(found) == set(TABLES), "sections: [cached], [nss], [pam], [sudo], [domain/LDAP]"
    for section, table in TABLES.items():
        names = {name for _, name, _ in found[section]}
        missing = sorted(set(table) - names)
        assert not missing, f"[{section}] of {SAMPLE.name} does not mention {missing}"
        unknown = sorted(names - set(table))
        assert not unknown, f"[{section}] of {SAMPLE.name} names unknown options {unknown}"
        for commented, name, raw in found[section]:
            if not commented:
                continue  # set for the example domain
            opt = table[name]
            # An empty value stands for "unset" (None, "" or an empty list).
            value: Any = opt.parse(raw) if raw else None
            default = opt.default if opt.default not in ("", []) else None
            assert value == default, (
                f"[{section}] #{name} = {raw!r} in {SAMPLE.name}, but config.py's default is "
                f"{opt.default!r}"
            )


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_sample_password_needs_mode_0600(tmp_path: Path, mode: int) -> None:
    """The sample says a file holding ldap_default_authtok must be 0600. It is enforced."""
    path = tmp_path / "cached.conf"
    # [domain/LDAP] is the last section: append the two lines the comments show.
    path.write_text(
        SAMPLE.read_text()
        + "ldap_default_bind_dn = cn=nss-reader,ou=services,dc=example,dc=com\n"
        + "ldap_default_authtok = secret\n"
    )
    path.chmod(mode)
    if mode == 0o600:
        assert load_config(str(path)).domains[0].ldap_default_authtok == "secret"
    else:
        with pytest.raises(ConfigError, match="chmod 600"):
            load_config(str(path))


def test_migration_notes_name_what_config_accepts_and_ignores() -> None:
    text = MIGRATING.read_text()
    missing = sorted(o for o in ACCEPTED_UNUSED | set(UNSUPPORTED) if f"`{o}`" not in text)
    assert not missing, f"{MIGRATING.name} does not say what happens to {missing}"
    missing = sorted(s for s in IGNORED_SECTIONS if f"`[{s}]`" not in text)
    assert not missing, f"{MIGRATING.name} does not list the ignored sections {missing}"
    missing = sorted(o for o in NSS_OPTIONS if f"`{o}`" not in text)
    assert not missing, f"{MIGRATING.name} does not list the [nss] options {missing}"


def test_migration_examples_load() -> None:
    blocks = re.findall(r"```ini\n(.*?)```", MIGRATING.read_text(), flags=re.DOTALL)
    configs = [b for b in blocks if re.search(r"^\[(cached|sssd)\]$", b, flags=re.MULTILINE)]
    assert configs, "no configuration example"
    for text in configs:
        assert parse_config(text, "example").warnings == []


def test_migration_notes_planned_tools_match_the_cli() -> None:
    """A tool the notes call planned must not exist yet, and one that exists is not planned."""
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    text = MIGRATING.read_text()
    for tool in ("cache", "status", "perf"):
        planned = re.search(rf"`cached {tool}`: planned", text) is not None
        exists = tool in sub.choices
        assert planned != exists, (
            f"`cached {tool}` {'exists' if exists else 'does not exist'} in cli.py but "
            f"{MIGRATING.name} {'calls it planned' if planned else 'does not call it planned'}"
        )
    for tool in ("id", "getent", "serve"):
        assert tool in sub.choices and f"cached {tool}" in text
