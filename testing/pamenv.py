"""Run real PAM clients (``pam_sss.so`` under ``pamtester`` or :mod:`testing.pamdriver`)
in a private mount namespace.

Built on :mod:`testing.nsenv`: the same ``unshare -m`` with private propagation, the same
bind mount of the test's ``pipes_dir`` over ``/var/lib/sss/pipes`` (so the PAM sockets a
server in the test process creates there are the ones ``pam_sss`` finds), plus a bind
mount of a generated directory over ``/etc/pam.d`` holding only the test's services. A
tmpfs over the pipes directory would hide a server that lives outside the namespace;
the bind mount gives the same isolation and keeps the sockets root:root, which
``pam_sss`` 2.8.2 checks along with their modes (PAM reference §1.2).

As root the client uses ``pipes/private/pam`` (0600); with ``as_user=True`` the command
runs as uid/gid 65534 (:func:`testing.asuser.as_nobody`) and uses ``pipes/pam`` (0666).
``pipes_dir`` itself must then be traversable by everyone (0755): inside the namespace it
is ``/var/lib/sss/pipes``, whatever the modes of its parents outside.

``_SSS_LOOPS`` is removed from the environment: ``_SSS_LOOPS=NO`` makes ``pam_sss``
fail with PAM_SERVICE_ERR without connecting (§1.2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from testing.asuser import NOBODY, as_nobody
from testing.nsenv import MOUNT_FAILED, NsEnvError, nss_command, nss_env
from testing.nsenv import skip_reason as nss_skip_reason

PAM_SSS: Final = Path("/usr/lib/x86_64-linux-gnu/security/pam_sss.so")
PAMTESTER: Final = "pamtester"
DRIVER: Final = Path(__file__).with_name("pamdriver.py")
PUBLIC_SOCKET: Final = "pam"
PRIVATE_SOCKET: Final = "private/pam"

# $1: the pam.d directory; then the command.
_WRAPPER = f"""
mount --bind "$1" /etc/pam.d || {{ echo "pamenv: mount --bind of /etc/pam.d failed" >&2;
    exit {MOUNT_FAILED}; }}
shift
exec "$@"
"""


def skip_reason() -> str | None:
    """Why these tests cannot run here, or None (root, libnss-sss, libpam-sss, pamtester)."""
    reason = nss_skip_reason()
    if reason is not None:
        return reason
    if not PAM_SSS.exists():
        return f"{PAM_SSS} is missing: install Debian's libpam-sss"
    if shutil.which(PAMTESTER) is None:
        return "pamtester is missing: install Debian's pamtester"
    return None


def service_file(options: str = "", *, control: str = "required") -> str:
    """A PAM service that asks ``pam_sss.so`` alone for all four management groups."""
    opts = f" {options}" if options else ""
    return "".join(
        f"{group:<9}{control} {PAM_SSS}{opts}\n"
        for group in ("auth", "account", "password", "session")
    )


def make_pamd(directory: str | os.PathLike[str], services: Mapping[str, str]) -> Path:
    """Create ``directory`` (0755) holding one file (0644) per service name."""
    d = Path(directory)
    d.mkdir(mode=0o755, parents=True, exist_ok=True)
    d.chmod(0o755)
    for name, text in services.items():
        path = d / name
        path.write_text(text)
        path.chmod(0o644)
    return d


def make_pipes(directory: str | os.PathLike[str]) -> Path:
    """Create a pipes directory as SSSD lays it out: 0755, with ``private/`` 0700."""
    d = Path(directory)
    (d / "private").mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o755)
    (d / "private").chmod(0o700)
    return d


@dataclass
class PamEnv:
    """The paths one test's PAM clients run with: ``pipes_dir`` (:func:`make_pipes`),
    ``pamd_dir`` (:func:`make_pamd`) and ``mc_dir``, which nsenv bind-mounts over
    ``/var/lib/sss/mc`` (PAM does not use it: an empty directory will do)."""

    pipes_dir: Path
    pamd_dir: Path
    mc_dir: Path

    def command(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """The full command line running ``argv`` in the namespace (as root)."""
        inner = ["/bin/sh", "-c", _WRAPPER, "pamenv", os.fspath(self.pamd_dir), *argv]
        return nss_command(inner, self.pipes_dir, self.mc_dir, files_first=True)

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion in the namespace; never raises on its exit status.
        Raises :class:`testing.nsenv.NsEnvError` when the namespace could not be made."""
        environ = {k: v for k, v in nss_env(env).items() if k != "_SSS_LOOPS"}
        proc = subprocess.run(
            self.command(argv),
            env=environ,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode == MOUNT_FAILED and "mount --bind" in proc.stderr:
            raise NsEnvError(proc.stderr.strip())
        return proc

    def pamtester(
        self,
        service: str,
        user: str,
        ops: Sequence[str],
        *,
        answers: Sequence[str] = (),
        items: Mapping[str, str] | None = None,
        as_user: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """``pamtester -v [-I k=v ...] SERVICE USER OPS...`` with one answer per line."""
        argv: list[str] = [*as_nobody()] if as_user else []
        argv += [PAMTESTER, "-v"]
        for key, value in (items or {}).items():
            argv += ["-I", f"{key}={value}"]
        argv += [service, user, *ops]
        return self.run(argv, input="".join(f"{a}\n" for a in answers))

    def drive(
        self,
        service: str,
        user: str,
        ops: Sequence[str | tuple[str, int]],
        *,
        answers: Sequence[str] = (),
        items: Mapping[str, str] | None = None,
        as_user: bool = False,
        timeout: float = 120.0,
    ) -> DriverResult:
        """Run :mod:`testing.pamdriver` in the namespace; see :class:`DriverResult`."""
        spec: dict[str, Any] = {
            "service": service,
            "user": user,
            "ops": [op if isinstance(op, str) else list(op) for op in ops],
            "answers": list(answers),
            "items": dict(items or {}),
        }
        if as_user:
            spec["uid"] = NOBODY
        proc = self.run(
            [sys.executable, "-I", os.fspath(DRIVER), json.dumps(spec)], timeout=timeout
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"pamdriver failed ({proc.returncode}): {proc.stderr.strip()}")
        return DriverResult(json.loads(proc.stdout))


@dataclass(frozen=True)
class Call:
    """One PAM call: its name, return code, ``pam_strerror`` text and the conversation
    messages it produced as ``(style, text)`` (4 = TEXT_INFO, 3 = ERROR_MSG, 1/2 prompts)."""

    op: str
    rc: int
    error: str
    messages: tuple[tuple[int, str], ...]

    @property
    def infos(self) -> list[str]:
        """The TEXT_INFO and ERROR_MSG texts, in order (what a user would read)."""
        return [text for style, text in self.messages if style in (3, 4)]

    @property
    def prompts(self) -> list[str]:
        return [text for style, text in self.messages if style in (1, 2)]


class DriverResult:
    """What :mod:`testing.pamdriver` reported: ``start`` (pam_start's code), ``calls``
    (stops after the first failure, like pamtester), ``unanswered`` answers and
    ``seconds``, the transaction's wall time from pam_start to pam_end; ``env``, the PAM
    environment after the last call (pam_getenvlist)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.start: int = raw["start"]
        self.calls = [
            Call(r["op"], r["rc"], r["error"], tuple((s, t) for s, t in r["messages"]))
            for r in raw["results"]
        ]
        self.unanswered: int = raw.get("unanswered", 0)
        self.seconds: float = raw.get("seconds", 0.0)
        self.env: dict[str, str] = dict(
            e.split("=", 1) for e in raw.get("env", []) if "=" in e
        )

    def __getitem__(self, op: str) -> Call:
        for call in self.calls:
            if call.op == op:
                return call
        raise KeyError(f"{op} was not called (calls: {[c.op for c in self.calls]})")

    @property
    def codes(self) -> list[int]:
        return [c.rc for c in self.calls]

    def __repr__(self) -> str:
        return f"DriverResult(start={self.start}, calls={self.calls!r})"
