"""A netgroup by name (SSSD 2.8.2's ``sdap_async_netgroups.c`` and sysdb's triple
parser): one search under the netgroup bases for the netgroup's name, triples and
member values, then the members named.

* A triple value is parsed as SSSD's ``sysdb_netgr_split_triple`` parses it:
  ``(host,user,domain)``, blanks around each field and the parentheses dropped, an
  empty field kept empty ("any"); a value it cannot parse is left out.
* A member value that is a DN names the netgroup entry at that DN (a base search
  for its name, only when the DN lies in a netgroup search base); any other value is a
  netgroup name as it is. Names first, in the server's order, then the netgroups
  named by DN.
* Nested netgroups are not expanded: SETNETGRENT answers a netgroup's own triples and
  the names of its member netgroups, and glibc asks for those in turn, keeping the
  names it has seen, so a cycle ends there (as with SSSD).
"""

from __future__ import annotations

import logging
import re
from typing import Final

from cached.dn import in_scope, normalize_dn
from cached.ldap.batch import Searcher
from cached.ldap.schema import SchemaMap, escape, first
from cached.model import Netgroup
from cached.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

# The start of a DN's first RDN: an attribute type (a name or an OID) and "=": what
# makes ldap_str2dn accept a value SSSD's is_dn() tries (a plain name has no "=").
_DN_START: Final = re.compile(r"\s*(?:[A-Za-z][A-Za-z0-9-]*|\d+(?:\.\d+)+)\s*=")


def is_dn(value: str) -> bool:
    return _DN_START.match(value) is not None


def _field(text: str, pos: int, delimiter: str) -> tuple[str, int] | None:
    end = text.find(delimiter, pos)
    if end < 0:
        return None
    return text[pos:end].strip(), end + 1


def parse_triple(value: str) -> tuple[str, str, str] | None:
    """``(host,user,domain)`` as SSSD splits it; None when it does not parse."""
    text = value.lstrip()
    if not text.startswith("("):
        return None
    fields = []
    pos = 1
    for delimiter in (",", ",", ")"):
        got = _field(text, pos, delimiter)
        if got is None:
            return None
        field, pos = got
        fields.append(field)
    if text[pos:].strip():
        return None
    return fields[0], fields[1], fields[2]


def netgroup_attrs(s: SchemaMap) -> list[str]:
    return [s.netgroup_name, s.netgroup_triple, s.netgroup_member, s.netgroup_modstamp]


def fetch(searcher: Searcher, s: SchemaMap, name: str) -> tuple[Netgroup | None, str]:
    """The netgroup ``name`` and its modifyTimestamp; (None, "") when the directory has
    none."""
    filt = f"(&(objectClass={s.netgroup_oc})({s.netgroup_name}={escape(name)}))"
    entries = searcher.search(s.netgroup_bases, filt, netgroup_attrs(s))
    entry = next(
        (e for e in entries if any(v.decode("utf-8", "replace") == name
                                   for v in e.get(s.netgroup_name))),
        entries[0] if entries else None,
    )  # fmt: skip
    if entry is None:
        return None, ""
    triples = []
    for raw in entry.get(s.netgroup_triple):
        triple = parse_triple(raw.decode("utf-8", "replace"))
        if triple is None:
            limited.log(("triple", entry.dn), logging.INFO,
                        "netgroup %s: cannot split the triple %r; left out",
                        name, raw[:200])  # fmt: skip
            continue
        triples.append(triple)
    members: list[str] = []
    dns: list[str] = []
    for raw in entry.get(s.netgroup_member):
        value = raw.decode("utf-8", "replace")
        if not value or "\0" in value:
            continue
        (dns if is_dn(value) else members).append(value)
    bases = [(normalize_dn(b.dn), b.scope) for b in s.netgroup_bases]
    for dn in dns:
        if not any(in_scope(normalize_dn(dn), key, scope) for key, scope in bases):
            continue  # as SSSD: a member outside the netgroup bases is skipped
        for e in searcher.ctx.client.search(
            dn, f"(objectClass={s.netgroup_oc})", [s.netgroup_name], scope="base"
        ):
            member = first(e.get(s.netgroup_name))
            if member:
                members.append(member)
    found_name = first(entry.get(s.netgroup_name)) or name
    ng = Netgroup(found_name, entry.dn, tuple(triples), tuple(members))
    return ng, first(entry.get(s.netgroup_modstamp))
