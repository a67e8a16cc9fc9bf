"""The inter-process contract: every op each private socket answers, and its messages.

The frames (``framing.py``) carry msgpack maps; this module names what is inside them,
so no handler or caller spells an op or a reply key as a string of its own.

=================  ==========================  =====================================
socket             op                          request -> reply
=================  ==========================  =====================================
``be_<domain>``    user_by_name, user_by_uid,  :class:`LookupRequest` ->
                   group_by_name,              :class:`LookupReply`
                   group_by_gid, initgroups
``be_<domain>``    authenticate                :class:`AuthRequest` -> :class:`AuthReply`
                                               (the PAM responder; carries a password:
                                               these sockets are root's, both ends
                                               check SO_PEERCRED)
``be_<domain>``    change_password             :class:`ChpassRequest` ->
                                               :class:`ChpassReply` (CHAUTHTOK_PRELIM
                                               and CHAUTHTOK; carries both passwords)
``be_<domain>``    access                      :class:`AccessRequest` ->
                                               :class:`AccessReply` (the PAM account
                                               check, ``access_provider = ldap``)
``be_<domain>``    counters                    -> :class:`CountersReply`
``be_<domain>``    status                      -> ``{"status": {...}}``
``responder``      counters                    -> :class:`CountersReply`
``responder``      status                      -> ``{"status": {...}}``
``responder``      domain_state                :class:`DomainStateNote` -> ``{}``
                                               (a backend's announcement)
``responder``      invalidated                 -> ``{}`` (drop the negative and memory
                                               caches: ``cached cache`` wrote the
                                               timestamp stores itself)
``control``        counters                    -> ``{"processes": {name: counters}}``
``control``        status                      -> ``{"monitor": ..., "children": [...]}``
``control``        invalidated                 forwarded to the responder
``control``        drop_credentials            :class:`DropCredentials` -> ``{"dropped": n}``
                                               (forwarded to the backends)
``be_<domain>``    drop_credentials            :class:`DropCredentials` -> ``{"dropped": n}``
``be_<domain>``    sudo_refresh                :class:`SudoRefresh` -> :class:`SudoRefreshReply`
                                               (the sudo responder: a user's expired
                                               rules, or all of them)
``be_<domain>``    refresh_soon                -> ``{}`` (the responder answered entries
                                               past their midpoint: an early run of
                                               refresh ahead)
=================  ==========================  =====================================

Every reply also has ``id`` and ``ok`` (and ``error`` when ``ok`` is false), added by the
framing layer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cached.model import Kind


class Op(enum.StrEnum):
    # Backend lookups: refresh one object in the cache, answer how it went.
    USER_BY_NAME = "user_by_name"
    USER_BY_UID = "user_by_uid"
    GROUP_BY_NAME = "group_by_name"
    GROUP_BY_GID = "group_by_gid"
    INITGROUPS = "initgroups"
    NETGROUP_BY_NAME = "netgroup_by_name"
    # Backend: check a password (online bind, else cached credentials).
    AUTHENTICATE = "authenticate"
    # Backend: check the old password (prelim), or change it, as the user.
    CHANGE_PASSWORD = "change_password"
    # Backend: may this user log in (access_provider = ldap, the account check)?
    ACCESS = "access"
    # Backend (and the control socket, which forwards it): forget a user's cached
    # credentials.
    DROP_CREDENTIALS = "drop_credentials"
    # Every process.
    COUNTERS = "counters"
    STATUS = "status"
    # The responder.
    DOMAIN_STATE = "domain_state"
    INVALIDATED = "invalidated"
    GROUPS_STORED = "groups_stored"
    # Backend (and the control socket, which forwards it to every backend): refresh
    # the sudo rules (cached/ldap/sudo.py).
    SUDO_REFRESH = "sudo_refresh"
    # Backend, from the responder: entries were answered past their midpoint
    # (entry_cache_nowait_percentage); refresh ahead runs early for those its scheduled
    # runs would not refresh in time (cached/ldap/service.py, early_horizon).
    REFRESH_SOON = "refresh_soon"


@dataclass(frozen=True, slots=True)
class LookupOp:
    """What a backend lookup op takes (a name or a numeric id) and what it refreshes."""

    key: type
    kind: Kind


LOOKUPS: dict[Op, LookupOp] = {
    Op.USER_BY_NAME: LookupOp(str, Kind.USER),
    Op.USER_BY_UID: LookupOp(int, Kind.USER),
    Op.GROUP_BY_NAME: LookupOp(str, Kind.GROUP),
    Op.GROUP_BY_GID: LookupOp(int, Kind.GROUP),
    Op.INITGROUPS: LookupOp(str, Kind.INITGR),
    Op.NETGROUP_BY_NAME: LookupOp(str, Kind.NETGROUP),
}


class Outcome(enum.Enum):
    """How a backend lookup went (the backend's provider returns it, the responder acts
    on it: only NOT_FOUND enters the negative cache, reference §6.4)."""

    FOUND = "found"
    NOT_FOUND = "not-found"  # the server says it does not exist (cache entry deleted)
    OFFLINE = "offline"  # no server reachable: serve what is cached
    ERROR = "error"  # the server refused the request: serve what is cached
    # Not from the backend: the responder could not reach it (dead or restarting).
    UNAVAILABLE = "unavailable"


class BadMessage(ValueError):
    """A request or reply that does not have the fields its op needs."""


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""


@dataclass(frozen=True, slots=True)
class LookupRequest:
    """Refresh one object; ``uid`` is the NSS client's (SO_PEERCRED), None when unknown
    (D-Bus, tools), so the backend queues it fairly (docs/threat-model.md)."""

    key: str | int
    uid: int | None = None

    def args(self) -> dict[str, Any]:
        return {"key": self.key, "uid": self.uid}

    @classmethod
    def parse(cls, op: Op, args: dict[str, Any]) -> LookupRequest:
        key = args.get("key")
        if not isinstance(key, str | int) or not isinstance(key, LOOKUPS[op].key):
            raise BadMessage(f"{op}: bad key {key!r}")
        if isinstance(key, bool):
            raise BadMessage(f"{op}: bad key {key!r}")
        uid = args.get("uid")
        return cls(key, uid if _is_int(uid) else None)


@dataclass(frozen=True, slots=True)
class LookupReply:
    outcome: Outcome
    message: str = ""
    online: bool = True
    retry_in: float = 0.0
    # The backend's serial of the request that answered, when it sent notes ahead of
    # this answer (GroupsStoredNote.request); 0: none.
    early: int = 0

    def fields(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "message": self.message,
            "online": self.online,
            "retry_in": self.retry_in,
            "early": self.early,
        }

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> LookupReply:
        try:
            outcome = Outcome(reply.get("outcome"))
        except ValueError:
            raise BadMessage(f"unknown lookup outcome {reply.get('outcome')!r}") from None
        early = reply.get("early") or 0
        return cls(
            outcome,
            str(reply.get("message") or ""),
            bool(reply.get("online", True)),
            float(reply.get("retry_in") or 0.0),
            early if isinstance(early, int) and not isinstance(early, bool) else 0,
        )


@dataclass(frozen=True, slots=True)
class DomainStateNote:
    """A backend's announcement that its domain went offline or came back."""

    domain: str
    online: bool
    retry_in: float = 0.0
    reason: str = ""

    def args(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "online": self.online,
            "retry_in": self.retry_in,
            "reason": self.reason,
        }

    @classmethod
    def parse(cls, args: dict[str, Any]) -> DomainStateNote:
        return cls(
            str(args.get("domain")),
            bool(args.get("online")),
            float(args.get("retry_in") or 0.0),
            str(args.get("reason", "")),
        )


@dataclass(frozen=True, slots=True)
class GroupsStoredNote:
    """A backend's note that a user's groups of an initgroups answer still being
    stored were committed: the responder may put them in the memory cache now.
    At most MAX_GROUPS names of 1..MAX_NAME_BYTES UTF-8 bytes without NUL (what the
    NSS protocol takes, LOGIN_NAME_MAX): a backend sends longer lists in several
    notes and leaves longer names to the answer's own prefill."""

    MAX_GROUPS: ClassVar[int] = 1024
    MAX_NAME_BYTES: ClassVar[int] = 256

    domain: str
    user: str  # the initgroups request's name, as the responder asked for it
    request: int  # the backend's serial of that request (LookupReply.early)
    groups: tuple[str, ...]

    @classmethod
    def notable(cls, name: str) -> bool:
        """Can ``name`` be in a note?"""
        size = len(name.encode("utf-8", "replace"))
        return 0 < size <= cls.MAX_NAME_BYTES and "\0" not in name

    def args(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "user": self.user,
            "request": self.request,
            "groups": list(self.groups),
        }

    @classmethod
    def parse(cls, args: dict[str, Any]) -> GroupsStoredNote:
        domain, user, groups = args.get("domain"), args.get("user"), args.get("groups")
        request = args.get("request")
        if not isinstance(domain, str) or not isinstance(user, str) or not isinstance(groups, list):
            raise BadMessage(f"groups_stored: bad domain {domain!r}, user or groups")
        if not isinstance(request, int) or isinstance(request, bool) or request <= 0:
            raise BadMessage(f"groups_stored: bad request serial {request!r}")
        if len(groups) > cls.MAX_GROUPS:
            raise BadMessage(f"groups_stored: {len(groups)} names, over {cls.MAX_GROUPS}")
        if not all(isinstance(g, str) and cls.notable(g) for g in groups):
            raise BadMessage(
                f"groups_stored: a group name is not text of 1..{cls.MAX_NAME_BYTES} bytes "
                "without NUL"
            )
        return cls(domain, user, request, tuple(groups))


@dataclass(frozen=True, slots=True)
class CountersReply:
    pid: int
    counters: dict[str, list[float]]

    def fields(self) -> dict[str, Any]:
        return {"pid": self.pid, "counters": self.counters}


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """Check ``password`` for the cached user ``name`` whose entry is ``dn``; ``uid``
    is the PAM client's (SO_PEERCRED), so the backend queues logins per uid as it
    queues lookups. ``repr`` never shows the password."""

    name: str
    dn: str
    password: bytes = field(repr=False)
    uid: int | None = None

    def args(self) -> dict[str, Any]:
        return {"name": self.name, "dn": self.dn, "password": self.password, "uid": self.uid}

    @classmethod
    def parse(cls, args: dict[str, Any]) -> AuthRequest:
        name, dn, password = args.get("name"), args.get("dn"), args.get("password")
        uid = args.get("uid")
        if not isinstance(name, str) or not name or not isinstance(dn, str):
            raise BadMessage("authenticate: bad name or dn")
        if not isinstance(password, bytes):
            raise BadMessage("authenticate: the password is not bytes")
        return cls(name, dn, password, uid if _is_int(uid) else None)


@dataclass(frozen=True, slots=True)
class AuthReply:
    """How a password check went. ``status``: a PAM status (0 success, 6 denied, 7
    wrong, 9 no server and no cached credentials to use, 12 must change).
    ``offline``: answered from cached credentials, ``expiry`` then says when they stop
    working (0: never); ``delayed_until``: offline logins refused until then (failed
    attempts); ``expires_in``/``grace``: the server's password policy; ``locked``: the
    server said the account is locked; ``ccname``: the Kerberos ccache the login
    wrote (KRB5CCNAME for the PAM stack), or ""."""

    status: int
    offline: bool = False
    expiry: int = 0
    delayed_until: int = 0
    expires_in: int | None = None
    grace: int | None = None
    locked: bool = False
    online: bool = True  # the domain's state after it (DomainStateNote)
    retry_in: float = 0.0
    ccname: str = ""

    def fields(self) -> dict[str, Any]:
        return {
            "ccname": self.ccname,
            "status": self.status,
            "offline": self.offline,
            "expiry": self.expiry,
            "delayed_until": self.delayed_until,
            "expires_in": self.expires_in,
            "grace": self.grace,
            "locked": self.locked,
            "online": self.online,
            "retry_in": self.retry_in,
        }

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> AuthReply:
        status = reply.get("status")
        if not isinstance(status, int) or isinstance(status, bool):
            raise BadMessage(f"authenticate: bad status {status!r}")

        def opt_int(key: str) -> int | None:
            v = reply.get(key)
            return v if _is_int(v) else None

        return cls(
            status,
            bool(reply.get("offline")),
            opt_int("expiry") or 0,
            opt_int("delayed_until") or 0,
            opt_int("expires_in"),
            opt_int("grace"),
            bool(reply.get("locked")),
            bool(reply.get("online", True)),
            float(reply.get("retry_in") or 0.0),
            _text(reply.get("ccname")),
        )


@dataclass(frozen=True, slots=True)
class ChpassRequest:
    """Check ``old`` for the cached user ``name`` (entry ``dn``), and unless
    ``prelim`` change it to ``new`` (b"": the user typed none). ``uid``: the PAM
    client's, for the login queue; ``priv``: the client is root (SO_PEERCRED), who
    is refused a change without the old password, as in SSSD. ``repr`` shows
    neither password."""

    name: str
    dn: str
    old: bytes = field(repr=False)
    new: bytes = field(repr=False)
    prelim: bool
    uid: int | None = None
    priv: bool = False

    def args(self) -> dict[str, Any]:
        return {"name": self.name, "dn": self.dn, "old": self.old, "new": self.new,
                "prelim": self.prelim, "uid": self.uid, "priv": self.priv}  # fmt: skip

    @classmethod
    def parse(cls, args: dict[str, Any]) -> ChpassRequest:
        name, dn, old, new = args.get("name"), args.get("dn"), args.get("old"), args.get("new")
        prelim, uid = args.get("prelim"), args.get("uid")
        if not isinstance(name, str) or not name or not isinstance(dn, str):
            raise BadMessage("change_password: bad name or dn")
        if not isinstance(old, bytes) or not isinstance(new, bytes):
            raise BadMessage("change_password: a password is not bytes")
        if not isinstance(prelim, bool):
            raise BadMessage("change_password: prelim is not a bool")
        return cls(name, dn, old, new, prelim, uid if _is_int(uid) else None,
                   args.get("priv") is True)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChpassReply:
    """How a password check or change went: ``status`` a PAM status (0 done, 7 old
    password wrong, 9 no server: offline, 12 the new password refused by the
    server's policy, 20 refused otherwise, 28 no chpass provider); ``message``: the
    text of a CHPASS_ERROR user-info (None: none); ``ccname``: the Kerberos ccache of
    the TGT got with the new password (chpass_provider = krb5 | ad), or ""."""

    status: int
    message: str | None = None
    online: bool = True
    retry_in: float = 0.0
    ccname: str = ""

    def fields(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "online": self.online,
                "retry_in": self.retry_in, "ccname": self.ccname}  # fmt: skip

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> ChpassReply:
        status, message = reply.get("status"), reply.get("message")
        if not isinstance(status, int) or isinstance(status, bool):
            raise BadMessage(f"change_password: bad status {status!r}")
        if message is not None and not isinstance(message, str):
            raise BadMessage("change_password: the message is not text")
        return cls(status, message, bool(reply.get("online", True)),
                   float(reply.get("retry_in") or 0.0), _text(reply.get("ccname")))  # fmt: skip


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """May the cached user ``name`` (entry ``dn``, uid ``user_uid``) log in through
    PAM ``service`` from ``rhost`` ("" local)? ``uid``: the PAM client's
    (SO_PEERCRED), so the backend takes the checks of each client uid in turn."""

    name: str
    dn: str
    service: str = ""
    rhost: str = ""
    ruser: str = ""
    tty: str = ""
    user_uid: int = 0
    uid: int | None = None

    def args(self) -> dict[str, Any]:
        return {"name": self.name, "dn": self.dn, "service": self.service,
                "rhost": self.rhost, "ruser": self.ruser, "tty": self.tty,
                "user_uid": self.user_uid, "uid": self.uid}  # fmt: skip

    @classmethod
    def parse(cls, args: dict[str, Any]) -> AccessRequest:
        name, dn = args.get("name"), args.get("dn")
        if not isinstance(name, str) or not name or not isinstance(dn, str):
            raise BadMessage("access: bad name or dn")
        keys = ("service", "rhost", "ruser", "tty")
        service, rhost, ruser, tty = (args.get(k) or "" for k in keys)
        if not all(isinstance(t, str) for t in (service, rhost, ruser, tty)):
            raise BadMessage("access: service, rhost, ruser and tty must be text")
        user_uid, uid = args.get("user_uid"), args.get("uid")
        return cls(name, dn, str(service), str(rhost), str(ruser), str(tty),
                   user_uid if isinstance(user_uid, int) and _is_int(user_uid) else 0,
                   uid if _is_int(uid) else None)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AccessReply:
    """The account check's answer: ``status`` a PAM status (0 allowed, 4 an attribute
    that does not parse, 6 denied, 13 expired); ``info``: SSSD's text of why, sent to
    the client as SYSTEM_INFO (its syslog); ``offline``: decided from what the last
    online check stored."""

    status: int
    info: str = ""
    offline: bool = False
    online: bool = True  # the domain's state after it (DomainStateNote)
    retry_in: float = 0.0
    expires_in: int | None = None  # allowed: seconds before the password expires

    def fields(self) -> dict[str, Any]:
        return {"status": self.status, "info": self.info, "offline": self.offline,
                "online": self.online, "retry_in": self.retry_in,
                "expires_in": self.expires_in}  # fmt: skip

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> AccessReply:
        status = reply.get("status")
        if not isinstance(status, int) or isinstance(status, bool):
            raise BadMessage(f"access: bad status {status!r}")
        info = reply.get("info") or ""
        if not isinstance(info, str):
            raise BadMessage("access: info is not text")
        expires_in = reply.get("expires_in")
        if expires_in is not None and (not isinstance(expires_in, int) or isinstance(
                expires_in, bool) or not 0 <= expires_in < 1 << 32):  # fmt: skip
            raise BadMessage(f"access: bad expires_in {expires_in!r}")
        return cls(status, info, bool(reply.get("offline")), bool(reply.get("online", True)),
                   float(reply.get("retry_in") or 0.0), expires_in)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DropCredentials:
    """Forget the cached credentials of the user ``name`` (as a lookup spells it);
    ``domain``: only that domain's ("" every domain's)."""

    name: str
    domain: str = ""

    def args(self) -> dict[str, Any]:
        return {"name": self.name, "domain": self.domain}

    @classmethod
    def parse(cls, args: dict[str, Any]) -> DropCredentials:
        name, domain = args.get("name"), args.get("domain") or ""
        if not isinstance(name, str) or not name or not isinstance(domain, str):
            raise BadMessage("drop_credentials: bad name or domain")
        return cls(name, domain)


class SudoRefreshKind(enum.StrEnum):
    """SSSD's three sudo refreshes (``sdap_sudo_refresh.c``)."""

    FULL = "full"  # every rule; rules gone from the server are dropped
    SMART = "smart"  # the rules changed since the newest stamp held
    RULES = "rules"  # the named rules; those gone are dropped


@dataclass(frozen=True, slots=True)
class SudoRefresh:
    kind: SudoRefreshKind
    names: tuple[str, ...] = ()

    # A rules refresh names at most this many (sudo_threshold's order of magnitude:
    # beyond it the responder asks for a full refresh, as SSSD does).
    MAX_NAMES: ClassVar[int] = 1000

    def args(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "names": list(self.names)}

    @classmethod
    def parse(cls, args: dict[str, Any]) -> SudoRefresh:
        try:
            kind = SudoRefreshKind(str(args.get("kind")))
        except ValueError:
            raise BadMessage(f"sudo_refresh: bad kind {args.get('kind')!r}") from None
        names = args.get("names") or []
        if (
            not isinstance(names, list)
            or len(names) > cls.MAX_NAMES
            or not all(isinstance(n, str) and n for n in names)
        ):
            raise BadMessage("sudo_refresh: bad names")
        return cls(kind, tuple(names))


@dataclass(frozen=True, slots=True)
class SudoRefreshReply:
    """``changed``: rules whose stored body changed; ``deleted``: of those, the ones
    dropped (a rules refresh that drops one asks for a full refresh, as SSSD)."""

    outcome: Outcome
    changed: int = 0
    deleted: int = 0
    message: str = ""

    def fields(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "changed": self.changed,
            "deleted": self.deleted,
            "message": self.message,
        }

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> SudoRefreshReply:
        try:
            outcome = Outcome(reply.get("outcome"))
        except ValueError:
            raise BadMessage(f"unknown sudo refresh outcome {reply.get('outcome')!r}") from None
        changed, deleted = reply.get("changed"), reply.get("deleted")
        return cls(
            outcome,
            changed if isinstance(changed, int) and not isinstance(changed, bool) else 0,
            deleted if isinstance(deleted, int) and not isinstance(deleted, bool) else 0,
            str(reply.get("message") or ""),
        )
