"""The InfoPipe calls, without the bus: a method call in, a reply body or an error out.

``Dispatcher.call`` gets what a D-Bus method call carries (path, interface, member,
signature, body, sender) and answers ``(signature, body)`` or raises :class:`IfpError`
with a D-Bus error name. The bus glue (``service.py``) only moves messages; tests and
fuzzers can drive this class directly.

Objects are virtual, as in SSSD: a user is "exported" at
``/org/freedesktop/sssd/infopipe/Users/<domain>/<uid>`` as soon as the cache holds it,
and its properties are read from the cache when asked (SSSD reads its sysdb the same
way, without a refresh; ``FindByName``/``FindByID`` are the calls that refresh). Nothing
is registered per object, so a caller cannot make the responder grow by walking paths.

Lookups (``GetUserAttr``, ``FindBy*``, ...) go through the same flow as NSS requests,
so a D-Bus caller sees what ``getent`` sees; they are open to every caller because NSS
data is public (reference §1.9). SSSD instead refuses every InfoPipe call from uids not
in ``allowed_uids`` (default: root only); cached keeps that rule for the ``io.cached.Admin``
interface, ``UpdateMemberList`` and ``UpdateGroupsList`` (both refresh from LDAP
whatever the cache holds), enforced twice: by the bus policy
(``contrib/dbus/org.freedesktop.sssd.infopipe.conf``) and here, by asking the bus daemon
for the caller's uid.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dbus_next.signature import Variant

from cached.cache import DomainCache, GroupView
from cached.config import DomainConfig
from cached.counters import COUNTERS, IFP_DENIED, IFP_REQUEST
from cached.ifp import interfaces as i
from cached.ifp.paths import (
    GROUPS_PATH,
    IFP_PATH,
    USERS_PATH,
    BadArgument,
    check_attrs,
    check_id,
    check_name,
    check_optional_name,
    escape,
    group_path,
    parse_object_path,
    unescape,
    user_path,
)
from cached.model import User
from cached.ratelimit import RateLimitedLog
from cached.responder.admin import INVALIDATE_KINDS, Admin
from cached.responder.flow import GETGRGID, GETGRNAM, GETPWNAM, GETPWUID, INITGR, Found
from cached.responder.policy import ServePolicy

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# Stats in the one counters registry (docs/ARCHITECTURE.md, invariant 6).

# UpdateMemberList: member lookups in flight at once, so one call cannot flood the backend.
MEMBER_LOOKUP_CONCURRENCY = 8

# GetUserAttr keys, as SSSD's sysdb names them (ldb matches attribute names
# case-insensitively and answers the stored spelling; so do we).
USER_ATTRS = ("name", "uidNumber", "gidNumber", "gecos", "homeDirectory", "loginShell")
_ATTR_BY_LOWER = {a.lower(): a for a in (*USER_ATTRS, "domainname")}

CallerUid = Callable[[str | None], Awaitable[int | None]]


class IfpError(Exception):
    """A D-Bus error reply: ``name`` is the error name, the message its text."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(text)
        self.name = name
        self.text = text


def _not_found(what: str) -> IfpError:
    return IfpError(i.ERR_NOT_FOUND, f"{what} not found")


@dataclass(frozen=True)
class Target:
    """What an object path names."""

    kind: str  # node | ifp | users | groups | user | group
    interfaces: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    domain: str = ""
    number: int = 0


@dataclass
class Stats:
    calls: int = 0
    errors: int = 0
    denied: int = 0
    started: float = field(default_factory=time.time)


class Dispatcher:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.lookups = admin.lookups
        self.config = admin.lookups.config
        self.domains = {d.name: d for d in self.config.domains}
        self.stats = Stats()
        self.extra_status: Callable[[], dict[str, Any]] = dict

    @property
    def policy(self) -> ServePolicy:
        return self.lookups.policy

    # -- objects -----------------------------------------------------------------------

    def resolve(self, path: str) -> Target | None:
        """The object at ``path``, or None: ours are IFP_PATH, its ancestors and below."""
        if path == IFP_PATH:
            return Target("ifp", (i.IFACE_IFP, i.IFACE_ADMIN), ("Users", "Groups"))
        if IFP_PATH.startswith(path + "/") or path == "/":
            rest = IFP_PATH[len(path) :].lstrip("/")
            return Target("node", children=(rest.split("/")[0],))
        for base, kind, iface in (
            (USERS_PATH, "users", i.IFACE_USERS),
            (GROUPS_PATH, "groups", i.IFACE_GROUPS),
        ):
            if path == base:
                children = tuple(escape(d) for d in self.domains)
                return Target(kind, (iface,), children)
            if path.startswith(base + "/"):
                rest = path[len(base) + 1 :]
                if "/" not in rest:
                    domain = unescape(rest)
                    return Target("node") if domain in self.domains else None
                parsed = parse_object_path(path, base)
                if parsed is None or parsed[0] not in self.domains:
                    return None
                obj = "user" if kind == "users" else "group"
                obj_iface = i.IFACE_USER if obj == "user" else i.IFACE_GROUP
                return Target(obj, (obj_iface,), domain=parsed[0], number=parsed[1])
        return None

    # -- entry point -------------------------------------------------------------------

    async def call(
        self,
        path: str,
        interface: str | None,
        member: str,
        signature: str,
        body: list[Any],
        sender: str | None,
        caller_uid: CallerUid,
    ) -> tuple[str, list[Any]]:
        """Answer one method call; ``caller_uid(sender)`` asks the bus for a uid."""
        start = time.perf_counter()
        self.stats.calls += 1
        try:
            return await self._call(path, interface, member, signature, body, sender, caller_uid)
        except IfpError:
            self.stats.errors += 1
            raise
        finally:
            COUNTERS.add(IFP_REQUEST, 1, time.perf_counter() - start)

    async def _call(
        self,
        path: str,
        interface: str | None,
        member: str,
        signature: str,
        body: list[Any],
        sender: str | None,
        caller_uid: CallerUid,
    ) -> tuple[str, list[Any]]:
        target = self.resolve(path)
        if target is None:
            raise IfpError(i.ERR_UNKNOWN_OBJECT, f"no object at {path}")
        standard = {
            i.INTROSPECTABLE: {"Introspect": ""},
            i.PROPERTIES: {"Get": "ss", "GetAll": "s", "Set": "ssv"},
        }
        if interface is None:
            interface = self._interface_of(target, member, standard)
        if interface in standard:
            expected = standard[interface].get(member)
            if expected is None or (interface == i.PROPERTIES and target.kind == "node"):
                raise IfpError(i.ERR_UNKNOWN_METHOD, f"no method {interface}.{member}")
            if signature != expected:
                raise IfpError(
                    i.ERR_INVALID_ARGS, f"{member} takes signature '{expected}', not '{signature}'"
                )
            if interface == i.INTROSPECTABLE:
                return "s", [self._introspect(target)]
            return await self._properties(target, member, body)
        if interface not in target.interfaces:
            raise IfpError(i.ERR_UNKNOWN_INTERFACE, f"{path} has no interface {interface}")
        method = i.INTERFACES[interface].methods.get(member)
        if method is None:
            raise IfpError(i.ERR_UNKNOWN_METHOD, f"no method {interface}.{member}")
        if signature != method.in_signature:
            raise IfpError(
                i.ERR_INVALID_ARGS,
                f"{member} takes signature '{method.in_signature}', not '{signature}'",
            )
        if method.root_only:
            await self._require_root(caller_uid, sender, f"{interface}.{member}")
        handler = getattr(self, f"_{target.kind}_{member}")
        try:
            out = await handler(target, *body)
        except BadArgument as e:
            raise IfpError(i.ERR_INVALID_ARGS, str(e)) from None
        return method.out_signature, out

    def _interface_of(
        self, target: Target, member: str, standard: dict[str, dict[str, str]]
    ) -> str:
        """A call without an interface field: the one interface that has ``member``."""
        owners = [n for n in target.interfaces if member in i.INTERFACES[n].methods]
        owners += [n for n, members in standard.items() if member in members]
        if len(owners) != 1:
            raise IfpError(
                i.ERR_UNKNOWN_METHOD, f"no unambiguous method {member}; name the interface"
            )
        return owners[0]

    async def _require_root(self, caller_uid: CallerUid, sender: str | None, what: str) -> None:
        uid = await caller_uid(sender)
        if uid != 0:
            raise self.refusal(what, sender, uid)

    def refusal(self, what: str, sender: str | None, uid: int | None) -> IfpError:
        """The answer to a root-only method ``what`` (interface.member) called by
        another uid, counted and logged (at most a line a minute per uid: any user can
        loop these)."""
        self.stats.denied += 1
        COUNTERS.add(IFP_DENIED)
        limited.log(("denied", uid), logging.INFO, "refused %s to D-Bus caller %s (uid %s)",
                    what, sender, uid)  # fmt: skip
        return IfpError(i.ERR_ACCESS_DENIED, f"{what} is allowed to root only")

    # -- introspection and properties --------------------------------------------------

    def _introspect(self, target: Target) -> str:
        interfaces = [i.INTERFACES[n] for n in target.interfaces]
        return i.introspection_xml(interfaces, list(target.children))

    async def _properties(
        self, target: Target, member: str, body: list[Any]
    ) -> tuple[str, list[Any]]:
        iface_name = body[0]
        if not isinstance(iface_name, str) or len(iface_name) > 256:
            raise IfpError(i.ERR_INVALID_ARGS, "interface name must be a short string")
        if member == "GetAll":
            names = [iface_name] if iface_name else list(target.interfaces)
            for n in names:
                if n not in target.interfaces:
                    raise IfpError(i.ERR_UNKNOWN_INTERFACE, f"no interface {n}")
            props = [p for n in names for p in i.INTERFACES[n].properties]
            values = await self._property_values(target, props) if props else {}
            return "a{sv}", [values]
        prop = body[1]
        if not isinstance(prop, str) or len(prop) > 256:
            raise IfpError(i.ERR_INVALID_ARGS, "property name must be a short string")
        candidates = [iface_name] if iface_name else list(target.interfaces)
        owner = next(
            (
                n
                for n in candidates
                if n in target.interfaces and prop in i.INTERFACES[n].properties
            ),
            None,
        )
        if owner is None:
            if iface_name and iface_name not in target.interfaces:
                raise IfpError(i.ERR_UNKNOWN_INTERFACE, f"no interface {iface_name}")
            raise IfpError(i.ERR_UNKNOWN_PROPERTY, f"no property {prop}")
        if member == "Set":
            raise IfpError(i.ERR_PROPERTY_READ_ONLY, f"property {prop} is read-only")
        values = await self._property_values(target, [prop])
        return "v", [values[prop]]

    async def _property_values(self, target: Target, props: list[str]) -> dict[str, Variant]:
        dom = self.domains[target.domain]
        cache = self.lookups.caches[dom.name]
        if target.kind == "user":
            user = self._cached_user(dom, cache, target.number)
            return {p: await self._user_property(dom, user, p) for p in props}
        group = self._cached_group(dom, cache, target.number)
        return {p: self._group_property(dom, cache, group, p) for p in props}

    def _cached_user(self, dom: DomainConfig, cache: DomainCache, uid: int) -> User:
        user = cache.user_by_uid(uid).value if dom.id_in_range(uid) else None
        if user is None or not self.lookups.servable(GETPWUID, dom, user):
            raise _not_found("User")
        return user

    def _cached_group(self, dom: DomainConfig, cache: DomainCache, gid: int) -> GroupView:
        group = cache.group_by_gid(gid).value if dom.id_in_range(gid) else None
        if group is None or not self.lookups.servable(GETGRGID, dom, group):
            raise _not_found("Group")
        return group

    async def _user_property(self, dom: DomainConfig, user: User, prop: str) -> Variant:
        if prop == "groups":
            return Variant("ao", await self._user_group_paths(dom, user))
        out = self.policy.output_user(dom, user)
        values: dict[str, str | int] = {
            "name": out.name,
            "uidNumber": out.uid,
            "gidNumber": out.gid,
            "gecos": out.gecos,
            "homeDirectory": out.home,
            "loginShell": out.shell,
            "domainname": dom.name,
        }
        return Variant(i.INTERFACES[i.IFACE_USER].properties[prop], values[prop])

    async def _user_group_paths(self, dom: DomainConfig, user: User) -> list[str]:
        """The user's groups (primary first), as ``id`` gets them: the initgroups flow,
        without a filtered primary group."""
        drop = self.policy.filtered_gids(dom, self.lookups.caches[dom.name])
        gids = await self.admin.user_gids(user)
        return [group_path(dom.name, g) for g in gids if g not in drop]

    def _group_property(
        self, dom: DomainConfig, cache: DomainCache, group: GroupView, prop: str
    ) -> Variant:
        if prop == "name":
            return Variant("s", self.policy.output_name(dom, group.name))
        if prop == "gidNumber":
            return Variant("u", group.gid)
        # users: the members the cache knows as users. SSSD lists resolved members only
        # too (unresolved "ghost" members appear after UpdateMemberList).
        paths = []
        if not dom.ignore_group_members:
            for name in self.policy.member_names(dom, group):
                user = cache.user_by_name(name).value
                if user is not None:
                    paths.append(user_path(dom.name, user.uid))
        return Variant("ao", paths)

    # -- org.freedesktop.sssd.infopipe ---------------------------------------------------

    async def _ifp_Ping(self, target: Target, ping: str) -> list[Any]:
        # SSSD: only "ping" (any case) is a valid argument.
        if not isinstance(ping, str) or ping.lower() != "ping":
            raise BadArgument("Ping() only accepts ping as a param")
        return ["PONG"]

    @staticmethod
    def _user_found(found: Found[User] | None) -> Found[User]:
        if found is None:
            raise _not_found("User")
        return found

    async def _ifp_GetUserAttr(self, target: Target, user: str, attrs: list[str]) -> list[Any]:
        name = check_name(user, "user")
        wanted = check_attrs(attrs)
        found = self._user_found(await self.lookups.lookup(GETPWNAM, name))
        u = self.policy.output_user(found.domain, found.value)
        values = {
            "name": u.name,
            "uidNumber": str(u.uid),
            "gidNumber": str(u.gid),
            "gecos": u.gecos,
            "homeDirectory": u.home,
            "loginShell": u.shell,
            "domainname": found.domain.name,
        }
        out: dict[str, Variant] = {}
        for attr in wanted:
            key = _ATTR_BY_LOWER.get(attr.lower())
            # SSSD leaves out attributes it does not have or that have no value, and
            # sends every value as an array of strings (ifp_add_ldb_el_to_dict).
            if key is None or key in out or not values[key]:
                continue
            out[key] = Variant("as", [values[key]])
        return [out]

    async def _ifp_GetUserGroups(self, target: Target, user: str) -> list[Any]:
        found = self._user_found(await self.lookups.lookup(GETPWNAM, check_name(user, "user")))
        return [await self.admin.user_groups(found.value)]

    # -- io.cached.Admin ---------------------------------------------------------------

    async def _ifp_Invalidate(self, target: Target, kind: str, name: str, domain: str) -> list[Any]:
        kind = check_name(kind, "kind")
        if kind not in INVALIDATE_KINDS:
            raise BadArgument(f"kind must be one of {', '.join(INVALIDATE_KINDS)}")
        name = check_optional_name(name, "name")
        if kind in ("user", "group") and not name:
            raise BadArgument(f"kind {kind!r} needs a name")
        if kind not in ("user", "group") and name:
            raise BadArgument(f"kind {kind!r} takes no name; pass an empty string")
        domain = check_optional_name(domain, "domain")
        if domain and domain not in self.domains:
            raise BadArgument(f"no domain named {domain!r}; configured: {', '.join(self.domains)}")
        matched = self.admin.invalidate(kind, name, domain)
        log.info(
            "D-Bus: invalidated %s %r in %s: %d matched",
            kind, name, domain or "all domains", matched,
        )  # fmt: skip
        return [min(matched, 2**32 - 1)]

    async def _ifp_Counters(self, target: Target) -> list[Any]:
        return [json.dumps(self.admin.counters().fields(), sort_keys=True, default=str)]

    async def _ifp_Status(self, target: Target) -> list[Any]:
        status = dict(self.admin.status())
        status["dbus"] = {
            "calls": self.stats.calls,
            "errors": self.stats.errors,
            "denied": self.stats.denied,
            "started": self.stats.started,
            **self.extra_status(),
        }
        return [json.dumps(status, sort_keys=True, default=str)]

    # -- org.freedesktop.sssd.infopipe.Users / .Groups ---------------------------------

    async def _users_FindByName(self, target: Target, name: str) -> list[Any]:
        found = self._user_found(await self.lookups.lookup(GETPWNAM, check_name(name)))
        return [user_path(found.domain.name, found.value.uid)]

    async def _users_FindByID(self, target: Target, uid: int) -> list[Any]:
        found = self._user_found(await self.lookups.lookup(GETPWUID, check_id(uid, "id")))
        return [user_path(found.domain.name, found.value.uid)]

    @staticmethod
    def _group_found(found: Found[GroupView] | None) -> Found[GroupView]:
        if found is None:
            raise _not_found("Group")
        return found

    async def _groups_FindByName(self, target: Target, name: str) -> list[Any]:
        found = self._group_found(await self.lookups.lookup(GETGRNAM, check_name(name)))
        return [group_path(found.domain.name, found.value.gid)]

    async def _groups_FindByID(self, target: Target, gid: int) -> list[Any]:
        found = self._group_found(await self.lookups.lookup(GETGRGID, check_id(gid, "id")))
        return [group_path(found.domain.name, found.value.gid)]

    # -- objects' methods --------------------------------------------------------------

    async def _user_UpdateGroupsList(self, target: Target) -> list[Any]:
        """Fetch the user's groups from the server now (SSSD: an initgroups refresh)."""
        dom = self.domains[target.domain]
        user = self._cached_user(dom, self.lookups.caches[dom.name], target.number)
        await self.lookups.refresh(dom.name, INITGR.backend_op, user.name)
        return []

    async def _group_UpdateMemberList(self, target: Target) -> list[Any]:
        """Refresh the group, then look up every member the cache does not know yet."""
        dom = self.domains[target.domain]
        cache = self.lookups.caches[dom.name]
        await self.lookups.refresh(dom.name, GETGRGID.backend_op, target.number)
        group = self._cached_group(dom, cache, target.number)
        missing = [
            n for n in self.policy.member_names(dom, group) if cache.user_by_name(n).value is None
        ]
        gate = asyncio.Semaphore(MEMBER_LOOKUP_CONCURRENCY)

        async def one(name: str) -> None:
            async with gate:
                await self.lookups.lookup(GETPWNAM, name)

        await asyncio.gather(*(one(n) for n in missing))
        return []
