"""The connection loop the PAM, SSH and sudo sockets share (``responder/streams.py``):
who is admitted, a request answered in order, a frame the codec refuses closing the
connection unless the responder salvages it. A real Unix socket in the test's directory
and asyncio streams; the codec is the shared frame with a body parser that echoes."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import pytest

from cached.config import NssConfig, parse_config
from cached.responder import wire
from cached.responder.streams import Answering, StreamClients

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


def parse(cmd: int, body: bytearray) -> bytes:
    if cmd == BAD:
        raise wire.ProtocolError("unparsable body", cmd)
    return bytes(body)


def bad_body(error: wire.ProtocolError) -> bool:
    return error.cmd == BAD


def codec() -> wire.ServerConnection[int, bytes]:
    return wire.ServerConnection({ECHO: ECHO, BAD: BAD}, parse, salvage=bad_body)


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
    tmp_path: Path,
    salvage: bool,
    *requests: tuple[int, bytes],
    conn: Callable[[], wire.ServerConnection[int, bytes]] = codec,
) -> tuple[list[bytes], bool]:
    """The replies to ``requests``, sent one by one, and whether the server closed the
    connection (then the requests after are not sent). ``conn`` makes the codec."""
    clients = StreamClients(limits(), "test")

    async def respond(req: bytes, uid: int | None) -> bytes | None:
        assert uid == os.geteuid()
        return None if req == b"close" else wire.HEADER.pack(16 + len(req), ECHO, 0, 0) + req

    def keep(error: wire.ProtocolError) -> bytes | None:
        return wire.HEADER.pack(16, BAD, 5, 0) if error.cmd == BAD else None

    async def main() -> tuple[list[bytes], bool]:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            if salvage:
                await clients.serve(r, w, conn(), respond, keep)
            else:
                await clients.serve(r, w, conn(), respond)

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


def test_a_body_the_codec_does_not_salvage_closes(tmp_path: Path) -> None:
    # The responder would answer it, but the codec is dead: the connection closes.
    def unsalvaging() -> wire.ServerConnection[int, bytes]:
        return wire.ServerConnection({ECHO: ECHO, BAD: BAD}, parse)

    got = exchange(tmp_path, True, (BAD, b""), (ECHO, b"after"), conn=unsalvaging)
    assert got == ([], True)


# -- the shared codec on its own


def test_the_codec_salvages_only_what_its_hook_says() -> None:
    kept, killed = codec(), wire.ServerConnection({ECHO: ECHO, BAD: BAD}, parse)
    for conn in (kept, killed):
        conn.receive_data(wire.encode_request(BAD, b"x") + wire.encode_request(ECHO, b"y"))
        with pytest.raises(wire.ProtocolError, match="unparsable"):
            conn.next_request()
    assert not kept.dead and kept.next_request() == b"y" and kept.buffered_bytes == 0
    assert killed.dead and killed.buffered_bytes == 0
    with pytest.raises(wire.ProtocolError, match="connection is dead"):
        killed.next_request()
    with pytest.raises(wire.ProtocolError, match="connection is dead"):
        killed.receive_data(b"z")


def test_a_broken_frame_kills_the_codec_whatever_the_hook() -> None:
    conn = codec()
    conn.receive_data(wire.encode_request(0x0099, b"x"))
    with pytest.raises(wire.ProtocolError, match="not served") as info:
        conn.next_request()
    assert info.value.cmd == 0x0099 and conn.dead and conn.buffered_bytes == 0


@pytest.mark.parametrize("fails", [False, True])
def test_a_wiping_codec_zeroes_the_request_and_the_parsed_copy(fails: bool) -> None:
    secret = b"s3cr3t-pw"
    seen: list[bytearray] = []

    def keep_body(cmd: int, body: bytearray) -> bytes:
        seen.append(body)
        if fails:
            raise wire.ProtocolError("unparsable body", cmd)
        return bytes(body)

    conn = wire.ServerConnection({ECHO: ECHO}, keep_body, wipe=True, salvage=bad_body)
    conn.receive_data(wire.encode_request(ECHO, secret) + wire.encode_request(ECHO, b"n"))
    buf = conn._buf  # the bytes must be overwritten, not just dropped
    if fails:
        with pytest.raises(wire.ProtocolError):
            conn.next_request()
        assert conn.dead and not any(buf)  # dead: the next request is zeroed too
    else:
        assert conn.next_request() == secret
        assert secret not in buf and buf.endswith(b"n")
    assert len(seen) == 1 and secret not in seen[0] and not any(seen[0])


# -- Answering: the replies that need no lookup, and the guard around the answer


@dataclass(frozen=True)
class Version:
    cmd: int = 0x0001


@dataclass(frozen=True)
class Refused:
    cmd: int
    reason: str


@dataclass(frozen=True)
class Ask:
    cmd: IntEnum
    name: str


class Cmd(IntEnum):
    LOOKUP = 0x00F0


def answering(subject: bool) -> Answering:
    # its own name per case: log lines are rate-limited per responder and kind
    return Answering(
        f"test{int(subject)}", Version, lambda: b"version", lambda cmd: b"failed",
        refused=Refused, refusal=lambda cmd: b"einval %d" % cmd,
        subject=(lambda req: req.name) if subject else None,
    )  # fmt: skip


@pytest.mark.parametrize("subject", [False, True])
def test_answering_dispatches_and_guards(
    subject: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def answer(req: Ask) -> bytes:
        if req.name == "boom":
            raise ValueError("the secret detail")
        return b"answer " + req.name.encode()

    a = answering(subject)

    async def main() -> list[bytes | None]:
        return [
            await a.respond(Version(), answer),
            await a.respond(Refused(7, "bad body"), answer),
            await a.respond(Ask(Cmd.LOOKUP, "alice"), answer),
            await a.respond(Ask(Cmd.LOOKUP, "boom"), answer),
        ]

    with caplog.at_level(logging.DEBUG, logger="cached.responder.streams"):
        got = asyncio.run(main())
    assert got == [b"version", b"einval 7", b"answer alice", b"failed"]
    assert f"test{int(subject)}: bad request: bad body" in caplog.text
    assert f"test{int(subject)}: answering LOOKUP" in caplog.text and "ValueError" in caplog.text
    # Without a subject (PAM's: a request may hold a password) nothing of the request
    # or the exception's message is logged.
    assert ("the secret detail" in caplog.text) is subject
    assert ("'boom'" in caplog.text) is subject
