"""Logins through cached: Debian's ``pam_sss.so`` (the ctypes driver, ``testing.pamdriver``)
against ``cached serve`` with ``services = nss, pam``, whose backend binds to a real slapd
over ldaps:// or StartTLS, and falls back to cached credentials when it cannot reach it.

Each test has a private slapd (it sets passwords, stops or freezes the server) and a
private daemon. As root the client uses ``pipes/private/pam``, as uid 65534 ``pipes/pam``
(PAM reference §1.2). Time-dependent rules (the expiry of cached credentials, the end of
the failed-attempts delay) are reached by rewriting the times in the user's credentials
record in the entry store while the daemon runs, not by waiting.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.auth.offline import DAY, Credentials
from cached.cache.integrity import cache_paths
from cached.pam import protocol as pp
from testing import pammatrix
from testing.asuser import as_nobody
from testing.daemon import CachedDaemon
from testing.faultproxy import FaultProxy
from testing.nsenv import nss_env
from testing.pamenv import PamEnv, service_file, skip_reason
from testing.slapd import Dataset, LiveDirectory, Slapd, TLSFiles

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

SERVICE = "cached-login"
USER = "user00001"
OTHER = "user00002"
# Distinctive, so that a search of every log and store for it means something.
PASSWORD = "Zq7-pam-Secret-xK4"
NEW_PASSWORD = "Wm3-pam-Changed-hT8"
DOMAIN = "LDAP"

AUTH_OK, PERM_DENIED, AUTH_ERR, AUTHINFO_UNAVAIL, USER_UNKNOWN = 0, 6, 7, 9, 10
MODULE_UNKNOWN = 28
# client_request_timeout of the trickled-request test: seconds, short to wait out.
REQUEST_TIMEOUT = 2


@pytest.fixture
def directory(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A private TLS slapd where USER and OTHER have PASSWORD."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_pam"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
    ) as server:
        for user in (USER, OTHER):
            set_password(server, user, PASSWORD)
        yield LiveDirectory(slapd=server, expected=small_2307bis.expected)


def user_dn(server: Slapd, user: str) -> str:
    return f"uid={user},ou=people,{server.base_dn}"


def set_password(server: Slapd, user: str, password: str) -> None:
    server.ldap_modify(
        f"dn: {user_dn(server, user)}\nchangetype: modify\nreplace: userPassword\n"
        f"userPassword: {password}\n"
    )


@pytest.fixture
def login_daemon(
    daemon_factory: Callable[..., CachedDaemon], directory: LiveDirectory, tls_files: TLSFiles
) -> Callable[..., tuple[CachedDaemon, PamEnv]]:
    """``make(transport="ldaps"|"starttls"|"plain", uris=None, pam={}, **domain_opts)``:
    a daemon serving PAM over that transport, and the PAM clients for it."""

    def make(
        transport: str = "ldaps",
        uris: list[str] | None = None,
        pam: dict[str, Any] | None = None,
        **opts: Any,
    ) -> tuple[CachedDaemon, PamEnv]:
        s = directory.slapd
        if uris is None:
            uris = [s.ldaps_uri if transport == "ldaps" else s.uri]
        if transport == "starttls":
            opts.setdefault("ldap_id_use_start_tls", "true")
        d = daemon_factory(
            directory,
            uris=uris,
            daemon={"services": "nss, pam"},
            pam=pam or {},
            ldap_tls_cacert=tls_files.ca_cert,
            **opts,
        )
        return d, d.pam_env({SERVICE: service_file()})

    return make


def login(env: PamEnv, user: str, password: str, *, as_user: bool = False) -> list[int]:
    """authenticate + acct_mgmt (the driver stops at the first failure)."""
    return env.drive(SERVICE, user, ["authenticate", "acct_mgmt"], answers=[password],
                     as_user=as_user).codes  # fmt: skip


def infos(env: PamEnv, user: str, password: str) -> tuple[int, list[str]]:
    r = env.drive(SERVICE, user, ["authenticate"], answers=[password])
    return r["authenticate"].rc, r["authenticate"].infos


def rewrite_credentials(d: CachedDaemon, user: str, **changes: Any) -> Credentials:
    """Change fields of ``user``'s credentials record in the running daemon's entry
    store; returns the record as it was."""
    return pammatrix.rewrite_credentials(
        d.db_dir, DOMAIN, user, lambda c: dataclasses.replace(c, **changes)
    )


# -- online ---------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["ldaps", "starttls"])
def test_right_wrong_and_empty_passwords_as_root_and_as_a_user(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], transport: str
) -> None:
    d, env = login_daemon(transport)
    for as_user in (False, True):  # private socket, then the public one
        assert login(env, USER, PASSWORD, as_user=as_user) == [AUTH_OK, AUTH_OK]
        assert login(env, USER, "not-" + PASSWORD, as_user=as_user) == [AUTH_ERR]
        assert login(env, USER, "", as_user=as_user) == [AUTH_ERR]
    # The other commands of a login transaction.
    r = env.drive(SERVICE, USER, ["authenticate", "acct_mgmt", "open_session", "close_session",
                                  "setcred"], answers=[PASSWORD])  # fmt: skip
    assert r.codes == [AUTH_OK] * 5
    status = d.control("status")
    pam = next(c for c in status["children"] if c["name"] == "responder")["status"]["pam"]
    assert pam["logins_ok"] >= 3 and pam["logins_refused"] >= 4


def test_an_unknown_user_is_user_unknown(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _d, env = login_daemon()
    assert login(env, "nosuchuser", PASSWORD) == [USER_UNKNOWN]
    r = env.drive(SERVICE, "nosuchuser", ["acct_mgmt"])
    assert r.codes == [USER_UNKNOWN]


def test_password_change_is_refused_without_a_chpass_provider(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    _d, env = login_daemon(chpass_provider="none")
    r = env.drive(SERVICE, USER, ["chauthtok"], answers=[PASSWORD, NEW_PASSWORD, NEW_PASSWORD],
                  as_user=True)  # fmt: skip
    assert r.codes == [MODULE_UNKNOWN]


def test_a_password_the_admin_changed_stops_working_at_once(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    _d, env = login_daemon(cache_credentials="true")
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    set_password(directory.slapd, USER, NEW_PASSWORD)
    # Online, the server's answer beats the cached hash that still matches.
    assert login(env, USER, PASSWORD) == [AUTH_ERR]
    assert login(env, USER, NEW_PASSWORD) == [AUTH_OK, AUTH_OK]


def test_a_login_over_ldap_runs_starttls_whatever_ldap_id_use_start_tls(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    # ldap:// with ldap_id_use_start_tls = false: the lookups go in the clear, the
    # login's own connection runs StartTLS before the bind (SSSD's auth_connect_send
    # forces TLS there too), so the password never does. A server refusing StartTLS
    # is one not answering: offline, cached credentials (the PAM differential's
    # `plain` case against SSSD 2.8.2).
    s = directory.slapd
    _, env = login_daemon("plain")
    offset = s.log_offset()
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    log = s.log_path.read_text(errors="replace")[offset:].splitlines()
    def conns(marker: str) -> set[str]:
        return {m.group(1) for ln in log if marker in ln if (m := re.search(r"conn=(\d+)", ln))}

    tls_conns = conns("EXT oid=1.3.6.1.4.1.1466.20037")
    bind_conns = conns(f'BIND dn="{user_dn(s, USER)}"')
    assert bind_conns and bind_conns <= tls_conns, (bind_conns, tls_conns)


def _policy(base: str, *, max_age: int, warning: int, must_change: bool) -> str:
    return (
        f"dn: ou=policies,{base}\nobjectClass: organizationalUnit\nou: policies\n\n"
        f"dn: cn=default,ou=policies,{base}\nobjectClass: device\nobjectClass: pwdPolicy\n"
        f"cn: default\npwdAttribute: userPassword\npwdMaxAge: {max_age}\n"
        f"pwdExpireWarning: {warning}\npwdMustChange: {'TRUE' if must_change else 'FALSE'}\n"
        "pwdAllowUserChange: TRUE\n"
    )


@pytest.fixture
def ppolicy_directory(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    """A private TLS slapd with the password policy overlay (no policy entry yet)."""
    with Slapd(
        tmp_path_factory.mktemp("slapd_ppolicy"),
        small_2307bis.ldif,
        small_2307bis.expected.base_dn,
        tls=tls_files,
        ppolicy=True,
    ) as server:
        yield LiveDirectory(slapd=server, expected=small_2307bis.expected)


def test_the_password_policy_warns_of_expiry_and_forces_a_change_after_reset(
    daemon_factory: Callable[..., CachedDaemon],
    ppolicy_directory: LiveDirectory,
    tls_files: TLSFiles,
) -> None:
    s = ppolicy_directory.slapd
    s.ldap_modify(_policy(s.base_dn, max_age=86400 * 30, warning=86400 * 60, must_change=False))
    set_password(s, USER, PASSWORD)  # sets pwdChangedTime: expiry is 30 days away
    d = daemon_factory(
        ppolicy_directory, uris=[s.ldaps_uri], daemon={"services": "nss, pam"}, pam={},
        ldap_tls_cacert=tls_files.ca_cert,
    )  # fmt: skip
    env = d.pam_env({SERVICE: service_file()})
    rc, messages = infos(env, USER, PASSWORD)
    assert rc == AUTH_OK
    assert any("Your password will expire in" in m for m in messages), messages
    # The administrator resets the password: the next login must change it. pam_sss
    # lets authenticate pass and turns acct_mgmt into NEW_AUTHTOK_REQD (PAM reference §1.7).
    s.ldap_modify(
        f"dn: cn=default,ou=policies,{s.base_dn}\nchangetype: modify\n"
        "replace: pwdMustChange\npwdMustChange: TRUE\n\n"
        f"dn: {user_dn(s, USER)}\nchangetype: modify\nreplace: pwdReset\npwdReset: TRUE\n"
    )
    r = env.drive(SERVICE, USER, ["authenticate", "acct_mgmt"], answers=[PASSWORD])
    assert r.codes == [AUTH_OK, 12], r
    assert any("Change your password now" in m for m in r["acct_mgmt"].infos), r


# -- offline --------------------------------------------------------------------------


def test_offline_logins_use_the_cached_hash(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    d, env = login_daemon(cache_credentials="true", pam={"pam_verbosity": 2})
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    # OTHER is resolved (cached) but never logged in: no hash.
    assert env.drive(SERVICE, OTHER, ["acct_mgmt"]).codes == [AUTH_OK]
    report = d.cli("status").stdout
    assert "PAM responder: " in report and "1 logins served" in report
    assert "users with cached credentials: 1" in report
    directory.slapd.stop()
    rc, messages = infos(env, USER, PASSWORD)
    assert rc == AUTH_OK
    assert any("Authenticated with cached credentials" in m for m in messages), messages
    assert login(env, USER, "not-" + PASSWORD) == [AUTH_ERR]
    assert login(env, USER, "") == [AUTH_ERR]
    assert login(env, OTHER, PASSWORD) == [PERM_DENIED]
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    assert "2 with cached credentials" in d.cli("status").stdout


def test_cached_credentials_outlive_expiring_the_cache(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    # As SSSD's sss_cache -E: entries expire, cached passwords stay.
    d, env = login_daemon(cache_credentials="true")
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    done = d.cli("cache", "-E")
    assert done.returncode == 0, done.stderr
    directory.slapd.stop()
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]


def test_dropped_credentials_no_longer_work_offline(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    d, env = login_daemon(cache_credentials="true")
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    done = d.cli("cache", "--drop-credentials", USER)
    assert done.returncode == 0, done.stderr
    again = d.cli("cache", "--drop-credentials", USER)
    assert again.returncode != 0 and "No cache object matched" in again.stderr
    assert "users with cached credentials: 0" in d.cli("status").stdout
    directory.slapd.stop()
    assert login(env, USER, PASSWORD) == [PERM_DENIED]


def test_offline_without_cache_credentials_is_authinfo_unavail(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    _d, env = login_daemon()
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    directory.slapd.stop()
    assert login(env, USER, PASSWORD) == [AUTHINFO_UNAVAIL]


def test_cached_credentials_expire_after_offline_credentials_expiration(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    d, env = login_daemon(cache_credentials="true", pam={"offline_credentials_expiration": 2})
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    directory.slapd.stop()
    rc, messages = infos(env, USER, PASSWORD)
    assert rc == AUTH_OK
    assert any("your cached password will expire at" in m for m in messages), messages
    # The last online login 3 days ago: 2 days of offline logins are over.
    rewrite_credentials(d, USER, last_online=time.time() - 3 * DAY)
    assert login(env, USER, PASSWORD) == [PERM_DENIED]
    rewrite_credentials(d, USER, last_online=time.time() - 1 * DAY)
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]


def test_failed_offline_logins_delay_the_next_until_the_delay_ends(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    d, env = login_daemon(
        cache_credentials="true",
        pam={"offline_failed_login_attempts": 2, "offline_failed_login_delay": 10},
    )
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    directory.slapd.stop()
    assert login(env, USER, "wrong-1") == [AUTH_ERR]
    assert login(env, USER, "wrong-2") == [AUTH_ERR]
    # Two failures: even the right password waits out the delay, and is told until when.
    rc, messages = infos(env, USER, PASSWORD)
    assert rc == PERM_DENIED
    assert any("Authentication is denied until" in m for m in messages), messages
    # The last failure 11 minutes ago: the delay of 10 is over, the count starts again.
    rewrite_credentials(d, USER, last_failed=time.time() - 11 * 60)
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]


def test_a_frozen_server_costs_a_login_the_bounded_wait_then_cached_credentials(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    with FaultProxy("127.0.0.1", s.port) as proxy:
        d, env = login_daemon(
            "starttls", uris=[proxy.uri], cache_credentials="true",
            ldap_network_timeout=2, ldap_opt_timeout=3,
        )  # fmt: skip
        assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
        proxy.set(stall=True)
        start = time.monotonic()
        assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
        # Bounded by the backend's deadlines (2 s connect + 3 s StartTLS and bind, plus
        # the client's own start-up under load), far below pam_sss's 300 s poll.
        assert time.monotonic() - start < 120
        assert "using cached credentials" in d.log_text()


# -- security -------------------------------------------------------------------------


def test_the_password_is_in_no_log_and_no_store(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    d, env = login_daemon(cache_credentials="true")  # the daemon logs at debug level
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    assert login(env, USER, PASSWORD + "x") == [AUTH_ERR]
    directory.slapd.stop()
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
    assert login(env, USER, PASSWORD + "y") == [AUTH_ERR]
    d.stop()
    needle = PASSWORD.encode()
    found = [
        str(path)
        for path in Path(d.workdir).rglob("*")
        if path.is_file() and needle in path.read_bytes()
    ]
    assert found == []
    # The hash is there: the search looks where the password could have gone.
    entry_path, _ = cache_paths(str(d.db_dir), DOMAIN)
    assert b"$6$" in Path(entry_path).read_bytes()


# -- hostile clients ------------------------------------------------------------------


def _exchange(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` and read one reply (header + body); b"" when the server closed."""
    sock.sendall(data)
    head = sock.recv(16, socket.MSG_WAITALL)
    if len(head) < 16:
        return b""
    length = struct.unpack("=I", head[:4])[0]
    return head + sock.recv(length - 16, socket.MSG_WAITALL)


def test_malformed_and_oversize_requests_are_refused_and_logins_go_on(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    d, env = login_daemon()
    path = str(d.pipes_dir / "private" / "pam")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(path)
        assert _exchange(sock, pp.encode_request(pp.Command.GET_VERSION, pp.version_body()))
        # A body without its end marker: PAM_SYSTEM_ERR, and the connection stays.
        bad = pp.encode_request_body(user=USER, authtok=(1, b"x"))[:-4]
        reply = _exchange(sock, pp.encode_request(pp.Command.AUTHENTICATE, bad))
        assert pp.decode_reply(reply[16:]).status == pp.PamStatus.SYSTEM_ERR
        good = pp.encode_request_body(user="nosuchuser", service=SERVICE)
        reply = _exchange(sock, pp.encode_request(pp.Command.ACCT_MGMT, good))
        assert pp.decode_reply(reply[16:]).status == pp.PamStatus.USER_UNKNOWN
        # Over SSSD's 1024-byte cap: closed.
        huge = pp.encode_request_body(user=USER, authtok=(1, b"p" * 2000))
        assert _exchange(sock, pp.encode_request(pp.Command.AUTHENTICATE, huge)) == b""
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]


def test_a_trickled_request_is_dropped_after_the_request_timeout(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]],
) -> None:
    d, env = login_daemon(nss={"client_request_timeout": REQUEST_TIMEOUT})
    frame = pp.encode_request(pp.Command.AUTHENTICATE, bytes(984))  # never finished
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(d.pipes_dir / "pam"))
        closed = False
        # A byte every quarter of client_request_timeout, for ten times that timeout
        # (and less than client_idle_timeout, 60 s): the server gives a request
        # REQUEST_TIMEOUT from its first byte, not from the last one.
        for i in range(40):
            try:
                sock.sendall(frame[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sock.settimeout(REQUEST_TIMEOUT / 4)
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                # Closed with a byte of ours unread (one sent just before the close):
                # the kernel resets rather than ends the connection.
                closed = True
                break
        assert closed
    assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]


_FLOOD = """
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[4])
version, request = bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(version)
    s.recv(20)
    s.sendall(request)
    socks.append(s)
print("sent", flush=True)
for s in socks:
    s.settimeout(300)
    s.recv(4096)
"""


def test_one_users_flood_of_logins_does_not_hold_up_roots(
    login_daemon: Callable[..., tuple[CachedDaemon, PamEnv]], directory: LiveDirectory
) -> None:
    s = directory.slapd
    with FaultProxy("127.0.0.1", s.port) as proxy:
        d, env = login_daemon(
            "starttls", uris=[proxy.uri], cache_credentials="true",
            ldap_network_timeout=30, ldap_opt_timeout=60,
        )  # fmt: skip
        assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
        # A slow server: every login's StartTLS, TLS handshake and bind take round trips
        # of half a second each, one login at a time on the login thread.
        proxy.set(delay_up=0.25, delay_down=0.25)
        flood = 6
        request = pp.encode_request(
            pp.Command.AUTHENTICATE,
            pp.encode_request_body(user=USER, service=SERVICE, authtok=(1, b"guess")),
        )
        version = pp.encode_request(pp.Command.GET_VERSION, pp.version_body())
        argv = [*as_nobody(), sys.executable, "-I", "-c", _FLOOD, "/var/lib/sss/pipes/pam",
                version.hex(), request.hex(), str(flood)]  # fmt: skip
        environ = {k: v for k, v in nss_env().items() if k != "_SSS_LOOPS"}
        proc = subprocess.Popen(env.command(argv), env=environ, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "sent"

            def queued() -> int:
                for child in d.control("status")["children"]:
                    if child["name"] == "backend LDAP":
                        return int(child["status"]["queued_logins"])
                raise LookupError("no backend status")

            while queued() < flood - 2:  # the flood reached the backend's login queue
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.05)
            # Root's login waits for at most the login in progress, not the whole flood:
            # when it is done, logins of the flood still wait.
            assert login(env, USER, PASSWORD) == [AUTH_OK, AUTH_OK]
            assert queued() >= 1
        finally:
            proxy.heal()
            try:
                proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
