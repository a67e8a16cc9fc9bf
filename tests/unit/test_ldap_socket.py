"""The LDAP connection's TCP socket sends each write at once (cached/ldap/connection.py):
with Nagle's algorithm a request written behind an unacknowledged segment waits for the
server's delayed ACK, which made a warm login three times slower."""

from __future__ import annotations

import socket

from cached.ldap.connection import Connection


def test_tcp_sockets_get_nodelay() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = socket.create_connection(server.getsockname(), timeout=10)
        try:
            Connection(sock, "ldap://127.0.0.1")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            sock.close()


def test_unix_sockets_are_left_alone() -> None:
    a, b = socket.socketpair()
    with a, b:
        Connection(a, "ldapi://%2Frun%2Fldapi")  # no TCP option to set: no error
