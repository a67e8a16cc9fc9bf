"""Run Python as an unprivileged user (uid 65534), wherever the checkout is.

The checkout and its ``.venv`` may sit under a folder only root can enter (``/root``
is 0700, so are ``mktemp -d`` folders): uid 65534 can then import nothing from them.
So the first call copies the ``cached`` package and the distributions it requires
(``ldap3``, ``lmdb``, ...: exactly what the venv has, C extensions included) into a
world-readable folder of its own under the system's temporary directory, and runs an
interpreter of the same Python version that uid 65534 can execute, with that folder on
``PYTHONPATH``. The code that runs is the checkout's; only its location differs.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

NOBODY: Final = 65534


def as_nobody() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _top_level_modules() -> set[str]:
    """``cached`` and the top-level modules of the distributions it requires."""
    wanted = {"cached"}
    for req in importlib.metadata.requires("cached") or []:
        if "extra ==" in req:
            continue
        dist = re.split(r"[\s;=<>!~\[]", req, maxsplit=1)[0].lower().replace("_", "-")
        wanted.update(
            mod
            for mod, dists in importlib.metadata.packages_distributions().items()
            if any(d.lower().replace("_", "-") == dist for d in dists)
        )
    return wanted


def _interpreter() -> str:
    """A python of this version that uid 65534 can run (the venv's base may be in
    /root, e.g. pyenv's)."""
    want = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        getattr(sys, "_base_executable", ""),
        os.path.realpath(sys.executable),
        shutil.which(want) or "",
        f"/usr/bin/{want}",
        f"/usr/local/bin/{want}",
    ]
    probe = f"import sys; sys.exit(sys.version_info[:2] != {tuple(sys.version_info[:2])})"
    for exe in dict.fromkeys(c for c in candidates if c):
        r = subprocess.run([*as_nobody(), exe, "-c", probe], capture_output=True,
                           timeout=60, cwd="/", check=False)  # fmt: skip
        if r.returncode == 0:
            return exe
    raise RuntimeError(f"no {want} that uid {NOBODY} can run among {candidates}")


@functools.cache
def _site() -> tuple[str, str]:
    """(interpreter, site folder) for uid 65534, made once per test run."""
    site = tempfile.mkdtemp(prefix="cached-nobody-site-")
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    for mod in sorted(_top_level_modules()):
        spec = importlib.util.find_spec(mod)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if spec.submodule_search_locations:  # a package: its folder
            shutil.copytree(origin.parent, Path(site) / mod,
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        else:  # a single module or extension (lmdb's cpython.so is inside its package)
            shutil.copy2(origin, Path(site) / origin.name)
    for root, _dirs, files in os.walk(site):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    os.chmod(site, 0o755)
    return _interpreter(), site


def run_python(
    args: Sequence[str], env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` as uid 65534 with the checkout's ``cached`` importable."""
    exe, site = _site()
    env = {**os.environ, **(env or {}), "PYTHONPATH": site}
    return subprocess.run(
        [*as_nobody(), exe, "-s", *args], capture_output=True, text=True, env=env,
        cwd="/", check=False, **{"timeout": 120, **kw},
    )  # fmt: skip


def start_python(args: Sequence[str], env: dict[str, str] | None = None,
                 **kw: Any) -> subprocess.Popen[str]:  # fmt: skip
    """``run_python`` without waiting: the caller talks to it and ends it, by pid."""
    exe, site = _site()
    env = {**os.environ, **(env or {}), "PYTHONPATH": site}
    return subprocess.Popen(
        [*as_nobody(), exe, "-s", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env, cwd="/", **kw,
    )  # fmt: skip


def open_the_way(path: Path) -> None:
    """Let every user traverse the folders above ``path`` that tests created (the
    temporary directories of pytest are 0700). Test folders only."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for parent in Path(path).resolve().parents:
        if parent == tmp or tmp not in parent.parents:
            break
        parent.chmod(parent.stat().st_mode | 0o005)
