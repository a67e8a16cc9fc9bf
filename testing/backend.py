"""Small helpers shared by tests: configurations for a test slapd, backends on them."""

from __future__ import annotations

from array import array
from pathlib import Path

from cached.cache.records import GroupRecord, join_members, split_members
from cached.cache.writer import BackendCache, open_backend_cache
from cached.config import Config, DomainConfig, parse_config
from cached.counters import Counters
from cached.ldap.ad import AdProvider
from cached.ldap.client import LdapClient
from cached.ldap.provider import LdapProvider
from cached.model import Group
from testing.daemon import config_text as daemon_config_text

# Every backend's LDAP client, closed after each test (tests/conftest.py), so that a
# test that fails half-way leaves no connection to a shared slapd behind.
OPEN_CLIENTS: list[LdapClient] = []


def close_clients() -> None:
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


def stored_gids(cache: BackendCache, user: str) -> set[int]:
    """The gids of ``user``'s stored initgroups answer (it must be stored)."""
    got = cache.initgroups(user).value
    assert got is not None, user
    return set(array("I", got.gids))


def stored_members(cache: BackendCache, group: str) -> set[str]:
    """The member names of the stored group (it must be stored)."""
    got = cache.group_by_name(group).value
    assert got is not None, group
    return set(split_members(got.members))


def config_text(uris: list[str], base: str, **opts) -> str:
    # The same file a test daemon gets (testing.daemon), under a placeholder directory.
    return daemon_config_text(uris, base, Path("/nonexistent/cached-test"), **opts)


def make_config(uris: list[str], base: str, **opts) -> Config:
    return parse_config(config_text(uris, base, **opts))


def make_domain(uris: list[str], base: str, **opts) -> DomainConfig:
    return make_config(uris, base, **opts).domains[0]


def make_backend(
    db_dir: Path, cfg: DomainConfig, counters: Counters | None = None
) -> tuple[LdapProvider, BackendCache, Counters]:
    counters = counters or Counters()
    cache = open_backend_cache(str(db_dir), cfg, counters=counters, boot_id="test-boot")
    client = LdapClient(cfg, counters=counters)
    OPEN_CLIENTS.append(client)
    provider = AdProvider if cfg.ldap_schema == "ad" else LdapProvider
    return provider(cfg, client, cache, counters=counters), cache, counters


def group_record(g: Group) -> GroupRecord:
    """The stored record of ``g`` built the plain way (join_members, a set sorted):
    the reference records.encode_group_of's bytes are checked against."""
    blob = join_members(g.members)
    count = blob.count(b"\0")
    return GroupRecord(g.name, g.gid, g.dn, blob, count, tuple(sorted(set(g.member_groups))))
