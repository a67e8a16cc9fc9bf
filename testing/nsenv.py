"""Run real glibc NSS through the stock ``libnss_sss.so.2`` in a private mount namespace.

The daemon (or writer) under test runs in the test process, outside any namespace, and
writes into two ordinary test directories. Client commands run under ``unshare -m`` with
private propagation, where

* ``/var/lib/sss/pipes`` is a bind mount of ``pipes_dir`` (the NSS socket lives there),
* ``/var/lib/sss/mc`` is a bind mount of ``mc_dir`` (the memory-cache files),
* ``/etc/nsswitch.conf`` is a bind mount of a generated file.

Nothing on the host changes except that the two empty mount points are created when missing
(``/var/lib/sss`` does not exist on a host without sssd, and a bind mount needs a target).
The mounts vanish with the namespace.

nsswitch.conf: by default ``passwd: sss`` / ``group: sss`` / ``initgroups: sss``, with no
``files``. Every answer then provably comes from libnss_sss (a test user that happened to
exist in /etc/passwd could not satisfy a test), and ``id NAME`` works as long as the user and
its groups are in the cache. The price is that local names (root, ``ls -l`` of system files)
do not resolve inside the namespace; pass ``files_first=True`` for ``files sss`` when a test
needs them, and use names/ids that cannot clash with the host's.

``SSS_NSS_USE_MEMCACHE`` is removed from the inherited environment so the host's setting
cannot change a test; pass it in ``env`` to set it.

The module is also a small NSS client (``python -m testing.nsenv probe``): it calls the
``_nss_sss_*`` entry points of libnss_sss directly through ctypes and answers one JSON line
per request line, for tests that need a long-lived client process (one that keeps the cache
file mapped across a reset).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

LIBNSS_SSS: Final = Path("/usr/lib/x86_64-linux-gnu/libnss_sss.so.2")
SSS_PIPES: Final = Path("/var/lib/sss/pipes")
SSS_MC: Final = Path("/var/lib/sss/mc")
NSSWITCH_SSS_ONLY: Final = "passwd: sss\ngroup: sss\ninitgroups: sss\n"
NSSWITCH_FILES_SSS: Final = "passwd: files sss\ngroup: files sss\ninitgroups: files sss\n"
#: Exit status of the namespace wrapper when a mount failed (the command never ran).
MOUNT_FAILED: Final = 125
REPO_ROOT: Final = Path(__file__).resolve().parents[1]

# nss_status values (glibc nss.h).
NSS_STATUS_TRYAGAIN: Final = -2
NSS_STATUS_UNAVAIL: Final = -1
NSS_STATUS_NOTFOUND: Final = 0
NSS_STATUS_SUCCESS: Final = 1

# $1 $2 $3: pipes dir, mc dir, nsswitch file; then the command.
_WRAPPER = f"""
mount --bind "$1" {SSS_PIPES} && mount --bind "$2" {SSS_MC} &&
    mount --bind "$3" /etc/nsswitch.conf ||
    {{ echo "nsenv: mount --bind failed" >&2; exit {MOUNT_FAILED}; }}
shift 3
exec "$@"
"""


class NsEnvError(RuntimeError):
    """The namespace could not be set up (the command under test did not run)."""


def skip_reason() -> str | None:
    """Why these tests cannot run here, or None. Only two reasons are accepted."""
    if os.geteuid() != 0:
        return "needs root: unshare -m and bind mounts over /var/lib/sss and /etc/nsswitch.conf"
    if not LIBNSS_SSS.exists():
        return f"{LIBNSS_SSS} is missing: install Debian's libnss-sss"
    return None


def ensure_mount_points() -> None:
    """Create the empty mount points ``/var/lib/sss/{pipes,mc}`` when missing (and only them)."""
    for d in (SSS_PIPES, SSS_MC):
        d.mkdir(mode=0o755, parents=True, exist_ok=True)


_nsswitch_dir: Path | None = None
_nsswitch_lock = threading.Lock()


def nsswitch_file(content: str) -> Path:
    """A file with this nsswitch.conf content, kept until the interpreter exits."""
    global _nsswitch_dir
    # Under a lock: threads running commands at once (perf.fleet's hosts) would make
    # two directories, or one thread rename the temporary file another still writes.
    with _nsswitch_lock:
        if _nsswitch_dir is None:
            _nsswitch_dir = Path(tempfile.mkdtemp(prefix="cached-nsenv-"))
            atexit.register(shutil.rmtree, _nsswitch_dir, True)
        name = f"nsswitch-{hashlib.sha256(content.encode()).hexdigest()[:16]}.conf"
        path = _nsswitch_dir / name
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(content)
            tmp.chmod(0o644)
            tmp.replace(path)
    return path


def nss_command(
    argv: Sequence[str | os.PathLike[str]],
    pipes_dir: str | os.PathLike[str],
    mc_dir: str | os.PathLike[str],
    *,
    files_first: bool = False,
    nsswitch: str | None = None,
) -> list[str]:
    """The full command line that runs ``argv`` inside the namespace."""
    ensure_mount_points()
    conf = nsswitch or (NSSWITCH_FILES_SSS if files_first else NSSWITCH_SSS_ONLY)
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "/bin/sh", "-c", _WRAPPER, "nsenv",
        os.fspath(pipes_dir), os.fspath(mc_dir), os.fspath(nsswitch_file(conf)),
        *(os.fspath(a) for a in argv),
    ]  # fmt: skip


def nss_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of commands in the namespace: ours, without SSS_NSS_USE_MEMCACHE
    unless given, C locale, and the checkout's ``testing`` and ``tests`` importable."""
    out = {k: v for k, v in os.environ.items() if k != "SSS_NSS_USE_MEMCACHE"}
    out["LC_ALL"] = "C"
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), out.get("PYTHONPATH")]))
    out.update(env or {})
    return out


def _check_mounts(rc: int, stderr: str | bytes | None) -> None:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    if rc == MOUNT_FAILED and "nsenv: mount" in text:
        raise NsEnvError(text.strip())


def run_nss(
    argv: Sequence[str | os.PathLike[str]],
    pipes_dir: str | os.PathLike[str],
    mc_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = 60.0,
    input: str | None = None,
    files_first: bool = False,
    nsswitch: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion inside the namespace; text output, never raises on the
    command's own exit status (check ``returncode``). Raises :class:`NsEnvError` when the
    namespace could not be set up."""
    proc = subprocess.run(
        nss_command(argv, pipes_dir, mc_dir, files_first=files_first, nsswitch=nsswitch),
        env=nss_env(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    _check_mounts(proc.returncode, proc.stderr)
    return proc


def start_nss(
    argv: Sequence[str | os.PathLike[str]],
    pipes_dir: str | os.PathLike[str],
    mc_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    files_first: bool = False,
    nsswitch: str | None = None,
) -> subprocess.Popen[str]:
    """Start a long-running ``argv`` in its own namespace; stdin/stdout/stderr are text
    pipes, line-buffered. The caller ends it (by its pid: ``proc.terminate()``/``wait``)."""
    return subprocess.Popen(
        nss_command(argv, pipes_dir, mc_dir, files_first=files_first, nsswitch=nsswitch),
        env=nss_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


# --- a direct client of libnss_sss (runs inside the namespace) ---------------------------------


class _Passwd(ctypes.Structure):
    _fields_ = [
        ("pw_name", ctypes.c_char_p),
        ("pw_passwd", ctypes.c_char_p),
        ("pw_uid", ctypes.c_uint32),
        ("pw_gid", ctypes.c_uint32),
        ("pw_gecos", ctypes.c_char_p),
        ("pw_dir", ctypes.c_char_p),
        ("pw_shell", ctypes.c_char_p),
    ]


class _Group(ctypes.Structure):
    _fields_ = [
        ("gr_name", ctypes.c_char_p),
        ("gr_passwd", ctypes.c_char_p),
        ("gr_gid", ctypes.c_uint32),
        ("gr_mem", ctypes.POINTER(ctypes.c_char_p)),
    ]


@dataclass(frozen=True, slots=True)
class NssAnswer:
    """One call's outcome: nss_status, the errno the module set, and the decoded result
    (passwd: the 7 fields; group: name, passwd, gid, members; initgroups: gids)."""

    status: int
    errno: int
    value: Any = None

    @property
    def ok(self) -> bool:
        return self.status == NSS_STATUS_SUCCESS


class NssClient:
    """Calls ``_nss_sss_getpwnam_r`` & co. directly, retrying ERANGE as glibc does."""

    def __init__(self, lib: str | os.PathLike[str] = LIBNSS_SSS, bufsize: int = 4096) -> None:
        self._lib = ctypes.CDLL(os.fspath(lib))
        self._libc = ctypes.CDLL(None)
        self._libc.malloc.restype = ctypes.c_void_p
        self._libc.malloc.argtypes = [ctypes.c_size_t]
        self._libc.free.argtypes = [ctypes.c_void_p]
        self._bufsize = bufsize
        for fn, key in (
            ("getpwnam_r", ctypes.c_char_p),
            ("getpwuid_r", ctypes.c_uint32),
            ("getgrnam_r", ctypes.c_char_p),
            ("getgrgid_r", ctypes.c_uint32),
        ):
            f = getattr(self._lib, f"_nss_sss_{fn}")
            f.restype = ctypes.c_int
            struct = _Passwd if fn.startswith("getpw") else _Group
            f.argtypes = [
                key, ctypes.POINTER(struct), ctypes.c_char_p, ctypes.c_size_t,
                ctypes.POINTER(ctypes.c_int),
            ]  # fmt: skip
        f = self._lib._nss_sss_initgroups_dyn
        f.restype = ctypes.c_int
        f.argtypes = [
            ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_long),
            ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.POINTER(ctypes.c_uint32)),
            ctypes.c_long, ctypes.POINTER(ctypes.c_int),
        ]  # fmt: skip

    def _call(self, fn: str, key: bytes | int, struct: type[ctypes.Structure]) -> NssAnswer:
        f = getattr(self._lib, f"_nss_sss_{fn}")
        size = self._bufsize
        while True:
            result = struct()
            buf = ctypes.create_string_buffer(size)
            err = ctypes.c_int(0)
            status = f(key, ctypes.byref(result), buf, size, ctypes.byref(err))
            if status == NSS_STATUS_TRYAGAIN and err.value == errno.ERANGE and size < 1 << 26:
                size *= 2
                continue
            if status != NSS_STATUS_SUCCESS:
                return NssAnswer(status, err.value)
            return NssAnswer(status, err.value, self._decode(result))

    @staticmethod
    def _decode(r: ctypes.Structure) -> tuple[Any, ...]:
        def s(b: bytes | None) -> str:
            return (b or b"").decode("utf-8", "surrogateescape")

        if isinstance(r, _Passwd):
            return (s(r.pw_name), s(r.pw_passwd), r.pw_uid, r.pw_gid, s(r.pw_gecos),
                    s(r.pw_dir), s(r.pw_shell))  # fmt: skip
        assert isinstance(r, _Group)
        members: list[str] = []
        i = 0
        while r.gr_mem[i] is not None:
            members.append(s(r.gr_mem[i]))
            i += 1
        return (s(r.gr_name), s(r.gr_passwd), r.gr_gid, tuple(members))

    def getpwnam(self, name: str) -> NssAnswer:
        return self._call("getpwnam_r", name.encode(), _Passwd)

    def getpwuid(self, uid: int) -> NssAnswer:
        return self._call("getpwuid_r", uid, _Passwd)

    def getgrnam(self, name: str) -> NssAnswer:
        return self._call("getgrnam_r", name.encode(), _Group)

    def getgrgid(self, gid: int) -> NssAnswer:
        return self._call("getgrgid_r", gid, _Group)

    def initgroups(self, name: str, group: int = 0xFFFFFFFF) -> NssAnswer:
        """``initgroups_dyn``: the gids libnss_sss appends (without glibc's dedup)."""
        size = 16
        start = ctypes.c_long(0)
        csize = ctypes.c_long(size)
        arr = ctypes.cast(self._libc.malloc(size * 4), ctypes.POINTER(ctypes.c_uint32))
        groups = ctypes.pointer(arr)
        err = ctypes.c_int(0)
        try:
            status = self._lib._nss_sss_initgroups_dyn(
                name.encode(), group, ctypes.byref(start), ctypes.byref(csize), groups, -1,
                ctypes.byref(err),
            )  # fmt: skip
            gids = tuple(groups.contents[i] for i in range(start.value))
        finally:
            self._libc.free(ctypes.cast(groups.contents, ctypes.c_void_p))
        if status != NSS_STATUS_SUCCESS:
            return NssAnswer(status, err.value)
        return NssAnswer(status, err.value, gids)

    def call(self, op: str, key: str) -> NssAnswer:
        """``op`` is getpwnam/getpwuid/getgrnam/getgrgid/initgroups; ids as decimal text."""
        if op in ("getpwuid", "getgrgid"):
            return getattr(self, op)(int(key))  # type: ignore[no-any-return]
        return getattr(self, op)(key)  # type: ignore[no-any-return]


def _probe() -> None:
    """Answer ``OP KEY`` lines on stdin with one JSON NssAnswer per line, until EOF."""
    client = NssClient()
    for line in sys.stdin:
        op, _, key = line.strip().partition(" ")
        print(json.dumps(asdict(client.call(op, key))), flush=True)


class NssProbe:
    """A long-lived client process in the namespace (see :func:`_probe`)."""

    def __init__(
        self,
        pipes_dir: str | os.PathLike[str],
        mc_dir: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
    ) -> None:
        argv = [sys.executable, "-m", "testing.nsenv", "probe"]
        self.proc = start_nss(argv, pipes_dir, mc_dir, env)

    def call(self, op: str, key: str | int) -> NssAnswer:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{op} {key}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            assert self.proc.stderr is not None
            err = self.proc.stderr.read()
            _check_mounts(self.proc.returncode, err)
            raise NsEnvError(f"probe exited {self.proc.returncode}: {err}")
        d = json.loads(line)
        value = d["value"]
        if isinstance(value, list):  # JSON turned tuples into lists
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        return NssAnswer(d["status"], d["errno"], value)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def __enter__(self) -> NssProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["probe"]:
        _probe()
    else:
        sys.exit("usage: python -m testing.nsenv probe")
