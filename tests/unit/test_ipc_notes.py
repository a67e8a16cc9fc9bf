"""Notes on the private RPC (ipc/framing.py ``Notifier``, ipc/aio.py ``serve``): a request
without an id is handled and never answered, and the blocking sender the backend's
executor thread uses neither waits for an answer nor fails its caller when nobody
listens. A real asyncio server on a Unix socket in a temporary directory."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import Any

import pytest

from cached.config import parse_config
from cached.ipc import aio, framing
from cached.ipc.ops import GroupsStoredNote, Op
from cached.ldap.service import BackendService
from testing.daemon import config_text


def test_a_note_is_handled_and_not_answered_and_a_request_still_is(tmp_path: Path) -> None:
    path = str(tmp_path / "private" / "sock")
    seen: list[tuple[Op, dict[str, Any]]] = []
    all_seen = asyncio.Event()

    async def handler(op: Op, args: dict[str, Any]) -> dict[str, Any]:
        seen.append((op, args))
        if len(seen) == 4:
            all_seen.set()
        return {"echo": args}

    async def main() -> None:
        server = await aio.serve(path, handler)
        notifier = framing.Notifier(path)
        loop = asyncio.get_running_loop()
        try:
            # Sent from another thread, as the backend's executor does.
            for i in range(3):
                note = {"domain": "D", "user": "u", "groups": [str(i)]}
                send = functools.partial(notifier.send, Op.GROUPS_STORED, **note)
                assert await loop.run_in_executor(None, send) == ""
            client = aio.RpcClient(path)
            reply = await client.call(Op.STATUS, x=1)
            assert reply["echo"] == {"x": 1} and reply["ok"]
            await client.close()
            # The notes were handled; and no answer to them came back on their
            # connection (one would be written as its handler returns): nothing to read.
            await asyncio.wait_for(all_seen.wait(), 60)
            assert notifier._sock is not None
            notifier._sock.setblocking(False)
            try:
                got = notifier._sock.recv(1)
            except BlockingIOError:
                got = b"nothing"
            assert got == b"nothing"
        finally:
            notifier.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    notes = [(op, args) for op, args in seen if op is Op.GROUPS_STORED]
    assert notes == [
        (Op.GROUPS_STORED, {"domain": "D", "user": "u", "groups": [str(i)]}) for i in range(3)
    ]


def test_a_note_nobody_listens_to_is_dropped_with_the_reason(tmp_path: Path) -> None:
    notifier = framing.Notifier(str(tmp_path / "nothing-here"))
    why = notifier.send(Op.GROUPS_STORED, domain="D", groups=["g"])
    assert "nothing-here" in why and notifier._sock is None


def test_a_backend_splits_long_lists_into_notes_and_leaves_out_what_none_can_carry(
    tmp_path: Path,
) -> None:
    """BackendService._groups_stored: the user's groups of one early commit can exceed
    what a note may carry (GroupsStoredNote.MAX_GROUPS, refused whole by the
    responder): they go in several notes; a name a note cannot carry is left to the
    answer's own prefill. A real backend service (no LDAP request made) and a real
    server on the responder's private socket."""
    cfg = parse_config(config_text(["ldap://127.0.0.1:1"], "dc=example,dc=test", tmp_path))
    os.makedirs(cfg.daemon.pipes_dir, mode=0o755)
    service = BackendService(cfg, cfg.domains[0])
    service._serial = 5  # the serial of the request running (BackendService._work)
    step = GroupsStoredNote.MAX_GROUPS
    names = [f"g{i}" for i in range(2 * step + 5)] + ["x" * 300, "ok"]
    seen: list[GroupsStoredNote] = []
    done = asyncio.Event()

    async def handler(op: Op, args: dict[str, Any]) -> dict[str, Any]:
        seen.append(GroupsStoredNote.parse(args))  # what the responder does
        if len(seen) == 3:
            done.set()
        return {}

    async def main() -> None:
        path = framing.responder_socket(cfg.daemon.pipes_dir)
        server = await aio.serve(path, handler)
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, service._groups_stored, "alice", names
            )
            await asyncio.wait_for(done.wait(), 60)
        finally:
            service._notifier.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    service.cache.close()
    assert [len(n.groups) for n in seen] == [step, step, 6]
    assert [g for n in seen for g in n.groups] == [*names[: 2 * step + 5], "ok"]
    assert {(n.user, n.request) for n in seen} == {("alice", 5)}


# The server's end of the connection is closed as its task ends, after the loop stopped
# (what a stopping daemon does too): the socket's ResourceWarning is not what is tested.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_client_connection_open_at_shutdown_logs_no_error(tmp_path: Path) -> None:
    """The daemon stops with clients connected (asyncio.run cancels every task, the
    connection's reader among them): no "Unhandled exception" with a CancelledError
    traceback in the log, as a helper saw once on SIGTERM."""
    path = str(tmp_path / "sock")
    errors: list[dict[str, Any]] = []

    async def handler(op: Op, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        await aio.serve(path, handler)
        client = aio.RpcClient(path)
        assert (await client.call(Op.STATUS))["ok"]  # connected, its reader waiting
        # main returns with the server's reader task waiting: asyncio.run cancels it.

    asyncio.run(main())
    assert [str(e.get("message")) + repr(e.get("exception")) for e in errors] == []


def test_the_server_check_outlives_a_failure_of_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """BackendService._server_check: a probe that raises (a thread that cannot start
    under TasksMax) is logged and counts as a failed attempt; the next one still runs
    and its connection is adopted. Without the guard the task died and the domain
    stayed offline until a restart (found in review). A real backend service; the
    probe is a stand-in (no LDAP server)."""
    import ldap3

    from cached.ldap.client import Probe
    from cached.ldap.exchange import ServerInfo

    cfg = parse_config(config_text(
        ["ldap://127.0.0.1:1"], "dc=example,dc=test", tmp_path,
        offline_timeout=1, offline_timeout_max=1, offline_timeout_random_offset=0,
    ))  # fmt: skip
    os.makedirs(cfg.daemon.pipes_dir, mode=0o755)
    service = BackendService(cfg, cfg.domains[0])
    client = service.client
    client._go_offline("test: server down")
    calls: list[int] = []
    uri = "ldap://127.0.0.1:1"

    def probe() -> Probe:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("can't start new thread")
        return Probe(uri, ldap3.Connection(ldap3.Server(uri)), ServerInfo(uri))

    client.probe = probe  # type: ignore[method-assign]

    async def main() -> None:
        client.retry_at = client.clock()  # due now
        service.announce()
        task = asyncio.create_task(service._server_check())
        try:
            for _ in range(6000):  # 60 s at most; the second try comes after 1 s
                if client.online:
                    break
                await asyncio.sleep(0.01)
        finally:
            task.cancel()

    with caplog.at_level("ERROR"):
        asyncio.run(main())
    service.cache.close()
    assert client.online and client.info is not None and client.info.uri == uri
    assert len(calls) == 2
    assert "checking the servers failed: RuntimeError: can't start new thread" in caplog.text
