"""Background refresh of expiring entries (refresh_expired_interval, reference §6.4)."""

from __future__ import annotations

import time

from cached.cache import State, open_domain_cache
from cached.config import parse_config
from cached.ldap.service import BackendService
from testing.backend import config_text, make_backend, make_domain
from testing.marks import requires_nss


def test_schedule_follows_sssd(tmp_path):
    def schedule(**opts):
        db = tmp_path / f"db{len(list(tmp_path.iterdir()))}"
        cfg = parse_config(
            config_text(["ldap://127.0.0.1:1"], "dc=x", daemon={"db_dir": db}, **opts)
        )
        service = BackendService(cfg, cfg.domains[0])
        try:
            return service.refresh_schedule()
        finally:
            service.cache.close()

    assert schedule(refresh_expired_interval=600) == (600.0, 60.0)
    # Interval + offset beyond the entry lifetime: 70 % of it, offset 10 % of that.
    assert schedule(refresh_expired_interval=5000, entry_cache_timeout=1000) == (700.0, 70.0)


def test_expiring_lists_due_entries(tmp_path, slapd_small):
    s, exp = slapd_small.slapd, slapd_small.expected
    p, cache, _ = make_backend(tmp_path, make_domain([s.uri], s.base_dn))
    try:
        p.initgroups(exp.big_user)
        p.group_by_name("large01")
        assert cache.expiring(time.time()) == ([], [], [])
        users, groups, initgr = cache.expiring(time.time() + 10_000)
        assert users == [exp.big_user] and initgr == [exp.big_user]
        assert "large01" in groups
        cache.invalidate_group("large01")
        assert cache.expiring(time.time()) == ([], ["large01"], [])
    finally:
        p.client.close()


@requires_nss
def test_entries_are_refreshed_without_lookups(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d = daemon_factory(slapd_small, refresh_expired_interval=1)
    assert d.run_nss(["id", exp.big_user]).returncode == 0
    assert d.cli("cache", "-E").returncode == 0
    domain = parse_config(d.config_path.read_text()).domains[0]
    deadline = time.monotonic() + 60
    while True:
        cache = open_domain_cache(str(d.db_dir), domain)
        try:
            states = {cache.initgroups(exp.big_user).state, cache.user_by_name(exp.big_user).state}
        finally:
            cache.close()
        # The refresh logs its line after its last request, which can come after
        # the entries turn valid: wait for both (the test failed once under load).
        if states == {State.VALID} and "background refresh: 1 initgroups, 1 users" in (
            d.log_text()
        ):
            break
        assert time.monotonic() < deadline, (states, d.log_tail())
        time.sleep(0.2)
