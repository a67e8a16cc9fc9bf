"""State directories checked whole: every directory from ``/`` down, not only the last.

``db_dir`` (root's cache), ``pipes_dir`` (the sockets libnss_sss and the tools connect
to), ``mc_dir`` (the files libnss_sss maps) and the pid file's directory are reached by
name: by each child of the monitor every time it starts, by libnss_sss, by the tools.
A name is only as safe as every directory on its way. A user who owns one of them, or
may write to it, can rename what lies below and put a directory of their own in its
place; the next process that opens the name then writes root's cache there, or binds
root's socket there.

So a name is walked from ``/`` one component at a time, each opened relative to the
one before (``openat`` with ``O_PATH|O_NOFOLLOW|O_DIRECTORY``), so that what is checked
is what the walk went through, and a symlink anywhere on the way is refused. Every
directory must belong to root (or to the user the daemon runs as, for tests run
unprivileged) and no other user may write to it: not others, and not a group other
than root. Group root is root: Debian's sssd-common creates ``/var/lib/sss/mc`` as 0775
root:root. An ancestor writable by everyone is accepted when it is root's and sticky
(``/tmp``): there only an entry's owner may rename it, and the next component must be
root's. The state directory itself may not be writable by others at all.

The monitor walks every state directory at start and again before it starts or
restarts each child (``monitor.py``), rather than opening each once and handing the
descriptors down: the children, libnss_sss and the tools all reach these directories
by name (LMDB opens a path; a Unix socket is bound and connected at a path), so it is
the name that has to stay safe. Once every component passes, no user but root can
change where the name leads; the walk before each start catches root handing a
directory on the way to a user while the daemon runs, and refuses that start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

# O_PATH: the walk needs to look, not to read (a directory of mode 0711 is passed).
_WALK = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
# Directories the walk creates on the way to a state directory (makedirs would make
# them 0777 & ~umask, which the walk then refuses under umask 0).
_PARENT_MODE = 0o755


class UnsafeDirectory(RuntimeError):
    """A state directory, or one on its way, that another user could change."""


def _owners() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def _others_may_write(st: os.stat_result) -> bool:
    """Writable by a user other than the owner: by others, or by a group other than
    root's (group root holds only root, and the owners the walk accepts are root)."""
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0))


class _Walk:
    """Where a walk is going, for its messages: ``option = value: where why``."""

    def __init__(self, option: str, value: str) -> None:
        self.option, self.value = option, value

    def refuse(self, where: str, why: str) -> UnsafeDirectory:
        subject = f"{self.option} = {self.value}: " + ("" if where == self.value else f"{where} ")
        return UnsafeDirectory(subject + why)


def _check(walk: _Walk, where: str, st: os.stat_result, last: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise walk.refuse(where, "not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in _owners():
        raise walk.refuse(where, f"belongs to uid {st.st_uid}, not root; "
                          "every directory on the way must be root's")  # fmt: skip
    if not _others_may_write(st):
        return
    if not last and st.st_mode & stat.S_ISVTX and st.st_uid == 0:
        return  # /tmp: only root may rename the root-owned entry below (checked next)
    raise walk.refuse(where, f"writable by other users (mode {mode:04o}, group {st.st_gid});"
                      f" make it writable by root only (chmod go-w {where})")  # fmt: skip


def _open_next(walk: _Walk, fd: int, name: str, where: str, create_mode: int | None) -> int:
    """Open ``name`` in the directory ``fd``, creating it when asked."""
    for _ in range(2):
        try:
            return os.open(name, _WALK, dir_fd=fd)
        except FileNotFoundError:
            if create_mode is None:
                raise walk.refuse(where, "does not exist") from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, create_mode, dir_fd=fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise walk.refuse(where, e.strerror or str(e)) from None
            if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                target = os.readlink(name, dir_fd=fd)
                raise walk.refuse(where, f"is a symlink (to {target}); set {walk.option} "
                                  "to a path without symlinks") from None  # fmt: skip
            raise walk.refuse(where, "not a directory") from None
    raise walk.refuse(where, "removed while it was being created")


def open_dir(option: str, path: str, create_mode: int | None = None,
             value: str | None = None) -> int:  # fmt: skip
    """An ``O_PATH`` descriptor of the directory ``path`` after walking to it from
    ``/`` and checking each directory on the way (module doc); ``UnsafeDirectory``
    names the first that fails. Missing directories are created when ``create_mode``
    is given (that mode for ``path`` itself, 0755 on the way). ``value``: what
    ``option`` is set to, when that is not ``path`` (a file in it). The caller closes
    the descriptor."""
    path = os.path.abspath(path)
    walk = _Walk(option, value or path)
    names = [n for n in path.split("/") if n]
    fd = os.open("/", _WALK)
    try:
        _check(walk, "/", os.fstat(fd), last=not names)
        where = ""
        for i, name in enumerate(names):
            where += "/" + name
            last = i == len(names) - 1
            mode = create_mode if last or create_mode is None else _PARENT_MODE
            nfd = _open_next(walk, fd, name, where, mode)
            os.close(fd)
            fd = nfd
            _check(walk, where, os.fstat(fd), last)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_dir(option: str, path: str, create_mode: int | None = None,
              value: str | None = None) -> None:  # fmt: skip
    """``open_dir`` for its check alone."""
    os.close(open_dir(option, path, create_mode, value))
