"""Qualified names as SSSD writes and parses them: full_name_format (sss_tc_fqname,
checked at start as sss_fqnames_init checks it), use_fully_qualified_names on output
names and member lists, and the lookup of ``name@DOMAIN``."""

from __future__ import annotations

import pytest

from cached.cache import GroupView
from cached.cache.records import join_members
from cached.config import ConfigError, parse_config
from cached.model import User
from cached.responder.policy import ServePolicy
from tests.unit.test_config import MINIMAL


def _policy(domain: str = "", sssd: str = "") -> ServePolicy:
    text = MINIMAL.replace("domains = LDAP\n", f"domains = LDAP\n{sssd}") + domain
    return ServePolicy(parse_config(text), frozenset())


@pytest.mark.parametrize(
    ("domain", "sssd", "want"),
    [
        ("", "", "Alice"),
        ("use_fully_qualified_names = true\n", "", "Alice@LDAP"),
        ("use_fully_qualified_names = true\ncase_sensitive = false\n", "", "alice@LDAP"),
        ("use_fully_qualified_names = true\n", "full_name_format = %2$s\\%1$s\n", "LDAP\\Alice"),
        ("use_fully_qualified_names = true\nfull_name_format = %1$s@%3$s %%\n",
         "full_name_format = %2$s\\%1$s\n", "Alice@LDAP %"),
        ("full_name_format = %2$s\\%1$s\n", "", "Alice"),  # not qualified: unused
        ("use_fully_qualified_names = true\nfull_name_format = {x}%1$s\n", "", "{x}Alice"),
    ],
)  # fmt: skip
def test_output_names(domain: str, sssd: str, want: str) -> None:
    p = _policy(domain, sssd)
    d = p.domains["ldap"]
    assert p.output_name(d, "Alice") == want
    assert p.output_user(d, User("Alice", 10001, 20000)).name == want


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("%s@%2$s", "'%s@%': only %1$s (name), %2$s (domain), %3$s and %% may appear"),
        ("%1$d", "'%1$d': only %1$s (name), %2$s (domain), %3$s and %% may appear"),
        ("%2$s", "it must contain %1$s, the name"),
    ],
)
def test_a_format_sssd_refuses_is_refused(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + f"full_name_format = {value}\n")
    assert str(e.value) == (
        f"<string>: [domain/LDAP] full_name_format = {value!r} is invalid: {why}"
    )


def test_members_are_qualified_and_filtered_users_left_out() -> None:
    p = _policy("use_fully_qualified_names = true\ncase_sensitive = false\n")
    d = p.domains["ldap"]
    g = GroupView(name="Staff", gid=20000, dn="cn=staff",
                  members=join_members(["Ann", "root", "bob"]), member_count=3)  # fmt: skip
    assert p.members(d, g) == (2, join_members(["ann@LDAP", "bob@LDAP"]))


def test_templates_take_the_unqualified_name() -> None:
    p = _policy("use_fully_qualified_names = true\noverride_homedir = /home/%u/%f\n")
    out = p.output_user(p.domains["ldap"], User("ann", 10003, 20000))
    assert (out.name, out.home) == ("ann@LDAP", "/home/ann/ann@LDAP")


def test_lookup_names() -> None:
    p = _policy()
    d = p.domains["ldap"]
    assert p.lookup_name("alice@ldap") == ("alice", d)
    assert p.lookup_name("alice@LDAP") == ("alice", d)
    assert p.lookup_name("alice") == ("alice", None)
    assert p.lookup_name("alice@elsewhere") == ("alice@elsewhere", None)
    assert p.lookup_name("@LDAP") == ("@LDAP", None)
    assert p.lookup_name("a@b@LDAP") == ("a@b", d)
