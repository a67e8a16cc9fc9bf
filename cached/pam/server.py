"""The PAM interface of the responder: SSSD's two PAM sockets, for Debian's ``pam_sss.so``.

``pam_sss`` connects to ``<pipes_dir>/private/pam`` (0600) when it runs as root and to
``<pipes_dir>/pam`` (0666) otherwise; SSSD 2.10 and later use the public one for root
too. Both must be root:root, and the server process uid 0 and gid 0, or ``pam_sss``
refuses to talk (PAM reference §1.2; docs/threat-model.md says why this process is
root and what it may do). Which caller is privileged is read from the peer's
SO_PEERCRED, never from the socket it came in on.

Each connection feeds the sans-IO codec (``protocol.py``) and is answered one request
at a time, as ``pam_sss`` sends them. Before any command the user is resolved through
the lookup flow (``responder/flow.py``, initgroups, as SSSD's ``pam_check_user_search``
does), at most once per ``pam_id_timeout`` per name; a name the flow does not find is
PAM_USER_UNKNOWN. Then:

================================  =====================================================
command                           answer
================================  =====================================================
AUTHENTICATE                      the domain's backend (``Op.AUTHENTICATE``): an online
                                  bind as the user, else cached credentials
ACCT_MGMT                         ``access_provider``: ``permit`` (SSSD's default)
                                  SUCCESS; ``deny`` PERM_DENIED; ``simple`` decided
                                  here from the user's resolved groups
                                  (``cached.access.simple``); ``ldap`` and ``ad``
                                  the domain's backend (``Op.ACCESS``,
                                  ``ldap/access.py``, ``ldap/adaccess.py``)
OPEN_SESSION, CLOSE_SESSION,      SUCCESS (no session provider)
SETCRED, PREAUTH
CHAUTHTOK_PRELIM, CHAUTHTOK       the domain's backend (``Op.CHANGE_PASSWORD``): with
                                  ``chpass_provider = ldap`` the old password checked
                                  by a bind, then the change as the user; with ``krb5``
                                  or ``ad`` through the KDC's kpasswd service (PRELIM
                                  checks the old password); offline: AUTHTOK_ERR and
                                  "System is offline, password change not possible";
                                  ``chpass_provider = none``: PAM_MODULE_UNKNOWN
================================  =====================================================

Every reply carries the domain's name, as SSSD's. The socket is open to every local
user, so connections are counted per uid as the NSS socket's (``max_clients``,
``max_clients_per_uid``, ``root_reserved_clients``), a request must arrive whole within
``client_request_timeout`` and an idle connection is closed after ``client_idle_timeout``
(``responder/streams.py``, the loop the SSH and sudo sockets share); the logins
themselves queue per uid in the backend (``ldap/login.py``), so one user's flood waits
behind itself, not in front of root's login.

The passwords (old and new) are read from their :class:`~cached.pam.protocol.Secret`
only to be sent to the backend, never logged, and wiped when the request is answered
(``with request:``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from typing import Any, Final

from cached.access.simple import SimpleRules
from cached.cache import Initgroups
from cached.config import Config, DomainConfig
from cached.config.options import AccessProvider
from cached.ipc import framing
from cached.ipc.ops import (
    AccessReply,
    AccessRequest,
    AuthReply,
    AuthRequest,
    ChpassReply,
    ChpassRequest,
    Op,
)
from cached.pam import protocol as p
from cached.pam.protocol import AuthTokType, Command, PamStatus
from cached.ratelimit import RateLimitedLog
from cached.responder import streams
from cached.responder.flow import INITGR, Backend, Found, Lookups, groups_of
from cached.responder.streams import StreamClients

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# Beyond the backend's own deadlines (each server's connect + StartTLS and bind), the
# time a login may wait for its turn in the backend's login queue.
QUEUE_ALLOWANCE = 30.0

_SUCCESS_COMMANDS = frozenset(
    {Command.OPEN_SESSION, Command.CLOSE_SESSION, Command.SETCRED, Command.PREAUTH}
)  # fmt: skip
_CHPASS_COMMANDS = frozenset({Command.CHAUTHTOK, Command.CHAUTHTOK_PRELIM})
_ENV_ITEMS = frozenset(
    {p.ResponseType.PAM_ENV_ITEM, p.ResponseType.ENV_ITEM, p.ResponseType.ALL_ENV_ITEM}
)
# The variable pam_sss puts into the PAM environment for a login's ccache (SSSD's
# krb5_child sends it as a PAM_ENV_ITEM).
CCACHE_ENV = "KRB5CCNAME"


def _password(tok: p.AuthTok | None) -> bytes:
    """The bytes of a PASSWORD token (to send to the backend), else b""."""
    return tok.secret.reveal() if tok is not None and tok.type is AuthTokType.PASSWORD else b""


def _salvage(error: p.ProtocolError) -> bytes | None:
    """A request whose body cannot be parsed is answered SYSTEM_ERR, as SSSD's; the
    connection goes on (a broken frame closes it)."""
    if isinstance(error, p.MalformedRequest):
        return p.system_error_reply(error.cmd or 0)
    return None


# PAM_SYSTEM_ERR when answering failed; never the request's content in the log line:
# it may hold a password.
_ANSWERING: Final = streams.Answering("pam", p.GetVersion, p.version_reply, p.system_error_reply)


def public_socket(config: Config) -> str:
    return os.path.join(config.daemon.pipes_dir, "pam")


def private_socket(config: Config) -> str:
    return os.path.join(framing.private_dir(config.daemon.pipes_dir), "pam")


class PamResponder:
    def __init__(self, config: Config, lookups: Lookups, backends: dict[str, Backend]) -> None:
        self.config = config
        self.lookups = lookups
        self.backends = backends
        self.pam = config.pam
        self.started = time.time()
        self.clock = time.monotonic
        # pam_id_timeout: name -> (until, what the flow answered)
        self._resolved: dict[str, tuple[float, Found[Initgroups]]] = {}
        self.clients = StreamClients(config.nss, "PAM")
        self.logins_ok = 0
        self.logins_refused = 0
        self.requests = 0
        self.access_denied = 0
        # access_provider = simple: each domain's lists, parsed once.
        self._simple: dict[str, SimpleRules] = {}

    # -- answering -----------------------------------------------------------------

    async def answer(self, req: p.PamRequest, uid: int | None) -> bytes:
        """The reply to ``req`` from a client running as ``uid``; the request's tokens
        are wiped when it returns."""
        with req:
            self.requests += 1
            found = await self._resolve(req.user)
            if found is None:
                if req.cmd is Command.AUTHENTICATE:
                    self.logins_refused += 1
                return p.pam_reply(req.cmd, PamStatus.USER_UNKNOWN)
            domain = found.domain.name
            status, items = await self._command(req, found, uid)
            if req.cmd is Command.AUTHENTICATE:
                if status == PamStatus.SUCCESS:
                    self.logins_ok += 1
                else:
                    self.logins_refused += 1
                log.debug("pam: %s of %r (service %r, uid %s): status %d",
                         p.command_name(req.cmd), req.user, req.service, uid, status)  # fmt: skip
            items = [i for i in items if not self._filtered(i, req.service)]
            return p.pam_reply(req.cmd, status, [p.domain_name_item(domain), *items])

    async def _resolve(self, name: str) -> Found[Initgroups] | None:
        if not name:
            return None
        now = self.clock()
        got = self._resolved.get(name)
        if got is not None and got[0] > now:
            return got[1]
        found = await self.lookups.lookup(INITGR, name)
        if found is None:
            self._resolved.pop(name, None)
            return None
        if self.pam.pam_id_timeout > 0:
            if len(self._resolved) > 10_000:  # any local user can ask for names
                self._resolved.clear()
            self._resolved[name] = (now + self.pam.pam_id_timeout, found)
        return found

    async def _command(
        self, req: p.PamRequest, found: Found[Initgroups], uid: int | None
    ) -> tuple[int, list[p.ReplyItem]]:
        if req.cmd is Command.AUTHENTICATE:
            return await self._authenticate(req, found, uid)
        if req.cmd is Command.ACCT_MGMT:
            status, items = await self._account(req, found, uid)
            if status != PamStatus.SUCCESS:
                self.access_denied += 1
            return status, items
        if req.cmd in _SUCCESS_COMMANDS:
            return PamStatus.SUCCESS, []
        if req.cmd in _CHPASS_COMMANDS:
            return await self._change_password(req, found, uid)
        return PamStatus.SYSTEM_ERR, []  # pragma: no cover - the codec serves no other

    async def _authenticate(
        self, req: p.PamRequest, found: Found[Initgroups], uid: int | None
    ) -> tuple[int, list[p.ReplyItem]]:
        tok = req.authtok
        # Only passwords are tried (PAM reference §2.1): a smartcard PIN is a bad item,
        # anything else (EMPTY included: a password of length 0) fails without a bind.
        if tok is None or tok.type is AuthTokType.EMPTY:
            return PamStatus.AUTH_ERR, []
        if tok.type in (AuthTokType.SC_PIN, AuthTokType.SC_KEYPAD):
            return PamStatus.BAD_ITEM, []
        if tok.type is not AuthTokType.PASSWORD:
            return PamStatus.AUTH_ERR, []
        domain = found.domain
        user = found.value.user
        backend = self.backends[domain.name]
        timeout = QUEUE_ALLOWANCE + (domain.ldap_network_timeout + domain.ldap_opt_timeout) * (
            len(domain.ldap_uri) + len(domain.ldap_backup_uri)
        )
        try:
            raw = await backend.call(
                Op.AUTHENTICATE, timeout=timeout,
                **AuthRequest(user.name, user.dn, tok.secret.reveal(), uid).args(),
            )  # fmt: skip
            reply = AuthReply.parse(raw)
        except (framing.RpcError, ValueError) as e:
            limited.log(("auth unavailable", domain.name), logging.WARNING,
                        "pam: backend %s unavailable for a login: %s", domain.name, e)  # fmt: skip
            return PamStatus.AUTHINFO_UNAVAIL, []
        return reply.status, list(self._items(reply))

    async def _change_password(
        self, req: p.PamRequest, found: Found[Initgroups], uid: int | None
    ) -> tuple[int, list[p.ReplyItem]]:
        """CHAUTHTOK_PRELIM (the old password) and CHAUTHTOK (old and new): the
        backend's change_password op, whose offline answer becomes AUTHTOK_ERR with
        "System is offline, password change not possible" (SSSD's pam_reply)."""
        domain = found.domain
        if domain.chpass_provider == "none":
            return PamStatus.MODULE_UNKNOWN, []
        old, new = req.authtok, req.new_authtok
        if old is not None and old.type not in (AuthTokType.PASSWORD, AuthTokType.EMPTY):
            return PamStatus.SYSTEM_ERR, []  # SSSD's LDAP chpass takes passwords only
        prelim = req.cmd is Command.CHAUTHTOK_PRELIM
        # Each chpass server's connect and operations, or kpasswd's three tries.
        uris = len(domain.ldap_chpass_uri) + len(domain.ldap_chpass_backup_uri)
        timeout = QUEUE_ALLOWANCE + (domain.ldap_network_timeout + domain.ldap_opt_timeout) * (
            max(uris, 2) + 1
        )
        user = found.value.user
        # A token that is not a PASSWORD (EMPTY: nothing typed) travels as b"".
        ask = ChpassRequest(user.name, user.dn, _password(old),
                            b"" if prelim else _password(new), prelim, uid, uid == 0)  # fmt: skip
        try:
            raw = await self.backends[domain.name].call(
                Op.CHANGE_PASSWORD, timeout=timeout, **ask.args()
            )
            reply = ChpassReply.parse(raw)
        except (framing.RpcError, ValueError) as e:
            limited.log(("chpass unavailable", domain.name), logging.WARNING,
                        "pam: backend %s unavailable for a password change: %s",
                        domain.name, e)  # fmt: skip
            reply = ChpassReply(PamStatus.AUTHINFO_UNAVAIL)
        if reply.status == PamStatus.AUTHINFO_UNAVAIL:
            return PamStatus.AUTHTOK_ERR, [p.offline_chpass_item()]
        items = [p.chpass_error_item(reply.message)] if reply.message is not None else []
        if reply.ccname and reply.status == PamStatus.SUCCESS:
            # chpass_provider = krb5 | ad: the TGT got with the new password.
            items.append(p.env_item(CCACHE_ENV, reply.ccname))
        return reply.status, items

    async def _account(
        self, req: p.PamRequest, found: Found[Initgroups], uid: int | None
    ) -> tuple[int, list[p.ReplyItem]]:
        """ACCT_MGMT: may the user log in (``access_provider``)?"""
        domain = found.domain
        provider = domain.access_provider
        if provider is AccessProvider.PERMIT:
            return PamStatus.SUCCESS, []
        if provider is AccessProvider.DENY:
            return PamStatus.PERM_DENIED, []
        if provider is AccessProvider.SIMPLE:
            allowed = self._simple_allows(domain, found)
            log.debug("pam: simple access of %r: %s", req.user, "allowed" if allowed else "denied")
            return (PamStatus.SUCCESS if allowed else PamStatus.PERM_DENIED), []
        user = found.value.user
        backend = self.backends[domain.name]
        timeout = QUEUE_ALLOWANCE + domain.ldap_search_timeout + domain.ldap_opt_timeout * (
            len(domain.ldap_uri) + len(domain.ldap_backup_uri)
        )
        try:
            raw = await backend.call(
                Op.ACCESS, timeout=timeout,
                **AccessRequest(user.name, user.dn, req.service, req.rhost, req.ruser, req.tty,
                                user.uid, uid).args(),
            )  # fmt: skip
            reply = AccessReply.parse(raw)
        except (framing.RpcError, ValueError) as e:
            # Unlike a server that does not answer (the backend decides from what it
            # stored), no answer at all lets nobody in (docs/threat-model.md).
            limited.log(("access unavailable", domain.name), logging.WARNING,
                        "pam: backend %s unavailable for an account check: %s",
                        domain.name, e)  # fmt: skip
            return PamStatus.SYSTEM_ERR, []
        items = [p.system_info_item(reply.info)] if reply.info else []
        if reply.expires_in is not None and reply.status == PamStatus.SUCCESS:
            # A pwd_expire_policy rule's warning (SSSD's add_expired_warning).
            items.append(p.expire_warn_item(reply.expires_in))
        # SSSD's pam_reply: the expired message to sshd, or to every service from
        # pam_verbosity 2 (PAM reference §1.8).
        if reply.status == PamStatus.ACCT_EXPIRED and (
            req.service.lower() == "sshd" or self.pam.pam_verbosity >= 2
        ):
            items.append(p.account_expired_item(self.pam.pam_account_expired_message))
        return reply.status, items

    def _simple_allows(self, domain: DomainConfig, found: Found[Initgroups]) -> bool:
        rules = self._simple.get(domain.name)
        if rules is None:
            rules = SimpleRules.parse(
                domain.name,
                (domain.simple_allow_users, domain.simple_deny_users,
                 domain.simple_allow_groups, domain.simple_deny_groups),
                not domain.case_insensitive,
            )  # fmt: skip
            if rules.broken:
                log.error("domain %s: the simple_* lists cannot be used, so everyone is "
                          "denied: %s", domain.name, rules.broken)  # fmt: skip
            self._simple[domain.name] = rules
        user = found.value.user
        if not rules.needs_groups:
            return rules.allows(user.name)
        return rules.allows(user.name, groups_of(found))

    def _filtered(self, item: p.ReplyItem, service: str) -> bool:
        """Whether ``pam_response_filter`` keeps ``item`` (an environment item) from
        the client: ``ENV`` every one, ``ENV:NAME`` that variable, ``ENV:NAME:service``
        that variable for that PAM service only (SSSD's filter_responses_env)."""
        if item.type not in _ENV_ITEMS:
            return False
        name = item.data.split(b"=", 1)[0].decode("utf-8", "replace")
        for rule in self.pam.pam_response_filter:
            kind, _, rest = rule.partition(":")
            if kind != "ENV":
                continue
            var, _, svc = rest.partition(":")
            if svc and svc != service:
                continue
            if not var or var == name:
                return True
        return False

    def _items(self, reply: AuthReply) -> Iterable[p.ReplyItem]:
        """The user-info an answer carries (PAM reference §1.6, §1.8)."""
        verbosity = self.pam.pam_verbosity
        # SSSD says "cached credentials" without an expiry only at pam_verbosity 2.
        shown = (reply.expiry and verbosity >= 1) or verbosity >= 2
        if reply.offline and reply.status == PamStatus.SUCCESS and shown:
            yield p.offline_auth_item(reply.expiry)
        if reply.delayed_until:
            yield p.offline_auth_delayed_item(reply.delayed_until)
        if reply.grace is not None:
            yield p.grace_login_item(reply.grace)
        elif reply.expires_in is not None and reply.status == PamStatus.SUCCESS:
            yield p.expire_warn_item(reply.expires_in)
        if reply.locked:
            yield p.account_expired_item(self.pam.pam_account_locked_message)
        if reply.ccname and reply.status == PamStatus.SUCCESS:
            yield p.env_item(CCACHE_ENV, reply.ccname)

    # -- connections ---------------------------------------------------------------

    async def serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self.clients.serve(reader, writer, p.ServerConnection(), self._respond, _salvage)

    async def _respond(self, req: p.Request, uid: int | None) -> bytes | None:
        return await _ANSWERING.respond(req, lambda r: self.answer(r, uid))

    def status(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "connections": self.clients.active,
            "refused_connections": self.clients.refused,
            "requests": self.requests,
            "logins_ok": self.logins_ok,
            "logins_refused": self.logins_refused,
            "access_denied": self.access_denied,
            "sockets": [public_socket(self.config), private_socket(self.config)],
        }


async def serve_pam(config: Config, responder: PamResponder) -> list[asyncio.Server]:
    """Listen on both PAM sockets with the owner and modes ``pam_sss`` checks."""
    if os.geteuid() != 0 or os.getegid() != 0:
        log.error(
            "the PAM responder runs as uid %d gid %d: pam_sss.so talks only to a server "
            "running as uid 0 and gid 0, so logins through it will fail",
            os.geteuid(), os.getegid(),
        )  # fmt: skip
    os.makedirs(config.daemon.pipes_dir, mode=0o755, exist_ok=True)
    servers = []
    for path, mode in ((public_socket(config), 0o666), (private_socket(config), 0o600)):
        servers.append(await streams.listen(path, responder.serve_client, mode))
    return servers
