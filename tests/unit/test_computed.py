"""The rule that tells a group whose members the server computes (cached/ldap/computed.py)."""

from __future__ import annotations

import pytest

from cached.ldap.computed import computed

PLAIN = frozenset({"cn", "gidnumber", "member", "modifytimestamp", "entrycsn", "objectclass"})
STATIC = {"objectclass": [b"groupOfNames", b"posixGroup"], "cn": [b"g"], "gidnumber": [b"10"],
          "member": [b"uid=a,ou=people,dc=x"], "modifytimestamp": [b"20261207000000Z"]}  # fmt: skip
URL = b"ldap:///ou=people,dc=x??one?(departmentNumber=42)"


@pytest.mark.parametrize(
    "extra",
    [
        {"objectclass": [b"groupOfURLs", b"posixGroup"]},  # the class, its URL hidden by an ACL
        {"objectclass": [b"GROUPOFURLS"]},
        {"memberurl": [URL]},
        {"labeleduri": [b"http://wiki/g", URL]},
        {"mygroupurl": [b"LDAPS://server/ou=people??sub?(uid=*)"]},  # a subtype of any name
        {"memberurl": [b"ldapi:///ou=people??sub?(uid=*)"]},
    ],
)
def test_a_dynamic_group_is_computed(extra):
    assert computed(STATIC | extra, PLAIN)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"labeleduri": [b"http://wiki/g"]},  # a web page, nothing the server expands
        {"member": [b"ldap://x"]},  # a value of an attribute asked for by its own name
        {"cn": [b"ldap://not-a-url-attribute"]},
    ],
)
def test_a_static_group_is_not(extra):
    assert not computed(STATIC | extra, PLAIN)
