"""The search base an unset ``*_search_base`` falls back to (``LdapClient.naming_context``,
for the identity searches and the sudo rules alike): the server's root DSE, as SSSD's
``sdap_set_search_base``; a server that publishes none is an error naming the option.
Pure: the connection is replaced, the root DSE given."""

from __future__ import annotations

import pytest

from cached.config import parse_config
from cached.ldap.client import LdapClient
from cached.ldap.exchange import LdapError, ServerInfo

CONF = """\
[cached]
domains = D
[domain/D]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:1
ldap_search_base = dc=example,dc=com
"""


def client(info: ServerInfo) -> LdapClient:
    c = LdapClient(parse_config(CONF).domains[0])
    def connect() -> None:
        c.info = info

    c.connect = connect  # type: ignore[assignment,method-assign]
    return c


def test_the_default_naming_context_then_the_first_published() -> None:
    both = ServerInfo("ldap://x", naming_contexts=["dc=a", "dc=b"], default_naming_context="dc=b")
    assert client(both).naming_context("ldap_search_base") == "dc=b"
    first = ServerInfo("ldap://x", naming_contexts=["dc=a", "dc=b"])
    assert client(first).naming_context("ldap_sudo_search_base") == "dc=a"


def test_none_published_names_the_option() -> None:
    with pytest.raises(LdapError, match="domain D: ldap_sudo_search_base is not set"):
        client(ServerInfo("ldap://x")).naming_context("ldap_sudo_search_base")
