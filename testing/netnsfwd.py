"""A TCP port on the host forwarded into a network namespace: how clients on the host
reach a server whose ports are compiled in (the Samba DC of :mod:`testing.addc`, in a
namespace of its own so they never clash with the host's): LDAP 636/389, Kerberos 88
and kpasswd 464."""

from __future__ import annotations

import ctypes
import os
import selectors
import socket
import threading

CLONE_NEWNET = 0x40000000  # <sched.h>


class NetnsForwarder:
    """127.0.0.1:<port> on the host, forwarded to ``port`` on 127.0.0.1 in the network
    namespace of process ``pid`` (each connection on a thread of its own)."""

    def __init__(self, pid: int, port: int) -> None:
        self._ns = f"/proc/{pid}/ns/net"
        self._port = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._libc = ctypes.CDLL(None, use_errno=True)
        threading.Thread(target=self._accept, daemon=True).start()

    def retarget(self, pid: int) -> None:
        """Forward new connections into the namespace of ``pid`` (the server restarted
        in a new one)."""
        self._ns = f"/proc/{pid}/ns/net"

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        # setns(2) changes the namespace of this thread only; the socket made after it
        # belongs to the DC's namespace for its whole life.
        try:
            fd = os.open(self._ns, os.O_RDONLY)
        except OSError:  # the server is gone with its namespace: refused, at once
            client.close()
            return
        try:
            if self._libc.setns(fd, CLONE_NEWNET) != 0:
                client.close()
                return
        finally:
            os.close(fd)
        try:
            server = socket.create_connection(("127.0.0.1", self._port), timeout=30)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        try:
            while True:
                for key, _ in sel.select():
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            server.close()

    def close(self) -> None:
        self._listener.close()
