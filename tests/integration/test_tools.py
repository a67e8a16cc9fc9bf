"""cached perf, cached cache, cached status; the memory cache through the real client."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from cached.memcache import McReader
from testing.asuser import open_the_way, run_python
from testing.marks import requires_nss
from testing.nsenv import nss_command

pytestmark = requires_nss

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def perf_json(d, *argv: str) -> dict[str, Any]:
    r = d.cli("perf", "--json", "--", *argv)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_perf_breakdown_adds_up_and_matches_slapd(daemon_factory, slapd_big):
    s = slapd_big.slapd
    d = daemon_factory(slapd_big)
    idcmd = nss_command(["id", "bigroupuser"], d.pipes_dir, d.mc_dir)
    offset = s.log_offset()
    b = perf_json(d, *idcmd)
    # The LDAP searches the daemon counted are the ones slapd logged in that window.
    assert b["ldap_searches"] == s.count_logical_searches(offset)
    assert 0 < b["ldap_searches"] <= 10
    # The parts add up: level-0 transactions + LDAP + unaccounted = total.
    assert b["level0_transactions_ms"] + b["ldap_wait_ms"] + b["unaccounted_ms"] == (
        pytest.approx(b["total_ms"], abs=0.01)
    )
    reqs = b["requests"]
    assert reqs["initgroups"]["count"] == 1 and reqs["user"]["count"] == 1
    # Each request took at least the LDAP time inside it; all of it within the total.
    assert b["ldap_wait_ms"] <= sum(r["ms"] for r in reqs.values()) <= b["total_ms"]
    assert b["writing_ms"] <= b["level0_transactions_ms"]
    assert b["entry_store_bytes"] > 0 and b["level0_transactions"] >= 1
    # The text layout is SSSD's id_perf.stp (reference §5.2).
    text = d.cli("perf", "--", "true").stdout
    assert text.splitlines()[:3] == [
        f"Total run time of true was: {text.split(': ')[1].splitlines()[0]}",
        "Number of zero-level cache transactions: 0",
        " --> Time spent in level-0 sysdb transactions: 0 ms",
    ]


def test_invalidate_everything_then_id_writes_timestamps_only(daemon_factory, slapd_big):
    s = slapd_big.slapd
    # The whole refresh inside the measured `id`: SSSD's unbounded wait, not
    # cache_first_wait's stale answer with the refresh behind it.
    d = daemon_factory(slapd_big, nss={"cache_first_wait": 0})
    idcmd = nss_command(["id", "bigroupuser"], d.pipes_dir, d.mc_dir)
    assert d.cli("perf", "--", *idcmd).returncode == 0  # cold: fills the cache
    entry_store = d.db_dir / "cache_LDAP.lmdb"
    before = digest(entry_store)
    r = d.cli("cache", "-E")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    offset = s.log_offset()
    b = perf_json(d, *idcmd)
    assert b["level0_transactions"] == 0 and b["entry_store_bytes"] == 0
    assert b["timestamp_writes"] >= 1 and b["timestamp_records"] >= 2085
    assert 0 < b["ldap_searches"] <= 10
    assert b["ldap_searches"] == s.count_logical_searches(offset)
    assert digest(entry_store) == before


def test_cache_tool_messages_and_status(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d = daemon_factory(slapd_small)
    r = d.cli("cache", "-u", "nosuchuser")
    assert (r.returncode, r.stderr) == (2, "No cache object matched the specified search\n")
    r = d.cli("cache")
    assert r.returncode == 1 and "select at least one object" in r.stderr
    r = d.cli("cache", "-E", "-d", "NOPE")
    assert r.returncode == 2 and "Could not open domain NOPE" in r.stderr
    assert d.run_nss(["getent", "passwd", exp.big_user], env=SOCKET_ONLY).returncode == 0
    assert d.cli("cache", "-u", exp.big_user).returncode == 0
    assert d.cli("cache", "-u", f"{exp.big_user}@LDAP", "-g", "large01").returncode == 0
    # Non-root: refused before anything is opened.
    r = run_python(["-m", "cached", "cache", "-E", "-c", str(d.config_path)])
    assert (r.returncode, r.stderr) == (1, "cached cache: must be run as root\n")

    st = d.cli("status")
    assert st.returncode == 0
    assert "Domain LDAP: online via " + slapd_small.slapd.uri in st.stdout
    assert "backend LDAP" in st.stdout and "responder" in st.stdout
    js = json.loads(d.cli("status", "--json").stdout)
    backend = next(c for c in js["children"] if c["name"] == "backend LDAP")
    assert backend["status"]["entries"]["users"] >= 1
    d.stop()
    st = d.cli("status")
    assert st.returncode == 3 and st.stdout.startswith("cached is not running")
    # Without the daemon, cached cache still works on the stores directly.
    assert d.cli("cache", "-E").returncode == 0


def test_control_socket_refuses_other_users(daemon_factory, slapd_small):
    d = daemon_factory(slapd_small)
    ctl = d.pipes_dir / "private" / "control"
    # Open the way to the socket and the socket itself to everyone (test directories
    # only): the peer-uid check must still refuse.
    open_the_way(ctl)
    ctl.chmod(0o666)
    code = (
        "from cached.ipc import framing as rpc\nfrom cached.ipc.ops import Op\n"
        f"try:\n    rpc.call_sync({str(ctl)!r}, Op.STATUS, timeout=5)\n"
        "except rpc.RpcError as e:\n    print('refused', e)\n"
    )
    r = run_python(["-c", code])
    assert r.stdout.startswith("refused"), (r.stdout, r.stderr)
    assert "refused a client running as uid 65534" in d.log_text()


def test_memory_cache_serves_with_the_responder_stopped(daemon_factory, slapd_big):
    exp = slapd_big.expected
    d = daemon_factory(slapd_big)
    r = d.run_nss(["id", "bigroupuser"])
    assert r.returncode == 0
    d.run_nss(["getent", "group", "large01"])
    d.stop()  # no socket any more: only the memory cache can answer
    assert not (d.pipes_dir / "nss").exists()
    u = exp.user("bigroupuser")
    r = d.run_nss(["getent", "passwd", "bigroupuser"])
    assert r.stdout.startswith(f"bigroupuser:*:{u.uid}:{u.gid}:")
    r = d.run_nss(["getent", "group", "large01"])
    assert len(r.stdout.strip().split(":")[3].split(",")) == 5000
    r = d.run_nss(["getent", "initgroups", "bigroupuser"])
    # Not the primary gid: "users" does not list the user (docs/compatibility.md §9.5).
    assert {int(g) for g in r.stdout.split()[1:]} == exp.initgroups_reply("bigroupuser", 2)
    r = d.run_nss(["id", "bigroupuser"])
    assert r.returncode == 0 and r.stdout.count(",") + 1 == 2085
    # After cached cache -E the files are recycled: the client falls back to the
    # socket, which is gone, so nothing answers.
    assert d.cli("cache", "-E").returncode == 0
    assert d.run_nss(["getent", "passwd", "bigroupuser"]).returncode == 2
    assert d.run_nss(["getent", "group", "large01"]).returncode == 2


def test_cache_e_with_the_daemon_running_sends_clients_to_the_socket(daemon_factory, slapd_small):
    exp = slapd_small.expected
    d = daemon_factory(slapd_small)
    assert d.run_nss(["getent", "passwd", exp.big_user]).returncode == 0
    mc = d.mc_dir / "passwd"
    with McReader(mc) as reader:
        seed = reader.read_header().seed
    requests = d.counters()["nss.request"][0]
    assert d.run_nss(["getent", "passwd", exp.big_user]).returncode == 0
    assert d.counters()["nss.request"][0] == requests  # answered by the memory cache
    assert d.cli("cache", "-E").returncode == 0
    assert d.run_nss(["getent", "passwd", exp.big_user]).returncode == 0
    assert d.counters()["nss.request"][0] > requests  # the socket answered
    with McReader(mc) as reader:
        assert reader.read_header().seed != seed  # a new file was published
