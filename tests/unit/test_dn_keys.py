"""cached/dn.py normalize_dns: the DN keys of many DNs at once, where DNs that are
their own key (the usual member values) are recognised together and the others take
normalize_dn. Whatever the list, it must give what normalize_dn gives for each DN;
and the backend's batched reading of member values (LdapProvider._member_keys) what
reading them one at a time gives. Pure logic."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from cached import dn
from cached.counters import Counters
from cached.dn import normalize_dn, normalize_dns
from cached.ldap.entries import MemberKeys
from cached.ldap.exchange import Entry
from testing.backend import make_backend, make_domain

USUAL = [
    "uid=user00042,ou=people,dc=example,dc=test",
    "cn=nest0-0099,ou=groups,dc=example,dc=test",
    "cn=a.b_c:d/e@f#g!,o=x",  # punctuation normalize_dn leaves alone
    "uid=,dc=test",  # an empty value
    "x-attr=v,1.2.3=w",  # a type normalize_dn does not rename
]

UNUSUAL = [
    "UID=User00042,OU=People,DC=Example,DC=Test",  # upper case: folded
    "uid=user00042, ou=people,dc=test",  # a space after a comma: stripped
    "uid=a  b,dc=test",  # two spaces: collapsed
    "uid= a,dc=test",
    "uid=a\tb,dc=test",  # a control character
    "cn=smith\\, john,dc=test",  # an escape: the general parser
    'cn="smith, john",dc=test',  # RFC 2253 quotes
    "uid=mvx+cn=max,dc=test",  # a multi-valued RDN
    "uid=a;dc=test",  # RFC 2253's other separator
    "commonName=x,dc=test",  # aliases: renamed
    "commonname=x,dc=test",
    "userid=x,dc=test",
    "2.5.4.3=x,dc=test",
    "0.9.2342.19200300.100.1.25=test",
    "uid=a=b,dc=test",  # "=" in a value: escaped
    "uid=a,,dc=test",  # an empty RDN
    "uid=a,dc=test,",
    ",uid=a",
    "uid",  # no "=" at all
    "uid=a,dc",
    "",
    "uid=m\u00fcller,dc=test",  # not ASCII
    "uid=\udcff,dc=test",  # a lone surrogate (surrogateescape): not UTF-8 either
    "uid=a\nuid=b",  # a newline inside a DN
    "uid=a\x00,dc=test",
    "uid=a\x7f,dc=test",
]


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    dn._KEYS.clear()
    yield
    dn._KEYS.clear()


def _each(dns: list[str]) -> list[str]:
    dn._KEYS.clear()
    out = [normalize_dn(d) for d in dns]
    dn._KEYS.clear()
    return out


@pytest.mark.parametrize("odd", UNUSUAL)
def test_an_unusual_dn_gets_normalize_dns_key_alone_and_among_usual_ones(odd: str) -> None:
    for dns in ([odd], [*USUAL, odd], [odd, *USUAL], [USUAL[0], odd, USUAL[1]]):
        want = _each(dns)
        assert normalize_dns(dns) == want, dns
        assert [dn._KEYS[d] for d in dns] == want  # memoised as normalize_dn does
        dn._KEYS.clear()
        assert not dn._own_keys(dns), dns


def test_usual_dns_are_their_own_keys_at_once() -> None:
    assert _each(USUAL) == USUAL
    keys = normalize_dns(USUAL)
    assert keys == USUAL
    assert all(k is d for k, d in zip(keys, USUAL, strict=True))  # no parse: the DN itself
    assert all(dn._KEYS[d] is d for d in USUAL)
    assert normalize_dns([]) == []
    # Memoised ones answer from the memo, whatever spelling gave them.
    normalize_dn("UID=X,DC=TEST")
    assert normalize_dns(["UID=X,DC=TEST", "uid=x,dc=test"]) == ["uid=x,dc=test"] * 2


def test_random_dns_get_normalize_dns_keys() -> None:
    """Lists of DNs made of the pieces normalize_dn treats specially, usual ones in
    between: every list keyed as normalize_dn keys each DN."""
    rng = random.Random(15)
    pieces = ["uid", "UID", "cn", "commonName", "userid", "2.5.4.3", "oid.2.5.4.3", "x",
              "=", "=", ",", ",", " ", "  ", "\\", "\\2c", "+", '"', ";", "\t", "\n",
              "\u00e9", "a", "0", "-", "#", "name", "."]  # fmt: skip
    for _ in range(3000):
        dns = ["".join(rng.choices(pieces, k=rng.randint(0, 8))) for _ in range(rng.randint(1, 4))]
        dns += rng.sample(USUAL, rng.randint(0, 2))
        rng.shuffle(dns)
        assert normalize_dns(dns) == _each(dns), dns
        dn._KEYS.clear()


def test_a_full_memo_is_cleared_as_normalize_dn_clears_it(monkeypatch) -> None:
    monkeypatch.setattr(dn, "_KEYS_MAX", 3)
    assert normalize_dns(USUAL) == USUAL  # more than the memo holds: one at a time
    assert len(dn._KEYS) <= 3


def _values() -> list[bytes]:
    return [
        b"uid=user00001,ou=people,dc=example,dc=test",
        b"UID=User00001,OU=People,DC=Example,DC=Test",  # the same key, spelled otherwise
        b"cn=smith\\, john,ou=people,dc=example,dc=test",
        b"uid=user00002,ou=people,dc=example,dc=test",
        b"uid=user00001,ou=people,dc=example,dc=test",  # again
        b"uid=\xff,dc=test",  # not UTF-8: names nothing
        b"uid=a\x00b,dc=test",  # a NUL: names nothing
        b"",
        b"uid=m\xc3\xbcller,dc=test",
    ]


@pytest.mark.parametrize(
    "values",
    [
        _values()[:5],
        _values(),
        _values()[5:],
        [b"uid=user00003,dc=test", b"uid=a\x00b", b"uid=user00004,dc=test"],
        [b""],
        [],
    ],
)
def test_member_values_read_together_as_one_at_a_time(values) -> None:
    """MemberKeys.of against MemberKeys.each: the same keys, the same memo of values
    and the same spelling of each key, also across two groups whose values are read
    one after the other."""
    together, alone = MemberKeys(), MemberKeys()
    later = [b"UID=USER00002,OU=PEOPLE,DC=EXAMPLE,DC=TEST", b"uid=user00005,dc=test"]
    for group in (values, later + values):
        got = together.of(group)
        dn._KEYS.clear()
        assert got == alone.each(group)
        assert together.memo == alone.memo
        assert list(together.spelled.items()) == list(alone.spelled.items())



def test_new_member_values_are_the_unread_ones_each_once_in_the_order_met(
    tmp_path: Path,
) -> None:
    """MemberKeys.new_values, what a round's groups hand MemberKeys.of: the values not
    in the memo, each once, in the order first met across the entries (the first
    spelling met of a key is the one kept, MemberKeys.spelled)."""
    cfg = make_domain(["ldap://127.0.0.1:9"], "dc=example,dc=test")
    p, _, _ = make_backend(tmp_path / "a", cfg, Counters())
    keys = MemberKeys()
    keys.of([_values()[3]])  # read by an earlier round
    member = p.decoder.gkeys().member
    lists = [_values()[:5], [], list(reversed(_values())), _values()[2:]]
    entries = [Entry(f"cn=g{i},dc=test", {member: vs}) for i, vs in enumerate(lists)]
    entries.append(Entry("cn=none,dc=test", {}))
    want: list[bytes] = []
    for v in (v for vs in lists for v in vs):
        if v not in keys.memo and v not in want:
            want.append(v)
    assert keys.new_values(entries, member) == want


def test_entries_that_are_no_user_are_logged_once_a_minute_not_once_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One search of 400,000 entries without numeric ids must not write 400,000
    warnings (a directory writer's way to fill the disk)."""
    p, _cache, _ = make_backend(tmp_path, make_domain(["ldap://127.0.0.1:1"], "dc=t"))
    for i in range(1000):
        assert p.decoder.name_ids(f"uid=x{i},dc=t", [b"x"], None, None) is None
        assert p.decoder.name_ids(f"uid=y{i},dc=t", [b"\xff"], 1000, 1000) is None
    assert caplog.text.count("not a POSIX user") == 1
    assert caplog.text.count("is not UTF-8 text; user ignored") == 1


@pytest.mark.parametrize("mode", ["false", "hybrid", "true"])
def test_a_user_without_a_gid_is_posix_only_with_private_groups(
    tmp_path: Path, mode: str
) -> None:
    """auto_private_groups = true (SSSD's MPG domain, sdap_save_user): the uid is the
    primary gid, so a user needs no gidNumber (kept as 0) and one out of range is
    dropped rather than the user; otherwise, as SSSD, no user without one in range."""
    cfg = make_domain(["ldap://127.0.0.1:1"], "dc=t", auto_private_groups=mode, min_id=1000)
    p, _cache, _ = make_backend(tmp_path, cfg)
    mpg = mode == "true"
    assert p.decoder.name_ids("uid=a,dc=t", [b"a"], 1001, None) == (
        ("a", 1001, 0) if mpg else None
    )
    assert p.decoder.name_ids("uid=b,dc=t", [b"b"], 1002, 5) == (("b", 1002, 0) if mpg else None)
    assert p.decoder.name_ids("uid=c,dc=t", [b"c"], 1003, 2000) == ("c", 1003, 2000)
    assert p.decoder.name_ids("uid=d,dc=t", [b"d"], None, 2000) is None
