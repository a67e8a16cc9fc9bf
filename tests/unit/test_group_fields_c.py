"""cached/ldap/_ber.c's group readers against their Python references: key_new (the
member values of a round's groups read into DN keys, MemberKeys.new_values) against
MemberKeys' Python path and cached/dn.py's normalize_dn, and group_fields against
entries.read_group_fields, over generated corpora with hostile values (escapes,
multi-valued RDNs, case, spaces, aliases, UTF-8 and not, NULs). Pure logic."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from cached import dn
from cached.dn import normalize_dn
from cached.ldap import entries
from cached.ldap.entries import MemberKeys, read_group_fields
from cached.ldap.exchange import Entry

try:
    from cached.ldap import _ber
except ImportError:
    _ber = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_ber is None, reason="cached/ldap/_ber.c not built")

MEMBER = "member"
ALIASES = tuple(a.encode() for a in dn.ALIASED_TYPES)

# Pieces of member values: what normalize_dn treats specially, and what it leaves.
PIECES = [
    "uid", "UID", "cn", "Cn", "commonName", "commonname", "userid", "2.5.4.3", "oid.2.5.4.3",
    "0.9.2342.19200300.100.1.25", "0.0.9.2342.19200300.100.1.25", "dc", "ou", "x-attr",
    "=", "=", "=", ",", ",", ",", " ", "  ", "\\", "\\2c", "\\2C", "\\,", "+", '"', ";", "\t",
    "\n", "\x00", "\x7f", "\x1f", "\u00e9", "\u00c9", "\ufb01", "\u212a", "a", "A", "0", "-",
    "#", "user00042", ".", "_", "~", "@",
]  # fmt: skip
USUAL = [
    b"uid=user00042,ou=people,dc=example,dc=test",
    b"cn=nest0-0099,ou=groups,dc=example,dc=test",
    b"cn=a.b_c:d/e@f#g!,o=x",
    b"uid=,dc=test",
    b"x-attr=v,1.2.3=w",
    b"=,a=b",
]


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    dn._KEYS.clear()
    yield
    dn._KEYS.clear()


def _value(rng: random.Random) -> bytes:
    text = "".join(rng.choices(PIECES, k=rng.randint(0, 9)))
    v = text.encode("utf-8")
    if rng.random() < 0.05:
        v += rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80"])  # not UTF-8
    return v


def _lists(rng: random.Random, hostile: float) -> list[list[bytes]]:
    """Member lists of a round's groups: usual values, values of one round repeated,
    and (with probability ``hostile`` each) a generated one."""
    pool = list(USUAL) + [f"uid=u{i},ou=people,dc=t".encode() for i in range(20)]
    out = []
    for _ in range(rng.randint(0, 6)):
        vals = []
        for _ in range(rng.randint(0, 8)):
            vals.append(_value(rng) if rng.random() < hostile else rng.choice(pool))
        out.append(vals)
    return out


def _python_path(keys: MemberKeys, es: list[Entry], monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    with monkeypatch.context() as m:
        m.setattr(entries, "key_new", None)
        return keys.new_values(es, MEMBER)


def _reference_key(v: bytes) -> str | None:
    try:
        text = v.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else normalize_dn(text)


@pytest.mark.parametrize("hostile", [0.0, 0.02, 0.3, 1.0])
def test_member_values_read_in_c_as_in_python(
    hostile: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of groups read by two MemberKeys, one through _ber.key_new and one by
    the Python path, as the walk reads them (new_values, then of, then each group's
    keys): the same new values, memo, spellings (in order) and keys of each group;
    and every key the C reader made is normalize_dn's of the value."""
    rng = random.Random(41 + int(hostile * 100))
    declined = taken = 0
    for _ in range(400):
        c, py = MemberKeys(), MemberKeys()
        for _round in range(rng.randint(1, 3)):
            es = [Entry(f"cn=g{i},dc=t", {MEMBER: vs}) for i, vs in enumerate(_lists(rng, hostile))]
            es.append(Entry("cn=none,dc=t", {}))
            before = (dict(c.memo), dict(c.spelled))
            got = _ber.key_new([e.attrs.get(MEMBER, ()) for e in es], c.memo, c.spelled, ALIASES)
            if got is None:
                declined += 1
                assert (c.memo, c.spelled) == before  # untouched: the Python path's
                c.ready = {}
            else:
                taken += 1
                c.ready = {id(e.attrs.get(MEMBER, ())): (e.attrs.get(MEMBER, ()), k)
                           for e, k in zip(es, got[1], strict=True)}  # fmt: skip
            c_new = got[0] if got is not None else _python_path(c, es, monkeypatch)
            py_new = _python_path(py, es, monkeypatch)
            assert c_new == py_new
            dn._KEYS.clear()
            c.of(c_new)
            py.of(py_new)
            for e in es:
                vs = e.attrs.get(MEMBER, [])
                ready = c.ready.get(id(vs))
                c_keys = ready[1] if ready is not None and ready[0] is vs else c.keys(vs)
                assert c_keys == py.keys(vs), vs
            assert c.memo == py.memo
            assert list(c.spelled.items()) == list(py.spelled.items())
        for v, k in c.memo.items():
            dn._KEYS.clear()
            assert k == _reference_key(v), v
    assert taken, "the corpus never took the C path"
    if hostile >= 0.3:
        assert declined, "the corpus never declined"


def test_a_value_is_read_in_c_exactly_when_it_is_its_own_key() -> None:
    """key_new's test of one value against dn._own_keys (normalize_dns' own test),
    and its key against normalize_dn, over generated values."""
    rng = random.Random(4)
    values = [_value(rng) for _ in range(20000)] + USUAL
    values += [b"a=" + bytes([c]) for c in range(256)] + [bytes([c]) + b"=a" for c in range(256)]
    values += [a + b"=x,dc=t" for a in ALIASES] + [b"dc=t," + a + b"=x" for a in ALIASES]
    for v in values:
        got = _ber.key_new([[v]], {}, {}, ALIASES)
        try:
            text = v.decode("utf-8")
        except UnicodeDecodeError:
            assert got is None, v
            continue
        own = "\0" not in text and dn._own_keys([text])
        assert (got is not None) == own, v
        if got is not None:
            assert got == ([v], [[text]])
            assert normalize_dn(text) == text


def test_key_new_declines_what_is_not_bytes_and_keeps_memo_hits() -> None:
    memo = {b"UID=X,DC=T": "uid=x,dc=t"}
    spelled = {"uid=x,dc=t": "UID=X,DC=T"}
    not_bytes: list[Any] = [[b"uid=a,dc=t", "uid=b,dc=t"]]
    assert _ber.key_new(not_bytes, {}, {}, ALIASES) is None
    # A value read before, however spelled, is its memo's key; only new ones are new.
    lists: list[Any] = [[b"UID=X,DC=T", b"uid=x,dc=t"], [], (), [b"uid=x,dc=t"]]
    got = _ber.key_new(lists, memo, spelled, ALIASES)
    assert got == ([b"uid=x,dc=t"], [["uid=x,dc=t", "uid=x,dc=t"], [], [], ["uid=x,dc=t"]])
    assert spelled == {"uid=x,dc=t": "UID=X,DC=T"}  # the first spelling stays


def _attrs(rng: random.Random) -> dict[str, list[bytes]]:
    def some(choices: list[bytes], most: int = 3) -> list[bytes]:
        return rng.choices(choices, k=rng.randint(0, most))

    names = [b"g1", b"G\xc3\xa9", b"\xff", b"a\x00b", b"", b"group name", b"\xed\xa0\x80"]
    ids = [b"1000", b"0", b"0001000", b"+1000", b" 1000", b"1_000", b"", b"\xd9\xa3",
           b"99999999999999999999999", b"4294967295", b"12a", b"-5"]  # fmt: skip
    ocs = [b"posixGroup", b"POSIXGROUP", b"posixgroup", b"groupOfNames", b"top",
           b"groupOfURLs", b"GROUPOFURLS", b"group\xc3\xa9", b"GROUP\xc3\x89"]  # fmt: skip
    stamps = [b"20261207120000Z", b"\xff\xfe", b"", b"123"]
    urls = [b"ldap:///ou=p??sub?(x=1)", b"LDAPS://h/", b"ldapi://%2f", b"http://x", b"ldap:/",
            b"Ldap://", b"ldaps:/"]  # fmt: skip
    out: dict[str, list[bytes]] = {}
    for key, choices, most in [
        ("cn", names, 3), ("gidnumber", ids, 2), ("objectclass", ocs, 4),
        ("modifytimestamp", stamps, 2), ("entryusn", stamps, 2), ("labeleduri", urls, 2),
        ("labeleduri;x-opt", urls, 1), ("description", urls + names, 2), ("member", USUAL, 3),
    ]:  # fmt: skip
        if rng.random() < 0.8:
            out[key] = some(choices, most)
            if rng.random() < 0.1:
                out[key] = tuple(out[key])  # type: ignore[assignment]  # also read
    return out


def test_group_fields_in_c_as_in_python() -> None:
    """_ber.group_fields against read_group_fields: random group attributes, specs
    with and without a usn, a gid, computed groups, and classes in any case."""
    rng = random.Random(7)
    plains = [None, frozenset({"cn", "gidnumber", "member", "modifytimestamp", "objectclass"}),
              frozenset({"cn", "gidnumber", "member", "modifytimestamp", "objectclass",
                         "entryusn", "description"})]  # fmt: skip
    specs = [
        ("cn", gid, "modifytimestamp", usn, oc, oc.lower(), plain)
        for gid in ("gidnumber", None, "absent")
        for usn in ("", "entryusn")
        for oc in (b"posixGroup", b"group\xc3\xa9", b"GROUP\xc3\x89")
        for plain in plains
    ]
    for _ in range(20000):
        attrs = _attrs(rng)
        spec = rng.choice(specs)
        assert _ber.group_fields(attrs, spec) == read_group_fields(attrs, spec), (attrs, spec)


def test_the_c_readers_are_chosen() -> None:
    assert entries.group_fields is _ber.group_fields
    assert entries.key_new is _ber.key_new
