"""The table of SSSD's options in docs/compatibility.md: every option SSSD 2.8.2
documents for the id path is implemented, refused, or accepted with a reason why it
changes no answer; none is left to the loader's "unknown option" warning."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cached.config import ACCEPTED_UNUSED, UNSUPPORTED, parse_config
from cached.config.noeffect import NO_EFFECT
from cached.config.sssd_documented import DOCUMENTED
from cached.docgen import IMPLEMENTED, UNCLASSIFIED, verdict
from testing import sssd_options
from tests.unit.test_config import MINIMAL


def test_every_documented_option_has_a_verdict() -> None:
    missing = [f"{part}: {name}" for part, names in DOCUMENTED.items()
               for name in names if verdict(name)[0] == UNCLASSIFIED]  # fmt: skip
    assert not missing, (
        "SSSD documents these options and cached neither declares them "
        "(cached/config/options.py), refuses them (sssd.py UNSUPPORTED) nor says why "
        f"they change nothing (cached/config/noeffect.py): {missing}"
    )


def test_the_table_covers_the_main_families() -> None:
    """A list read wrongly from the man pages would make the test above vacuous."""
    names = {n for ns in DOCUMENTED.values() for n in ns}
    assert len(names) > 240
    for name in ("ldap_uri", "ldap_user_name", "filter_users", "auto_private_groups",
                 "re_expression", "ad_gpo_access_control", "min_id", "pwfield"):  # fmt: skip
        assert name in names, name


def test_no_option_is_both_refused_and_without_effect() -> None:
    assert not set(NO_EFFECT) & set(UNSUPPORTED)


def test_accepted_options_load_quietly_and_config_check_says_why(tmp_path: Path) -> None:
    """Every option of NO_EFFECT or ACCEPTED_UNUSED that SSSD reads in a domain loads
    with no warning; one refused is refused at a value that changes something."""
    for name in sorted(set(NO_EFFECT) | ACCEPTED_UNUSED):
        if verdict(name)[0] == IMPLEMENTED:
            continue
        cfg = parse_config(MINIMAL + f"{name} = 1\n")
        assert cfg.warnings == [], name
    with pytest.raises(Exception, match="ldap_deref = 'always' is not supported"):
        parse_config(MINIMAL + "ldap_deref = always\n")
    assert parse_config(MINIMAL + "ldap_deref = never\n").warnings == []


@pytest.mark.skipif(
    subprocess.run(["git", "-C", sssd_options.MIRROR, "rev-parse", sssd_options.TAG],
                   capture_output=True, check=False).returncode != 0,
    reason="no clone of SSSD with tag 2.8.2 at " + sssd_options.MIRROR,
)  # fmt: skip
def test_the_documented_list_is_what_sssds_man_pages_say() -> None:
    table = sssd_options.collect(sssd_options.MIRROR)
    assert sssd_options.render(table) == sssd_options.OUT.read_text()
