"""The LDAP connection behind a small interface of our own; the only module importing ldap3.

It owns: the list of servers and failover (``ldap_uri`` then ``ldap_backup_uri``),
StartTLS/LDAPS with certificate checks, anonymous, simple and SASL EXTERNAL binds,
timeouts, paged results, the root DSE (supported controls, naming contexts), and
the domain's online/offline state (reference §6.4): after every server failed, the
domain is offline and requests fail at once until ``offline_timeout`` passes, which
doubles up to ``offline_timeout_max`` with a random offset, as SSSD's backend does.
"""

from __future__ import annotations

import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ldap3
import ldap3.operation.search
import ldap3.strategy.base
import ldap3.strategy.sync
from ldap3.core import exceptions as lexc

from cached.config import DomainConfig
from cached.counters import COUNTERS, LDAP_BER, LDAP_CONNECT, LDAP_SEARCH, LDAP_WAIT, Counters
from cached.ldap import deref

log = logging.getLogger(__name__)

PAGED_RESULTS_OID = "1.2.840.113556.1.4.319"
# Attribute Scoped Query ([MS-ADTS] 3.1.1.3.4.1.4): a base search returns the entries
# the DN values of one attribute of the base entry name (AD's, Samba's deref).
ASQ_OID = "1.2.840.113556.1.4.1504"


def encode_asq(attr: str) -> bytes:
    """ASQ's value: SEQUENCE { sourceAttribute OCTET STRING } (BER, short lengths)."""
    a = attr.encode()
    if len(a) > 120:
        raise ValueError(f"attribute name too long for ASQ: {attr!r}")
    return bytes([0x30, len(a) + 2, 0x04, len(a)]) + a

# Time ldap3's own decoder so "waiting for LDAP" can be split into the server's
# time and the client's decoding (`cached perf` shows where the time goes, reference §5.4). The sync
# strategy calls this module-level name once per message.
_decode_message_fast = ldap3.strategy.sync.decode_message_fast


def _timed_decode(data: bytes) -> Any:
    start = time.perf_counter()
    try:
        return _decode_message_fast(data)
    finally:
        COUNTERS.add(LDAP_BER, 0, time.perf_counter() - start)


ldap3.strategy.sync.decode_message_fast = _timed_decode


def _no_decoded_attributes(_attributes: Any) -> dict[str, Any]:
    return {}


# ldap3 turns every value of every entry into str as well as keeping the raw bytes;
# this client reads only the raw bytes. Measured on the direct groups of a user in
# 2,000 groups (44,000 member values): 0.9 s of 3.1 s went to that conversion and
# its per-value configuration lookups. With check_names=False ldap3 builds
# `attributes` through this one function, so it is replaced by one that builds
# nothing.
ldap3.operation.search.attributes_to_dict_fast = _no_decoded_attributes

# ldap3 parses and compiles the filter string into pyasn1 objects again for every page
# of a paged search. The batched searches of issue 12 carry filters of a few thousand
# assertions (~0.2 s to compile each time, measured); compile each once per search.
_parse_filter = ldap3.operation.search.parse_filter
_compile_filter = ldap3.operation.search.compile_filter
_FILTERS: dict[str, Any] = {}  # filter text -> parsed tree (the roots we compiled)
_COMPILED: dict[int, Any] = {}  # id(parsed root) -> compiled filter


def _parse_filter_once(text: str, *args: Any) -> Any:
    node = _FILTERS.get(text)
    if node is None:
        if len(_FILTERS) >= 4:
            _FILTERS.clear()
            _COMPILED.clear()
        node = _FILTERS[text] = _parse_filter(text, *args)
    return node


def _compile_filter_once(node: Any) -> Any:
    key = id(node)
    got = _COMPILED.get(key)
    if got is None:
        got = _compile_filter(node)
        if any(n.elements and id(n.elements[0]) == key for n in _FILTERS.values()):
            _COMPILED[key] = got
    return got


ldap3.operation.search.parse_filter = _parse_filter_once
ldap3.operation.search.compile_filter = _compile_filter_once

_open_socket = ldap3.strategy.base.BaseStrategy._open_socket


def _open_socket_or_close(self: Any, *args: Any, **kwargs: Any) -> Any:
    # ldap3 2.9.1 leaves the socket of a failed connect (refused, TLS handshake)
    # open; a daemon that retries a dead server every minute would leak one per try.
    try:
        return _open_socket(self, *args, **kwargs)
    except BaseException:
        sock = getattr(self.connection, "socket", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        raise


ldap3.strategy.base.BaseStrategy._open_socket = _open_socket_or_close


class LdapError(Exception):
    """The server answered with an error, or the request could not be made."""


class LdapOffline(LdapError):
    """No server is reachable; the domain is offline until the retry time."""


class LdapLimitExceeded(LdapError):
    """The server cut a search at its size or time limit: the entries returned are
    not all there are (issue 12 item 4). ldap3 does not raise for these result codes
    on this path, so every search's result code is checked."""

    def __init__(self, message: str, code: str, partial: int) -> None:
        super().__init__(message)
        self.code = code  # "sizeLimitExceeded" | "timeLimitExceeded"
        self.partial = partial  # entries received before the cut


@dataclass(slots=True)
class Entry:
    dn: str
    attrs: dict[str, list[bytes]]  # lower-cased attribute name -> raw values
    deref: list[deref.DerefResult] | None = None

    def get(self, name: str) -> list[bytes]:
        return self.attrs.get(name.lower(), [])


@dataclass
class ServerInfo:
    uri: str
    controls: set[str] = field(default_factory=set)
    naming_contexts: list[str] = field(default_factory=list)
    default_naming_context: str = ""


_NETWORK_ERRORS = (
    lexc.LDAPSocketOpenError,
    lexc.LDAPSocketReceiveError,
    lexc.LDAPSocketSendError,
    lexc.LDAPSessionTerminatedByServerError,
    lexc.LDAPCommunicationError,
    lexc.LDAPResponseTimeoutError,
    lexc.LDAPStartTLSError,
    ConnectionError,
    OSError,
)


class LdapClient:
    def __init__(
        self,
        cfg: DomainConfig,
        counters: Counters = COUNTERS,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.counters = counters
        self.clock = clock
        self.rng = rng or random.Random()
        self.uris = list(cfg.ldap_uri) + list(cfg.ldap_backup_uri)
        self.conn: ldap3.Connection | None = None
        self.info: ServerInfo | None = None
        self.retry_at = 0.0  # offline until then
        self.backoff = 0.0
        self.last_error = ""
        self.went_offline = 0.0

    # -- state ---------------------------------------------------------------------

    @property
    def online(self) -> bool:
        return self.retry_at == 0.0

    def close(self) -> None:
        _discard(self.conn)
        self.conn = None

    def reset_offline(self) -> None:
        """Forget the offline state: the next request tries the servers at once."""
        self.retry_at = 0.0
        self.backoff = 0.0

    def _go_offline(self, reason: str) -> LdapOffline:
        # Reference §6.4: retry after offline_timeout, doubling up to the max, plus a
        # random 0..offset so many clients do not reconnect in step.
        if self.backoff == 0.0:
            self.backoff = float(self.cfg.offline_timeout)
            self.went_offline = time.time()
        else:
            self.backoff = min(self.backoff * 2, float(max(self.cfg.offline_timeout_max, 1)))
        offset = self.rng.uniform(0, self.cfg.offline_timeout_random_offset)
        self.retry_at = self.clock() + self.backoff + offset
        self.last_error = reason
        log.warning(
            "domain %s offline: %s; next attempt in %.0f s",
            self.cfg.name,
            reason,
            self.backoff + offset,
        )
        return LdapOffline(reason)

    # -- connecting ----------------------------------------------------------------

    def _tls(self) -> ldap3.Tls | None:
        verify = self.cfg.ldap_tls_reqcert in ("demand", "hard")
        return ldap3.Tls(
            validate=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE,
            ca_certs_file=self.cfg.ldap_tls_cacert or None,
            ca_certs_path=self.cfg.ldap_tls_cacertdir or None,
            version=ssl.PROTOCOL_TLS_CLIENT,
        )

    def _connect_one(self, uri: str) -> ldap3.Connection:
        scheme = uri.split("://", 1)[0].lower()
        server = ldap3.Server(
            uri,
            connect_timeout=self.cfg.ldap_network_timeout,
            tls=self._tls() if scheme != "ldapi" else None,
            get_info=ldap3.NONE,
        )
        kwargs: dict[str, Any] = {}
        if self.cfg.ldap_sasl_mech == "external":
            # An empty authzid: with None ldap3 sends no credentials field and slapd
            # answers saslBindInProgress instead of binding (seen with ldap3 2.9.1).
            kwargs.update(
                authentication=ldap3.SASL, sasl_mechanism=ldap3.EXTERNAL, sasl_credentials=""
            )
        elif self.cfg.ldap_default_bind_dn:
            kwargs.update(
                authentication=ldap3.SIMPLE,
                user=self.cfg.ldap_default_bind_dn,
                password=self.cfg.ldap_default_authtok,
            )
        else:
            kwargs.update(authentication=ldap3.ANONYMOUS)
        conn = ldap3.Connection(
            server,
            auto_bind=ldap3.AUTO_BIND_NONE,
            # Per socket read; searches are most reads, and the longest allowed.
            receive_timeout=max(self.cfg.ldap_opt_timeout, self.cfg.ldap_search_timeout),
            raise_exceptions=True,
            check_names=False,
            read_only=True,
            return_empty_attributes=False,
            # Ranged values (member;range=0-1499) are fetched by merge_ranges below:
            # ldap3's own auto_range searches again inside the search, overwriting the
            # paged search's result, and reads the decoded attributes this client
            # does not build (KeyError).
            auto_range=False,
            # Never chase referrals (ldap_referrals, SSSD's advice for AD): a subtree
            # search at an AD domain root returns continuation references to the
            # configuration and DNS partitions, names of hosts we do not bind to.
            auto_referrals=False,
            **kwargs,
        )
        try:
            conn.open()
            if scheme == "ldap" and self.cfg.ldap_id_use_start_tls:
                conn.start_tls()
            conn.bind()
        except BaseException:
            with contextlib.suppress(Exception):
                conn.unbind()
            raise
        return conn

    def _read_root_dse(self, conn: ldap3.Connection, uri: str) -> ServerInfo:
        # A search like any other for the counters (SSSD's probe counts it too, §5.1).
        with self.counters.timer(LDAP_SEARCH):
            return self._root_dse(conn, uri)

    def _root_dse(self, conn: ldap3.Connection, uri: str) -> ServerInfo:
        conn.search(
            "",
            "(objectClass=*)",
            ldap3.BASE,
            attributes=["supportedControl", "namingContexts", "defaultNamingContext"],
        )
        info = ServerInfo(uri)
        for item in conn.response or []:
            raw = {k.lower(): v for k, v in item.get("raw_attributes", {}).items()}
            info.controls = {v.decode() for v in raw.get("supportedcontrol", [])}
            info.naming_contexts = [v.decode() for v in raw.get("namingcontexts", [])]
            dnc = raw.get("defaultnamingcontext", [])
            info.default_naming_context = dnc[0].decode() if dnc else ""
        return info

    def connect(self) -> ldap3.Connection:
        """The bound connection, connecting (with failover) when needed."""
        if self.conn is not None:
            return self.conn
        if self.retry_at and self.clock() < self.retry_at:
            raise LdapOffline(self.last_error or "offline")
        errors = []
        with self.counters.timer(LDAP_CONNECT):
            for uri in self.uris:
                conn = None
                try:
                    conn = self._connect_one(uri)
                    info = self._read_root_dse(conn, uri)
                except lexc.LDAPInvalidCredentialsResult:
                    _discard(conn)
                    errors.append(
                        f"{uri}: bind as {self.cfg.ldap_default_bind_dn!r} refused "
                        "(invalid credentials)"
                    )
                    continue
                except (lexc.LDAPException, *_NETWORK_ERRORS) as e:
                    _discard(conn)
                    errors.append(f"{uri}: {_describe(e)}")
                    continue
                self.conn, self.info = conn, info
                if not self.online:
                    log.info("domain %s back online via %s", self.cfg.name, uri)
                self.reset_offline()
                self.last_error = ""
                return conn
        raise self._go_offline("; ".join(errors) or "no ldap_uri configured")

    # -- searching -----------------------------------------------------------------

    def search(
        self,
        base: str,
        filt: str,
        attrs: list[str],
        *,
        scope: str = "sub",
        deref_specs: list[tuple[str, list[str]]] | None = None,
        deref_seen: set[str] | None = None,
        asq: str = "",
    ) -> list[Entry]:
        """One logical search (all pages), counted once (reference §5.1).
        ``deref_seen``: DNs whose dereferenced values are not decoded again.
        ``asq``: an attribute for the ASQ control (base searches; the caller checks
        that the root DSE lists it)."""
        start = time.perf_counter()
        entries: list[Entry] = []
        try:
            for attempt in (0, 1):
                conn = self.connect()
                try:
                    entries = self._search_pages(
                        conn, base, filt, attrs, scope, deref_specs, deref_seen, asq
                    )
                    for e in entries:
                        self._fill_ranges(conn, e)
                    break
                except _NETWORK_ERRORS as e:
                    # The connection died (server restarted, idle timeout): reconnect
                    # once, with failover; a second failure is the domain going offline.
                    self.close()
                    if attempt == 1:
                        raise self._go_offline(
                            f"{self.info.uri if self.info else '?'}: {_describe(e)}"
                        ) from None
        finally:
            self.counters.add(LDAP_SEARCH, 1, time.perf_counter() - start, len(entries))
        return entries

    def _search_pages(
        self,
        conn: ldap3.Connection,
        base: str,
        filt: str,
        attrs: list[str],
        scope: str,
        deref_specs: list[tuple[str, list[str]]] | None,
        deref_seen: set[str] | None = None,
        asq: str = "",
    ) -> list[Entry]:
        controls = None
        if deref_specs:
            # Critical, as SSSD sends it (§6.2): a server that cannot honour it must
            # say so rather than silently return entries without the values.
            controls = [(deref.DEREF_OID, True, deref.encode_request(deref_specs))]
        info = self.info
        page = self.cfg.ldap_page_size
        paged = page > 0 and info is not None and PAGED_RESULTS_OID in info.controls
        if asq:
            # Critical, as SSSD sends it; not paged (one base entry's values: Samba
            # returned 5,000 members in one answer, 2.7 s).
            controls = [*(controls or []), (ASQ_OID, True, encode_asq(asq))]
            paged = False
        cookie: bytes | None = None
        out: list[Entry] = []
        ldap_scope = {"sub": ldap3.SUBTREE, "base": ldap3.BASE, "one": ldap3.LEVEL}[scope]
        while True:
            t0 = time.perf_counter()
            try:
                conn.search(
                    base,
                    filt,
                    ldap_scope,
                    attributes=attrs,
                    time_limit=self.cfg.ldap_search_timeout,
                    controls=controls,
                    paged_size=page if paged else None,
                    paged_cookie=cookie,
                    # Never follow aliases, as SSSD (ldap_deref unset): an alias under
                    # the base must not make an entry from elsewhere visible (item 10).
                    dereference_aliases=ldap3.DEREF_NEVER,
                )
            except lexc.LDAPNoSuchObjectResult:
                return out
            except (lexc.LDAPSizeLimitExceededResult, lexc.LDAPTimeLimitExceededResult) as e:
                raise self._limit(base, filt, e.result, len(out)) from None
            except lexc.LDAPOperationResult as e:
                raise LdapError(
                    f"search of {base!r} for {filt[:200]!r} failed: {_describe(e)}"
                ) from None
            finally:
                self.counters.add(LDAP_WAIT, 0, time.perf_counter() - t0)
            for item in conn.response or []:
                if item.get("type") != "searchResEntry":
                    continue
                raw = item["raw_attributes"]
                attrs_out = {k.lower(): v for k, v in raw.items()}
                results = None
                ctrl = (item.get("controls") or {}).get(deref.DEREF_OID)
                if ctrl is not None and ctrl.get("value"):
                    try:
                        results = deref.decode_response(ctrl["value"], deref_seen)
                    except (deref.BerError, UnicodeDecodeError) as e:
                        raise LdapError(f"{item['dn']}: bad deref control value: {e}") from None
                out.append(Entry(item["dn"], attrs_out, results))
            code = (conn.result or {}).get("result", 0)
            if code in (3, 4):  # timeLimitExceeded, sizeLimitExceeded (RFC 4511 §4.1.9)
                raise self._limit(base, filt, code, len(out))
            if not paged:
                return out
            ctrls = (conn.result or {}).get("controls") or {}
            cookie = ctrls.get(PAGED_RESULTS_OID, {}).get("value", {}).get("cookie")
            if not cookie:
                return out

    def _fill_ranges(self, conn: ldap3.Connection, e: Entry) -> None:
        """Complete the ranged values of ``e`` (``member;range=0-1499``: a Windows DC
        returns at most MaxValRange values of an attribute per entry, Samba does when
        asked): base searches for ``member;range=<next>-*`` until the server says
        ``*`` (RFC-less, [MS-ADTS] 3.1.1.3.1.3.3). Each is a search of its own."""
        pending = merge_ranges(e.attrs, e.dn)
        while pending:
            name, start = pending.popitem()
            t0 = time.perf_counter()
            try:
                conn.search(
                    e.dn, "(objectClass=*)", ldap3.BASE,
                    attributes=[f"{name};range={start}-*"],
                    time_limit=self.cfg.ldap_search_timeout,
                    dereference_aliases=ldap3.DEREF_NEVER,
                )  # fmt: skip
            except lexc.LDAPOperationResult as ex:
                raise LdapError(f"{e.dn}: reading {name} from {start}: {_describe(ex)}") from None
            finally:
                self.counters.add(LDAP_SEARCH, 1, time.perf_counter() - t0, 1)
            more: dict[str, list[bytes]] = {}
            for item in conn.response or []:
                if item.get("type") == "searchResEntry":
                    more = {k.lower(): v for k, v in item["raw_attributes"].items()}
            got = merge_ranges(more, e.dn)
            e.attrs.setdefault(name, []).extend(more.get(name, []))
            nxt = got.get(name)
            if nxt is not None:
                if nxt <= start:
                    raise LdapError(f"{e.dn}: the server's ranges of {name} do not advance")
                pending[name] = nxt

    def _limit(self, base: str, filt: str, code: int, partial: int) -> LdapLimitExceeded:
        name = "sizeLimitExceeded" if code == 4 else "timeLimitExceeded"
        what = "size" if code == 4 else "time"
        who = self.cfg.ldap_default_bind_dn or "anonymous"
        where = f'dn.exact="{who}"' if self.cfg.ldap_default_bind_dn else "anonymous"
        return LdapLimitExceeded(
            f"the server's {what} limit cut a search of {base!r} after {partial} entries "
            f"({name}, filter {filt[:120]!r}); raise it for the bind DN {who!r}, "
            f"e.g. slapd: limits {where} {what}=unlimited",
            name,
            partial,
        )


def merge_ranges(attrs: dict[str, list[bytes]], dn: str = "") -> dict[str, int]:
    """Fold every ``name;range=lo-hi`` of ``attrs`` (lower-cased names, raw values)
    into ``name``, in place; return ``{name: hi + 1}`` for the ranges that do not end
    in ``*``, whose next values are still to be read."""
    pending: dict[str, int] = {}
    for key in [k for k in attrs if ";range=" in k]:
        name, _, rng = key.partition(";range=")
        lo, sep, hi = rng.partition("-")
        if not sep or not lo.isdigit() or not (hi == "*" or hi.isdigit()):
            raise LdapError(f"{dn}: cannot read the range of attribute {key!r}")
        values = attrs.pop(key)
        attrs.setdefault(name, []).extend(values)
        if hi != "*":
            if int(hi) < int(lo):
                raise LdapError(f"{dn}: attribute {key!r} has an empty range")
            pending[name] = int(hi) + 1
    return pending


def _discard(conn: ldap3.Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.unbind()


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return f"TLS certificate verification failed ({text})"
    return text
