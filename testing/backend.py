"""Small helpers shared by tests: configurations for a test slapd, backends on them."""

from __future__ import annotations

from pathlib import Path

from cached.cache.writer import BackendCache, open_backend_cache
from cached.config import Config, DomainConfig, parse_config
from cached.counters import Counters
from cached.ldap.ad import AdProvider
from cached.ldap.client import LdapClient
from cached.ldap.provider import LdapProvider
from testing.daemon import config_text as daemon_config_text


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
    provider = AdProvider if cfg.ldap_schema == "ad" else LdapProvider
    return provider(cfg, client, cache, counters=counters), cache, counters
