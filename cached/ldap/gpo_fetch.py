"""A GPO's Security extension file from SYSVOL, kept on disk by GPO GUID and
version, as SSSD 2.8.2's gpo_child and GPO cache keep them (``ad_gpo_cse_step``,
``ad_gpo_child.c``):

* while a GPO's entry is younger than ``ad_gpo_cache_timeout`` seconds, its stored
  file is used and SYSVOL is not asked at all;
* after that, ``GPT.INI`` is read first; only when its version is higher than the
  stored one is ``Machine/Microsoft/Windows NT/SecEdit/GptTmpl.inf`` read again (a
  GPO that does not change costs one small read per timeout);
* a GptTmpl.inf that is not there is a GPO without security settings: an old stored
  one is removed (Windows clients treat a missing file as empty, and so does SSSD);
* a file in a directory named ``MACHINE`` rather than ``Machine`` is found too (DCs
  with case-sensitive file systems; SSSD upper-cases the folder on ENOENT).

The files are written to a temporary name and renamed, so a reader never sees half a
file; GUIDs are checked (``{8-4-4-4-12}`` hexadecimal) before they name a directory.
How SYSVOL is read is the :class:`SysvolReader` given: the DC's share over SMB with
the host's Kerberos credentials, as SSSD's gpo_child does with libsmbclient.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from cached.ldap.gpo_parse import (
    MAX_FILE_BYTES,
    SECURITY_INF,
    GpoFormatError,
    PrivilegeRights,
    gpt_version,
    privilege_rights,
)

_HEX = "[0-9a-f]"
_GUID = re.compile(
    rf"\{{{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}\}}", re.IGNORECASE
)
_STATE = "state.json"
_INF = "GptTmpl.inf"


class SysvolReader(Protocol):
    """Reads a file of the DC's SYSVOL share."""

    def read(self, share: str, path: str) -> bytes | None:
        """The whole file at ``path`` (``/``-separated) in ``share``; None when it does
        not exist. Raises OSError when the server cannot be read (a failure, never
        an absent file), GpoFormatError when the file is larger than MAX_FILE_BYTES."""
        ...


class GpoFiles:
    """The Security extension's rights of each GPO, from ``directory`` while fresh,
    else from SYSVOL through the reader ``connect`` makes (once per instance, when
    first needed)."""

    def __init__(
        self,
        directory: Path,
        timeout: int,
        connect: Callable[[], SysvolReader],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.timeout = timeout
        self._connect = connect
        self._reader: SysvolReader | None = None
        self.clock = clock
        self.fetched: list[str] = []  # paths read from SYSVOL, in order (tests, logs)

    def _sysvol(self) -> SysvolReader:
        if self._reader is None:
            self._reader = self._connect()
        return self._reader

    def _read(self, share: str, path: str) -> bytes | None:
        self.fetched.append(path)
        return self._sysvol().read(share, path)

    def rights(self, guid: str, share: str, path: str) -> PrivilegeRights:
        if not _GUID.fullmatch(guid):
            raise GpoFormatError(f"GPO cn {guid[:60]!r} is not a GUID")
        where = self.directory / guid.upper()
        state = _load_state(where)
        now = self.clock()
        if state is not None and now < state[1] + self.timeout:
            return _stored(where)
        ini = self._read(share, f"{path}/GPT.INI")
        if ini is None:
            ini = self._read(share, f"{path}/gpt.ini")
        if ini is None:
            raise OSError(f"{share}/{path}/GPT.INI does not exist")
        version = gpt_version(ini)
        if state is None or version > state[0]:
            inf = self._read(share, f"{path}/{SECURITY_INF}")
            if inf is None:
                upper = SECURITY_INF.replace("Machine/", "MACHINE/", 1)
                inf = self._read(share, f"{path}/{upper}")
            privilege_rights(inf or b"")  # refuse a file that does not parse, keep the old
            where.mkdir(mode=0o700, parents=True, exist_ok=True)
            if inf is None:
                (where / _INF).unlink(missing_ok=True)
            else:
                _write(where / _INF, inf)
        _write(where / _STATE, json.dumps({"version": version, "fetched": now}).encode())
        return _stored(where)


def _load_state(where: Path) -> tuple[int, float] | None:
    """The stored (version, fetched) of a GPO; None when there is none or it is not
    readable (fetched again)."""
    try:
        raw = json.loads((where / _STATE).read_bytes())
        return int(raw["version"]), float(raw["fetched"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stored(where: Path) -> PrivilegeRights:
    try:
        raw = (where / _INF).read_bytes()
    except FileNotFoundError:
        return {}
    return privilege_rights(raw)


def _write(path: Path, data: bytes) -> None:
    if len(data) > MAX_FILE_BYTES:
        raise GpoFormatError(f"{path.name}: {len(data)} bytes, more than {MAX_FILE_BYTES}")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class DirectorySysvol:
    """SYSVOL read from a directory holding the share's files (a DC's own
    ``sysvol`` directory): for a host that is the DC, and for tests."""

    def __init__(self, shares: dict[str, Path]) -> None:
        self.shares = {k.lower(): v for k, v in shares.items()}

    def read(self, share: str, path: str) -> bytes | None:
        root = self.shares.get(share.lower())
        if root is None:
            raise OSError(f"no share {share!r}")
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise GpoFormatError(f"SYSVOL path {path[:120]!r} leaves the share")
        target = root.joinpath(*parts)
        try:
            size = target.stat().st_size
        except FileNotFoundError:
            return None
        if size > MAX_FILE_BYTES:
            raise GpoFormatError(f"{path}: {size} bytes, more than {MAX_FILE_BYTES}")
        return target.read_bytes()


class SmbSysvol:
    """SYSVOL over SMB 2/3 from ``server`` (the DC the backend's LDAP connection is
    on, as SSSD's gpo_child asks it), signed, with the host's Kerberos credentials:
    ``auth_protocol = "kerberos"`` takes them from the credential cache ``KRB5CCNAME``
    names (the host's ticket, from its keytab), as libsmbclient does for gpo_child.
    ``"ntlm"`` with a ``username`` and ``password`` exists for a test server only: a
    machine account's password is never given to it.

    One connection per instance, opened at the first read, closed by :meth:`close`."""

    def __init__(
        self,
        server: str,
        *,
        port: int = 445,
        auth_protocol: str = "kerberos",
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.server, self.port, self.timeout = server, port, timeout
        self.auth_protocol, self.username, self.password = auth_protocol, username, password
        self._cache: dict[str, Any] = {}  # smbclient's connection cache (untyped)

    def read(self, share: str, path: str) -> bytes | None:
        # smbprotocol is imported here: only a backend that reads GPOs loads it.
        import smbclient  # type: ignore[import-untyped]
        from smbprotocol.exceptions import SMBException  # type: ignore[import-untyped]

        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise GpoFormatError(f"SYSVOL path {path[:120]!r} leaves the share")
        unc = "\\\\" + "\\".join([self.server, share, *parts])
        opts = {
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "auth_protocol": self.auth_protocol,
            "connection_timeout": self.timeout,
            "connection_cache": self._cache,
        }
        try:
            with smbclient.open_file(unc, mode="rb", **opts) as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:  # smbprotocol's SMBOSError: the server's answer, by errno
            if e.errno == errno.ENOENT:
                return None
            raise OSError(f"{unc}: {e}") from None
        except (SMBException, ValueError) as e:
            # No session (authentication, signing) or no connection: smbprotocol raises
            # ValueError for a server it cannot connect to.
            raise OSError(f"{unc}: {e}") from None
        if len(data) > MAX_FILE_BYTES:
            raise GpoFormatError(f"{path}: more than {MAX_FILE_BYTES} bytes")
        return bytes(data)

    def close(self) -> None:
        """Log off and close the socket; never raises. A server may refuse the tree
        disconnect or logoff (Samba answers ACCESS_DENIED for a share it could not
        enter as the session's user): the socket is closed all the same, and the
        evaluation's outcome, already decided, stands."""
        for name in list(self._cache):
            conn = self._cache.pop(name)
            try:
                conn.disconnect()
            except Exception:  # smbprotocol raises the server's status as its own types
                with contextlib.suppress(Exception):
                    conn.disconnect(close=False)  # the socket only
