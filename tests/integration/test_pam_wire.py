"""The PAM codec against the real client: Debian's ``pam_sss.so`` under ``pamtester`` and
the ctypes driver, in a private mount namespace (:mod:`testing.pamenv`).

A minimal server built on :mod:`cached.pam.protocol` listens on both of SSSD's PAM sockets
with the owner and modes ``pam_sss`` 2.8.2 checks (PAM reference §1.2: root:root, 0666
public, 0600 private; the server process is root). It answers the version handshake and,
per command, a scripted status and items; it records what the codec parsed. Each test
checks both directions: the request carries exactly what the client was given, and
``pam_sss`` turns the scripted reply into the expected PAM code and messages.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from cached.pam.protocol import (
    NEED_DATA,
    AuthTokType,
    Command,
    GetVersion,
    MalformedRequest,
    PamRequest,
    PamStatus,
    ProtocolError,
    ReplyItem,
    ServerConnection,
    account_expired_item,
    chpass_error_item,
    domain_name_item,
    expire_warn_item,
    grace_login_item,
    offline_auth_delayed_item,
    offline_auth_item,
    offline_chpass_item,
    pam_reply,
    system_error_reply,
    version_reply,
)
from testing.asuser import NOBODY
from testing.pamenv import (
    PRIVATE_SOCKET,
    PUBLIC_SOCKET,
    PamEnv,
    make_pamd,
    make_pipes,
    service_file,
    skip_reason,
)

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-wire"
USER = "alice"
PASSWORD = "Secret-1"
DOMAIN = "wire.test"
_PEERCRED = struct.Struct("=3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Seen:
    """One request as the server parsed it, with the socket and the peer's uid."""

    socket: str
    peer_uid: int
    request: PamRequest | GetVersion
    password: bytes | None
    new_password: bytes | None


class ScriptedServer:
    """Both PAM sockets, served by threads of the test process (uid 0, gid 0)."""

    def __init__(self, pipes_dir: Path) -> None:
        self.replies: dict[Command, tuple[int, Sequence[ReplyItem]]] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: list[socket.socket] = []
        for name, mode in ((PUBLIC_SOCKET, 0o666), (PRIVATE_SOCKET, 0o600)):
            path = pipes_dir / name
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            path.chmod(mode)
            sock.listen(16)
            sock.settimeout(0.5)  # lets the accept loop see stop()
            self._listeners.append(sock)
            self._spawn(self._accept, sock, name)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self, sock: socket.socket, name: str) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._serve, conn, name)

    def _serve(self, conn: socket.socket, name: str) -> None:
        _pid, uid, _gid = _PEERCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        codec = ServerConnection()
        conn.settimeout(60)
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                try:
                    codec.receive_data(data)
                    while (req := codec.next_request()) is not NEED_DATA:
                        conn.sendall(self._answer(req, name, uid))
                except MalformedRequest as exc:
                    conn.sendall(system_error_reply(exc.cmd or 0))
                except ProtocolError:
                    return

    def _answer(self, req: PamRequest | GetVersion, name: str, uid: int) -> bytes:
        password = new = None
        if isinstance(req, PamRequest):
            password = req.authtok.secret.reveal() if req.authtok else None
            new = req.new_authtok.secret.reveal() if req.new_authtok else None
            req.wipe()
        with self._lock:
            self.seen.append(Seen(name, uid, req, password, new))
        if isinstance(req, GetVersion):
            return version_reply()
        status, items = self.replies.get(req.cmd, (PamStatus.SUCCESS, ()))
        return pam_reply(req.cmd, status, [domain_name_item(DOMAIN), *items])

    def requests(self, cmd: Command | None = None) -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if isinstance(s.request, PamRequest) and (cmd is None or s.request.cmd is cmd)
            ]

    def stop(self) -> None:
        self._stop.set()
        for sock in self._listeners:
            sock.close()
        for thread in self._threads:
            thread.join(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(make_pipes(tmp_path / "pipes"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def env(tmp_path: Path, server: ScriptedServer) -> PamEnv:
    pamd = make_pamd(tmp_path / "pam.d", {SERVICE: service_file()})
    mc = tmp_path / "mc"
    mc.mkdir()
    return PamEnv(pipes_dir=tmp_path / "pipes", pamd_dir=pamd, mc_dir=mc)


ITEMS = {"ruser": "bob", "rhost": "client.example", "tty": "pts/7"}
WHO = [pytest.param(False, id="root-private"), pytest.param(True, id="user-public")]


def _only_auth(server: ScriptedServer, as_user: bool) -> Seen:
    seen = server.requests(Command.AUTHENTICATE)
    assert len(seen) == 1, seen
    s = seen[0]
    assert (s.socket, s.peer_uid) == ((PUBLIC_SOCKET, NOBODY) if as_user else (PRIVATE_SOCKET, 0))
    return s


# ------------------------------------------------------------------ the request


@pytest.mark.parametrize("as_user", WHO)
def test_the_parsed_request_is_what_the_driver_sent(
    env: PamEnv, server: ScriptedServer, as_user: bool
) -> None:
    result = env.drive(
        SERVICE, USER, ["authenticate"], answers=[PASSWORD], items=ITEMS, as_user=as_user
    )
    assert result.codes == [PamStatus.SUCCESS]
    assert result["authenticate"].prompts == ["Password: "]
    s = _only_auth(server, as_user)
    req = s.request
    assert isinstance(req, PamRequest)
    assert (req.user, req.service, req.ruser, req.rhost, req.tty) == (
        USER, SERVICE, "bob", "client.example", "pts/7",
    )  # fmt: skip
    assert req.authtok is not None and req.authtok.type is AuthTokType.PASSWORD
    assert s.password == PASSWORD.encode()
    assert req.new_authtok is None and req.cli_pid > 0
    # Every connection starts with the handshake, and pam_sss asked for version 3.
    versions = [x.request for x in server.seen if isinstance(x.request, GetVersion)]
    assert versions and all(v.version == 3 for v in versions)


@pytest.mark.parametrize("as_user", WHO)
def test_pamtester_through_the_codec(env: PamEnv, server: ScriptedServer, as_user: bool) -> None:
    items = {"rhost": "client.example", "ruser": "bob"}
    proc = env.pamtester(
        SERVICE, USER, ["authenticate"], answers=[PASSWORD], items=items, as_user=as_user
    )
    assert proc.returncode == 0, proc.stderr
    assert "successfully authenticated" in proc.stdout + proc.stderr
    s = _only_auth(server, as_user)
    assert isinstance(s.request, PamRequest)
    assert (s.request.user, s.request.service, s.request.rhost, s.request.ruser) == (
        USER, SERVICE, "client.example", "bob",
    )  # fmt: skip
    assert s.password == PASSWORD.encode()


def test_pamtester_reports_a_refusal(env: PamEnv, server: ScriptedServer) -> None:
    server.replies[Command.AUTHENTICATE] = (PamStatus.AUTH_ERR, ())
    proc = env.pamtester(SERVICE, USER, ["authenticate"], answers=["wrong"])
    assert proc.returncode == 1
    assert "Authentication failure" in proc.stdout + proc.stderr
    assert _only_auth(server, False).password == b"wrong"


def test_a_whole_login_uses_each_command(env: PamEnv, server: ScriptedServer) -> None:
    ops = ["authenticate", "setcred", "acct_mgmt", "open_session", "close_session"]
    result = env.drive(SERVICE, USER, ops, answers=[PASSWORD])
    assert result.codes == [0] * 5
    cmds = [s.request.cmd for s in server.requests() if isinstance(s.request, PamRequest)]
    assert cmds == [
        Command.AUTHENTICATE, Command.SETCRED, Command.ACCT_MGMT, Command.OPEN_SESSION,
        Command.CLOSE_SESSION,
    ]  # fmt: skip
    # No command but AUTHENTICATE carries a password (§1.4).
    assert [s.password is not None for s in server.requests()] == [True] + [False] * 4


# ------------------------------------------------------------------ the replies


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (PamStatus.AUTH_ERR, "Authentication failure"),
        (PamStatus.USER_UNKNOWN, "User not known to the underlying authentication module"),
        (PamStatus.AUTHINFO_UNAVAIL, "Authentication service cannot retrieve authentication info"),
        (PamStatus.PERM_DENIED, "Permission denied"),
    ],
)
@pytest.mark.parametrize("as_user", WHO)
def test_statuses_reach_the_application(
    env: PamEnv, server: ScriptedServer, status: PamStatus, error: str, as_user: bool
) -> None:
    server.replies[Command.AUTHENTICATE] = (status, ())
    result = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)
    call = result["authenticate"]
    assert (call.rc, call.error) == (status, error)


@pytest.mark.parametrize("as_user", WHO)
def test_offline_auth_message(env: PamEnv, server: ScriptedServer, as_user: bool) -> None:
    server.replies[Command.AUTHENTICATE] = (PamStatus.SUCCESS, [offline_auth_item(0)])
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)[
        "authenticate"
    ]
    assert call.rc == 0
    assert call.infos == ["Authenticated with cached credentials."]


@pytest.mark.parametrize("as_user", WHO)
def test_offline_auth_message_with_expiry(
    env: PamEnv, server: ScriptedServer, as_user: bool
) -> None:
    server.replies[Command.AUTHENTICATE] = (PamStatus.SUCCESS, [offline_auth_item(4102444800)])
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)[
        "authenticate"
    ]
    assert call.rc == 0
    (text,) = call.infos
    # strftime %c of 2100-01-01 00:00 UTC in the namespace's time zone: the year suffices
    assert text.startswith(
        "Authenticated with cached credentials, your cached password will expire at: "
    )
    assert "2099" in text or "2100" in text


@pytest.mark.parametrize("as_user", WHO)
def test_offline_auth_delayed_message(env: PamEnv, server: ScriptedServer, as_user: bool) -> None:
    server.replies[Command.AUTHENTICATE] = (
        PamStatus.PERM_DENIED, [offline_auth_delayed_item(4102444800)],
    )  # fmt: skip
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)[
        "authenticate"
    ]
    assert call.rc == PamStatus.PERM_DENIED
    (text,) = call.infos
    assert text.startswith("Authentication is denied until: ")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (3 * 86400, "Your password will expire in 3 day(s)."),
        (5 * 3600, "Your password will expire in 5 hour(s)."),
        (120, "Your password will expire in 2 minute(s)."),
    ],
)
@pytest.mark.parametrize("as_user", WHO)
def test_expiry_warning(
    env: PamEnv, server: ScriptedServer, seconds: int, text: str, as_user: bool
) -> None:
    server.replies[Command.AUTHENTICATE] = (PamStatus.SUCCESS, [expire_warn_item(seconds)])
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)[
        "authenticate"
    ]
    assert (call.rc, call.infos) == (0, [text])


@pytest.mark.parametrize("as_user", WHO)
def test_grace_logins(env: PamEnv, server: ScriptedServer, as_user: bool) -> None:
    server.replies[Command.AUTHENTICATE] = (PamStatus.SUCCESS, [grace_login_item(2)])
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD], as_user=as_user)[
        "authenticate"
    ]
    assert (call.rc, call.infos) == (
        0, ["Your password has expired. You have 2 grace login(s) remaining."],
    )  # fmt: skip


@pytest.mark.parametrize("as_user", WHO)
def test_new_authtok_required_surfaces_at_acct_mgmt(
    env: PamEnv, server: ScriptedServer, as_user: bool
) -> None:
    # §1.7: AUTHENTICATE answered 12 succeeds for the application; pam_sss remembers it and
    # turns the next ACCT_MGMT success into NEW_AUTHTOK_REQD with its own message.
    server.replies[Command.AUTHENTICATE] = (PamStatus.NEW_AUTHTOK_REQD, ())
    ops = ["authenticate", "acct_mgmt"]
    result = env.drive(SERVICE, USER, ops, answers=[PASSWORD], as_user=as_user)
    assert result.codes == [PamStatus.SUCCESS, PamStatus.NEW_AUTHTOK_REQD]
    assert result["acct_mgmt"].infos == ["Password expired. Change your password now."]
    assert len(server.requests(Command.ACCT_MGMT)) == 1


def test_a_malformed_reply_item_is_dropped_not_fatal(env: PamEnv, server: ScriptedServer) -> None:
    # §1.6: a user-info item of the wrong length vanishes silently; the status stands.
    # This is why the encoders' exact lengths matter: a 4-byte time_t would show nothing.
    bad = ReplyItem(6, struct.pack("=2I", 1, 0))
    server.replies[Command.AUTHENTICATE] = (PamStatus.SUCCESS, [bad])
    call = env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD])["authenticate"]
    assert (call.rc, call.infos) == (0, [])


@pytest.mark.parametrize("as_user", WHO)
def test_account_expired_message(env: PamEnv, server: ScriptedServer, as_user: bool) -> None:
    server.replies[Command.ACCT_MGMT] = (
        PamStatus.ACCT_EXPIRED, [account_expired_item("Contact your administrator")],
    )  # fmt: skip
    call = env.drive(SERVICE, USER, ["acct_mgmt"], as_user=as_user)["acct_mgmt"]
    assert call.rc == PamStatus.ACCT_EXPIRED
    assert call.infos == ["Permission denied. Server message: Contact your administrator"]


@pytest.mark.parametrize("as_user", WHO)
def test_password_change_carries_old_and_new(
    env: PamEnv, server: ScriptedServer, as_user: bool
) -> None:
    server.replies[Command.CHAUTHTOK] = (PamStatus.AUTHTOK_ERR, [chpass_error_item("too short")])
    answers = ["Old-pw-1", "New-pw-2", "New-pw-2"]
    # root is not asked for the old password (§1.4)
    result = env.drive(
        SERVICE, USER, ["chauthtok"], answers=answers if as_user else answers[1:], as_user=as_user
    )
    call = result["chauthtok"]
    assert call.rc == PamStatus.AUTHTOK_ERR
    assert "Password change failed. Server message: too short" in call.infos
    (change,) = server.requests(Command.CHAUTHTOK)
    assert change.new_password == b"New-pw-2"
    # §1.4: pam_sss does not prompt root for the old password; it sends an empty token.
    assert isinstance(change.request, PamRequest) and change.request.authtok is not None
    if as_user:
        assert change.request.authtok.type is AuthTokType.PASSWORD
        assert change.password == b"Old-pw-1"
    else:
        assert change.request.authtok.type is AuthTokType.EMPTY
        assert change.password == b""


def test_offline_password_change_message(env: PamEnv, server: ScriptedServer) -> None:
    server.replies[Command.CHAUTHTOK_PRELIM] = (PamStatus.AUTHTOK_ERR, [offline_chpass_item()])
    result = env.drive(SERVICE, USER, ["chauthtok"], answers=["Old-pw-1"], as_user=True)
    assert result["chauthtok"].prompts == ["Current Password: "]
    assert "System is offline, password change not possible" in result["chauthtok"].infos


def test_pam_sss_refuses_root_without_asking(env: PamEnv, server: ScriptedServer) -> None:
    # §1.4 [verified]: pam_sss answers PAM_USER_UNKNOWN for "root" without connecting.
    result = env.drive(SERVICE, "root", ["authenticate"], answers=[PASSWORD])
    assert result.codes == [PamStatus.USER_UNKNOWN]
    assert server.seen == []


def test_a_request_over_the_cap_is_closed_and_the_next_login_works(
    env: PamEnv, server: ScriptedServer
) -> None:
    # §1.1: over 1024 bytes SSSD closes the connection; pam_sss then reports the service
    # unavailable, and nothing of the request reached a command.
    long = "x" * 1100
    result = env.drive(SERVICE, USER, ["authenticate"], answers=[long])
    assert result.codes == [PamStatus.AUTHINFO_UNAVAIL]
    assert server.requests() == []
    assert env.drive(SERVICE, USER, ["authenticate"], answers=[PASSWORD]).codes == [0]
