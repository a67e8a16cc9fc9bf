"""A throwaway real Active Directory domain controller (Samba 4) for tests and perf/.

Like :class:`testing.slapd.Slapd`, but for the ``ldap_schema = ad`` work: the shapes only a
real AD has (objectSid, tokenGroups, primaryGroupID, ranged ``member;range=`` values,
continuation references at the domain root) come from a real DC, not from a schema
bolted onto slapd. What this takes on Debian 12, measured on the 2-core machine:

* packages ``samba samba-dsdb-modules samba-vfs-modules samba-ad-provision`` and
  ``python3-samba`` (``contrib/install-deps``); ``samba-vfs-modules`` is needed
  or provisioning fails on ``acl_xattr.so``;
* ``samba-tool domain provision`` with every run-time path moved into the work
  directory: 7-11 s;
* provisioning writes no ``ldap server require strong auth``: without ``= no`` simple
  binds over plain LDAP are refused, so it is added; ``server services = ldap`` is all
  a directory for NSS needs and starts in 1-5 s instead of ~15;
* ports 389/636/3268/3269 are compiled in, so the DC runs in its own network namespace
  (``unshare -n``, loopback up): it can never clash with a port on the host. Clients on
  the host reach it through its ``private/ldapi`` socket, which accepts simple binds;
* with ``s3fs winbindd`` in ``server services`` the DC serves SMB (SYSVOL). smbd maps
  each session's SIDs to Unix IDs through winbindd, found by libwbclient only at its
  compiled-in ``/run/samba/winbindd``, and enters a share as the session's Unix user:
  so samba runs in a mount namespace of its own where ``/run/samba`` is the work
  directory's ``run/`` and SYSVOL is mounted below it (start());
* data is written with Samba's own Python bindings (``/usr/bin/python3``, not the
  project's venv) into ``sam.ldb`` while the DC is stopped, so objectSid, RIDs and
  ``primaryGroupID`` are assigned by Samba exactly as for ``samba-tool user add``
  (:mod:`testing.addc_load`).

Readiness is a real bind and base search over ldapi, never a sleep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ldap3
from ldap3.core.exceptions import LDAPException, LDAPStrongerAuthRequiredResult

from testing import procstat
from testing.service import Service
from testing.slapd import TLSFiles

SAMBA = "/usr/sbin/samba"
SAMBA_TOOL = "/usr/bin/samba-tool"
# libwbclient (smbd's client of winbindd) looks for winbindd's socket in its winbindd/.
WBCLIENT_DIR = "/run/samba"
SYSTEM_PYTHON = "/usr/bin/python3"  # has python3-samba; the venv does not
LOADER = Path(__file__).resolve().parent / "addc_load.py"

REALM = "CACHED.TEST"
NETBIOS_DOMAIN = "CACHED"
BASE_DN = "DC=cached,DC=test"
ADMIN_DN = f"CN=Administrator,CN=Users,{BASE_DN}"
# Samba's default password policy wants complexity and length 7+.
ADMIN_PW = "Adm1n-Passw0rd!"

# Measured: provisioning 7-11 s, start 1-5 s on the idle 2-core machine; the margins
# are for CI's loaded one.
PROVISION_TIMEOUT = 180.0
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
LOAD_TIMEOUT = 600.0
# sun_path is 108 bytes (unix(7)): <workdir>/private/ldapi must fit.
MAX_SOCKET_PATH = 107


class SambaError(RuntimeError):
    pass


def available() -> str | None:
    """None when a DC can run here, else what is missing."""
    missing = [p for p in (SAMBA, SAMBA_TOOL, SYSTEM_PYTHON) if not os.access(p, os.X_OK)]
    if missing:
        return f"missing {', '.join(missing)} (contrib/install-deps installs them)"
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import samba.samdb"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return "python3-samba is not installed (contrib/install-deps installs it)"
    return None


@dataclass
class ADEntry:
    """One object to load: its DN and attributes (strings; lists for many values)."""

    dn: str
    attrs: dict[str, str | list[str]] = field(default_factory=dict)


@dataclass
class ADUser:
    """A user to create with a password and POSIX attributes, as ``samba-tool user
    create``; ``disabled`` / ``expired`` (accountExpires now) / ``must_change`` (at the
    next login) as ``user disable``, ``user setexpiry --days=0`` and
    ``--must-change-at-next-login``."""

    login: str
    password: str
    uid: int
    gid: int
    shell: str = "/bin/sh"
    home: str = ""
    disabled: bool = False
    expired: bool = False
    must_change: bool = False


class SambaDC(Service):
    """A provisioned Samba AD DC in ``workdir``; start()/stop() or a context manager."""

    def __init__(self, workdir: str | os.PathLike[str], *, netns_pid: int | None = None,
                 etc: Path | None = None) -> None:  # fmt: skip
        """``netns_pid``: run samba in the network namespace of that process (one the
        caller made, e.g. with a veth pair to a client's namespace) rather than in a
        new one of its own with loopback only. ``etc``: a directory samba sees as
        ``/etc`` (its resolv.conf and hosts: a DC that finds another by name)."""
        self.workdir = Path(workdir).resolve()
        self.netns_pid = netns_pid
        self.etc = etc
        self.conf = self.workdir / "etc" / "smb.conf"
        self.socket_path = self.workdir / "private" / "ldapi"
        self.log_path = self.workdir / "samba.out"
        self._proc: subprocess.Popen[bytes] | None = None
        self.domain_sid = ""
        self.tls: TLSFiles | None = None
        if len(str(self.socket_path).encode()) > MAX_SOCKET_PATH:
            raise SambaError(
                f"work directory {self.workdir} is too long for the DC's ldapi socket"
                f" ({MAX_SOCKET_PATH} bytes at most); use a shorter temporary directory"
            )

    # -- properties ----------------------------------------------------------------

    @property
    def base_dn(self) -> str:
        return BASE_DN

    @property
    def admin_dn(self) -> str:
        return ADMIN_DN

    @property
    def admin_pw(self) -> str:
        return ADMIN_PW

    @property
    def ldapi_uri(self) -> str:
        return "ldapi://" + urllib.parse.quote(str(self.socket_path), safe="")

    @property
    def smb_sysvol(self) -> Path:
        """The mount point of SYSVOL for smbd (start()), under its run directory."""
        return self.workdir / "run" / "sysvol"

    @property
    def pid(self) -> int | None:
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    # -- life cycle ----------------------------------------------------------------

    def provision(
        self,
        *,
        services: str = "ldap",
        strong_auth: bool = False,
        host_name: str = "",
        host_ip: str = "",
    ) -> None:
        """A new domain in the work directory (rfc2307 attributes in the schema).

        ``services``: Samba's ``server services``; with ``dns`` in it the DC serves
        its zone (``--dns-backend=SAMBA_INTERNAL``: the SRV records of the domain, its
        own A record at ``host_ip``). ``strong_auth``: keep Samba's default ``ldap
        server require strong auth = yes`` (simple binds only over TLS or ldapi, SASL
        binds signed or sealed), as a real DC has it. ``host_name``: the DC's own
        name (default: this machine's)."""
        empty = self._new()
        w = self.workdir
        cmd = [
            SAMBA_TOOL, "domain", "provision", "-s", str(empty), f"--targetdir={w}",
            "--dns-backend=" + ("SAMBA_INTERNAL" if "dns" in services.split() else "NONE"),
            "--use-rfc2307", "--server-role=dc",
            f"--realm={REALM}", f"--domain={NETBIOS_DOMAIN}", f"--adminpass={ADMIN_PW}",
        ]  # fmt: skip
        cmd += self._path_options()
        if host_name:
            cmd.append(f"--host-name={host_name}")
        if host_ip:
            cmd.append(f"--host-ip={host_ip}")
        out = _run(cmd, PROVISION_TIMEOUT)
        for line in out.splitlines():
            if "DOMAIN SID:" in line:
                self.domain_sid = line.rsplit(None, 1)[-1]
        self._configure(services, strong_auth)

    def join(self, server: str, *, services: str, host_name: str) -> None:
        """``samba-tool domain join REALM DC`` (a second DC of the domain, its
        directory replicated from ``server`` at the join) into the work directory,
        run in this DC's namespaces (``netns_pid``, ``etc``: ``server`` found by
        name), the Administrator's password on standard input. ``services`` and
        strong authentication as :meth:`provision`."""
        empty = self._new()
        cmd = [
            SAMBA_TOOL, "domain", "join", REALM.lower(), "DC", "-s", str(empty),
            f"--targetdir={self.workdir}", f"--server={server}", "-U", "Administrator",
            "--dns-backend=" + ("SAMBA_INTERNAL" if "dns" in services.split() else "NONE"),
            f"--option=netbios name={host_name.upper()}",
        ]  # fmt: skip
        cmd += self._path_options()
        script = self._mounts() + " && exec " + " ".join(shlex.quote(c) for c in cmd)
        _run([*self._into(), "--", "sh", "-c", script], PROVISION_TIMEOUT, input=ADMIN_PW + "\n")
        self._configure(services, True)

    def _new(self) -> Path:
        if self.conf.exists():
            raise SambaError(f"{self.workdir} is already provisioned")
        self.workdir.mkdir(parents=True, exist_ok=True)
        empty = self.workdir / "empty.conf"
        empty.write_text("")
        return empty

    def _path_options(self) -> list[str]:
        """Every run-time path of samba in the work directory, as ``--option``s."""
        w = self.workdir
        paths = {
            "pid directory": w / "run",
            "ncalrpc dir": w / "run" / "ncalrpc",
            "winbindd socket directory": w / "run" / "winbindd",
            "ntp signd socket directory": w / "run" / "ntp_signd",
            "lock dir": w / "lock",
            "state directory": w / "state",
            "cache directory": w / "cache",
            "log file": w / "log.%m",
        }
        return [f"--option={k}={v}" for k, v in paths.items()]

    def _configure(self, services: str, strong_auth: bool) -> None:
        """smb.conf after provision or join: ``server services``, strong auth, SMB."""
        text = self.conf.read_text()
        ours = f"\tserver services = {services}"
        if not strong_auth:
            ours += "\n\tldap server require strong auth = no"
        lines = []
        for line in text.splitlines():
            if line.strip().startswith("server services"):
                line, ours = ours, ""
            lines.append(line)
        if ours:  # provisioned with DNS: no such line to replace
            lines.insert(lines.index("[global]") + 1, ours)
        if "s3fs" in services.split():
            # The shares at SYSVOL's mount point (start()), as smbd sees it: its run
            # directory is WBCLIENT_DIR in samba's mount namespace.
            sysvol = str(self.workdir / "state" / "sysvol")
            mounted = f"{WBCLIENT_DIR}/{self.smb_sysvol.name}"
            lines = [line.replace(f"path = {sysvol}", f"path = {mounted}") for line in lines]
            self.smb_sysvol.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("\n".join(lines) + "\n")

    def serve_tls(self, tls: TLSFiles) -> None:
        """Serve ldaps (636) and StartTLS (389) with ``tls``'s certificate (for localhost
        and 127.0.0.1, signed by its throwaway CA) instead of the one Samba makes for
        its own name; set before start()."""
        tls.key.chmod(0o600)  # Samba refuses a key file others can read
        text = self.conf.read_text().replace(
            "[global]\n",
            f"[global]\n\ttls enabled = yes\n\ttls keyfile = {tls.key}\n"
            f"\ttls certfile = {tls.cert}\n\ttls cafile = {tls.ca_cert}\n",
            1,
        )
        self.conf.write_text(text)
        self.tls = tls

    def load(self, entries: list[ADEntry], *, modify: list[ADEntry] | None = None,
             users: list[ADUser] | None = None) -> None:  # fmt: skip
        """Add ``entries``, apply ``modify`` (attributes replaced), then create ``users``
        with Samba's own bindings; the DC must be stopped (sam.ldb is opened directly)."""
        if self.pid is not None:
            raise SambaError("stop the DC before loading data into sam.ldb")
        self._load({"add": [{"dn": e.dn, "attrs": e.attrs} for e in entries]}, modify, users)

    def add_users(self, users: list[ADUser], *, modify: list[ADEntry] | None = None) -> None:
        """Apply ``modify`` and create ``users`` on the running DC, over ldapi as the
        Administrator (the same calls as :meth:`load`)."""
        if self.pid is None:
            raise SambaError("start the DC before adding users over ldapi")
        self._load({"admin_password": ADMIN_PW}, modify, users, url=self.ldapi_uri)

    def _load(self, data: dict[str, Any], modify: list[ADEntry] | None,
              users: list[ADUser] | None, url: str | None = None) -> None:  # fmt: skip
        data["modify"] = [{"dn": e.dn, "attrs": e.attrs} for e in modify or []]
        data["users"] = [
            {**dataclasses.asdict(u), "home": u.home or f"/home/{u.login}"} for u in users or []
        ]
        path = self.workdir / "load.json"
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        _run([SYSTEM_PYTHON, "-I", str(LOADER), str(self.conf), str(path), *([url] if url else [])],
             LOAD_TIMEOUT)  # fmt: skip

    def start(self) -> None:
        if self.pid is not None:
            raise SambaError(f"samba is already running (pid {self.pid})")
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        log = self.log_path.open("ab")
        # exec: the Popen's pid is samba itself, so stop() ends exactly it.
        # The bind mount: smbd maps a session's SIDs to a Unix token through winbindd
        # (source4/auth/unix_token.c, wbcSidsToUnixIds), and libwbclient finds
        # winbindd's socket only at its compiled-in /run/samba/winbindd — it does not
        # read "winbindd socket directory" (nsswitch/wb_common.c). Without this every
        # SMB session setup fails after authentication with STATUS_INTERNAL_ERROR
        # (smb2_sesssetup.c:147). A mount namespace of samba's own puts this DC's
        # run directory there; the machine's /run/samba is left as it is (made,
        # empty, only on a machine that has none, as the mount point).
        script = "ip link set lo up && " + self._mounts()
        if self.smb_sysvol.is_dir():
            # SYSVOL's share (provision(): the path smb.conf names) is the work
            # directory's, reached without its parents: smbd enters the share as the
            # session's Unix user, who may not search a temporary directory's
            # ancestors (pytest's are 0700).
            mounted = f"{WBCLIENT_DIR}/{self.smb_sysvol.name}"
            script += f" && mount --bind {self.workdir / 'state' / 'sysvol'} {mounted}"
        script += f" && exec {SAMBA} -i -M single -s {self.conf}"
        self._proc = subprocess.Popen(
            [*self._into(), "--", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._started()
        deadline = time.monotonic() + START_TIMEOUT
        last = "no ldapi socket yet"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise SambaError(
                    f"samba exited with status {self._proc.returncode}:\n{self.tail()}"
                )
            if self.socket_path.exists():
                try:
                    conn = self.connect()
                    try:
                        conn.search(self.base_dn, "(objectClass=*)", ldap3.BASE)
                    finally:
                        conn.unbind()
                    return
                except LDAPStrongerAuthRequiredResult:
                    # require strong auth (provision(strong_auth=True)) refuses the
                    # simple bind even over ldapi: the answer says it serves.
                    return
                except LDAPException as e:
                    last = str(e)
            # Polling a socket file and a bind: there is no event to wait on.
            time.sleep(0.1)
        self.stop()
        raise SambaError(f"samba did not answer within {START_TIMEOUT:.0f} s ({last})")

    def run_inside(self, argv: list[str]) -> str:
        """``argv`` in samba's namespaces (network; /etc and the run directory)."""
        script = self._mounts() + " && exec " + " ".join(shlex.quote(a) for a in argv)
        return _run([*self._into(), "--", "sh", "-c", script], PROVISION_TIMEOUT)

    def _into(self) -> list[str]:
        """The command prefix into samba's network namespace and a new mount
        namespace of its own (:meth:`_mounts`)."""
        net = ["unshare", "-n"]
        if self.netns_pid is not None:
            net = ["nsenter", f"--net=/proc/{self.netns_pid}/ns/net"]
        return [*net, "--", "unshare", "-m", "--propagation", "private"]

    def _mounts(self) -> str:
        """Shell commands for samba's mount namespace: its run directory at
        WBCLIENT_DIR (start()), ``etc`` over /etc."""
        run = self.workdir / "run"
        script = f"mkdir -p {WBCLIENT_DIR} {run} && mount --bind {run} {WBCLIENT_DIR}"
        if self.etc is not None:
            script += f" && mount --bind {self.etc} /etc"
        return script

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        procstat.terminate(proc, STOP_TIMEOUT)
        self._proc = None
        self._stopped()

    # -- using it ------------------------------------------------------------------

    def connect(self) -> ldap3.Connection:
        """An ldap3 connection over ldapi, bound as the domain Administrator."""
        server = ldap3.Server(self.ldapi_uri, get_info=ldap3.NONE, connect_timeout=10)
        conn = ldap3.Connection(
            server,
            user=ADMIN_DN,
            password=ADMIN_PW,
            authentication=ldap3.SIMPLE,
            receive_timeout=30,
            raise_exceptions=True,
        )
        conn.open()
        try:
            conn.bind()
        except LDAPException:
            conn.unbind()  # the socket, which a refused bind leaves open
            raise
        return conn

    def search(self, base: str, filt: str, attrs: list[str], scope: Any = ldap3.SUBTREE
               ) -> list[dict[str, Any]]:  # fmt: skip
        conn = self.connect()
        try:
            conn.search(base, filt, scope, attributes=attrs)
            return [r for r in conn.response or [] if r.get("type") == "searchResEntry"]
        finally:
            conn.unbind()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def snapshot(self, to: Path) -> None:
        """Copy the stopped DC's whole work directory (a restart costs ~1 s, a
        provision and load many)."""
        if self.pid is not None:
            raise SambaError("stop the DC before taking a snapshot")
        shutil.copytree(self.workdir, to, symlinks=True)


def _run(cmd: list[str], timeout: float, input: str | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              input=input, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SambaError(f"{' '.join(cmd[:3])} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SambaError(
            f"{' '.join(cmd[:3])} failed with status {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}".rstrip()
        )
    return proc.stdout + proc.stderr
