"""Real programs logging in through ``pam_sss.so``: ``su - USER`` typed at a terminal
(tmux), ``passwd`` typed there by the user, and an ``sshd`` password login, all in the
private mount namespace of :mod:`testing.pamenv` (the test's ``/etc/pam.d`` and PAM
sockets, NSS through libnss_sss after ``files``).

``su``: a tmux server is started inside the namespace (it keeps the namespace alive; its
socket lives in the test's work directory, outside the bind mounts, so ``send-keys`` and
``capture-pane`` run from outside). Its one pane runs ``su - USER`` as uid 65534 (``su``
is setuid root, so ``pam_sss`` sees a caller uid of 65534 and uses the public socket),
then prints ``[su exit N]``; ``remain-on-exit`` keeps the pane's text after that.

``sshd``: run in a network namespace of its own (:mod:`testing.sshd`). The client is
``ssh`` under ``sshpass`` (the password from the environment, never the command line),
keyboard-interactive only, so the password reaches PAM's conversation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Final

from testing import sshd
from testing.asuser import as_nobody
from testing.nsenv import nss_env
from testing.pamenv import PamEnv, service_file

TMUX: Final = "tmux"
SSHPASS: Final = "sshpass"
#: PAM services of the programs: ``su`` uses ``su-l`` for ``su -``.
SERVICES: Final = ("su", "su-l", "sshd", "passwd")
TIMEOUT: Final = 120.0


def skip_reason() -> str | None:
    for prog, package in ((TMUX, "tmux"), (sshd.SSHD, "openssh-server"),
                          (sshd.SSH, "openssh-client"), (SSHPASS, "sshpass"),
                          (sshd.SSH_KEYGEN, "openssh-client")):  # fmt: skip
        if shutil.which(prog) is None:
            return f"{prog} is missing: install Debian's {package}"
    return None


def pam_services(options: str = "") -> dict[str, str]:
    """The programs' PAM services, each ``pam_sss.so`` alone (:func:`service_file`)."""
    return {name: service_file(options) for name in SERVICES}


class Tmux:
    """One tmux server in the namespace, with one pane running ``argv``."""

    def __init__(self, env: PamEnv, workdir: Path, argv: list[str]) -> None:
        self.env = env
        workdir.mkdir(parents=True, exist_ok=True)
        self.socket = workdir / "tmux.sock"
        conf = workdir / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\nset -g history-limit 1000\n")
        self.conf = conf
        self.argv = argv

    def start(self) -> None:
        proc = self.env.run(
            [TMUX, "-S", str(self.socket), "-f", str(self.conf), "new-session", "-d",
             "-x", "160", "-y", "40", *self.argv],
            timeout=TIMEOUT,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"tmux new-session failed ({proc.returncode}): {proc.stderr}")

    def _tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TMUX, "-S", str(self.socket), *args],
            capture_output=True, text=True, check=False, timeout=TIMEOUT,
        )  # fmt: skip

    def type(self, text: str) -> None:
        """Type ``text`` (literally) and Enter, as a user at the terminal would."""
        self._tmux("send-keys", "-t", "0", "-l", text)
        self._tmux("send-keys", "-t", "0", "Enter")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "0", "-S", "-1000").stdout

    def wait_for(self, pattern: str, timeout: float = TIMEOUT) -> str:
        """The screen once ``pattern`` (a regex) appears on it; polls the pane."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if re.search(pattern, text, re.M):
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"{pattern!r} not on the screen in {timeout} s:\n{text}")
            time.sleep(0.05)

    def stop(self) -> None:
        self._tmux("kill-server")

    def __enter__(self) -> Tmux:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def su_session(env: PamEnv, workdir: Path, user: str) -> Tmux:
    """A tmux pane where uid 65534 runs ``su - user``, then ``[su exit N]``."""
    script = f'{" ".join(as_nobody())} su - {user}; echo "[su exit $?]"'
    return Tmux(env, workdir, ["/bin/sh", "-c", script])


def passwd_session(env: PamEnv, workdir: Path, uid: int, gid: int) -> Tmux:
    """A tmux pane where the user ``uid`` runs ``passwd`` (setuid root: pam_sss sees
    the user's uid, asks for the current password and uses the public socket), then
    ``[passwd exit N]``."""
    drop = f"setpriv --reuid={uid} --regid={gid} --clear-groups"
    script = f'{drop} passwd; echo "[passwd exit $?]"'
    return Tmux(env, workdir, ["/bin/sh", "-c", script])


def ssh_login(
    env: PamEnv, workdir: Path, user: str, password: str, command: tuple[str, ...] = ("id", "-un")
) -> subprocess.CompletedProcess[str]:
    """Log ``user`` in over ssh with ``password`` and run ``command``; sshpass's exit
    status (255: the login failed; otherwise ``command``'s). PAM does every password."""
    sshd.sshd_config(
        workdir,
        "UsePAM yes\nKbdInteractiveAuthentication yes\nPasswordAuthentication no\n"
        "PubkeyAuthentication no\n",
    )
    client = [SSHPASS, "-e", *sshd.ssh_client(user, _SSH_OPTIONS), *command]
    environ = {k: v for k, v in nss_env().items() if k != "_SSS_LOOPS"}
    environ["SSHPASS"] = password
    return subprocess.run(
        ["unshare", "--net", "--", *env.command(sshd.login_command(workdir, client))],
        env=environ, capture_output=True, text=True, check=False, timeout=TIMEOUT * 2,
    )  # fmt: skip


#: Keyboard-interactive only, one prompt: the password reaches PAM's conversation.
_SSH_OPTIONS: Final = (
    "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=keyboard-interactive",
    "-o", "NumberOfPasswordPrompts=1",
)  # fmt: skip

sshd_log = sshd.sshd_log
