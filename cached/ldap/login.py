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

With ``auth_provider = krb5`` or ``ad`` the online check is the user's TGT from the KDC
(``cached.kerberos.kinit``: validated against the host keytab, written to the user's
ccache, whose name the reply carries for KRB5CCNAME) instead of the bind; the cached
credentials are the same. ``krb5_store_password_if_offline``: an offline login's
password is kept in this process's memory only (never written), with the empty ccache
the login was given, until the domain is online again; then the TGT is got into that
ccache and the password wiped (SSSD's delayed online authentication).
``krb5_renew_interval``: the renewable TGTs these write (an online login's, a delayed
kinit's, a password change's) are renewed in their ccaches in the background
(``cached.kerberos.renew``), on the login thread, at the service's timer. Password changes
(``Op.CHPASS``, ``chpass_provider = krb5 | ad``) go through the KDC's kpasswd service
(``cached.kerberos.kpasswd``) and then replace the cached hash.

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
from dataclasses import dataclass, replace
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
from cached.config.options import KERBEROS_PROVIDERS, ChpassProvider
from cached.ipc.ops import AuthReply, AuthRequest, ChpassReply, ChpassRequest
from cached.kerberos import status as krb5_status
from cached.ldap import auth, chpass
from cached.ldap.client import LdapClient
from cached.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    from cached.cache.writer import BackendCache

    # Imported where a Kerberos login or change runs: libkrb5 and gssapi are no cost of
    # a backend without auth_provider = krb5 | ad.
    from cached.kerberos import kinit, renew

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

MODULE_UNKNOWN = 28  # PAM_MODULE_UNKNOWN: SSSD's answer when no provider is configured
T = TypeVar("T")
KERBEROS_CHPASS = (ChpassProvider.KRB5, ChpassProvider.AD)


def kerberos_settings(domain: DomainConfig) -> kinit.Settings:
    from cached.kerberos import kinit

    return kinit.Settings(
        realm=domain.krb5_realm,
        keytab=domain.krb5_keytab,
        validate=domain.krb5_validate,
        lifetime=domain.krb5_lifetime,
        renewable_lifetime=domain.krb5_renewable_lifetime,
        ccname_template=domain.krb5_ccname_template,
        ccachedir=domain.krb5_ccachedir,
    )


@dataclass(slots=True)
class Pending:
    """An offline login whose TGT is to be got once the KDC answers
    (``krb5_store_password_if_offline``): the password, in memory only."""

    user: kinit.User
    password: bytearray
    ccname: str

    def wipe(self) -> None:
        self.password[:] = bytes(len(self.password))


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
        self._krb5: kinit.Settings | None = None
        self.pending: dict[str, Pending] = {}
        self.delayed_kinits = 0
        # clock() until which no KDC is asked: none answered a login then (SSSD marks
        # the backend offline, krb5_auth.c krb5_auth_resolve_done: be_mark_offline).
        self.kdc_unreachable_until = 0.0
        self._renewals: renew.Renewals | None = None
        self.renewed = 0

    @property
    def renewals(self) -> renew.Renewals:
        """The TGTs to renew (krb5_renew_interval), made at the first one."""
        if self._renewals is None:
            from cached.kerberos import renew

            self._renewals = renew.Renewals()
        return self._renewals

    @property
    def krb5(self) -> kinit.Settings:
        """The Kerberos settings, made at the first Kerberos login or change."""
        if self._krb5 is None:
            self._krb5 = kerberos_settings(self.domain)
        return self._krb5

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

    async def retry_pending(self) -> None:
        """The domain is online again: get the TGTs of the offline logins kept for it."""
        if not self.pending:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._delayed_kinits)

    async def renew_due(self) -> None:
        """krb5_renew_interval: renew the TGTs past half their lifetime."""
        if self._renewals is None or not self._renewals.entries:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._renew_due)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        for p in self.pending.values():
            p.wipe()
        self.pending.clear()

    # -- the check (on the login thread) -------------------------------------------

    def check(self, req: AuthRequest) -> AuthReply:
        domain, client = self.domain, self.client
        if domain.auth_provider == "none":
            return AuthReply(MODULE_UNKNOWN)
        if not req.password:
            return AuthReply(auth.AUTH_ERR)
        if domain.auth_provider in KERBEROS_PROVIDERS:
            return self._kerberos(req)
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

    # -- Kerberos -------------------------------------------------------------------

    def _user(self, name: str) -> kinit.User | None:
        from cached.kerberos import kinit

        found = self.cache.user_by_name(name).value
        if found is None:
            return None
        return kinit.User(found.name, found.uid, found.gid, found.home)

    def _kerberos(self, req: AuthRequest) -> AuthReply:
        from cached.kerberos import kinit

        domain = self.domain
        user = self._user(req.name)
        if user is None:  # the responder resolved it a moment ago
            return AuthReply(krb5_status.SYSTEM_ERR)
        kdc_down = self.clock() < self.kdc_unreachable_until
        if self.client.online and not kdc_down:
            res = kinit.login(self.krb5, user, req.password)
            self._renewable(user, res)
            if res.reachable:
                reply = self._online(req, auth.OnlineResult(res.status, reason=res.reason))
                return replace(reply, ccname=res.ccname)
            # As SSSD, which marks the backend offline: the logins after this one use
            # the cached credentials without waiting on the KDCs (DNS, connection
            # timeouts) again, until offline_timeout has passed or a delayed kinit
            # reaches a KDC.
            self.kdc_unreachable_until = self.clock() + self.domain.offline_timeout
            limited.log(("kdc unreachable", domain.name), logging.WARNING,
                        "domain %s: no KDC answered the login of %r (%s); using cached "
                        "credentials", domain.name, req.name, res.reason)  # fmt: skip
        elif kdc_down:
            log.debug("domain %s: no KDC answered %.0f s ago; %r logs in with cached "
                      "credentials", domain.name,
                      self.clock() - self.kdc_unreachable_until + domain.offline_timeout,
                      req.name)  # fmt: skip
        reply = self._offline(req)
        if reply.status == auth.SUCCESS and domain.krb5_store_password_if_offline:
            ccname = kinit.empty_ccache(self.krb5, user)
            if ccname:
                old = self.pending.pop(req.name, None)
                if old is not None:
                    old.wipe()
                self.pending[req.name] = Pending(user, bytearray(req.password), ccname)
                reply = replace(reply, ccname=ccname)
        return reply

    def _delayed_kinits(self) -> None:
        from cached.kerberos import kinit

        for name in list(self.pending):
            p = self.pending[name]
            res = kinit.delayed(self.krb5, p.user, bytes(p.password), p.ccname)
            self._renewable(p.user, res)
            if not res.reachable:
                continue  # the next time the domain comes back
            self.kdc_unreachable_until = 0.0
            del self.pending[name]
            p.wipe()
            if res.status == auth.SUCCESS:
                self.delayed_kinits += 1
                log.info("domain %s: the TGT of %r, logged in offline, is now in %s",
                         self.domain.name, name, res.ccname)  # fmt: skip
            else:
                log.warning("domain %s: the KDC refused the TGT of %r, logged in offline: "
                            "%s", self.domain.name, name, res.reason)  # fmt: skip

    def _renewable(self, user: kinit.User, res: kinit.Result) -> None:
        """A login's new TGT into the renewal list (krb5_renew_interval > 0, SSSD's
        ``add_tgt_to_renew_table``: when renewable beyond its end time)."""
        if self.domain.krb5_renew_interval <= 0 or res.status != auth.SUCCESS:
            return
        if res.times is None or not res.ccname:
            return
        from cached.kerberos import renew

        entry = renew.Entry(user, res.principal, res.ccname, res.times)
        if self.renewals.add(entry):
            log.debug("domain %s: %s of %r to renew after %s", self.domain.name,
                      res.ccname, user.name, time.ctime(entry.renew_at))  # fmt: skip

    def _renew_due(self) -> None:
        from cached.kerberos import renew

        name = self.domain.name
        for entry in self.renewals.due(self.clock()):
            res = renew.renew(self.krb5, entry)
            outcome = self.renewals.settle(entry, res)
            if outcome == "retry":
                # SSSD: "Cannot renew TGT ... while offline, will retry later".
                log.info("domain %s: no KDC answered the renewal of %s (%s); retrying "
                         "later", name, entry.ccname, res.reason)  # fmt: skip
            elif outcome == "failed":
                log.warning("domain %s: cannot renew the TGT of %r in %s: %s", name,
                            entry.user.name, entry.ccname, res.reason)  # fmt: skip
            else:
                self.renewed += 1
                end = time.ctime(res.times.end) if res.times else "?"
                log.info("domain %s: renewed the TGT of %r in %s, valid until %s", name,
                         entry.user.name, res.ccname, end)  # fmt: skip

    def _kpasswd(self, req: ChpassRequest) -> ChpassReply:
        """chpass_provider = krb5 | ad: the check of the old password (prelim) or the
        change through the KDC's kpasswd service; then the cached hash replaced."""
        from cached.kerberos import kpasswd

        domain = self.domain
        if not req.prelim and not req.new:
            return ChpassReply(krb5_status.SYSTEM_ERR)  # nothing typed: never sent
        user = self._user(req.name)
        if user is None:
            return ChpassReply(krb5_status.SYSTEM_ERR)
        res = kpasswd.change(self.krb5, user, req.old, None if req.prelim else req.new)
        if not res.reachable:
            # SSSD: no KDC for the change: PAM_AUTHTOK_LOCK_BUSY.
            log.warning("domain %s: no KDC answered the password change of %r (%s)",
                        domain.name, req.name, res.reason)  # fmt: skip
            return ChpassReply(krb5_status.AUTHTOK_LOCK_BUSY)
        if res.status != auth.SUCCESS:
            log.info("domain %s: password change of %r refused: %s", domain.name, req.name,
                     res.reason)  # fmt: skip
        elif not req.prelim:
            if res.tgt is not None:
                self._renewable(user, res.tgt)
            self.password_changes += 1
            record = after_online_login(
                self.cache.credentials(req.name), req.new, self.clock(),
                cache=domain.cache_credentials,
            )  # fmt: skip
            self._store(req.name, record)
            log.info("domain %s: password of %r changed", domain.name, req.name)
        return ChpassReply(res.status, res.message or None, ccname=res.ccname)

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
        if domain.chpass_provider in KERBEROS_CHPASS:
            return self._kpasswd(req)
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
            "pending_kinits": len(self.pending),
            "delayed_kinits": self.delayed_kinits,
            "renewable_tgts": len(self.renewals),
            "renewed_tgts": self.renewed,
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
