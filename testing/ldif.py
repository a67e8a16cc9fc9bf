"""Hand-written LDIF entries for tests that need shapes the generator never makes
(hostile names and ids, non-UTF-8 values, huge or cyclic groups) under the generated
directories' base (testing/gendir.py writes the regular ones)."""

from __future__ import annotations

import base64

BASE = "dc=example,dc=test"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def user_entry(dn: str, uid: int, gid: int, *names: str, extra: str = "") -> str:
    lines = [f"dn: {dn}", "objectClass: top", "objectClass: inetOrgPerson",
             "objectClass: posixAccount", "sn: x", "cn: x"]  # fmt: skip
    lines += [f"uid: {n}" if n.isprintable() and n.isascii() else f"uid:: {b64(n.encode())}"
              for n in names]  # fmt: skip
    lines += [f"uidNumber: {uid}", f"gidNumber: {gid}", "homeDirectory: /home/x"]
    return "\n".join(lines) + ("\n" + extra if extra else "") + "\n"


def minimal_user(dn: str, name: str, uid: int) -> str:
    """The fewest attributes a POSIX user needs: slapadd loads 50,000 of them quickly
    (big groups need real member entries: a member naming nothing is no member,
    docs/compatibility.md §9.5)."""
    return (
        f"dn: {dn}\nobjectClass: account\nobjectClass: posixAccount\nuid: {name}\n"
        f"cn: {name}\nuidNumber: {uid}\ngidNumber: 10000\nhomeDirectory: /h\n"
    )


def group_entry(
    dn: str, name: str, gid: int | str, members: list[str], attr: str = "member"
) -> str:
    oc = "groupOfNames" if members and attr == "member" else "namedObject"
    lines = [f"dn: {dn}", "objectClass: top", f"objectClass: {oc}", "objectClass: posixGroup",
             f"cn: {name}", f"gidNumber: {gid}"]  # fmt: skip
    for m in members:
        safe = m.isprintable() and m.isascii()
        lines.append(f"{attr}: {m}" if safe else f"{attr}:: {b64(m.encode())}")
    return "\n".join(lines) + "\n"
