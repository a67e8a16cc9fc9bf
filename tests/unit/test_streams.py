"""The connection loop the PAM, SSH and sudo sockets share (``responder/streams.py``):
who is admitted, a request answered in order, a frame the codec refuses closing the
connection unless the responder salvages it. A real Unix socket in the test's directory
and asyncio streams; the codec is the shared frame with a body parser that echoes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cached.config import NssConfig, parse_config
from cached.responder import wire
from cached.responder.streams import StreamClients

CONF = """\
[cached]
services = nss
domains = LDAP
[nss]
max_clients = 10
max_clients_per_uid = 2
root_reserved_clients = 2
[domain/LDAP]
id_provider = ldap
ldap_uri = ldaps://ldap.example.test
ldap_search_base = dc=example,dc=test
"""
ECHO, BAD = 0x0001, 0x0002


def limits() -> NssConfig:
    return parse_config(CONF).nss


def parse(cmd: int, body: bytes) -> bytes:
    if cmd == BAD:
        raise wire.ProtocolError("unparsable body", cmd)
    return body


def codec() -> wire.ServerConnection[int, bytes]:
    return wire.ServerConnection({ECHO: ECHO, BAD: BAD}, parse)


def test_the_nss_limits_or_root_alone() -> None:
    shared = StreamClients(limits(), "SSH")
    assert shared.refusal(1000) == ""
    shared.per_uid[1000] = 2
    assert "max_clients_per_uid" in shared.refusal(1000)
    assert shared.refusal(0) == ""  # root is never held to the per-uid share
    root_only = StreamClients(limits(), "sudo", root_only=True)
    assert root_only.refusal(0) == "" and root_only.refusal(os.geteuid()) == ""
    stranger = os.geteuid() + 1 if os.geteuid() else 4242
    assert "root's" in root_only.refusal(stranger)
    assert "root's" in root_only.refusal(None)  # no credentials: refused


def exchange(
    tmp_path: Path, salvage: bool, *requests: tuple[int, bytes]
) -> tuple[list[bytes], bool]:
    """The replies to ``requests``, sent one by one, and whether the server closed the
    connection (then the requests after are not sent)."""
    clients = StreamClients(limits(), "test")

    async def respond(req: bytes, uid: int | None) -> bytes | None:
        assert uid == os.geteuid()
        return None if req == b"close" else wire.HEADER.pack(16 + len(req), ECHO, 0, 0) + req

    def keep(error: wire.ProtocolError) -> bytes | None:
        return wire.HEADER.pack(16, BAD, 5, 0) if error.cmd == BAD else None

    async def main() -> tuple[list[bytes], bool]:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            if salvage:
                await clients.serve(r, w, codec(), respond, keep)
            else:
                await clients.serve(r, w, codec(), respond)

        path = str(tmp_path / "s")
        replies: list[bytes] = []
        async with await asyncio.start_unix_server(handler, path=path):
            reader, writer = await asyncio.open_unix_connection(path)
            try:
                for cmd, body in requests:
                    writer.write(wire.encode_request(cmd, body))
                    got = await asyncio.wait_for(reader.read(65536), 60)
                    if not got:
                        return replies, True
                    replies.append(got)
            finally:
                writer.close()
            assert clients.active == 1 and clients.per_uid == {os.geteuid(): 1}
        return replies, False

    return asyncio.run(main())


def reply(cmd: int, body: bytes = b"", status: int = 0) -> bytes:
    return wire.HEADER.pack(16 + len(body), cmd, status, 0) + body


def test_requests_are_answered_in_order(tmp_path: Path) -> None:
    got = exchange(tmp_path, False, (ECHO, b"one"), (ECHO, b"two"))
    assert got == ([reply(ECHO, b"one"), reply(ECHO, b"two")], False)


def test_the_responder_closes_by_answering_none(tmp_path: Path) -> None:
    assert exchange(tmp_path, False, (ECHO, b"close"), (ECHO, b"x")) == ([], True)


def test_a_broken_frame_closes(tmp_path: Path) -> None:
    # A command not served: the codec is dead, with or without salvage.
    assert exchange(tmp_path, True, (0x0099, b""), (ECHO, b"x")) == ([], True)
    assert exchange(tmp_path, False, (BAD, b""), (ECHO, b"x")) == ([], True)


def test_a_salvaged_request_is_answered_and_the_connection_goes_on(tmp_path: Path) -> None:
    got = exchange(tmp_path, True, (BAD, b""), (ECHO, b"after"))
    assert got == ([reply(BAD, status=5), reply(ECHO, b"after")], False)
