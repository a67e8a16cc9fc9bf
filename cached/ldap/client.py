"""The LDAP connection behind a small interface of our own; the only module importing ldap3.

It owns: the list of servers and failover (``ldap_uri`` then ``ldap_backup_uri``),
StartTLS/LDAPS with certificate checks, anonymous, simple and SASL EXTERNAL binds,
timeouts, paged results, the root DSE (supported controls, naming contexts), and
the domain's online/offline state (reference §6.4): after every server failed, the
domain is offline and requests fail at once until ``offline_timeout`` passes, which
doubles up to ``offline_timeout_max`` with a random offset, as SSSD's backend does.

Failures: a server that does not answer within its deadline is marked failed
for this round and the next URI is tried at once; it is never waited on twice. A reset
or EOF (server restarted, idle connection dropped) may reconnect once. When every URI of
the round failed the domain is offline. Deadlines bound whole operations, not socket
reads: ``ldap_search_timeout`` one search with all its pages,
``ldap_opt_timeout`` StartTLS + bind + root DSE. While a backup URI serves, the
``ldap_uri`` servers are tried again every ``failover_primary_timeout`` seconds, as
SSSD's fail over does (sssd.conf(5) ``failover_primary_timeout``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ldap3
import ldap3.operation.search
import ldap3.strategy.base
import ldap3.strategy.sync
import ldap3.utils.conv
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
        entry = deref.decode_search_entry(data)
        if entry is None:
            return _decode_message_fast(data)
        # Already in the form ldap3's decode_response_fast would give (raw values
        # only, see _no_decoded_attributes); _decode_response_prebuilt passes it on.
        done: dict[str, Any] = {
            "type": "searchResEntry",
            "raw_dn": entry.dn,
            "dn": _server_text(entry.dn),
            "raw_attributes": {_server_text(k): v for k, v in entry.attrs.items()},
            "attributes": {},
        }
        if entry.controls:
            done["controls"] = {
                _server_text(oid): {"description": "", "criticality": crit, "value": value}
                for oid, crit, value in entry.controls
            }
        return {"messageID": entry.message_id, "protocolOp": 4, _PREBUILT: (done, data)}
    finally:
        COUNTERS.add(LDAP_BER, 0, time.perf_counter() - start)


def _server_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # As ldap3 does for what it decodes itself (its additional server encodings).
        return str(ldap3.utils.conv.to_unicode(raw, from_server=True))


_PREBUILT = "_cached_prebuilt"
_decode_response_fast = ldap3.strategy.base.BaseStrategy.decode_response_fast


def _decode_response_prebuilt(self: Any, ldap_message: dict[str, Any]) -> Any:
    prebuilt = ldap_message.get(_PREBUILT)
    if prebuilt is None:
        return _decode_response_fast(self, ldap_message)
    done, data = prebuilt
    if self.connection.check_names:
        # A connection that wants decoded, schema-checked attributes (not cached's
        # client: tools and tests using ldap3 in the same process) gets ldap3's own.
        return _decode_response_fast(self, _decode_message_fast(data))
    return done


# SearchResultEntry PDUs are read by our own BER reader (deref.decode_search_entry):
# ldap3's generic decoder was the largest single cost of a cold initgroups of a user
# in 2,000 groups (profile in perf/results/README: 0.56 s of 3.3 s under cProfile).
ldap3.strategy.sync.decode_message_fast = _timed_decode
ldap3.strategy.base.BaseStrategy.decode_response_fast = _decode_response_prebuilt


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
# of a paged search. The batched searches of §9.5 carry filters of a few thousand
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

# ldap3 2.9.1's SyncStrategy.receiving reads 4,096 bytes at a time and appends with
# `bytes +=`, which is quadratic: an 8.5 MB entry took 9.7 s and a 100 MB value 13 min
# in the security review; here an 8.5 MB entry from slapd reads in 1.6-2.2 s with it
# and in 0.04-0.07 s with this loop (perf/bigentry.py, 2 loaded cores). It also has
# only a per-read timeout, so a server trickling a byte every few seconds held a
# search for minutes. The replacement reads 1 MiB at a time into a bytearray
# (linear), honours the whole-operation deadline the client sets on the connection,
# and refuses one message over MAX_MESSAGE.
RECV_SIZE = 1 << 20
# The largest legitimate LDAP message we know of is a group entry with every member:
# 200,000 member DNs of ~40 bytes are 8 MB (Active Directory's MaxReceiveBuffer default
# is 10 MB). 64 MiB leaves 8x headroom and bounds the backend's memory for one message
# (the buffer, the copy and the decoded values: about 4x the message).
MAX_MESSAGE = 64 << 20
_DEADLINE_ATTR = "_cached_deadline"  # monotonic time an operation must finish by
_receiving = ldap3.strategy.sync.SyncStrategy.receiving


class LdapTimeout(lexc.LDAPResponseTimeoutError):  # type: ignore[misc]
    """The server did not answer within the operation's deadline."""


class LdapMessageTooLarge(lexc.LDAPExceptionError):  # type: ignore[misc]
    """One LDAP message is larger than MAX_MESSAGE; the connection is closed."""


def _message_size(buf: bytearray, pos: int) -> int:
    """The size of the BER message starting at ``pos``; -1 if its header is not all in."""
    if len(buf) - pos < 2:
        return -1
    first = buf[pos + 1]
    if first < 0x80:
        return first + 2
    n = first & 0x7F
    if n == 0 or n > 8:
        # RFC 4511 §5.1: definite lengths only; 8 length octets cover any size.
        raise lexc.LDAPSocketReceiveError(f"bad BER length octet 0x{first:02x}")
    if len(buf) - pos < 2 + n:
        return -1
    return int.from_bytes(buf[pos + 2 : pos + 2 + n], "big") + 2 + n


def _receiving_linear(self: Any) -> list[bytes]:
    conn = self.connection
    if conn.sasl_mechanism == ldap3.DIGEST_MD5:
        return list(_receiving(self))  # signed SASL framing: not a mechanism cached offers
    deadline: float | None = getattr(conn, _DEADLINE_ATTR, None)
    buf = bytearray()
    pos = 0
    need = -1
    messages: list[bytes] = []
    while True:
        try:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("deadline passed")
                conn.socket.settimeout(left)
            data = conn.socket.recv(RECV_SIZE)
        except TimeoutError:
            _close_quietly(self)
            raise LdapTimeout(f"{conn.server.name}: timed out (no complete answer)") from None
        except (OSError, AttributeError) as e:
            _close_quietly(self)
            raise lexc.LDAPSocketReceiveError(f"error receiving data: {e}") from None
        if not data:
            return messages  # EOF; ldap3 reports "session terminated" when empty
        buf += data
        while True:
            if need < 0:
                need = _message_size(buf, pos)
                if need < 0:
                    break
                if need > MAX_MESSAGE:
                    _close_quietly(self)
                    raise LdapMessageTooLarge(
                        f"{conn.server.name} sent an LDAP message of {need} bytes, over the "
                        f"{MAX_MESSAGE} byte limit of one message"
                    )
            if len(buf) - pos < need:
                break
            messages.append(bytes(memoryview(buf)[pos : pos + need]))
            pos += need
            need = -1
        if pos == len(buf):
            return messages
        if pos:
            del buf[:pos]
            pos = 0


def _close_quietly(strategy: Any) -> None:
    with contextlib.suppress(Exception):
        strategy.close()


ldap3.strategy.sync.SyncStrategy.receiving = _receiving_linear


class LdapError(Exception):
    """The server answered with an error, or the request could not be made."""


class LdapOffline(LdapError):
    """No server is reachable; the domain is offline until the retry time."""


class LdapLimitExceeded(LdapError):
    """The server cut a search at its size or time limit: the entries returned are
    not all there are (docs/compatibility.md §9.5). ldap3 does not raise for these result codes
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
        self.went_offline = 0.0  # wall-clock time the domain went offline
        # Servers that failed in this round (a round ends when the domain goes offline
        # or the preferred servers are tried again), with why; never tried twice.
        self.failed: dict[str, str] = {}
        self.connected_at = 0.0  # clock() when self.conn was made

    # -- state ---------------------------------------------------------------------

    @property
    def online(self) -> bool:
        return self.retry_at == 0.0

    def close(self) -> None:
        _discard(self.conn)
        self.conn = None

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
        self.failed.clear()  # the next attempt is a new round over every server
        log.warning(
            "domain %s offline: %s; next attempt in %.0f s",
            self.cfg.name,
            reason,
            self.backoff + offset,
        )
        return LdapOffline(reason)

    def _server_failed(self, uri: str, reason: str) -> None:
        """``uri`` failed for this round: drop its connection, never wait on it again
        until the round ends; the next operation goes to the next server."""
        if self.info is not None and self.info.uri == uri:
            self.close()
        self.failed[uri] = reason
        if any(u not in self.failed for u in self.uris):
            log.warning("domain %s: server failed, trying the next one: %s", self.cfg.name, reason)

    @property
    def retry_in(self) -> float:
        """Seconds until the next connection attempt while offline; 0 when online."""
        return max(0.0, self.retry_at - self.clock()) if self.retry_at else 0.0

    # -- connecting ----------------------------------------------------------------

    def _tls(self) -> ldap3.Tls | None:
        verify = self.cfg.ldap_tls_reqcert in ("demand", "hard")
        return ldap3.Tls(
            validate=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE,
            ca_certs_file=self.cfg.ldap_tls_cacert or None,
            ca_certs_path=self.cfg.ldap_tls_cacertdir or None,
            version=ssl.PROTOCOL_TLS_CLIENT,
        )

    def _connect_one(self, uri: str) -> tuple[ldap3.Connection, ServerInfo]:
        """Connect (``ldap_network_timeout``), then StartTLS, bind and read the root DSE
        within one ``ldap_opt_timeout`` deadline."""
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
            # Per socket read, for reads outside an operation with a deadline (the
            # TLS handshake of ldaps://); operations set their own deadline.
            receive_timeout=self.cfg.ldap_opt_timeout,
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
            with _deadline(conn, self.cfg.ldap_opt_timeout):
                if scheme == "ldap" and self.cfg.ldap_id_use_start_tls:
                    conn.start_tls()
                conn.bind()
                info = self._read_root_dse(conn, uri)
        except BaseException:
            _discard(conn)
            raise
        return conn, info

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
            info.controls = set(_utf8s(uri, "supportedControl", raw.get("supportedcontrol", [])))
            info.naming_contexts = _utf8s(uri, "namingContexts", raw.get("namingcontexts", []))
            dnc = _utf8s(uri, "defaultNamingContext", raw.get("defaultnamingcontext", []))
            info.default_naming_context = dnc[0] if dnc else ""
        return info

    def _primary_due(self) -> bool:
        """Connected to an ``ldap_backup_uri`` server for ``failover_primary_timeout``:
        time to try the ``ldap_uri`` servers again (sssd.conf(5))."""
        return (
            self.info is not None
            and self.info.uri not in self.cfg.ldap_uri
            and bool(self.cfg.ldap_uri)
            and self.clock() - self.connected_at >= self.cfg.failover_primary_timeout
        )

    def connect(self) -> ldap3.Connection:
        """The bound connection, connecting (with failover) when needed."""
        if self.conn is not None:
            if not self._primary_due():
                return self.conn
            return self._back_to_primary()
        if self.retry_at and self.clock() < self.retry_at:
            raise LdapOffline(self.last_error or "offline")
        conn = self._try(self.uris)
        if conn is None:
            raise self._go_offline("; ".join(self.failed.values()) or "no ldap_uri configured")
        return conn

    def _back_to_primary(self) -> ldap3.Connection:
        assert self.conn is not None and self.info is not None
        backup = self.conn, self.info
        self.conn = self.info = None
        for uri in self.cfg.ldap_uri:
            self.failed.pop(uri, None)
        conn = self._try(list(self.cfg.ldap_uri))
        if conn is not None:
            _discard(backup[0])
            return conn
        # The preferred servers still fail: stay on the backup, try again later.
        self.conn, self.info = backup
        self.connected_at = self.clock()
        return backup[0]

    def _try(self, uris: list[str]) -> ldap3.Connection | None:
        """Connect to the first of ``uris`` not failed in this round, or None."""
        with self.counters.timer(LDAP_CONNECT):
            for uri in uris:
                if uri in self.failed:
                    continue
                try:
                    conn, info = self._connect_one(uri)
                except LdapTimeout:
                    self._server_failed(
                        uri,
                        f"{uri}: StartTLS, bind and root DSE timed out after "
                        f"ldap_opt_timeout = {self.cfg.ldap_opt_timeout} s",
                    )
                    continue
                except lexc.LDAPInvalidCredentialsResult:
                    self._server_failed(
                        uri,
                        f"{uri}: bind as {self.cfg.ldap_default_bind_dn!r} refused "
                        "(invalid credentials)",
                    )
                    continue
                except (LdapError, lexc.LDAPException, *_NETWORK_ERRORS) as e:
                    self._server_failed(uri, f"{uri}: {_describe(e)}")
                    continue
                except (ValueError, IndexError, TypeError) as e:
                    # ldap3's decoder on bytes that are not LDAP: a broken server.
                    self._server_failed(uri, f"{uri}: undecodable answer ({_describe(e)})")
                    continue
                self.conn, self.info = conn, info
                self.connected_at = self.clock()
                if not self.online:
                    log.info("domain %s back online via %s", self.cfg.name, uri)
                elif uri != self.uris[0]:
                    log.info("domain %s now served by %s", self.cfg.name, uri)
                self.retry_at = 0.0
                self.backoff = 0.0
                self.last_error = ""
                return conn
        return None

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
        """One logical search (all pages), counted once (reference §5.1), within one
        ``ldap_search_timeout`` on each server it is tried on. ``deref_seen``: DNs whose
        dereferenced values are not decoded again. ``asq``: an attribute for the ASQ
        control (base searches; the caller checks that the root DSE lists it)."""
        start = time.perf_counter()
        entries: list[Entry] = []
        resets = 0
        try:
            while True:
                conn = self.connect()  # LdapOffline when no server is left
                uri = self.info.uri if self.info else "?"
                try:
                    with _deadline(conn, self.cfg.ldap_search_timeout):
                        entries = self._search_pages(
                            conn, base, filt, attrs, scope, deref_specs, deref_seen, asq
                        )
                        for e in entries:
                            self._fill_ranges(conn, e)
                    return entries
                except LdapMessageTooLarge as e:
                    # The data, not the server: this request fails, the stream is lost.
                    self.close()
                    raise LdapError(f"search of {base!r}: {e}") from None
                except LdapTimeout:
                    # A hung or trickling server: never wait on it twice.
                    self._server_failed(
                        uri, f"{uri}: search timed out after {self.cfg.ldap_search_timeout} s"
                    )
                except (ValueError, IndexError, TypeError) as e:
                    self._server_failed(uri, f"{uri}: undecodable answer ({_describe(e)})")
                except _NETWORK_ERRORS as e:
                    # The connection died (server restarted, idle timeout): reconnect
                    # once; a second failure marks the server failed.
                    self.close()
                    if resets:
                        self._server_failed(uri, f"{uri}: {_describe(e)}")
                    resets += 1
        finally:
            self.counters.add(LDAP_SEARCH, 1, time.perf_counter() - start, len(entries))

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


@contextlib.contextmanager
def _deadline(conn: ldap3.Connection, seconds: float) -> Iterator[None]:
    """Every read of ``conn`` inside the block ends by ``seconds`` from now."""
    setattr(conn, _DEADLINE_ATTR, time.monotonic() + seconds)
    try:
        yield
    finally:
        setattr(conn, _DEADLINE_ATTR, None)


def _utf8s(uri: str, attr: str, values: list[bytes]) -> list[str]:
    try:
        return [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        # A broken or hostile server (docs/threat-model.md): fail it like any other fault.
        raise LdapError(f"root DSE attribute {attr} is not valid UTF-8") from None


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
