"""Write the ID-mapping oracle: SSSD's own libsss_idmap.so.0 maps SIDs, we record it.

``cached/ldap/idmap.py`` must give the uids and gids SSSD gives (docs/compatibility.md
§6.5). This script drives the real library (Debian package libsss-idmap0, SSSD 2.8.2)
through ctypes the way ``sdap_idmap.c`` does — set the options, add each domain with
``sss_idmap_add_auto_domain_ex`` at the slice ``sss_idmap_calculate_range`` picks, map
SIDs in order — and writes every answer to ``tests/unit/data/idmap_oracle.json``, which the
unit tests replay against our module without needing the library.

    apt-get install libsss-idmap0 && python -m testing.idmap_oracle
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

from cached.memcache.murmur import murmurhash3

OUT = Path(__file__).resolve().parent.parent / "tests" / "unit" / "data" / "idmap_oracle.json"

IDMAP_SUCCESS = 0


class _Range(ctypes.Structure):
    _fields_ = [("min", ctypes.c_uint32), ("max", ctypes.c_uint32)]


def _colliding_sids(base: str, slices: int, count: int) -> list[str]:
    """Domain SIDs whose primary slices collide, to exercise SSSD's probing."""
    seen: dict[int, list[str]] = {}
    n = 1000
    while True:
        sid = f"{base}-{n}"
        s = murmurhash3(sid.encode(), 0xDEADBEEF) % slices
        seen.setdefault(s, []).append(sid)
        if len(seen[s]) == count:
            return seen[s]
        n += 1


SCENARIOS: list[dict[str, Any]] = [
    {
        "name": "defaults, three domains",
        "options": {},
        "domains": [
            ["AD", "S-1-5-21-3623811015-3361044348-30300820", False],
            ["CHILD", "S-1-5-21-1004336348-1177238915-682003330", False],
            ["OTHER", "S-1-5-21-2127521184-1604012920-1887927527", False],
        ],
        "rids": [
            500,
            512,
            513,
            1000,
            1104,
            199999,
            200000,
            200001,
            450123,
            2199999,
            2200000,
            2400001,
            4000000000,
        ],
    },
    {
        "name": "default domain SID in slice 0",
        "options": {},
        "domains": [
            ["AD", "S-1-5-21-1-2-3", True],
            ["TRUST", "S-1-5-21-9-8-7", False],
        ],
        "rids": [0, 513, 1105, 199999, 200000, 3000000],
    },
    {
        "name": "autorid compatible",
        "options": {"autorid": True},
        "domains": [
            ["AD", "S-1-5-21-3623811015-3361044348-30300820", False],
            ["CHILD", "S-1-5-21-1004336348-1177238915-682003330", False],
        ],
        "rids": [500, 513, 200000, 600000],
    },
    {
        "name": "custom range, no helper table",
        "options": {
            "range_min": 100000,
            "range_max": 300000000,
            "range_size": 100000,
            "helper_table_size": 0,
        },
        "domains": [["AD", "S-1-5-21-3623811015-3361044348-30300820", False]],
        "rids": [500, 99999, 100000],
    },
]


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL("libsss_idmap.so.0")
    lib.sss_idmap_init.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.sss_idmap_calculate_range.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.POINTER(_Range),
    ]
    lib.sss_idmap_add_auto_domain_ex.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(_Range),
        ctypes.c_char_p,
        ctypes.c_uint32,
        ctypes.c_bool,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.sss_idmap_sid_to_unix.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint32),
    ]
    for setter, typ in (
        ("autorid", ctypes.c_bool),
        ("lower", ctypes.c_uint32),
        ("upper", ctypes.c_uint32),
        ("rangesize", ctypes.c_uint32),
        ("extra_slice_init", ctypes.c_int),
    ):
        getattr(lib, f"sss_idmap_ctx_set_{setter}").argtypes = [ctypes.c_void_p, typ]
    return lib


def run(scenario: dict[str, Any], lib: ctypes.CDLL) -> dict[str, Any]:
    o = scenario["options"]
    ctx = ctypes.c_void_p()
    assert lib.sss_idmap_init(None, None, None, ctypes.byref(ctx)) == IDMAP_SUCCESS
    lib.sss_idmap_ctx_set_autorid(ctx, o.get("autorid", False))
    lib.sss_idmap_ctx_set_lower(ctx, o.get("range_min", 200000))
    lib.sss_idmap_ctx_set_upper(ctx, o.get("range_max", 2000200000))
    lib.sss_idmap_ctx_set_rangesize(ctx, o.get("range_size", 200000))
    lib.sss_idmap_ctx_set_extra_slice_init(ctx, o.get("helper_table_size", 10))
    slices = []
    for name, sid, default in scenario["domains"]:
        # sdap_idmap_add_domain(): slice 0 for the default domain SID, else -1 (hash).
        num = ctypes.c_uint32(0 if default else 0xFFFFFFFF)
        rng = _Range()
        rc = lib.sss_idmap_calculate_range(ctx, sid.encode(), ctypes.byref(num), ctypes.byref(rng))
        assert rc == IDMAP_SUCCESS, (sid, rc)
        rc = lib.sss_idmap_add_auto_domain_ex(
            ctx, name.encode(), sid.encode(), ctypes.byref(rng), None, 0, False, None, None
        )
        assert rc == IDMAP_SUCCESS, (sid, rc)
        slices.append([sid, num.value, rng.min, rng.max])
    ids = []
    for _name, sid, _default in scenario["domains"]:
        for rid in scenario["rids"]:
            out = ctypes.c_uint32()
            full = f"{sid}-{rid}"
            rc = lib.sss_idmap_sid_to_unix(ctx, full.encode(), ctypes.byref(out))
            ids.append([full, out.value if rc == IDMAP_SUCCESS else None])
    for builtin in ("S-1-5-32-544", "S-1-5-32-545"):
        out = ctypes.c_uint32()
        rc = lib.sss_idmap_sid_to_unix(ctx, builtin.encode(), ctypes.byref(out))
        ids.append([builtin, out.value if rc == IDMAP_SUCCESS else None])
    return {**scenario, "slices": slices, "ids": ids}


def main() -> int:
    lib = _lib()
    scenarios = list(SCENARIOS)
    collide = _colliding_sids("S-1-5-21-77-88", 10000, 3)
    scenarios.append(
        {
            "name": "three domain SIDs hashing to one slice (probing)",
            "options": {},
            "domains": [[f"D{i}", sid, False] for i, sid in enumerate(collide)],
            "rids": [513, 250000],
        }
    )
    data = {
        "source": "libsss_idmap.so.0 (Debian libsss-idmap0, SSSD 2.8.2) via "
        "python -m testing.idmap_oracle",
        "scenarios": [run(s, lib) for s in scenarios],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
