"""cached/ldap/_ber.c's name_rows against its Python reference, sweep.name_rows_py: the
same members, of the same type, in the same order, and the same rows left to the slow
path, over generated swept rows with hostile values (names not UTF-8, with NULs, more
than one; ids with signs, spaces, non-ASCII digits, leading zeros, past 64 bits, at
and beyond the bounds). Pure logic."""

from __future__ import annotations

import random

import pytest

from cached.ldap.entries import USER, Member
from cached.ldap.exchange import Row
from cached.ldap.sweep import name_rows_py

try:
    from cached.ldap import _ber
except ImportError:
    _ber = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_ber is None, reason="cached/ldap/_ber.c not built")

NAMES = [
    b"alice", b"user00042", b"m\xc3\xbcller", b"\xff\xfe", b"a\x00b", b"", b"\xc3", b"x" * 300,
    b"\xe2\x82\xac", b"ed\xed\xa0\x80",
]  # fmt: skip
IDS = [
    b"0", b"1", b"1000", b"01000", b"4294967295", b"4294967296", b"9223372036854775807",
    b"9223372036854775808", b"99999999999999999999999", b"-5", b"+5", b" 5", b"5 ", b"5_0",
    b"", b"1e3", b"\xd9\xa1", b"0x10", b"65535", b"200000",
]  # fmt: skip


BOUNDS = [(0, 2**32 - 1), (1000, 65535), (1, 200000), (0, 2**63 - 2), (5, 5)]


def _values(rng: random.Random, pool: list[bytes]) -> list[bytes]:
    return [rng.choice(pool) for _ in range(rng.choice([0, 1, 1, 1, 1, 2]))]


def _rows(rng: random.Random, n: int) -> dict[str, Row]:
    return {
        f"uid=u{i},ou=people,dc=x": (
            f"uid=u{i},ou=People,dc=x",
            [_values(rng, NAMES), _values(rng, IDS), _values(rng, IDS)],
        )
        for i in range(n)
    }


def _slow(row: Row) -> Member | None:
    """A stand-in for Sweeps.swept_member: a value of its own per row."""
    return None if len(row[0]) % 2 else Member(USER, "slow:" + row[0])


@pytest.mark.parametrize("seed", range(40))
def test_c_names_what_the_reference_names(seed: int) -> None:
    rng = random.Random(seed)
    swept = _rows(rng, 300)
    hits = [k for k in swept if rng.random() < 0.9]
    lo, hi = BOUNDS[seed % len(BOUNDS)]
    want: dict[str, Member | None] = {"earlier": None}
    got: dict[str, Member | None] = {"earlier": None}
    name_rows_py(hits, swept, lo, hi, want, Member, USER, _slow)
    _ber.name_rows(hits, swept, lo, hi, got, Member, USER, _slow)
    assert list(got.items()) == list(want.items())
    assert [type(m) for m in got.values()] == [type(m) for m in want.values()]
    # Both paths ran (but where only the id 5 is in range).
    fast = [m for m in got.values() if isinstance(m, Member) and not m.name.startswith("slow:")]
    assert fast or (lo, hi) == (5, 5)
    assert any(m is None or m.name.startswith("slow:") for m in got.values())


def test_the_usual_user_is_a_member_and_the_rest_go_slow() -> None:
    swept: dict[str, Row] = {
        "a": ("uid=a", [[b"alice"], [b"1001"], [b"100"]]),
        "b": ("uid=bb", [[b"bob"], [b"1002"], [b"99999"]]),  # gid past hi
        "c": ("uid=c", [[b"c\x00"], [b"1003"], [b"100"]]),  # NUL in the name
        "d": ("uid=dd", [[b"d\xff"], [b"1004"], [b"100"]]),  # not UTF-8
    }
    known: dict[str, Member | None] = {}
    _ber.name_rows(list(swept), swept, 1, 65535, known, Member, USER, _slow)
    assert known == {
        "a": Member(USER, "alice"), "b": Member(USER, "slow:uid=bb"), "c": None,
        "d": Member(USER, "slow:uid=dd"),
    }  # fmt: skip


def test_refused_arguments() -> None:
    with pytest.raises(KeyError):
        _ber.name_rows(["missing"], {}, 0, 10, {}, Member, USER, _slow)
    with pytest.raises(ValueError):
        _ber.name_rows([], {}, 0, 2**63 - 1, {}, Member, USER, _slow)
    with pytest.raises(ValueError):
        _ber.name_rows([], {}, 0, 10, {}, dict, USER, _slow)  # type: ignore[arg-type]
