"""Per-host offsets from the machine-id (cached/jitter.py) and where the client uses them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cached.jitter import (
    CONNECTION_EXPIRE,
    OFFLINE_RETRY,
    REFRESH_AHEAD,
    REFRESH_PHASE,
    SEED_FILE,
    Jitter,
    next_at,
    read_machine_id,
)
from cached.ldap.client import LdapClient
from testing.backend import make_domain

ID_A = "0f3c6d1e8a7b4c2d9e1f0a2b3c4d5e6f\n"
ID_B = "8d2b7e4c1a9f4b3e8c7d6a5b4c3d2e1f\n"
PURPOSES = (CONNECTION_EXPIRE, REFRESH_AHEAD, REFRESH_PHASE, OFFLINE_RETRY)


def _host(tmp_path: Path, name: str, content: str | None) -> Jitter:
    """The jitter of a host whose machine-id file holds ``content`` (None: no file),
    with a db_dir of its own."""
    root = tmp_path / name
    (root / "db").mkdir(parents=True)
    mid = root / "machine-id"
    if content is not None:
        mid.write_text(content)
    return Jitter.for_host(str(mid), str(root / "db"))


def test_same_machine_id_same_offsets_different_ids_differ(tmp_path: Path) -> None:
    a1, a2 = _host(tmp_path, "a1", ID_A), _host(tmp_path, "a2", ID_A)
    b = _host(tmp_path, "b", ID_B)
    for purpose in PURPOSES:
        assert 0.0 <= a1.fraction(purpose) < 1.0
        # Another process reading the same id (a restart): the same offset.
        assert a1.fraction(purpose) == a2.fraction(purpose)
        assert a1.fraction(purpose) != b.fraction(purpose)
    # Each purpose its own fraction: the timers of one host are not in step.
    assert len({a1.fraction(p) for p in PURPOSES}) == len(PURPOSES)
    assert a1.offset(REFRESH_AHEAD, 378) == a1.fraction(REFRESH_AHEAD) * 378
    # The id is not what the host stores: no seed file beside a machine-id.
    assert not (tmp_path / "a1" / "db" / SEED_FILE).exists()


def test_fractions_spread_over_the_interval(tmp_path: Path) -> None:
    # 200 hosts: their fractions cover [0, 1) about evenly (a keyed hash, no cluster).
    fractions = sorted(Jitter(f"{i:032x}".encode()).fraction(CONNECTION_EXPIRE) for i in range(200))
    buckets = [0] * 10
    for f in fractions:
        buckets[int(f * 10)] += 1
    assert min(buckets) >= 5 and max(buckets) <= 40, buckets


@pytest.mark.parametrize("content", [None, "", "uninitialized\n", "0" * 32 + "\n", "xyz\n"])
def test_without_a_machine_id_a_seed_is_kept_in_db_dir(tmp_path: Path, content) -> None:
    root = tmp_path / "h"
    db = root / "db"
    db.mkdir(parents=True)
    mid = root / "machine-id"
    if content is not None:
        mid.write_text(content)
    assert read_machine_id(str(mid)) is None
    first = Jitter.for_host(str(mid), str(db))
    seed = db / SEED_FILE
    assert stat.S_IMODE(seed.stat().st_mode) == 0o600
    # The next start reads the same seed: the same offsets.
    again = Jitter.for_host(str(mid), str(db))
    assert all(first.fraction(p) == again.fraction(p) for p in PURPOSES)
    assert [p.name for p in db.iterdir()] == [SEED_FILE]  # no temporary file left
    # Another host without a machine-id draws its own.
    other = _host(tmp_path, "other", content)
    assert first.fraction(REFRESH_AHEAD) != other.fraction(REFRESH_AHEAD)


def test_a_seed_that_cannot_be_kept_still_gives_offsets(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "db"  # no such directory: nothing can be written
    j = Jitter.for_host(str(tmp_path / "no-machine-id"), str(db))
    assert 0.0 <= j.fraction(REFRESH_AHEAD) < 1.0
    assert not db.exists()


def test_the_key_is_never_shown(tmp_path: Path) -> None:
    j = _host(tmp_path, "a", ID_A)
    assert ID_A.strip() not in repr(j) and ID_A.strip() not in str(vars(j).keys())


# -- the client's timers ---------------------------------------------------------------


def _client(jitter: Jitter, now: list[float], **opts) -> LdapClient:
    cfg = make_domain(["ldap://127.0.0.1:1"], "dc=x", **opts)
    return LdapClient(cfg, clock=lambda: now[0], jitter=jitter)


def test_offline_retry_offset_is_the_hosts_share(tmp_path: Path) -> None:
    a, b = _host(tmp_path, "a", ID_A), _host(tmp_path, "b", ID_B)
    now = [1000.0]
    retries = []
    for j in (a, a, b):
        c = _client(j, now, offline_timeout=60, offline_timeout_random_offset=30)
        c._go_offline("test")
        retries.append(c.retry_in)
        # The next step of the backoff keeps the host's offset, not a new draw.
        c._go_offline("test")
        assert c.retry_in == pytest.approx(120 + a.offset(OFFLINE_RETRY, 30) if j is a else
                                           120 + b.offset(OFFLINE_RETRY, 30))  # fmt: skip
    assert retries[0] == pytest.approx(60 + a.offset(OFFLINE_RETRY, 30))
    assert retries[0] == retries[1] != retries[2]


def test_connection_lifetime_and_its_check(tmp_path: Path) -> None:
    a, b = _host(tmp_path, "a", ID_A), _host(tmp_path, "b", ID_B)
    now = [1000.0]
    ca = _client(a, now, ldap_connection_expire_timeout=900, ldap_connection_expire_offset=900)
    cb = _client(b, now, ldap_connection_expire_timeout=900, ldap_connection_expire_offset=900)
    assert ca.connection_lifetime() == pytest.approx(900 + a.offset(CONNECTION_EXPIRE, 900))
    assert ca.connection_lifetime() != cb.connection_lifetime()
    # The defaults: 900 s and a whole timeout of spread (SSSD: 900 and 0).
    cd = _client(a, now)
    assert cd.connection_lifetime() == ca.connection_lifetime()
    # 0: kept until it fails, nothing for the server check to do.
    assert _client(a, now, ldap_connection_expire_timeout=0).connection_lifetime() == 0.0

    # Connected (a stand-in connection: the check reads only the times), the server
    # check is due when the lifetime has passed.
    ca.conn, ca.connected_at = object(), now[0]  # type: ignore[assignment]
    assert ca.check_in() == pytest.approx(ca.connection_lifetime())
    now[0] += ca.connection_lifetime() - 1
    assert ca.check_in() == pytest.approx(1.0)
    assert not ca._expired()
    now[0] += 1
    assert ca.check_in() == 0.0 and ca._expired()
    ca.conn = None
    assert ca.check_in() is None  # no connection: nothing to replace


def test_seed_race_between_backends_keeps_one(tmp_path: Path, monkeypatch) -> None:
    # Two backends of one host (two domains) without a machine-id start together: the
    # second to link finds the first's seed and uses it.
    db = tmp_path / "db"
    db.mkdir()
    (db / SEED_FILE).write_bytes(b"k" * 32)
    j = Jitter.for_host(str(tmp_path / "none"), str(db))
    assert j.fraction(REFRESH_AHEAD) == Jitter(b"k" * 32).fraction(REFRESH_AHEAD)
    assert sorted(os.listdir(db)) == [SEED_FILE]


@pytest.mark.parametrize("after", [0.0, 1_765_000_000.0, 1_765_000_125.9, 1_765_003_779.0])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.999])
def test_next_at_is_the_hosts_point_of_the_period_on_the_wall_clock(
    after: float, fraction: float
) -> None:
    period = 3780.0
    at = next_at(after, period, fraction)
    assert after <= at < after + period
    # The same point of every period, counted from the epoch, wherever ``after`` is.
    assert at % period == pytest.approx(fraction * period)
    assert next_at(at, period, fraction) == at
    assert next_at(at + 1, period, fraction) == pytest.approx(at + period)


def test_scheduled_runs_of_hosts_started_together_spread_over_the_interval() -> None:
    """200 hosts started within the same 40 s: their runs a period after their start
    fall within those 40 s of every period; at their own points of the period on the
    wall clock they cover it about evenly, and a restart of a host does not move its
    point."""
    period, start = 126.0, 1_765_000_000.0
    hosts = [Jitter(f"{i:032x}".encode()) for i in range(200)]
    starts = [start + 40 * h.fraction(REFRESH_AHEAD) for h in hosts]
    runs = [
        next_at(s + period, period, h.fraction(REFRESH_PHASE))
        for s, h in zip(starts, hosts, strict=True)
    ]
    first = min(runs)
    buckets = [0] * 10  # tenths of the period after the earliest run
    for r in runs:
        buckets[min(int((r - first) / period * 10), 9)] += 1
    assert max(buckets) <= 40 and min(buckets) >= 5, buckets
    # Restarted 1,000 s later, a host's runs keep their point of the period.
    h, s = hosts[0], starts[0]
    assert next_at(s + 1000, period, h.fraction(REFRESH_PHASE)) % period == pytest.approx(
        runs[0] % period
    )
