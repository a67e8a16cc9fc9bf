"""ID mapping gives SSSD's numbers (docs/sssd-reference.md §6.5).

The oracle ``tests/unit/data/idmap_oracle.json`` holds what SSSD 2.8.2's own
``libsss_idmap.so.0`` answered for the same domains and SIDs, in the same order
(``python -m testing.idmap_oracle``); a machine that moves from SSSD keeps every id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cached.ldap.idmap import IdMapError, IdMapper

ORACLE = json.loads((Path(__file__).parent / "data" / "idmap_oracle.json").read_text())


def _mapper(options: dict[str, Any]) -> IdMapper:
    return IdMapper(
        options.get("range_min", 200000),
        options.get("range_max", 2000200000),
        options.get("range_size", 200000),
        autorid=options.get("autorid", False),
        helper_table_size=options.get("helper_table_size", 10),
    )


@pytest.mark.parametrize("scenario", ORACLE["scenarios"], ids=lambda s: s["name"])
def test_ids_equal_libsss_idmap(scenario: dict[str, Any]) -> None:
    m = _mapper(scenario["options"])
    for (name, sid, default), (osid, _num, lo, hi) in zip(
        scenario["domains"], scenario["slices"], strict=True
    ):
        assert osid == sid
        primary = m.add_domain(name, sid, default=default)
        assert (primary.min_id, primary.max_id) == (lo, hi), sid
    got: list[list[Any]] = []
    for full, _want in scenario["ids"]:
        try:
            got.append([full, m.sid_to_id(full)])
        except IdMapError:
            got.append([full, None])
    assert got == scenario["ids"]


def test_oracle_covers_the_interesting_cases() -> None:
    """The fixture exercises secondary slices, BUILTIN, slice 0 and probing."""
    ids = [i for s in ORACLE["scenarios"] for i in s["ids"]]
    assert any(sid.startswith("S-1-5-32-") and v is None for sid, v in ids)
    assert any(int(sid.rsplit("-", 1)[1]) >= 2_200_000 and v is not None for sid, v in ids)
    slices = [n for s in ORACLE["scenarios"] for _sid, n, _lo, _hi in s["slices"]]
    assert 0 in slices
    probing = next(s for s in ORACLE["scenarios"] if "probing" in s["name"])
    nums = [n for _sid, n, _lo, _hi in probing["slices"]]
    assert len(set(nums)) == 3 and max(nums) - min(nums) == 2


def test_errors_name_the_sid() -> None:
    m = IdMapper()
    m.add_domain("AD", "S-1-5-21-1-2-3")
    for sid, words in (
        ("S-1-5-32-544", "BUILTIN"),
        ("S-1-5-21-9-9-9-500", "no known domain"),
        ("S-1-5-21-1-2-3-x", "not a number"),
        ("S-1-5-21-1-2-3-4294967296", r"2\^32"),
    ):
        with pytest.raises(IdMapError, match=words) as e:
            m.sid_to_id(sid)
        assert sid in str(e.value)
    with pytest.raises(ValueError, match="does not hold one slice"):
        IdMapper(1000, 2000, 5000)
