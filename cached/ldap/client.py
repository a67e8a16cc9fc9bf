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

import concurrent.futures
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ldap3
import ldap3.operation.search
import ldap3.strategy.base
import ldap3.strategy.sync
import ldap3.utils.conv
from ldap3.core import exceptions as lexc
from ldap3.core.results import RESULT_CODES

from cached.config import DomainConfig
from cached.counters import (
    COUNTERS,
    LDAP_BER,
    LDAP_BYTES,
    LDAP_CONNECT,
    LDAP_SEARCH,
    LDAP_WAIT,
    Counters,
)
from cached.ldap import deref, wire
from cached.ldap import entry as reader
from cached.ldap.ber import BerError
from cached.ldap.controls import AD_CAPABILITY_OID as AD_CAPABILITY_OID
from cached.ldap.controls import ASQ_OID as ASQ_OID
from cached.ldap.controls import PAGED_RESULTS_OID as PAGED_RESULTS_OID
from cached.ldap.controls import Control, encode_asq, paged_control, paged_cookie

log = logging.getLogger(__name__)

ROOT_DSE_ATTRS = ["supportedControl", "supportedCapabilities", "namingContexts",
                  "defaultNamingContext"]  # fmt: skip


# Time ldap3's own decoder so "waiting for LDAP" can be split into the server's
# time and the client's decoding (`cached perf` shows where the time goes, reference §5.4). The sync
# strategy calls this module-level name once per message.
_decode_message_fast = ldap3.strategy.sync.decode_message_fast


def _timed_decode(data: bytes) -> Any:
    start = time.perf_counter()
    try:
        entry = reader.decode_search_entry(data)
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


# SearchResultEntry PDUs are read by our own BER reader (entry.decode_search_entry):
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
_RECV_BUFFER_ATTR = "_cached_recv_buffer"  # the connection's receive buffer
# Searches outstanding at once on the connection (LdapClient.search_many): enough for
# the server to work on the next while the client decodes the last (two cores here;
# the walk of bigroupuser has at most 2 per level), few enough to bound what a level
# of many batches makes the server hold at once.
OUTSTANDING = 4
# Times the ranged values of one entry are read again from 0 because the entry changed
# between its range searches (_fill_ranges) before the search fails.
RANGE_RESTARTS = 3
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


def _page_ahead(last: bytes, pending: dict[int, _Request]) -> int | None:
    """The message id of the paged search whose page ``last`` ends, when the next page
    can be asked for before the page's entries are read: a success with a cookie, and
    no entry cap to check first (``max_entries``, counted as the entries are read).
    The request's cookie is set; its searchResDone, read in turn, then sends nothing
    (_exchange). A whole page often comes in one read (RECV_SIZE): reading its 1,000
    group entries before asking for the next was the gap between the pages of
    bigroupuser's first level in slapd's log (47 -> 83 ms of a cold initgroups)."""
    if not any(r.page for r in pending.values()):
        return None
    try:
        res = wire.decode_response(last)
        r = pending.get(res.message_id)
        if r is None or not r.page or res.op != wire.SEARCH_RESULT_DONE or res.code != 0:
            return None
        if r.spec.max_entries:
            return None
        cookie = paged_cookie(res.controls.get(PAGED_RESULTS_OID.encode()))
    except (ValueError, IndexError):
        return None  # read again in turn, where what is wrong with it is reported
    if not cookie:
        return None
    r.cookie = cookie
    return res.message_id


def _receiving_linear(self: Any) -> list[bytes]:
    conn = self.connection
    if conn.sasl_mechanism == ldap3.DIGEST_MD5:
        return list(_receiving(self))  # signed SASL framing: not a mechanism cached offers
    deadline: float | None = getattr(conn, _DEADLINE_ATTR, None)
    # One receive buffer per connection, reused: recv(RECV_SIZE) allocated (and the
    # kernel faulted in) a fresh 1 MiB per read, the largest cost of this loop in a
    # cold initgroups of bigroupuser (py-spy, perf/readpath.py).
    into: memoryview | None = getattr(conn, _RECV_BUFFER_ATTR, None)
    if into is None:
        into = memoryview(bytearray(RECV_SIZE))
        setattr(conn, _RECV_BUFFER_ATTR, into)
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
            got = conn.socket.recv_into(into)
        except TimeoutError:
            _close_quietly(self)
            raise LdapTimeout(f"{conn.server.name}: timed out (no complete answer)") from None
        except (OSError, AttributeError) as e:
            _close_quietly(self)
            raise lexc.LDAPSocketReceiveError(f"error receiving data: {e}") from None
        if not got:
            return messages  # EOF; ldap3 reports "session terminated" when empty
        COUNTERS.add(LDAP_BYTES, 0, 0.0, got)
        buf += into[:got]
        end = len(buf)
        # The complete messages are sliced from one bytes copy of the buffer, made
        # once a message is complete (a message still arriving is never copied).
        whole = b""
        while True:
            if need < 0 and end - pos >= 2 and buf[pos + 1] + 2 <= min(end - pos, 0x81):
                # A run of whole messages of short-form length (the sweep's entries,
                # 5,000 for large01) taken by this shorter loop, as the one below
                # takes each (a cold large01: 203 M -> 200 M instructions, perf.replay).
                if not whole:
                    whole = bytes(buf)
                append = messages.append
                while pos + 2 <= end:
                    f = whole[pos + 1]
                    if f >= 0x80 or (nxt := pos + f + 2) > end:
                        break
                    append(whole[pos:nxt])
                    pos = nxt
            if need < 0:
                if end - pos >= 2 and buf[pos + 1] < 0x80:
                    need = buf[pos + 1] + 2  # short form: every entry of a sweep
                elif end - pos >= 4 and buf[pos + 1] == 0x82:
                    need = (buf[pos + 2] << 8 | buf[pos + 3]) + 4  # a group entry of a walk
                else:
                    need = _message_size(buf, pos)
                    if need < 0:
                        break
                    if need > MAX_MESSAGE:
                        _close_quietly(self)
                        raise LdapMessageTooLarge(
                            f"{conn.server.name} sent an LDAP message of {need} bytes, over "
                            f"the {MAX_MESSAGE} byte limit of one message"
                        )
            if end - pos < need:
                break
            if not whole:
                whole = bytes(buf)
            messages.append(whole[pos : pos + need])
            pos += need
            need = -1
        if pos == end:
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
    # The deref control's results: with a ``deref_seen`` set, only the DNs new to it.
    deref: list[deref.DerefResult] | None = None
    deref_total: int = 0  # results in the control, repeats included
    deref_raw: bytes | None = None  # the control value, to read again in full

    def get(self, name: str) -> list[bytes]:
        # The schema's names (``uidNumber``) lower-cased once, not on every call:
        # ~60,000 calls per cold initgroups of bigroupuser, where ``lower()`` built
        # and hashed a new string each time (py-spy, perf.readpath).
        key = _LOWER.get(name)
        if key is None:
            key = name.lower()
            if len(_LOWER) < _ATTR_NAMES_MAX:
                _LOWER[name] = key
        return self.attrs.get(key, [])


# A search's entry as a row: (DN, values of each attribute asked for, [] if absent).
Row = reader.Row


@dataclass(frozen=True, slots=True)
class Search:
    """One search for :meth:`LdapClient.search_many`."""

    base: str
    filt: str
    attrs: list[str]
    scope: str = "sub"  # "sub" | "one" | "base"
    deref_specs: list[tuple[str, list[str]]] | None = None
    asq: str = ""
    max_entries: int = 0  # stop (LdapTooMany) once a page takes the answer past it
    # The request's own sizeLimit (RFC 4511 §4.5.1.4; 0: none): the server stops at it
    # with sizeLimitExceeded, so an unpaged search is bounded too (the user sweep).
    size_limit: int = 0
    # False: never paged, so it goes out with the others (slapd keeps one paged state
    # per connection: paged searches go one at a time, see _exchange).
    paged: bool = True
    # A list: the entries are put in it as rows, (DN, the values of each of ``attrs``
    # in its order), with no Entry built; the search's list of entries stays empty
    # (LdapClient.search_rows).
    rows: list[Row] | None = field(default=None, compare=False)


class LdapTooMany(LdapError):
    """A search stopped by its caller's ``max_entries``: the answer is bigger than the
    caller chose to pay for (it falls back to narrower searches)."""


class _Request:
    """A search on the wire: its encoded filter and controls, its pages so far."""

    __slots__ = (
        "added", "controls", "cookie", "deadline", "entries", "error", "filt", "page", "rows",
        "seen", "slots", "spec",
    )  # fmt: skip

    def __init__(
        self,
        spec: Search,
        filt: bytes,
        controls: list[Control],
        page: int,
        seen: set[bytes] | None,
    ) -> None:
        self.spec, self.filt, self.controls, self.page, self.seen = spec, filt, controls, page, seen
        self.cookie: bytes | None = None
        self.entries: list[Entry] = []
        self.error: LdapError | None = None
        self.added: list[bytes] = []  # DNs this search put into ``seen``
        self.deadline = 0.0  # monotonic time its last page must have come by
        self.rows = spec.rows
        # Rows wanted (Search.rows): what entry.decode_row reads them by. Not when an
        # attribute is asked twice (``ldap_user_gid_number = uidNumber``, user private
        # groups; found by fuzzing the sweep's naming): RowShape has one slot per type,
        # so every row then takes the generic reader, which fills each slot (plain, entry).
        unique = len({a.lower() for a in spec.attrs}) == len(spec.attrs)
        rows = spec.rows if unique else None
        self.slots = reader.RowShape(spec.attrs, rows) if rows is not None else None

    def reset(self) -> None:
        """Start again (a new connection): what the last try saw is forgotten."""
        if self.seen is not None and self.added:
            self.seen.difference_update(self.added)
        self.cookie, self.entries, self.error, self.added = None, [], None, []
        if self.rows is not None:
            self.rows.clear()

    def count(self) -> int:
        """Entries received so far."""
        return len(self.rows) if self.rows is not None else len(self.entries)

    def plain(self, raw_dn: bytes, attrs: dict[str, list[bytes]]) -> None:
        """An entry without controls as entry.decode_entry reads it: what
        :meth:`entry` makes of the same message."""
        dn = _server_text(raw_dn)
        if self.rows is not None:
            self.rows.append((dn, [attrs.get(a.lower(), []) for a in self.spec.attrs]))
            return
        self.entries.append(Entry(dn, attrs))

    def entry(self, e: reader.SearchEntry) -> None:
        dn = _server_text(e.dn)
        results = None
        total = 0
        raw = None
        for oid, _crit, value in e.controls or ():
            if oid == _DEREF_OID and value:
                try:
                    results, total = deref.decode_counted(value, self.seen, self.added)
                except (BerError, UnicodeDecodeError) as ex:
                    # Recorded, not raised: the other answers on the connection are
                    # still read, so the stream stays in step.
                    self.error = self.error or LdapError(f"{dn}: bad deref control value: {ex}")
                    return
                raw = value
        attrs = {}
        for k, v in e.attrs.items():
            name = _ATTR_NAMES.get(k)
            if name is None:
                name = _server_text(k).lower()
                if len(_ATTR_NAMES) < _ATTR_NAMES_MAX:
                    _ATTR_NAMES[k] = name
            attrs[name] = v
        if self.rows is not None:
            # An entry that entry.decode_row left to the generic reader: the same row.
            self.rows.append((dn, [attrs.get(a.lower(), []) for a in self.spec.attrs]))
            return
        self.entries.append(Entry(dn, attrs, results, total, raw))


# Attribute descriptions as sent -> their lower-cased text: the same few names come
# with every entry (decoding them was 3 % of a cold initgroups); bounded, since a
# server may send any number of different ones.
_ATTR_NAMES: dict[bytes, str] = {}
_ATTR_NAMES_MAX = 1024
# Attribute names asked for (Entry.get) -> lower case; bounded like _ATTR_NAMES.
_LOWER: dict[str, str] = {}


_DEREF_OID = deref.DEREF_OID.encode()


@dataclass
class ServerInfo:
    uri: str
    controls: set[str] = field(default_factory=set)
    capabilities: set[str] = field(default_factory=set)
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
# What decoding bytes that are not the LDAP they claim raises: our BER readers
# (BerError is a ValueError) and ldap3's decoder, which also raises KeyError for
# a resultCode or protocolOp tag it has no name for, and RecursionError for thousands of
# nested SEQUENCEs (6 KB on the wire). Such a server is failed like one that does not
# answer, so the next URI is tried (found in review: a KeyError escaped every handler,
# the healthy backup was never tried and the domain never went offline).
_UNDECODABLE = (ValueError, LookupError, TypeError, RecursionError)


@dataclass
class Probe:
    """What :meth:`LdapClient.probe` found: the first server that answered with its
    bound connection and root DSE (None: none did), and why each before it failed."""

    uri: str = ""
    conn: ldap3.Connection | None = None
    info: ServerInfo | None = None
    failed: dict[str, str] = field(default_factory=dict)


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
        # Searches sent ahead (send_ahead) and not read yet, by message ID: on
        # ``_ahead_conn`` only (a connection replaced since took them with it).
        self._ahead: dict[int, _Request] = {}
        self._ahead_conn: ldap3.Connection | None = None
        self.retry_at = 0.0  # offline until then
        self.backoff = 0.0
        self.last_error = ""
        self.went_offline = 0.0  # wall-clock time the domain went offline
        # Servers that failed in this round (a round ends when the domain goes offline
        # or the preferred servers are tried again), with why; never tried twice.
        self.failed: dict[str, str] = {}
        self.connected_at = 0.0  # clock() when self.conn was made
        # Whether connect() tries the servers again once the backoff has passed, and
        # the preferred ones after failover_primary_timeout on a backup. The backend
        # service turns it off and runs the server check (probe, after_probe) instead,
        # so that no lookup waits on a server that hangs (service.py, _server_check).
        self.retry_in_lookups = True
        # The start's probe while not taken yet (begin_warm_up, take_warm_up).
        self._warm: concurrent.futures.Future[Probe] | None = None

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
        # `try` verifies as `demand` does: OpenLDAP's `try` ends the session on a bad
        # certificate, and a TLS server always presents one (sssd-ldap(5)).
        verify = self.cfg.ldap_tls_reqcert in ("try", "demand", "hard")
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
            attributes=ROOT_DSE_ATTRS,
        )
        info = ServerInfo(uri)
        for item in conn.response or []:
            raw = {k.lower(): v for k, v in item.get("raw_attributes", {}).items()}
            info.controls = set(_utf8s(uri, "supportedControl", raw.get("supportedcontrol", [])))
            caps = raw.get("supportedcapabilities", [])
            info.capabilities = set(_utf8s(uri, "supportedCapabilities", caps))
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
        if self._warm is not None:
            self.take_warm_up()
        if self.conn is not None:
            if not self.retry_in_lookups or not self._primary_due():
                return self.conn
            return self._back_to_primary()
        if self.retry_at and (not self.retry_in_lookups or self.clock() < self.retry_at):
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

    def _attempt(self, uri: str) -> tuple[ldap3.Connection, ServerInfo] | str:
        """A bound connection to ``uri`` and its root DSE, or why there is none."""
        try:
            return self._connect_one(uri)
        except LdapTimeout:
            return (
                f"{uri}: StartTLS, bind and root DSE timed out after "
                f"ldap_opt_timeout = {self.cfg.ldap_opt_timeout} s"
            )
        except lexc.LDAPInvalidCredentialsResult:
            return f"{uri}: bind as {self.cfg.ldap_default_bind_dn!r} refused (invalid credentials)"
        except (LdapError, lexc.LDAPException, *_NETWORK_ERRORS) as e:
            return f"{uri}: {_describe(e)}"
        except _UNDECODABLE as e:
            # ldap3's decoder on bytes that are not LDAP: a broken server.
            return f"{uri}: undecodable answer ({_describe(e)})"

    def _try(self, uris: list[str]) -> ldap3.Connection | None:
        """Connect to the first of ``uris`` not failed in this round, or None."""
        with self.counters.timer(LDAP_CONNECT):
            for uri in uris:
                if uri in self.failed:
                    continue
                got = self._attempt(uri)
                if isinstance(got, str):
                    self._server_failed(uri, got)
                    continue
                if not self.online:
                    log.info("domain %s back online via %s", self.cfg.name, uri)
                elif uri != self.uris[0]:
                    log.info("domain %s now served by %s", self.cfg.name, uri)
                self._adopt(*got)
                return got[0]
        return None

    # -- the server check (service.py runs it) ---------------------------------------

    def check_in(self) -> float | None:
        """Seconds until the servers are to be tried again off the lookup path: while
        offline, the backoff's retry; on an ``ldap_backup_uri`` server, the return to
        the preferred ones (failover_primary_timeout); None when neither is due."""
        if not self.online:
            return self.retry_in
        if self.info is not None and self.cfg.ldap_uri and self.info.uri not in self.cfg.ldap_uri:
            since = self.clock() - self.connected_at
            return max(0.0, self.cfg.failover_primary_timeout - since)
        return None

    def probe(self) -> Probe:
        """Try the servers as connect() would — every server while offline, the
        preferred ones while on a backup — in order, touching none of this client's
        state, so it can run in a thread of its own while lookups go on. The first
        connection made is kept for :meth:`after_probe` to adopt."""
        uris = self.uris if not self.online else list(self.cfg.ldap_uri)
        out = Probe()
        with self.counters.timer(LDAP_CONNECT):
            for uri in uris:
                got = self._attempt(uri)
                if isinstance(got, str):
                    out.failed[uri] = got
                    continue
                out.uri, out.conn, out.info = uri, *got
                break
        return out

    def after_probe(self, probe: Probe) -> None:
        """What a probe found, taken on the thread that runs lookups, with no network
        I/O: its connection adopted (back online, or back on a preferred server from a
        backup); or, offline, the next backoff step; or, on a backup, the preferred
        servers tried again after another failover_primary_timeout. A probe that the
        state moved past meanwhile (a lookup reconnected) is discarded."""
        for uri, reason in probe.failed.items():
            self.failed[uri] = reason
        if not self.online:
            if probe.conn is None or probe.info is None:
                self._go_offline("; ".join(self.failed.values()) or "no ldap_uri configured")
                return
            log.info("domain %s back online via %s", self.cfg.name, probe.uri)
            _discard(self.conn)
            self._adopt(probe.conn, probe.info)
            return
        if self.check_in() is None:
            _discard(probe.conn)  # no longer on a backup: a lookup got there first
            return
        if probe.conn is None or probe.info is None:
            self.connected_at = self.clock()  # on the backup for another period
            return
        log.info("domain %s back on %s", self.cfg.name, probe.uri)
        _discard(self.conn)
        self.failed.pop(probe.uri, None)
        self._adopt(probe.conn, probe.info)

    def begin_warm_up(self) -> concurrent.futures.Future[Probe]:
        """The start's probe (service.py runs :meth:`probe` in a thread of its own
        and sets the result): until it is taken, a lookup that needs a connection
        waits for it instead of making a second one to the same servers."""
        self._warm = concurrent.futures.Future()
        return self._warm

    def take_warm_up(self) -> None:
        """On the thread that runs lookups: the start's probe taken, waiting for it if
        it still runs (bounded by its own connection timeouts, which a lookup
        connecting itself would wait as well). Its connection is adopted when none
        was made meanwhile. Servers it found failing are skipped, as :meth:`_try`
        skips them, unless every server failed: then nothing is recorded and the
        first lookup tries them all afresh (a daemon started before its server,
        at boot, must not be offline for offline_timeout from then on)."""
        fut, self._warm = self._warm, None
        if fut is None:
            return
        try:
            probe = fut.result()
        except Exception as e:  # the thread's own failure: as if there had been no probe
            log.debug("domain %s: connecting at the start: %s", self.cfg.name, _describe(e))
            return
        if any(u not in probe.failed for u in self.uris):
            for uri, reason in probe.failed.items():
                self._server_failed(uri, reason)
        elif probe.failed:
            why = "; ".join(probe.failed.values())
            log.info("domain %s: no server answered at the start (%s); the first lookup "
                     "tries them again", self.cfg.name, why)  # fmt: skip
        if probe.conn is None or probe.info is None or self.conn is not None or not self.online:
            _discard(probe.conn)
            return
        log.debug("domain %s connected to %s at the start", self.cfg.name, probe.uri)
        self._adopt(probe.conn, probe.info)

    def _adopt(self, conn: ldap3.Connection, info: ServerInfo) -> None:
        self.conn, self.info = conn, info
        self.connected_at = self.clock()
        self.retry_at = 0.0
        self.backoff = 0.0
        self.last_error = ""

    def probe_failed(self, reason: str) -> None:
        """The check itself failed (a thread that could not start, an error no server
        explains): offline, the next backoff step; on a backup, another period."""
        if not self.online:
            self._go_offline(f"checking the servers failed: {reason}")
        elif self.check_in() is not None:
            self.connected_at = self.clock()

    # -- searching -----------------------------------------------------------------

    def search(
        self,
        base: str,
        filt: str,
        attrs: list[str],
        *,
        scope: str = "sub",
        deref_specs: list[tuple[str, list[str]]] | None = None,
        deref_seen: set[bytes] | None = None,
        asq: str = "",
        max_entries: int = 0,
    ) -> list[Entry]:
        """One logical search (all pages), counted once (reference §5.1), within one
        ``ldap_search_timeout`` on each server it is tried on. ``deref_seen``: DNs
        (raw derefVal bytes) already dereferenced, whose copies give no result.
        ``asq``: an attribute for the ASQ control (base searches; the caller checks
        that the root DSE lists it). ``max_entries``: raise :class:`LdapTooMany` once
        a page takes the answer past it (no further page is asked for)."""
        spec = Search(base, filt, attrs, scope, deref_specs, asq, max_entries)
        (got,) = self.search_many([spec], deref_seen)
        if isinstance(got, LdapError):
            raise got
        return got

    def search_rows(
        self, base: str, filt: str, attrs: list[str], *, scope: str = "sub", max_entries: int = 0
    ) -> list[Row]:
        """Like :meth:`search`, each entry as a row: (DN, [values of each of ``attrs``,
        in its order; [] where the entry has none]), attribute types matched without
        regard to case as :meth:`Entry.get` does, ranged values (AD) not completed.
        For searches of thousands of small entries (the sweep of the user bases):
        most are read by entry.decode_row, and no Entry is built."""
        rows: list[Row] = []
        spec = Search(base, filt, attrs, scope, max_entries=max_entries, rows=rows)
        (got,) = self.search_many([spec])
        if isinstance(got, LdapError):
            raise got
        return rows

    def send_ahead(self, specs: list[Search]) -> None:
        """Send unpaged searches now, on the open connection, so that the server
        works on them while the caller works on what it has (the user sweep while
        its group entry is read: provider._group); the next :meth:`search_many` of
        the same Search objects reads their answers. Any other search reads them
        first and drops them (as :meth:`drop_ahead` does), so a caller that
        changes its mind leaves the connection as it found it. Nothing is raised:
        a search that could not go out is sent by that search_many, with its
        reconnect and failover rules."""
        conn = self.conn
        if conn is None or conn.closed or self._ahead or len(specs) > OUTSTANDING:
            return
        try:
            reqs = [self._request(s, None) for s in specs]
        except LdapError:
            return  # the filter: search_many says so
        if any(r.page for r in reqs):
            return  # one paged search at a time: _exchange
        sent: dict[int, _Request] = {}
        try:
            with _deadline(conn, self.cfg.ldap_search_timeout):
                for r in reqs:
                    self._send(conn, r, sent)
        except (LdapError, *_NETWORK_ERRORS):
            self._count_unread(sent.values())  # gone with the connection _send closed
            return  # search_many reconnects
        self._ahead, self._ahead_conn = sent, conn

    def drop_ahead(self) -> None:
        """Read and drop the answers of searches sent ahead and not asked for. Never
        raises (it runs as a lookup ends, failing or not): a connection that fails
        meanwhile is closed, and the next search connects as after any failure."""
        conn = self.conn
        sent = self._take_ahead(conn)
        if conn is None or not sent:
            return
        try:
            with _deadline(conn, self.cfg.ldap_search_timeout):
                self._exchange(conn, [], sent)
        except (*_NETWORK_ERRORS, *_UNDECODABLE, LdapError, LdapMessageTooLarge):
            self.close()
        self._count_unread(sent.values())

    def _count_unread(self, reqs: Iterable[_Request]) -> None:
        """Searches that went out and whose answers nobody asked for (dropped, or gone
        with their connection): counted all the same, as slapd's log counts them."""
        for r in reqs:
            self.counters.add(LDAP_SEARCH, 1, 0.0, r.count())

    def _take_ahead(self, conn: ldap3.Connection | None) -> dict[int, _Request]:
        """The searches sent ahead on ``conn``, now this exchange's to read; those
        sent on a connection since replaced are gone with it (counted: the server
        may have run them)."""
        ahead, self._ahead = self._ahead, {}
        if self._ahead_conn is not conn:
            self._count_unread(ahead.values())
            return {}
        # Their ldap_search_timeout runs from now, as for a search sent now: the
        # caller's work since they went out is not the server's time (a pause of
        # the timeout's length there failed a healthy server: found in review).
        deadline = time.monotonic() + self.cfg.ldap_search_timeout
        for r in ahead.values():
            r.deadline = deadline
        return ahead

    def search_many(
        self, specs: list[Search], deref_seen: set[bytes] | None = None
    ) -> list[list[Entry] | LdapLimitExceeded]:
        """Several independent searches on the one connection, sent together where
        the server allows it (several message ids outstanding, RFC 4511 §4.1.1.1;
        paged searches one at a time, see _exchange), the next sent the moment the
        last is done. Each is counted as one search; all share one
        ``ldap_search_timeout``. A search cut by a server limit gives its
        LdapLimitExceeded in its place (the caller splits it); any other failure
        fails them all, after the reconnect-once and failover rules of ``search``.
        Searches of ``specs`` sent ahead (send_ahead) on this connection are read,
        not sent again; others sent ahead are read too, their answers dropped."""
        start = time.perf_counter()
        reqs = [self._request(s, deref_seen) for s in specs]
        dropped: list[_Request] = []
        resets = 0
        try:
            while True:
                conn = self.connect()  # LdapOffline when no server is left
                uri = self.info.uri if self.info else "?"
                sent = self._take_ahead(conn)
                if sent:
                    mine = {id(r.spec): r for r in sent.values()}
                    reqs = [mine.pop(id(r.spec), r) for r in reqs]
                    dropped += mine.values()
                for r in reqs:
                    r.reset()  # one sent ahead has read nothing yet: a no-op
                try:
                    with _deadline(conn, self.cfg.ldap_search_timeout):
                        self._exchange(conn, reqs, sent)
                    for r in reqs:
                        if r.error is not None and not isinstance(r.error, LdapLimitExceeded):
                            raise r.error
                    # Ranged values (AD): base searches of their own, in one more deadline.
                    with _deadline(conn, self.cfg.ldap_search_timeout):
                        for r in reqs:
                            if r.error is None:
                                for e in r.entries:
                                    self._fill_ranges(conn, e)
                    return [r.error if isinstance(r.error, LdapLimitExceeded) else r.entries
                            for r in reqs]  # fmt: skip
                except LdapMessageTooLarge as e:
                    # The data, not the server: this request fails, the stream is lost.
                    self.close()
                    raise LdapError(f"search of {reqs[0].spec.base!r}: {e}") from None
                except LdapTimeout:
                    # A hung or trickling server: never wait on it twice.
                    self._server_failed(
                        uri, f"{uri}: search timed out after {self.cfg.ldap_search_timeout} s"
                    )
                except _UNDECODABLE as e:
                    self.close()
                    self._server_failed(uri, f"{uri}: undecodable answer ({_describe(e)})")
                except _NETWORK_ERRORS as e:
                    # The connection died (server restarted, idle timeout): reconnect
                    # once; a second failure marks the server failed.
                    self.close()
                    if resets:
                        self._server_failed(uri, f"{uri}: {_describe(e)}")
                    resets += 1
        finally:
            took = (time.perf_counter() - start) / max(len(reqs), 1)
            for r in reqs:
                self.counters.add(LDAP_SEARCH, 1, took, r.count())
            self._count_unread(dropped)

    def _request(self, spec: Search, deref_seen: set[bytes] | None) -> _Request:
        controls: list[Control] = []
        if spec.deref_specs:
            # Critical, as SSSD sends it (§6.2): a server that cannot honour it must
            # say so rather than silently return entries without the values.
            controls.append((deref.DEREF_OID, True, deref.encode_request(spec.deref_specs)))
        info = self.info
        page = self.cfg.ldap_page_size
        paged = spec.paged and page > 0 and info is not None and PAGED_RESULTS_OID in info.controls
        if spec.asq:
            # Critical, as SSSD sends it; not paged (one base entry's values: Samba
            # returned 5,000 members in one answer, 2.7 s).
            controls.append((ASQ_OID, True, encode_asq(spec.asq)))
            paged = False
        try:
            filt = wire.encode_filter(spec.filt)
        except wire.FilterError as e:
            raise LdapError(f"search of {spec.base!r}: {e}") from None
        return _Request(spec, filt, controls, page if paged else 0, deref_seen)

    def _exchange(
        self, conn: ldap3.Connection, reqs: list[_Request], sent: dict[int, _Request]
    ) -> None:
        """Send the requests, at most OUTSTANDING at a time, and read until each has
        its last page: entries by entry.py's readers, results by
        wire.decode_response. A paged search sends its next page as soon as a page is
        done. Each search has its own ``ldap_search_timeout`` from its first page
        (all its pages, as one search alone has), so a level of fifty batches is not
        held to the time of one; a server that answers none fails at the first.

        slapd keeps one paged-results state per connection: a paged request sent
        while another's pages go on makes that one's cookie "invalid or old"
        (unwillingToPerform, measured). So one paged search is outstanding at a
        time; unpaged ones (no paging on the server, ASQ) go out together. Running
        the first pages together and re-running alone those that needed a next page
        cost 4 more searches of 9 on bigroupuser without the deref control (batches
        of 1,000 look-ups end exactly at a page boundary), so it is not done.
        ``sent``: requests already on the wire (send_ahead), by message ID."""
        strategy = conn.strategy
        timeout = self.cfg.ldap_search_timeout
        on_wire = set(map(id, sent.values()))
        queue = [r for r in reversed(reqs) if id(r) not in on_wire]
        pending: dict[int, _Request] = dict(sent)
        # The outstanding requests that want rows, by message ID (entry.decode_row).
        row_slots = {m: r.slots for m, r in sent.items() if r.slots is not None}

        def can_start(r: _Request) -> bool:
            return not r.page or not any(x.page for x in pending.values())

        def start() -> None:
            r = queue.pop()
            r.deadline = time.monotonic() + timeout
            send(r)

        def send(r: _Request) -> None:
            setattr(conn, _DEADLINE_ATTR, min(x.deadline for x in (r, *pending.values())))
            msgid = self._send(conn, r, pending)
            if r.slots is not None:
                row_slots[msgid] = r.slots

        def fill() -> None:
            while queue and len(pending) < OUTSTANDING and can_start(queue[-1]):
                start()

        fill()
        ber = 0.0
        t_start = time.perf_counter()
        # Message ids whose next page went out before their entries were read.
        early: set[int] = set()
        try:
            while pending:
                setattr(conn, _DEADLINE_ATTR, min(r.deadline for r in pending.values()))
                messages = _receiving_linear(strategy)
                if not messages:
                    _close_quietly(strategy)
                    raise lexc.LDAPSessionTerminatedByServerError("session terminated by server")
                t0 = time.perf_counter()
                ahead = _page_ahead(messages[-1], pending)
                if ahead is not None:
                    # The page ends in this batch: its next page is asked for now,
                    # and slapd works on it while the entries ahead are read.
                    early.add(ahead)
                    send(pending[ahead])
                i, count = 0, len(messages)
                while i < count:
                    if row_slots:
                        # The rows from here on, put in their searches' rows, up to
                        # the first message that is not one (entry.decode_rows).
                        i = reader.decode_rows(messages, i, row_slots)
                        if i == count:
                            break
                    m = messages[i]
                    i += 1
                    plain = reader.decode_entry(m, _ATTR_NAMES, _ATTR_NAMES_MAX)
                    if plain is not None:
                        got = pending.get(plain[0])
                        if got is None:
                            raise lexc.LDAPSocketReceiveError("invalid messageId received")
                        got.plain(plain[1], plain[2])
                        continue
                    e = reader.decode_search_entry(m)
                    if e is not None:
                        got = pending.get(e.message_id)
                        if got is None:
                            raise lexc.LDAPSocketReceiveError("invalid messageId received")
                        got.entry(e)
                        continue
                    res = wire.decode_response(m)
                    req = pending.get(res.message_id)
                    if req is None:
                        if res.message_id == 0:  # unsolicited (RFC 4511 §4.4)
                            _close_quietly(strategy)
                            raise lexc.LDAPSessionTerminatedByServerError(
                                "session terminated by server"
                                f" ({res.message.decode('utf-8', 'replace')[:200]})"
                            )
                        raise lexc.LDAPSocketReceiveError("invalid messageId received")
                    if res.op != wire.SEARCH_RESULT_DONE:
                        continue  # continuation references, intermediate responses
                    del pending[res.message_id]
                    row_slots.pop(res.message_id, None)
                    if self._done(req, res) and res.message_id not in early:
                        send(req)  # the next page
                    fill()
                ber += time.perf_counter() - t0
        finally:
            # Reading our own BER (entries, deref values) apart from the rest: the
            # server, the network and the receive loop (`cached perf`, reference §5.4).
            self.counters.add(LDAP_BER, 0, ber)
            self.counters.add(LDAP_WAIT, 0, time.perf_counter() - t_start - ber)

    def _send(self, conn: ldap3.Connection, r: _Request, pending: dict[int, _Request]) -> int:
        sock = conn.socket
        if sock is None or conn.closed:
            raise lexc.LDAPSocketOpenError("unable to send message, socket is not open")
        msgid: int = conn.server.next_message_id()
        controls = r.controls
        if r.page:
            controls = [*controls, paged_control(r.page, r.cookie)]
        data = wire.encode_search(
            msgid, r.spec.base, wire.SCOPES[r.spec.scope], r.filt, r.spec.attrs,
            time_limit=self.cfg.ldap_search_timeout, size_limit=r.spec.size_limit,
            controls=controls,
            # Never follow aliases, as SSSD (ldap_deref unset): an alias under the
            # base must not make an entry from elsewhere visible (item 10).
            deref_aliases=0,
        )  # fmt: skip
        deadline: float | None = getattr(conn, _DEADLINE_ATTR, None)
        try:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("deadline passed")
                sock.settimeout(left)
            sock.sendall(data)
        except TimeoutError:
            _close_quietly(conn.strategy)
            raise LdapTimeout(f"{conn.server.name}: timed out sending a request") from None
        except OSError as e:
            _close_quietly(conn.strategy)
            raise lexc.LDAPSocketSendError(f"error sending data: {e}") from None
        pending[msgid] = r
        return msgid

    def _done(self, r: _Request, res: wire.Response) -> bool:
        """Take a searchResDone; True when another page is to be asked for."""
        code = res.code
        spec = r.spec
        if code in (3, 4):  # timeLimitExceeded, sizeLimitExceeded (RFC 4511 §4.1.9)
            r.error = self._limit(spec.base, spec.filt, code, r.count())
            return False
        if code == 32:  # noSuchObject: the base is not there, nothing under it
            return False
        if code not in (0, 10):  # success; referral (never chased, as before)
            r.error = LdapError(
                f"search of {spec.base!r} for {spec.filt[:200]!r} failed: "
                f"{RESULT_CODES.get(code, 'result')} ({code})"
                + (f": {res.message.decode('utf-8', 'replace')[:300]}" if res.message else "")
            )
            return False
        if spec.max_entries and r.count() > spec.max_entries:
            # The server keeps the abandoned page state until the connection ends or
            # newer paged searches evict it (Samba and Windows keep a few).
            r.error = LdapTooMany(f"search of {spec.base!r} passed {spec.max_entries} entries")
            return False
        if not r.page:
            return False
        r.cookie = paged_cookie(res.controls.get(PAGED_RESULTS_OID.encode()))
        return bool(r.cookie)

    def _fill_ranges(self, conn: ldap3.Connection, e: Entry) -> None:
        """Complete the ranged values of ``e`` (``member;range=0-1499``: a Windows DC
        returns at most MaxValRange values of an attribute per entry, Samba does when
        asked): base searches for ``member;range=<next>-*`` until the server says
        ``*`` (RFC-less, [MS-ADTS] 3.1.1.3.1.3.3). Each is a search of its own, so
        the entry can change between them: a value removed from a range already read
        shifts the later ones, and one still there is skipped. Each search asks for
        the entry's USN too (AD: ``uSNChanged``, which every write moves); when it is
        not the one the entry was first read with (or that was not asked for), every
        ranged attribute is read again from 0, so the values are one version's."""
        pending = merge_ranges(e.attrs, e.dn)
        ranged = set(pending)
        usn = self.cfg.ldap_group_entry_usn.lower()
        stamp: bytes | None = (e.attrs.get(usn) or [b""])[0] or None if usn else None
        restarts = 0
        while pending:
            name, start = pending.popitem()
            t0 = time.perf_counter()
            try:
                conn.search(
                    e.dn, "(objectClass=*)", ldap3.BASE,
                    attributes=[f"{name};range={start}-*", *([usn] if usn else [])],
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
            now = (more.pop(usn, None) or [b""])[0] or None if usn else None
            if now is not None and now != stamp:
                if restarts >= RANGE_RESTARTS:
                    raise LdapError(f"{e.dn}: changed while its ranges of {name} were read, "
                                    f"{restarts + 1} times")  # fmt: skip
                restarts += 1
                stamp = now
                e.attrs[usn] = [now]  # the stamp stored with the values is theirs
                for a in ranged:
                    e.attrs[a] = []
                pending = dict.fromkeys(ranged, 0)
                continue  # this answer is dropped with the rest: read again from 0
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
