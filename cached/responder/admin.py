"""What the responder offers to interfaces other than the NSS socket: the D-Bus
InfoPipe (``cached.ifp``) and the monitor's control socket.

Lookups go through the same flow as NSS requests (``flow.Lookups``), so a D-Bus caller
sees exactly what ``getent`` sees; invalidation writes only the timestamp store
(reference §3.7) and drops the responder's negative and memory caches.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from typing import Any

from cached.counters import COUNTERS
from cached.ipc.ops import CountersReply
from cached.model import User
from cached.responder.flow import GETGRGID, INITGR, Lookups

INVALIDATE_KINDS = ("user", "group", "users", "groups", "all")


class Admin:
    def __init__(
        self,
        lookups: Lookups,
        status: Callable[[], dict[str, Any]],
        on_invalidate: Callable[[], None] = lambda: None,
    ) -> None:
        self.lookups = lookups
        self._status = status
        self._on_invalidate = on_invalidate

    # -- lookups (public, like NSS) ----------------------------------------------------

    async def user_gids(self, user: User) -> list[int]:
        """The user's gids as ``id`` gets them: the primary gid first, then the groups of
        the initgroups flow (filtered by the policy), each once."""
        found = await self.lookups.lookup(INITGR, user.name)
        gids = [user.gid]
        if found is not None:
            packed = self.lookups.policy.initgroups_gids(found.domain, found.cache, found.value)
            gids += array("I", packed)
        return list(dict.fromkeys(gids))

    async def user_groups(self, user: User) -> list[str]:
        """Names of the user's groups, primary first, as ``id -Gn`` prints them."""
        names = []
        for gid in await self.user_gids(user):
            hit = await self.lookups.lookup(GETGRGID, gid)
            if hit is not None:
                names.append(self.lookups.policy.output_name(hit.domain, hit.value.name))
            elif gid == user.gid:
                names.append(str(gid))  # as `id -Gn` when the primary group has no entry
        return names

    # -- admin (root only; the caller checks) -------------------------------------------

    def invalidate(self, kind: str, name: str = "", domain: str = "") -> int:
        """Expire entries like ``sss_cache`` (§4); returns how many matched."""
        if kind not in INVALIDATE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(INVALIDATE_KINDS)}")
        matched = 0
        for d in self.lookups.config.domains:
            if domain and d.name != domain:
                continue
            cache = self.lookups.caches[d.name]
            if kind == "user":
                matched += cache.invalidate_user(name)
            elif kind == "group":
                matched += cache.invalidate_group(name)
            elif kind == "users":
                matched += cache.invalidate_users()
            elif kind == "groups":
                matched += cache.invalidate_groups()
            else:
                matched += cache.invalidate_all()
        self.invalidated()
        return matched

    def invalidated(self) -> None:
        """Entries were expired (here or by `cached cache`): forget derived answers,
        and the backend requests begun before (Lookups.invalidated)."""
        self.lookups.invalidated()
        self._on_invalidate()

    def counters(self) -> CountersReply:
        return CountersReply(os.getpid(), COUNTERS.snapshot())

    def status(self) -> dict[str, Any]:
        return self._status()
