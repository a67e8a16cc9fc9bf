"""What the InfoPipe interface offers: interfaces, methods, properties, error names.

One table describes every interface; the dispatcher checks calls against it and the
introspection XML is generated from it, so the two cannot disagree.

SSSD compatibility (SSSD's ``src/responder/ifp/ifp_iface/ifp_iface.xml``): the names,
signatures and object paths below are SSSD's. cached implements a subset:

* ``org.freedesktop.sssd.infopipe``: ``Ping``, ``GetUserAttr``, ``GetUserGroups``;
* ``org.freedesktop.sssd.infopipe.Users`` / ``.Groups``: ``FindByName``, ``FindByID``;
* ``org.freedesktop.sssd.infopipe.Users.User``: the getpwnam(3) properties, ``groups``
  and ``domainname``, and ``UpdateGroupsList`` (root only);
* ``org.freedesktop.sssd.infopipe.Groups.Group``: ``name``, ``gidNumber``, ``users``,
  and ``UpdateMemberList``.

``io.cached.Admin`` is cached's own (SSSD has no such interface; ``sss_cache`` and
``sssctl`` do this there): ``Invalidate``, ``Counters``, ``Status``. Root only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from cached.ifp.paths import BUS_NAME

IFACE_IFP = BUS_NAME
IFACE_USERS = IFACE_IFP + ".Users"
IFACE_USER = IFACE_USERS + ".User"
IFACE_GROUPS = IFACE_IFP + ".Groups"
IFACE_GROUP = IFACE_GROUPS + ".Group"
IFACE_ADMIN = "io.cached.Admin"

INTROSPECTABLE = "org.freedesktop.DBus.Introspectable"
PROPERTIES = "org.freedesktop.DBus.Properties"
PEER = "org.freedesktop.DBus.Peer"

# Error names. NotFound is SSSD's (SBUS_ERROR_NOT_FOUND, sbus_errors.c: ENOENT);
# the others are the standard ones of the D-Bus specification.
ERR_NOT_FOUND = "org.freedesktop.sssd.Error.NotFound"
ERR_ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
ERR_INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
ERR_UNKNOWN_METHOD = "org.freedesktop.DBus.Error.UnknownMethod"
ERR_UNKNOWN_OBJECT = "org.freedesktop.DBus.Error.UnknownObject"
ERR_UNKNOWN_INTERFACE = "org.freedesktop.DBus.Error.UnknownInterface"
ERR_UNKNOWN_PROPERTY = "org.freedesktop.DBus.Error.UnknownProperty"
ERR_PROPERTY_READ_ONLY = "org.freedesktop.DBus.Error.PropertyReadOnly"
ERR_LIMITS_EXCEEDED = "org.freedesktop.DBus.Error.LimitsExceeded"
ERR_FAILED = "org.freedesktop.DBus.Error.Failed"


@dataclass(frozen=True)
class Method:
    name: str
    args_in: tuple[tuple[str, str], ...] = ()  # (name, signature)
    args_out: tuple[tuple[str, str], ...] = ()
    root_only: bool = False

    @property
    def in_signature(self) -> str:
        return "".join(sig for _, sig in self.args_in)

    @property
    def out_signature(self) -> str:
        return "".join(sig for _, sig in self.args_out)


@dataclass(frozen=True)
class Interface:
    name: str
    methods: dict[str, Method] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)  # name -> signature


def _iface(iface: str, *methods: Method, **properties: str) -> Interface:
    return Interface(iface, {m.name: m for m in methods}, dict(properties))


INTERFACES: dict[str, Interface] = {
    i.name: i
    for i in (
        _iface(
            IFACE_IFP,
            Method("Ping", (("ping", "s"),), (("pong", "s"),)),
            Method("GetUserAttr", (("user", "s"), ("attr", "as")), (("values", "a{sv}"),)),
            Method("GetUserGroups", (("user", "s"),), (("values", "as"),)),
        ),
        _iface(
            IFACE_USERS,
            Method("FindByName", (("name", "s"),), (("result", "o"),)),
            Method("FindByID", (("id", "u"),), (("result", "o"),)),
        ),
        _iface(
            IFACE_USER,
            # Root only, as UpdateMemberList: it refreshes from LDAP however fresh the
            # cache is (any user could loop it, 20 searches a call).
            Method("UpdateGroupsList", root_only=True),
            name="s",
            uidNumber="u",
            gidNumber="u",
            gecos="s",
            homeDirectory="s",
            loginShell="s",
            groups="ao",
            domainname="s",
        ),
        _iface(
            IFACE_GROUPS,
            Method("FindByName", (("name", "s"),), (("result", "o"),)),
            Method("FindByID", (("id", "u"),), (("result", "o"),)),
        ),
        _iface(
            IFACE_GROUP,
            # Resolves every member to a cached user: one lookup per member, so it is
            # an administrator's tool here (SSSD: allowed_uids, root by default).
            Method("UpdateMemberList", root_only=True),
            name="s",
            gidNumber="u",
            users="ao",
        ),
        _iface(
            IFACE_ADMIN,
            Method(
                "Invalidate",
                (("kind", "s"), ("name", "s"), ("domain", "s")),
                (("matched", "u"),),
                root_only=True,
            ),
            Method("Counters", (), (("counters", "s"),), root_only=True),
            Method("Status", (), (("status", "s"),), root_only=True),
        ),
    )
}

# The standard interfaces every object here answers (the dispatcher implements them).
STANDARD_XML = """\
  <interface name="org.freedesktop.DBus.Introspectable">
    <method name="Introspect">
      <arg name="xml_data" type="s" direction="out"/>
    </method>
  </interface>
  <interface name="org.freedesktop.DBus.Peer">
    <method name="Ping"/>
    <method name="GetMachineId">
      <arg name="machine_uuid" type="s" direction="out"/>
    </method>
  </interface>
"""

PROPERTIES_XML = """\
  <interface name="org.freedesktop.DBus.Properties">
    <method name="Get">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="out"/>
    </method>
    <method name="GetAll">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="props" type="a{sv}" direction="out"/>
    </method>
    <method name="Set">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="in"/>
    </method>
  </interface>
"""

DOCTYPE = (
    '<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"\n'
    ' "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">\n'
)


def root_only(interface: str | None, member: str | None) -> bool:
    """Is this call one of the root-only methods? Without an interface field, when any
    interface's method of that name is (the service's budgets only; the dispatcher
    resolves the method and checks the caller)."""
    ifaces = INTERFACES.values() if interface is None else [INTERFACES.get(interface)]
    return any(
        (m := iface.methods.get(member or "")) is not None and m.root_only
        for iface in ifaces
        if iface is not None
    )


def interface_xml(iface: Interface) -> str:
    lines = [f"  <interface name={quoteattr(iface.name)}>"]
    for m in iface.methods.values():
        if not m.args_in and not m.args_out:
            lines.append(f"    <method name={quoteattr(m.name)}/>")
            continue
        lines.append(f"    <method name={quoteattr(m.name)}>")
        for direction, args in (("in", m.args_in), ("out", m.args_out)):
            for name, sig in args:
                lines.append(
                    f"      <arg name={quoteattr(name)} type={quoteattr(sig)}"
                    f' direction="{direction}"/>'
                )
        lines.append("    </method>")
    for name, sig in iface.properties.items():
        lines.append(f'    <property name={quoteattr(name)} type={quoteattr(sig)} access="read"/>')
    lines.append("  </interface>")
    return "\n".join(lines) + "\n"


def introspection_xml(interfaces: list[Interface], children: list[str]) -> str:
    """The Introspect answer of one object: its interfaces and its child nodes."""
    body = STANDARD_XML
    if any(i.properties for i in interfaces):
        body += PROPERTIES_XML
    body += "".join(interface_xml(i) for i in interfaces)
    body += "".join(f"  <node name={quoteattr(c)}/>\n" for c in children)
    return f"{DOCTYPE}<node>\n{body}</node>\n"
