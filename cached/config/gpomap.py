"""GPO-based access control's closed sets and its PAM service map (sssd-ad(5)
``ad_gpo_access_control``, ``ad_gpo_map_*``, ``ad_gpo_default_right``), as SSSD 2.8.2's
``ad_gpo.c`` defines them: the options parse with these, and the backend's GPO engine
(cached/ldap/gpo.py) maps a login's PAM service to the logon right it evaluates."""

from __future__ import annotations

import enum
from collections.abc import Mapping


class GpoMode(enum.StrEnum):
    """``ad_gpo_access_control``."""

    DISABLED = "disabled"
    ENFORCING = "enforcing"
    PERMISSIVE = "permissive"


class GpoRight(enum.StrEnum):
    """The logon rights of a GPO's ``[Privilege Rights]`` SSSD evaluates, by the
    ``ad_gpo_map_*`` option mapping PAM services to each; ``permit`` and ``deny`` are
    no right (the service is always allowed, or always denied)."""

    INTERACTIVE = "interactive"
    REMOTE_INTERACTIVE = "remote_interactive"
    NETWORK = "network"
    BATCH = "batch"
    SERVICE = "service"
    PERMIT = "permit"
    DENY = "deny"


# SSSD's default PAM service lists (ad_gpo.c gpo_map_*_defaults; "crond" is the cron
# service name of SSSD's Linux builds).
DEFAULT_MAPS: dict[GpoRight, tuple[str, ...]] = {
    GpoRight.INTERACTIVE: (
        "login", "su", "su-l", "gdm-fingerprint", "gdm-password", "gdm-smartcard", "kdm",
        "lightdm", "lxdm", "sddm", "unity", "xdm",
    ),
    GpoRight.REMOTE_INTERACTIVE: ("sshd", "cockpit"),
    GpoRight.NETWORK: ("ftp", "samba"),
    GpoRight.BATCH: ("crond",),
    GpoRight.SERVICE: (),
    GpoRight.PERMIT: ("polkit-1", "sudo", "sudo-i", "systemd-user"),
    GpoRight.DENY: (),
}  # fmt: skip


def map_items(raw: str) -> list[str]:
    """An ``ad_gpo_map_*`` value: a comma list of ``+service`` and ``-service``
    (SSSD refuses any other item)."""
    items = [i.strip() for i in raw.split(",") if i.strip()]
    for item in items:
        if item[0] not in "+-" or not item[1:].strip():
            raise ValueError(f"{item!r}: each item must be +service (added) or -service (removed)")
    return items


def service_table(maps: Mapping[GpoRight, list[str]]) -> dict[str, GpoRight]:
    """PAM service (lower-cased) -> right, from each right's option items over SSSD's
    defaults (``ad_gpo_parse_map_option``): a ``-service`` removes it from that right's
    list, defaults included; a service in two rights' lists is a ValueError."""
    table: dict[str, GpoRight] = {}
    for right in GpoRight:
        items = maps.get(right, [])
        removed = {i[1:].strip().lower() for i in items if i.startswith("-")}
        added = [i[1:].strip().lower() for i in items if i.startswith("+")]
        for service in [*added, *(s.lower() for s in DEFAULT_MAPS[right])]:
            if service in removed:
                continue
            other = table.setdefault(service, right)
            if other != right:
                raise ValueError(
                    f"PAM service {service!r} is mapped to both {other.value} and "
                    f"{right.value}: remove it from one with -{service} (sssd-ad(5))"
                )
    return table
