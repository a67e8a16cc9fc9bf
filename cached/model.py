"""The values that cross module boundaries: users, groups and sudo rules.

Plain frozen dataclasses, no I/O. The cache stores them, the LDAP backend builds them,
the NSS responder and the memory-cache writer encode them for clients.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.Enum):
    """The kinds of object NSS serves. The value names the kind's memory-cache file
    (reference §2.1), the name is how profile lines and ``cached perf`` say it (§5.2)."""

    USER = "passwd"
    GROUP = "group"
    INITGR = "initgroups"
    NETGROUP = "netgroup"  # no memory-cache file (SSSD has none either)


#: The kinds with a memory-cache file, named by the kind's value.
MEMCACHE_KINDS = (Kind.USER, Kind.GROUP, Kind.INITGR)


@dataclass(frozen=True, slots=True)
class User:
    """A POSIX account as NSS returns it (reference §1.6, passwd record)."""

    name: str
    uid: int
    gid: int
    gecos: str = ""
    home: str = ""
    shell: str = ""
    dn: str = ""
    # The values of ldap_user_ssh_public_key in the server's order (SSSD answers
    # them in that order): a textual key line or an RFC 4253 blob each.
    ssh_keys: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    """A POSIX group.

    ``members`` are the *direct* member user names; ``member_groups`` the names of
    direct member groups. Nested expansion down to ``ldap_group_nesting_level`` is
    done by the cache reader, so a change to one sub-group needs one record written,
    not one per ancestor.
    """

    name: str
    gid: int
    dn: str = ""
    members: tuple[str, ...] = ()
    member_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Netgroup:
    """A netgroup as SETNETGRENT answers it: its triples (``(host, user, domain)``,
    "" for an empty field: any), then the names of its member netgroups, each in the
    server's order. Nested netgroups are not expanded: the client (glibc) asks for
    each member netgroup in turn and stops at cycles, as with SSSD."""

    name: str
    dn: str = ""
    triples: tuple[tuple[str, str, str], ...] = ()
    members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PasswdEntry:
    """A passwd record as a client reads it (from the NSS socket or the memory cache),
    with the ``passwd`` field that :class:`User` lacks."""

    name: str
    passwd: str
    uid: int
    gid: int
    gecos: str
    home: str
    shell: str

    def to_user(self) -> User:
        return User(
            name=self.name,
            uid=self.uid,
            gid=self.gid,
            gecos=self.gecos,
            home=self.home,
            shell=self.shell,
        )


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """A group record as a client reads it: the direct and nested members, flat."""

    name: str
    passwd: str
    gid: int
    members: tuple[str, ...]

    def to_group(self) -> Group:
        return Group(name=self.name, gid=self.gid, members=self.members)


@dataclass(frozen=True, slots=True)
class SudoRule:
    """A ``sudoRole`` entry as the cache keeps it: its name (``cn``), DN and attributes
    under SSSD's sysdb names (``sudoUser``, ``sudoHost``...), each with its values in
    the server's order (sudo applies ``sudoOption`` values in order), the attributes
    in the order the server sent them. The server's change stamp is the timestamp
    store's, not part of the body."""

    name: str
    dn: str
    attrs: tuple[tuple[str, tuple[str, ...]], ...]

    def get(self, attr: str) -> tuple[str, ...]:
        for name, values in self.attrs:
            if name == attr:
                return values
        return ()
