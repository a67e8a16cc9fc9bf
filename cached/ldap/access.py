"""The backend's side of ``access_provider = ldap`` (``Op.ACCESS``): read what the
rules of ``ldap_access_order`` need from the server, store it, and decide
(``cached.access.rules``).

Online, one batch of base searches on the lookup connection, sent together (one round
trip): the user's entry for the attributes the rules read (``shadowExpire``,
``nsAccountLock``, ``authorizedService``, ``pwdAccountLockedTime``, ...), the entry
again with SSSD's access filter ``(&(<name attr>=<name>)(objectclass=<user
class>)<ldap_access_filter>)``, the candidate password policy entries
(``ldap_pwdlockout_dn``, else ``cn=ppolicy,ou=policies,<base>`` for each search
base), and the ``pam_authz_search`` filter under each user search base. SSSD reads
the filter and the lockout at every account check too (``sdap_access.c``); it reads
the other attributes with the user's entry at each lookup, which cached does not
store, so they come in the same round trip here instead.

What was read is stored (``BackendCache.put_access``, the entry store's ``access``
table) when it changed. Offline, or when no server answers, the decision is made from
it: the last online decision stands, as SSSD's ``ldap_access_filter_allow`` and
``ldap_access_lockout_allow`` and its cached user attributes make it stand. A user
never checked online is denied offline (nothing says the account may be used).
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from cached.access import rules
from cached.access.authz import expand
from cached.access.rules import AccessState, Login, Verdict
from cached.auth import pwexpire
from cached.cache import StoreWriteError
from cached.config import DomainConfig, SearchBase, parse_search_bases
from cached.config.options import AccessRule
from cached.ipc.ops import AccessReply, AccessRequest
from cached.ldap import wire
from cached.ldap.client import LdapClient, LdapOffline
from cached.ldap.exchange import Entry, LdapError, LdapLimitExceeded, Search
from cached.ldap.login import RoundRobin
from cached.ldap.schema import SchemaMap, escape, first
from cached.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    from cached.cache.writer import BackendCache

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# The domain option naming the LDAP attribute of each role the rules read.
ROLE_OPTIONS = {
    rules.SHADOW_EXPIRE: "ldap_user_shadow_expire",
    rules.NS_ACCOUNT_LOCK: "ldap_ns_account_lock",
    rules.AD_ACCOUNT_EXPIRES: "ldap_user_ad_account_expires",
    rules.AD_USER_ACCOUNT_CONTROL: "ldap_user_ad_user_account_control",
    rules.NDS_LOGIN_DISABLED: "ldap_user_nds_login_disabled",
    rules.NDS_LOGIN_EXPIRATION_TIME: "ldap_user_nds_login_expiration_time",
    rules.NDS_LOGIN_ALLOWED_TIME_MAP: "ldap_user_nds_login_allowed_time_map",
    rules.AUTHORIZED_SERVICE: "ldap_user_authorized_service",
    rules.AUTHORIZED_HOST: "ldap_user_authorized_host",
    rules.AUTHORIZED_RHOST: "ldap_user_authorized_rhost",
}
# The password policy's attributes (slapo-ppolicy(5), draft-behera-ldap-password-policy).
LOCKED_TIME = "pwdAccountLockedTime"
LOCKOUT = "pwdLockout"
LOCKOUT_DURATION = "pwdLockoutDuration"
NO_ATTRIBUTES = "1.1"  # RFC 4511 §4.5.1.8: no attributes, only whether it matched


def host_names() -> list[str]:
    """This host's name and, when it differs, its canonical name (SSSD's
    ``sdap_access_host``: gethostname, then getaddrinfo with AI_CANONNAME)."""
    name = socket.gethostname()
    names = [name]
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_DGRAM, flags=socket.AI_CANONNAME)
    except OSError:
        return names
    canon = infos[0][3] if infos else ""
    if canon and canon != name:
        names.append(canon)
    return names


class AccessChecks:
    def __init__(
        self,
        domain: DomainConfig,
        client: LdapClient,
        cache: BackendCache,
        prepare: Callable[[], SchemaMap],
        clock: Callable[[], float] = time.time,
        hostnames: Callable[[], list[str]] = host_names,
        warning: int | None = None,
    ) -> None:
        """``warning``: the password expiry warning period in seconds
        (cached.ldap.auth.warning_seconds), for the pwd_expire_policy rules."""
        self.domain = domain
        self.warning = warning
        self.client = client
        self.cache = cache
        self.prepare = prepare
        self.clock = clock
        self.hostnames = hostnames
        self.order: tuple[AccessRule, ...] = tuple(domain.ldap_access_order)
        self.policy = domain.ldap_account_expire_policy
        # The `filter` rule's filter ("": none, the rule denies).
        self.access_filter = domain.ldap_access_filter
        self.filter_option = "ldap_access_filter"  # named in the log
        self.turns = RoundRobin()
        self.checks = 0
        self.denied = 0
        self.offline_checks = 0

    async def check(
        self,
        req: AccessRequest,
        in_worker: Callable[[Callable[[], AccessReply]], Awaitable[AccessReply]],
    ) -> AccessReply:
        """Queue ``req`` behind its uid's earlier checks (one uid in turn), then decide
        on the lookup thread (``in_worker``), which owns the lookup connection."""
        await self.turns.acquire(req.uid)
        try:
            return await in_worker(functools.partial(self.decide, req))
        finally:
            self.turns.release()

    # -- the decision (on the lookup thread) -----------------------------------------

    def decide(self, req: AccessRequest) -> AccessReply:
        self.checks += 1
        login = Login(req.service, req.rhost)
        hosts = self.hostnames() if AccessRule.HOST in self.order else []
        client = self.client
        if client.online:
            try:
                state = self._read(req)
            except LdapOffline:
                pass  # decided from what is stored, below
            except LdapError as e:
                limited.log(("access error", self.domain.name), logging.ERROR,
                            "domain %s: the account check of %r failed: %s",
                            self.domain.name, req.name, e)  # fmt: skip
                return self._reply(req, Verdict(rules.SYSTEM_ERR, why=str(e)), False)
            else:
                self._store(req.name, state)
                verdict = self._evaluate(state, login, hosts)
                return self._reply(req, verdict, False)
        self.offline_checks += 1
        stored = self.cache.access_state(req.name)
        if stored is None:
            verdict = Verdict(rules.PERM_DENIED, why="offline, and never checked online")
        else:
            verdict = self._evaluate(stored, login, hosts)
        return self._reply(req, verdict, True)

    def _evaluate(self, state: AccessState, login: Login, hosts: Sequence[str]) -> Verdict:
        return rules.evaluate(self.order, self.policy, state, login, hosts, self.clock(),
                              has_filter=bool(self.access_filter),
                              pwd_policy=self.domain.ldap_pwd_policy,
                              warning=self.warning)  # fmt: skip

    def _reply(self, req: AccessRequest, v: Verdict, offline: bool) -> AccessReply:
        if not v.allowed:
            self.denied += 1
        log.debug("domain %s: account check of %r (service %r, rhost %r)%s: status %d%s",
                  self.domain.name, req.name, req.service, req.rhost,
                  " offline" if offline else "", v.status,
                  f" ({v.why})" if v.why else "")  # fmt: skip
        return AccessReply(v.status, v.info, offline, self.client.online, self.client.retry_in,
                           v.warn if v.allowed else None)  # fmt: skip

    def _store(self, name: str, state: AccessState) -> None:
        try:
            self.cache.put_access(name, state)
        except StoreWriteError as e:
            # The decision stands; only its trace for offline checks is lost.
            log.error("domain %s: cannot store the access check of %r: %s",
                      self.domain.name, name, e)  # fmt: skip

    # -- reading the server ------------------------------------------------------------

    def _read(self, req: AccessRequest) -> AccessState:
        """One batch of searches; LdapOffline when no server answers."""
        if not req.dn:
            raise LdapError(f"no DN cached for {req.name!r}")
        d, order = self.domain, self.order
        schema = self.prepare()
        lock = AccessRule.PPOLICY in order or AccessRule.LOCKOUT in order
        pwd = rules.pwd_attributes(order, d.ldap_pwd_policy)
        roles = rules.attribute_roles(order, self.policy) + tuple(rules.PWD_ROLE + n for n in pwd)
        names = [getattr(d, ROLE_OPTIONS[r]) for r in roles if r in ROLE_OPTIONS] + [
            getattr(d, pwexpire.OPTION_OF[n]) for n in pwd]  # fmt: skip
        if lock:
            names += [LOCKED_TIME, LOCKOUT_DURATION]
        entry_s = Search(req.dn, "(objectClass=*)", names, "base", paged=False) if names else None
        filter_s = None
        if AccessRule.FILTER in order and self.access_filter:
            filt = (f"(&({schema.user_name}={escape(req.name)})"
                    f"(objectclass={schema.user_oc}){self.access_filter})")  # fmt: skip
            if self._valid(filt, self.filter_option):
                filter_s = Search(req.dn, filt, [NO_ATTRIBUTES], "base", paged=False)
        policy_s = []
        if lock:
            dns = [d.ldap_pwdlockout_dn] if d.ldap_pwdlockout_dn else [
                f"cn=ppolicy,ou=policies,{b.dn}" for b in self._search_bases(schema)]
            policy_s = [Search(dn, "(objectClass=*)", [LOCKOUT, LOCKOUT_DURATION], "base",
                               paged=False) for dn in dns]  # fmt: skip
        authz_s = []
        if AccessRule.AUTHZ_SEARCH in order and d.pam_authz_search:
            filt = expand(d.pam_authz_search, self._variables(req), escape)
            if self._valid(filt, "pam_authz_search"):
                authz_s = [
                    Search(b.dn, schema.with_base(filt, b), [NO_ATTRIBUTES], b.scope,
                           size_limit=1, paged=False)
                    for b in schema.user_bases
                ]  # fmt: skip
        specs = [s for s in (entry_s, filter_s) if s is not None] + policy_s + authz_s
        got = iter(self.client.search_many(specs) if specs else [])
        entry = _one(next(got)) if entry_s else None
        filter_found = _found(next(got)) if filter_s else False
        policies = [_one(next(got)) for _ in policy_s]
        authz_found = any(_found(next(got)) for _ in list(authz_s))
        attrs = {r: tuple(entry.get(n)) for r, n in zip(roles, names, strict=False)
                 if entry is not None and entry.get(n)}  # fmt: skip
        lockout_allow = None
        if lock:
            lockout_allow = not self._locked(entry, policies)
        return AccessState(
            attrs,
            filter_allow=filter_found if AccessRule.FILTER in order else None,
            lockout_allow=lockout_allow,
            authz_allow=authz_found if AccessRule.AUTHZ_SEARCH in order else None,
        )

    def _search_bases(self, schema: SchemaMap) -> list[SearchBase]:
        """SSSD's default policy DNs hang under ``ldap_search_base`` (each of its
        bases; the root DSE's when unset, as the user bases then are)."""
        bases = parse_search_bases(self.domain.ldap_search_base)
        return list(bases) if bases else list(schema.user_bases[:1])

    def _locked(self, entry: Entry | None, policies: list[Entry | None]) -> bool:
        """The ``ppolicy``/``lockout`` rule: the first policy entry found must say
        ``pwdLockout: TRUE`` for a lock to count (SSSD grants access otherwise)."""
        policy = next((p for p in policies if p is not None), None)
        if policy is None or first(policy.get(LOCKOUT)).upper() != "TRUE" or entry is None:
            return False
        locked_time = entry.get(LOCKED_TIME)
        if not locked_time:
            return False
        # SSSD reads pwdLockoutDuration from the user's entry, where servers do not put
        # it; the policy's own is what the server applies (docs/compatibility.md).
        duration = entry.get(LOCKOUT_DURATION) or policy.get(LOCKOUT_DURATION)
        return rules.locked(
            first(locked_time), first(duration) if duration else None, self.clock(),
            permanent_only=AccessRule.PPOLICY not in self.order,
        )  # fmt: skip

    def _variables(self, req: AccessRequest) -> dict[str, str]:
        hosts = host_names()
        return {
            "username": req.name,
            "service": req.service,
            "ruser": req.ruser,
            "rhost": req.rhost,
            "tty": req.tty,
            "hostname": hosts[0],
            "fqdn": hosts[-1],
            "domain": self.domain.name,
            "dn": req.dn,
            "uid": str(req.user_uid),
        }

    def _valid(self, filt: str, option: str) -> bool:
        """Whether ``filt`` is an RFC 4515 filter; a malformed one denies (SSSD:
        "Malformed access control filter"), said once in the log."""
        try:
            wire.encode_filter(filt)
        except wire.FilterError as e:
            limited.log(("bad filter", self.domain.name, option), logging.ERROR,
                        "domain %s: %s gives a malformed filter, access denied: %s",
                        self.domain.name, option, e)  # fmt: skip
            return False
        return True

    def status(self) -> dict[str, int]:
        return {
            "access_checks": self.checks,
            "access_denied": self.denied,
            "access_offline": self.offline_checks,
            "queued_access_checks": self.turns.queued,
        }


def _one(got: list[Entry] | LdapLimitExceeded) -> Entry | None:
    return got[0] if isinstance(got, list) and got else None


def _found(got: list[Entry] | LdapLimitExceeded) -> bool:
    # A size limit reached: there were entries.
    return isinstance(got, LdapLimitExceeded) or bool(got)
