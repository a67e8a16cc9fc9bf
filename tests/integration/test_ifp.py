"""The D-Bus interface (``cached.ifp``) against a real ``dbus-daemon`` and real clients.

Each bus here is a private ``dbus-daemon`` started by the test with its own configuration:
the system bus's default policy (deny method calls unless allowed) plus our
``contrib/dbus/org.freedesktop.sssd.infopipe.conf``, so the shipped policy file is what is
tested. One extra rule lets ``nobody`` past the bus to ``io.cached.Admin``, so that the
responder's own uid check is exercised too; any other non-root uid (``daemon``, uid 1) is
stopped by the policy. Clients are the stock tools: ``busctl`` (JSON output) for answers,
``dbus-send`` where the D-Bus error *name* matters (busctl prints only the text).
The daemons under test are real ``cached serve`` processes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.ifp.dispatch import Dispatcher, IfpError
from cached.ifp.interfaces import root_only
from cached.ifp.paths import (
    BadArgument,
    check_attrs,
    check_name,
    escape,
    parse_object_path,
    unescape,
    user_path,
)
from cached.ifp.service import MAX_INFLIGHT
from testing.asuser import run_python
from testing.checks import wait_for
from testing.daemon import CachedDaemon
from testing.faultproxy import FaultProxy
from testing.marks import requires_nss
from testing.slapd import LiveDirectory

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "contrib" / "dbus" / "org.freedesktop.sssd.infopipe.conf"

SERVICE = "org.freedesktop.sssd.infopipe"
IFP = "/org/freedesktop/sssd/infopipe"
USERS = IFP + "/Users"
GROUPS = IFP + "/Groups"
I_IFP = "org.freedesktop.sssd.infopipe"
I_USERS = I_IFP + ".Users"
I_USER = I_USERS + ".User"
I_GROUPS = I_IFP + ".Groups"
I_GROUP = I_GROUPS + ".Group"
I_ADMIN = "io.cached.Admin"
PROPS = "org.freedesktop.DBus.Properties"
NOT_FOUND = "org.freedesktop.sssd.Error.NotFound"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
LIMITS_EXCEEDED = "org.freedesktop.DBus.Error.LimitsExceeded"
DOMAIN = "LDAP"  # testing.daemon.config_text's domain

NOBODY = 65534  # let through the bus to io.cached.Admin; refused by the responder
DAEMON_UID = 1  # refused by the bus policy itself
CLIENT_TIMEOUT = 120.0
BUS_START_TIMEOUT = 10.0
RECONNECT_TIMEOUT = 30.0

pytestmark = [
    requires_nss,
    pytest.mark.skipif(
        shutil.which("dbus-daemon") is None or shutil.which("busctl") is None,
        reason="dbus-daemon and busctl are needed",
    ),
]

# The system bus's default context (Debian's /usr/share/dbus-1/system.conf), so that
# only what the included policy file allows gets through.
BUS_CONFIG = """\
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <include ignore_missing="no">{policy}</include>
  <policy user="nobody">
    <allow send_destination="org.freedesktop.sssd.infopipe" send_interface="io.cached.Admin"/>
  </policy>
</busconfig>
"""


# -- a private bus -----------------------------------------------------------------------


class DBusDaemon:
    """A ``dbus-daemon`` on a socket in a directory every uid may enter."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: that is mode 0700, and the clients run as nobody.
        self.dir = Path(tempfile.mkdtemp(prefix="cached-ifp-"))
        self.dir.chmod(0o755)
        self.socket = self.dir / "bus"
        self.address = f"unix:path={self.socket}"
        self.config = self.dir / "bus.conf"
        self.config.write_text(BUS_CONFIG.format(socket=self.socket, policy=POLICY))
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> DBusDaemon:
        self.proc = subprocess.Popen(
            ["dbus-daemon", f"--config-file={self.config}", "--nofork", "--nopidfile",
             "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        # Ready when it prints its address: it listens by then.
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("unix:"):
            self.stop()
            raise RuntimeError(f"dbus-daemon did not start: {line!r}")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(BUS_START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _as_user(uid: int | None) -> list[str]:
    if uid is None:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def call(
    bus: DBusDaemon, path: str, iface: str, method: str, sig: str = "", *args: Any,
    uid: int | None = None,
) -> list[Any]:  # fmt: skip
    """A method call through ``busctl``; the reply's values (``--json=short``)."""
    argv = [*_as_user(uid), "busctl", f"--address={bus.address}", "--json=short",
            "call", SERVICE, path, iface, method]  # fmt: skip
    if sig:
        argv += [sig, *(str(a) for a in args)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert proc.returncode == 0, f"{method} failed: {proc.stderr}"
    if not proc.stdout.strip():
        return []  # an empty reply: busctl prints nothing
    data: list[Any] = json.loads(proc.stdout)["data"]
    return data


def call_error(
    bus: DBusDaemon, path: str, iface: str, method: str, *args: str, uid: int | None = None
) -> tuple[str, str]:
    """A call through ``dbus-send`` that must fail: (error name, error text)."""
    argv = [*_as_user(uid), "dbus-send", f"--bus={bus.address}", "--print-reply",
            f"--dest={SERVICE}", path, f"{iface}.{method}", *args]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert proc.returncode != 0, f"{method} succeeded: {proc.stdout}"
    # dbus-send: "Error org.freedesktop.sssd.Error.NotFound: User not found"
    first = proc.stderr.strip().splitlines()[0]
    assert first.startswith("Error "), proc.stderr
    name, _, text = first[len("Error ") :].partition(": ")
    return name, text


def get_all(bus: DBusDaemon, path: str, iface: str, uid: int | None = None) -> dict[str, Any]:
    (props,) = call(bus, path, PROPS, "GetAll", "s", iface, uid=uid)
    return {k: v["data"] for k, v in props.items()}


def introspect(bus: DBusDaemon, path: str) -> str:
    (xml,) = call(bus, path, "org.freedesktop.DBus.Introspectable", "Introspect")
    assert isinstance(xml, str)
    return xml


def number(path: str) -> int:
    return int(path.rsplit("/", 1)[1])


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def bus_factory() -> Iterator[Callable[[], DBusDaemon]]:
    made: list[DBusDaemon] = []

    def make() -> DBusDaemon:
        bus = DBusDaemon()
        made.append(bus)
        return bus.start()

    yield make
    for bus in made:
        bus.remove()


@pytest.fixture(scope="module")
def bus() -> Iterator[DBusDaemon]:
    b = DBusDaemon().start()
    yield b
    b.remove()


@pytest.fixture(scope="module")
def ifp_small(
    tmp_path_factory: pytest.TempPathFactory, slapd_small: LiveDirectory, bus: DBusDaemon
) -> Iterator[CachedDaemon]:
    """`cached serve` on the small directory with the InfoPipe on ``bus``, shared here."""
    s = slapd_small.slapd
    workdir = tmp_path_factory.mktemp("cached_ifp")
    with CachedDaemon(workdir, [s.uri], s.base_dn, daemon={"dbus_address": bus.address}) as d:
        yield d


@pytest.fixture(scope="module")
def users(slapd_small: LiveDirectory) -> list[str]:
    """Ordinary users of the small directory (not the big user), by name."""
    exp = slapd_small.expected
    return sorted(n for n in exp.user_names() if n != exp.big_user)


def dbus_warnings(daemon: CachedDaemon) -> list[str]:
    return [
        line for line in daemon.log_text().splitlines() if " WARNING " in line and "D-Bus" in line
    ]


# -- the big user: GetUserGroups is `id -Gn` ----------------------------------------------


def test_get_user_groups_is_id_gn(
    slapd_big: LiveDirectory, daemon_factory: Callable[..., CachedDaemon],
    bus_factory: Callable[[], DBusDaemon],
) -> None:  # fmt: skip
    bus = bus_factory()
    daemon = daemon_factory(slapd_big, daemon={"dbus_address": bus.address})
    user = slapd_big.expected.big_user
    expected_count = len(slapd_big.expected.initgroups(user, 2))
    assert expected_count == 2085  # the bigroupuser scenario at nesting level 2

    (names,) = call(bus, IFP, I_IFP, "GetUserGroups", "s", user)
    proc = daemon.run_nss(["id", "-Gn", user])
    assert proc.returncode == 0, proc.stderr
    id_names = proc.stdout.split()

    assert len(names) == len(set(names)) == expected_count
    assert len(id_names) == expected_count
    assert set(names) == set(id_names)
    assert names[0] == id_names[0]  # the primary group first, as id prints it
    assert dbus_warnings(daemon) == []


# -- lookups and objects ---------------------------------------------------------------


def test_find_and_properties_round_trip(
    ifp_small: CachedDaemon, slapd_small: LiveDirectory, bus: DBusDaemon
) -> None:
    exp = slapd_small.expected
    name = exp.big_user
    u = exp.user(name)

    (path,) = call(bus, USERS, I_USERS, "FindByName", "s", name)
    assert path == f"{USERS}/{DOMAIN}/{u.uid}"
    assert call(bus, USERS, I_USERS, "FindByID", "u", u.uid) == [path]

    props = get_all(bus, path, I_USER)
    assert props["name"] == name
    assert props["uidNumber"] == u.uid
    assert props["gidNumber"] == u.gid
    assert props["gecos"] == u.gecos
    assert props["homeDirectory"] == u.home
    assert props["loginShell"] == u.shell
    assert props["domainname"] == DOMAIN
    groups = props["groups"]
    assert all(g.startswith(f"{GROUPS}/{DOMAIN}/") for g in groups)
    assert {number(g) for g in groups} == exp.initgroups(name, 2)
    (one,) = call(bus, path, PROPS, "Get", "ss", I_USER, "loginShell")
    assert one == {"type": "s", "data": u.shell}

    # SSSD's GetUserAttr: every value an array of strings; unknown attributes left out.
    (attrs,) = call(bus, IFP, I_IFP, "GetUserAttr", "sas", name, 4,
                    "name", "UIDNUMBER", "homeDirectory", "noSuchAttribute")  # fmt: skip
    assert attrs == {
        "name": {"type": "as", "data": [name]},
        "uidNumber": {"type": "as", "data": [str(u.uid)]},
        "homeDirectory": {"type": "as", "data": [u.home]},
    }

    # A group: found by name and by id, its properties, its members once resolved.
    gname = sorted(exp.direct_groups(name))[0]
    g = exp.group(gname)
    (gpath,) = call(bus, GROUPS, I_GROUPS, "FindByName", "s", gname)
    assert gpath == f"{GROUPS}/{DOMAIN}/{g.gid}"
    assert gpath in groups
    assert call(bus, GROUPS, I_GROUPS, "FindByID", "u", g.gid) == [gpath]
    gprops = get_all(bus, gpath, I_GROUP)
    assert gprops["name"] == gname
    assert gprops["gidNumber"] == g.gid
    assert path in gprops["users"]  # the big user was looked up above
    call(bus, gpath, I_GROUP, "UpdateMemberList")  # as root
    members = get_all(bus, gpath, I_GROUP)["users"]
    expected_uids = {exp.user(m).uid for m in exp.members(gname, 2)}
    assert {number(p) for p in members} == expected_uids
    assert len(members) == len(expected_uids)

    # GetUserGroups of this user is `id -Gn` too.
    (names,) = call(bus, IFP, I_IFP, "GetUserGroups", "s", name)
    proc = ifp_small.run_nss(["id", "-Gn", name])
    assert proc.returncode == 0, proc.stderr
    assert sorted(names) == sorted(proc.stdout.split())


def test_unknown_names_are_not_found(ifp_small: CachedDaemon, bus: DBusDaemon) -> None:
    missing = "nosuchuser-ifp"
    for path, iface, method, args in (
        (USERS, I_USERS, "FindByName", [f"string:{missing}"]),
        (USERS, I_USERS, "FindByID", ["uint32:4000000"]),
        (GROUPS, I_GROUPS, "FindByName", [f"string:{missing}"]),
        (GROUPS, I_GROUPS, "FindByID", ["uint32:4000000"]),
        (IFP, I_IFP, "GetUserGroups", [f"string:{missing}"]),
        (IFP, I_IFP, "GetUserAttr", [f"string:{missing}", "array:string:name"]),
        # An object path of an id the cache does not hold.
        (f"{USERS}/{DOMAIN}/4000000", PROPS, "GetAll", [f"string:{I_USER}"]),
        (f"{GROUPS}/{DOMAIN}/4000000", PROPS, "Get", [f"string:{I_GROUP}", "string:name"]),
    ):
        name, text = call_error(bus, path, iface, method, *args)
        assert name == NOT_FOUND, (method, name, text)
    assert dbus_warnings(ifp_small) == []


def test_introspection(ifp_small: CachedDaemon, bus: DBusDaemon, users: list[str]) -> None:
    root = introspect(bus, "/")
    assert '<node name="org"/>' in root
    top = introspect(bus, IFP)
    for want in (f'interface name="{I_IFP}"', f'interface name="{I_ADMIN}"',
                 '<method name="GetUserGroups">', '<node name="Users"/>'):  # fmt: skip
        assert want in top
    assert f'<node name="{DOMAIN}"/>' in introspect(bus, USERS)
    (path,) = call(bus, USERS, I_USERS, "FindByName", "s", users[1])
    user_xml = introspect(bus, path)
    assert f'interface name="{I_USER}"' in user_xml
    assert '<property name="groups" type="ao" access="read"/>' in user_xml
    # `busctl tree` walks the same nodes.
    proc = subprocess.run(["busctl", f"--address={bus.address}", "tree", "--list", SERVICE],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{USERS}/{DOMAIN}" in proc.stdout.split()


def test_hostile_calls_get_errors_and_the_responder_lives(
    ifp_small: CachedDaemon, bus: DBusDaemon, users: list[str]
) -> None:
    too_long = "a" * 257
    cases = [
        (USERS, I_USERS, "FindByName", [f"string:{too_long}"], INVALID_ARGS),
        (USERS, I_USERS, "FindByName", ["string:"], INVALID_ARGS),
        (USERS, I_USERS, "FindByName", ["uint32:5"], INVALID_ARGS),
        (USERS, I_USERS, "FindByID", ["string:5"], INVALID_ARGS),
        (USERS, I_USERS, "FindByName", [], INVALID_ARGS),
        (IFP, I_IFP, "GetUserAttr", [f"string:{users[1]}", "array:string:" + ",".join(["x"] * 65)],
         INVALID_ARGS),
        (IFP, I_IFP, "GetUserAttr", [f"string:{users[1]}", f"array:string:{too_long}"],
         INVALID_ARGS),
        (IFP, I_IFP, "Ping", ["string:pong"], INVALID_ARGS),
        (IFP, I_IFP, "NoSuchMethod", [], "org.freedesktop.DBus.Error.UnknownMethod"),
        (IFP, I_USERS, "FindByName", [f"string:{users[1]}"],
         "org.freedesktop.DBus.Error.UnknownInterface"),
        (f"{USERS}/{DOMAIN}/notanumber", PROPS, "GetAll", [f"string:{I_USER}"],
         "org.freedesktop.DBus.Error.UnknownObject"),
        (f"{USERS}/NOSUCHDOMAIN/1", PROPS, "GetAll", [f"string:{I_USER}"],
         "org.freedesktop.DBus.Error.UnknownObject"),
        (f"{USERS}/{DOMAIN}/99999999999", PROPS, "GetAll", [f"string:{I_USER}"],
         "org.freedesktop.DBus.Error.UnknownObject"),
        (f"{GROUPS}/{DOMAIN}/1", PROPS, "Get", [f"string:{I_GROUP}", "string:nosuch"],
         "org.freedesktop.DBus.Error.UnknownProperty"),
        (f"{GROUPS}/{DOMAIN}/1", PROPS, "GetAll", ["string:org.example.Nothing"],
         "org.freedesktop.DBus.Error.UnknownInterface"),
    ]  # fmt: skip
    for path, iface, method, args, error in cases:
        name, text = call_error(bus, path, iface, method, *args)
        assert name == error, (method, args[:1], name, text)
    assert call(bus, IFP, I_IFP, "Ping", "s", "PING") == ["PONG"]
    # Still answering, on D-Bus and on the NSS socket.
    assert call(bus, USERS, I_USERS, "FindByName", "s", users[2])[0].startswith(USERS)
    proc = ifp_small.run_nss(["getent", "passwd", users[2]])
    assert proc.returncode == 0 and proc.stdout.startswith(users[2] + ":"), proc.stderr
    assert "Traceback" not in ifp_small.log_text()


# -- admin: root only --------------------------------------------------------------------


def test_admin_is_root_only(
    ifp_small: CachedDaemon, slapd_small: LiveDirectory, bus: DBusDaemon, users: list[str]
) -> None:
    # Lookups are public.
    (path,) = call(bus, USERS, I_USERS, "FindByName", "s", users[3], uid=NOBODY)
    assert get_all(bus, path, I_USER, uid=NOBODY)["name"] == users[3]
    (names,) = call(bus, IFP, I_IFP, "GetUserGroups", "s", users[3], uid=NOBODY)
    assert names

    # nobody passes the bus (the test's extra rule) and is refused by the responder...
    for method, args in (("Invalidate", ["string:all", "string:", "string:"]),
                         ("Counters", []), ("Status", [])):  # fmt: skip
        name, text = call_error(bus, IFP, I_ADMIN, method, *args, uid=NOBODY)
        assert (name, text) == (ACCESS_DENIED, f"{I_ADMIN}.{method} is allowed to root only")
    (gpath,) = call(bus, GROUPS, I_GROUPS, "FindByName", "s", "users", uid=NOBODY)
    name, _ = call_error(bus, gpath, I_GROUP, "UpdateMemberList", uid=NOBODY)
    assert name == ACCESS_DENIED
    # Found in review: any user looped UpdateGroupsList, an LDAP refresh each call.
    name, _ = call_error(bus, path, I_USER, "UpdateGroupsList", uid=NOBODY)
    assert name == ACCESS_DENIED
    # ...any other user is refused by the policy file already (the bus answers).
    name, text = call_error(bus, IFP, I_ADMIN, "Counters", uid=DAEMON_UID)
    assert name == ACCESS_DENIED
    assert "Rejected send message" in text
    # Lookups through the policy file are allowed to that user too.
    assert call(bus, USERS, I_USERS, "FindByID", "u", slapd_small.expected.user(users[3]).uid,
                uid=DAEMON_UID) == [path]  # fmt: skip

    # root may: bad arguments are refused, good ones done.
    for args in (["string:everything", "string:", "string:"],
                 ["string:user", "string:", "string:"],
                 ["string:all", f"string:{users[3]}", "string:"],
                 ["string:all", "string:", "string:NOSUCHDOMAIN"]):  # fmt: skip
        name, _ = call_error(bus, IFP, I_ADMIN, "Invalidate", *args)
        assert name == INVALID_ARGS, args
    (matched,) = call(bus, IFP, I_ADMIN, "Invalidate", "sss", "user", users[3], "")
    assert matched == 1
    (matched,) = call(bus, IFP, I_ADMIN, "Invalidate", "sss", "all", "", "")
    assert matched > 1
    # The next lookups still answer (refreshed from the server).
    assert call(bus, USERS, I_USERS, "FindByName", "s", users[3]) == [path]
    assert get_all(bus, path, I_USER)["name"] == users[3]
    assert call(bus, IFP, I_IFP, "GetUserGroups", "s", users[3]) == [names]

    (counters,) = call(bus, IFP, I_ADMIN, "Counters")
    snapshot = json.loads(counters)
    assert snapshot["pid"] == ifp_small.child_pid("responder")
    assert snapshot["counters"]["ifp.request"][0] > 0
    assert snapshot["counters"]["ifp.denied"][0] >= 4
    (status,) = call(bus, IFP, I_ADMIN, "Status")
    st = json.loads(status)
    assert st["dbus"]["connected"] is True
    assert st["dbus"]["denied"] >= 4


# One connection of uid 65534 sends root-only calls: first one, then a burst that all
# arrive before any is answered. Prints the error names of the replies.
_REFUSED_CALLS = """
import asyncio, sys
from dbus_next import Message
from dbus_next.aio import MessageBus

async def main(address, burst, service, path, interface):
    bus = await MessageBus(bus_address=address).connect()
    def counters():
        return bus.call(Message(destination=service, path=path, interface=interface,
                                member="Counters"))
    replies = [await counters()]
    replies += await asyncio.gather(*(counters() for _ in range(burst)))
    print(" ".join(r.error_name or "returned" for r in replies))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:]))
"""


def test_a_refused_caller_is_refused_again_without_asking_the_bus(
    ifp_small: CachedDaemon, bus: DBusDaemon
) -> None:
    """Found in review: each root-only call of a non-root caller asked the bus daemon for
    the caller's uid and held one of the 8 admin slots for that round trip, so a user
    looping them on one connection kept root's calls short of slots. The uid is asked
    once per connection, also for calls that arrive together."""

    def queries() -> int:
        # Root's call asks for root's uid first (busctl: a new connection per call).
        (status,) = call(bus, IFP, I_ADMIN, "Status")
        return int(json.loads(status)["dbus"]["uid_queries"])

    burst = 40
    before = queries()
    r = run_python(["-c", _REFUSED_CALLS, bus.address, str(burst), SERVICE, IFP, I_ADMIN])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [ACCESS_DENIED] * (burst + 1)
    # One question for uid 65534's connection, one for root's second Status call.
    assert queries() - before == 2
    assert "Traceback" not in ifp_small.log_text()


def test_a_flood_of_lookups_leaves_the_admin_calls_their_own_budget(
    slapd_small: LiveDirectory, daemon_factory: Callable[..., CachedDaemon],
    bus_factory: Callable[[], DBusDaemon],
) -> None:  # fmt: skip
    """Found in review: the 64 calls in flight were shared by all callers, so any local
    user's lookups held by a slow directory made root's admin calls answer "too many
    calls". The server is stalled (the fault proxy forwards nothing), so each lookup of
    an unknown name stays in flight until the test heals it."""
    bus = bus_factory()
    with FaultProxy("127.0.0.1", slapd_small.slapd.port) as proxy:
        d = daemon_factory(slapd_small, uris=[proxy.uri], daemon={"dbus_address": bus.address},
                           ldap_search_timeout=120, ldap_opt_timeout=120)  # fmt: skip
        proxy.set(stall=True)
        flood: list[subprocess.Popen[str]] = []
        try:
            for n in range(MAX_INFLIGHT):
                flood.append(subprocess.Popen(
                    [*_as_user(NOBODY), "busctl", f"--address={bus.address}", "--timeout=300",
                     "call", SERVICE, USERS, I_USERS, "FindByName", "s", f"nosuch{n}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                ))  # fmt: skip

            def public_full() -> bool:
                # A probe the responder takes stays in flight too (the server is
                # stalled): the budget fills whatever order the calls arrive in.
                probe = subprocess.run(
                    [*_as_user(NOBODY), "dbus-send", f"--bus={bus.address}", "--print-reply",
                     "--reply-timeout=1000", f"--dest={SERVICE}", USERS,
                     f"{I_USERS}.FindByName", "string:probe"],
                    capture_output=True, text=True, timeout=CLIENT_TIMEOUT,
                )  # fmt: skip
                return LIMITS_EXCEEDED in probe.stderr

            wait_for(public_full, "the public calls' budget to fill", CLIENT_TIMEOUT, d.log_text)
            # The administrator is still served, and the public budget is still full.
            (counters,) = call(bus, IFP, I_ADMIN, "Counters")
            assert json.loads(counters)["pid"] == d.child_pid("responder")
            (status,) = call(bus, IFP, I_ADMIN, "Status")
            assert json.loads(status)["dbus"]["inflight"] >= MAX_INFLIGHT + 1
            name, text = call_error(bus, USERS, I_USERS, "FindByName", "string:late", uid=NOBODY)
            assert (name, text) == (LIMITS_EXCEEDED, "too many calls")
        finally:
            proxy.heal()
            for proc in flood:
                try:
                    proc.wait(CLIENT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        # Healed, every flooding call got its answer (not found), none was dropped.
        assert [proc.returncode for proc in flood] == [1] * MAX_INFLIGHT
        assert "Traceback" not in d.log_text()


# -- no bus, lost bus ---------------------------------------------------------------------


class HalfClosingServer:
    """A unix socket that accepts and at once closes its sending side: not a bus.

    dbus-next 0.2.3 spins forever on such a peer during authentication, without
    yielding to the event loop; the responder must give up with a warning instead.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(4096):
                    pass

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(BUS_START_TIMEOUT)


@pytest.mark.parametrize("peer", ["missing", "half-closing"])
def test_no_bus_one_warning_and_nss_still_served(
    slapd_small: LiveDirectory, daemon_factory: Callable[..., CachedDaemon], tmp_path: Path,
    users: list[str], peer: str,
) -> None:  # fmt: skip
    path = tmp_path / "no-such-dir" / "bus"
    server = None
    if peer == "half-closing":
        path = tmp_path / "not-a-bus"
        server = HalfClosingServer(path)
    try:
        daemon = daemon_factory(slapd_small, daemon={"dbus_address": f"unix:path={path}"})
        proc = daemon.run_nss(["getent", "passwd", users[4]])
    finally:
        if server is not None:
            server.close()
    assert proc.returncode == 0 and proc.stdout.startswith(users[4] + ":"), proc.stderr
    warnings = dbus_warnings(daemon)
    assert len(warnings) == 1, daemon.log_text()
    assert f"cannot use the bus at unix:path={path}: " in warnings[0]
    reason = "FileNotFoundError" if peer == "missing" else "closed the connection"
    assert reason in warnings[0]
    assert "Traceback" not in daemon.log_text()
    assert daemon.stop() == 0


def test_bus_restart_reconnects(
    slapd_small: LiveDirectory, daemon_factory: Callable[..., CachedDaemon],
    bus_factory: Callable[[], DBusDaemon], users: list[str],
) -> None:  # fmt: skip
    bus = bus_factory()
    daemon = daemon_factory(slapd_small, daemon={"dbus_address": bus.address})
    assert call(bus, IFP, I_IFP, "Ping", "s", "ping") == ["PONG"]
    bus.stop()
    bus.start()  # a new daemon on the same socket path
    deadline = time.monotonic() + RECONNECT_TIMEOUT
    while True:
        probe = subprocess.run(
            ["busctl", f"--address={bus.address}", "call", SERVICE, IFP, I_IFP, "Ping", "s",
             "ping"], capture_output=True, text=True, timeout=CLIENT_TIMEOUT,
        )  # fmt: skip
        if probe.returncode == 0:
            break
        assert time.monotonic() < deadline, f"no reconnect:\n{daemon.log_tail()}"
        time.sleep(0.1)
    assert call(bus, USERS, I_USERS, "FindByName", "s", users[5])[0].startswith(USERS)
    warnings = dbus_warnings(daemon)
    assert len(warnings) == 1 and " lost " in warnings[0], daemon.log_text()
    assert "Traceback" not in daemon.log_text()


# -- pure parts: paths and argument checks ---------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("LDAP", "LDAP"), ("example.com", "example_2ecom"), ("", "_"), ("a_b", "a_5fb"),
     ("dé", "d_c3_a9")],
)  # fmt: skip
def test_path_escaping_is_sssds(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped
    assert unescape(escaped) == raw


def test_root_only_methods_are_told_apart_before_dispatch() -> None:
    """The service's budgets sort a call before the dispatcher sees it."""
    assert root_only(I_ADMIN, "Counters") and root_only(I_USER, "UpdateGroupsList")
    assert root_only(None, "Invalidate")  # no interface field: any root-only method
    assert not root_only(I_USERS, "FindByName") and not root_only(None, "FindByName")
    assert not root_only("org.example.Nothing", "Counters") and not root_only(I_ADMIN, None)


def test_a_burst_before_the_bus_says_who_called_holds_one_admin_slot() -> None:
    """Found in review: the root-only calls a new connection sent before the bus had
    answered who it is each took an admin slot, so one connection's burst took all 8
    and root's call answered "too many calls". While the question is out, the caller's
    other root-only calls wait without a slot (16 at most), then are refused or let in
    as the answer says: root's two calls sent at once are both served (a second
    review). The bus is a stand-in whose answers the test gives: the admission rule
    alone, without the timing a real bus adds."""
    from types import SimpleNamespace

    from dbus_next.constants import MessageType as MT
    from dbus_next.message import Message

    from cached.ifp.service import MAX_WAITING, IfpService

    class Bus:
        connected = True

        def __init__(self) -> None:
            self.sent: list[Any] = []
            self.questions: dict[str, asyncio.Future[Any]] = {}
            self.asked: list[str] = []

        def call(self, msg: Any) -> asyncio.Future[Any]:
            self.asked.append(msg.body[0])
            self.questions[msg.body[0]] = asyncio.get_running_loop().create_future()
            return self.questions[msg.body[0]]

        def answer(self, sender: str, uid: int | None) -> None:
            reply = SimpleNamespace(message_type=MT.METHOD_RETURN, signature="u", body=[uid])
            if uid is None:  # the caller hung up: the bus answers with an error
                reply = SimpleNamespace(message_type=MT.ERROR, signature="s", body=["gone"])
            self.questions[sender].set_result(reply)

        def send(self, reply: Any) -> asyncio.Future[None]:
            self.sent.append(reply)
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

    class Dispatcher:
        extra_status: Any = None

        async def call(self, *args: Any) -> tuple[str, list[Any]]:
            await asyncio.Event().wait()  # served later than this test looks
            return "s", []

        def refusal(self, what: str, _sender: str, _uid: int) -> IfpError:
            return IfpError(ACCESS_DENIED, f"{what} is allowed to root only")

    def counters(sender: str, serial: int) -> Message:
        return Message(destination=SERVICE, path=IFP, interface=I_ADMIN, member="Counters",
                       sender=sender, serial=serial)  # fmt: skip

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def go() -> None:
        service = IfpService("unix:path=/nonexistent", Dispatcher())  # type: ignore[arg-type]
        bus = service.bus = Bus()
        for n in range(40):
            assert service._on_message(bus, counters(":1.5", n + 1))
        await settle()
        assert len(service._admin_inflight) == 1
        assert [r.error_name for r in bus.sent] == [LIMITS_EXCEEDED] * (39 - MAX_WAITING)
        # root's connection: two calls at once, both let in once the bus answered.
        assert service._on_message(bus, counters(":1.6", 1))
        assert service._on_message(bus, counters(":1.6", 2))
        await settle()
        assert len(service._admin_inflight) == 2
        bus.answer(":1.6", 0)
        await settle()
        assert len(service._admin_inflight) == 3
        # The other caller is no root: its waiting calls are refused, without a slot.
        bus.sent.clear()
        bus.answer(":1.5", 65534)
        await settle()
        assert [r.error_name for r in bus.sent] == [ACCESS_DENIED] * MAX_WAITING
        # Known now: a call without an interface field is refused at once too.
        late = Message(destination=SERVICE, path=IFP, member="Counters", sender=":1.5", serial=99)
        assert service._on_message(bus, late)
        assert bus.sent[-1].error_name == ACCESS_DENIED
        assert len(service._admin_inflight) <= 3
        # A caller gone before the bus answered: its waiting calls are refused, not
        # each asked about again (a third review: 17 questions for one connection).
        for n in range(3):
            assert service._on_message(bus, counters(":1.7", n + 1))
        await settle()
        bus.sent.clear()
        bus.answer(":1.7", None)
        await settle()
        assert [r.error_name for r in bus.sent] == [ACCESS_DENIED] * 2
        assert bus.asked.count(":1.7") == 1
        service.bus = None  # the stand-in has no connection to close
        await service.close()  # cancels the calls in flight

    asyncio.run(go())


def test_object_paths() -> None:
    assert user_path("example.com", 10001) == f"{USERS}/example_2ecom/10001"
    assert parse_object_path(f"{USERS}/example_2ecom/10001", USERS) == ("example.com", 10001)
    for bad in (f"{USERS}/LDAP", f"{USERS}/LDAP/1/2", f"{USERS}/LDAP/-1", f"{USERS}/LDAP/x",
                f"{USERS}/LDAP/4294967296", f"{USERS}/_/1", f"{USERS}/a_z/1",
                f"{USERS}/_ff/1", f"{GROUPS}/LDAP/1"):  # fmt: skip
        assert parse_object_path(bad, USERS) is None, bad


def test_argument_checks() -> None:
    assert check_name("x" * 256) == "x" * 256
    for bad in ("", "x" * 257, "é" * 129, "a\0b", 5, None, b"name"):
        with pytest.raises(BadArgument):
            check_name(bad)
    assert check_attrs(["a"] * 64) == ["a"] * 64
    for attrs in (["a"] * 65, "name", [1], [""]):
        with pytest.raises(BadArgument):
            check_attrs(attrs)


class _FakeLookups:
    def __init__(self) -> None:
        self.config = type("C", (), {"domains": []})()


class _FakeAdmin:
    lookups = _FakeLookups()


async def _uid_of(sender: str | None) -> int | None:
    return {"root": 0}.get(sender or "")


def test_dispatcher_refuses_without_looking_anything_up() -> None:
    """Wrong object, interface, signature or caller: the answer comes before any lookup
    (the fake admin has no lookups to make)."""
    import asyncio

    d = Dispatcher(_FakeAdmin())  # type: ignore[arg-type]

    async def err(
        path: str, iface: str | None, member: str, sig: str, body: list[Any], sender: str | None
    ) -> str:
        with pytest.raises(IfpError) as info:
            await d.call(path, iface, member, sig, body, sender, _uid_of)
        return info.value.name

    async def run() -> None:
        assert await err("/elsewhere", I_IFP, "Ping", "s", ["ping"], "root") == (
            "org.freedesktop.DBus.Error.UnknownObject"
        )
        assert await err(IFP, I_IFP, "GetUserGroups", "u", [5], "root") == INVALID_ARGS
        assert await err(IFP, I_ADMIN, "Counters", "", [], "someone") == ACCESS_DENIED
        assert await err(IFP, I_ADMIN, "Counters", "", [], None) == ACCESS_DENIED
        assert await err(IFP, None, "FindByName", "s", ["x"], "root") == (
            "org.freedesktop.DBus.Error.UnknownMethod"
        )
        assert await d.call(IFP, None, "Ping", "s", ["ping"], None, _uid_of) == ("s", ["PONG"])

    asyncio.run(run())
    assert d.stats.denied == 2
