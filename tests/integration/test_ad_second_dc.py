"""Two real Samba DCs: dc2 joined to the domain with ``samba-tool domain join`` (its
directory, users' keys included, replicated from dc1), its DNS records in the zone and
its DNS in the host's resolv.conf (testing/adjoin.py JoinedHost.add_dc). With dc1
stopped, a host joined with adcli and realmd's sssd.conf unchanged finds dc2 through
DNS: lookups through libnss_sss and a password login through pam_sss (a TGT from dc2's
KDC, validated against the host keytab) are answered by dc2.

Marked slow: the second DC's join and start take ~25 s on the idle 2-core machine, on
top of the first DC's provision and the host's join.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import addc, addir, adjoin, pamenv
from testing.adjoin import DOMAIN, JoinedHost
from testing.daemon import CachedDaemon
from testing.pamenv import service_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        (adjoin.skip_reason() or pamenv.skip_reason()) is not None,
        reason=adjoin.skip_reason() or pamenv.skip_reason() or "",
    ),
]

SUCCESS = 0
# A test user's password (Samba's complexity rules: three classes, 7+ characters).
ALICE_PW = "Al1ce-Passw0rd!"


def _enable_with_password(host: JoinedHost, user: str, password: str) -> None:
    """``samba-tool user setpassword`` and ``enable`` on dc1's database, the new
    password on standard input (as typed at its prompts)."""
    assert host.dc is not None
    sam = ["-H", str(host.dc.workdir / "private" / "sam.ldb")]
    for args, stdin in ((["setpassword", user], f"{password}\n{password}\n"),
                        (["enable", user], None)):  # fmt: skip
        adjoin.run(host.dc_command([addc.SAMBA_TOOL, "user", *args, *sam]), input=stdin)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JoinedHost]:
    work = tmp_path_factory.mktemp("ad2", numbered=True)
    with JoinedHost(work, addir.small(big_members=5)) as h:
        _enable_with_password(h, "alice", ALICE_PW)  # before the join: replicated
        h.add_dc()
        yield h


def _daemon(host: JoinedHost, work: Path) -> CachedDaemon:
    """realmd's sssd.conf; the users' ccaches in the test's directory, not /tmp."""
    text = host.cached_config(work)
    extra = f"krb5_ccname_template = FILE:{work}/krb5cc_%U\n"
    text = text.replace(f"[domain/{DOMAIN}]\n", f"[domain/{DOMAIN}]\n{extra}", 1)
    return CachedDaemon.from_text(work, text, prefix=host.prefix)


def _id(host: JoinedHost, d: CachedDaemon, name: str) -> str:
    r = host.run_nss(["id", name], d.pipes_dir, d.mc_dir)
    assert r.returncode == 0, r.stderr + d.log_tail()
    return r.stdout.strip()


def test_dc2_replicated_the_users(host: JoinedHost) -> None:
    assert host.dc2 is not None
    out = subprocess.run(
        ["ldbsearch", "-H", str(host.dc2.workdir / "private" / "sam.ldb"),
         "(sAMAccountName=alice)", "sAMAccountName", "memberOf"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert "sAMAccountName: alice" in out
    assert f"memberOf: CN=eng,{addir.GROUPS}" in out


def test_lookups_and_login_go_to_dc2_when_dc1_stops(host: JoinedHost, tmp_path: Path) -> None:
    assert host.dc is not None
    with _daemon(host, tmp_path) as d:
        assert f"eng@{DOMAIN}" in _id(host, d, f"alice@{DOMAIN}")
        assert "bound to ldap://dc1.cached.test" in d.log_text(), d.log_tail()
        host.dc.stop()
        try:
            # bob was never looked up: the answer can only come from a DC.
            assert f"team@{DOMAIN}" in _id(host, d, f"bob@{DOMAIN}")
            log = d.log_text()
            assert "bound to ldap://dc2.cached.test as CLIENT1$@CACHED.TEST" in log, log[-3000:]
            env = d.pam_env({"login": service_file()})
            r = env.drive("login", f"alice@{DOMAIN}", ["authenticate"],
                          answers=[ALICE_PW])  # fmt: skip
            assert r.codes == [SUCCESS], d.log_tail()
            ccaches = list(tmp_path.glob("krb5cc_*"))
            assert len(ccaches) == 1, d.log_tail()
            klist = subprocess.run(
                host.command(["klist", "-c", f"FILE:{ccaches[0]}"]),
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert f"alice@{adjoin.REALM}" in klist.stdout, klist.stdout + klist.stderr
            assert f"krbtgt/{adjoin.REALM}@{adjoin.REALM}" in klist.stdout
            assert "Traceback" not in d.log_text(), d.log_tail()
        finally:
            host.dc.start()
