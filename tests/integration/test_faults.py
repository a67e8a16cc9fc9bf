"""Faults with the whole daemon running: the server frozen, stopped or restarted; the
timestamp store lost, damaged or distrusted after an unclean reboot; the cache on a full
filesystem; hostile clients on the live NSS socket; file modes; filter injection.

Everything goes through ``cached serve`` and the real ``libnss_sss`` (or raw bytes on
its socket); answers are compared with the generated directory's expected answers
(``slapd_*.expected``). "Within the timeouts" is shown by the daemon's own state, log
and counters (docs/CONTRIBUTING.md: no wall-clock thresholds); durations are only
recorded (``print``; ``pytest -s`` shows them).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import re
import socket
import stat
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import lmdb
import lmdb.verify
import pytest

from cached.cache import State, cache_paths
from cached.cache.integrity import ENTRY_TABLES, read_boot_id
from cached.cache.store import ENTRY_MAP_SIZE, Store
from cached.counters import LDAP_CONNECT
from cached.nss import protocol as p
from testing.checks import (
    BACKEND,
    DOMAIN,
    FAST_FAILOVER,
    SOCKET_ONLY,
    Answers,
    ask,
    backend_status,
    cache_states,
    closed_by_server,
    expected_answers,
    getpwnam_ok,
    kill_hard,
    nss_socket,
    read_reply,
    responder_status,
    served_answers,
    verify_entry_store,
    wait_for,
)
from testing.daemon import REPO, CachedDaemon, config_text
from testing.marks import requires_nss
from testing.procstat import proc_kib

pytestmark = requires_nss

# == the server frozen, stopped, restarted ===============================================


def test_frozen_server_cached_entries_keep_answering_and_the_domain_comes_back(
    daemon_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(slapd_small_fresh, **FAST_FAILOVER)
    want = expected_answers(exp)
    assert served_answers(d, exp) == want  # fills the cache
    assert backend_status(d)["online"]

    s.pause()  # SIGSTOP: the kernel still accepts connections, nothing answers
    try:
        assert d.cli("cache", "-E").returncode == 0  # every answer now needs the server
        before = d.counters()
        start = time.monotonic()
        got = served_answers(d, exp)
        frozen_s = time.monotonic() - start
        assert got == want  # stale, complete, correct
        # Unknown names fail at once (offline misses are not even negative-cached).
        r = d.run_nss(["getent", "passwd", "nosuchuser-frozen"], env=SOCKET_ONLY)
        assert r.returncode == 2
        st = backend_status(d)
        text = d.cli("status").stdout
        # The refreshes ended in the offline state, by timeout: the backend gave up on
        # the frozen server rather than waiting for it.
        assert not st["online"] and s.uri in st["last_error"], st
        assert "timed out" in st["last_error"] or "timeout" in st["last_error"].lower(), st
        assert f"OFFLINE: {s.uri}" in text, text
        log = d.log_text()
        assert "domain LDAP offline:" in log
        offline_ms = [
            float(ms) for ms in re.findall(r"PROFILE \S+: total=([\d.]+)ms outcome=offline", log)
        ]
        assert offline_ms, d.log_tail()
        after = d.counters()
        attempts = after[LDAP_CONNECT][0] - before.get(LDAP_CONNECT, [0])[0]
        # 55 expired lookups: connection attempts are paced by offline_timeout (1 s,
        # then 2 s), not made per lookup.
        assert 1 <= attempts < 20, attempts
    finally:
        s.resume()

    # Back: after offline_timeout a lookup reconnects and the domain is online.
    def online_again() -> bool:
        d.run_nss(["getent", "passwd", "user00001"], env=SOCKET_ONLY)
        return bool(backend_status(d)["online"])

    back_s = wait_for(online_again, "domain online after resume", log=d.log_tail)
    assert "domain LDAP back online via " + s.uri in d.log_text()
    assert served_answers(d, exp) == want
    assert cache_states(d, exp) == {State.VALID}  # refreshed from the thawed server
    print(
        f"\nfrozen slapd: 55 stale lookups + initgroups in {frozen_s:.2f} s with"
        f" {attempts} connection attempts; backend requests ending offline:"
        f" {len(offline_ms)}, the longest {max(offline_ms):.0f} ms, the next longest"
        f" {sorted(offline_ms)[-2] if len(offline_ms) > 1 else 0:.1f} ms; online"
        f" {back_s:.2f} s after resume"
    )


def test_server_restarted_mid_run_and_stopped_then_started_comes_back(
    daemon_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(slapd_small_fresh, **FAST_FAILOVER)
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    dn = exp.user("user00001").dn

    def shell_of(name: str) -> str:
        r = d.run_nss(["getent", "passwd", name], env=SOCKET_ONLY)
        return r.stdout.strip().rsplit(":", 1)[-1]

    # 1. Restarted under an idle connection: the next refresh reconnects transparently.
    s.restart()
    s.ldap_modify(f"dn: {dn}\nchangetype: modify\nreplace: loginShell\nloginShell: /bin/zsh\n")
    assert d.cli("cache", "-u", "user00001").returncode == 0
    assert shell_of("user00001") == "/bin/zsh"
    assert backend_status(d)["online"]
    assert "offline" not in d.log_text()

    # 2. Stopped: everything cached is served, the domain is offline.
    s.stop()
    assert d.cli("cache", "-E").returncode == 0
    changed = want.passwd | {"user00001": want.passwd["user00001"][: -len("bash")] + "zsh"}
    assert served_answers(d, exp) == Answers(changed, want.group, want.initgroups)
    st = backend_status(d)
    assert not st["online"] and "refused" in st["last_error"].lower(), st

    # 3. Started again (same port): the domain comes back and serves fresh data.
    s.start()
    s.ldap_modify(f"dn: {dn}\nchangetype: modify\nreplace: loginShell\nloginShell: /bin/sh\n")
    back_s = wait_for(
        lambda: shell_of("user00001") == "/bin/sh", "fresh data after start", log=d.log_tail
    )
    assert backend_status(d)["online"]
    changed["user00001"] = changed["user00001"][: -len("zsh")] + "sh"
    assert served_answers(d, exp) == Answers(changed, want.group, want.initgroups)
    assert cache_states(d, exp) == {State.VALID}
    print(f"\nstopped slapd started again: fresh answers {back_s:.2f} s later")


def test_status_after_a_restart_during_an_outage_says_when_the_cache_was_confirmed(
    daemon_factory, slapd_small_fresh
):
    """The daemon restarted while the server is down has had no answer: `cached status`
    says when the server last confirmed the cache, where it said "never" over a full
    cache (a helper's outage differential against SSSD 2.8.2)."""
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(slapd_small_fresh, **FAST_FAILOVER)
    before = time.time()
    assert served_answers(d, exp) == expected_answers(exp)
    after = time.time()
    s.stop()
    d.stop()
    d.start()
    assert served_answers(d, exp) == expected_answers(exp)  # from the cache
    st = backend_status(d)
    assert st["last_success"] == 0, st
    assert before <= st["cache_confirmed"] <= after, st
    text = d.cli("status").stdout
    assert "last successful refresh: none since the start; the cache was last confirmed" in text
    s.start()  # an answer again (a name the cache lacks goes to the server): the usual line

    def answered() -> bool:
        d.run_nss(["getent", "passwd", "nosuchuser-after"], env=SOCKET_ONLY)
        return bool(backend_status(d)["last_success"] > 0)

    wait_for(answered, "an answer from the server", log=d.log_tail)
    st = backend_status(d)
    assert st["cache_confirmed"] == 0 and "last successful refresh: 20" in d.cli("status").stdout


# == the timestamp store: lost, damaged, distrusted ======================================


def _meta(entry_path: str) -> dict[bytes, bytes]:
    store = Store(entry_path, ENTRY_TABLES, writer=False, sync=True, map_size=ENTRY_MAP_SIZE)
    try:
        with store.read() as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor(db=store.tables["meta"])}
    finally:
        store.close()


def _set_meta(entry_path: str, key: bytes, value: bytes) -> None:
    store = Store(entry_path, ENTRY_TABLES, writer=True, sync=True, map_size=ENTRY_MAP_SIZE)
    try:
        store.write([("meta", key, value)])
    finally:
        store.close()


def _garbage_under_intact_meta(path: str, rng: random.Random) -> None:
    """Random bytes over every page but the two meta pages and the main DB's root:
    liblmdb opens the file, its tables are garbage (bit rot, a torn write)."""
    data = bytearray(Path(path).read_bytes())
    (psize,) = struct.unpack_from("=I", data, 16 + 24)
    # The meta page with the higher txnid is the current one; its main DB record
    # (mm_dbs[1], 48 bytes from offset 88) ends with md_root (LMDB 0.9, 64-bit).
    txnid, meta = max((struct.unpack_from("=Q", data, m * psize + 144)[0], m) for m in (0, 1))
    (main_root,) = struct.unpack_from("=Q", data, meta * psize + 88 + 40)
    assert txnid > 0 and 2 <= main_root < len(data) // psize
    for page in range(2, len(data) // psize):
        if page != main_root:
            data[page * psize : (page + 1) * psize] = rng.randbytes(psize)
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["deleted", "garbage", "garbage-under-intact-meta", "unclean-reboot", "unclean-same-boot"],
)
def test_timestamp_store_damage_with_the_daemon_loses_nothing(
    daemon_factory, slapd_small_fresh, damage
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(slapd_small_fresh, **FAST_FAILOVER)
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    assert cache_states(d, exp) == {State.VALID}
    entry_path, ts_path = cache_paths(str(d.db_dir), DOMAIN)

    if damage.startswith("unclean"):
        kill_hard(d)  # no process shuts down cleanly
        meta = _meta(entry_path)
        assert meta[b"clean"] == b"0" and meta[b"boot_id"] == read_boot_id().encode()
        if damage == "unclean-reboot":
            # The same files seen by the next boot: another boot id, clean=0.
            _set_meta(entry_path, b"boot_id", b"simulated-previous-boot")
    else:
        assert d.stop() == 0
        assert _meta(entry_path)[b"clean"] == b"1"
        if damage == "deleted":
            os.unlink(ts_path)
        elif damage == "garbage":
            size = os.path.getsize(ts_path)
            Path(ts_path).write_bytes(random.Random(1).randbytes(size))
        else:
            _garbage_under_intact_meta(ts_path, random.Random(8))

    s.stop()  # whatever is served next comes from the cache
    d.start()
    st = backend_status(d)
    if damage == "unclean-same-boot":
        # A crash without a reboot: the no-sync store survived in the page cache.
        assert st["ts_rebuilt"] == "" and cache_states(d, exp) == {State.VALID}
    else:
        if damage != "deleted":  # a missing store is simply created, without a word
            assert st["ts_rebuilt"], st
            assert "recreating it empty (every entry reads as expired, none is lost)" in (
                d.log_text()
            )
        if damage == "unclean-reboot":
            assert "did not shut down cleanly before a reboot" in st["ts_rebuilt"]
        assert cache_states(d, exp) == {State.EXPIRED}
    # The server is down: every entry is still served, complete and correct.
    assert served_answers(d, exp) == want
    assert "Traceback" not in d.log_text()

    # The server back: entries are refreshed (and valid) again.
    s.start()
    wait_for(
        lambda: served_answers(d, exp) == want and cache_states(d, exp) == {State.VALID},
        "entries refreshed",
        log=d.log_tail,
    )
    assert verify_entry_store(d.db_dir).users == len(exp.user_names())


@pytest.mark.parametrize("damage", ["truncated", "pages-zeroed", "garbage"])
def test_entry_store_damage_is_set_aside_and_the_daemon_starts_empty(
    daemon_factory, slapd_small_fresh, damage
):
    """Found in review: a truncated or garbled entry store stopped `cached serve` from
    starting at all (the backend died of SIGBUS or MDB_CORRUPTED opening it). The
    backend walks it at start in a child process; a damaged one is moved aside, and the
    daemon starts with an empty cache and answers from the directory."""
    exp = slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(slapd_small_fresh, **FAST_FAILOVER)
    want = expected_answers(exp)
    assert served_answers(d, exp) == want
    entry_path, _ = cache_paths(str(d.db_dir), DOMAIN)
    assert d.stop() == 0
    size = os.path.getsize(entry_path)
    if damage == "truncated":
        os.truncate(entry_path, size // 2)
    elif damage == "pages-zeroed":  # the meta pages intact, the tree's pages gone
        with open(entry_path, "r+b") as f:
            f.seek(size // 2)
            f.write(bytes(size - size // 2))
    else:
        Path(entry_path).write_bytes(random.Random(5).randbytes(size))
    damaged = Path(entry_path).read_bytes()
    if damage != "pages-zeroed":  # a reader never walks the store: the size is checked
        # Found in review: `cached cache -E` died of "Bus error" on a truncated store.
        r = d.cli("cache", "-E")
        assert r.returncode == 1, r
        assert r.stderr.startswith(f"cached cache: {entry_path}: the entry store is damaged (")
        assert r.stderr.endswith("nothing was invalidated in domain LDAP\n")

    d.start()
    log = d.log_text()
    assert f"{entry_path}: entry store " in log, log[-2000:]
    assert f"moved to {entry_path}.damaged, starting with an empty cache" in log
    assert Path(entry_path + ".damaged").read_bytes() == damaged  # kept as it was
    assert cache_states(d, exp) == {State.MISSING}
    assert served_answers(d, exp) == want
    assert "Traceback" not in log
    # Stored again, and the next start walks the new store without a word.
    assert verify_entry_store(d.db_dir).users == len(exp.user_names())
    assert d.stop() == 0
    d.start()
    assert d.log_text().count("starting with an empty cache") == 1
    assert cache_states(d, exp) == {State.VALID}


# == a full filesystem ===================================================================


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of our own (unmounted afterwards), to hold the cache files."""
    mnt = tmp_path / "dbfs"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "cached-test-dbfs", str(mnt)],
        check=True,
    )
    try:
        yield mnt
    finally:
        r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, check=False)
        if r.returncode != 0:  # still busy (a process of a failed test): detach it
            subprocess.run(["umount", "--lazy", str(mnt)], check=True)


def fill_up(directory: Path, name: str = "filler") -> Path:
    """Write a file until the filesystem is full; returns it."""
    filler = directory / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        block = b"\xa5" * 65536
        while True:
            try:
                os.write(fd, block)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def test_full_filesystem_keeps_answers_logs_the_file_and_recovers(
    small_fs, daemon_factory, slapd_small_fresh
):
    s, exp = slapd_small_fresh.slapd, slapd_small_fresh.expected
    d: CachedDaemon = daemon_factory(
        slapd_small_fresh, daemon={"db_dir": small_fs}, **FAST_FAILOVER
    )
    entry_path, ts_path = cache_paths(str(small_fs), DOMAIN)
    # What cached gets wrong here is collected and asserted last, so that one failure
    # does not hide the checks after it.
    failures: list[str] = []
    try:
        want = expected_answers(exp)
        assert served_answers(d, exp) == want
        # 300 more users cached before the filesystem fills (a timestamp store of some
        # pages), 300 new ones and a changed group for the entry store to take when full.
        old = [f"olduser{i:03d}" for i in range(300)]
        new = [f"fulluser{i:03d}" for i in range(300)]
        s.ldap_modify(
            "".join(
                f"dn: uid={n},ou=people,{s.base_dn}\nobjectClass: inetOrgPerson\n"
                f"objectClass: posixAccount\ncn: {n} {'x' * 200}\nsn: {n}\nuid: {n}\n"
                f"uidNumber: {30000 + i}\ngidNumber: 10000\nhomeDirectory: /home/{n}\n\n"
                for i, n in enumerate(old + new)
            )
            + f"dn: {exp.group('large01').dn}\nchangetype: modify\nadd: member\n"
            + "".join(f"member: uid={n},ou=people,{s.base_dn}\n" for n in new)
        )
        r = d.run_nss(["getent", "passwd", *old], env=SOCKET_ONLY)
        assert len(r.stdout.splitlines()) == len(old)
        assert d.cli("cache", "-g", "large01").returncode == 0  # to be refreshed when full
        large01 = want.group["large01"]
        large01_new = (large01[0], large01[1] | set(new))
        pids = {BACKEND: d.child_pid(BACKEND), "responder": d.child_pid("responder")}
        log_offset = len(d.log_text())
        filler = fill_up(small_fs)

        # 1. Full, running: everything cached is still answered, nothing crashes. (A
        # write that fits in pages LMDB freed earlier still succeeds: large01 may be
        # either version.)
        got = served_answers(d, exp)
        assert got.group.pop("large01") in (large01, large01_new)
        assert (got.passwd, got.initgroups) == (want.passwd, want.initgroups)
        assert got.group == {g: v for g, v in want.group.items() if g != "large01"}
        r = d.run_nss(["getent", "passwd", *old], env=SOCKET_ONLY)
        assert len(r.stdout.splitlines()) == len(old)
        r = d.run_nss(["getent", "passwd", *new[:50]], env=SOCKET_ONLY)
        full_answered = len(r.stdout.splitlines())
        assert {BACKEND: d.child_pid(BACKEND), "responder": d.child_pid("responder")} == pids
        log = d.log_text()[log_offset:]
        # The failed writes are logged (liblmdb reports ENOSPC, or EIO when the kernel
        # took part of a write: a short pwrite is EIO in mdb_page_flush)...
        errors = [line for line in log.splitlines() if "mdb_txn_commit" in line]
        assert errors, d.log_tail()
        # ...clearly: naming the file that could not be written (docs/CONTRIBUTING.md:
        # errors name the file at fault) and saying that its filesystem is full.
        if not any(entry_path in line or ts_path in line for line in errors):
            failures.append("no error names the file:\n  " + "\n  ".join(errors[:2]))
        if not any("No space left on device" in line for line in errors):
            failures.append("no error says the filesystem is full: " + errors[0])
        tracebacks = log.count("Traceback")
        if tracebacks:
            failures.append(f"{tracebacks} tracebacks logged while the filesystem was full")

        # 2. `cached cache -E` on the full filesystem: done, or a clear message that
        # names the file, not a traceback.
        r = d.cli("cache", "-E")
        tool_status = r.returncode
        if r.returncode != 0 and ("Traceback" in r.stderr or ts_path not in r.stderr):
            failures.append(
                f"cached cache -E on a full filesystem: exit {r.returncode},"
                f" stderr ends {r.stderr.strip().splitlines()[-1:]}"
            )

        # 3. Restarted while still full: what is cached must still be served.
        d.stop()
        try:
            d.start()
        except RuntimeError as e:
            last = [line for line in str(e).splitlines() if "Error" in line][-3:]
            failures.append(f"cached serve does not start on a full filesystem: {last}")
        else:
            got = served_answers(d, exp)
            assert got.group.pop("large01") in (large01, large01_new)
            assert (got.passwd, got.initgroups) == (want.passwd, want.initgroups)

        # 4. Worse: the timestamp store lost as well (deleted, or damaged and dropped
        # at start). The entry store holds everything; it must still be served.
        d.stop()
        os.unlink(ts_path)
        filler2 = fill_up(small_fs, "filler2")
        try:
            d.start()
        except RuntimeError as e:
            last = [line for line in str(e).splitlines() if "Error" in line][-2:]
            failures.append(
                f"cached serve does not start when the timestamp store must be"
                f" created on a full filesystem: {last}"
            )
        else:
            got = served_answers(d, exp)
            assert got.group.pop("large01") in (large01, large01_new)
            assert (got.passwd, got.initgroups) == (want.passwd, want.initgroups)
        filler2.unlink()

        # 5. Space again: writes resume (without a restart when it was running), the
        # new content is served.
        filler.unlink()
        d.start()
        assert d.cli("cache", "-E").returncode == 0
        r = d.run_nss(["getent", "passwd", *new], env=SOCKET_ONLY)
        assert r.returncode == 0 and len(r.stdout.splitlines()) == len(new), r.stderr
        r = d.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)
        assert set(r.stdout.strip().split(":")[3].split(",")) == large01_new[1]
        print(
            f"\nfull filesystem: {full_answered}/50 new users answered while full;"
            f" cached cache -E exit {tool_status}"
        )
    finally:
        d.stop()
    # No corruption: both stores pass LMDB's structural check, every record decodes.
    for path in (entry_path, ts_path):
        assert lmdb.verify.verify(path, subdir=False) == [], path
    report = verify_entry_store(small_fs)
    assert report.users == len(exp.user_names()) + len(old) + len(new)
    assert not failures, "\n".join(failures)


# == hostile clients on the live socket ==================================================


def test_oversize_requests_are_cut_off_at_the_length_field(cached_small):
    d = cached_small
    responder = d.child_pid("responder")
    rss_before = proc_kib(responder)
    # A length field of 4 GiB, alone: closed as soon as it arrives, no waiting for
    # the body.
    with nss_socket(d) as sock:
        sock.sendall(struct.pack("=I", 0xFFFFFFFF))
        assert closed_by_server(sock)
    # One byte over the cap, with a valid command: closed.
    with nss_socket(d) as sock:
        sock.sendall(struct.pack("=4I", p.MAX_REQUEST_SIZE + 1, p.Command.GETPWNAM, 0, 0))
        assert closed_by_server(sock)
    # Exactly the cap: framed, so a body error (a 1,007-byte name) is EINVAL and the
    # connection goes on serving.
    with nss_socket(d) as sock:
        body = b"u" * (p.MAX_REQUEST_SIZE - 16 - 1) + b"\0"
        assert ask(sock, p.Command.GETPWNAM, body) == (p.Command.GETPWNAM, errno.EINVAL, b"")
        assert getpwnam_ok(sock, "user00001")
    # 16 MiB streamed at the socket: the server stops reading after 4 bytes and closes;
    # we get EPIPE/ECONNRESET long before the end, and it buffered nothing of it.
    sent = 0
    with nss_socket(d) as sock:
        chunk = struct.pack("=I", 5000) + os.urandom(65532)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(256):
                sock.sendall(chunk)
                sent += len(chunk)
    assert sent < 16 << 20
    assert proc_kib(responder) - rss_before < 8 * 1024
    assert d.run_nss(["getent", "passwd", "user00001"], env=SOCKET_ONLY).returncode == 0


def test_half_closed_client_still_gets_its_replies(cached_small, slapd_small):
    exp = slapd_small.expected
    u = exp.user("user00001")
    with nss_socket(cached_small) as sock:
        # Two requests (libnss_sss never pipelines, but the protocol allows it), then
        # our side shut for writing: both replies arrive, then the server closes.
        sock.sendall(
            p.encode_request(p.Command.GET_VERSION, p.version_body())
            + p.encode_request(p.Command.GETPWUID, p.id_body(u.uid))
        )
        sock.shutdown(socket.SHUT_WR)
        version = read_reply(sock)
        assert version is not None and p.decode_version(version[2]) == 1
        reply = read_reply(sock)
        assert reply is not None and reply[1] == 0
        assert [x.name for x in p.decode_passwd(reply[2])] == [u.name]
        assert closed_by_server(sock)
    with nss_socket(cached_small) as sock:
        # Half a request, then EOF: closed without an answer, no hang.
        sock.sendall(p.encode_request(p.Command.GETPWNAM, p.name_body(u.name))[:10])
        sock.shutdown(socket.SHUT_WR)
        assert read_reply(sock) is None


def test_idle_connections_are_closed_after_client_idle_timeout(daemon_factory, slapd_small):
    d: CachedDaemon = daemon_factory(slapd_small, nss={"client_idle_timeout": 10})
    socks: dict[str, list[socket.socket]] = {"silent": [], "after-a-request": [], "partial": []}
    busy = nss_socket(d)  # one that keeps talking must stay
    try:
        for _ in range(300):
            socks["silent"].append(nss_socket(d))
        for _ in range(10):
            sock = nss_socket(d)
            socks["after-a-request"].append(sock)
            assert getpwnam_ok(sock, "user00001")
            sock = nss_socket(d)
            socks["partial"].append(sock)
            sock.sendall(p.encode_request(p.Command.GETPWNAM, p.name_body("user00001"))[:7])
        wait_for(lambda: responder_status(d)["connections"] == 321, "321 connections")
        rss_idle = proc_kib(d.child_pid("responder"))
        start = time.monotonic()
        open_socks = [s for group in socks.values() for s in group]
        for s in open_socks:
            s.setblocking(False)

        def all_idle_closed() -> bool:
            assert getpwnam_ok(busy, "user00002")
            for s in list(open_socks):
                with contextlib.suppress(BlockingIOError):
                    if closed_by_server(s):
                        open_socks.remove(s)
            return not open_socks

        wait_for(all_idle_closed, "idle connections closed", timeout=40, log=d.log_tail)
        closed_s = time.monotonic() - start
        assert responder_status(d)["connections"] == 1  # the busy one
        assert getpwnam_ok(busy, "user00003")
    finally:
        busy.close()
        for group in socks.values():
            for s in group:
                s.close()
    print(
        f"\nidle timeout 10 s: 320 idle connections closed {closed_s:.1f} s after the"
        f" check; responder RSS with them open {rss_idle / 1024:.1f} MiB"
    )


def test_max_clients_refuses_the_21st_connection_and_serves_the_others(daemon_factory, slapd_small):
    d: CachedDaemon = daemon_factory(slapd_small, nss={"max_clients": 20})
    socks = [nss_socket(d) for _ in range(20)]
    try:
        for s in socks:
            assert ask(s, p.Command.GET_VERSION, p.version_body()) is not None
        assert responder_status(d)["connections"] == 20
        # The 21st: accepted by the kernel, closed by the responder at once.
        with nss_socket(d) as extra:
            assert closed_by_server(extra)
        assert "refusing an NSS client: 20 connections (max_clients)" in d.log_text()
        assert responder_status(d)["refused"] == 1
        # A real client at the cap fails at once (UNAVAIL: getent exit 2), never hangs.
        r = d.run_nss(["getent", "passwd", "user00001"], env=SOCKET_ONLY)
        assert r.returncode == 2
        # The 20 still work.
        for i, s in enumerate(socks):
            assert getpwnam_ok(s, f"user{i + 1:05d}")
        # One leaves: there is room again.
        socks.pop().close()
        wait_for(lambda: responder_status(d)["connections"] == 19, "a free slot")
        r = d.run_nss(["getent", "passwd", "user00001"], env=SOCKET_ONLY)
        assert r.returncode == 0
    finally:
        for s in socks:
            s.close()


def _queued_bytes(sock: socket.socket) -> int:
    buf = bytearray(4)
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return int(struct.unpack("=I", buf)[0])


def test_clients_that_never_read_a_huge_reply_do_not_stop_the_others(cached_big, slapd_big):
    exp = slapd_big.expected
    d = cached_big
    r = d.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)  # cached now
    assert len(r.stdout.strip().split(":")[3].split(",")) == 5000
    responder = d.child_pid("responder")
    rss_before = proc_kib(responder)
    request = p.encode_request(p.Command.GETGRNAM, p.name_body("large01"))
    stuck = []
    try:
        # 10 clients, each asking for the 5,000-member group 200 times (~10 MB of
        # replies each) and never reading.
        for _ in range(10):
            s = nss_socket(d)
            s.sendall(request * 200)
            stuck.append(s)

        def blocked() -> bool:
            # The kernel buffers of every stuck client are full and stay full.
            before = [_queued_bytes(s) for s in stuck]
            time.sleep(0.2)  # two samples apart: is the server still sending?
            return min(before) > 50_000 and before == [_queued_bytes(s) for s in stuck]

        wait_for(blocked, "the stuck clients' buffers full")
        # Everyone else is served meanwhile, the huge reply included.
        r = d.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)
        assert set(r.stdout.strip().split(":")[3].split(",")) == exp.members("large01", 2)
        r = d.run_nss(["id", "bigroupuser"], env=SOCKET_ONLY)
        assert r.returncode == 0 and r.stdout.count(",") + 1 == len(exp.initgroups(exp.big_user, 2))
        # Memory: at most one reply and the transport's write buffer per stuck client
        # (~0.2 MB each), not the 100 MB they asked for.
        grown = proc_kib(responder) - rss_before
        assert grown < 32 * 1024, f"responder grew {grown} KiB"
        assert responder_status(d)["connections"] >= 10
    finally:
        for s in stuck:
            s.close()
    wait_for(lambda: responder_status(d)["connections"] == 0, "stuck connections dropped")
    print(f"\n10 clients not reading 2,000 x 5,000-member replies: responder +{grown} KiB")


# == security ============================================================================


def test_socket_and_directory_modes(cached_small):
    d = cached_small
    private = d.pipes_dir / "private"

    def mode(path: Path) -> int:
        st = path.stat()
        assert st.st_uid == 0, path
        return stat.S_IMODE(st.st_mode)

    assert stat.S_ISSOCK((d.pipes_dir / "nss").stat().st_mode)
    assert mode(d.pipes_dir / "nss") == 0o666  # public, as SSSD's (reference §1.8)
    assert mode(private) == 0o700
    for name in ("control", "responder", "be_LDAP"):
        assert mode(private / name) == 0o600, name
    assert mode(d.db_dir) == 0o700


def test_bind_password_in_a_world_readable_config_is_refused_by_serve(tmp_path, slapd_small):
    s = slapd_small.slapd
    conf = tmp_path / "cached.conf"
    conf.write_text(
        config_text(
            [s.uri],
            s.base_dn,
            tmp_path,
            ldap_default_bind_dn=s.root_dn,
            ldap_default_authtok=s.root_pw,
        )
    )
    conf.chmod(0o644)
    r = subprocess.run(
        [sys.executable, "-m", "cached", "serve", "-c", str(conf)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().endswith(
        f"cached: {conf}: [domain/LDAP] holds ldap_default_authtok, but the file is mode 0644"
        f" (readable by group or others); run: chmod 600 {conf}"
    ), r.stderr
    assert not (tmp_path / "pipes").exists() and not (tmp_path / "cached.pid").exists()


INJECTIONS = ["*)(uid=*", "*", "user0000*", "x)(|(objectClass=*", "a\\2a", "*)(cn=*", "(", ")"]


def rfc4515(value: str) -> str:
    """RFC 4515 §3 escaping (slapd logs the hex digits in upper case)."""
    return "".join(f"\\{ord(c):02x}" if c in "*()\\\0" else c for c in value)


def test_filter_injection_through_the_nss_socket_is_escaped(cached_small, slapd_small):
    s, d = slapd_small.slapd, cached_small
    # The filters of a harmless name are the templates every other name must fill.
    offset = s.log_offset()
    for db in ("passwd", "group"):
        assert d.run_nss(["getent", db, "plainname"], env=SOCKET_ONLY).returncode == 2
    templates = {op.filter for op in s.searches(offset) if op.base}
    assert len(templates) == 2 and all("plainname" in t for t in templates), templates

    offset = s.log_offset()
    for value in INJECTIONS:
        for db in ("passwd", "group"):
            r = d.run_nss(["getent", db, value], env=SOCKET_ONLY)
            assert (r.returncode, r.stdout) == (2, ""), (db, value, r.stdout)
        # getent initgroups prints the name whatever happens; no group may follow it.
        r = d.run_nss(["getent", "initgroups", value], env=SOCKET_ONLY)
        assert r.stdout.split() == [value], (value, r.stdout)
    # slapd logs the filter it parsed: each is a template filled with one escaped
    # value, so no wildcard, parenthesis or extra term of a name ever reached it.
    # (slapd logs the normalized value of a case-insensitive attribute: compare lower.)
    allowed = {t.replace("plainname", rfc4515(v)).lower() for t in templates for v in INJECTIONS}
    logged = {op.filter.lower() for op in s.searches(offset) if op.base}
    assert logged <= allowed, sorted(logged - allowed)
    assert "(uid=\\2a\\29\\28uid=\\2a)" in " ".join(logged), logged
