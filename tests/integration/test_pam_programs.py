"""Real programs log in through ``pam_sss.so`` and SSSD 2.8.2: ``su - alice`` typed at a
terminal (tmux) and an ``sshd`` password login in a network namespace
(:mod:`testing.pamprograms`), against slapd over ldaps, online and with the server
stopped (cached credentials).

The same harness runs cached once it has a PAM responder: only the daemon differs.
Needs root, libpam-sss, SSSD, tmux, openssh-server, openssh-client and sshpass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import pamenv, pammatrix, pamprograms

_SKIP = pamenv.skip_reason() or pammatrix.SssdPam().skip_reason() or pamprograms.skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

USER = "alice"
PASSWORD = pammatrix.PASSWORDS[USER]
SSH_FAILED = 255  # ssh's own status when the login fails


@pytest.fixture(scope="module")
def sssd_env(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[pamenv.PamEnv, pammatrix.MatrixDirectory]]:
    top = tmp_path_factory.mktemp("pamprog")
    with pammatrix.MatrixDirectory(top / "dir") as directory:
        config = pammatrix.PamConfig(
            pammatrix.BASE,
            {**pammatrix.base_domain_options(), **directory.options("ldaps")},
            {"pam_verbosity": 2},
        )
        daemon = pammatrix.SssdPam().make(top / "sssd", config)
        daemon.start()
        try:
            pamd = pamenv.make_pamd(top / "pam.d", pamprograms.pam_services())
            yield pamenv.PamEnv(daemon.pipes_dir, pamd, daemon.mc_dir), directory
        finally:
            daemon.stop()


def test_su_typed_at_a_terminal(
    sssd_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = sssd_env
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


def test_su_offline_with_cached_credentials(
    sssd_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = sssd_env
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
    sssd_env: tuple[pamenv.PamEnv, pammatrix.MatrixDirectory], tmp_path: Path
) -> None:
    env, directory = sssd_env
    directory.reset()
    wrong = pamprograms.ssh_login(env, tmp_path / "ssh", USER, "not-the-password")
    assert wrong.returncode == SSH_FAILED, (wrong, pamprograms.sshd_log(tmp_path / "ssh"))
    assert "Permission denied (keyboard-interactive)" in wrong.stderr, wrong.stderr
    right = pamprograms.ssh_login(env, tmp_path / "ssh", USER, PASSWORD)
    assert right.returncode == 0, (right, pamprograms.sshd_log(tmp_path / "ssh"))
    assert right.stdout.split() == [USER]
