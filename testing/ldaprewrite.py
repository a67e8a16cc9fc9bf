"""An LDAP proxy that rewrites the entries a real server returns: a hostile server's
values (a 16-sub-authority SID) that the real one cannot store.

Listens on ``ldap://127.0.0.1:<port>`` and forwards each connection to the server's
``ldapi`` socket (a Samba DC runs in a network namespace of its own,
testing/addc.py) or TCP port. Client to server, bytes pass as they are; server to
client, the stream is cut into whole LDAPMessages (RFC 4511 §4.1.1), and each
SearchResultEntry's attributes go through ``rewrite(dn, attrs)``, which returns the
attributes to send instead. Plain LDAP only (no TLS, no SASL security layer).
Threads, one pair per connection; only sockets are ever closed here.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType

#: (attribute description, its values), in the server's order.
Attrs = list[tuple[bytes, list[bytes]]]
Rewrite = Callable[[bytes, Attrs], Attrs]

_SEARCH_RESULT_ENTRY = 0x64  # [APPLICATION 4], constructed


def _length(buf: bytes, i: int) -> tuple[int, int] | None:
    """(content length, offset of the content) of the BER length at ``buf[i]``."""
    if i >= len(buf):
        return None
    first = buf[i]
    if first < 0x80:
        return first, i + 1
    n = first & 0x7F
    if i + 1 + n > len(buf):
        return None
    return int.from_bytes(buf[i + 1 : i + 1 + n], "big"), i + 1 + n


def _tlv(buf: bytes, i: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the element at ``buf[i]`` (whole)."""
    got = _length(buf, i + 1)
    assert got is not None
    n, start = got
    return buf[i], start, start + n


def _encode(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _children(buf: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in
    ``buf[start:end]``."""
    out = []
    i = start
    while i < end:
        tag, s, e = _tlv(buf, i)
        out.append((tag, i, s, e))
        i = e
    return out


def rewrite_message(msg: bytes, rewrite: Rewrite) -> bytes:
    """One whole LDAPMessage, its attributes rewritten if it is a SearchResultEntry."""
    _, start, end = _tlv(msg, 0)
    parts = _children(msg, start, end)  # messageID, protocolOp, [0] controls
    tag, _, s, e = parts[1]
    if tag != _SEARCH_RESULT_ENTRY:
        return msg
    (_, _, ds, de), (_, _, as_, ae) = _children(msg, s, e)
    dn = msg[ds:de]
    attrs: Attrs = []
    for _, _, ps, pe in _children(msg, as_, ae):
        (_, _, ts, te), (_, _, vs, ve) = _children(msg, ps, pe)
        attrs.append((msg[ts:te], [msg[a:b] for _, _, a, b in _children(msg, vs, ve)]))
    new = b"".join(
        _encode(0x30, _encode(0x04, name) + _encode(0x31, b"".join(_encode(0x04, v) for v in vals)))
        for name, vals in rewrite(dn, attrs)
    )
    op = _encode(_SEARCH_RESULT_ENTRY, _encode(0x04, dn) + _encode(0x30, new))
    msg_id = msg[parts[0][1] : parts[0][3]]
    controls = msg[parts[2][1] : end] if len(parts) > 2 else b""
    return _encode(0x30, msg_id + op + controls)


class LdapRewriteProxy:
    def __init__(self, rewrite: Rewrite, *, unix_path: str = "", host: str = "", port: int = 0):
        if bool(unix_path) == bool(host):
            raise ValueError("give unix_path or host and port")
        self.rewrite = rewrite
        self._target: tuple[int, str | tuple[str, int]] = (
            (socket.AF_UNIX, unix_path) if unix_path else (socket.AF_INET, (host, port))
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.rewritten = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            family, addr = self._target
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(addr)
            except OSError:
                client.close()
                server.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._socks += [client, server]
            threading.Thread(target=self._pump_up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(server, client), daemon=True).start()

    @staticmethod
    def _pump_up(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _pump_down(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                buf += data
                while (got := _length(buf, 1)) is not None and len(buf) >= sum(got):
                    n, start = got
                    msg, buf = buf[: start + n], buf[start + n :]
                    out = rewrite_message(msg, self.rewrite)
                    if out != msg:
                        self.rewritten += 1
                    dst.sendall(out)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        self._listener.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def __enter__(self) -> LdapRewriteProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
