"""``access_provider = simple`` (sssd-simple(5); SSSD 2.8.2 ``simple_access.c``,
``simple_access_check.c``), over a user's name and the names of all the groups the
user is in: the resolved ones, nesting included, and the primary group.

* No allow list set: everyone is allowed unless denied. Any allow list set: only the
  users it names and the members of the groups it names.
* A deny match always wins (a denied user, or a member of a denied group).
* Names are compared as SSSD compares them: each list entry is ``name`` or
  ``name@DOMAIN`` (SSSD's default re_expression); both stand for ``name`` in this
  domain, compared exactly with ``case_sensitive = true``, case-insensitively
  otherwise. A name nobody has simply matches nobody.
* An entry SSSD cannot parse, or one qualified with another domain's name, makes SSSD
  refuse the lists, and then deny everyone ("Failed to refresh filter lists, denying
  all access"): so does this (:attr:`SimpleRules.broken`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# SSSD's default re_expression for a domain (sssd.conf(5)); cached refuses any other.
_NAME_RE = re.compile(r"(?P<name>[^@]+)@?(?P<domain>[^@]*$)")


def _fold(name: str, case_sensitive: bool) -> str:
    return name if case_sensitive else name.casefold()


@dataclass(frozen=True, slots=True)
class SimpleRules:
    allow_users: frozenset[str]
    deny_users: frozenset[str]
    allow_groups: frozenset[str]
    deny_groups: frozenset[str]
    case_sensitive: bool
    # Why the lists cannot be used (then everyone is denied); "" when they can.
    broken: str = ""

    @classmethod
    def parse(
        cls,
        domain: str,
        lists: tuple[list[str], list[str], list[str], list[str]],
        case_sensitive: bool,
    ) -> SimpleRules:
        """From ``simple_allow_users``, ``simple_deny_users``, ``simple_allow_groups``
        and ``simple_deny_groups`` of ``domain``."""
        parsed: list[frozenset[str]] = []
        broken = ""
        for entries in lists:
            names = set()
            for entry in entries:
                m = _NAME_RE.match(entry)
                if m is None:
                    broken = broken or f"{entry!r} is not a name or name@DOMAIN"
                    continue
                dom = m.group("domain")
                if dom and dom.casefold() != domain.casefold():
                    broken = broken or f"{entry!r} names a domain other than {domain}"
                    continue
                names.add(_fold(m.group("name"), case_sensitive))
            parsed.append(frozenset(names))
        au, du, ag, dg = parsed
        # "Set" is SSSD's: a list option present with entries (an empty value is unset).
        return cls(au, du, ag, dg, case_sensitive, broken)

    @property
    def needs_groups(self) -> bool:
        """Whether the decision can depend on the user's groups."""
        return bool(self.allow_groups or self.deny_groups)

    def allows(self, user: str, groups: Iterable[str] = ()) -> bool:
        """Whether ``user``, a member of ``groups`` (every one: nested and primary
        included), may log in."""
        if self.broken:
            return False
        name = _fold(user, self.case_sensitive)
        if name in self.deny_users:
            return False
        allowed = (not self.allow_users and not self.allow_groups) or name in self.allow_users
        if not self.needs_groups:
            return allowed
        mine = {_fold(g, self.case_sensitive) for g in groups}
        if mine & self.deny_groups:
            return False
        return allowed or bool(mine & self.allow_groups)
