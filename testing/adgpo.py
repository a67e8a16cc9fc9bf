"""Group Policy on the test Samba DC (testing/addc.py), made as the Group Policy
Management tools make it, for the GPO access-control tests.

A GPO is a ``groupPolicyContainer`` under ``CN=Policies,CN=System`` (its ``cn`` a
GUID, ``gPCFileSysPath`` its folder in SYSVOL, ``versionNumber``, ``flags``,
``gPCFunctionalityVersion = 2``) with the security descriptor the schema gives the
class (Authenticated Users may read it and Apply Group Policy), plus that folder in
the DC's SYSVOL (``<workdir>/state/sysvol/<realm>/Policies/{GUID}``) holding
``GPT.INI``. Setting logon rights writes
``Machine/Microsoft/Windows NT/SecEdit/GptTmpl.inf`` in UTF-16LE with a byte-order
mark, adds the Security extension to ``gPCMachineExtensionNames`` and raises the
machine version in both GPT.INI and ``versionNumber``, as the Group Policy editor
does. Links are ``gPLink`` values of the site, the domain or an OU.

The functions taking a ``SambaDC`` write over its ldapi socket, as Administrator, and
into its SYSVOL directory: for a DC reached only over ldapi (tests/integration/
test_gpo_ad.py). Those taking a ``JoinedHost`` (testing/adjoin.py, with ``smb=True``) do
what an administrator does on a joined host: ``samba-tool gpo create`` and ``setlink``,
and the ``[Privilege Rights]`` saved into SYSVOL over the DC's SMB (signed),
as the Group Policy editor saves them (testing/adgpo_edit.py).
"""

from __future__ import annotations

import base64
import codecs
import json
import re
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import ldap3

from cached.ldap.sid import sid_to_str
from testing import addc, adjoin, procstat
from testing.service import Service
from testing.slapd import free_port

# The Security extension and the Security editor's tool GUID ([MS-GPSB] 2.2.1).
SECURITY_CSE = "{827D319E-6EAC-11D2-A4EA-00C04F79F83A}"
SECURITY_TOOL = "{803E14A0-B4FB-11D0-A0D0-00A0C90F574B}"
SECURITY_INF = ("Machine", "Microsoft", "Windows NT", "SecEdit", "GptTmpl.inf")
UF_WORKSTATION_TRUST_ACCOUNT = 0x1000


@dataclass
class Gpo:
    guid: str  # "{…}", upper case, as samba-tool names them
    dn: str
    folder: Path
    version: int = 0


def sysvol(dc: addc.SambaDC) -> Path:
    """The DC's SYSVOL share's directory."""
    return dc.workdir / "state" / "sysvol"


def _modify(dc: addc.SambaDC, dn: str, changes: dict[str, list[tuple[str, list[str]]]]) -> None:
    conn = dc.connect()
    try:
        conn.modify(dn, changes)
    finally:
        conn.unbind()


def _add(dc: addc.SambaDC, dn: str, classes: list[str], attrs: dict[str, object]) -> None:
    conn = dc.connect()
    try:
        conn.add(dn, classes, attrs)
    finally:
        conn.unbind()


def add_ou(dc: addc.SambaDC, name: str, parent: str = addc.BASE_DN) -> str:
    dn = f"OU={name},{parent}"
    _add(dc, dn, ["organizationalUnit"], {})
    return dn


def add_computer(dc: addc.SambaDC, name: str, parent: str) -> str:
    """A computer account ``NAME$`` (a workstation trust account, as a join makes)."""
    dn = f"CN={name},{parent}"
    _add(dc, dn, ["computer"], {
        "sAMAccountName": f"{name.upper()}$",
        "userAccountControl": str(UF_WORKSTATION_TRUST_ACCOUNT),
    })  # fmt: skip
    return dn


def add_user(dc: addc.SambaDC, name: str) -> str:
    dn = f"CN={name},CN=Users,{addc.BASE_DN}"
    _add(dc, dn, ["user"], {"sAMAccountName": name})
    return dn


def add_group(dc: addc.SambaDC, name: str, members: list[str]) -> str:
    dn = f"CN={name},CN=Users,{addc.BASE_DN}"
    attrs: dict[str, object] = {"sAMAccountName": name}
    if members:
        attrs["member"] = members
    _add(dc, dn, ["group"], attrs)
    return dn


def sids_of(dc: addc.SambaDC, dn: str) -> tuple[str, list[str]]:
    """An account's SID and its token groups' (every group it is in, through nesting,
    as the DC computes them)."""
    conn = dc.connect()
    try:
        conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=["objectSid", "tokenGroups"])
        raw = conn.response[0]["raw_attributes"]
    finally:
        conn.unbind()
    return sid_to_str(raw["objectSid"][0]), [sid_to_str(s) for s in raw["tokenGroups"]]


def create_gpo(dc: addc.SambaDC, name: str) -> Gpo:
    """A new, empty GPO (``samba-tool gpo create``'s objects and folder)."""
    guid = "{" + str(uuid.uuid4()).upper() + "}"
    realm = addc.REALM.lower()
    dn = f"CN={guid},CN=Policies,CN=System,{addc.BASE_DN}"
    _add(dc, dn, ["groupPolicyContainer"], {
        "displayName": name,
        "gPCFileSysPath": f"\\\\{realm}\\SysVol\\{realm}\\Policies\\{guid}",
        "gPCFunctionalityVersion": "2",
        "flags": "0",
        "versionNumber": "0",
    })  # fmt: skip
    for part in ("User", "Machine"):
        _add(dc, f"CN={part},{dn}", ["container"], {})
    folder = sysvol(dc) / realm / "Policies" / guid
    (folder / "Machine").mkdir(parents=True)
    (folder / "User").mkdir()
    gpo = Gpo(guid, dn, folder)
    _write_gpt_ini(gpo, name)
    return gpo


def _write_gpt_ini(gpo: Gpo, name: str = "") -> None:
    text = f"[General]\r\nVersion={gpo.version}\r\n"
    if name:
        text += f"displayName={name}\r\n"
    (gpo.folder / "GPT.INI").write_bytes(text.encode())


def set_logon_rights(dc: addc.SambaDC, gpo: Gpo, rights: dict[str, list[str]]) -> None:
    """Write the GPO's ``[Privilege Rights]`` (each key to its SIDs, written ``*SID``)
    as the Group Policy editor saves them."""
    write_rights(gpo, rights)
    _modify(dc, gpo.dn, {
        "versionNumber": [(ldap3.MODIFY_REPLACE, [str(gpo.version)])],
        "gPCMachineExtensionNames": [(ldap3.MODIFY_REPLACE, [MACHINE_EXTENSIONS])],
    })  # fmt: skip


# gPCMachineExtensionNames of a GPO with Security settings.
MACHINE_EXTENSIONS = f"[{SECURITY_CSE}{SECURITY_TOOL}]"


def write_rights(gpo: Gpo, rights: dict[str, list[str]]) -> None:
    """The files of :func:`set_logon_rights` in SYSVOL (GptTmpl.inf, GPT.INI with the
    machine version raised); the GPO's object takes ``gpo.version`` and
    MACHINE_EXTENSIONS."""
    path = gpo.folder.joinpath(*SECURITY_INF)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_rights_inf(rights))
    gpo.version += 1  # the machine part's version: the low 16 bits
    _write_gpt_ini(gpo)


def _rights_inf(rights: dict[str, list[str]]) -> bytes:
    """GptTmpl.inf with ``[Privilege Rights]``: UTF-16LE with a byte-order mark."""
    lines = ["[Unicode]", "Unicode=yes", "[Version]", 'signature="$CHICAGO$"', "Revision=1",
             "[Privilege Rights]"]  # fmt: skip
    lines += [f"{key} = " + ",".join(f"*{sid}" for sid in sids) for key, sids in rights.items()]
    return codecs.BOM_UTF16_LE + ("\r\n".join(lines) + "\r\n").encode("utf-16-le")


def set_flags(dc: addc.SambaDC, gpo: Gpo, flags: int) -> None:
    """``flags``: 1 the user part disabled, 2 the computer part, 3 both."""
    _modify(dc, gpo.dn, {"flags": [(ldap3.MODIFY_REPLACE, [str(flags)])]})


def set_links(dc: addc.SambaDC, som_dn: str, links: list[tuple[Gpo, int]]) -> None:
    """The SOM's ``gPLink``: each GPO with its link options (0 linked, 1 disabled,
    2 enforced), in link order; none removes the attribute."""
    value = "".join(f"[LDAP://{gpo.dn};{opts}]" for gpo, opts in links)
    _modify(dc, som_dn, {"gPLink": [(ldap3.MODIFY_REPLACE, [value] if value else [])]})


def block_inheritance(dc: addc.SambaDC, som_dn: str, block: bool = True) -> None:
    _modify(dc, som_dn, {"gPOptions": [(ldap3.MODIFY_REPLACE, ["1" if block else "0"])]})


# LDAP_SERVER_TREE_DELETE_OID ([MS-ADTS] 3.1.1.3.4.1.3): an object and its subtree.
TREE_DELETE = "1.2.840.113556.1.4.805"


def delete_tree(dc: addc.SambaDC, dn: str) -> None:
    """``dn`` and every object under it."""
    conn = dc.connect()
    try:
        conn.delete(dn, controls=[(TREE_DELETE, True, None)])
    finally:
        conn.unbind()


def gpo_guids(dc: addc.SambaDC) -> set[str]:
    """The ``cn`` (GUID) of every GPO on the DC."""
    found = dc.search(f"CN=Policies,CN=System,{addc.BASE_DN}", "(objectClass=groupPolicyContainer)",
                      ["cn"], scope=ldap3.LEVEL)  # fmt: skip
    return {r["raw_attributes"]["cn"][0].decode() for r in found}


def values(dc: addc.SambaDC, dn: str, attrs: list[str]) -> dict[str, list[str]]:
    """``attrs`` of ``dn`` as they are (an attribute it lacks: no values), for
    :func:`restore`."""
    (entry,) = dc.search(dn, "(objectClass=*)", attrs, scope=ldap3.BASE)
    raw = entry["raw_attributes"]
    return {a: [v.decode() for v in raw.get(a, [])] for a in attrs}


def restore(dc: addc.SambaDC, dn: str, saved: dict[str, list[str]]) -> None:
    """Put back what :func:`values` saved (no values: the attribute removed)."""
    _modify(dc, dn, {a: [(ldap3.MODIFY_REPLACE, v)] for a, v in saved.items()})


SMBD = "/usr/sbin/smbd"
SMBPASSWD = "/usr/bin/smbpasswd"
SMB_START_TIMEOUT = 60.0
SMB_STOP_TIMEOUT = 15.0


class SysvolServer(Service):
    """A standalone Samba file server (``smbd``, not the DC) sharing a directory as
    ``SysVol`` on 127.0.0.1:<port>, with one account (``root``, NTLM, the password
    below) to read it: the SMB client's reads (cached/ldap/gpo_fetch.py SmbSysvol)
    with NTLM and a refused logon, from the test process, which cannot reach a DC in
    its loopback-only namespace (the joined host's tests read the DC's own SMB with
    Kerberos). Signing is required, as SYSVOL's UNC hardening asks of a DC."""

    user = "root"
    password = "Sysvol-Test-Passw0rd"

    def __init__(self, workdir: Path, share: Path) -> None:
        self.workdir = workdir.resolve()
        self.share = share
        self.conf = self.workdir / "smb.conf"
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The port is bound and closed by free_port before smbd binds it: another
        # process may take it meanwhile (parallel test workers), and smbd then exits.
        # A fresh port is tried then, as testing/slapd.py does for slapd.
        for attempt in range(3):
            if attempt:
                self.port = free_port()
            if self._launch():
                return
        raise RuntimeError(f"smbd exited at start on 3 ports in turn; see {self.workdir}/smbd.out")

    def _launch(self) -> bool:
        """Start smbd on ``self.port`` and wait until it listens; False when it exited
        first (the port taken, most likely)."""
        w = self.workdir
        for d in ("private", "lock", "state", "cache", "run"):
            (w / d).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            "[global]\n"
            "\tserver role = standalone server\n\tworkgroup = SYSVOLTEST\n"
            f"\tpassdb backend = tdbsam:{w}/private/passdb.tdb\n"
            f"\tprivate dir = {w}/private\n\tlock directory = {w}/lock\n"
            f"\tstate directory = {w}/state\n\tcache directory = {w}/cache\n"
            f"\tpid directory = {w}/run\n\tncalrpc dir = {w}/run/ncalrpc\n"
            f"\tlog file = {w}/log.%m\n\tsmb ports = {self.port}\n"
            "\tinterfaces = 127.0.0.1\n\tbind interfaces only = yes\n"
            "\tload printers = no\n\tdisable spoolss = yes\n\tmap to guest = never\n"
            "\tserver signing = mandatory\n\tserver min protocol = SMB2_10\n"
            f"[SysVol]\n\tpath = {self.share}\n\tread only = yes\n"
        )
        subprocess.run(
            [SMBPASSWD, "-c", str(self.conf), "-s", "-a", self.user],
            input=f"{self.password}\n{self.password}\n".encode(),
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        log = (w / "smbd.out").open("ab")
        proc = subprocess.Popen(
            [SMBD, "--foreground", "--no-process-group", "-s", str(self.conf)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            # Its own process group: smbd signals its whole group when it exits, which
            # would otherwise be the test run's.
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self._proc = proc
        self._started()
        deadline = time.monotonic() + SMB_START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                self._stopped()
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                # Polling the port: smbd has no readiness notification to wait on.
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"smbd did not listen within {SMB_START_TIMEOUT:.0f} s")

    def stop(self) -> None:
        if self._proc is not None:
            procstat.terminate(self._proc, SMB_STOP_TIMEOUT)
            self._proc = None
            self._stopped()


# -- on a joined host (testing/adjoin.py), as an administrator does it -----------------

EDITOR = Path(__file__).resolve().parent / "adgpo_edit.py"


def samba_tool_gpo(host: adjoin.JoinedHost, *args: str) -> str:
    """``samba-tool gpo ARGS`` run on the joined host against the DC (LDAP and SMB
    as Administrator, whose password goes on standard input, never in argv)."""
    proc = adjoin.run(
        host.command([addc.SAMBA_TOOL, "gpo", *args, "-H", f"ldap://{adjoin.DC_FQDN}",
                      "-U", "Administrator", "-s", str(_client_conf(host))]),
        input=addc.ADMIN_PW + "\n", timeout=120,
    )  # fmt: skip
    return proc.stdout + proc.stderr


def create_gpo_on(host: adjoin.JoinedHost, name: str) -> Gpo:
    """``samba-tool gpo create``: the GPO's objects, and its folder copied into SYSVOL
    over the DC's SMB."""
    out = samba_tool_gpo(host, "create", name)
    m = re.search(r"created as (\{[0-9A-Fa-f-]+\})", out)
    if m is None:
        raise adjoin.AdJoinError(f"samba-tool gpo create: no GUID in {out[-500:]!r}")
    guid = m.group(1).upper()
    assert host.dc is not None
    folder = sysvol(host.dc) / adjoin.DOMAIN / "Policies" / guid
    return Gpo(guid, f"CN={guid},CN=Policies,CN=System,{addc.BASE_DN}", folder)


def link_on(host: adjoin.JoinedHost, som_dn: str, gpo: Gpo) -> None:
    """``samba-tool gpo setlink``: ``gpo`` linked to the site, domain or OU."""
    samba_tool_gpo(host, "setlink", som_dn, gpo.guid)


def set_logon_rights_on(host: adjoin.JoinedHost, gpo: Gpo, rights: dict[str, list[str]]
                        ) -> None:  # fmt: skip
    """The GPO's ``[Privilege Rights]`` saved as the Group Policy editor saves them:
    GptTmpl.inf and GPT.INI into SYSVOL over the DC's SMB, the GPO object's version
    and extension names over LDAP. (``samba-tool gpo manage security set`` writes only
    the Kerberos and password policies, not privilege rights.)"""
    gpo.version += 1
    files = {
        "\\".join(SECURITY_INF): _rights_inf(rights),
        "GPT.INI": f"[General]\r\nVersion={gpo.version}\r\n".encode(),
    }
    request = {
        "password": addc.ADMIN_PW,
        "folder": f"{adjoin.DOMAIN}\\Policies\\{gpo.guid}",
        "files": {k: base64.b64encode(v).decode() for k, v in files.items()},
        "dn": gpo.dn,
        "replace": {"versionNumber": str(gpo.version),
                    "gPCMachineExtensionNames": MACHINE_EXTENSIONS},
    }  # fmt: skip
    adjoin.run(
        host.command([addc.SYSTEM_PYTHON, "-I", str(EDITOR), adjoin.DC_FQDN,
                      str(_client_conf(host))]),
        input=json.dumps(request), timeout=120,
    )  # fmt: skip


def _client_conf(host: adjoin.JoinedHost) -> Path:
    """An smb.conf for Samba's client tools on the host: the domain, nothing else."""
    path = host.workdir / "client-smb.conf"
    if not path.exists():
        path.write_text(
            f"[global]\n\tworkgroup = {addc.NETBIOS_DOMAIN}\n\trealm = {addc.REALM}\n"
            "\tclient signing = required\n"
        )
    return path
