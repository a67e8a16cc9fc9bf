"""The backend's side of a login (``Op.AUTHENTICATE``): the online bind
(``auth.bind_as_user``), and after it, or instead of it, the cached credentials.

* Online first, always: an online answer beats the cached hash (a password changed on
  the server stops working at the next online login, whatever the hash says).
* After an online success the user's credentials record is written (the entry store:
  this process is its only writer): a fresh SHA-512-crypt hash with
  ``cache_credentials = true``, and the time of the login.
* When the domain is offline, or no server answered the bind within its deadlines, the
  password is checked against the stored hash (``cached.auth.offline``), and a failure
  is counted in the record.

Logins wait in a queue of their own, per PAM client uid and taken in turn (the lookup
queue's :class:`FairQueue`), and run on a thread of their own: a login never waits
behind a 2,000-group initgroups on the lookup connection, and one local user's flood of
logins on the public PAM socket waits behind itself, not in front of root's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from cached.auth.offline import (
    Credentials,
    OfflinePolicy,
    after_online_login,
    after_password_change,
    offline_auth,
)
from cached.cache import StoreWriteError
from cached.config import Config, DomainConfig
from cached.ipc.ops import AuthReply, AuthRequest, ChpassReply, ChpassRequest
from cached.ldap import auth, chpass
from cached.ldap.client import LdapClient
from cached.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    from cached.cache.writer import BackendCache

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

MODULE_UNKNOWN = 28  # PAM_MODULE_UNKNOWN: SSSD's answer when no provider is configured
T = TypeVar("T")


class Logins:
    def __init__(
        self,
        config: Config,
        domain: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.domain = domain
        self.client = client
        self.cache = cache
        self.clock = clock
        pam = config.pam
        self.policy = OfflinePolicy(
            pam.offline_credentials_expiration,
            pam.offline_failed_login_attempts,
            pam.offline_failed_login_delay,
        )
        self.pam_warning = pam.pam_pwd_expiration_warning
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"auth-{domain.name}")
        self.turns = RoundRobin()
        self.online_logins = 0
        self.offline_logins = 0
        self.failed = 0
        self.password_changes = 0

    async def authenticate(self, req: AuthRequest) -> AuthReply:
        """Queue ``req`` behind its uid's earlier logins, one uid in turn; run it."""
        return await self._in_turn(req.uid, functools.partial(self.check, req))

    async def change_password(self, req: ChpassRequest) -> ChpassReply:
        """A password check or change, queued with the logins."""
        return await self._in_turn(req.uid, functools.partial(self.chpass, req))

    async def _in_turn(self, uid: int | None, work: Callable[[], T]) -> T:
        await self.turns.acquire(uid)
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, work)
        finally:
            self.turns.release()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- the check (on the login thread) -------------------------------------------

    def check(self, req: AuthRequest) -> AuthReply:
        domain, client = self.domain, self.client
        if domain.auth_provider == "none":
            return AuthReply(MODULE_UNKNOWN)
        if not req.password:
            return AuthReply(auth.AUTH_ERR)
        if client.online:
            res = auth.bind_as_user(
                domain, req.dn, req.password, self.pam_warning, list(client.uris)
            )
            if res.reachable:
                return self._online(req, res)
            limited.log(("unreachable", domain.name), logging.WARNING,
                        "domain %s: no server answered the login of %r (%s); using cached "
                        "credentials", domain.name, req.name, res.reason)  # fmt: skip
        reply = self._offline(req)
        return reply

    def _online(self, req: AuthRequest, res: auth.OnlineResult) -> AuthReply:
        now = self.clock()
        if res.status == auth.SUCCESS:
            self.online_logins += 1
            record = after_online_login(
                self.cache.credentials(req.name), req.password, now,
                cache=self.domain.cache_credentials,
            )  # fmt: skip
            self._store(req.name, record)
            log.debug("domain %s: %r logged in online", self.domain.name, req.name)
        else:
            self.failed += 1
            log.debug("domain %s: online login of %r refused: %s", self.domain.name,
                     req.name, res.reason)  # fmt: skip
        return AuthReply(
            res.status, expires_in=res.expires_in, grace=res.grace, locked=res.locked,
            online=True,
        )  # fmt: skip

    def _offline(self, req: AuthRequest) -> AuthReply:
        client = self.client
        if not self.domain.cache_credentials:
            return AuthReply(auth.AUTHINFO_UNAVAIL, online=False, retry_in=client.retry_in)
        verdict = offline_auth(
            self.cache.credentials(req.name), req.password, self.clock(), self.policy
        )
        if verdict.record is not None:
            self._store(req.name, verdict.record)
        if verdict.status == auth.SUCCESS:
            self.offline_logins += 1
        else:
            self.failed += 1
        log.debug("domain %s: offline login of %r: PAM status %d", self.domain.name,
                 req.name, verdict.status)  # fmt: skip
        return AuthReply(
            verdict.status, offline=True, expiry=verdict.expiry,
            delayed_until=verdict.delayed_until, online=False, retry_in=client.retry_in,
        )  # fmt: skip

    def chpass(self, req: ChpassRequest) -> ChpassReply:
        domain, client = self.domain, self.client
        if domain.chpass_provider == "none":
            return ChpassReply(MODULE_UNKNOWN)
        if not client.online:
            # SSSD's chpass handler: be_is_offline, no server is tried.
            return ChpassReply(auth.AUTHINFO_UNAVAIL, online=False, retry_in=client.retry_in)
        if req.priv and req.prelim and not req.old:
            # Root's passwd for another user: pam_sss asks root for no old password,
            # and LDAP has no reset by an administrator through PAM (SSSD: "Password
            # reset by root is not supported").
            return ChpassReply(auth.PERM_DENIED)
        res = chpass.change_password(domain, req.dn, req.old, req.new, prelim=req.prelim)
        what = "old password check" if req.prelim else "password change"
        if not res.reachable:
            limited.log(("chpass unreachable", domain.name), logging.WARNING,
                        "domain %s: no server answered the %s of %r (%s)", domain.name,
                        what, req.name, res.reason)  # fmt: skip
            return ChpassReply(auth.AUTHINFO_UNAVAIL, online=client.online,
                               retry_in=client.retry_in)  # fmt: skip
        log.debug("domain %s: %s of %r: PAM status %d %s", domain.name, what, req.name,
                  res.status, res.reason)  # fmt: skip
        if res.status == chpass.SUCCESS and not req.prelim:
            self.password_changes += 1
            log.info("domain %s: %r changed their password", domain.name, req.name)
            if domain.cache_credentials:
                record = after_password_change(
                    self.cache.credentials(req.name), req.new, self.clock()
                )
                self._store(req.name, record)
        return ChpassReply(res.status, res.message, online=client.online,
                           retry_in=client.retry_in)  # fmt: skip

    def _store(self, name: str, record: Credentials) -> None:
        try:
            self.cache.put_credentials(name, record)
        except StoreWriteError as e:
            # The login's answer stands; only its trace for offline logins is lost.
            log.error("domain %s: cannot store the credentials of %r: %s",
                      self.domain.name, name, e)  # fmt: skip

    def status(self) -> dict[str, int]:
        return {
            "online_logins": self.online_logins,
            "offline_logins": self.offline_logins,
            "failed_logins": self.failed,
            "password_changes": self.password_changes,
            "queued_logins": self.turns.queued,
        }


class RoundRobin:
    """One holder at a time; those waiting are queued per key and served one key in
    turn (a key served goes to the back), so a key with many waiters delays another
    key's by at most one turn each."""

    def __init__(self) -> None:
        # Insertion order is the rotation.
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._busy = False

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, key: Hashable) -> None:
        if not self._busy and not self._waiting:
            self._busy = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed over, but its task is gone: pass it on
            raise

    def release(self) -> None:
        while self._waiting:
            key = next(iter(self._waiting))
            q = self._waiting.pop(key)
            fut = q.popleft()
            if q:
                self._waiting[key] = q
            if not fut.done():
                fut.set_result(None)
                return
        self._busy = False
