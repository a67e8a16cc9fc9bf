"""Object paths and argument checks of the InfoPipe interface (sans-IO, no bus).

Object paths follow SSSD's InfoPipe (``src/sbus/sbus_opath.c``): a user is
``/org/freedesktop/sssd/infopipe/Users/<domain>/<uid>``, a group
``/org/freedesktop/sssd/infopipe/Groups/<domain>/<gid>``, and every component is
escaped so that it only holds ``[A-Za-z0-9]``: any other byte becomes ``_xx`` (two
lower-case hex digits) and the empty string becomes ``_``. A client that builds paths
with SSSD's rules therefore finds the same objects here.

Everything a D-Bus caller sends is hostile (docs/ARCHITECTURE.md, invariant 5): names are
checked here before they reach a lookup.
"""

from __future__ import annotations

import re

BUS_NAME = "org.freedesktop.sssd.infopipe"
IFP_PATH = "/org/freedesktop/sssd/infopipe"
USERS_PATH = IFP_PATH + "/Users"
GROUPS_PATH = IFP_PATH + "/Groups"

# The NSS protocol's own limit on names is larger, but no POSIX name is anywhere near
# 256 bytes (useradd: 32; LDAP uid values in practice < 64), and a bound keeps a
# hostile caller from making us allocate and look up megabyte strings.
MAX_NAME_BYTES = 256
# GetUserAttr: SSSD has no limit; more attribute names than this are not a real request.
MAX_ATTRS = 64
# Largest uid/gid: the D-Bus type is u (uint32), and so is the NSS protocol's.
MAX_ID = 2**32 - 1

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_COMPONENT = re.compile(r"[0-9]{1,10}")


class BadArgument(ValueError):
    """A caller's argument is unusable; the message is safe to send back."""


def check_name(value: object, what: str = "name") -> str:
    """A user or group name (or a domain, an attribute name): str, 1..256 bytes, no NUL.

    D-Bus strings are valid UTF-8 without NUL by the specification and the bus daemon
    checks that, but the check is repeated here: the bus may be a peer that does not.
    """
    if not isinstance(value, str):
        raise BadArgument(f"{what} must be a string")
    if not value:
        raise BadArgument(f"{what} is empty")
    if "\0" in value:
        raise BadArgument(f"{what} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadArgument(f"{what} is not valid UTF-8") from None
    if size > MAX_NAME_BYTES:
        raise BadArgument(f"{what} is longer than {MAX_NAME_BYTES} bytes")
    return value


def check_optional_name(value: object, what: str) -> str:
    """Like :func:`check_name`, but the empty string (meaning "any") is allowed."""
    if value == "":
        return ""
    return check_name(value, what)


def check_id(value: object, what: str = "id") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ID:
        raise BadArgument(f"{what} must be an unsigned 32-bit integer")
    return value


def check_attrs(value: object) -> list[str]:
    if not isinstance(value, list):
        raise BadArgument("attributes must be an array of strings")
    if len(value) > MAX_ATTRS:
        raise BadArgument(f"more than {MAX_ATTRS} attributes requested")
    return [check_name(a, "attribute name") for a in value]


# -- SSSD's object path escaping -----------------------------------------------------


def escape(component: str) -> str:
    """One path component, escaped as ``sbus_opath_escape`` does (bytes of UTF-8)."""
    if component == "":
        return "_"
    out = []
    for byte in component.encode("utf-8"):
        out.append(chr(byte) if byte in _SAFE else f"_{byte:02x}")
    return "".join(out)


def unescape(component: str) -> str | None:
    """The inverse of :func:`escape`; None when the component is malformed.

    SSSD takes an ``_`` not followed by two hex digits literally; a component that
    does not decode to UTF-8 cannot name anything here, so it is malformed.
    """
    if component == "_":
        return ""
    out = bytearray()
    i = 0
    while i < len(component):
        c = component[i]
        if c == "_":
            if i + 2 >= len(component):
                return None
            hexpart = component[i + 1 : i + 3]
            try:
                out.append(int(hexpart, 16))
                i += 3
                continue
            except ValueError:
                out.append(ord("_"))
                i += 1
                continue
        if not c.isascii():
            return None
        out.append(ord(c))
        i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def user_path(domain: str, uid: int) -> str:
    return f"{USERS_PATH}/{escape(domain)}/{uid}"


def group_path(domain: str, gid: int) -> str:
    return f"{GROUPS_PATH}/{escape(domain)}/{gid}"


def parse_object_path(path: str, base: str) -> tuple[str, int] | None:
    """``<base>/<domain>/<id>`` → (domain, id), or None when ``path`` is not one."""
    prefix = base + "/"
    if not path.startswith(prefix):
        return None
    parts = path[len(prefix) :].split("/")
    if len(parts) != 2 or not _ID_COMPONENT.fullmatch(parts[1]):
        return None
    domain = unescape(parts[0])
    number = int(parts[1])
    if not domain or number > MAX_ID:
        return None
    return domain, number
