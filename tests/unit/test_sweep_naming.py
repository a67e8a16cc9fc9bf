"""The inline paths for the usual member: Sweeps.name names the usual user of a
sweep of the user bases inline, and must name each row as Sweeps.swept_member (the
general path) does, on usual and unusual rows; save.scan reads a
member list of users only in one pass, and must read any list as its general loop
does. Pure logic: rows and groups are given, no server is contacted."""

from __future__ import annotations

from pathlib import Path

from cached.counters import Counters
from cached.ldap import save
from cached.ldap.entries import GROUP, USER, WALK, GroupEntry, Known, Member
from testing.backend import make_backend, make_domain


def test_swept_users_named_inline_as_swept_member_names_them(tmp_path: Path) -> None:
    """Sweeps.name names the usual swept user inline (and reads each gidNumber value
    once): each row gives what Sweeps.swept_member gives, on usual and
    unusual rows, whatever rows came before with the same gidNumber."""
    cfg = make_domain(["ldap://127.0.0.1:9"], "dc=example,dc=test", min_id=1000, max_id=60000)
    p, _, _ = make_backend(tmp_path, cfg, Counters())
    rows = [
        ([b"alice"], [b"10001"], [b"10000"]),
        ([b"bob"], [b"10002"], [b"10000"]),
        ([b"carol"], [b"10003"], [b"x10000"]),  # not a number
        ([b"dave"], [b"10004"], [b"x10000"]),
        ([b"erin"], [b"10005"], [b"99999"]),  # out of range
        ([b"frank"], [b"10006"], [b"99999"]),
        ([b"gina"], [b"99999"], [b"10000"]),
        ([b"hal"], [b"0"], [b"10000"]),
        ([b"ivy"], [b"x"], [b"10000"]),
        ([b"j\xffk"], [b"10010"], [b"10000"]),  # not UTF-8
        ([b"k\x00l"], [b"10011"], [b"10000"]),  # a NUL
        ([b"lee", b"leo"], [b"10012"], [b"10000"]),  # two names
        ([], [b"10013"], [b"10000"]),
        ([b"mo"], [], [b"10000"]),
        ([b"ned"], [b"10015"], []),
        ([b"olga"], [b"10016"], [b" 10000 "]),  # int() takes it; int_id does not
        ([b"olaf"], [b"10_019"], [b"10000"]),  # nor this
        ([b"oona"], [b"+10020"], [b"10000"]),
        ([b"pat"], [b"10017"], [b"0"]),
        ([b"quinn"], [b"10018"], [b"10000"]),
    ]
    swept = {f"uid={i},dc=test": (f"uid={i},dc=test", list(r)) for i, r in enumerate(rows)}
    want = {k: p.sweeps.swept_member(row) for k, row in swept.items()}
    assert want["uid=0,dc=test"] == ("user", "alice") and want["uid=2,dc=test"] is None
    # ids as the INTEGER syntax spells them, nothing int() alone would take
    odd = [want[k] for k, (_dn, r) in swept.items()
           if r[0][:1] in ([b"olga"], [b"olaf"], [b"oona"])]  # fmt: skip
    assert odd == [None, None, None]
    for order in (list(swept), list(reversed(swept))):
        known: Known = {}
        lookup = {k: (k, 0) for k in order}
        p.sweeps.name({k: swept[k] for k in order}, lookup, known)
        assert not lookup and known == want


def test_scan_reads_member_lists_of_users_alone_and_mixed() -> None:
    """save.scan: a member list of users only is read in one pass; any other
    takes the general loop. Each gives the users, groups, member groups, walked
    groups and the unknown flag storing needs."""
    from cached.ldap.exchange import Entry

    def group(name: str, keys: list[str], posix: bool = True) -> GroupEntry:
        return GroupEntry(Entry(f"cn={name}", {}), name, 1, "", "", keys, posix=posix)

    found = {
        "g:users": group("users", ["u:a", "u:b", "u:a"]),
        "g:empty": group("empty", []),
        "g:mixed": group("mixed", ["u:a", "g:users", "x:gone", "g:walk", "u:b", "x:new",
                                   "k:grp", "k:walk", "g:both"]),
        "g:walk": group("walk", ["u:c"], posix=False),
        "g:both": group("both", ["u:a"]),
        "g:last": group("last", ["u:a", "u:b", "x:new"]),
    }
    known: Known = {
        "u:a": Member(USER, "a"), "u:b": Member(USER, "b"), "u:c": Member(USER, "c"),
        "x:gone": None, "k:grp": Member(GROUP, "grp"), "k:walk": Member(WALK, "kw"),
        "g:both": Member(USER, "both-as-user"),  # fetched as a group: counts as the group
    }  # fmt: skip
    scans = save.scan(found, known)
    assert list(scans["g:users"].users) == ["a", "b"] and not scans["g:users"].children
    assert not scans["g:users"].unknown and not scans["g:empty"].users
    mixed = scans["g:mixed"]
    assert list(mixed.users) == ["a", "b"]
    assert list(mixed.groups) == ["users", "grp", "both"]
    assert mixed.children == ["g:users", "g:walk", "k:grp", "k:walk", "g:both"]
    assert mixed.walk == ["g:walk"] and mixed.through and mixed.unknown
    assert list(scans["g:last"].users) == ["a", "b"] and scans["g:last"].unknown
    assert not scans["g:both"].unknown and list(scans["g:both"].users) == ["a"]
