"""access_provider = simple (sssd-simple(5); SSSD 2.8.2 simple_access_check.c): the
decision over a user's name and all the groups the user is in."""

from __future__ import annotations

import pytest

from cached.access.simple import SimpleRules


def rules(
    allow_users: str = "", deny_users: str = "", allow_groups: str = "", deny_groups: str = "",
    case_sensitive: bool = True,
) -> SimpleRules:
    def split(s: str) -> list[str]:
        return [x.strip() for x in s.split(",") if x.strip()]

    return SimpleRules.parse(
        "LDAP",
        (split(allow_users), split(deny_users), split(allow_groups), split(deny_groups)),
        case_sensitive,
    )  # fmt: skip


def test_no_lists_allow_everyone() -> None:
    assert rules().allows("anyone", ["any"])


def test_deny_lists_alone_allow_everyone_else() -> None:
    r = rules(deny_users="bob", deny_groups="contractors")
    assert r.allows("alice", ["staff"])
    assert not r.allows("bob", [])
    assert not r.allows("carol", ["staff", "contractors"])


def test_an_allow_list_allows_only_those_it_names() -> None:
    r = rules(allow_users="alice")
    assert r.allows("alice")
    assert not r.allows("bob", ["admins"])
    r = rules(allow_groups="admins")
    assert r.allows("bob", ["users", "admins"])
    assert not r.allows("alice", ["users"])
    # Either list allows.
    r = rules(allow_users="alice", allow_groups="admins")
    assert r.allows("alice", []) and r.allows("bob", ["admins"])
    assert not r.allows("carol", ["users"])


@pytest.mark.parametrize(
    "r",
    [
        rules(allow_users="alice", deny_users="alice"),
        rules(allow_users="alice", deny_groups="contractors"),
        rules(allow_groups="admins", deny_groups="contractors"),
        rules(allow_groups="admins", deny_users="alice"),
    ],
)
def test_deny_beats_allow(r: SimpleRules) -> None:
    assert not r.allows("alice", ["admins", "contractors"])


def test_unknown_names_match_nobody() -> None:
    r = rules(allow_users="nosuchuser", allow_groups="nosuchgroup", deny_users="ghost")
    assert not r.allows("alice", ["admins"])
    assert rules(deny_groups="nosuchgroup").allows("alice", ["admins"])


def test_names_qualified_with_this_domain_are_short_names() -> None:
    r = rules(allow_users="alice@LDAP", allow_groups="admins@ldap")
    assert r.allows("alice") and r.allows("bob", ["admins"])
    assert not r.broken


@pytest.mark.parametrize("entry", ["alice@OTHER", "a@b@c", "@LDAP"])
def test_a_name_sssd_cannot_use_denies_everyone(entry: str) -> None:
    # SSSD: "Failed to refresh filter lists, denying all access".
    r = rules(allow_users="alice", deny_users=entry)
    assert r.broken
    assert not r.allows("alice") and not r.allows("bob")


def test_case_as_case_sensitive_says() -> None:
    assert not rules(allow_users="Alice").allows("alice")
    assert not rules(allow_groups="Admins").allows("bob", ["admins"])
    r = rules(allow_users="Alice", deny_groups="CONTRACTORS", case_sensitive=False)
    assert r.allows("ALICE", ["staff"])
    assert not r.allows("alice", ["contractors"])


def test_groups_are_needed_only_with_group_lists() -> None:
    assert not rules(allow_users="a", deny_users="b").needs_groups
    assert rules(deny_groups="g").needs_groups and rules(allow_groups="g").needs_groups
