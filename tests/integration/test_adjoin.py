"""A host joined to AD with ``adcli join`` (testing/adjoin.py), served by ``cached serve``
with realmd's sssd.conf (``id_provider = ad``): the host's keytab, a SASL GSSAPI bind
sealed as the DC requires (Samba's ``ldap server require strong auth = yes``), the DCs
from DNS SRV records, and the answers through glibc + libnss_sss in the host's own
namespaces; SSSD 2.8.2's AD provider beside it with the same file and keytab. Kerberos
logins through the real pam_sss.so on the host (the TGT in the user's ccache, a wrong
password, offline after the DC stops) and krb5_renew_interval's renewals against the
DC's KDC.

One DC and one join for the run, shared with test_adaccess.py (tests/conftest.py
joined_host: provisioning, loading and joining take 20-60 s).
"""

from __future__ import annotations

import contextlib
import datetime
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cached.config import parse_config
from testing import addc, addir, adjoin, sssd
from testing.adjoin import DOMAIN, JoinedHost
from testing.daemon import CachedDaemon
from testing.pamenv import service_file

pytestmark = pytest.mark.skipif(
    adjoin.skip_reason() is not None, reason=adjoin.skip_reason() or ""
)


@pytest.fixture(scope="module")
def host(joined_host: JoinedHost) -> JoinedHost:
    """The shared joined host (tests/conftest.py), serving adjoin.joined_directory()."""
    return joined_host


def _daemon(host: JoinedHost, work: Path, extra: str = "") -> CachedDaemon:
    text = host.cached_config(work)
    if extra:
        text = text.replace(f"[domain/{DOMAIN}]\n", f"[domain/{DOMAIN}]\n{extra}", 1)
    return CachedDaemon.from_text(work, text, prefix=host.prefix)


@pytest.fixture(scope="module")
def cached(host: JoinedHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CachedDaemon]:
    with _daemon(host, tmp_path_factory.mktemp("adjc")) as d:
        yield d


def _id(host: JoinedHost, d: CachedDaemon | sssd.SssdDaemon, name: str) -> str:
    r = host.run_nss(["id", name], d.pipes_dir, d.mc_dir)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _groups(id_line: str) -> dict[str, int]:
    part = id_line.split("groups=", 1)[1]
    return {m[1]: int(m[0]) for m in re.findall(r"(\d+)\(([^)]*)\)", part)}


# -- the join ---------------------------------------------------------------------------


def test_join_wrote_the_host_keytab(host: JoinedHost) -> None:
    listed = host.klist_keytab()
    assert "CLIENT1$@CACHED.TEST" in listed
    assert "host/client1.cached.test@CACHED.TEST" in listed
    assert host.keytab.stat().st_mode & 0o077 == 0


def test_realmd_sssd_conf_loads_unchanged(host: JoinedHost) -> None:
    """realmd's file as it is: every line understood, access_provider = ad with its
    AD defaults (the expire rule reads userAccountControl and accountExpires, GPOs
    enforced; tests/integration/test_adaccess.py)."""
    cfg = parse_config(adjoin.REALMD_SSSD_CONF)
    assert cfg.warnings == []
    d = cfg.domains[0]
    assert d.access_provider == "ad" and d.ldap_account_expire_policy == "ad"
    assert d.ad_gpo_access_control == "enforcing"
    assert (d.id_provider, d.ad_domain, d.krb5_realm) == ("ad", DOMAIN, "CACHED.TEST")
    assert d.ldap_schema == "ad" and d.ldap_id_mapping and d.ldap_sasl_mech == "gssapi"
    assert d.ldap_uri == ["ldap://_srv_"] and not d.ldap_default_bind_dn
    # The host's principal is its computer account, from the host's name.
    on_host = subprocess.run(
        host.command(["hostname"]), capture_output=True, text=True, check=True
    ).stdout.strip()
    assert on_host == adjoin.HOST_FQDN


# -- lookups through glibc + libnss_sss --------------------------------------------------


def test_id_nested_groups_and_primary_group(host: JoinedHost, cached: CachedDaemon) -> None:
    line = _id(host, cached, f"alice@{DOMAIN}")
    groups = _groups(line)
    assert {f"eng@{DOMAIN}", f"team@{DOMAIN}", f"domain users@{DOMAIN}"} <= set(groups)
    # The primary group is Domain Users (primaryGroupID 513), by ID mapping: its gid
    # is the domain's slice plus RID 513, the user's the slice plus its RID.
    m = re.match(r"uid=(\d+)\(alice@cached\.test\) gid=(\d+)\(domain users@cached\.test\)", line)
    assert m, line
    uid, gid = int(m[1]), int(m[2])
    base = gid - 513
    assert base >= 200000 and (base - 200000) % 200000 == 0 and uid > base + 1000
    assert groups[f"domain users@{DOMAIN}"] == gid
    # The distribution group is no POSIX group (SSSD: security groups only).
    assert f"{addir.DISTRIBUTION}@{DOMAIN}" not in _groups(_id(host, cached, f"bob@{DOMAIN}"))


def test_getent_group_through_the_sealed_connection(host: JoinedHost, cached: CachedDaemon
                                                    ) -> None:  # fmt: skip
    r = host.run_nss(["getent", "group", f"team@{DOMAIN}"], cached.pipes_dir, cached.mc_dir)
    assert r.returncode == 0, r.stderr
    members = set(r.stdout.strip().rsplit(":", 1)[1].split(","))
    assert members == {f"alice@{DOMAIN}", f"bob@{DOMAIN}"}
    log = cached.log_text()
    # The site from the DC's answer to the CLDAP netlogon ping, its DCs from DNS.
    assert f"DCs from DNS (site {adjoin.SITE}): ldap://dc1.cached.test" in log
    # Sealed (GSS_Wrap with confidentiality), as SSSD's AD provider seals by default.
    assert (
        "bound to ldap://dc1.cached.test as CLIENT1$@CACHED.TEST (GSSAPI, SASL layer seal)"
        in log
    )


def test_host_bind_uses_the_keytab_and_its_own_ccache(host: JoinedHost, cached: CachedDaemon
                                                      ) -> None:  # fmt: skip
    _id(host, cached, f"carol@{DOMAIN}")
    ccache = cached.db_dir / "ccache_CACHED.TEST"
    assert ccache.stat().st_mode & 0o777 == 0o600
    listed = subprocess.run(
        host.command(["klist", "-c", f"FILE:{ccache}"]), capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    assert "Default principal: CLIENT1$@CACHED.TEST" in listed
    assert "krbtgt/CACHED.TEST@CACHED.TEST" in listed
    assert "ldap/dc1.cached.test@CACHED.TEST" in listed
    assert "ldap_default_authtok" not in cached.config_path.read_text()


def test_no_password_in_any_file(host: JoinedHost, cached: CachedDaemon) -> None:
    """The administrator's password went to adcli on stdin only: no file of the host's
    /etc, nor cached's configuration, stores, ccache or log holds it."""
    _id(host, cached, f"alice@{DOMAIN}")
    secret = addc.ADMIN_PW.encode()
    found = [
        p
        for root in (host.etc, cached.workdir)
        for p in Path(root).rglob("*")
        if p.is_file() and not p.is_symlink() and secret in p.read_bytes()
    ]
    assert found == []


# -- DC discovery and failover ----------------------------------------------------------


def test_failover_from_a_frozen_dc(host: JoinedHost, tmp_path: Path) -> None:
    """DNS names dc0 first (same priority, heavier weight): it takes connections and
    never answers. The bind's deadline (ldap_opt_timeout) ends the wait on it and the
    lookup is answered by dc1."""
    srv = {"port": adjoin.FROZEN_PORT, "priority": 0, "weight": 200}
    host.add_srv("dc0", adjoin.FROZEN_IP, **srv)
    host.freeze_address(adjoin.FROZEN_IP)
    try:
        with _daemon(host, tmp_path, "ldap_opt_timeout = 5\n") as d:
            line = _id(host, d, f"alice@{DOMAIN}")
            assert f"eng@{DOMAIN}" in line
            log = d.log_text()
            found = f"DCs from DNS (site {adjoin.SITE}): ldap://dc0.cached.test:3389, ldap"
            assert found + "://dc1.cached.test" in log
            frozen = r"ldap://dc0\.cached\.test:3389: .*timed out after ldap_opt_timeout = 5"
            assert re.search(frozen, log), log[-3000:]
    finally:
        host.remove_srv("dc0", adjoin.FROZEN_IP, **srv)


def test_failover_when_the_serving_dc_freezes(host: JoinedHost, tmp_path: Path) -> None:
    """dc0 (a relay to dc1's LDAP port, first in DNS) serves the host, then freezes:
    the next lookup's search on it ends at ldap_search_timeout and the lookup is
    answered by dc1."""
    relay = host.relay(adjoin.RELAY_IP)
    srv = {"port": relay.port, "priority": 0, "weight": 200}
    host.add_srv("dc0", adjoin.RELAY_IP, **srv)
    try:
        extra = "ldap_opt_timeout = 5\nldap_search_timeout = 5\n"
        with _daemon(host, tmp_path, extra) as d:
            assert f"eng@{DOMAIN}" in _id(host, d, f"alice@{DOMAIN}")
            dc0 = f"ldap://dc0.cached.test:{relay.port}"
            assert f"bound to {dc0} as CLIENT1$@CACHED.TEST" in d.log_text()
            relay.set(stall=True)
            assert f"team@{DOMAIN}" in _id(host, d, f"bob@{DOMAIN}")
            log = d.log_text()
            assert re.search(re.escape(dc0) + r": .*timed out", log), log[-3000:]
            assert "bound to ldap://dc1.cached.test as CLIENT1$@CACHED.TEST" in log
    finally:
        relay.set(stall=False)
        host.remove_srv("dc0", adjoin.RELAY_IP, **srv)


# -- SSSD beside it ---------------------------------------------------------------------


def test_same_id_as_sssd(host: JoinedHost, cached: CachedDaemon,
                         tmp_path: Path) -> None:  # fmt: skip
    reason = sssd.skip_reason()
    if reason:
        pytest.skip(reason)
    s = sssd.SssdDaemon(tmp_path / "sssd", "", "")
    s.config = adjoin.REALMD_SSSD_CONF.replace("services = nss, pam", "services = nss")
    s.prefix = host.prefix
    with s:
        for name in ("alice", "bob", "carol", "dave", "administrator"):
            ours = _id(host, cached, f"{name}@{DOMAIN}")
            theirs = _id(host, s, f"{name}@{DOMAIN}")
            assert ours.split(" groups=")[0] == theirs.split(" groups=")[0]
            assert _groups(ours) == _groups(theirs), name


def test_an_expired_host_ticket_is_fetched_again_from_the_keytab(
    host: JoinedHost, tmp_path: Path
) -> None:
    """The backend's ccache holds a TGT that has expired (as after a long suspend): the
    next bind gets a new one from the keytab (MIT's credential store, kerberos.py)
    instead of failing the domain."""
    d = _daemon(host, tmp_path)
    d.db_dir.mkdir(mode=0o700, parents=True)
    ccache = f"FILE:{d.db_dir / 'ccache_CACHED.TEST'}"
    subprocess.run(
        host.command(["kinit", "-k", "-l", "4s", "-c", ccache, "CLIENT1$@CACHED.TEST"]),
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    before = _tgt_end(host, ccache)
    # Waiting for the ticket's end time to pass: the condition is the clock itself.
    while subprocess.run(host.command(["klist", "-s", "-c", ccache]), check=False).returncode == 0:
        time.sleep(0.5)
    with d:
        assert f"eng@{DOMAIN}" in _id(host, d, f"alice@{DOMAIN}")
        assert _tgt_end(host, ccache) > before
        assert "no Kerberos credentials" not in d.log_text()


def _tgt_end(host: JoinedHost, ccache: str) -> datetime.datetime:
    """The end time of the ccache's TGT (klist's C-locale dates)."""
    out = subprocess.run(
        host.command(["env", "LC_ALL=C", "klist", "-c", ccache]),
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        if line.rstrip().endswith("krbtgt/CACHED.TEST@CACHED.TEST"):
            fields = line.split()
            return datetime.datetime.strptime(f"{fields[2]} {fields[3]}", "%m/%d/%y %H:%M:%S")
    raise AssertionError(out)


# -- Kerberos logins through pam_sss on the host ------------------------------------------
#
# realmd's file as written: auth_provider is id_provider's (ad), so a password login is
# a TGT from the DC's KDC (found through the DNS SRV records of the host's krb5.conf),
# validated with the keytab adcli wrote and stored in the ccache krb5_ccname_template
# names (SSSD's default FILE:%d/krb5cc_%U_XXXXXX, %d = /tmp). pam_sss runs inside the
# host's namespaces (JoinedHost.pam_env). Only `authenticate` is driven: acct_mgmt is
# access_provider = ad's (GPOs: tests/integration/test_adaccess.py).

LOGIN_USER = "alice"
LOGIN_PASSWORD = "Kr-Al1ce-J0ined7"
LOGIN_SERVICE = "login"
SUCCESS, AUTH_ERR = 0, 7


# The ccaches the module's logins left in /tmp (removed by login_user's end).
_CCACHES: set[str] = set()


@pytest.fixture(scope="module")
def login_user(host: JoinedHost) -> Iterator[str]:
    """alice with a password (and enabled)."""
    host.set_password(LOGIN_USER, LOGIN_PASSWORD)
    yield f"{LOGIN_USER}@{DOMAIN}"
    for ccname in _CCACHES:
        Path(ccname.removeprefix("FILE:")).unlink(missing_ok=True)


def _ids(host: JoinedHost, d: CachedDaemon | sssd.SssdDaemon, name: str) -> tuple[int, int]:
    uid = host.run_nss(["id", "-u", name], d.pipes_dir, d.mc_dir)
    gid = host.run_nss(["id", "-g", name], d.pipes_dir, d.mc_dir)
    assert uid.returncode == gid.returncode == 0, uid.stderr + gid.stderr
    return int(uid.stdout), int(gid.stdout)


def _login(host: JoinedHost, d: CachedDaemon | sssd.SssdDaemon, user: str, password: str
           ) -> tuple[int, str]:  # fmt: skip
    """pam_sss's authenticate for ``user`` on the host: its PAM status and the
    KRB5CCNAME it left in the PAM environment ("" when none)."""
    d.pipes_dir.chmod(0o755)  # the public socket is for uid 65534 too
    env = host.pam_env(d.pipes_dir, {LOGIN_SERVICE: service_file()}, d.mc_dir)
    res = env.drive(LOGIN_SERVICE, user, ["authenticate"], answers=[password])
    (rc,) = res.codes
    ccname = res.env.get("KRB5CCNAME", "")
    if ccname:
        _CCACHES.add(ccname)
    return rc, ccname


def _check_ccache(host: JoinedHost, ccname: str, uid: int, gid: int) -> str:
    """The ccache is a file the user owns (0600) that ``klist -s`` as the user finds a
    valid TGT in; klist's listing."""
    assert ccname.startswith("FILE:/tmp/krb5cc_"), ccname
    st = Path(ccname[5:]).stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o600)
    assert host.run_as(uid, gid, ["klist", "-s", "-c", ccname]).returncode == 0
    return host.run_as(uid, gid, ["klist", "-c", ccname]).stdout


def test_kerberos_login_leaves_a_tgt_in_the_users_ccache(
    host: JoinedHost, cached: CachedDaemon, login_user: str
) -> None:
    uid, gid = _ids(host, cached, login_user)
    rc, ccname = _login(host, cached, login_user, LOGIN_PASSWORD)
    assert rc == SUCCESS, cached.log_tail()
    assert ccname.startswith(f"FILE:/tmp/krb5cc_{uid}_"), (ccname, cached.log_tail())
    listed = _check_ccache(host, ccname, uid, gid)
    assert f"Default principal: {LOGIN_USER}@CACHED.TEST" in listed, listed
    assert "krbtgt/CACHED.TEST@CACHED.TEST" in listed, listed
    log = cached.log_text()
    assert "TGT validation failed" not in log and "Traceback" not in log, cached.log_tail()
    secret = LOGIN_PASSWORD.encode()
    assert [f for f in cached.workdir.rglob("*") if f.is_file() and secret in f.read_bytes()
            ] == []  # fmt: skip


def test_kerberos_login_with_a_wrong_password_is_refused(
    host: JoinedHost, cached: CachedDaemon, login_user: str
) -> None:
    rc, ccname = _login(host, cached, login_user, "Not-The-Passw0rd")
    assert (rc, ccname) == (AUTH_ERR, ""), cached.log_tail()
    assert "KDC_ERR_PREAUTH_FAILED" in cached.log_text(), cached.log_tail()


def test_kerberos_login_as_sssd(host: JoinedHost, login_user: str, tmp_path: Path) -> None:
    """SSSD 2.8.2 with realmd's file and the keytab: the same statuses, and its
    krb5_child's ccache of the same name pattern, owner and TGT."""
    reason = sssd.skip_reason()
    if reason:
        pytest.skip(reason)
    s = sssd.SssdDaemon(tmp_path / "sssd", "", "", pam={})
    s.config = adjoin.REALMD_SSSD_CONF
    s.prefix = host.prefix
    with s:
        uid, gid = _ids(host, s, login_user)
        rc, ccname = _login(host, s, login_user, LOGIN_PASSWORD)
        assert rc == SUCCESS, s.log_tail()
        assert ccname.startswith(f"FILE:/tmp/krb5cc_{uid}_"), ccname
        assert f"Default principal: {LOGIN_USER}@CACHED.TEST" in _check_ccache(
            host, ccname, uid, gid)  # fmt: skip
        assert _login(host, s, login_user, "Not-The-Passw0rd") == (AUTH_ERR, "")


# Samba 4.17's KDC answers KRB_AP_ERR_TKT_EXPIRED to a TGS request (a renewal, or the
# service ticket of krb5_validate) made with a TGT that has less than two minutes left
# (measured: a 2m40s TGT renews until 40 s have passed, a 2m one never). A renewal at
# half the lifetime needs a lifetime over four minutes: the test of a renewal that
# succeeds waits that long (slow, make soak); the ordinary suite has the renewal of a
# 20 s TGT, which the KDC refuses and the backend drops.


def _wait_for(what: str, done: Callable[[], bool], d: CachedDaemon, timeout: float
              ) -> None:  # fmt: skip
    """Polled: the renewal runs on the backend's own timer, at a time the ticket's
    clock sets."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}:\n{d.log_tail()}"
        time.sleep(0.5)


@pytest.mark.slow
def test_tgt_renewed_in_the_background(host: JoinedHost, login_user: str, tmp_path: Path
                                      ) -> None:  # fmt: skip
    """krb5_renew_interval: the login's TGT (a 5 minute lifetime asked for, renewable
    for an hour) is renewed by the backend in the same ccache once half its lifetime
    has passed: the end time moves on, the renewable lifetime is the first ticket's
    (renewed, not got anew), the file stays the user's and its TGT valid. SSSD 2.8.2
    with the same lines, logged in at the same time, renews its own ccache so."""
    extra = "krb5_renew_interval = 5s\nkrb5_lifetime = 5m\nkrb5_renewable_lifetime = 1h\n"
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(_daemon(host, tmp_path / "cached", extra))
        uid, gid = _ids(host, d, login_user)
        rc, ccname = _login(host, d, login_user, LOGIN_PASSWORD)
        assert rc == SUCCESS, d.log_tail()
        watched = {"cached": ccname}
        if sssd.skip_reason() is None:
            s = sssd.SssdDaemon(tmp_path / "sssd", "", "", pam={})
            s.config = adjoin.REALMD_SSSD_CONF.replace(
                f"[domain/{DOMAIN}]\n", f"[domain/{DOMAIN}]\n{extra}", 1)  # fmt: skip
            s.prefix = host.prefix
            stack.enter_context(s)
            rc, watched["SSSD"] = _login(host, s, login_user, LOGIN_PASSWORD)
            assert rc == SUCCESS, s.log_tail()
        first = {who: _tgt_end(host, cc) for who, cc in watched.items()}
        renew_till = {who: _tgt_renew_till(host, cc) for who, cc in watched.items()}
        _wait_for("no renewal", lambda: all(
            _tgt_end(host, cc) != first[who] for who, cc in watched.items()), d, 600)
        for who, cc in watched.items():
            assert _tgt_end(host, cc) > first[who], who
            assert _tgt_renew_till(host, cc) == renew_till[who], who
            listed = _check_ccache(host, cc, uid, gid)
            assert f"Default principal: {LOGIN_USER}@CACHED.TEST" in listed, (who, listed)
        assert f"renewed the TGT of '{LOGIN_USER}' in {ccname}" in d.log_text(), d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_tgt_renewal_at_half_its_lifetime_refused_by_the_kdc(
    host: JoinedHost, login_user: str, tmp_path: Path
) -> None:
    """krb5_renew_interval with a 20 s TGT (not validated: the KDC would refuse the
    validation's service ticket as well): at half its lifetime the backend asks the
    KDC to renew it, the KDC refuses (too little left): the reason is in the log and
    the ccache is left as the login wrote it."""
    extra = ("krb5_renew_interval = 2s\nkrb5_lifetime = 20s\nkrb5_renewable_lifetime = 1h\n"
             "krb5_validate = false\n")  # fmt: skip
    with _daemon(host, tmp_path, extra) as d:
        uid, gid = _ids(host, d, login_user)
        rc, ccname = _login(host, d, login_user, LOGIN_PASSWORD)
        assert rc == SUCCESS, d.log_tail()
        first = _tgt_end(host, ccname)
        refused = f"cannot renew the TGT of '{LOGIN_USER}' in {ccname}: the TGT has expired"
        _wait_for("no renewal", lambda: refused in d.log_text(), d, 120)
        assert _tgt_end(host, ccname) == first
        st = Path(ccname[5:]).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o600)
        assert "Traceback" not in d.log_text(), d.log_tail()


def _tgt_renew_till(host: JoinedHost, ccache: str) -> str:
    out = subprocess.run(
        host.command(["env", "LC_ALL=C", "klist", "-c", ccache]),
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    for n, line in enumerate(lines):
        if line.rstrip().endswith("krbtgt/CACHED.TEST@CACHED.TEST"):
            following = lines[n + 1].strip() if n + 1 < len(lines) else ""
            assert following.startswith("renew until "), out
            return following.removeprefix("renew until ")
    raise AssertionError(out)


def test_offline_kerberos_login_after_the_dc_stops(
    host: JoinedHost, cached: CachedDaemon, login_user: str
) -> None:
    """The last online login left its cached credentials (cache_credentials = True in
    realmd's file); with the DC (KDC, LDAP, DNS) stopped the password logs in against
    them, a wrong one does not, and KRB5CCNAME names a ccache the user owns with no
    ticket yet (krb5_store_password_if_offline = True). Runs last: it stops the DC."""
    assert host.dc is not None
    uid, gid = _ids(host, cached, login_user)
    assert _login(host, cached, login_user, LOGIN_PASSWORD)[0] == SUCCESS, cached.log_tail()
    host.dc.stop()
    try:
        rc, ccname = _login(host, cached, login_user, LOGIN_PASSWORD)
        assert rc == SUCCESS, cached.log_tail()
        offline = rf"offline login of '{LOGIN_USER}(@{DOMAIN})?': PAM status 0"
        assert re.search(offline, cached.log_text()), cached.log_tail()
        st = Path(ccname[5:]).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o600)
        assert host.run_as(uid, gid, ["klist", "-s", "-c", ccname]).returncode != 0
        assert _login(host, cached, login_user, "Not-The-Passw0rd") == (AUTH_ERR, "")
        # No KDC is asked again within offline_timeout, as SSSD's backend marked offline.
        again = rf"no KDC answered \d+ s ago; '{LOGIN_USER}(@{DOMAIN})?' logs in with cached"
        assert re.search(again, cached.log_text()), cached.log_tail()
    finally:
        host.dc.start()
