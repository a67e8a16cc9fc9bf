"""Real programs log in through ``pam_sss.so``, served by cached and by SSSD 2.8.2 alike:
``su - alice`` and alice's ``passwd`` typed at a terminal (tmux) and an ``sshd`` password
login in a network namespace (:mod:`testing.pamprograms`), against slapd over ldaps,
online and with the server stopped (cached credentials). Only the daemon differs between
the two runs. Needs root, libpam-sss, SSSD, tmux, openssh-server, openssh-client and sshpass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import pamenv, pammatrix, pamprograms

_SKIP = pamenv.skip_reason() or pammatrix.SssdPam().skip_reason() or pamprograms.skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

USER = "alice"
PASSWORD = pammatrix.PASSWORDS[USER]
UID, GID = 20001, 20000  # alice's, in pammatrix.ldif()
SSH_FAILED = 255  # ssh's own status when the login fails


@pytest.fixture(scope="module", params=[pammatrix.CachedPam(), pammatrix.SssdPam()],
                ids=["cached", "sssd"])  # fmt: skip
def login_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[pamenv.PamEnv, pammatrix.MatrixDirectory]]:
    top = tmp_path_factory.mktemp("pamprog")
    with pammatrix.MatrixDirectory(top / "dir") as directory:
        config = pammatrix.PamConfig(
            pammatrix.BASE,
            {**pammatrix.base_domain_options(), **directory.options("ldaps")},
            {"pam_verbosity": 2},
        )
        kind: pammatrix.PamDaemonKind = request.param
        daemon = kind.make(top / kind.name, config)
        daemon.start()
        try:
            pamd = pamenv.make_pamd(top / "pam.d", pamprograms.pam_services())
            yield pamenv.PamEnv(daemon.pipes_dir, pamd, daemon.mc_dir), directory
        finally:
            daemon.stop()


def test_su_typed_at_a_terminal(
    login_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = login_env
    directory.reset()
    with pamprograms.su_session(env, tmp_path / "wrong", USER) as term:
        term.wait_for(r"^Password: ?$")
        term.type("not-the-password")
        screen = term.wait_for(r"^\[su exit \d+\]")
        assert "su: Authentication failure" in screen and "[su exit 1]" in screen, screen
    with pamprograms.su_session(env, tmp_path / "right", USER) as term:
        term.wait_for(r"^Password: ?$")
        term.type(PASSWORD)
        term.wait_for(r"\$ ?$")
        term.type("echo user=$(id -un) uid=$(id -u); exit")
        screen = term.wait_for(r"^\[su exit \d+\]")
        assert "user=alice uid=20001" in screen and "[su exit 0]" in screen, screen
        assert PASSWORD not in screen


def test_passwd_typed_at_a_terminal_by_the_user(
    login_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = login_env
    directory.reset()
    new = pammatrix.NEW_PASSWORD
    # Before the tests that stop the server: after one, the daemon answers a change as
    # offline until it has found the server again (SSSD after its offline_timeout, a
    # minute). Polled all the same: a wrong current password is answered by the
    # server once it is reachable.
    deadline = time.monotonic() + 300
    while True:
        r = env.drive("passwd", USER, ["chauthtok"], answers=["not-the-password"],
                      as_user=True)  # fmt: skip
        if "Old password not accepted." in " ".join(r["chauthtok"].infos):
            break
        assert time.monotonic() < deadline, r
        time.sleep(1)
    try:
        with pamprograms.passwd_session(env, tmp_path / "wrong", UID, GID) as term:
            term.wait_for(r"^Current Password: ?$")
            term.type("not-the-password")
            screen = term.wait_for(r"^\[passwd exit \d+\]")
            assert "Old password not accepted." in screen, screen
            assert "[passwd exit 0]" not in screen, screen
        with pamprograms.passwd_session(env, tmp_path / "right", UID, GID) as term:
            term.wait_for(r"^Current Password: ?$")
            term.type(PASSWORD)
            term.wait_for(r"^New Password: ?$")
            term.type(new)
            term.wait_for(r"^Reenter new Password: ?$")
            term.type(new)
            screen = term.wait_for(r"^\[passwd exit \d+\]")
            assert "password updated successfully" in screen, screen
            assert "[passwd exit 0]" in screen, screen
            assert PASSWORD not in screen and new not in screen
        assert env.drive("su", USER, ["authenticate"], answers=[new]).codes == [0]
        assert env.drive("su", USER, ["authenticate"], answers=[PASSWORD]).codes == [7]
    finally:
        directory.reset()


def test_su_offline_with_cached_credentials(
    login_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = login_env
    directory.reset()
    assert env.drive("su", USER, ["authenticate"], answers=[PASSWORD]).codes == [0]
    directory.set_state("stopped")
    try:
        with pamprograms.su_session(env, tmp_path / "offline", USER) as term:
            term.wait_for(r"^Password: ?$")
            term.type(PASSWORD)
            screen = term.wait_for(r"Authenticated with cached credentials")
            term.wait_for(r"\$ ?$")
            term.type("echo user=$(id -un); exit")
            screen = term.wait_for(r"^\[su exit \d+\]")
            assert "user=alice" in screen and "[su exit 0]" in screen, screen
    finally:
        directory.reset()


def test_sshd_password_login(
    login_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = login_env
    directory.reset()
    wrong = pamprograms.ssh_login(env, tmp_path / "ssh", USER, "not-the-password")
    assert wrong.returncode == SSH_FAILED, (wrong, pamprograms.sshd_log(tmp_path / "ssh"))
    assert "Permission denied (keyboard-interactive)" in wrong.stderr, wrong.stderr
    right = pamprograms.ssh_login(env, tmp_path / "ssh", USER, PASSWORD)
    assert right.returncode == 0, (right, pamprograms.sshd_log(tmp_path / "ssh"))
    assert right.stdout.split() == [USER]
