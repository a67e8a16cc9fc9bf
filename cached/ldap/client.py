"""The domain's LDAP client: its servers, failover, the offline state and the probe.

The top of the read path (codec: ber, controls, deref, entry, wire; transport:
framing, connection; orchestration: exchange, this module). It owns the list of
servers and failover (``ldap_uri`` then ``ldap_backup_uri``), the connection to the
one in use (StartTLS or LDAPS with certificate checks, anonymous, simple and SASL
EXTERNAL binds, the root DSE: connection.py and exchange.py do the work), and
the domain's online/offline state (reference §6.4): after every server failed, the
domain is offline and requests fail at once until ``offline_timeout`` passes, which
doubles up to ``offline_timeout_max`` plus this host's offset (cached/jitter.py) where
SSSD's backend adds a random one.

Failures: a server that does not answer within its deadline is marked failed
for this round and the next URI is tried at once; it is never waited on twice. A reset
or EOF (server restarted, idle connection dropped) may reconnect once. When every URI of
the round failed the domain is offline. Deadlines bound whole operations, not socket
reads: ``ldap_search_timeout`` one search with all its pages, run again from each batch
of messages read, up to a bound (exchange.PROGRESS_BOUND: a server that
answers slowly fails that search, not the server),
``ldap_opt_timeout`` StartTLS + bind + root DSE. While a backup URI serves, the
``ldap_uri`` servers are tried again every ``failover_primary_timeout`` seconds, as
SSSD's fail over does (sssd.conf(5) ``failover_primary_timeout``). A connection is
replaced after ``ldap_connection_expire_timeout`` plus this host's share of
``ldap_connection_expire_offset`` (sssd-ldap(5)), so that the servers behind a name or a
load balancer share the fleet again after one restarted, at a moment that differs between
hosts (SSSD PR #951: with its default offset of 0 a fleet reconnects in step).

With ``id_provider = ad`` the servers may be ``_srv_`` (discovery.py: the DNS SRV
records of the domain, looked up again at each new round and every ``SRV_TTL``), and
the bind is SASL GSSAPI as the host (kerberos.py: a ticket from the keytab into the
backend's own ccache; connection.py: the signed and sealed session).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cached.config import DomainConfig
from cached.config.rules import SRV_MARKER, ad_uri
from cached.counters import COUNTERS, LDAP_CONNECT, LDAP_SEARCH, REFRESH_PACED, Counters
from cached.jitter import CONNECTION_EXPIRE, OFFLINE_RETRY, Jitter
from cached.ldap.connection import (
    BindRefused,
    Connection,
    LdapMessageTooLarge,
    LdapTimeout,
    TransportError,
)
from cached.ldap.exchange import (
    UNDECODABLE,
    Entry,
    Exchange,
    LdapError,
    LdapLimitExceeded,
    LdapSlow,
    Request,
    Row,
    Search,
    ServerInfo,
)
from cached.ldap.pacing import Pacer

if TYPE_CHECKING:
    # Imported where used: gssapi (a GSSAPI bind) and dnspython (``_srv_``) are no cost
    # of a backend whose domain needs neither.
    from cached.ldap.kerberos import HostIdentity

log = logging.getLogger(__name__)


class LdapOffline(LdapError):
    """No server is reachable; the domain is offline until the retry time."""


# A connection that failed: refused, reset, EOF, TLS, a stream out of step.
_NETWORK_ERRORS = (TransportError, OSError)
# The marker URI of ad_server = _srv_ (rules.ad_uri), expanded from DNS.
SRV_URI = ad_uri(SRV_MARKER)
# Seconds a DNS discovery is used before the records are read again (the start of a
# new round, after every server failed, reads them at once).
SRV_TTL = 900.0


@dataclass
class Probe:
    """What :meth:`LdapClient.probe` found: the first server that answered with its
    bound connection and root DSE (None: none did), and why each before it failed."""

    uri: str = ""
    conn: Connection | None = None
    info: ServerInfo | None = None
    failed: dict[str, str] = field(default_factory=dict)


class LdapClient:
    def __init__(
        self,
        cfg: DomainConfig,
        counters: Counters = COUNTERS,
        clock: Callable[[], float] = time.monotonic,
        jitter: Jitter | None = None,
        ccache_dir: str = "",
    ) -> None:
        """``ccache_dir``: where the host's ticket cache lives (GSSAPI binds; the
        backend passes db_dir); without one, a cache in this process's memory."""
        self.cfg = cfg
        self.counters = counters
        self.clock = clock
        # This host's offsets (the backend passes the machine-id's); without one, a
        # key of this client's own, as spread as a random draw per client.
        self.jitter = jitter or Jitter(os.urandom(32))
        # The preferred servers and the backups: ldap_uri and ldap_backup_uri, with
        # ad_server's _srv_ expanded (_discover).
        self.primary = list(cfg.ldap_uri)
        self.uris = list(cfg.ldap_uri) + list(cfg.ldap_backup_uri)
        self._srv = SRV_URI in self.uris
        self._discovered_at: float | None = None
        self.discovery_error = ""
        self.identity: HostIdentity | None = None
        # What a failed GSSAPI bind raises; nothing without one (``except ()``).
        self._kerberos_errors: tuple[type[Exception], ...] = ()
        if cfg.ldap_sasl_mech == "gssapi":
            from cached.ldap.kerberos import HostIdentity, KerberosError

            self._kerberos_errors = (KerberosError,)
            realm = cfg.krb5_realm
            ccache = (
                f"FILE:{os.path.join(ccache_dir, 'ccache_' + realm)}"
                if ccache_dir
                else f"MEMORY:cached_{cfg.name}"
            )
            self.identity = HostIdentity(cfg.ldap_sasl_authid, cfg.ldap_krb5_keytab, ccache, realm)
        self.conn: Connection | None = None
        self.info: ServerInfo | None = None
        self.exchange = Exchange(cfg, counters)
        self.retry_at = 0.0  # offline until then
        self.backoff = 0.0
        self.last_error = ""
        self.went_offline = 0.0  # wall-clock time the domain went offline
        # Servers that failed in this round (a round ends when the domain goes offline
        # or the preferred servers are tried again), with why; never tried twice.
        self.failed: dict[str, str] = {}
        self.connected_at = 0.0  # clock() when self.conn was made
        # Whether connect() tries the servers again once the backoff has passed, and
        # the preferred ones after failover_primary_timeout on a backup. Off, as the
        # backend service runs it: the server check (probe, after_probe) does that
        # instead, so that no lookup waits on a server that hangs (service.py,
        # _server_check). On for a client with no server check beside it.
        self.retry_in_lookups = False
        # The start's probe while not taken yet (begin_warm_up, take_warm_up).
        self._warm: concurrent.futures.Future[Probe] | None = None
        # The pace of background requests' searches (cached/ldap/pacing.py); the
        # backend sets it, a client without one searches at full speed.
        self.pacer: Pacer | None = None

    # -- state ---------------------------------------------------------------------

    @property
    def online(self) -> bool:
        return self.retry_at == 0.0

    def close(self) -> None:
        _discard(self.conn)
        self.conn = None

    def _go_offline(self, reason: str) -> LdapOffline:
        # Reference §6.4: retry after offline_timeout, doubling up to the max, plus an
        # offset so many clients do not reconnect in step: this host's share of it,
        # the same at every step and after restarts (SSSD draws it at random).
        if self.backoff == 0.0:
            self.backoff = float(self.cfg.offline_timeout)
            self.went_offline = time.time()
        else:
            self.backoff = min(self.backoff * 2, float(max(self.cfg.offline_timeout_max, 1)))
        offset = self.jitter.offset(OFFLINE_RETRY, self.cfg.offline_timeout_random_offset)
        self.retry_at = self.clock() + self.backoff + offset
        self.last_error = reason
        self.failed.clear()  # the next attempt is a new round over every server
        self._discovered_at = None  # and reads the DNS records again
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

    def _discover(self) -> None:
        """Expand ``_srv_`` from DNS when due: the site's DCs (or all) in place of the
        marker among the preferred servers, the others among the backups. When DNS
        fails the previous list stays; with none, the marker stays and fails with
        the DNS error (``_attempt``)."""
        if not self._srv:
            return
        now = self.clock()
        if self._discovered_at is not None and now - self._discovered_at < SRV_TTL:
            return
        from cached.ldap import discovery

        cfg = self.cfg
        try:
            local, others, site = discovery.domain_controllers(
                cfg.ad_domain,
                cfg.ad_site,
                float(cfg.ldap_network_timeout),
                find_site=cfg.ad_enable_dns_sites,
            )
        except discovery.DiscoveryError as e:
            self.discovery_error = str(e)
            log.warning("domain %s: no DCs found: %s", cfg.name, e)
            return
        if not local and not others:
            self.discovery_error = f"no SRV record names a DC of {cfg.ad_domain}"
            return
        self.discovery_error = ""
        self._discovered_at = now

        def expand(uris: list[str], found: list[str]) -> list[str]:
            out: list[str] = []
            for u in uris:
                for v in found if u == SRV_URI else [u]:
                    if v not in out:
                        out.append(v)
            return out

        primary = expand(list(cfg.ldap_uri), local or others)
        backup = [u for u in expand(list(cfg.ldap_backup_uri), local or others) if u not in primary]
        backup += [u for u in (others if local else []) if u not in primary + backup]
        if primary + backup != self.uris:
            log.info(
                "domain %s: DCs from DNS%s: %s",
                cfg.name,
                f" (site {site})" if site else "",
                ", ".join(primary + backup),
            )
        self.primary, self.uris = primary, primary + backup

    def _connect_one(self, uri: str) -> tuple[Connection, ServerInfo]:
        """Connect (``ldap_network_timeout``), then StartTLS, bind and read the root DSE
        within one ``ldap_opt_timeout`` deadline."""
        cfg = self.cfg
        conn = Connection.open(
            uri,
            connect_timeout=cfg.ldap_network_timeout,
            receive_timeout=cfg.ldap_opt_timeout,
            tls_verify=verifies_certificates(cfg),
            ca_file=cfg.ldap_tls_cacert,
            ca_dir=cfg.ldap_tls_cacertdir,
        )
        try:
            with conn.deadline_in(cfg.ldap_opt_timeout):
                if uri.split("://", 1)[0].lower() == "ldap" and cfg.ldap_id_use_start_tls:
                    conn.start_tls()
                if self.identity is not None:
                    host = urllib.parse.urlsplit(uri).hostname or ""
                    conn.bind_gssapi(self.identity.context(host), min_ssf=cfg.ldap_sasl_minssf)
                    log.info(
                        "domain %s: bound to %s as %s (GSSAPI, SASL layer %s)",
                        cfg.name,
                        uri,
                        self.identity.principal,
                        conn.sasl_layer or "none",
                    )
                elif cfg.ldap_sasl_mech == "external":
                    conn.bind(sasl_mechanism="EXTERNAL")
                elif cfg.ldap_default_bind_dn:
                    conn.bind(cfg.ldap_default_bind_dn, cfg.ldap_default_authtok)
                else:
                    conn.bind()
                info = self.exchange.root_dse(conn, uri)
        except BaseException:
            conn.unbind()
            raise
        return conn, info

    def connection_lifetime(self) -> float:
        """Seconds a connection is used before it is replaced: the timeout plus this
        host's share of the offset; 0: kept until it fails."""
        timeout = self.cfg.ldap_connection_expire_timeout
        if not timeout:
            return 0.0
        spread = self.cfg.ldap_connection_expire_offset
        return timeout + self.jitter.offset(CONNECTION_EXPIRE, spread)

    def _expired(self) -> bool:
        """The connection in use has reached its lifetime."""
        life = self.connection_lifetime()
        return self.conn is not None and bool(life) and self.clock() - self.connected_at >= life

    def _primary_due(self) -> bool:
        """Connected to an ``ldap_backup_uri`` server for ``failover_primary_timeout``:
        time to try the ``ldap_uri`` servers again (sssd.conf(5))."""
        return (
            self.info is not None
            and self.info.uri not in self.primary
            and bool(self.primary)
            and self.clock() - self.connected_at >= self.cfg.failover_primary_timeout
        )

    def naming_context(self, option: str) -> str:
        """The search base for ``option`` when it is not set: the server's default
        naming context from its root DSE (SSSD's ``sdap_set_search_base``), connecting
        first; LdapError naming the option when the server publishes none."""
        self.connect()
        base = self.info.default_base if self.info is not None else ""
        if not base:
            raise LdapError(
                f"domain {self.cfg.name}: {option} is not set and the server publishes "
                f"no naming context; set {option}"
            )
        return base

    def connect(self) -> Connection:
        """The bound connection, connecting (with failover) when needed."""
        if self._warm is not None:
            self.take_warm_up()
        if self.conn is not None:
            if not self.retry_in_lookups or not (self._primary_due() or self._expired()):
                return self.conn
            return self._back_to_primary()
        if self.retry_at and (not self.retry_in_lookups or self.clock() < self.retry_at):
            raise LdapOffline(self.last_error or "offline")
        self._discover()
        conn = self._try(self.uris)
        if conn is None:
            raise self._go_offline("; ".join(self.failed.values()) or "no ldap_uri configured")
        return conn

    def _back_to_primary(self) -> Connection:
        assert self.conn is not None and self.info is not None
        backup = self.conn, self.info
        self.conn = self.info = None
        for uri in self.primary:
            self.failed.pop(uri, None)
        conn = self._try(list(self.primary))
        if conn is not None:
            _discard(backup[0])
            return conn
        # The preferred servers still fail: stay on the backup, try again later.
        self.conn, self.info = backup
        self.connected_at = self.clock()
        return backup[0]

    def _attempt(self, uri: str) -> tuple[Connection, ServerInfo] | str:
        """A bound connection to ``uri`` and its root DSE, or why there is none."""
        if uri == SRV_URI:
            return f"DNS discovery: {self.discovery_error or 'no DC found'}"
        try:
            return self._connect_one(uri)
        except LdapTimeout:
            return (
                f"{uri}: StartTLS, bind and root DSE timed out after "
                f"ldap_opt_timeout = {self.cfg.ldap_opt_timeout} s"
            )
        except BindRefused as e:
            if e.code == 49:
                who = self.cfg.ldap_default_bind_dn
                return f"{uri}: bind as {who!r} refused (invalid credentials)"
            return f"{uri}: {e}"
        except (LdapError, *_NETWORK_ERRORS) as e:
            return f"{uri}: {_describe(e)}"
        except self._kerberos_errors as e:
            return f"{uri}: {e}"
        except (*UNDECODABLE, LdapMessageTooLarge) as e:
            # Bytes that are not LDAP: a broken server.
            return f"{uri}: undecodable answer ({_describe(e)})"

    def _try(self, uris: list[str]) -> Connection | None:
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
        the preferred ones (failover_primary_timeout); connected, the connection's
        replacement (connection_lifetime); None when none is due."""
        if not self.online:
            return self.retry_in
        since = self.clock() - self.connected_at
        due: list[float] = []
        if self.info is not None and self.primary and self.info.uri not in self.primary:
            due.append(self.cfg.failover_primary_timeout - since)
        if self.conn is not None and (life := self.connection_lifetime()):
            due.append(life - since)
        return max(0.0, min(due)) if due else None

    def probe(self) -> Probe:
        """Try the servers as connect() would — every server while offline, the
        preferred ones while on a backup — in order, touching none of this client's
        state, so it can run in a thread of its own while lookups go on. The first
        connection made is kept for :meth:`after_probe` to adopt."""
        self._discover()
        uris = self.uris if not self.online else list(self.primary)
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
        if self.check_in() != 0.0:
            # No longer due: a lookup reconnected meanwhile (no longer on a backup, or
            # a fresh connection).
            _discard(probe.conn)
            return
        if probe.conn is None or probe.info is None:
            # The preferred servers do not answer: keep the connection that works,
            # for another period.
            self.connected_at = self.clock()
            return
        if self.info is not None and self.info.uri == probe.uri:
            log.debug("domain %s: connection to %s renewed", self.cfg.name, probe.uri)
        else:
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

    def _adopt(self, conn: Connection, info: ServerInfo) -> None:
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

    def send_ahead(self, specs: list[Search]) -> None:
        """Exchange.send_ahead on the open connection: the next :meth:`search_many`
        of the same Search objects reads their answers. Not while paced: each search
        then goes at its turn (search_many sends it)."""
        if self.pacer is not None and self.pacer.paced:
            return
        self.exchange.send_ahead(self.conn, self.info, specs)

    def drop_ahead(self) -> None:
        """Read and drop the answers of searches sent ahead and not asked for; never
        raises: a connection that fails meanwhile is closed, and the next search
        connects as after any failure."""
        if not self.exchange.drop_ahead(self.conn):
            self.close()

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
        sd_flags: int = 0,
    ) -> list[Entry]:
        """One logical search (all pages), counted once (reference §5.1), within one
        ``ldap_search_timeout`` on each server it is tried on. ``deref_seen``: DNs
        (raw derefVal bytes) already dereferenced, whose copies give no result.
        ``asq``: an attribute for the ASQ control (base searches; the caller checks
        that the root DSE lists it). ``max_entries``: raise :class:`LdapTooMany` once
        a page takes the answer past it (no further page is asked for). ``sd_flags``:
        the SD flags control's value (0: not sent)."""
        spec = Search(base, filt, attrs, scope, deref_specs, asq, max_entries, sd_flags=sd_flags)
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

    def search_many(
        self, specs: list[Search], deref_seen: set[bytes] | None = None
    ) -> list[list[Entry] | LdapLimitExceeded]:
        """Several independent searches on the one connection, sent together where
        the server allows it (several message ids outstanding, RFC 4511 §4.1.1.1;
        paged searches one at a time, see Exchange.run), the next sent the moment the
        last is done. Each is counted as one search; all share one
        ``ldap_search_timeout``. A search cut by a server limit gives its
        LdapLimitExceeded in its place (the caller splits it); any other failure
        fails them all, after the reconnect-once and failover rules of ``search``.
        Searches of ``specs`` sent ahead (send_ahead) on this connection are read,
        not sent again; others sent ahead are read too, their answers dropped.
        While a background request is paced (:attr:`pacer`), the searches go one at
        a time, each at its turn."""
        pacer = self.pacer
        if pacer is not None and pacer.paced:
            if len(specs) > 1:
                return [got for s in specs for got in self.search_many([s], deref_seen)]
            waited = pacer.wait()
            if waited > 0:
                self.counters.add(REFRESH_PACED, 1, waited)
        start = time.perf_counter()
        exchange = self.exchange
        reqs = [exchange.request(s, deref_seen, self.info) for s in specs]
        dropped: list[Request] = []
        resets = 0
        try:
            while True:
                conn = self.connect()  # LdapOffline when no server is left
                uri = self.info.uri if self.info else "?"
                sent = exchange.take_ahead(conn)
                if sent:
                    mine = {id(r.spec): r for r in sent.values()}
                    reqs = [mine.pop(id(r.spec), r) for r in reqs]
                    dropped += mine.values()
                for r in reqs:
                    r.reset()  # one sent ahead has read nothing yet: a no-op
                try:
                    with conn.deadline_in(self.cfg.ldap_search_timeout):
                        exchange.run(conn, reqs, sent)
                    for r in reqs:
                        if r.error is not None and not isinstance(r.error, LdapLimitExceeded):
                            raise r.error
                    # Ranged values (AD): base searches of their own, in one more deadline.
                    with conn.deadline_in(self.cfg.ldap_search_timeout):
                        for r in reqs:
                            if r.error is None:
                                exchange.fill_ranges(conn, r.entries)
                    return [r.error if isinstance(r.error, LdapLimitExceeded) else r.entries
                            for r in reqs]  # fmt: skip
                except LdapSlow:
                    # The server answers, too slowly for this search's bound
                    # (exchange.PROGRESS_BOUND): the search fails, the server stays in
                    # use; the connection goes, its stream holds the rest of the answer.
                    self.close()
                    raise
                except LdapMessageTooLarge as e:
                    # The data, not the server: this request fails, the stream is lost.
                    self.close()
                    raise LdapError(f"search of {reqs[0].spec.base!r}: {e}") from None
                except LdapTimeout:
                    # A hung or trickling server (no message within the timeout): never
                    # wait on it twice.
                    self._server_failed(
                        uri, f"{uri}: search timed out after {self.cfg.ldap_search_timeout} s"
                    )
                except UNDECODABLE as e:
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
            exchange.count_unread(dropped)


def verifies_certificates(cfg: DomainConfig) -> bool:
    """Whether TLS connections check the server's certificate (``ldap_tls_reqcert``).
    `try` verifies as `demand` does: OpenLDAP's `try` ends the session on a bad
    certificate, and a TLS server always presents one (sssd-ldap(5))."""
    return cfg.ldap_tls_reqcert in ("try", "demand", "hard")


def _discard(conn: Connection | None) -> None:
    if conn is not None:
        conn.unbind()


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return f"TLS certificate verification failed ({text})"
    return text
