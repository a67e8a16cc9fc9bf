"""Sudo rules from the directory: SSSD's LDAP sudo provider (``sdap_sudo*.c``).

Three refreshes, as SSSD's, run in the backend's worker thread:

* **full** (``ldap_sudo_full_refresh_interval``): every ``sudoRole`` under the sudo
  search bases (host filter applied) read whole; a rule the cache holds that the
  server no longer returns is dropped. Rules whose body is the same bytes as stored
  get new timestamps only (invariant 2).
* **smart** (``ldap_sudo_smart_refresh_interval``): the rules changed since the newest
  ``modifyTimestamp`` the cache holds. SSSD asks for rules with an entryUSN (else a
  modifyTimestamp) at least one above the highest it saw, whole, and keeps that value
  in memory only (a restart, or a reconnection, makes its next smart refresh read every
  rule). Here the filter is ``modifyTimestamp >=`` the newest stored stamp and only
  each rule's name and stamps are asked for; the rules whose ``modifyTimestamp`` or
  CSN/USN differ from the stored ones (or that are new) are then read whole by name.
  Within ``STAMP_MARGIN`` (clock skew) of the newest stamp's second the filter is
  ``>=``, so a rule written again in that very second is seen by its CSN (SSSD's
  ``> newest`` misses it); after it, ``>`` (no later write can carry a second the
  server's clock has passed). When nothing changed that is one search answering no
  rule (or, within the margin, the few of the newest second with their stamps alone),
  and nothing written but the time of the refresh. Like SSSD's, it cannot see a rule
  deleted: that rule goes at the next full refresh, or when a sudo call finds it
  expired and a rules refresh does not find it (docs/compatibility.md §9.13).
* **rules**: the named rules (a sudo call's expired ones, ``sudo_threshold``), read
  whole by name; those the server no longer returns are dropped.

The host filter is ``sdap_sudo_build_host_filter``'s: rules whose sudoHost is ALL, one
of the host's names or addresses/networks, a +netgroup (``ldap_sudo_include_netgroups``)
or a pattern (``ldap_sudo_include_regexp``), and the ``defaults`` rule without sudoHost.
Names and networks come from ``ldap_sudo_hostnames``/``ldap_sudo_ip``, else from the
host (``gethostname`` and its FQDN; every interface's address and network but loopback
and multicast), read again after the domain comes back online.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import logging
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cached.cache import sudo as store
from cached.cache.writer import BackendCache
from cached.config import DomainConfig, SearchBase, parse_search_bases
from cached.counters import (
    COUNTERS,
    ENTRY_RECORDS,
    LDAP_BYTES,
    LDAP_SEARCH,
    SUDO_REFRESH,
    TS_RECORDS,
)
from cached.ipc.ops import Outcome, SudoRefreshKind
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.exchange import Entry, LdapError
from cached.ldap.schema import BATCH, assertions, escape
from cached.ldap.stamps import STAMP_MARGIN, epoch
from cached.model import SudoRule

log = logging.getLogger(__name__)

MODSTAMP = "modifyTimestamp"


@dataclass(frozen=True, slots=True)
class SudoMap:
    """The ``ldap_sudorule_*`` names: the object class, the rule name attribute, and
    each LDAP attribute (lower-cased) with the sysdb name the rule keeps it under."""

    object_class: str
    name: str
    host: str
    usn: str
    # lower-cased LDAP name -> sysdb name (sysdb_sudo.h)
    attrs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, d: DomainConfig) -> SudoMap:
        pairs = {
            d.ldap_sudorule_name: "cn",
            d.ldap_sudorule_user: "sudoUser",
            d.ldap_sudorule_host: "sudoHost",
            d.ldap_sudorule_command: "sudoCommand",
            d.ldap_sudorule_option: "sudoOption",
            d.ldap_sudorule_runas: "sudoRunAs",
            d.ldap_sudorule_runasuser: "sudoRunAsUser",
            d.ldap_sudorule_runasgroup: "sudoRunAsGroup",
            d.ldap_sudorule_notbefore: "sudoNotBefore",
            d.ldap_sudorule_notafter: "sudoNotAfter",
            d.ldap_sudorule_order: "sudoOrder",
        }
        return cls(
            d.ldap_sudorule_object_class,
            d.ldap_sudorule_name,
            d.ldap_sudorule_host,
            # Unset: entryCSN, as the group stamps (ldap/schema.py): OpenLDAP keeps it on
            # every entry, unique per change; a server without it returns none.
            d.ldap_sudorule_entry_usn or "entryCSN",
            {k.lower(): v for k, v in pairs.items()},
        )

    @property
    def rule_attrs(self) -> list[str]:
        return [*self.ldap_names, MODSTAMP, self.usn]

    @property
    def ldap_names(self) -> list[str]:
        return list(self.attrs)

    def of_class(self) -> str:
        return f"(objectClass={escape(self.object_class)})"


# -- the host filter ---------------------------------------------------------------


def host_filter(m: SudoMap, hostnames: Iterable[str], ips: Iterable[str], *,
                netgroups: bool, regexp: bool) -> str:  # fmt: skip
    """``sdap_sudo_build_host_filter``."""
    h = m.host
    parts = [f"(&(!({h}=*))({m.name}=defaults))", f"({h}=ALL)"]
    parts += assertions(h, [*hostnames, *ips])
    if netgroups:
        parts.append(f"({h}=+*)")
    if regexp:
        # sudo's has_meta(): any of \ ? * [ ] (a * asserted as \2A).
        parts.append(f"(|({h}=*\\5C*)({h}=*?*)({h}=*\\2A*)({h}=*[*]*))")
    return "(|" + "".join(parts) + ")"


def detect_hostnames() -> list[str]:
    """The host's name and fully qualified name (``sdap_sudo_get_hostnames``): a name
    with a dot is the FQDN and its first label the short name; else the FQDN is
    resolved."""
    name = socket.gethostname() or "localhost"
    if "." in name:
        return [name, name.split(".", 1)[0]]
    try:
        fqdn = socket.getaddrinfo(name, None, flags=socket.AI_CANONNAME)[0][3]
    except (OSError, IndexError):
        fqdn = ""
    return [name, fqdn] if fqdn and fqdn != name else [name]


class _Sockaddr(ctypes.Structure):
    _fields_ = (("sa_family", ctypes.c_ushort), ("sa_data", ctypes.c_ubyte * 26))


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = (
    ("ifa_next", ctypes.POINTER(_Ifaddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.POINTER(_Sockaddr)),
    ("ifa_netmask", ctypes.POINTER(_Sockaddr)),
    ("ifa_ifu", ctypes.c_void_p),
    ("ifa_data", ctypes.c_void_p),
)


def _address(sa: _Sockaddr) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    raw = bytes(sa.sa_data)
    if sa.sa_family == socket.AF_INET:
        return ipaddress.IPv4Address(raw[2:6])  # sin_port, then sin_addr
    if sa.sa_family == socket.AF_INET6:
        return ipaddress.IPv6Address(raw[6:22])  # port, flowinfo, then sin6_addr
    return None


def detect_ips() -> list[str]:
    """Each interface's address and network (``sdap_sudo_get_ip_addresses``: getifaddrs,
    loopback, multicast and IPv4 broadcast addresses skipped)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return []
    out: list[str] = []
    try:
        node = head
        while node:
            ifa = node.contents
            node = ifa.ifa_next
            if not ifa.ifa_addr or not ifa.ifa_netmask:
                continue
            addr = _address(ifa.ifa_addr.contents)
            mask = _address(ifa.ifa_netmask.contents)
            if addr is None or mask is None or addr.is_loopback or addr.is_multicast:
                continue
            if isinstance(addr, ipaddress.IPv4Address) and addr == ipaddress.IPv4Address(
                "255.255.255.255"
            ):
                continue
            prefix = bin(int(mask)).count("1")
            net = ipaddress.ip_network(f"{addr}/{prefix}", strict=False)
            out += [str(addr), f"{net.network_address}/{prefix}"]
    finally:
        libc.freeifaddrs(head)
    return out


# -- entries to rules --------------------------------------------------------------


def rule_of(m: SudoMap, e: Entry) -> SudoRule | None:
    """A sudoRole entry as the cache keeps it, or None for one SSSD skips: none or
    several names (``sysdb_sudo_get_rule_name``), no sudoUser unless it is the
    ``defaults`` rule. A value holding a NUL is left out (SSSD fails the whole answer
    on one: "value is not a string")."""
    names = e.get(m.name)
    if len(names) != 1:
        return None
    name = names[0].decode("utf-8", "replace")
    attrs: list[tuple[str, tuple[str, ...]]] = []
    for key, values in e.attrs.items():
        sysdb = m.attrs.get(key)
        if sysdb is None or not values:
            continue
        texts = tuple(v.decode("utf-8", "replace") for v in values if b"\0" not in v)
        if texts:
            attrs.append((sysdb, texts))
    # "Allow "defaults" sudoRole without sudoUser attribute" (sysdb_sudo.c), any case.
    if name.lower() != "defaults" and not any(a == "sudoUser" for a, _ in attrs):
        return None
    return SudoRule(name, e.dn, tuple(attrs))


def stamp_of(m: SudoMap, e: Entry) -> store.Stamp:
    mod, usn = e.get(MODSTAMP), e.get(m.usn)
    return store.Stamp(
        mod[0].decode("ascii", "replace") if mod else "",
        usn[0].decode("ascii", "replace") if usn else "",
    )


# -- the refreshes -----------------------------------------------------------------


@dataclass(slots=True)
class SudoResult:
    outcome: Outcome
    changed: int = 0
    deleted: int = 0
    fetched: int = 0  # rules read whole
    message: str = ""


class SudoProvider:
    """The sudo refreshes of one domain (worker thread only: it uses the client)."""

    def __init__(self, domain: DomainConfig, client: LdapClient, cache: BackendCache) -> None:
        self.domain = domain
        self.client = client
        self.cache = cache
        self.map = SudoMap.from_config(domain)
        self._bases: tuple[SearchBase, ...] = parse_search_bases(domain.ldap_sudo_search_base)
        self._hostinfo: tuple[list[str], list[str]] | None = None
        self.last_error = ""
        # kind -> what its last run did and cost (SudoProvider.run)
        self.last: dict[str, dict[str, float | int | str]] = {}
        self._began = 0.0  # when the running refresh began (time.time())

    def host_changed(self) -> None:
        """Read the host's names and addresses again at the next refresh (after the
        domain comes back online, as SSSD's sdap_sudo_online_cb)."""
        self._hostinfo = None

    def _host_filter(self) -> str:
        d = self.domain
        if not d.ldap_sudo_use_host_filter:
            return ""
        if self._hostinfo is None:
            names = d.ldap_sudo_hostnames or detect_hostnames()
            try:
                ips = d.ldap_sudo_ip or detect_ips()
            except OSError as e:
                log.warning("domain %s: the host's addresses are unknown (%s); the sudo "
                            "host filter has names only", d.name, e)  # fmt: skip
                ips = []
            self._hostinfo = (names, ips)
        names, ips = self._hostinfo
        return host_filter(self.map, names, ips, netgroups=d.ldap_sudo_include_netgroups,
                           regexp=d.ldap_sudo_include_regexp)  # fmt: skip

    def _base_list(self) -> tuple[SearchBase, ...]:
        if not self._bases:
            self._bases = (SearchBase(self.client.naming_context("ldap_sudo_search_base")),)
        return self._bases

    def _search(self, filt: str, attrs: list[str]) -> list[Entry]:
        hosts = self._host_filter()
        out: list[Entry] = []
        for b in self._base_list():
            full = f"(&{self.map.of_class()}{filt}{hosts}{b.filter})"
            out += self.client.search(b.dn, full, attrs, scope=b.scope)
        return out

    def run(self, kind: SudoRefreshKind, names: tuple[str, ...] = ()) -> SudoResult:
        """One refresh, with what it cost kept for ``cached status``."""
        with COUNTERS.request("SUDO", kind.value) as scope:
            result = self._run(kind, names)
        COUNTERS.add(SUDO_REFRESH, 1, scope.elapsed, result.fetched)
        self.last[kind.value] = {
            "at": time.time(),
            "outcome": result.outcome.value,
            "seconds": scope.elapsed,
            "searches": scope.get(LDAP_SEARCH).count,
            "entries": scope.get(LDAP_SEARCH).amount,
            "ldap_bytes": scope.get(LDAP_BYTES).amount,
            "fetched": result.fetched,
            "changed": result.changed,
            "deleted": result.deleted,
            "entry_records": scope.get(ENTRY_RECORDS).amount,
            "ts_records": scope.get(TS_RECORDS).amount,
        }
        return result

    def _run(self, kind: SudoRefreshKind, names: tuple[str, ...]) -> SudoResult:
        # The refresh's time is when it began: what it stores is as of then (and the
        # smart refresh's choice of filter reasons from it).
        self._began = time.time()
        since = self.cache.sudo_state().invalidations
        try:
            if kind is SudoRefreshKind.FULL:
                result = self._full(since)
            elif kind is SudoRefreshKind.SMART:
                result = self._smart(since)
            else:
                result = self._rules(names, since)
        except LdapOffline as e:
            return SudoResult(Outcome.OFFLINE, message=str(e))
        except LdapError as e:
            self.last_error = str(e)
            log.warning("domain %s: sudo %s refresh failed: %s", self.domain.name, kind.value, e)
            return SudoResult(Outcome.ERROR, message=str(e))
        self.last_error = ""
        return result

    def _read(self, entries: list[Entry]) -> tuple[list[SudoRule], dict[str, store.Stamp]]:
        rules: dict[str, SudoRule] = {}
        stamps: dict[str, store.Stamp] = {}
        for e in entries:
            rule = rule_of(self.map, e)
            if rule is None or rule.name in rules:  # two entries of one name: the first
                continue
            rules[rule.name] = rule
            stamps[rule.name] = stamp_of(self.map, e)
        return list(rules.values()), stamps

    def _store(self, rules: list[SudoRule], stamps: dict[str, store.Stamp], delete: list[str],
               *, full: bool, since: int) -> SudoResult:  # fmt: skip
        changed = self.cache.store_sudo(
            rules, stamps, delete, full=full, since=since,
            lifetime=self.domain.entry_cache_sudo_timeout, now=self._began,
        )  # fmt: skip
        gone = len(set(delete) & set(changed))
        return SudoResult(Outcome.FOUND, len(changed), gone, len(rules))

    def _full(self, since: int) -> SudoResult:
        rules, stamps = self._read(self._search("", self.map.rule_attrs))
        held = {r.name for r in self.cache.sudo_rules()}
        delete = sorted(held - set(stamps))
        return self._store(rules, stamps, delete, full=True, since=since)

    def _smart(self, invalidations: int) -> SudoResult:
        since_count = invalidations
        state = self.cache.sudo_state()
        held = self.cache.sudo_times()
        newest = max((t.modstamp for t in held.values() if t.modstamp), default="")
        if not newest:
            # No stamp held (never refreshed, or the timestamp store lost): SSSD reads
            # every rule then too; reading them as a full refresh also drops the gone.
            return self._full(since_count)
        m = self.map
        # A later write cannot be stamped with a second the server's clock has passed:
        # once a refresh began STAMP_MARGIN (clock skew) after the newest stamp's
        # second, the rules of that second are known with their stamps, and only later
        # seconds are asked for; before, that second too (a rule written again in it is
        # told by its CSN).
        since = max(state.last_full, state.last_smart)
        when = epoch(newest)
        filt = f"({MODSTAMP}>={escape(newest)})"
        if when is not None and since >= when + STAMP_MARGIN:
            filt = f"(&{filt}(!({MODSTAMP}={escape(newest)})))"
        seen = self._search(filt, [m.name, MODSTAMP, m.usn])
        want: list[str] = []
        for e in seen:
            names = e.get(m.name)
            if len(names) != 1:
                continue
            name = names[0].decode("utf-8", "replace")
            s = stamp_of(m, e)
            t = held.get(name)
            if t is None or t.modstamp != s.modstamp or t.usn != s.usn:
                want.append(name)
        if not want:
            return self._store([], {}, [], full=False, since=since_count)
        rules, stamps = self._fetch(want)
        return self._store(rules, stamps, [], full=False, since=since_count)

    def _fetch(self, names: list[str]) -> tuple[list[SudoRule], dict[str, store.Stamp]]:
        entries: list[Entry] = []
        for i in range(0, len(names), BATCH):
            chunk = assertions(self.map.name, names[i : i + BATCH])
            entries += self._search("(|" + "".join(chunk) + ")", self.map.rule_attrs)
        return self._read(entries)

    def _rules(self, names: tuple[str, ...], since: int) -> SudoResult:
        if not names:
            return SudoResult(Outcome.FOUND)
        rules, stamps = self._fetch(list(names))
        delete = sorted(set(names) - set(stamps))
        return self._store(rules, stamps, delete, full=False, since=since)
