"""Searches on one connection: the requests on the wire, their pages, the searches
sent ahead, the answers read and sorted to their searches, and the ranged values.

The orchestration below the client (client.py keeps the servers, failover and the
offline state): every search, the root DSE's and the ranged reads' included, is
encoded by wire.py, sent on a :class:`connection.Connection`, and its answers read by
entry.py (entries) and wire.py (the rest). A search that fails gives its error in its
:class:`Request`; a connection that fails raises (connection.TransportError,
LdapTimeout, LdapMessageTooLarge, or a ValueError of bytes that are not LDAP) and the
client decides what that means for the server.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cached.config import DomainConfig
from cached.counters import LDAP_BER, LDAP_SEARCH, LDAP_WAIT, Counters
from cached.ldap import deref, wire
from cached.ldap import entry as reader
from cached.ldap.ber import BerError
from cached.ldap.connection import Connection, LdapMessageTooLarge, LdapTimeout, TransportError
from cached.ldap.controls import (
    ASQ_OID,
    DEREF_OID,
    PAGED_RESULTS_OID,
    SD_FLAGS_OID,
    Control,
    encode_asq,
    encode_sd_flags,
    paged_control,
    paged_cookie,
)

# What decoding bytes that are not the LDAP they claim raises: the BER readers
# (ber.BerError is a ValueError), a resultCode or tag out of range (LookupError). Such a
# server is failed like one that does not answer, so the next URI is tried.
UNDECODABLE = (ValueError, LookupError, TypeError, RecursionError)
ROOT_DSE_ATTRS = ["supportedControl", "supportedCapabilities", "namingContexts",
                  "defaultNamingContext"]  # fmt: skip

# Searches outstanding at once on the connection (LdapClient.search_many): enough for
# the server to work on the next while the client decodes the last (two cores here;
# the walk of bigroupuser has at most 2 per level), few enough to bound what a level
# of many batches makes the server hold at once.
OUTSTANDING = 4
# A search whose server keeps sending is not timed out: its ``ldap_search_timeout``
# runs again from each batch of complete messages read on the connection, up to this
# many times the timeout from its start. A hung or trickling server (no complete
# message within the timeout) is failed as before; a server still answering at the
# bound fails that search only (LdapSlow), and stays in use. SSSD's deadline is per
# page (sdap_get_generic_ext_step arms a new ldap_search_timeout for each page),
# and a timeout there moves to the next server (sdap_id_op_done:
# be_fo_try_next_server), which with one server takes the domain offline: 128 of 200
# hosts went offline when 200 cold lookups on 2 cores took 30 s, their server
# answering all along.
PROGRESS_BOUND = 10
# Times the ranged values of one entry are read again from 0 because the entry changed
# between its range searches (Exchange.fill_entry) before the search fails.
RANGE_RESTARTS = 3

# Rounds of ranged reads of one attribute of one entry before the entry fails. A
# Windows DC returns MaxValRange values per round (1,500 by default since Windows
# Server 2003, 1,000 before; an administrator may lower it), Samba returns every value
# at once unless a range is asked for. The largest group we support has 200,000
# members (framing.MAX_MESSAGE's reckoning): 134 rounds at 1,500, 200 at 1,000. 1,000
# rounds leave 5x headroom over that at MaxValRange 1,000, and stop a server whose
# ranges never end (never ``member;range=N-*``) after 1,000 searches rather than
# after the thousands a search timeout allows.
RANGE_ROUNDS = 1000


class LdapError(Exception):
    """The server answered with an error, or the request could not be made."""


class LdapLimitExceeded(LdapError):
    """The server cut a search at its size or time limit: the entries returned are
    not all there are (docs/compatibility.md §9.5). Every search's result code is checked."""

    def __init__(self, message: str, code: str, partial: int) -> None:
        super().__init__(message)
        self.code = code  # "sizeLimitExceeded" | "timeLimitExceeded"
        self.partial = partial  # entries received before the cut


class LdapRangeError(LdapError):
    """A server's ranged values of an attribute did not end within RANGE_ROUNDS."""


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
    # per connection: paged searches go one at a time, see Exchange.run).
    paged: bool = True
    # A list: the entries are put in it as rows, (DN, the values of each of ``attrs``
    # in its order), with no Entry built; the search's list of entries stays empty
    # (LdapClient.search_rows).
    rows: list[Row] | None = field(default=None, compare=False)
    # The SD flags control's SECURITY_INFORMATION (controls.SD_FLAGS_OID; 0: not sent):
    # which parts of nTSecurityDescriptor AD returns.
    sd_flags: int = 0


class LdapSlow(LdapError):
    """A search whose server kept sending entries until PROGRESS_BOUND times
    ``ldap_search_timeout``: it fails, the server is not failed (it answers)."""


class LdapTooMany(LdapError):
    """A search stopped by its caller's ``max_entries``: the answer is bigger than the
    caller chose to pay for (it falls back to narrower searches)."""


class Request:
    """A search on the wire: its encoded filter and controls, its pages so far."""

    __slots__ = (
        "added", "bound", "code", "controls", "cookie", "deadline", "entries", "error", "filt",
        "page", "rows", "seen", "slots", "spec",
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
        self.deadline = 0.0  # monotonic time the next messages must have come by
        self.bound = 0.0  # the latest the deadline moves to while they come (PROGRESS_BOUND)
        self.code = 0  # the resultCode of its last searchResDone
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
        dn = server_text(raw_dn)
        if self.rows is not None:
            self.rows.append((dn, [attrs.get(a.lower(), []) for a in self.spec.attrs]))
            return
        self.entries.append(Entry(dn, attrs))

    def entry(self, e: reader.SearchEntry) -> None:
        dn = server_text(e.dn)
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
                name = server_text(k).lower()
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


_DEREF_OID = DEREF_OID.encode()
_PAGED_RESULTS_OID = PAGED_RESULTS_OID.encode()


@dataclass
class ServerInfo:
    uri: str
    controls: set[str] = field(default_factory=set)
    capabilities: set[str] = field(default_factory=set)
    naming_contexts: list[str] = field(default_factory=list)
    default_naming_context: str = ""

    @property
    def default_base(self) -> str:
        """The base of a search whose base is not configured, as SSSD takes it from
        the root DSE: defaultNamingContext, else the first namingContexts; "" when the
        server publishes neither."""
        return self.default_naming_context or (
            self.naming_contexts[0] if self.naming_contexts else ""
        )


def server_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # As ldap3 did for what it decoded (its first additional server encoding,
        # which decodes any bytes).
        return raw.decode("latin-1")


def _page_ahead(last: bytes, pending: dict[int, Request]) -> int | None:
    """The message id of the paged search whose page ``last`` ends, when the next page
    can be asked for before the page's entries are read: a success with a cookie, and
    no entry cap to check first (``max_entries``, counted as the entries are read).
    The request's cookie is set; its searchResDone, read in turn, then sends nothing
    (Exchange.run). A whole page often comes in one read (connection.RECV_SIZE):
    reading its 1,000 group entries before asking for the next was the gap between the
    pages of bigroupuser's first level in slapd's log (47 -> 83 ms of a cold
    initgroups)."""
    # Most reads end inside a page, on an entry: its tag alone says so (decoding it
    # whole, as a result, was 3 % of a cold initgroups of bigroupuser, py-spy of
    # testing.replay: 1,174 reads).
    if wire.op_tag(last) != wire.SEARCH_RESULT_DONE or not any(r.page for r in pending.values()):
        return None
    try:
        res = wire.decode_response(last)
        r = pending.get(res.message_id)
        if r is None or not r.page or res.op != wire.SEARCH_RESULT_DONE or res.code != 0:
            return None
        if r.spec.max_entries:
            return None
        cookie = paged_cookie(res.controls.get(_PAGED_RESULTS_OID))
    except (ValueError, IndexError):
        return None  # read again in turn, where what is wrong with it is reported
    if not cookie:
        return None
    r.cookie = cookie
    return res.message_id


class Exchange:
    """The searches of one domain's client: requests built from :class:`Search`,
    sent and read on the client's connection, each within ``ldap_search_timeout``."""

    def __init__(self, cfg: DomainConfig, counters: Counters) -> None:
        self.cfg = cfg
        self.counters = counters
        # The member attribute (the config's rules set it for every schema), whose
        # values the C reader interns (entry.read_entry): a member named by twenty
        # groups is one value object in the request.
        self.interned = frozenset({cfg.ldap_group_member.lower()})
        # Searches sent ahead (send_ahead) and not read yet, by message ID: on
        # ``_ahead_conn`` only (a connection replaced since took them with it).
        self._ahead: dict[int, Request] = {}
        self._ahead_conn: Connection | None = None

    def send_ahead(self, conn: Connection | None, info: ServerInfo | None,
                   specs: list[Search]) -> None:  # fmt: skip
        """Send unpaged searches now, on the open connection, so that the server
        works on them while the caller works on what it has (the user sweep while
        its group entry is read: provider._group); the client's next search_many of
        the same Search objects reads their answers. Any other search reads them
        first and drops them (as :meth:`drop_ahead` does), so a caller that
        changes its mind leaves the connection as it found it. Nothing is raised:
        a search that could not go out is sent by that search_many, with its
        reconnect and failover rules."""
        if conn is None or conn.closed or self._ahead or len(specs) > OUTSTANDING:
            return
        try:
            reqs = [self.request(s, None, info) for s in specs]
        except LdapError:
            return  # the filter: search_many says so
        if any(r.page for r in reqs):
            return  # one paged search at a time: run
        sent: dict[int, Request] = {}
        try:
            with conn.deadline_in(self.cfg.ldap_search_timeout):
                for r in reqs:
                    self.send(conn, r, sent)
        except (LdapError, TransportError):
            self.count_unread(sent.values())  # gone with the connection send closed
            return  # search_many reconnects
        self._ahead, self._ahead_conn = sent, conn

    def drop_ahead(self, conn: Connection | None) -> bool:
        """Read and drop the answers of searches sent ahead and not asked for. Never
        raises (it runs as a lookup ends, failing or not): False when the connection
        failed meanwhile (the caller closes it and the next search connects as after
        any failure)."""
        sent = self.take_ahead(conn)
        if conn is None or not sent:
            return True
        ok = True
        try:
            with conn.deadline_in(self.cfg.ldap_search_timeout):
                self.run(conn, [], sent)
        except (TransportError, LdapMessageTooLarge, *UNDECODABLE, LdapError):
            ok = False
        self.count_unread(sent.values())
        return ok

    def count_unread(self, reqs: Iterable[Request]) -> None:
        """Searches that went out and whose answers nobody asked for (dropped, or gone
        with their connection): counted all the same, as slapd's log counts them."""
        for r in reqs:
            self.counters.add(LDAP_SEARCH, 1, 0.0, r.count())

    def take_ahead(self, conn: Connection | None) -> dict[int, Request]:
        """The searches sent ahead on ``conn``, now this exchange's to read; those
        sent on a connection since replaced are gone with it (counted: the server
        may have run them)."""
        ahead, self._ahead = self._ahead, {}
        if self._ahead_conn is not conn:
            self.count_unread(ahead.values())
            return {}
        # Their ldap_search_timeout runs from now, as for a search sent now: the
        # caller's work since they went out is not the server's time (a pause of
        # the timeout's length there would fail a healthy server).
        for r in ahead.values():
            self.arm(r)
        return ahead

    def arm(self, r: Request, until: float | None = None) -> None:
        """Start ``r``'s deadline: ``ldap_search_timeout`` from now, moved on while
        messages come, up to PROGRESS_BOUND timeouts from now; ``until``: the caller's
        deadline, not moved."""
        if until is not None:
            r.deadline = r.bound = until
            return
        timeout = self.cfg.ldap_search_timeout
        now = time.monotonic()
        r.deadline, r.bound = now + timeout, now + PROGRESS_BOUND * timeout

    def request(
        self, spec: Search, deref_seen: set[bytes] | None, info: ServerInfo | None
    ) -> Request:
        controls: list[Control] = []
        if spec.deref_specs:
            # Critical, as SSSD sends it (§6.2): a server that cannot honour it must
            # say so rather than silently return entries without the values.
            controls.append((DEREF_OID, True, deref.encode_request(spec.deref_specs)))
        page = self.cfg.ldap_page_size
        paged = spec.paged and page > 0 and info is not None and PAGED_RESULTS_OID in info.controls
        if spec.asq:
            # Critical, as SSSD sends it; not paged (one base entry's values: Samba
            # returned 5,000 members in one answer, 2.7 s).
            controls.append((ASQ_OID, True, encode_asq(spec.asq)))
            paged = False
        if spec.sd_flags:
            # Critical, as SSSD's sdap_sd_search_send sends it.
            controls.append((SD_FLAGS_OID, True, encode_sd_flags(spec.sd_flags)))
        try:
            filt = wire.encode_filter(spec.filt)
        except wire.FilterError as e:
            raise LdapError(f"search of {spec.base!r}: {e}") from None
        return Request(spec, filt, controls, page if paged else 0, deref_seen)

    def run(
        self,
        conn: Connection,
        reqs: list[Request],
        sent: dict[int, Request],
        until: float | None = None,
    ) -> None:
        """Send the requests, at most OUTSTANDING at a time, and read until each has
        its last page: entries by entry.py's readers, results by
        wire.decode_response. A paged search sends its next page as soon as a page is
        done. Each search has its own ``ldap_search_timeout`` from its first page
        (all its pages, as one search alone has), so a level of fifty batches is not
        held to the time of one; a server that answers none fails at the first. The
        timeouts run again from each batch of messages read, up to PROGRESS_BOUND
        timeouts (then :class:`LdapSlow`).

        slapd keeps one paged-results state per connection: a paged request sent
        while another's pages go on makes that one's cookie "invalid or old"
        (unwillingToPerform, measured). So one paged search is outstanding at a
        time; unpaged ones (no paging on the server, ASQ) go out together. Running
        the first pages together and re-running alone those that needed a next page
        cost 4 more searches of 9 on bigroupuser without the deref control (batches
        of 1,000 look-ups end exactly at a page boundary), so it is not done.
        ``sent``: requests already on the wire (send_ahead), by message ID;
        ``until``: a deadline of the caller's for every request instead."""
        timeout = self.cfg.ldap_search_timeout
        interned = self.interned
        on_wire = set(map(id, sent.values()))
        queue = [r for r in reversed(reqs) if id(r) not in on_wire]
        pending: dict[int, Request] = dict(sent)
        # The outstanding requests that want rows, by message ID (entry.decode_row).
        row_slots = {m: r.slots for m, r in sent.items() if r.slots is not None}

        def can_start(r: Request) -> bool:
            return not r.page or not any(x.page for x in pending.values())

        def start() -> None:
            r = queue.pop()
            self.arm(r, until)
            send(r)

        def send(r: Request) -> None:
            conn.deadline = min(x.deadline for x in (r, *pending.values()))
            msgid = self.send(conn, r, pending)
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
                conn.deadline = min(r.deadline for r in pending.values())
                try:
                    messages = conn.receive()
                except LdapTimeout:
                    late = min(pending.values(), key=lambda r: r.deadline)
                    if until is None and late.deadline >= late.bound:
                        raise LdapSlow(
                            f"search of {late.spec.base!r} for {late.spec.filt[:200]!r}: "
                            f"{late.count()} entries in {PROGRESS_BOUND * timeout} s, "
                            "the server still answering"
                        ) from None
                    raise
                if not messages:
                    conn.close()
                    raise TransportError("session terminated by server")
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
                    plain = reader.decode_entry(m, _ATTR_NAMES, _ATTR_NAMES_MAX, interned)
                    if plain is not None:
                        got = pending.get(plain[0])
                        if got is None:
                            raise TransportError("invalid messageId received")
                        got.plain(plain[1], plain[2])
                        continue
                    e = reader.decode_search_entry(m)
                    if e is not None:
                        got = pending.get(e.message_id)
                        if got is None:
                            raise TransportError("invalid messageId received")
                        got.entry(e)
                        continue
                    res = wire.decode_response(m)
                    req = pending.get(res.message_id)
                    if req is None:
                        if res.message_id == 0:  # unsolicited (RFC 4511 §4.4)
                            conn.close()
                            raise TransportError(
                                "session terminated by server"
                                f" ({res.message.decode('utf-8', 'replace')[:200]})"
                            )
                        raise TransportError("invalid messageId received")
                    if res.op != wire.SEARCH_RESULT_DONE:
                        continue  # continuation references, intermediate responses
                    del pending[res.message_id]
                    row_slots.pop(res.message_id, None)
                    if self._done(req, res) and res.message_id not in early:
                        send(req)  # the next page
                    fill()
                # The server answers: the timeouts of the searches on the connection
                # run again from now, up to their bounds (PROGRESS_BOUND). Each search,
                # not only the one answered: a search sent behind others gets its
                # entries after theirs (one stream), and slapd answers in turn.
                now = time.monotonic()
                for r in pending.values():
                    r.deadline = max(r.deadline, min(now + timeout, r.bound))
                ber += time.perf_counter() - t0
        finally:
            # Reading our own BER (entries, deref values) apart from the rest: the
            # server, the network and the receive loop (`cached perf`, reference §5.4).
            self.counters.add(LDAP_BER, 0, ber)
            self.counters.add(LDAP_WAIT, 0, time.perf_counter() - t_start - ber)

    def send(self, conn: Connection, r: Request, pending: dict[int, Request]) -> int:
        """Send ``r`` (its next page) on ``conn``, by the connection's deadline, and
        put it in ``pending`` under its message ID."""
        if conn.closed:
            raise TransportError("unable to send message, socket is not open")
        msgid = conn.next_id()
        controls = r.controls
        if r.page:
            controls = [*controls, paged_control(r.page, r.cookie)]
        data = wire.encode_search(
            msgid, r.spec.base, wire.SCOPES[r.spec.scope], r.filt, r.spec.attrs,
            time_limit=self.cfg.ldap_search_timeout, size_limit=r.spec.size_limit,
            controls=controls,
            # Never follow aliases, as SSSD (ldap_deref unset): an alias under the
            # base must not make an entry from elsewhere visible.
            deref_aliases=0,
        )  # fmt: skip
        conn.send(data)
        pending[msgid] = r
        return msgid

    def _done(self, r: Request, res: wire.Response) -> bool:
        """Take a searchResDone; True when another page is to be asked for."""
        code = r.code = res.code
        spec = r.spec
        if code in (3, 4):  # timeLimitExceeded, sizeLimitExceeded (RFC 4511 §4.1.9)
            r.error = self._limit(spec.base, spec.filt, code, r.count())
            return False
        if code == 32:  # noSuchObject: the base is not there, nothing under it
            return False
        if code not in (0, 10):  # success; referral (never chased, as before)
            r.error = LdapError(
                f"search of {spec.base!r} for {spec.filt[:200]!r} failed: {wire.describe(res)}"
            )
            return False
        if spec.max_entries and r.count() > spec.max_entries:
            # The server keeps the abandoned page state until the connection ends or
            # newer paged searches evict it (Samba and Windows keep a few).
            r.error = LdapTooMany(f"search of {spec.base!r} passed {spec.max_entries} entries")
            return False
        if not r.page:
            return False
        r.cookie = paged_cookie(res.controls.get(_PAGED_RESULTS_OID))
        return bool(r.cookie)

    def fill_ranges(self, conn: Connection, entries: list[Entry]) -> None:
        """Complete the ranged values of ``entries``, all within one
        ``ldap_search_timeout`` (:meth:`fill_entry` each)."""
        until = time.monotonic() + self.cfg.ldap_search_timeout
        for e in entries:
            self.fill_entry(conn, e, until)

    def fill_entry(self, conn: Connection, e: Entry, until: float) -> None:
        """Complete the ranged values of ``e`` (``member;range=0-1499``: a Windows DC
        returns at most MaxValRange values of an attribute per entry, Samba does when
        asked): base searches for ``member;range=<next>-*`` until the server says
        ``*`` (RFC-less, [MS-ADTS] 3.1.1.3.1.3.3). Each is a search of its own, so
        the entry can change between them: a value removed from a range already read
        shifts the later ones, and one still there is skipped. Each search asks for
        the entry's USN too (AD: ``uSNChanged``, which every write moves); when it is
        not the one the entry was first read with (or that was not asked for), every
        ranged attribute is read again from 0, so the values are one version's.
        A server whose ranges never end fails the entry after RANGE_ROUNDS searches
        for one attribute (LdapRangeError, naming the server and the attribute)."""
        pending = merge_ranges(e.attrs, e.dn)
        ranged = set(pending)
        usn = self.cfg.ldap_group_entry_usn.lower()
        stamp: bytes | None = (e.attrs.get(usn) or [b""])[0] or None if usn else None
        restarts = 0
        rounds: dict[str, int] = {}
        while pending:
            name, start = pending.popitem()
            rounds[name] = rounds.get(name, 0) + 1
            if rounds[name] > RANGE_ROUNDS:
                raise LdapRangeError(
                    f"{conn.name}: the ranged values of {name} of {e.dn} did not end after "
                    f"{RANGE_ROUNDS} searches (the server never sent {name};range=N-*)"
                )
            attrs = [f"{name};range={start}-*", *([usn] if usn else [])]
            spec = Search(e.dn, "(objectClass=*)", attrs, scope="base", paged=False)
            r = self.request(spec, None, None)
            t0 = time.perf_counter()
            try:
                self.run(conn, [r], {}, until)
            finally:
                self.counters.add(LDAP_SEARCH, 1, time.perf_counter() - t0, 1)
            if r.error is not None or r.code == 32:
                why = r.error or "noSuchObject (32)"
                raise LdapError(f"{e.dn}: reading {name} from {start}: {why}")
            more = r.entries[-1].attrs if r.entries else {}
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

    def root_dse(self, conn: Connection, uri: str) -> ServerInfo:
        """The root DSE's controls, capabilities and naming contexts, by the
        connection's deadline. Counted as a search (SSSD's probe counts it too, §5.1)."""
        with self.counters.timer(LDAP_SEARCH):
            r = self.request(
                Search("", "(objectClass=*)", ROOT_DSE_ATTRS, scope="base", paged=False), None, None
            )
            self.run(conn, [r], {}, conn.deadline)
        if r.error is not None:
            raise r.error
        if r.code == 32:  # every server has a root DSE: one that says not is broken
            raise LdapError("root DSE: noSuchObject (32)")
        info = ServerInfo(uri)
        for e in r.entries:
            raw = e.attrs
            info.controls = set(_utf8s(uri, "supportedControl", raw.get("supportedcontrol", [])))
            caps = raw.get("supportedcapabilities", [])
            info.capabilities = set(_utf8s(uri, "supportedCapabilities", caps))
            info.naming_contexts = _utf8s(uri, "namingContexts", raw.get("namingcontexts", []))
            dnc = _utf8s(uri, "defaultNamingContext", raw.get("defaultnamingcontext", []))
            info.default_naming_context = dnc[0] if dnc else ""
        return info

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
