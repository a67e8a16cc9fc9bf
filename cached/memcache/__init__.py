"""SSSD-compatible memory-cache files (``/var/lib/sss/mc``), reference §2.

The stock ``libnss_sss.so.2`` reads these files directly, without asking the responder, so a
hit costs a hash and a copy inside the client process. The responder writes them after each
positive socket answer:

* :class:`PasswdWriter`, :class:`GroupWriter`, :class:`InitgroupsWriter`: one file each;
* :class:`MemoryCache`: the three of them for one ``mc`` directory, with sizes and timeout
  from ``[nss]`` (a size of 0 disables that file);
* :class:`McReader`: reads a file the way the client does (``cached status``, tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from .layout import Geometry, Kind, PackedMembers, Status, default_mb
from .mcfile import (
    DEFAULT_MODE,
    DEFAULT_TIMEOUT,
    GroupWriter,
    InitgroupsWriter,
    McBusyError,
    McError,
    McWriter,
    PasswdWriter,
    StoreResult,
)
from .murmur import murmurhash3
from .reader import (
    InitgroupsEntry,
    McFormatError,
    McGroupEntry,
    McHeader,
    McPasswdEntry,
    McReader,
    McStats,
)

__all__ = [
    "DEFAULT_MODE",
    "DEFAULT_TIMEOUT",
    "Geometry",
    "GroupWriter",
    "InitgroupsEntry",
    "InitgroupsWriter",
    "Kind",
    "McBusyError",
    "McError",
    "McFormatError",
    "McGroupEntry",
    "McHeader",
    "McPasswdEntry",
    "McReader",
    "McStats",
    "McWriter",
    "MemoryCache",
    "PackedMembers",
    "PasswdWriter",
    "Status",
    "StoreResult",
    "murmurhash3",
]

_W = TypeVar("_W", bound=McWriter)


@dataclass(slots=True)
class MemoryCache:
    """The writers of one ``mc`` directory; ``None`` for a disabled file."""

    passwd: PasswdWriter | None
    group: GroupWriter | None
    initgroups: InitgroupsWriter | None

    @classmethod
    def open(
        cls,
        mc_dir: str | os.PathLike[str],
        *,
        passwd_mb: int = default_mb(Kind.USER),
        group_mb: int = default_mb(Kind.GROUP),
        initgroups_mb: int = default_mb(Kind.INITGR),
        timeout: int = DEFAULT_TIMEOUT,
        mode: int = DEFAULT_MODE,
    ) -> MemoryCache:
        """Create the files (``memcache_size_*``, ``memcache_timeout``; 0 disables, §2.1)."""
        d = Path(mc_dir)
        made: list[McWriter] = []
        try:

            def make(cls_: type[_W], mb: int) -> _W | None:
                if mb == 0 or timeout == 0:
                    return None
                w = cls_(d / cls_.KIND.value, size_mb=mb, timeout=timeout, mode=mode)
                made.append(w)
                return w

            return cls(
                make(PasswdWriter, passwd_mb),
                make(GroupWriter, group_mb),
                make(InitgroupsWriter, initgroups_mb),
            )
        except BaseException:
            for w in made:
                w.close()
            raise

    def writers(self) -> list[McWriter]:
        return [w for w in (self.passwd, self.group, self.initgroups) if w is not None]

    def reset(self) -> None:
        """Recreate every file with a new seed (``sss_cache``'s ``clear_mc_flag``, §4)."""
        for w in self.writers():
            w.reset()

    def close(self) -> None:
        for w in self.writers():
            w.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
