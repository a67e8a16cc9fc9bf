"""A host joined to a Samba AD domain with ``adcli join``, as ``realm join`` does it.

Two network namespaces joined by a veth pair, both made here and private to the test:

* the *DC's*: Samba (testing/addc.py) with its LDAP, CLDAP, KDC and DNS services, at
  ``DC_IP`` (the address its A record and the domain's SRV records name);
* the *host's*: a client machine at ``HOST_IP`` with a mount namespace and a UTS
  namespace of its own. Its ``/etc`` is a copy of this machine's ``/etc`` bind-mounted
  over the real one, with a ``resolv.conf`` naming the DC's DNS, a ``krb5.conf`` as
  realmd writes it (realm found through DNS), its own ``hosts`` and hostname
  (``HOST_FQDN``), and after the join the ``krb5.keytab`` adcli wrote and the
  ``sssd/sssd.conf`` realmd writes. Nothing of this machine's own ``/etc`` changes.

Everything the host runs (``adcli``, ``cached serve``, SSSD, ``id`` through
libnss_sss) is started with :meth:`JoinedHost.command`: ``nsenter`` into the host's
namespaces. The namespaces are held by two ``sleep`` processes started and ended here,
by pid. The Administrator's password reaches adcli on its standard input only; no file
of the host holds it (tests/integration/test_adjoin.py checks).

More DCs can stand at more addresses of the DC's namespace: :meth:`JoinedHost.add_srv`
adds a name, an address and SRV records to the DC's DNS (samba-tool dns), e.g. a
frozen "first" DC that takes connections and never answers.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from testing import addc, addir, nsenv, procstat
from testing.addc import ADEntry
from testing.addir import ADDirectory
from testing.faultproxy import FaultProxy, enter_netns
from testing.pamenv import PamEnv, make_pamd
from testing.service import Service

DOMAIN = addc.REALM.lower()  # cached.test
REALM = addc.REALM
SUBNET = "10.89.0"
DC_IP = f"{SUBNET}.1"
HOST_IP = f"{SUBNET}.2"
# Samba's one site, which the DCs name in their CLDAP answers.
SITE = "Default-First-Site-Name"
# An address on the DC's side for a DC that takes connections and never answers, on
# a port of its own (samba listens on 389 of every address of its namespace).
FROZEN_IP = f"{SUBNET}.3"
FROZEN_PORT = 3389
# The address of a second DC that relays to dc1 (JoinedHost.relay).
RELAY_IP = f"{SUBNET}.4"
DC_NAME = "dc1"
# A second real DC (JoinedHost.add_dc): `samba-tool domain join` in a namespace of its
# own, on a subnet of its own linked to the host, which routes between it and dc1's
# (each DC then sees the other's packets come from the address it answers: samba's
# UDP services reply from a wildcard socket, whose source is the route's).
DC2_NAME = "dc2"
DC2_SUBNET = "10.89.2"
DC2_GATEWAY = f"{DC2_SUBNET}.1"
DC2_IP = f"{DC2_SUBNET}.2"
DC_FQDN = f"{DC_NAME}.{DOMAIN}"
HOST_NAME = "client1"
HOST_FQDN = f"{HOST_NAME}.{DOMAIN}"
# The services a joined host uses: LDAP, CLDAP (adcli's and SSSD's netlogon ping),
# the KDC (kinit, kpasswd for the computer password) and DNS (SRV discovery); and
# RPC, through which samba-tool dns changes records (add_srv).
DC_SERVICES = "ldap cldap kdc dns rpc"
# With SMB (JoinedHost(smb=True)): SYSVOL for GPOs (smbd, "s3fs") and the SID to
# Unix ID mapping its sessions need (winbindd).
SMB_SERVICES = "s3fs winbindd"
JOIN_TIMEOUT = 180.0
UF_NORMAL_ACCOUNT, UF_ACCOUNTDISABLE, UF_PASSWD_NOTREQD = 0x200, 0x2, 0x20
# Accounts of joined_directory(): one disabled on the DC, one past its accountExpires.
DISABLED_USER, EXPIRED_USER = "acdisabled", "acexpired"

# What realmd writes for `realm join` with adcli (realmd's service/realm-sssd-ad.c,
# realm-sssd-config.c), for DOMAIN.
REALMD_SSSD_CONF = f"""\
[sssd]
domains = {DOMAIN}
config_file_version = 2
services = nss, pam

[domain/{DOMAIN}]
default_shell = /bin/bash
krb5_store_password_if_offline = True
cache_credentials = True
krb5_realm = {REALM}
realmd_tags = manages-system joined-with-adcli
id_provider = ad
fallback_homedir = /home/%u@%d
ad_domain = {DOMAIN}
use_fully_qualified_names = True
ldap_id_mapping = True
access_provider = ad
"""

# realmd's krb5.conf: the realm's KDCs found through DNS (the DC's SRV records).
KRB5_CONF = f"""\
[libdefaults]
    default_realm = {REALM}
    dns_lookup_realm = false
    dns_lookup_kdc = true
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 0

[realms]
    {REALM} = {{
    }}

[domain_realm]
    {DOMAIN} = {REALM}
    .{DOMAIN} = {REALM}
"""


class AdJoinError(RuntimeError):
    pass


def joined_directory() -> ADDirectory:
    """What the DC of the shared joined host serves (tests/conftest.py joined_host;
    tests/integration/test_adjoin.py, test_adaccess.py): the small directory with 20
    members in ``big``, its users enabled (without a password), an account disabled on
    the DC and one past its accountExpires (yesterday)."""
    d = addir.small(big_members=20)
    enabled = UF_NORMAL_ACCOUNT | UF_PASSWD_NOTREQD
    # Accounts made without a password are disabled (as AD makes them): these enabled.
    for e in d.entries:
        if e.attrs.get("objectClass") == "user" and e.dn.endswith(addir.PEOPLE):
            d.modify.append(ADEntry(e.dn, {"userAccountControl": str(enabled)}))
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    ticks = int((yesterday.timestamp() + 11644473600) * 10_000_000)
    for name, attrs in {
        DISABLED_USER: {"userAccountControl": str(enabled | UF_ACCOUNTDISABLE)},
        EXPIRED_USER: {"userAccountControl": str(enabled), "accountExpires": str(ticks)},
    }.items():
        d.entries.append(ADEntry(f"CN={name},{addir.PEOPLE}", {
            "objectClass": "user", "sAMAccountName": name, **attrs}))  # fmt: skip
    return d


def skip_reason() -> str | None:
    """None when a joined host can be made here, else what is missing."""
    if os.geteuid() != 0:
        return "needs root: network, mount and UTS namespaces"
    for tool in ("/usr/sbin/adcli", "/usr/bin/nsenter", "/usr/bin/kinit", "/usr/bin/klist"):
        if not os.access(tool, os.X_OK):
            return f"{tool} is missing (contrib/install-deps installs adcli and krb5-user)"
    return addc.available() or nsenv.skip_reason()


def _holder(flags: Sequence[str]) -> subprocess.Popen[bytes]:
    """A process that only holds new namespaces (``unshare`` flags) for nsenter."""
    return subprocess.Popen(
        ["unshare", *flags, "--", "sleep", "infinity"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_unshared(proc: subprocess.Popen[bytes], kind: str) -> None:
    """Until the holder runs in its own ``kind`` namespace (unshare has exec'd)."""
    mine = os.readlink(f"/proc/self/ns/{kind}")
    for _ in range(10000):
        if proc.poll() is not None:
            raise AdJoinError(f"unshare exited with status {proc.returncode}")
        with contextlib.suppress(FileNotFoundError):
            if (
                os.readlink(f"/proc/{proc.pid}/ns/{kind}") != mine
                and Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep"
            ):
                return
        threading.Event().wait(0.005)  # no event tells that exec happened
    raise AdJoinError("unshare did not make its namespace")


def run(cmd: Sequence[str], *, timeout: float = 60.0, input: str | None = None
        ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    proc = subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=timeout, input=input, check=False
    )
    if proc.returncode != 0:
        raise AdJoinError(
            f"{' '.join(cmd)} failed with status {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}".rstrip()
        )
    return proc


class JoinedHost(Service):
    """The DC and a host joined to it; start() provisions, loads ``data`` (an
    testing.addir directory), starts the DC and joins."""

    def __init__(self, workdir: str | os.PathLike[str], data: ADDirectory | None = None,
                 *, smb: bool = False) -> None:  # fmt: skip
        """``smb``: the DC serves SMB too (SYSVOL), as a real DC does."""
        self.workdir = Path(workdir).resolve()
        self.data = data
        self.smb = smb
        self.etc = self.workdir / "host-etc"
        self._dc_ns: subprocess.Popen[bytes] | None = None
        self._host_ns: subprocess.Popen[bytes] | None = None
        self.dc: addc.SambaDC | None = None
        self.join_output = ""
        self._frozen: list[socket.socket] = []
        self._relays: list[FaultProxy] = []
        self._dc2_ns: subprocess.Popen[bytes] | None = None
        self.dc2: addc.SambaDC | None = None

    # -- namespaces --------------------------------------------------------------

    @property
    def host_pid(self) -> int:
        assert self._host_ns is not None
        return self._host_ns.pid

    @property
    def dc_ns_pid(self) -> int:
        assert self._dc_ns is not None
        return self._dc_ns.pid

    def command(self, argv: Sequence[str | os.PathLike[str]], *, net_only: bool = False
                ) -> list[str]:  # fmt: skip
        """``argv`` run inside the host's namespaces (network, mount, UTS)."""
        ns = ["-n"] if net_only else ["-n", "-m", "-u"]
        return ["nsenter", "-t", str(self.host_pid), *ns, "--", *(os.fspath(a) for a in argv)]

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a daemon on the host (CachedDaemon.from_text,
        SssdDaemon.prefix)."""
        return self.command([])

    def dc_command(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", "-t", str(self.dc_ns_pid), "-n", "--", *argv]

    def nss_command(
        self, argv: Sequence[str | os.PathLike[str]], pipes_dir: Path, mc_dir: Path
    ) -> list[str]:
        """``argv`` through glibc + libnss_sss on the host: nsenv's private mount
        namespace (pipes, memory cache, nsswitch.conf) made inside the host's."""
        return self.command(nsenv.nss_command(argv, pipes_dir, mc_dir))

    def cached_config(self, workdir: Path, sssd_conf: str | None = None) -> str:
        """The host's sssd.conf as cached's configuration: realmd's lines unchanged,
        with the daemon's directories in ``workdir`` (pipes, memory cache, db)."""
        text = sssd_conf if sssd_conf is not None else REALMD_SSSD_CONF
        head = (
            f"pipes_dir = {workdir / 'pipes'}\nmc_dir = {workdir / 'mc'}\n"
            f"db_dir = {workdir / 'db'}\npid_file = {workdir / 'cached.pid'}\n"
            "dbus_address = none\n"
        )
        return text.replace("[sssd]\n", "[sssd]\n" + head, 1)

    def run_nss(
        self, argv: Sequence[str], pipes_dir: Path, mc_dir: Path, *, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.nss_command(argv, pipes_dir, mc_dir),
            env=nsenv.nss_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return proc

    def pam_env(self, pipes_dir: Path, pamd: dict[str, str], mc_dir: Path) -> PamEnv:
        """The real ``pam_sss.so`` on the host: :class:`testing.pamenv.PamEnv` (its
        private mount namespace, ``pamd`` as the only /etc/pam.d) made inside the
        host's namespaces, so that libkrb5 in pam_sss's process and the login's
        ccache are the host's."""
        directory = make_pamd(pipes_dir.parent / "host-pam.d", pamd)
        return HostPamEnv(pipes_dir, directory, mc_dir, host=self)

    def set_password(self, login: str, password: str) -> None:
        """Give ``login`` a password on the running DC and enable the account (accounts
        loaded without one are disabled, as AD makes them): ``samba-tool`` on the DC's
        sam.ldb, no network."""
        assert self.dc is not None
        local = ["-H", str(self.dc.workdir / "private" / "sam.ldb"), "-s", str(self.dc.conf)]
        run([addc.SAMBA_TOOL, "user", "setpassword", login, f"--newpassword={password}",
             *local])  # fmt: skip
        run([addc.SAMBA_TOOL, "user", "enable", login, *local])

    def run_as(self, uid: int, gid: int, argv: Sequence[str]
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``argv`` on the host as ``uid``/``gid`` (no supplementary groups), with a
        bare environment; never raises on its exit status."""
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]
        return subprocess.run(
            self.command(cmd), capture_output=True, text=True, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )  # fmt: skip

    # -- life cycle --------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._dc_ns = _holder(["-n"])
        self._host_ns = _holder(["-n", "-m", "-u", "--propagation", "private"])
        self._started()
        _wait_unshared(self._dc_ns, "net")
        _wait_unshared(self._host_ns, "mnt")
        self._network()
        self._host_files()
        dc = addc.SambaDC(self.workdir / "dc", netns_pid=self.dc_ns_pid)
        services = f"{DC_SERVICES} {SMB_SERVICES}" if self.smb else DC_SERVICES
        dc.provision(
            services=services, strong_auth=True, host_name=DC_NAME.upper(), host_ip=DC_IP
        )
        self.dc = dc
        if self.data is not None:
            dc.load(self.data.entries, modify=self.data.modify)
        dc.start()
        # The DC's own ldap/, GC/ and DNS SPNs: Samba's dnsupdate service runs this
        # some time after start; run here, before anyone asks for a ticket to them.
        run(self.dc_command(["/usr/sbin/samba_spnupdate", "-s", str(dc.conf)]))
        self.join()

    def _network(self) -> None:
        host = ["nsenter", "-t", str(self.host_pid), "-n", "--"]
        run([*host, "ip", "link", "add", "veth-host", "type", "veth", "peer", "name",
             "veth-dc", "netns", str(self.dc_ns_pid)])  # fmt: skip
        run([*host, "ip", "addr", "add", f"{HOST_IP}/24", "dev", "veth-host"])
        run([*host, "ip", "link", "set", "veth-host", "up"])
        run([*host, "ip", "link", "set", "lo", "up"])
        dc = ["nsenter", "-t", str(self.dc_ns_pid), "-n", "--"]
        run([*dc, "ip", "addr", "add", f"{DC_IP}/24", "dev", "veth-dc"])
        run([*dc, "ip", "link", "set", "veth-dc", "up"])

    def _host_files(self) -> None:
        """The host's /etc: this machine's, with the files of a host in the domain."""
        shutil.copytree("/etc", self.etc, symlinks=True, ignore_dangling_symlinks=True)
        (self.etc / "resolv.conf").unlink(missing_ok=True)
        (self.etc / "resolv.conf").write_text(f"search {DOMAIN}\nnameserver {DC_IP}\n")
        (self.etc / "hosts").unlink(missing_ok=True)
        (self.etc / "hosts").write_text(
            f"127.0.0.1 localhost\n{HOST_IP} {HOST_FQDN} {HOST_NAME}\n"
            # The reverse lookup a real network's PTR record answers: libldap names
            # the SASL server by the peer address's name (no SASL_NOCANON), so adcli
            # would ask for a ticket to ldap/<address> without it.
            f"{DC_IP} {DC_FQDN} {DC_NAME}\n"
        )
        (self.etc / "hostname").write_text(HOST_FQDN + "\n")
        (self.etc / "krb5.conf").write_text(KRB5_CONF)
        (self.etc / "krb5.keytab").unlink(missing_ok=True)
        for stale in ("sssd",):
            shutil.rmtree(self.etc / stale, ignore_errors=True)
        run(["nsenter", "-t", str(self.host_pid), "-m", "--",
             "mount", "--bind", str(self.etc), "/etc"])  # fmt: skip
        run(["nsenter", "-t", str(self.host_pid), "-u", "--", "hostname", HOST_FQDN])

    def join(self) -> None:
        """``adcli join`` as an administrator types it (realmd runs the same):
        the domain found through DNS, the password on standard input."""
        proc = run(
            self.command(["adcli", "join", "--verbose", f"--domain={DOMAIN}",
                          "--login-user=Administrator", "--stdin-password"]),
            input=addc.ADMIN_PW, timeout=JOIN_TIMEOUT,
        )  # fmt: skip
        self.join_output = proc.stdout + proc.stderr
        sssd = self.etc / "sssd"
        sssd.mkdir(mode=0o711, exist_ok=True)
        conf = sssd / "sssd.conf"
        conf.write_text(REALMD_SSSD_CONF)
        conf.chmod(0o600)

    @property
    def keytab(self) -> Path:
        return self.etc / "krb5.keytab"

    def klist_keytab(self) -> str:
        return run(self.command(["klist", "-k", "/etc/krb5.keytab"])).stdout

    def add_srv(
        self, name: str, ip: str, *, port: int = 389, priority: int = 0, weight: int = 100
    ) -> None:
        """A DC name at ``ip``, its ``_ldap._tcp`` SRV records (the domain's and its
        site's) and its ``ldap/`` principal on dc1's account, as a second DC's join
        would add them; ahead of dc1 when ``priority`` is lower or, equal, ``weight``
        higher."""
        assert self.dc is not None
        self._srv_records("add", name, ip, port, priority, weight)

    def remove_srv(
        self, name: str, ip: str, *, port: int = 389, priority: int = 0, weight: int = 100
    ) -> None:
        """Undo :meth:`add_srv` (and :meth:`freeze_address` of ``ip``)."""
        self._srv_records("delete", name, ip, port, priority, weight)
        for sock in self._frozen:
            sock.close()
        self._frozen.clear()
        with contextlib.suppress(AdJoinError):
            run(self.dc_command(["ip", "addr", "del", f"{ip}/24", "dev", "veth-dc"]))

    def _srv_records(
        self, op: str, name: str, ip: str, port: int, priority: int, weight: int
    ) -> None:
        assert self.dc is not None
        auth = ["-U", f"Administrator%{addc.ADMIN_PW}"]
        run(self.dc_command([addc.SAMBA_TOOL, "spn", op, f"ldap/{name}.{DOMAIN}",
                             f"{DC_NAME.upper()}$", "-H", str(self.dc.workdir / "private" /
                             "sam.ldb")]))  # fmt: skip
        srv = f"{name}.{DOMAIN} {port} {priority} {weight}"
        for rname, rtype, data in (
            (name, "A", ip),
            ("_ldap._tcp", "SRV", srv),
            (f"_ldap._tcp.{SITE}._sites", "SRV", srv),
        ):
            run(self.dc_command(
                [addc.SAMBA_TOOL, "dns", op, DC_IP, DOMAIN, rname, rtype, data, *auth,
                 "-s", str(self.dc.conf)]
            ))  # fmt: skip

    def add_dc(self) -> addc.SambaDC:
        """A second DC, ``dc2`` at DC2_IP, joined to the domain with ``samba-tool
        domain join`` as an administrator joins one (the directory, users' keys
        included, replicated from dc1 at the join), serving the same services, with
        the DNS records its dnsupdate would register in dc1's zone (its name, the
        domain's and site's ``_ldap`` and ``_kerberos`` SRV records), and the host's
        resolv.conf naming its DNS after dc1's. Stopped by stop()."""
        assert self.dc is not None
        self._dc2_ns = _holder(["-n"])
        _wait_unshared(self._dc2_ns, "net")
        pid = str(self._dc2_ns.pid)
        dc2 = ["nsenter", "-t", pid, "-n", "--"]
        host = self.command([], net_only=True)
        run([*host, "ip", "link", "add", "veth-dc2", "type", "veth", "peer", "name", "veth-in",
             "netns", pid])  # fmt: skip
        run([*host, "ip", "addr", "add", f"{DC2_GATEWAY}/24", "dev", "veth-dc2"])
        run([*host, "ip", "link", "set", "veth-dc2", "up"])
        run([*host, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])  # this namespace's only
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "addr", "add", f"{DC2_IP}/24", "dev", "veth-in"],
                    ["ip", "link", "set", "veth-in", "up"],
                    ["ip", "route", "add", "default", "via", DC2_GATEWAY]):  # fmt: skip
            run([*dc2, *cmd])
        run(self.dc_command(["ip", "route", "add", f"{DC2_SUBNET}.0/24", "via", HOST_IP]))
        # dc1 stopped (its namespace up) refuses each DNS and KDC packet with an ICMP
        # port unreachable, which Linux sends at most once a second per destination
        # (icmp_ratelimit): the rest of a burst of lookups (a kinit asks DNS 4-6 times)
        # would wait out the resolver's 5 s each. Refused at once, every time, in
        # dc1's namespace only.
        run(self.dc_command(["sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0"]))
        # dc2's /etc: the host's, naming itself and dc1 (its DNS, its KDC).
        etc = self.workdir / "dc2-etc"
        shutil.copytree(self.etc, etc, symlinks=True, ignore_dangling_symlinks=True)
        (etc / "hosts").write_text(
            f"127.0.0.1 localhost\n{DC2_IP} {DC2_NAME}.{DOMAIN} {DC2_NAME}\n"
            f"{DC_IP} {DC_FQDN} {DC_NAME}\n"
        )
        (etc / "hostname").write_text(f"{DC2_NAME}.{DOMAIN}\n")
        new = addc.SambaDC(self.workdir / "dc2", netns_pid=self._dc2_ns.pid, etc=etc)
        services = f"{DC_SERVICES} {SMB_SERVICES}" if self.smb else DC_SERVICES
        new.join(DC_FQDN, services=services, host_name=DC2_NAME)
        new.start()
        self.dc2 = new
        new.run_inside(["/usr/sbin/samba_spnupdate", "-s", str(new.conf)])
        fqdn = f"{DC2_NAME}.{DOMAIN}"
        auth = ["-U", f"Administrator%{addc.ADMIN_PW}"]
        records = [(DC2_NAME, "A", DC2_IP)]
        for srv, port in (("_ldap._tcp", 389), ("_kerberos._tcp", 88), ("_kerberos._udp", 88)):
            for rname in (srv, f"{srv}.{SITE}._sites"):
                records.append((rname, "SRV", f"{fqdn} {port} 0 100"))
        # Into both DCs' zones: the DCs run no replication service (drepl), so what
        # dc1 learns after the join stays dc1's, and the host asks dc2's DNS once dc1
        # is down.
        for server in (DC_IP, DC2_IP):
            for rname, rtype, data in records:
                with contextlib.suppress(AdJoinError):  # the join may have added it
                    run(self.dc_command([addc.SAMBA_TOOL, "dns", "add", server, DOMAIN, rname,
                                         rtype, data, *auth, "-s", str(self.dc.conf)]))  # fmt: skip
        resolv = self.etc / "resolv.conf"
        resolv.write_text(resolv.read_text() + f"nameserver {DC2_IP}\n")
        return new

    def relay(self, ip: str) -> FaultProxy:
        """``ip`` on the DC's side, where a proxy (testing/faultproxy.py) forwards to
        dc1's LDAP port: a second DC for the host, with dc1's data and keys, that a
        test can freeze (``stall``) while the host uses it. Stopped by stop()."""
        run(self.dc_command(["ip", "addr", "add", f"{ip}/24", "dev", "veth-dc"]))
        proxy = FaultProxy(DC_IP, 389, host=ip, netns=f"/proc/{self.dc_ns_pid}/ns/net")
        self._relays.append(proxy.start())
        return proxy

    def freeze_address(self, ip: str, port: int = FROZEN_PORT) -> None:
        """``ip`` on the DC's side, where a server takes TCP connections to ``port``
        (the kernel completes them) and never answers: a frozen DC."""
        run(self.dc_command(["ip", "addr", "add", f"{ip}/24", "dev", "veth-dc"]))
        sock = _socket_in(f"/proc/{self.dc_ns_pid}/ns/net", ip, port)
        self._frozen.append(sock)

    def stop(self) -> None:
        for sock in self._frozen:
            sock.close()
        self._frozen.clear()
        for proxy in self._relays:
            proxy.stop()
        self._relays.clear()
        if self.dc2 is not None:
            self.dc2.stop()
        if self.dc is not None:
            self.dc.stop()
        for holder in (self._host_ns, self._dc_ns, self._dc2_ns):
            if holder is not None:
                procstat.terminate(holder, 10.0)
        self._host_ns = self._dc_ns = self._dc2_ns = None
        self._stopped()


class HostPamEnv(PamEnv):
    """A :class:`PamEnv` whose commands run in a joined host's namespaces."""

    def __init__(self, pipes_dir: Path, pamd_dir: Path, mc_dir: Path, *, host: JoinedHost
                 ) -> None:  # fmt: skip
        super().__init__(pipes_dir, pamd_dir, mc_dir)
        self.host = host

    def command(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        return self.host.command(super().command(argv))


def _socket_in(netns: str, ip: str, port: int) -> socket.socket:
    """A listening socket made inside another network namespace (setns(2) on a thread
    of its own, which then ends; the socket stays in that namespace)."""
    out: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            enter_netns(netns)
            s = socket.socket()
            s.bind((ip, port))
            s.listen(64)
            out.append(s)
        except BaseException as e:  # handed to the caller
            out.append(e)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def main() -> None:  # pragma: no cover - manual use
    work = Path(tempfile.mkdtemp(prefix="adj-"))
    with JoinedHost(work) as host:
        print(host.join_output)
        print(host.klist_keytab())
        input(f"joined; host namespace pid {host.host_pid}; Enter to stop ")


if __name__ == "__main__":  # pragma: no cover
    main()
