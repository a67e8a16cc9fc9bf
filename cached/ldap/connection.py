"""The connection to one LDAP server; the only module importing ldap3.

ldap3 opens the socket (TCP with ``ldap_network_timeout``, ``ldapi://``, LDAPS) and
wraps it in TLS with the certificate checks (at open for LDAPS, after StartTLS
otherwise). Everything on the socket after that is ours: requests built by wire.py
are sent with :meth:`Connection.send`, answers read by :meth:`Connection.receive`
into a :class:`framing.MessageBuffer`, both against the deadline of the operation
(:attr:`Connection.deadline`), not per socket read: a server trickling a byte every
few seconds would otherwise hold a search for minutes. StartTLS and the bind go the
same way (:meth:`Connection.start_tls`, :meth:`Connection.bind`). A SASL GSSAPI bind
(:meth:`Connection.bind_gssapi`, id_provider = ad) installs the SASL security layer:
from then on every message is sent and read inside SASL buffers, wrapped and
unwrapped by the bind's GSS context (sasl.py frames them, sans-IO, below the
MessageBuffer).

ldap3 2.9.1's own receive loop read 4,096 bytes at a time and appended with
``bytes +=``, which is quadratic: an 8.5 MB entry from slapd read in 1.6-2.2 s with it
and in 0.04-0.07 s with this one (perf/bigentry.py, 2 loaded cores). Errors come out
as this module's: :class:`TransportError` (the connection is lost, closed here),
:class:`LdapTimeout`, :class:`LdapMessageTooLarge`, :class:`BindRefused`.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import ldap3
import ldap3.strategy.base
from ldap3.core import exceptions as lexc

from cached.counters import COUNTERS, LDAP_BYTES
from cached.ldap import wire
from cached.ldap.controls import Control
from cached.ldap.framing import FramingError, MessageBuffer, MessageTooLarge
from cached.ldap.sasl import (
    LAYER_NONE,
    GssContext,
    SaslBuffer,
    SaslError,
    choose_layer,
    frames,
    layer_reply,
    pieces,
)

# One read of up to 1 MiB into a buffer reused by every read of the connection:
# recv(RECV_SIZE) allocated (and the kernel faulted in) a fresh 1 MiB per read, the
# largest cost of the receive loop in a cold initgroups of bigroupuser (py-spy,
# perf/readpath.py).
RECV_SIZE = 1 << 20

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


class TransportError(Exception):
    """The connection could not be made or was lost (refused, reset, EOF, TLS, a
    stream out of step); the connection is closed."""


class LdapTimeout(TransportError):
    """The server did not answer within the operation's deadline."""


class LdapMessageTooLarge(Exception):
    """One LDAP message is larger than framing.MAX_MESSAGE; the connection is closed.
    The data's fault rather than the server's: not a TransportError."""


class BindRefused(Exception):
    """The server answered the bind with an error."""

    def __init__(self, message: str, code: int, response: wire.Response | None = None) -> None:
        super().__init__(message)
        self.code = code  # RFC 4511 §4.1.9; 49: invalidCredentials
        self.response = response  # its diagnostic message and controls


class Connection:
    """A socket to one server and the stream read from it.

    ``deadline``: the monotonic time every send and receive must end by (None: the
    socket's own timeout). Message IDs are counted here from 1."""

    __slots__ = (
        "_buffer", "_gss", "_into", "_ldap", "_next_id", "_sasl", "deadline", "name", "socket",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, name: str, ldap: Any = None) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # Nagle's algorithm holds a small write while an earlier segment is
            # unacknowledged, and the server delays that ACK (40 ms on Linux): a user's
            # bind after the TLS handshake waited for it, 65 ms for a warm login
            # against 22 ms with the segments sent at once (perf.ab, login20-warm).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket: socket.socket | None = sock
        self.name = name
        self._ldap = ldap  # the ldap3.Connection that opened the socket, if any
        self.deadline: float | None = None
        self._buffer = MessageBuffer()
        self._into: memoryview | None = None
        self._next_id = 0
        # The SASL layer after a GSSAPI bind: the context that wraps, the buffer of
        # wrapped tokens not yet whole.
        self._gss: GssContext | None = None
        self._sasl: SaslBuffer | None = None

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        connect_timeout: int,
        receive_timeout: int,
        tls_verify: bool,
        ca_file: str = "",
        ca_dir: str = "",
    ) -> Connection:
        """A connected socket to ``uri`` (LDAPS: TLS established and checked), or
        TransportError. ``receive_timeout``: per read, for reads outside an operation
        with a deadline (the TLS handshake of ldaps://)."""
        scheme = uri.split("://", 1)[0].lower()
        tls = None
        if scheme != "ldapi":
            tls = ldap3.Tls(
                validate=ssl.CERT_REQUIRED if tls_verify else ssl.CERT_NONE,
                ca_certs_file=ca_file or None,
                ca_certs_path=ca_dir or None,
                version=ssl.PROTOCOL_TLS_CLIENT,
            )
        server = ldap3.Server(uri, connect_timeout=connect_timeout, tls=tls, get_info=ldap3.NONE)
        conn = ldap3.Connection(
            server,
            auto_bind=ldap3.AUTO_BIND_NONE,
            receive_timeout=receive_timeout,
            raise_exceptions=True,
            read_only=True,
            # Never chase referrals (ldap_referrals, SSSD's advice for AD).
            auto_referrals=False,
        )
        try:
            conn.open()
        except (lexc.LDAPException, OSError) as e:
            with contextlib.suppress(Exception):
                conn.unbind()
            raise TransportError(str(e) or type(e).__name__) from None
        return cls(conn.socket, server.name, conn)

    @property
    def closed(self) -> bool:
        return self.socket is None

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    @contextlib.contextmanager
    def deadline_in(self, seconds: float) -> Iterator[None]:
        """Every send and receive inside the block ends by ``seconds`` from now."""
        self.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline = None

    def close(self) -> None:
        """Close the socket at once (the stream is lost or abandoned)."""
        sock, self.socket = self.socket, None
        if self._ldap is not None:
            with contextlib.suppress(Exception):
                self._ldap.strategy.close()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def unbind(self) -> None:
        """End the session politely (an UnbindRequest), then close; never raises.
        Under a SASL layer ldap3's unwrapped UnbindRequest would be garbage to the
        server: the socket is just closed."""
        if self._ldap is not None and self.socket is not None and self._gss is None:
            with contextlib.suppress(Exception):
                self._ldap.unbind()
        self.close()

    def _left(self, sock: socket.socket) -> None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(left)

    def send(self, data: bytes) -> None:
        sock = self.socket
        if sock is None:
            raise TransportError("unable to send message, socket is not open")
        if self._gss is not None:
            try:
                data = self._wrap(data)
            except SaslError as e:
                self.close()
                raise TransportError(f"error sending data: {e}") from None
        try:
            self._left(sock)
            sock.sendall(data)
        except TimeoutError:
            self.close()
            raise LdapTimeout(f"{self.name}: timed out sending a request") from None
        except OSError as e:
            self.close()
            raise TransportError(f"error sending data: {e}") from None

    def receive(self) -> list[bytes]:
        """The whole messages read until the buffer holds no partial one (at least
        one), or those read before EOF ([] at once: the server closed), or those read
        by the deadline (LdapTimeout when there are none)."""
        sock = self.socket
        into = self._into
        if into is None:
            into = self._into = memoryview(bytearray(RECV_SIZE))
        buffer = self._buffer
        messages: list[bytes] = []
        while True:
            try:
                if sock is None:
                    raise OSError("socket is not open")
                self._left(sock)
                got = sock.recv_into(into)
            except TimeoutError:
                if messages:
                    # The deadline came with whole messages read: they are the
                    # caller's (a server that keeps sending; the partial one stays in
                    # the buffer for the next read).
                    return messages
                self.close()
                raise LdapTimeout(f"{self.name}: timed out (no complete answer)") from None
            except OSError as e:
                self.close()
                raise TransportError(f"error receiving data: {e}") from None
            if not got:
                return messages  # EOF
            COUNTERS.add(LDAP_BYTES, 0, 0.0, got)
            try:
                if self._sasl is not None:
                    for token in self._sasl.feed(into[:got]):
                        messages += buffer.feed(self._unwrap(token))
                else:
                    messages += buffer.feed(into[:got])
            except MessageTooLarge as e:
                self.close()
                raise LdapMessageTooLarge(
                    f"{self.name} sent an LDAP message of {e.size} bytes, over "
                    f"the {e.limit} byte limit of one message"
                ) from None
            except (FramingError, SaslError) as e:
                self.close()
                raise TransportError(f"error receiving data: {e}") from None
            if not buffer.pending and not (self._sasl is not None and self._sasl.pending):
                return messages

    def _ask(self, data: bytes, message_id: int) -> wire.Response:
        """Send one request and read its one response (a bind, an extended
        operation: nothing else is outstanding on the connection then). Bytes that
        are not LDAP raise ValueError (ber.BerError), as the exchange's readers do."""
        self.send(data)
        while True:
            messages = self.receive()
            if not messages:
                self.close()
                raise TransportError("session terminated by server")
            for m in messages:
                res = wire.decode_response(m)  # a ValueError: bytes that are not LDAP
                if res.message_id == message_id:
                    return res
                self.close()
                if res.message_id == 0:  # unsolicited (RFC 4511 §4.4)
                    raise TransportError(
                        "session terminated by server"
                        f" ({res.message.decode('utf-8', 'replace')[:200]})"
                    )
                raise TransportError("invalid messageId received")

    def extended(
        self, oid: str, value: bytes | None = None, controls: list[Control] | None = None
    ) -> wire.Response:
        """An extended operation (RFC 4511 §4.12), and its response, whatever its
        result code. The value (it may hold passwords) is never part of an error."""
        msgid = self.next_id()
        req = wire.encode_extended(msgid, oid, value, controls)
        res = self._ask(req, msgid)
        del req
        if res.op != wire.EXTENDED_RESPONSE:
            self.close()
            raise TransportError(f"extended operation answered by protocolOp {res.op:#x}")
        return res

    def modify_replace(
        self, dn: str, attribute: str, values: list[bytes], controls: list[Control] | None = None
    ) -> wire.Response:
        """Replace ``attribute`` of ``dn`` (RFC 4511 §4.6), and the response whatever
        its result code. The values (a password) are never part of an error."""
        msgid = self.next_id()
        req = wire.encode_modify_replace(msgid, dn, attribute, values, controls)
        res = self._ask(req, msgid)
        del req
        if res.op != wire.MODIFY_RESPONSE:
            self.close()
            raise TransportError(f"modify answered by protocolOp {res.op:#x}")
        return res

    def start_tls(self) -> None:
        """StartTLS (RFC 4511 §4.14): the extended operation, then the TLS handshake
        and certificate checks of the settings the connection was opened with. A
        server refusing it fails the connection: nothing is sent in plaintext."""
        if self._ldap is None or self._ldap.server.tls is None:
            raise TransportError("StartTLS: no TLS settings for this connection")
        res = self.extended(wire.START_TLS_OID)
        if res.code != 0:
            self.close()
            raise TransportError(f"StartTLS refused: {wire.describe(res)}")
        sock = self.socket
        try:
            assert sock is not None
            self._left(sock)
            self._ldap.server.tls.wrap_socket(self._ldap, do_handshake=True)
        except TimeoutError:
            self.close()
            raise LdapTimeout(f"{self.name}: timed out in the TLS handshake") from None
        except (lexc.LDAPException, OSError) as e:
            self.close()
            raise TransportError(f"StartTLS: {e}") from None
        self._ldap.tls_started = True
        self.socket = self._ldap.socket

    def bind(
        self,
        dn: str = "",
        password: str | bytes = "",
        sasl_mechanism: str = "",
        controls: list[Control] | None = None,
    ) -> wire.Response:
        """A simple bind (anonymous without ``dn``) or a SASL bind with empty
        credentials (EXTERNAL); the response (its controls), or BindRefused with the
        server's answer. The password is never part of an error."""
        msgid = self.next_id()
        req = wire.encode_bind(
            msgid, dn, password=password, sasl_mechanism=sasl_mechanism, controls=controls
        )
        res = self._ask(req, msgid)
        del req
        if res.op != wire.BIND_RESPONSE:
            self.close()
            raise TransportError(f"bind answered by protocolOp {res.op:#x}")
        if res.code != 0:
            raise BindRefused(f"bind refused: {wire.describe(res)}", res.code, res)
        return res

    def bind_gssapi(self, ctx: GssContext, *, min_ssf: int) -> wire.Response:
        """A SASL GSSAPI bind (RFC 4752): the context's tokens until it is complete,
        then the layer negotiation, whose chosen layer (sasl.choose_layer: sealing when
        offered) applies to everything after the bind's success. Errors of the
        context are its own (kerberos.KerberosError); a server refusing, BindRefused."""
        token: bytes | None = None
        while True:
            out = ctx.step(token)
            res = self._sasl_step(out)
            token = res.sasl_credentials
            if ctx.complete:
                break
            if res.code != 14:  # saslBindInProgress
                raise BindRefused(f"GSSAPI bind refused: {wire.describe(res)}", res.code, res)
        if res.code == 0:
            # The server ended the bind without a layer offer: no RFC 4752 server does.
            self.close()
            raise TransportError("GSSAPI bind: the server negotiated no security layer")
        if res.code != 14:
            raise BindRefused(f"GSSAPI bind refused: {wire.describe(res)}", res.code, res)
        try:
            layer = choose_layer(ctx.unwrap(token, sealed=False), min_ssf=min_ssf)
            reply = ctx.wrap(layer_reply(layer), seal=False)
        except SaslError as e:
            self.close()
            raise TransportError(f"GSSAPI bind: {e}") from None
        res = self._sasl_step(reply)
        if res.code != 0:
            raise BindRefused(f"GSSAPI bind refused: {wire.describe(res)}", res.code, res)
        if layer.kind != LAYER_NONE:
            ctx.layer = layer
            self._gss = ctx
            self._sasl = SaslBuffer()
        return res

    def _sasl_step(self, credentials: bytes) -> wire.Response:
        msgid = self.next_id()
        res = self._ask(
            wire.encode_bind(msgid, "", sasl_mechanism="GSSAPI", sasl_credentials=credentials),
            msgid,
        )
        if res.op != wire.BIND_RESPONSE:
            self.close()
            raise TransportError(f"bind answered by protocolOp {res.op:#x}")
        return res

    def _wrap(self, data: bytes) -> bytes:
        ctx = self._gss
        assert ctx is not None and ctx.layer is not None
        seal = ctx.layer.confidential
        return frames([ctx.wrap(p, seal=seal) for p in pieces(data, ctx.layer)])

    def _unwrap(self, token: bytes) -> bytes:
        ctx = self._gss
        assert ctx is not None and ctx.layer is not None
        return ctx.unwrap(token, sealed=ctx.layer.confidential)

    @property
    def sasl_layer(self) -> str:
        """The SASL layer in force: ``seal``, ``sign`` or ``""`` (none)."""
        return self._gss.layer.name if self._gss is not None and self._gss.layer else ""

    @property
    def encrypted(self) -> bool:
        """Whether the stream is TLS (ldaps://, or after StartTLS)."""
        return isinstance(self.socket, ssl.SSLSocket)
