"""The bus side of the InfoPipe interface: connect, own the name, move messages.

``start_ifp(config, admin)`` runs inside the responder's event loop. It connects to the
bus named by ``[cached] dbus_address`` (``system``: the system bus; else a D-Bus
address such as ``unix:path=/run/x/bus``), requests ``org.freedesktop.sssd.infopipe``
and answers method calls on ``/org/freedesktop/sssd/infopipe`` and below through
:class:`~cached.ifp.dispatch.Dispatcher`.

When the bus cannot be used at start (no daemon, refused name, bad address) one warning
line says so and the handle does nothing: the responder serves NSS without D-Bus. A bus
lost later (the daemon restarted) is retried with a backoff, quietly after the first
warning, and the name is requested again.

dbus-next (0.2.3) is used at its lowest level — one message handler, no
``ServiceInterface`` — because its high-level service replies to an exception with the
Python traceback as the error text, exports objects eagerly, and cannot check a
caller's uid before a method runs. Two of its defects are worked around here:

* ``MessageBus._auth_readline`` loops forever, without yielding to the event loop, when
  the peer closes the connection during authentication (it appends the empty read and
  reads again). A responder pointed at a socket that is not a bus would hang; the
  instance's reader is replaced by one that fails on end of file.
* ``disconnect()`` shuts the socket down but never closes it; ``_dispose`` closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from dbus_next.aio.message_bus import MessageBus
from dbus_next.constants import MessageFlag, MessageType, NameFlag, RequestNameReply
from dbus_next.errors import AuthError, DBusError
from dbus_next.message import Message

from cached.config import Config
from cached.ifp import interfaces as i
from cached.ifp.dispatch import Dispatcher, IfpError
from cached.ifp.paths import BUS_NAME, IFP_PATH
from cached.ratelimit import RateLimitedLog
from cached.responder.admin import Admin

log = logging.getLogger(__name__)
# Any local user may call the interface: what a call can make us log goes through the
# rate limiter, the first line of a kind with its traceback (cached/ratelimit.py).
limited = RateLimitedLog(log)

DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"
# Connecting and authenticating to a local bus takes milliseconds; a bus that does
# not answer within this is as good as absent.
CONNECT_TIMEOUT = 10.0
# A bus daemon answers GetConnectionUnixUser at once; past this, refuse the call.
DRIVER_TIMEOUT = 5.0
# Method calls served at once; more are refused with LimitsExceeded so a flood cannot
# queue unbounded work in the responder (dbus-daemon's own default caps pending
# replies per connection at 128 on the system bus).
MAX_INFLIGHT = 64
# The root-only methods (invalidation, counters, status, the two refreshes) have a
# budget of their own: public lookups held by a slow directory, any local user's, must
# not make the administrator's calls answer "too many calls". A
# non-root caller of one is refused after one question to the bus, asked once per
# connection (MAX_KNOWN_UIDS), so a flood of those holds each slot for an event-loop
# turn, and a new connection's first call for a bus round trip.
MAX_ADMIN_INFLIGHT = 8
# The uids the bus gave for callers, kept for our connection to the bus: unique names
# are never reused on a bus (D-Bus specification, "Bus Names") and a connection's uid is
# fixed when it authenticates. So a caller refused once is refused again without a
# question to the bus (otherwise a user looping root-only calls on one connection
# keeps the 8 admin slots busy, each for a round trip). Bounded: the oldest
# is forgotten first, and asked again if it calls again.
MAX_KNOWN_UIDS = 4096
# A connection's root-only calls that arrive while the bus is asked who it is wait
# for the answer without a slot, this many at most (more get "too many calls"): then
# they are refused, or let in as any call is (refusing them would refuse root's second
# call sent at once on a new connection). All callers' together: at most
# MAX_WAITING_ALL (a question can outlive its call's slot).
MAX_WAITING = 16
MAX_WAITING_ALL = 128
# Waiting for the bus to acknowledge our disconnect at shutdown.
CLOSE_TIMEOUT = 2.0
RECONNECT_MIN = 1.0
RECONNECT_MAX = 60.0
# An authentication line longer than this is not from a D-Bus daemon.
MAX_AUTH_LINE = 4096


def bus_address(setting: str) -> str:
    """The D-Bus address of ``[cached] dbus_address``: ``system`` follows the same rule
    as libdbus (``DBUS_SYSTEM_BUS_ADDRESS``, else the standard socket)."""
    if setting == "system":
        return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS
    return setting


async def _safe_auth_readline(bus: Any) -> str:
    """dbus-next's ``_auth_readline`` without its endless loop at end of file."""
    loop = asyncio.get_running_loop()
    buf = b""
    while not buf.endswith(b"\r\n"):
        # Two bytes at a time, as dbus-next reads: never past the end of the line.
        chunk = await loop.sock_recv(bus._sock, 2)
        if not chunk:
            raise AuthError("the peer closed the connection during authentication")
        buf += chunk
        if len(buf) > MAX_AUTH_LINE:
            raise AuthError("authentication line too long: not a D-Bus daemon")
    return buf[:-2].decode("ascii")


def _dispose(bus: Any) -> None:
    """Release a bus connection: its event-loop callbacks, then its socket.

    ``MessageBus.disconnect`` only shuts the socket down (and logs a traceback when that
    fails, as it does on a connection that never completed); the socket and its file
    object are never closed. This does it without dbus-next's help, once: a second
    ``remove_reader`` could hit another connection that reused the descriptor number.
    """
    if getattr(bus, "_cached_disposed", False):
        return
    setattr(bus, "_cached_disposed", True)  # noqa: B010
    fd = getattr(bus, "_fd", None)
    if fd is not None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(fd)
        loop.remove_writer(fd)
    for name in ("_stream", "_sock"):
        obj = getattr(bus, name, None)
        if obj is not None:
            with contextlib.suppress(OSError):
                obj.close()


async def _connect(address: str) -> Any:
    """A connected, authenticated bus (dbus-next's aio MessageBus), or an exception."""
    bus = MessageBus(bus_address=address)  # connects the socket (unix: at once)
    setattr(bus, "_auth_readline", lambda: _safe_auth_readline(bus))  # noqa: B010
    try:
        await asyncio.wait_for(bus.connect(), CONNECT_TIMEOUT)
    except BaseException:
        _dispose(bus)
        raise
    return bus


def _describe(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return f"no answer in {CONNECT_TIMEOUT:g} s"
    if isinstance(e, EOFError):  # dbus-next's unmarshaller at the end of the stream
        return "the bus closed the connection"
    if isinstance(e, DBusError):
        return f"{e.type}: {e.text}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class IfpService:
    """One bus connection serving the dispatcher; reconnects when the bus goes away."""

    def __init__(self, setting: str, dispatcher: Dispatcher) -> None:
        self.setting = setting
        self.address = bus_address(setting)
        self.dispatcher = dispatcher
        self.bus: Any = None
        self.reconnects = 0
        # Calls being served: public ones, and root-only ones (budgets above).
        self._inflight: set[asyncio.Task[None]] = set()
        self._admin_inflight: set[asyncio.Task[None]] = set()
        # Callers' uids on ``self.bus`` (the question to the bus, asked once for the
        # calls of a caller that arrive together); questions asked of the bus.
        self._uids: dict[str, asyncio.Future[int | None]] = {}
        self._waiting: dict[str, list[Any]] = {}  # MAX_WAITING
        self._waiting_all = 0
        self.uid_queries = 0
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False
        dispatcher.extra_status = self.status

    def status(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "connected": bool(self.bus is not None and self.bus.connected),
            "unique_name": None if self.bus is None else self.bus.unique_name,
            "reconnects": self.reconnects,
            "inflight": len(self._inflight) + len(self._admin_inflight),
            "uid_queries": self.uid_queries,
        }

    async def open(self) -> None:
        """Connect and own the name, or raise (the bus is then left closed)."""
        bus = await _connect(self.address)
        try:
            # The handler first: a call may arrive as soon as the name is ours.
            bus.add_message_handler(lambda msg: self._on_message(bus, msg))
            reply = await asyncio.wait_for(
                bus.request_name(BUS_NAME, NameFlag.DO_NOT_QUEUE), CONNECT_TIMEOUT
            )
            if reply not in (RequestNameReply.PRIMARY_OWNER, RequestNameReply.ALREADY_OWNER):
                raise RuntimeError(f"{BUS_NAME} is owned by another connection")
        except BaseException:
            _dispose(bus)
            raise
        self._forget_uids()  # unique names are per bus daemon
        self.bus = bus
        self._watcher = asyncio.ensure_future(self._watch(bus))
        log.info("D-Bus interface %s on %s as %s", BUS_NAME, self.address, bus.unique_name)

    async def _watch(self, bus: Any) -> None:
        """Wait for the bus to go away; then reconnect with a backoff."""
        try:
            await bus.wait_for_disconnect()
            error = "the bus closed the connection"
        except Exception as e:
            error = _describe(e)
        _dispose(bus)
        if self._closing:
            return
        self.bus = None
        self._forget_uids()
        for task in self._serving():
            task.cancel()  # their replies cannot reach anyone now
        log.warning("D-Bus connection to %s lost (%s); reconnecting", self.address, error)
        delay = RECONNECT_MIN
        while not self._closing:
            await asyncio.sleep(delay)
            try:
                await self.open()
            except Exception as e:
                log.debug("D-Bus reconnect to %s failed: %s", self.address, _describe(e))
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            self.reconnects += 1
            return

    async def close(self) -> None:
        self._closing = True
        self._forget_uids()
        serving = self._serving()
        for task in serving:
            task.cancel()
        if serving:
            await asyncio.gather(*serving, return_exceptions=True)
        bus, watcher = self.bus, self._watcher
        if bus is not None and bus.connected:
            # A clean goodbye: the bus daemon drops our name at once. The watcher sees
            # the end of the connection and releases it.
            with contextlib.suppress(OSError):
                bus.disconnect()
            if watcher is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(watcher), CLOSE_TIMEOUT)
        if watcher is not None and not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if bus is not None:
            _dispose(bus)
        self.bus = self._watcher = None

    # -- messages ------------------------------------------------------------------------

    def _ours(self, path: str | None) -> bool:
        return path is not None and (
            path == IFP_PATH
            or path.startswith(IFP_PATH + "/")
            or IFP_PATH.startswith(path.rstrip("/") + "/")
        )

    def _on_message(self, bus: Any, msg: Any) -> bool:
        """dbus-next's handler hook: True when the message is ours (answered later)."""
        if msg.message_type is not MessageType.METHOD_CALL or not self._ours(msg.path):
            return False
        if msg.interface == i.PEER:
            return False  # dbus-next answers Ping and GetMachineId itself
        admin = i.root_only(msg.interface, msg.member)
        asked = self._uids.get(msg.sender or "") if admin and bus is self.bus else None
        # Behind calls of the caller's still waiting too: a connection's calls are
        # admitted in the order they came.
        if asked is not None and (not asked.done() or self._waiting.get(msg.sender)):
            # Who the caller is is being asked of the bus for a call of its that holds
            # a slot: its other calls wait for the answer without one, so that one
            # connection's burst cannot fill the admin slots (40 calls on a new
            # connection, sent before the bus answered, would take all 8).
            waiting = self._waiting.setdefault(msg.sender, [])
            if len(waiting) >= MAX_WAITING or self._waiting_all >= MAX_WAITING_ALL:
                too_many = Message.new_error(msg, i.ERR_LIMITS_EXCEEDED, "too many calls")
                self._reply(bus, msg, too_many)
            else:
                if not waiting:
                    asked.add_done_callback(lambda f: self._let_waiting(bus, msg.sender, f))
                waiting.append(msg)
                self._waiting_all += 1
            return True
        uid = self._known_uid(asked)
        if uid is not None and uid != 0:
            # A caller known not to be root: refused now, without a slot (a user's
            # burst of them would fill the slots before any is answered), with or
            # without an interface field.
            self._refuse(bus, msg, uid)
            return True
        pool, limit = (
            (self._admin_inflight, MAX_ADMIN_INFLIGHT) if admin else (self._inflight, MAX_INFLIGHT)
        )
        if len(pool) >= limit:
            self._reply(bus, msg, Message.new_error(msg, i.ERR_LIMITS_EXCEEDED, "too many calls"))
            return True
        task = asyncio.ensure_future(self._serve(bus, msg))
        pool.add(task)
        task.add_done_callback(pool.discard)
        if admin:
            self._uid_question(bus, msg.sender)  # asked now: the caller's next calls see it
        return True

    def _serving(self) -> list[asyncio.Task[None]]:
        return [*self._inflight, *self._admin_inflight]

    async def _serve(self, bus: Any, msg: Any) -> None:
        async def caller_uid(sender: str | None) -> int | None:
            # Asked of the bus the call came on: unique names are per bus daemon.
            return await self._caller_uid(bus, sender)

        try:
            signature, body = await self.dispatcher.call(
                msg.path, msg.interface, msg.member, msg.signature, list(msg.body), msg.sender,
                caller_uid,
            )  # fmt: skip
            reply = Message.new_method_return(msg, signature, body)
        except IfpError as e:
            reply = Message.new_error(msg, e.name, e.text)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # The caller gets no traceback (it is hostile); the log gets it, once a
            # minute per kind of failure.
            limited.log(("call failed", type(e).__name__), logging.ERROR,
                        "D-Bus call %s.%s on %s failed", msg.interface, msg.member, msg.path,
                        exc_info=True)  # fmt: skip
            reply = Message.new_error(msg, i.ERR_FAILED, "internal error; see the cached log")
        self._reply(bus, msg, reply)

    def _reply(self, bus: Any, msg: Any, reply: Any) -> None:
        if msg.flags & MessageFlag.NO_REPLY_EXPECTED or not bus.connected:
            return
        try:
            sent = bus.send(reply)  # marshals the body: a value the type cannot hold fails
        except Exception as e:
            limited.log(("reply failed", type(e).__name__), logging.ERROR,
                        "cannot send the D-Bus reply to %s.%s", msg.interface, msg.member,
                        exc_info=True)  # fmt: skip
            try:
                sent = bus.send(Message.new_error(msg, i.ERR_FAILED, "internal error"))
            except Exception:
                return
        # A write error shows on the future; read it so asyncio does not complain.
        sent.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _caller_uid(self, bus: Any, sender: str | None) -> int | None:
        """The caller's uid, from the bus daemon (the only party that knows it), asked
        once per caller (MAX_KNOWN_UIDS); a question that got no uid is asked again."""
        if sender is None or not bus.connected:
            return None
        asked = self._uid_question(bus, sender)
        if asked is None:
            return await self._ask_uid(bus, sender)
        # Shielded: one caller's call cancelled does not cancel the question the
        # others wait for.
        return await asyncio.shield(asked)

    def _uid_question(self, bus: Any, sender: str | None) -> asyncio.Future[int | None] | None:
        """The question to the bus for ``sender``'s uid, asked now unless asked already
        (None on a connection that is no longer ours, or without a sender)."""
        if sender is None or bus is not self.bus:
            return None
        known = self._uids
        asked = known.get(sender)
        if asked is None:
            if len(known) >= MAX_KNOWN_UIDS:
                del known[next(iter(known))]
            asked = known[sender] = asyncio.ensure_future(self._ask_uid(bus, sender))

            def keep_only_uids(f: asyncio.Future[int | None]) -> None:
                if (f.cancelled() or f.exception() is not None or f.result() is None) and (
                    known.get(sender) is f
                ):
                    del known[sender]

            asked.add_done_callback(keep_only_uids)
        return asked

    @staticmethod
    def _known_uid(asked: asyncio.Future[int | None] | None) -> int | None:
        """The uid the bus gave, when it has answered already."""
        if asked is None or not asked.done() or asked.cancelled() or asked.exception():
            return None
        return asked.result()

    def _let_waiting(self, bus: Any, sender: str, asked: asyncio.Future[int | None]) -> None:
        """The bus answered who ``sender`` is: its waiting calls are admitted (or
        refused) as they would be now; without an answer (the caller gone, the bus
        silent) they are refused as the dispatcher refuses an unknown caller, not each
        asked again (one connection that hung up would cost 17 questions)."""
        waiting = self._waiting.pop(sender, [])
        self._waiting_all -= len(waiting)
        if bus is not self.bus or not bus.connected:
            return
        uid = self._known_uid(asked)
        for msg in waiting:
            if uid is None:
                self._refuse(bus, msg, None)
            else:
                self._on_message(bus, msg)

    def _refuse(self, bus: Any, msg: Any, uid: int | None) -> None:
        """Answer a root-only call of a caller not root (or not known) as the
        dispatcher answers one, without serving it."""
        what = f"{msg.interface}.{msg.member}" if msg.interface else str(msg.member)
        refused = self.dispatcher.refusal(what, msg.sender, uid)
        self._reply(bus, msg, Message.new_error(msg, refused.name, refused.text))

    def _forget_uids(self) -> None:
        for asked in self._uids.values():
            asked.cancel()
        self._uids = {}
        self._waiting, self._waiting_all = {}, 0  # their connection is gone or going

    async def _ask_uid(self, bus: Any, sender: str) -> int | None:
        self.uid_queries += 1
        query = Message(
            destination="org.freedesktop.DBus",
            path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus",
            member="GetConnectionUnixUser",
            signature="s",
            body=[sender],
        )
        try:
            reply = await asyncio.wait_for(bus.call(query), DRIVER_TIMEOUT)
        except Exception as e:
            limited.log(("caller uid", type(e).__name__), logging.WARNING,
                        "cannot ask the bus for the uid of %s: %s",
                        sender, _describe(e))  # fmt: skip
            return None
        if reply is None or reply.message_type is not MessageType.METHOD_RETURN:
            return None
        if reply.signature != "u":
            return None
        uid = reply.body[0]
        return uid if isinstance(uid, int) else None


class IfpHandle:
    """What ``start_ifp`` returns; ``close()`` ends the interface (a no-op when off)."""

    def __init__(self, service: IfpService | None) -> None:
        self.service = service

    @property
    def active(self) -> bool:
        return self.service is not None

    async def close(self) -> None:
        if self.service is not None:
            service, self.service = self.service, None
            await service.close()


async def start_ifp(config: Config, admin: Admin) -> IfpHandle:
    """Serve the InfoPipe interface on the configured bus; off (one warning) without one."""
    setting = config.daemon.dbus_address
    if setting == "none":
        return IfpHandle(None)
    service = IfpService(setting, Dispatcher(admin))
    try:
        await service.open()
    except Exception as e:
        where = service.address
        if setting != where:
            where += f" (dbus_address = {setting})"
        log.warning("D-Bus interface off: cannot use the bus at %s: %s", where, _describe(e))
        return IfpHandle(None)
    return IfpHandle(service)
