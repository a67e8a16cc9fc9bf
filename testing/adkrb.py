"""A Samba AD DC with its KDC, a computer account and its keytab: the Kerberos side of
an AD-joined host, for ``auth_provider = ad | krb5`` tests and perf/.

What a join leaves on a host, made without one: the DC (:mod:`testing.addc`) runs
``server services = ldap, kdc`` (Samba's ``kdc`` also serves kpasswd on 464) bound
to its namespace's loopback (``interfaces = 127.0.0.1``: Samba ignores a loopback
not named there, and its KDC would bind nothing); the computer account ``CLIENT1``
gets a random password (``samba-tool computer create --prepare-oldjoin``, then
``user setpassword``), and its keys are exported with ``samba-tool domain
exportkeytab --principal=CLIENT1$@REALM`` — the first principal of an ``adcli join``
keytab, the one SSSD's ``krb5_validate`` picks. A client on the host reaches the KDC
and kpasswd through TCP forwarders into the namespace (:mod:`testing.netnsfwd`),
named by address in a private ``krb5.conf`` (``KRB5_CONFIG``): ``kdc =
127.0.0.1:<port>`` with ``udp_preference_limit = 1`` (TCP only). Lookups go over
the DC's ``ldapi`` socket (no password crosses it: the logins are Kerberos').
``rogue_keytab`` holds keys for the same principal and key version that the KDC
does not know: a TGT the real KDC issued fails validation against it exactly as one
a rogue KDC issued fails against the real keytab.

Users (Samba's password policy: complexity, 7+ characters; minimum age 0 here, so a
test may change a password twice): ``PASSWORDS``, with ``EXPIRED`` created "must
change at next logon" (``pwdLastSet = 0``: KDC_ERR_KEY_EXP) and ``DISABLED``
disabled (KDC_ERR_CLIENT_REVOKED).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testing import addc
from testing.netnsfwd import NetnsForwarder

REALM = addc.REALM
DOMAIN = REALM.lower()
HOST = "CLIENT1"
HOST_PRINCIPAL = f"{HOST}$@{REALM}"
USERS_GID = 10000
PASSWORDS = {
    "kalice": "Kr-Al1ce-Secret7",
    "kbob": "Kr-B0b-Secret7",
    "kcarol": "Kr-Car0l-Secret7",
    "kdave": "Kr-Dav3-Secret7",
    "kerin": "Kr-Er1n-Secret7",
}
EXPIRED = "kcarol"
DISABLED = "kdave"
KDC_PORT, KPASSWD_PORT = 88, 464  # compiled into Samba


@dataclass
class KerberosDC:
    """A running DC with the host's keytab: ``krb5_conf`` names its KDC and kpasswd
    service by address, ``keytab`` is the host's, ``rogue_keytab`` one of the same
    principal with keys the KDC does not know."""

    dc: addc.SambaDC
    work: Path
    krb5_conf: Path
    keytab: Path
    rogue_keytab: Path
    forwarders: dict[int, NetnsForwarder]

    @property
    def ldapi_uri(self) -> str:
        return self.dc.ldapi_uri

    def domain_options(self, **extra: Any) -> dict[str, Any]:
        """The cached.conf domain options of an AD-joined host's sssd.conf (realmd's
        set, with lookups bound as the Administrator over ldapi until the join
        fixture's host binds replace them)."""
        opts: dict[str, Any] = {
            "ldap_schema": "ad",
            "ldap_default_bind_dn": self.dc.admin_dn,
            "ldap_default_authtok": self.dc.admin_pw,
            "auth_provider": "ad",
            "ad_domain": DOMAIN,
            "krb5_keytab": str(self.keytab),
            "cache_credentials": "true",
            "krb5_store_password_if_offline": "true",
        }
        opts.update(extra)
        return opts

    def env(self) -> dict[str, str]:
        """What a process needs to reach this KDC (the daemon's, klist's)."""
        return {"KRB5_CONFIG": str(self.krb5_conf)}

    def samba_tool(self, *args: str) -> str:
        """samba-tool against the running DC's sam.ldb (local, no network)."""
        sam = self.dc.workdir / "private" / "sam.ldb"
        proc = subprocess.run(
            [addc.SAMBA_TOOL, *args, "-H", str(sam), "-s", str(self.dc.conf)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise addc.SambaError(f"samba-tool {' '.join(args[:2])}: {proc.stderr[-1500:]}")
        return proc.stdout

    def stop(self) -> None:
        self.dc.stop()

    def start(self) -> None:
        """Start the DC again (after :meth:`stop`); the forwarders follow its new
        namespace."""
        self.dc.start()
        assert self.dc.pid is not None
        for f in self.forwarders.values():
            f.retarget(self.dc.pid)


def _samba_tool_offline(dc: addc.SambaDC, *args: str, local: bool = True) -> None:
    cmd = [addc.SAMBA_TOOL, *args]
    if local:
        cmd += ["-H", str(dc.workdir / "private" / "sam.ldb")]
    cmd += ["-s", str(dc.conf)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise addc.SambaError(f"samba-tool {' '.join(args[:2])}: {proc.stderr[-1500:]}")


def write_rogue_keytab(path: Path, principal: str, kvno: int) -> None:
    """Keys for ``principal`` at ``kvno`` that no KDC has: random, of each enctype."""
    import krb5

    ctx = krb5.init_context()
    kt = krb5.kt_resolve(ctx, f"FILE:{path}".encode())
    princ = krb5.parse_name_flags(ctx, principal.encode())
    for enctype, size in ((18, 32), (17, 16), (23, 16)):  # aes256, aes128, rc4
        key = krb5.init_keyblock(ctx, enctype, os.urandom(size))
        krb5.kt_add_entry(ctx, kt, princ, kvno, 0, key)


def keytab_kvno(path: Path) -> int:
    import krb5

    ctx = krb5.init_context()
    return max(e.kvno for e in krb5.kt_resolve(ctx, f"FILE:{path}".encode()))


@contextmanager
def kerberos_dc(work: Path) -> Iterator[KerberosDC]:
    """Provision, load, start; yields the running :class:`KerberosDC`, stops it."""
    missing = addc.available()
    if missing is not None:
        raise addc.SambaError(missing)
    work.mkdir(parents=True, exist_ok=True)
    dc = addc.SambaDC(work / "dc")
    dc.provision(services="ldap, kdc")
    text = dc.conf.read_text().replace(
        "[global]\n", "[global]\n\tinterfaces = 127.0.0.1\n\tbind interfaces only = yes\n", 1
    )
    dc.conf.write_text(text)
    # Domain Users' gidNumber; what samba-tool domain passwordsettings set
    # --min-pwd-age=0 --history-length=0 writes on the domain object; the users.
    dc.load(
        [],
        modify=[
            addc.ADEntry(f"CN=Domain Users,CN=Users,{dc.base_dn}", {"gidNumber": str(USERS_GID)}),
            addc.ADEntry(dc.base_dn, {"minPwdAge": "0", "pwdHistoryLength": "0"}),
        ],
        users=[
            addc.ADUser(login, password, 30001 + n, USERS_GID, disabled=login == DISABLED,
                        must_change=login == EXPIRED)
            for n, (login, password) in enumerate(sorted(PASSWORDS.items()))
        ],
    )  # fmt: skip
    _samba_tool_offline(dc, "computer", "create", HOST, "--prepare-oldjoin")
    _samba_tool_offline(dc, "user", "setpassword", f"{HOST}$",
                        f"--newpassword={os.urandom(18).hex()}-Aa1!")  # fmt: skip
    keytab = work / "krb5.keytab"
    _samba_tool_offline(dc, "domain", "exportkeytab", str(keytab),
                        f"--principal={HOST_PRINCIPAL}", local=False)  # fmt: skip
    keytab.chmod(0o600)
    rogue = work / "rogue.keytab"
    write_rogue_keytab(rogue, HOST_PRINCIPAL, keytab_kvno(keytab))
    dc.start()
    assert dc.pid is not None
    fwds = {port: NetnsForwarder(dc.pid, port) for port in (KDC_PORT, KPASSWD_PORT)}
    conf = work / "krb5.conf"
    conf.write_text(
        "[libdefaults]\n"
        f" default_realm = {REALM}\n"
        " dns_lookup_kdc = false\n"
        " dns_lookup_realm = false\n"
        " rdns = false\n"
        # TCP only: the forwarders carry TCP (MIT 1.20 has no "tcp/" prefix for kdc).
        " udp_preference_limit = 1\n"
        "[realms]\n"
        f" {REALM} = {{\n"
        f"  kdc = 127.0.0.1:{fwds[KDC_PORT].port}\n"
        f"  kpasswd_server = 127.0.0.1:{fwds[KPASSWD_PORT].port}\n"
        " }\n"
        "[domain_realm]\n"
        f" .{DOMAIN} = {REALM}\n"
    )
    kdc = KerberosDC(dc, work, conf, keytab, rogue, fwds)
    try:
        yield kdc
    finally:
        for f in fwds.values():
            f.close()
        dc.stop()
