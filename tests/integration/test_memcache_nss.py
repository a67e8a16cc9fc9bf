"""The real client reads what the writer writes: glibc → libnss_sss.so.2 → /var/lib/sss/mc.

Every command runs in a private mount namespace (testing/nsenv.py) whose
``/var/lib/sss/pipes`` is an empty directory: there is no socket, so whatever is answered
comes from the memory-cache files, and a miss shows as "not found" (UNAVAIL/ENOENT from the
missing socket). The writer runs here, outside the namespace.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from cached.memcache import (
    GroupWriter,
    InitgroupsWriter,
    McWriter,
    MemoryCache,
    PasswdWriter,
    Status,
)
from cached.memcache.layout import H_B1, H_B2, H_MAJOR, H_MINOR, next_barrier
from testing.marks import requires_nss
from testing.nsenv import (
    NSS_STATUS_NOTFOUND,
    NSS_STATUS_SUCCESS,
    NSS_STATUS_UNAVAIL,
    NssAnswer,
    NssClient,
    NssProbe,
    run_nss,
    start_nss,
)

pytestmark = requires_nss

#: Length of the concurrency test in ``make test``, and of the ``-m slow`` soak.
SHORT_SOAK_SECONDS: Final = 3.0
SOAK_SECONDS: Final = float(os.environ.get("CACHED_SOAK_SECONDS", "60"))
SOAK_READERS: Final = 8
# Minimum work before a soak process honours the stop file, so that what the assertions
# count (evictions, hits) does not depend on how fast the machine is.
MIN_WRITER_OPS: Final = 3000
MIN_READER_CALLS: Final = 2000


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    pipes, mc = tmp_path / "pipes", tmp_path / "mc"
    pipes.mkdir()
    mc.mkdir()
    return pipes, mc


@pytest.fixture
def cache(dirs: tuple[Path, Path]) -> Iterator[MemoryCache]:
    with MemoryCache.open(dirs[1], passwd_mb=1, group_mb=1, initgroups_mb=1) as mc:
        yield mc


def getent(dirs: tuple[Path, Path], *args: str, env: dict[str, str] | None = None) -> str | None:
    """stdout of ``getent ARGS`` in the namespace, or None when it found nothing (exit 2)."""
    p = run_nss(["getent", *args], *dirs, env=env)
    if p.returncode == 2:
        return None
    assert p.returncode == 0, p.stderr
    return p.stdout


def writers(mc: MemoryCache) -> tuple[PasswdWriter, GroupWriter, InitgroupsWriter]:
    assert mc.passwd and mc.group and mc.initgroups
    return mc.passwd, mc.group, mc.initgroups


# --- lookups --------------------------------------------------------------------------------


def test_getent_passwd_by_name_and_uid(dirs: tuple[Path, Path], cache: MemoryCache) -> None:
    pw, _, _ = writers(cache)
    pw.store("mcalice", 710001, 720001, "Alice Ä. Example", "/home/mcalice", "/bin/bash")
    pw.store("mcbob", 710002, 720002, passwd="x")
    line_a = "mcalice:*:710001:720001:Alice Ä. Example:/home/mcalice:/bin/bash\n"
    assert getent(dirs, "passwd", "mcalice") == line_a
    assert getent(dirs, "passwd", "710001") == line_a
    assert getent(dirs, "passwd", "mcbob") == "mcbob:x:710002:720002:::\n"
    assert getent(dirs, "passwd", "mcnobody") is None
    assert getent(dirs, "passwd", "710003") is None


def test_getent_group_with_thousands_of_members(
    dirs: tuple[Path, Path], cache: MemoryCache
) -> None:
    _, gr, _ = writers(cache)
    members = [f"member{i:05d}" for i in range(5000)]
    gr.store("mcbig", 730000, members)
    gr.store("mcempty", 730001, [])
    line = "mcbig:*:730000:" + ",".join(members) + "\n"
    assert getent(dirs, "group", "mcbig") == line  # glibc grows its buffer on ERANGE
    assert getent(dirs, "group", "730000") == line
    assert getent(dirs, "group", "730001") == "mcempty:*:730001:\n"
    assert getent(dirs, "group", "mcnone") is None


def test_getent_initgroups_with_thousands_of_gids(
    dirs: tuple[Path, Path], cache: MemoryCache
) -> None:
    _, _, ig = writers(cache)
    gids = list(range(740000, 740000 + 2086))
    ig.store("mcalice", "mcalice", gids)
    out = getent(dirs, "initgroups", "mcalice")
    assert out is not None
    name, *rest = out.split()
    assert name == "mcalice" and [int(g) for g in rest] == gids
    # getent prints the bare name, exit 0, when nothing answers.
    assert (getent(dirs, "initgroups", "mcnobody") or "").split() == ["mcnobody"]
    with NssProbe(*dirs) as probe:
        assert probe.call("initgroups", "mcalice") == NssAnswer(NSS_STATUS_SUCCESS, 0, tuple(gids))
        # Another spelling of the same user is its own record, looked up by raw name only
        # (§2.2); storing it supersedes the first spelling's record.
        assert probe.call("initgroups", "MCALICE").status == NSS_STATUS_UNAVAIL
        ig.store("MCALICE", "mcalice", gids[:3])
        assert probe.call("initgroups", "MCALICE").value == tuple(gids[:3])
        assert probe.call("initgroups", "mcalice").status == NSS_STATUS_UNAVAIL


def test_id_with_user_initgroups_and_groups(dirs: tuple[Path, Path], cache: MemoryCache) -> None:
    pw, gr, ig = writers(cache)
    pw.store("mcbiguser", 750001, 760000, "Big User", "/home/mcbiguser", "/bin/bash")
    gids = [760000 + i for i in range(2086)]
    for g in gids:
        gr.store(f"mcg{g}", g, ["mcbiguser"])
    ig.store("mcbiguser", "mcbiguser", gids)
    p = run_nss(["id", "mcbiguser"], *dirs)
    assert p.returncode == 0, p.stderr
    head, groups = p.stdout.strip().split(" groups=")
    assert head == "uid=750001(mcbiguser) gid=760000(mcg760000)"
    listed = groups.split(",")
    assert sorted(listed) == sorted(f"{g}(mcg{g})" for g in gids)
    assert listed[0] == "760000(mcg760000)"


def test_namespace_nsswitch_is_sss_only_unless_asked(dirs: tuple[Path, Path]) -> None:
    assert run_nss(["getent", "passwd", "root"], *dirs).returncode == 2
    p = run_nss(["getent", "passwd", "root"], *dirs, files_first=True)
    assert p.returncode == 0 and p.stdout.startswith("root:x:0:0:")


def test_use_memcache_no_is_passed_through(dirs: tuple[Path, Path], cache: MemoryCache) -> None:
    writers(cache)[0].store("mcalice", 710001, 1)
    assert getent(dirs, "passwd", "mcalice") is not None
    assert getent(dirs, "passwd", "mcalice", env={"SSS_NSS_USE_MEMCACHE": "NO"}) is None


# --- what the client must refuse --------------------------------------------------------------


def test_expired_record_is_not_served(dirs: tuple[Path, Path]) -> None:
    past = time.time() - 1000
    with (
        PasswdWriter(dirs[1] / "passwd", size_mb=1, clock=lambda: past) as old,
        GroupWriter(dirs[1] / "group", size_mb=1, timeout=3600, clock=lambda: past) as fresh,
    ):
        old.store("mcold", 710001, 1)  # expired 700 s ago
        fresh.store("mcstill", 720001, [])  # 1000 s old, but a 1 h timeout
        assert getent(dirs, "passwd", "mcold") is None
        assert getent(dirs, "passwd", "710001") is None
        assert getent(dirs, "group", "mcstill") == "mcstill:*:720001:\n"


def test_reset_old_content_is_not_served(dirs: tuple[Path, Path], cache: MemoryCache) -> None:
    pw, _, _ = writers(cache)
    pw.store("mcalice", 710001, 1, "old")
    with NssProbe(*dirs) as probe:  # keeps the old file mapped across the reset
        assert probe.call("getpwnam", "mcalice").value[4] == "old"
        pw.reset()
        assert probe.call("getpwnam", "mcalice").status == NSS_STATUS_UNAVAIL
        assert probe.call("getpwuid", 710001).status == NSS_STATUS_UNAVAIL
        assert getent(dirs, "passwd", "mcalice") is None
        pw.reset()
        pw.store("mcalice", 710001, 1, "new")
        # Client 2.8.2: the call that finds its mapping RECYCLED drops it and asks the
        # socket (a miss here), even though the new file is ready; the next call maps it.
        first = probe.call("getpwnam", "mcalice")
        assert first.status == NSS_STATUS_UNAVAIL or first.value[4] == "new"
        assert probe.call("getpwnam", "mcalice").value[4] == "new"
        assert getent(dirs, "passwd", "mcalice") == "mcalice:*:710001:1:new::\n"


def patch_header(w: McWriter, word: int, value: int) -> None:
    """Change one header word of a live file under the header barriers, as a writer would."""
    with open(w.path, "r+b") as f, mmap.mmap(f.fileno(), 56) as m:
        u32 = memoryview(m).cast("I")
        b = next_barrier(u32[H_B1])
        u32[H_B2] = b
        u32[word] = value
        u32[H_B1] = b
        u32.release()


@pytest.mark.parametrize(
    ("word", "value"),
    [(H_MAJOR, 2), (H_MAJOR, 0), (H_MINOR, 2), (H_MINOR, 0), (3, Status.RECYCLED)],
    ids=["major2", "major0", "minor2", "minor0", "recycled-in-place"],
)
def test_unusable_header_is_not_served(
    dirs: tuple[Path, Path], cache: MemoryCache, word: int, value: int
) -> None:
    pw, _, _ = writers(cache)
    pw.store("mcalice", 710001, 1)
    assert getent(dirs, "passwd", "mcalice") is not None
    patch_header(pw, word, value)
    assert getent(dirs, "passwd", "mcalice") is None
    assert getent(dirs, "passwd", "710001") is None


def test_inconsistent_header_barriers_are_not_served(
    dirs: tuple[Path, Path], cache: MemoryCache
) -> None:
    pw, _, _ = writers(cache)
    pw.store("mcalice", 710001, 1)
    with open(pw.path, "r+b") as f, mmap.mmap(f.fileno(), 56) as m:
        u32 = memoryview(m).cast("I")
        u32[H_B2] = next_barrier(u32[H_B1])  # a writer that never lowered b1
        u32.release()
    assert getent(dirs, "passwd", "mcalice") is None


# --- concurrency: one writer, 8 readers through the real client -----------------------------

_U = 16  # users, groups and initgroups lists in play


def soak_versions() -> dict[str, dict[Any, list[Any]]]:
    """The two valid versions of every record the soak writer flips between."""
    users: dict[Any, list[Any]] = {}
    groups: dict[Any, list[Any]] = {}
    initgr: dict[Any, list[Any]] = {}
    for i in range(_U):
        name, uid, gid = f"soak{i}", 770000 + i, 780000 + i
        users[name] = [
            (name, "*", uid, gid, f"Soak {i}", f"/home/{name}", "/bin/sh"),
            (name, "*", uid, gid, "v2 " + "g" * (40 + 9 * i), f"/srv/{name}", "/bin/bash"),
        ]
        groups[gid] = [
            (f"soakg{i}", "*", gid, (name,)),
            (f"soakg{i}", "*", gid, tuple(f"member{j:04d}" for j in range(60 + 12 * i))),
        ]
        initgr[name] = [(gid,), (gid, *range(790000, 790000 + 100 + 15 * i))]
    return {"users": users, "groups": groups, "initgroups": initgr}


def _soak_writer(mc_dir: str, stop: str) -> None:
    """Replace, refresh, invalidate, evict and reset until ``stop`` exists (own process)."""
    v = soak_versions()
    rng = random.Random(1)
    # Small files and hash tables: eviction and long shared chains all the time.
    pw = PasswdWriter(Path(mc_dir) / "passwd", slots=64, hash_elems=7)
    gr = GroupWriter(Path(mc_dir) / "group", slots=384, hash_elems=5)
    ig = InitgroupsWriter(Path(mc_dir) / "initgroups", slots=256, hash_elems=3)

    def put(kind: str, key: Any, ver: int) -> int:
        if kind == "users":
            name, _, uid, gid, gecos, home, shell = v["users"][key][ver]
            return pw.store(name, uid, gid, gecos, home, shell).evicted
        if kind == "groups":
            name, _, gid, members = v["groups"][key][ver]
            return gr.store(name, gid, members).evicted
        return ig.store(key, key, v["initgroups"][key][ver]).evicted

    for kind in ("users", "groups", "initgroups"):
        for key in v[kind]:
            put(kind, key, 0)
    print("ready", flush=True)
    stats: Counter[str] = Counter()
    while stats["ops"] < MIN_WRITER_OPS or not os.path.exists(stop):
        for _ in range(200):
            op = rng.random()
            kind = rng.choice(("users", "users", "groups", "initgroups"))
            key = rng.choice(list(v[kind]))
            if op < 0.95:
                stats["evicted"] += put(kind, key, rng.randrange(2))
                stats["stores"] += 1
            elif kind == "users":
                pw.invalidate_uid(v["users"][key][0][2]) if op < 0.97 else pw.invalidate_name(key)
            elif kind == "groups":
                gr.invalidate_gid(key) if op < 0.97 else gr.invalidate_name(v["groups"][key][0][0])
            else:
                ig.invalidate_name(key)
            stats["ops"] += 1
            if stats["ops"] % 5000 == 0:
                rng.choice((pw, gr, ig)).reset()
                stats["resets"] += 1
    for w in (pw, gr, ig):
        w.close()
    print(json.dumps(stats), flush=True)


def _soak_reader(seed: str, stop: str) -> None:
    """Look records up through libnss_sss until ``stop`` exists; report every answer that is
    not exactly one of the valid versions (own process, inside the namespace)."""
    v = soak_versions()
    by_uid = {ver[0][2]: name for name, ver in v["users"].items()}
    by_gname = {ver[0][0]: gid for gid, ver in v["groups"].items()}
    client = NssClient()
    rng = random.Random(int(seed))
    ops = ("getpwnam", "getpwuid", "getgrnam", "getgrgid", "initgroups")
    hits: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    bad: list[str] = []
    print("ready", flush=True)
    n = 0
    while n < MIN_READER_CALLS or n % 256 or not os.path.exists(stop):
        n += 1
        op = rng.choice(ops)
        if op in ("getpwnam", "initgroups"):
            key: str | int = rng.choice(list(v["users"]))
        elif op == "getpwuid":
            key = rng.choice(list(by_uid))
        elif op == "getgrgid":
            key = rng.choice(list(v["groups"]))
        else:
            key = rng.choice(list(by_gname))
        ans = client.call(op, str(key))
        statuses[ans.status] += 1
        if ans.status != NSS_STATUS_SUCCESS:
            continue
        if op == "getpwuid":
            valid = v["users"][by_uid[int(key)]]
        elif op == "getgrnam":
            valid = v["groups"][by_gname[str(key)]]
        else:
            valid = v[{"getpwnam": "users", "getgrgid": "groups"}.get(op, op)][key]
        if ans.value in valid:
            hits[op] += 1
        elif len(bad) < 20:
            bad.append(f"{op}({key!r}) -> {ans.value!r}"[:500])
    print(json.dumps({"calls": n, "hits": hits, "statuses": statuses, "bad": bad}), flush=True)


def run_soak(tmp_path: Path, dirs: tuple[Path, Path], seconds: float) -> dict[str, Any]:
    """Run the soak; returns the writer's and readers' totals (printed, for ``-s``)."""
    stop = tmp_path / "stop"
    code = (
        "import sys; from tests.integration.test_memcache_nss import {}; "
        "{}(sys.argv[1], sys.argv[2])"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code.format("_soak_writer", "_soak_writer"), dirs[1], stop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    readers: list[subprocess.Popen[str]] = []
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        reader = code.format("_soak_reader", "_soak_reader")
        for i in range(SOAK_READERS):
            readers.append(start_nss([sys.executable, "-c", reader, str(i), str(stop)], *dirs))
        for r in readers:
            assert r.stdout is not None and r.stdout.readline() == "ready\n", r.communicate()
        time.sleep(seconds)  # the workload's length, not a measurement
    finally:
        stop.touch()
        reports = [p.communicate(timeout=120) for p in (writer, *readers)]
    (w_out, w_err), *r_out = reports
    assert writer.returncode == 0, w_err
    wstats = json.loads(w_out)
    assert wstats["stores"] > 0 and wstats["evicted"] > 0 and wstats["resets"] >= 0
    total: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for proc, (out, err) in zip(readers, r_out, strict=True):
        assert proc.returncode == 0, err
        rep = json.loads(out)
        assert rep["bad"] == [], rep["bad"]
        # Misses fall back to the (missing) socket: UNAVAIL. Nothing else may happen.
        assert set(map(int, rep["statuses"])) <= {
            NSS_STATUS_SUCCESS, NSS_STATUS_UNAVAIL, NSS_STATUS_NOTFOUND,
        }, rep["statuses"]  # fmt: skip
        assert sum(rep["hits"].values()) > 0, rep
        total.update(rep["hits"])
        statuses.update(rep["statuses"])
    assert set(total) == {"getpwnam", "getpwuid", "getgrnam", "getgrgid", "initgroups"}, total
    summary = {"writer": wstats, "hits": total, "statuses": statuses}
    print(f"soak {seconds:g}s: {json.dumps(summary)}")
    return summary


def test_concurrent_writer_and_readers_short(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    run_soak(tmp_path, dirs, SHORT_SOAK_SECONDS)


@pytest.mark.slow
def test_concurrent_writer_and_readers_soak(
    tmp_path: Path, dirs: tuple[Path, Path], request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.getoption("markexpr") or "") and (
        "CACHED_SOAK_SECONDS" not in os.environ
    ):
        pytest.skip("the long soak runs with `make soak` (-m slow) or CACHED_SOAK_SECONDS set")
    run_soak(tmp_path, dirs, SOAK_SECONDS)
