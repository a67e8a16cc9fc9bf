"""The user's credential cache: the name ``krb5_ccname_template`` gives it, and the file
written owned by the user, mode 0600 (SSSD's ``krb5_child`` writes it as the user).

Only ``FILE:`` caches are written (SSSD's default type); the template is expanded as
SSSD's ``expand_ccname_template`` does for ``%u`` (login name), ``%U`` (uid), ``%p``
(principal), ``%r`` (realm), ``%h`` (home directory), ``%d`` (``krb5_ccachedir``) and
``%%``, and a trailing ``XXXXXX`` becomes six random characters, the file created new
(``O_EXCL``) as ``mkstemp`` does.

The credentials are first written by libkrb5 into a file in a directory of root's own
(0700), then copied into the user's file through a descriptor opened with ``O_EXCL``
and ``O_NOFOLLOW`` and handed to the user with ``fchown``: no path in the
world-writable ``/tmp`` is ever opened twice or followed, so a user cannot point the
daemon's write at another file. A name without ``XXXXXX`` is replaced whole by a
``rename`` in its directory, which replaces a symbolic link itself, never its target.

A ccache is read back (a TGT's renewal) the same way: opened with ``O_NOFOLLOW``, and
taken only when it is a regular file the user owns, so a user cannot have the daemon
read (and hand back, renewed) a ccache that is not theirs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import string
import tempfile
from collections.abc import Callable
from typing import TypeVar

FILE = "FILE:"
T = TypeVar("T")
_RANDOM = string.ascii_letters + string.digits


def expand(template: str, *, name: str, uid: int, principal: str, home: str,
           ccachedir: str) -> str:  # fmt: skip
    realm = principal.rpartition("@")[2]
    values = {"u": name, "U": str(uid), "p": principal, "r": realm, "h": home,
              "d": ccachedir, "%": "%"}  # fmt: skip
    out: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "%" and i + 1 < len(template):
            out.append(values[template[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def write(ccname: str, uid: int, gid: int, fill: Callable[[str], None]) -> str:
    """Write a ``FILE:`` ccache named ``ccname`` (expanded) for ``uid``/``gid``;
    ``fill(name)`` writes the credentials into the libkrb5 ccache ``name``. Returns the
    name of the file written (``FILE:/path``)."""
    path = ccname[len(FILE):] if ccname.startswith(FILE) else ccname
    private = tempfile.mkdtemp(prefix="cached-krb5-")
    try:
        staged = os.path.join(private, "ccache")
        fill(FILE + staged)
        with open(staged, "rb") as f:
            data = f.read()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if path.endswith("XXXXXX"):
        fd, path = _create_unique(path[:-6])
        _fill_fd(fd, data, uid, gid)
        return FILE + path
    directory, base = os.path.split(path)
    fd, tmp = _create_unique(os.path.join(directory, f".{base}."))
    try:
        _fill_fd(fd, data, uid, gid)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return FILE + path


def read_owned(ccname: str, uid: int) -> bytes:
    """The bytes of the ``FILE:`` ccache ``ccname`` when it is a regular file ``uid``
    owns; FileNotFoundError when it is gone, PermissionError when it is not the
    user's (a symbolic link, another owner)."""
    path = ccname[len(FILE):] if ccname.startswith(FILE) else ccname
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PermissionError(f"{path} is a symbolic link") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            raise PermissionError(f"{path} is not a file of uid {uid}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read()


def staged(data: bytes, use: Callable[[str], T]) -> T:
    """``use(name)`` on a copy of the ccache ``data`` in a directory of root's own
    (``FILE:`` name), removed afterwards."""
    private = tempfile.mkdtemp(prefix="cached-krb5-")
    try:
        path = os.path.join(private, "ccache")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return use(FILE + path)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _create_unique(prefix: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = prefix + "".join(secrets.choice(_RANDOM) for _ in range(6))
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {prefix}XXXXXX")


def _fill_fd(fd: int, data: bytes, uid: int, gid: int) -> None:
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)

