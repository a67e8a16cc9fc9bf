"""Which cached sudo rules a user gets, and how they are sent: SSSD 2.8.2's sudo
responder (``src/responder/sudo/sudosrv_get_sudorules.c``, ``src/db/sysdb_sudo.c``),
pure: rules and the user in, the rules of the reply out.

GET_SUDORULES answers two sets, concatenated and then sorted by ``sudoOrder``:

* the rules one of whose ``sudoUser`` values is ``ALL``, the user's name, ``#uid``
  (not for uid 0), or ``%group`` for a group the user is in (initgroups, nesting
  included, and the primary group). Each is sent without its ``sudoUser`` values and
  with ``sudoUser: #<uid the client sent>`` instead, so sudo matches it for this user
  whatever else the rule listed — a negation (``!alice``) beside ``ALL`` is lost, as in
  SSSD. ``%#gid`` and ``%:group`` are never matched here: SSSD's filter has no term for
  them, so a rule reached only through one of them is not sent.
* the rules with a ``+netgroup`` value that the first set lacks, sent whole: sudo
  asks ``innetgr()`` itself.

User and group names in ``sudoUser`` are compared qualified, as SSSD stores them
(``sdap_sudo_qualify_names``): ``name`` and ``name@<this domain>`` (any case of the
domain) are the same user, ``name@other`` is not, and a value with two ``@`` is
dropped. With ``case_sensitive = false`` names compare without case. Rules of equal
``sudoOrder`` keep the cache's order (by name). A rule's attributes are sent sorted by
name without regard to case, as SSSD 2.8.2 sends them, the replacing ``sudoUser`` last.
With ``sudo_inverse_order`` the lowest ``sudoOrder`` comes first, else the highest.
With ``sudo_timed`` a rule outside its ``sudoNotBefore``/``sudoNotAfter`` window (the
earliest and the latest, when several) or with a time that does not parse is left out.

GET_DEFAULTS answers the rule named ``defaults``, whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cached.gentime import TimeForm, generalized_time
from cached.model import SudoRule
from cached.sudo.protocol import Rule

#: The value of objectClass every stored rule carries (sysdb's ``sudoRule``).
RULE_CLASS = "sudoRule"
#: The attributes a user rule is sent with (``sudosrv_cached_rules_by_user``):
#: everything but sudoUser.
_SENT = frozenset(
    {"cn", "sudoHost", "sudoCommand", "sudoOption", "sudoRunAs", "sudoRunAsUser",
     "sudoRunAsGroup", "sudoNotBefore", "sudoNotAfter", "sudoOrder"}
)  # fmt: skip
_RUNAS = ("sudoRunAs", "sudoRunAsUser", "sudoRunAsGroup")
DEFAULTS = "defaults"


@dataclass(frozen=True, slots=True)
class SudoUser:
    """Who asks: the stored user's name, its uid, the names of its groups (the
    primary one included), and the domain."""

    name: str
    uid: int
    groups: tuple[str, ...]
    domain: str
    case_sensitive: bool = True


def is_user_or_group_name(value: str) -> bool:
    """SSSD's ``is_user_or_group_name``: a name to qualify, not ALL, ``#uid``,
    ``+netgroup``, ``%#gid``, ``%:group`` or empty."""
    if value == "ALL" or not value or value[0] in "#+":
        return False
    return not (value[0] == "%" and (len(value) == 1 or value[1] in "#:"))


def qualify(value: str, domain: str) -> str | None:
    """A ``sudoUser`` value as SSSD stores it: names as ``name@domain`` with the domain
    in lower case (``sss_create_internal_fqname``); None for a name the default
    ``re_expression`` cannot split (two ``@``), which SSSD drops."""
    if not is_user_or_group_name(value):
        return value
    name, at, dom = value.partition("@")
    if not name or "@" in dom:
        return None
    return f"{name}@{(dom if at else domain).lower()}"


def _keys(user: SudoUser) -> set[str]:
    """The stored values that select a rule for ``user`` (``sysdb_sudo_filter_userinfo``)."""
    d = user.domain.lower()
    keys = {"ALL", f"{user.name}@{d}"}
    if user.uid != 0:
        keys.add(f"#{user.uid}")
    keys.update(f"%{g}@{d}" for g in user.groups)
    return keys if user.case_sensitive else {k.lower() for k in keys}


def _user_values(rule: SudoRule, domain: str, fold: bool) -> list[str]:
    out = []
    for v in rule.get("sudoUser"):
        q = qualify(v, domain)
        if q is not None and q not in out:
            out.append(q.lower() if fold else q)
    return out


def _order(rule: SudoRule) -> int:
    """sudoOrder as SSSD reads it (a uint32; absent or unreadable: 0)."""
    values = rule.get("sudoOrder")
    if not values:
        return 0
    try:
        n = int(values[0])
    except ValueError:
        return 0
    return n if 0 <= n <= 0xFFFFFFFF else 0


def _runas(values: Sequence[str], domain: str) -> tuple[str, ...]:
    """sudoRunAs* values qualified with this domain are sent short
    (``sudosrv_format_runas``: the output name of a domain without fully qualified
    names); the others as stored."""
    out = []
    for v in values:
        name, at, dom = v.partition("@")
        out.append(name if at and dom.lower() == domain.lower() and "@" not in dom else v)
    return tuple(out)


def _attrs(rule: SudoRule, domain: str, *, with_users: bool) -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for name, values in rule.attrs:
        if name == "sudoUser":
            if with_users:
                out.append((name, tuple(_user_values(rule, domain, False))))
            continue
        if name not in _SENT:
            continue
        out.append((name, _runas(values, domain) if name in _RUNAS else values))
    out.append(("objectClass", (RULE_CLASS,)))
    # In the order SSSD 2.8.2 answers them (measured: by name, without regard to case).
    out.sort(key=lambda a: a[0].lower())
    return out


def matching(rules: Iterable[SudoRule], user: SudoUser) -> tuple[list[SudoRule], list[SudoRule]]:
    """The rules selected for ``user`` by a sudoUser value, and the netgroup rules
    (``+netgroup`` values, none selecting the user): SSSD's two cache searches."""
    keys = _keys(user)
    fold = not user.case_sensitive
    picked: list[SudoRule] = []
    netgroup: list[SudoRule] = []
    for rule in rules:
        values = _user_values(rule, user.domain, fold)
        if any(v in keys for v in values):
            picked.append(rule)
        elif any(v.startswith("+") for v in values):
            netgroup.append(rule)
    return picked, netgroup


def rules_for(
    rules: Iterable[SudoRule],
    user: SudoUser,
    client_uid: int,
    *,
    inverse_order: bool = False,
    timed: bool = False,
    now: float = 0.0,
) -> list[Rule]:
    """The reply's rules for GET_SUDORULES (see the module's doc)."""
    if timed:
        rules = [rule for rule in rules if in_time(rule, now)]
    picked, netgroup = matching(rules, user)
    both: list[tuple[int, Rule]] = []
    for rule in picked:
        attrs = _attrs(rule, user.domain, with_users=False)
        attrs.append(("sudoUser", (f"#{client_uid}",)))
        both.append((_order(rule), attrs))
    both += [(_order(rule), _attrs(rule, user.domain, with_users=True)) for rule in netgroup]
    both.sort(key=lambda p: p[0] if inverse_order else -p[0])
    return [r for _, r in both]


def defaults_of(rules: Iterable[SudoRule], domain: str, *, timed: bool = False,
                now: float = 0.0) -> list[Rule]:  # fmt: skip
    """The reply's rules for GET_DEFAULTS: the rule named ``defaults``."""
    return [
        _attrs(r, domain, with_users=True)
        for r in rules
        if r.name == DEFAULTS and (not timed or in_time(r, now))
    ]


# -- sudoNotBefore / sudoNotAfter (sysdb_sudo_convert_time) -------------------------

def parse_time(text: str) -> float | None:
    """A generalized time as SSSD reads it (YYYYMMDDHH[MM[SS]][.0|,0](Z|+HHMM|-HHMM),
    the formats it tries with strptime); None when it does not parse."""
    return generalized_time(text, TimeForm.SUDO)


def in_time(rule: SudoRule, now: float) -> bool:
    """Whether ``rule`` applies at ``now`` (``sysdb_sudo_check_time``): the earliest
    sudoNotBefore, the latest sudoNotAfter; a value that does not parse excludes it."""
    before: float | None = None
    after: float | None = None
    for v in rule.get("sudoNotBefore"):
        t = parse_time(v)
        if t is None:
            return False
        before = t if before is None else min(before, t)
    for v in rule.get("sudoNotAfter"):
        t = parse_time(v)
        if t is None:
            return False
        after = t if after is None else max(after, t)
    return (before is None or now >= before) and (after is None or now <= after)
