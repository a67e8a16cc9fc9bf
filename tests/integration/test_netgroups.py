"""Netgroups through glibc and the stock libnss_sss (``netgroup: sss`` in the private
namespace of :mod:`testing.nsenv`): ``getent netgroup`` and ``innetgr(3)`` answered by
cached and by SSSD 2.8.2 from the same directory, byte for byte on the socket too;
nesting, a cycle, members named by DN, triples SSSD cannot split, an unknown netgroup;
then expiry (``cached cache -n``) and the answers with the server stopped.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.nss import protocol as nssp
from testing import nsenv
from testing import sssd as sssd_mod
from testing.daemon import CachedDaemon
from testing.slapd import Slapd

_SKIP = nsenv.skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

BASE = "dc=netgr,dc=test"
NSSWITCH = "passwd: files sss\ngroup: files sss\nnetgroup: sss\n"
NG = f"ou=netgroups,{BASE}"


def _netgroup(name: str, triples: tuple[str, ...] = (), members: tuple[str, ...] = ()) -> str:
    out = f"dn: cn={name},{NG}\nobjectClass: nisNetgroup\ncn: {name}\n"
    out += "".join(f"nisNetgroupTriple: {t}\n" for t in triples)
    out += "".join(f"memberNisNetgroup: {m}\n" for m in members)
    return out


LDIF = "\n".join([
    f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: netgr\no: netgr\n",
    f"dn: {NG}\nobjectClass: organizationalUnit\nou: netgroups\n",
    # web -> admins -> web: a cycle; admins reached by name, ops by DN.
    _netgroup("web", ("(host1,alice,example.com)", "( host2 , , )", "(,bob,)"),
              ("admins", f"cn=ops,{NG}")),
    _netgroup("admins", ("(-,carol,)",), ("web",)),
    _netgroup("ops", ("(opshost,dave,)",)),
    _netgroup("empty"),
    _netgroup("odd", ("notatriple", "(a,b)", "(h,u,d) x", "(h9,u9,d9)")),
])  # fmt: skip

NAMES = ("web", "admins", "ops", "empty", "odd", "nosuchnetgroup")
# (netgroup, host, user, domain); None: any.
QUERIES: list[tuple[str, str | None, str | None, str | None]] = [
    ("web", "host1", "alice", "example.com"),
    ("web", "host1", "alice", "other.com"),
    ("web", None, "carol", None),  # through admins
    ("web", "opshost", "dave", None),  # through ops, named by DN
    ("admins", "host2", "anyone", None),  # through the cycle back to web
    ("ops", None, "nobody", None),
    ("odd", "h9", "u9", "d9"),
    ("odd", "a", "b", None),
    ("nosuchnetgroup", None, None, None),
]

# Run in the namespace: innetgr(3) of each query, one JSON line.
INNETGR = """
import ctypes, json, sys
libc = ctypes.CDLL("libc.so.6")
libc.innetgr.argtypes = [ctypes.c_char_p] * 4
enc = lambda v: None if v is None else v.encode()
print(json.dumps([libc.innetgr(*map(enc, q)) for q in json.loads(sys.argv[1])]))
"""


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    top = tmp_path_factory.mktemp("netgrdir")
    path = top / "netgr.ldif"
    path.write_text(LDIF)
    server = Slapd(top / "slapd", path, BASE)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def getent(d: Any, name: str) -> tuple[int, str]:
    done = nsenv.run_nss(["getent", "netgroup", name], d.pipes_dir, d.mc_dir, nsswitch=NSSWITCH)
    return done.returncode, done.stdout


def innetgr(d: Any, queries: list[Any] = QUERIES) -> list[int]:
    done = nsenv.run_nss([sys.executable, "-c", INNETGR, json.dumps(queries)],
                         d.pipes_dir, d.mc_dir, nsswitch=NSSWITCH)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers: list[int] = json.loads(done.stdout)
    return answers


def setnetgrent_raw(pipes_dir: Path, name: str) -> tuple[int, bytes]:
    """The SETNETGRENT reply's status and body, after GET_VERSION, as libnss_sss asks."""
    conn = nssp.ClientConnection()
    replies = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(120)
        s.connect(str(pipes_dir / "nss"))
        for cmd, body in ((nssp.Command.GET_VERSION, nssp.version_body()),
                          (nssp.Command.SETNETGRENT, nssp.name_body(name))):  # fmt: skip
            s.sendall(conn.send_request(cmd, body))
            while isinstance(reply := conn.next_reply(), nssp.NeedData):
                data = s.recv(65536)
                assert data, "the server closed the connection"
                conn.receive_data(data)
            replies.append(reply)
    return replies[1].status, replies[1].body


def closes_on(pipes_dir: Path, cmd: int, body: bytes) -> bool:
    """Whether the server closes the connection on ``cmd`` (after GET_VERSION)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(120)
        s.connect(str(pipes_dir / "nss"))
        s.sendall(nssp.encode_request(nssp.Command.GET_VERSION, nssp.version_body()))
        assert len(s.recv(65536)) == 20
        s.sendall(nssp.encode_request(cmd, body))
        try:
            return s.recv(65536) == b""
        except ConnectionResetError:
            return True


def start_cached(workdir: Path, slapd: Slapd, **opts: Any) -> CachedDaemon:
    daemon = CachedDaemon(workdir, [slapd.uri], BASE, **opts)
    daemon.start()
    return daemon


def test_netgroups_are_sssds(slapd: Slapd, tmp_path: Path) -> None:
    reason = sssd_mod.skip_reason()
    if reason:
        pytest.skip(reason)
    cached = start_cached(tmp_path / "cached", slapd)
    sssd = sssd_mod.SssdDaemon(tmp_path / "sssd", slapd.uri, BASE)
    sssd.start()
    try:
        for name in NAMES:
            assert getent(cached, name) == getent(sssd, name), name
            assert setnetgrent_raw(cached.pipes_dir, name) == setnetgrent_raw(
                sssd.pipes_dir, name
            ), name
        assert innetgr(cached) == innetgr(sssd)
        # GETNETGRENT and ENDNETGRENT: not served by either (libnss_sss never sends them).
        for cmd, body in ((nssp.Command.GETNETGRENT, struct.pack("=I", 10)),
                          (nssp.Command.ENDNETGRENT, b"")):  # fmt: skip
            assert closes_on(cached.pipes_dir, cmd, body)
            assert closes_on(sssd.pipes_dir, cmd, body)
        # What the answers are (the same for both, as compared above).
        assert innetgr(cached) == [1, 0, 1, 1, 1, 0, 1, 0, 0]
        rc, out = getent(cached, "web")
        assert rc == 0 and "(host1,alice,example.com)" in out and "(-,carol,)" in out, out
        assert getent(cached, "nosuchnetgroup")[0] == 2
    finally:
        sssd.stop()
        cached.stop()


def test_expiry_and_offline(slapd: Slapd, tmp_path: Path) -> None:
    cached = start_cached(tmp_path / "cached", slapd)
    try:
        before = getent(cached, "ops")
        assert before[0] == 0 and "(opshost,dave,)" in before[1]
        slapd.ldap_modify(
            f"dn: cn=ops,{NG}\nchangetype: modify\nadd: nisNetgroupTriple\n"
            "nisNetgroupTriple: (newhost,erin,)\n"
        )
        assert getent(cached, "ops") == before  # valid: from the cache
        assert cached.cli("cache", "-n", "ops").returncode == 0
        after = getent(cached, "ops")
        assert "(newhost,erin,)" in after[1], after
        assert innetgr(cached, [("web", "newhost", "erin", None)]) == [1]

        # A miss is remembered (entry_negative_timeout) until `cached cache` drops it.
        assert getent(cached, "late")[0] == 2
        slapd.ldap_modify(_netgroup("late", ("(latehost,,)",)))
        assert getent(cached, "late")[0] == 2
        assert cached.cli("cache", "-N").returncode == 0
        assert getent(cached, "late") == (0, "late                  (latehost,,)\n")
        report = cached.cli("status").stdout
        assert re.search(r"requests served \([1-9]\d* netgroups\)", report), report
        assert re.search(r"initgroups lists, [1-9]\d* netgroups;", report), report

        # Expired, with the server stopped: the same answers; unknown ones not found.
        online = innetgr(cached)
        assert online == [1, 0, 1, 1, 1, 0, 1, 0, 0]
        assert cached.cli("cache", "-N").returncode == 0
        slapd.stop()
        try:
            assert getent(cached, "ops") == after
            assert innetgr(cached) == online
            assert getent(cached, "nosuchnetgroup")[0] == 2
            assert getent(cached, "neverlookedup")[0] == 2
        finally:
            slapd.start()
    finally:
        cached.stop()
        slapd.ldap_modify(
            f"dn: cn=ops,{NG}\nchangetype: modify\ndelete: nisNetgroupTriple\n"
            f"nisNetgroupTriple: (newhost,erin,)\n\ndn: cn=late,{NG}\nchangetype: delete\n"
        )
