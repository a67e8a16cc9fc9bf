"""Qualified names as SSSD writes and parses them: full_name_format (sss_tc_fqname,
checked at start as sss_fqnames_init checks it), use_fully_qualified_names on output
names and member lists, and the lookup of ``name@DOMAIN``."""

from __future__ import annotations

import pytest

from cached.cache import GroupView
from cached.cache.records import join_members
from cached.config import ConfigError, parse_config
from cached.model import Kind, User
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


def test_default_domain_suffix_qualifies_every_domain_and_takes_unqualified_names() -> None:
    p = _policy(sssd="default_domain_suffix = ldap\n")
    d = p.domains["ldap"]
    assert p.output_name(d, "alice") == "alice@LDAP"
    assert p.lookup_name("alice") == ("alice", d)
    assert p.lookup_name("alice@LDAP") == ("alice", d)


def test_default_domain_suffix_must_name_a_served_domain() -> None:
    text = MINIMAL.replace("domains = LDAP\n", "domains = LDAP\ndefault_domain_suffix = ad.x\n")
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert str(e.value) == (
        "<string>: [sssd] default_domain_suffix = 'ad.x' is not supported: it names no "
        "domain of [sssd] domains (cached serves no trusted subdomains); name one of LDAP"
    )


def test_override_space_both_ways() -> None:
    p = _policy("use_fully_qualified_names = true\n", sssd="override_space = _\n")
    d = p.domains["ldap"]
    assert p.output_name(d, "domain users") == "domain_users@LDAP"
    # A name already holding the character keeps its spaces (sss_replace_space).
    assert p.output_name(d, "a_b c") == "a_b c@LDAP"
    assert p.lookup_name("domain_users@LDAP") == ("domain users", d)
    assert p.lookup_name("a_b c@LDAP") == ("a_b c", d)
    g = GroupView(name="g", gid=1, dn="cn=g", members=join_members(["domain users"]),
                  member_count=1)  # fmt: skip
    assert p.members(d, g) == (1, join_members(["domain_users@LDAP"]))
    # %u stays the name as SSSD expands it: spaces kept.
    p = _policy("override_homedir = /home/%u\n", sssd="override_space = _\n")
    out = p.output_user(p.domains["ldap"], User("a b", 10001, 20000))
    assert (out.name, out.home) == ("a_b", "/home/a b")


def test_override_space_is_one_character() -> None:
    text = MINIMAL.replace("domains = LDAP\n", "domains = LDAP\noverride_space = __\n")
    with pytest.raises(ConfigError, match="override_space = '__' is invalid: expected a single"):
        parse_config(text)


def test_override_gid_is_the_passwd_gid_only() -> None:
    p = _policy("override_gid = 555\n")
    d = p.domains["ldap"]
    out = p.output_user(d, User("ann", 10003, 20000, home="/home/ann"))
    assert (out.name, out.gid, out.home) == ("ann", 555, "/home/ann")


@pytest.mark.parametrize(("in_groups", "want"), [("true", ["bob"]), ("false", ["ann", "bob"])])
def test_filter_users_in_groups(in_groups: str, want: list[str]) -> None:
    lines = f"filter_users = root, ann\nfilter_users_in_groups = {in_groups}\n"
    text = MINIMAL.replace("filter_users = root\n", lines)
    p = ServePolicy(parse_config(text), frozenset())
    d = p.domains["ldap"]
    g = GroupView(name="g", gid=1, dn="cn=g", members=join_members(["ann", "bob"]),
                  member_count=2)  # fmt: skip
    assert p.members(d, g) == (len(want), join_members(want))
    assert p.member_names(d, g) == want
    # The user stays filtered itself.
    assert p.name_filtered(d, Kind.USER, "ann")
