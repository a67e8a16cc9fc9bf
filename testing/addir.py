"""A small Active Directory for tests, with its expected answers by construction.

The shapes ``ldap_schema = ad`` must get right (docs/sssd-reference.md §6.5 and the AD
work), each present once:

* users named ``CN=<Full Name>`` with ``sAMAccountName`` as the login name and rfc2307
  attributes (``uidNumber``, ``gidNumber``, ``unixHomeDirectory``, ``loginShell``);
* a user without POSIX attributes (ignored unless ID mapping is on);
* the primary group by ``primaryGroupID`` (513, Domain Users, given ``gidNumber``);
* nested groups (``team`` ⊃ ``eng`` ⊃ alice), and a group without ``gidNumber``
  between POSIX groups (``staff`` ⊃ ``nonposix`` ⊃ carol): walked through, not listed;
* a group of more than 1,500 members, the size where Windows DCs force ranged retrieval
  (``member;range=0-1499``, MaxValRange); Samba serves ranges when asked;
* a distribution group (``groupType`` without the security bit) with a ``gidNumber``
  and a member: no POSIX group in SSSD ("Only security groups from AD are considered
  for POSIX groups"), nor in tokenGroups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testing.addc import BASE_DN, ADEntry

PEOPLE = f"OU=people,{BASE_DN}"
GROUPS = f"OU=groups,{BASE_DN}"
DOMAIN_USERS = f"CN=Domain Users,CN=Users,{BASE_DN}"
DOMAIN_USERS_GID = 10000
#: Windows' MaxValRange default: more members than this come in ranges.
MAX_VAL_RANGE = 1500
#: The distribution group's name (bob its member): never a POSIX group.
DISTRIBUTION = "announce"


@dataclass
class ADDirectory:
    entries: list[ADEntry]
    modify: list[ADEntry]
    #: login name -> (uid, primary gid, home, shell, gecos)
    passwd: dict[str, tuple[int, int, str, str, str]] = field(default_factory=dict)
    #: group name -> (gid, sorted member login names, transitive)
    groups: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    #: login name -> sorted names of every POSIX group, primary included
    initgroups: dict[str, list[str]] = field(default_factory=dict)
    #: login names without POSIX attributes
    non_posix_users: list[str] = field(default_factory=list)


def _rdn_value(v: str) -> str:
    """Escape an RDN value (RFC 4514 §2.4): "Carol Smith, Jr." is ``Carol Smith\\, Jr.``."""
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in v)
    if out[:1] in ("#", " "):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def small(big_members: int = MAX_VAL_RANGE + 100) -> ADDirectory:
    entries = [
        ADEntry(PEOPLE, {"objectClass": "organizationalUnit"}),
        ADEntry(GROUPS, {"objectClass": "organizationalUnit"}),
    ]
    d = ADDirectory(entries, [ADEntry(DOMAIN_USERS, {"gidNumber": str(DOMAIN_USERS_GID)})])

    def user(login: str, full: str, uid: int | None) -> str:
        dn = f"CN={_rdn_value(full)},{PEOPLE}"
        attrs: dict[str, str | list[str]] = {
            "objectClass": "user",
            "sAMAccountName": login,
            "displayName": full,
        }
        if uid is not None:
            home, shell = f"/home/{login}", "/bin/bash"
            attrs |= {
                "uidNumber": str(uid),
                "gidNumber": str(DOMAIN_USERS_GID),
                "unixHomeDirectory": home,
                "loginShell": shell,
                "gecos": full,
            }
            d.passwd[login] = (uid, DOMAIN_USERS_GID, home, shell, full)
        else:
            d.non_posix_users.append(login)
        entries.append(ADEntry(dn, attrs))
        return dn

    alice = user("alice", "Alice Liddell", 20001)
    bob = user("bob", "Bob Dobbs", 20002)
    carol = user("carol", "Carol Smith, Jr.", 20003)
    user("dave", "Dave NoPosix", None)
    many = [user(f"m{i:04d}", f"Member {i:04d}", 30000 + i) for i in range(big_members)]

    def group(name: str, gid: int | None, members: list[str], group_type: str = "") -> str:
        dn = f"CN={name},{GROUPS}"
        attrs: dict[str, str | list[str]] = {"objectClass": "group", "sAMAccountName": name}
        if group_type:
            attrs["groupType"] = group_type
        if gid is not None:
            attrs["gidNumber"] = str(gid)
        if members:
            attrs["member"] = members
        entries.append(ADEntry(dn, attrs))
        return dn

    eng = group("eng", 40001, [alice])
    group("team", 40002, [eng, bob])
    nonposix = group("nonposix", None, [carol])
    group("staff", 40003, [nonposix])
    group("big", 40004, many)
    group(DISTRIBUTION, 40005, [bob], group_type="2")  # global, distribution

    everyone = sorted(d.passwd)
    d.groups = {
        "Domain Users": (DOMAIN_USERS_GID, everyone),
        "eng": (40001, ["alice"]),
        "team": (40002, ["alice", "bob"]),
        "staff": (40003, ["carol"]),
        "big": (40004, sorted(f"m{i:04d}" for i in range(big_members))),
    }
    for login in d.passwd:
        d.initgroups[login] = sorted(
            g for g, (_gid, members) in d.groups.items() if login in members
        )
    return d
