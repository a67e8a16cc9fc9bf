"""Sudo rules in the split cache (cached/cache/sudo.py) and the backend's pure parts
(cached/ldap/sudo.py): what a refresh writes, invalidation, the host filter, entries
to rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from cached.cache import DomainCache
from cached.cache import sudo as store
from cached.cache.writer import BackendCache
from cached.config import ConfigError, parse_config
from cached.counters import ENTRY_RECORDS, Counters
from cached.ldap.exchange import Entry
from cached.ldap.sudo import SudoMap, host_filter, rule_of
from cached.model import SudoRule

CONFIG = """[cached]
domains = LDAP
[domain/LDAP]
id_provider = ldap
ldap_uri = ldap://127.0.0.1
ldap_search_base = dc=t
"""


def rule(name: str, command: str = "/bin/true") -> SudoRule:
    return SudoRule(
        name,
        f"cn={name},ou=sudoers,dc=t",
        (("cn", (name,)), ("sudoUser", ("alice",)), ("sudoCommand", (command,))),
    )


def stamps(*names: str, mod: str = "20261207000000Z") -> dict[str, store.Stamp]:
    return {n: store.Stamp(mod, f"csn-{n}") for n in names}


def test_a_refresh_that_changes_nothing_writes_only_timestamps(tmp_path: Path) -> None:
    counters = Counters()
    c = BackendCache(str(tmp_path), "LDAP", boot_id="b", counters=counters)
    try:
        rules = [rule("a"), rule("b")]
        changed = c.store_sudo(rules, stamps("a", "b"), [], full=True, since=0, lifetime=60,
                               now=1000.0)  # fmt: skip
        assert changed == ["a", "b"]
        assert counters.get(ENTRY_RECORDS).amount == 2
        changed = c.store_sudo(rules, stamps("a", "b"), [], full=True, since=0, lifetime=60,
                               now=2000.0)  # fmt: skip
        assert changed == []
        assert counters.get(ENTRY_RECORDS).amount == 2  # nothing more in the entry store
        assert c.sudo_times()["a"].data_expire == 2060.0
        assert c.sudo_state().last_full == 2000.0
        # One rule changed, one gone: those two alone.
        changed = c.store_sudo([rule("a", "/bin/id")], stamps("a"), ["b"], full=True,
                               since=0, lifetime=60, now=3000.0)  # fmt: skip
        assert sorted(changed) == ["a", "b"]
        assert counters.get(ENTRY_RECORDS).amount == 4
        assert [r.get("sudoCommand") for r in c.sudo_rules()] == [("/bin/id",)]
        assert c.sudo_count() == 1
        assert set(c.sudo_times()) == {"a"}
    finally:
        c.close()


def test_invalidation_expires_and_a_refresh_running_across_it_stores_expired(
    tmp_path: Path,
) -> None:
    c = BackendCache(str(tmp_path), "LDAP", boot_id="b", counters=Counters())
    try:
        c.store_sudo([rule("a"), rule("b")], stamps("a", "b"), [], full=True, since=0,
                     lifetime=60, now=1000.0)  # fmt: skip
        reader = DomainCache(str(tmp_path), "LDAP")
        try:
            since = reader.sudo_state().invalidations
            assert reader.invalidate_sudo(["a", "missing"]) == 1
            t = reader.sudo_times()
            assert t["a"].data_expire <= 1.0 and t["b"].data_expire == 1060.0
            assert t["a"].modstamp == "20261207000000Z"  # stamps kept
        finally:
            reader.close()
        # A refresh that began before the invalidation: its records are stored expired
        # and it does not count as the last smart refresh.
        c.store_sudo([rule("b")], stamps("b"), [], full=False, since=since, lifetime=60,
                     now=2000.0)  # fmt: skip
        assert c.sudo_times()["b"].data_expire <= 1.0
        assert c.sudo_state().last_smart == 0.0
        assert c.invalidate_sudo() == 2
    finally:
        c.close()


def test_a_reader_of_a_store_without_the_sudo_table_reads_no_rules(tmp_path: Path) -> None:
    c = BackendCache(str(tmp_path), "LDAP", boot_id="b", counters=Counters())
    c.close()
    reader = DomainCache(str(tmp_path), "LDAP")
    try:
        assert reader.sudo_rules() == [] and reader.sudo_times() == {}
        assert reader.sudo_count() == 0
    finally:
        reader.close()


def sudo_map(**opts: str) -> SudoMap:
    text = CONFIG + "".join(f"{k} = {v}\n" for k, v in opts.items())
    return SudoMap.from_config(parse_config(text).domain("LDAP"))


def test_the_host_filter_is_sssd_s() -> None:
    m = sudo_map()
    f = host_filter(m, ["vm", "vm.example.com"], ["192.0.2.2", "192.0.2.0/24"],
                    netgroups=True, regexp=False)  # fmt: skip
    assert f == (
        "(|(&(!(sudoHost=*))(cn=defaults))(sudoHost=ALL)(sudoHost=vm)"
        "(sudoHost=vm.example.com)(sudoHost=192.0.2.2)(sudoHost=192.0.2.0/24)(sudoHost=+*))"
    )
    f = host_filter(m, ["a*b"], [], netgroups=False, regexp=True)
    assert "(sudoHost=a\\2ab)" in f and "(sudoHost=*\\2A*)" in f and "+*" not in f


def entry(dn: str, **attrs: list[str]) -> Entry:
    return Entry(dn, {k.lower(): [v.encode() for v in vals] for k, vals in attrs.items()})


def test_entries_become_rules_as_sssd_stores_them() -> None:
    m = sudo_map(ldap_sudorule_command="myCommand")
    e = entry("cn=r,dc=t", cn=["r"], sudoUser=["alice", "%admins"], myCommand=["/bin/a"],
              sudoOption=["!authenticate", "env_reset"], objectClass=["sudoRole"],
              modifyTimestamp=["20261207000000Z"])  # fmt: skip
    r = rule_of(m, e)
    assert r is not None
    assert r.attrs == (
        ("cn", ("r",)),
        ("sudoUser", ("alice", "%admins")),
        ("sudoCommand", ("/bin/a",)),
        ("sudoOption", ("!authenticate", "env_reset")),  # in the server's order
    )
    # SSSD skips a rule with no name or several, and one without sudoUser unless it is
    # the defaults rule; a value holding a NUL is left out.
    assert rule_of(m, entry("cn=x,dc=t", cn=["x", "y"], sudoUser=["a"])) is None
    assert rule_of(m, entry("cn=x,dc=t", cn=["x"], sudoCommand=["ALL"])) is None
    d = rule_of(m, entry("cn=Defaults,dc=t", cn=["Defaults"], sudoOption=["!lecture"]))
    assert d is not None and d.name == "Defaults"
    nul = rule_of(m, entry("cn=n,dc=t", cn=["n"], sudoUser=["a\0b", "c"]))
    assert nul is not None and nul.get("sudoUser") == ("c",)
    assert store.decode_rule("r", store.encode_rule(r)) == r


def test_the_sudo_options_load_and_sssds_other_providers_are_refused() -> None:
    text = CONFIG.replace("[domain/LDAP]", "[sudo]\nsudo_timed = true\nsudo_threshold = 7\n"
                          "[domain/LDAP]") + "ldap_sudo_hostnames = a  a.example\n"  # fmt: skip
    config = parse_config(text)
    assert (config.sudo.sudo_timed, config.sudo.sudo_threshold) == (True, 7)
    assert not config.warnings  # [sudo] is a section cached reads
    d = config.domain("LDAP")
    assert d.ldap_sudo_hostnames == ["a", "a.example"]
    assert d.ldap_sudo_search_base == "dc=t"  # ldap_search_base's when unset
    assert d.ldap_sudo_random_offset is None  # a tenth of each interval
    with pytest.raises(ConfigError, match="sudo_provider"):
        parse_config(CONFIG + "sudo_provider = ipa\n")
