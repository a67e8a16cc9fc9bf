"""The sudo interface of the responder: SSSD's sudo socket, for Debian's ``libsss_sudo``.

sudo (setuid root) loads ``libsss_sudo.so`` for ``sudoers: sss`` and connects to
``<pipes_dir>/sudo``. The library checks neither the socket's owner nor the server's
credentials (``sss_cli_make_request_with_checks``, unlike pam_sss), so the socket
itself is the protection, as in SSSD: root's and mode 0600, so that only root — sudo
— can ask which rules apply to whom (docs/threat-model.md). Peers other than root are
refused as well (SO_PEERCRED), in case the mode is widened.

Each request resolves the user as SSSD's ``sudosrv_get_rules_send`` does: initgroups
through the lookup flow (``responder/flow.py``; refreshed when expired, served from
the cache while offline), a name it does not find answered ``ENOENT``. Then, for a
user whose rules (those naming the user, a group of theirs, ALL or a netgroup, and
``defaults``) include expired ones (``entry_cache_sudo_timeout``, or ``cached cache
-r/-R``), the backend refreshes them first: the expired rules by name, or all rules
when more than ``sudo_threshold`` are (``sudosrv_refresh_rules_send``); when the domain
is offline or the backend does not answer, the cached rules are answered. The choice
of rules and their encoding are ``rules.py`` and ``protocol.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Final

from cached.cache import DomainCache, Initgroups
from cached.config import Config
from cached.counters import COUNTERS, SUDO_REQUEST
from cached.ipc import framing
from cached.ipc.ops import (
    BadMessage,
    Op,
    Outcome,
    SudoRefresh,
    SudoRefreshKind,
    SudoRefreshReply,
)
from cached.model import SudoRule
from cached.ratelimit import RateLimitedLog
from cached.responder import streams
from cached.responder.flow import INITGR, Backend, Found, Lookups, groups_of
from cached.responder.streams import StreamClients
from cached.sudo import protocol as p
from cached.sudo import rules as r

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# How long a sudo call waits for the backend's refresh of its expired rules before the
# cached ones are answered (a full refresh of thousands of rules may take longer: it
# goes on and serves the next call).
REFRESH_WAIT = 30.0


def sudo_socket(config: Config) -> str:
    return os.path.join(config.daemon.pipes_dir, "sudo")


def wanted(rules: list[SudoRule], user: r.SudoUser) -> list[SudoRule]:
    """The rules a call for ``user`` refreshes when expired (``sysdb_sudo_filter_expired``):
    ``defaults``, the netgroup rules, and those whose sudoUser selects the user."""
    picked, netgroup = r.matching(rules, user)
    return [*(x for x in rules if x.name == r.DEFAULTS), *picked, *netgroup]


def _close(_cmd: int) -> None:
    return None


# EINVAL for a query that does not parse; SSSD closes the connection on an internal
# failure (EFAULT).
_ANSWERING: Final = streams.Answering(
    "sudo", p.GetVersion, p.version_reply, _close,
    refused=p.BadQuery, refusal=lambda cmd: p.error_reply(cmd, p.EINVAL),
    subject=lambda q: q.user,
)  # fmt: skip


class SudoResponder:
    def __init__(self, config: Config, lookups: Lookups, backends: dict[str, Backend]) -> None:
        self.config = config
        self.lookups = lookups
        self.backends = backends
        self.sudo = config.sudo
        self.started = time.time()
        self.clients = StreamClients(config.nss, "sudo", root_only=True)
        self.requests = 0
        self.not_found = 0
        self.rules_sent = 0
        self.refreshes = 0
        self.refresh_failures = 0

    # -- answering -----------------------------------------------------------------

    async def answer(self, q: p.Query) -> bytes:
        self.requests += 1
        start = time.perf_counter()
        try:
            found = await self.lookups.lookup(INITGR, q.user)
            if found is None:
                self.not_found += 1
                return p.error_reply(q.cmd, p.ENOENT)
            user = self._user(found)
            cache = found.cache
            rules = cache.sudo_rules()
            if await self._refresh_expired(found, user, rules):
                rules = cache.sudo_rules()
            now = time.time()
            if q.cmd is p.Command.GET_DEFAULTS:
                out = r.defaults_of(rules, user.domain, timed=self.sudo.sudo_timed, now=now)
            else:
                out = r.rules_for(
                    rules, user, q.uid, inverse_order=self.sudo.sudo_inverse_order,
                    timed=self.sudo.sudo_timed, now=now,
                )  # fmt: skip
            self.rules_sent += len(out)
            return p.rules_reply(q.cmd, out)
        finally:
            COUNTERS.add(SUDO_REQUEST, 1, time.perf_counter() - start)

    @staticmethod
    def _user(found: Found[Initgroups]) -> r.SudoUser:
        """The user as SSSD's filter sees it (``sysdb_get_sudo_user_info``): its groups
        from initgroups, nesting included, and its primary group by gid."""
        user = found.value.user
        return r.SudoUser(
            user.name, user.uid, tuple(groups_of(found)), found.domain.name,
            case_sensitive=not found.domain.case_insensitive,
        )  # fmt: skip

    async def _refresh_expired(
        self, found: Found[Initgroups], user: r.SudoUser, rules: list[SudoRule]
    ) -> bool:
        """Have the backend refresh the user's expired rules first; True when it did."""
        domain = found.domain.name
        backend = self.backends.get(domain)
        if backend is None or self.lookups.states[domain].offline(self.lookups.clock()):
            return False
        cache: DomainCache = found.cache
        times = cache.sudo_times()
        now = time.time()
        due = [x for x in rules if (t := times.get(x.name)) is None or t.data_expire <= now]
        expired = sorted({x.name for x in wanted(due, user)}) if due else []
        if not expired:
            return False
        many = len(expired) > self.sudo.sudo_threshold or len(expired) > SudoRefresh.MAX_NAMES
        req = SudoRefresh(
            SudoRefreshKind.FULL if many else SudoRefreshKind.RULES,
            () if many else tuple(expired),
        )
        self.refreshes += 1
        try:
            raw = await backend.call(Op.SUDO_REFRESH, timeout=REFRESH_WAIT, **req.args())
            reply = SudoRefreshReply.parse(raw)
        except (framing.RpcError, BadMessage) as e:
            self.refresh_failures += 1
            limited.log(("sudo refresh", domain), logging.WARNING,
                        "sudo: refreshing the rules of %r: %s", user.name, e)  # fmt: skip
            return False
        if reply.deleted and req.kind is SudoRefreshKind.RULES:
            # Rules gone from the server: SSSD schedules a full refresh out of band.
            full = SudoRefresh(SudoRefreshKind.FULL).args()
            task = asyncio.ensure_future(backend.call(Op.SUDO_REFRESH, timeout=600.0, **full))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return reply.outcome is Outcome.FOUND

    # -- connections ---------------------------------------------------------------

    async def serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self.clients.serve(reader, writer, p.server_connection(), self._respond)

    async def _respond(self, req: p.Request, _uid: int | None) -> bytes | None:
        return await _ANSWERING.respond(req, self.answer)

    def status(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "connections": self.clients.active,
            "refused_connections": self.clients.refused,
            "requests": self.requests,
            "users_not_found": self.not_found,
            "rules_sent": self.rules_sent,
            "refreshes_asked": self.refreshes,
            "refresh_failures": self.refresh_failures,
            "socket": sudo_socket(self.config),
        }


async def serve_sudo(config: Config, responder: SudoResponder) -> asyncio.Server:
    """Listen on ``<pipes_dir>/sudo``, root's, mode 0600 (as SSSD's)."""
    os.makedirs(config.daemon.pipes_dir, mode=0o755, exist_ok=True)
    path = sudo_socket(config)
    return await streams.listen(path, responder.serve_client, 0o600)
