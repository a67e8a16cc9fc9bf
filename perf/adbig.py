"""bigroupuser on a Samba AD DC: cached (``ldap_schema = ad``) beside SSSD 2.8.2.

The bigroupuser directory of testing/gendir.py mapped to Active Directory: 5,001 users
``CN=<full name>,OU=people,…`` with ``sAMAccountName`` and rfc2307 attributes, 2,999
groups ``CN=<name>,OU=groups,…`` with ``gidNumber`` and ``member`` DNs (the nesting
tree, three groups of 5,000 members, fillers); the primary group is Domain Users with
``gidNumber`` 10000 (``primaryGroupID`` 513). Loading takes about a minute, so the
loaded, stopped DC is kept in ``<workdir>/dc`` and reused by later runs.

Measured per daemon, each from an empty cache: cold ``id bigroupuser`` (wall time,
LDAP searches), cold ``getent initgroups bigroupuser``, cold ``getent group large01``,
then ``id`` again from the warm cache through the socket. cached's searches are its
own counters (each a logical search, ranged reads included); SSSD's are the
``ldap_search_ext`` calls its domain log shows (``debug_level = 0x0400``). The gids
of every ``id`` are checked against the directory's expected answer (tokenGroups give
the whole transitive closure, so the deepest level).

    python -m perf.adbig [--workdir DIR] [--no-sssd]

``--joined``: the same directory on an AD-joined host (testing/adjoin.py: a Samba DC
with KDC and DNS in its network namespace, the host joined with ``adcli join``), both
daemons with the file realmd writes (``id_provider = ad``: GSSAPI with the host keytab,
a sealed session, the DC from DNS SRV records, ID mapping), one after the other, each
from an empty cache: cold ``id bigroupuser@cached.test``, then warm ``id`` through the
socket; searches as above; bytes: what the host received over its veth link from the
DC during the cold ``id`` (LDAP, Kerberos and DNS with TCP/IP headers, the same measure
for both) and cached's own count of LDAP bytes read. A first cached run, not
reported, reads every object once, so both daemons meet a warm DC.

    python -m perf.adbig --joined [--workdir DIR] [--repeat N] [--no-sssd] [--login]

``--login`` adds, for each daemon, from an empty cache: a cold login of
``bigroupuser@cached.test`` (``authenticate acct_mgmt`` through the real pam_sss.so in
the host's namespaces: the user and its thousands of groups resolved, the TGT got from
the KDC, validated with the host keytab and stored in the user's ccache), then a warm
login (the user cached, a new TGT: both daemons ask the KDC at every login); the
figure is pam_sss's transaction as testing/pamdriver.py times it (pam_start to
pam_end), searches and bytes as for ``id``. Both daemons have realmd's file with
``ad_gpo_access_control = disabled`` (the DC serves no SMB, so neither could read the
GPOs). SSSD's cold ``id`` took 808 s here: with ``--login`` SSSD runs the logins only
(with ID mapping its login reads the user's tokenGroups and maps the SIDs, seconds),
``--repeat`` rounds alternating with cached's.

With ``--krb5-login``, instead: Kerberos logins on the KDC of testing/adkrb.py, cached
beside SSSD (below).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ldap3

from cached.counters import LDAP_BYTES, LDAP_SEARCH
from testing import addc, adjoin, adkrb, adkrb_sssd, gendir, nsenv, sssd
from testing.addir import DOMAIN_USERS, GROUPS, PEOPLE, ADDirectory, _rdn_value
from testing.daemon import CachedDaemon
from testing.pamenv import service_file

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}
BIG = "bigroupuser"


def ad_entries(d: gendir.Directory) -> tuple[list[addc.ADEntry], list[addc.ADEntry]]:
    """The directory as AD objects (children before the groups that list them: Samba
    checks that a ``member`` DN exists when it is added)."""
    entries = [
        addc.ADEntry(PEOPLE, {"objectClass": "organizationalUnit"}),
        addc.ADEntry(GROUPS, {"objectClass": "organizationalUnit"}),
    ]
    user_dn: dict[str, str] = {}
    for u in d.users:
        dn = user_dn[u.name] = f"CN={_rdn_value(u.gecos)},{PEOPLE}"
        entries.append(addc.ADEntry(dn, {
            "objectClass": "user", "sAMAccountName": u.name, "uidNumber": str(u.uid),
            "gidNumber": str(u.gid), "unixHomeDirectory": u.home, "loginShell": u.shell,
            "gecos": u.gecos,
        }))  # fmt: skip
    group_dn = {g.name: f"CN={g.name},{GROUPS}" for g in d.groups}
    for g in d.groups:
        if g.name == gendir.PRIMARY_GROUP:
            continue  # Domain Users, by primaryGroupID
        attrs: dict[str, str | list[str]] = {
            "objectClass": "group", "sAMAccountName": g.name, "gidNumber": str(g.gid)}  # fmt: skip
        members = [group_dn[c] for c in g.member_groups] + [user_dn[m] for m in g.members]
        if members:
            attrs["member"] = members
        entries.append(addc.ADEntry(group_dn[g.name], attrs))
    modify = [addc.ADEntry(DOMAIN_USERS, {"gidNumber": str(gendir.PRIMARY_GID)})]
    return entries, modify


def prepared_dc(workdir: Path) -> tuple[addc.SambaDC, float]:
    """The loaded DC in ``workdir/dc`` (provisioned and loaded on first use); returns
    it with the load time (0 when reused)."""
    dc = addc.SambaDC(workdir / "dc")
    marker = workdir / "dc.loaded"
    if marker.exists():
        return dc, 0.0
    d = gendir.build(gendir.BIGROUPUSER)
    entries, modify = ad_entries(d)
    dc.provision()
    t0 = time.monotonic()
    dc.load(entries, modify=modify)
    took = time.monotonic() - t0
    marker.write_text(f"{took:.1f}\n")
    return dc, took


def _gids(out: str) -> set[int]:
    return {int(x.split("(")[0]) for x in out.strip().split("groups=", 1)[1].split(",")}


def _timed(run: Any, argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = run(argv, env=SOCKET_ONLY)
    return time.monotonic() - t0, r


STEPS = (
    ("cold id", ["id", BIG]),
    ("cold initgroups", ["getent", "initgroups", BIG]),
    ("cold group large01", ["getent", "group", "large01"]),
)
Row = tuple[str, float, int, bool, list[float]]  # step, median wall, searches, exact, walls


def _measure(start: Any, want: set[int], large01: set[str], repeat: int = 1) -> list[Row]:
    """The steps, each from an empty cache, ``repeat`` times (medians, the steps
    alternating): ``start(i)`` enters a fresh daemon and returns (daemon,
    searches-so-far function)."""
    got: dict[str, list[tuple[float, int, bool]]] = {}
    for rep in range(repeat):
        for i, (step, argv) in enumerate(STEPS):
            with start(rep * len(STEPS) + i) as (d, searches):
                n0 = searches()
                wall, r = _timed(d.run_nss, argv)
                if step == "cold id":
                    ok = r.returncode == 0 and _gids(r.stdout) == want
                elif step == "cold initgroups":
                    ok = r.returncode == 0 and {int(g) for g in r.stdout.split()[1:]} == want
                else:
                    fields = r.stdout.rstrip("\n").split(":")
                    ok = len(fields) == 4 and set(fields[3].split(",")) == large01
                got.setdefault(step, []).append((wall, searches() - n0, ok))
                if not ok:  # what was wrong goes to stderr (the report says "NO")
                    print(f"{step}: rc {r.returncode}, stdout {r.stdout[:300]!r}, "
                          f"stderr {r.stderr[-300:]!r}", file=sys.stderr)  # fmt: skip
                if i == 0:
                    n0 = searches()
                    wall, r = _timed(d.run_nss, ["id", BIG])
                    ok = r.returncode == 0 and _gids(r.stdout) == want
                    got.setdefault("warm id (socket)", []).append((wall, searches() - n0, ok))
                    if not ok:
                        print(f"warm id: rc {r.returncode}, stdout {r.stdout[:300]!r}, "
                              f"stderr {r.stderr[-300:]!r}", file=sys.stderr)  # fmt: skip
                    # The primary group after the user is cached: exact = its `member`
                    # values, none (SSSD adds the cached users of its gid,
                    # docs/compatibility.md §9.5).
                    n0 = searches()
                    wall, r = _timed(d.run_nss, ["getent", "group", "Domain Users"])
                    fields = r.stdout.rstrip("\n").split(":")
                    ok = r.returncode == 0 and len(fields) == 4 and fields[3] == ""
                    step = "group Domain Users after id"
                    got.setdefault(step, []).append((wall, searches() - n0, ok))
                    if not ok:
                        print(f"{step}: rc {r.returncode}, stdout {r.stdout[:300]!r}",
                              file=sys.stderr)  # fmt: skip
    return [
        (step, statistics.median(w for w, _, _ in runs), max(n for _, n, _ in runs),
         all(ok for _, _, ok in runs), [w for w, _, _ in runs])
        for step, runs in got.items()
    ]  # fmt: skip


def measure_cached(
    dc: addc.SambaDC, work: Path, want: set[int], large01: set[str], repeat: int = 1
) -> list[Row]:
    opts: dict[str, Any] = {"ldap_schema": "ad", "ldap_default_bind_dn": dc.admin_dn,
            "ldap_default_authtok": dc.admin_pw}  # fmt: skip

    @contextlib.contextmanager
    def start(i: int) -> Iterator[tuple[CachedDaemon, Callable[[], int]]]:
        with CachedDaemon(work / f"cached{i}", [dc.ldapi_uri], dc.base_dn, log_level="info",
                          **opts) as d:  # fmt: skip
            yield d, lambda: int(d.counters().get(LDAP_SEARCH, [0])[0])

    return _measure(start, want, large01, repeat)


_SSSD_SEARCH = re.compile(rb"calling ldap_search_ext with")


def measure_sssd(uri: str, base: str, work: Path, want: set[int], large01: set[str]
                 ) -> list[Row]:  # fmt: skip
    from testing.sssd import SssdDaemon

    opts: dict[str, Any] = {"ldap_schema": "ad", "ldap_default_bind_dn": addc.ADMIN_DN,
            "ldap_default_authtok": addc.ADMIN_PW, "ldap_use_tokengroups": "true",
            "ldap_id_mapping": "false", "ldap_referrals": "false",
            "debug_level": "0x0400"}  # fmt: skip

    @contextlib.contextmanager
    def start(i: int) -> Iterator[tuple[SssdDaemon, Callable[[], int]]]:
        s = SssdDaemon(work / f"sssd{i}", uri, base, **opts)

        def searches() -> int:
            files = [s.stderr_path, *s.log_dir.glob("*.log")]
            return sum(len(_SSSD_SEARCH.findall(f.read_bytes())) for f in files if f.exists())

        with s:
            yield s, searches

    return _measure(start, want, large01)


def sssd_in_dc_netns(dc: addc.SambaDC, work: Path) -> list[Row]:
    """SSSD 2.8.2 given the DC's ldapi:// socket goes offline at once (0 searches;
    apparently its failover resolves the socket path as a host name), so it runs in
    the DC's network namespace and reaches it over TCP, ldap://127.0.0.1."""
    if dc.pid is None:
        raise addc.SambaError("the DC is not running")
    cmd = ["nsenter", f"--net=/proc/{dc.pid}/ns/net", "--", sys.executable, "-m",
           "perf.adbig", "--inner-sssd", "--workdir", str(work)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False,
                       cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"SSSD measurement failed:\n{r.stderr[-3000:]}")
    for line in r.stderr.splitlines():
        if line.startswith(("cold ", "warm ", "group ")):
            print(f"SSSD {line}", file=sys.stderr)
    return [tuple(row) for row in json.loads(r.stdout.splitlines()[-1])]


def _warm(dc: addc.SambaDC) -> None:
    """Read every object once, so the measurements meet a DC whose database is in the
    page cache, as a DC in service is (measured: the first searches after a start
    were 3-10x slower than the same searches later)."""
    conn = dc.connect()
    try:
        conn.extend.standard.paged_search(
            dc.base_dn, "(|(objectClass=user)(objectClass=group))", ldap3.SUBTREE,
            attributes=["sAMAccountName", "member", "objectSid"], paged_size=1000,
            generator=False,
        )  # fmt: skip
    finally:
        conn.unbind()


def _print(results: dict[str, list[Row]], gids: int) -> None:
    print(f"bigroupuser on a Samba AD DC ({gids} gids expected)\n")
    print("| daemon | step | wall (s) | LDAP searches | exact |")
    print("|---|---|---|---|---|")
    for who, rows in results.items():
        for step, wall, n, ok, walls in rows:
            spread = ""
            if len(walls) > 1:
                spread = f" ({min(walls):.2f}-{max(walls):.2f}, {len(walls)} runs)"
            print(f"| {who} | {step} | {wall:.2f}{spread} | {n} | {'yes' if ok else 'NO'} |")
    print(flush=True)


JOINED_USER = f"bigroupuser@{adjoin.DOMAIN}"
# who, step, wall, searches, bytes over the veth link, LDAP bytes (cached), gids
JoinedRow = tuple[str, str, float, int, int, int, int]


def joined_rx_bytes(host: adjoin.JoinedHost) -> int:
    """Bytes the host's side of the veth link has received (its own /proc/net/dev)."""
    out = subprocess.run(host.command(["cat", "/proc/net/dev"], net_only=True),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for line in out.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "veth-host":
            return int(rest.split()[0])
    raise LookupError("veth-host")


def _joined_id(
    host: adjoin.JoinedHost, d: CachedDaemon | sssd.SssdDaemon
) -> tuple[float, set[int]]:
    t0 = time.monotonic()
    r = subprocess.run(host.nss_command(["id", JOINED_USER], d.pipes_dir, d.mc_dir),
                       env={**nsenv.nss_env(), **SOCKET_ONLY}, capture_output=True,
                       text=True, timeout=3600, check=False)  # fmt: skip
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"id {JOINED_USER}: {r.stderr.strip()}")
    return wall, _gids(r.stdout)


def joined_cached(host: adjoin.JoinedHost, work: Path, who: str = "cached") -> list[JoinedRow]:
    text = host.cached_config(work)
    with CachedDaemon.from_text(work, text, prefix=host.prefix, log_level="info") as d:
        def count(name: str) -> int:
            return int(d.counters().get(name, [0, 0, 0])[0 if name == LDAP_SEARCH else 2])

        n0, b0, v0 = count(LDAP_SEARCH), count(LDAP_BYTES), joined_rx_bytes(host)
        wall, gids = _joined_id(host, d)
        cold = (who, "cold id", wall, count(LDAP_SEARCH) - n0, joined_rx_bytes(host) - v0,
                count(LDAP_BYTES) - b0, len(gids))  # fmt: skip
        n0 = count(LDAP_SEARCH)
        wall, warm_gids = _joined_id(host, d)
        assert warm_gids == gids
        warm = (who, "warm id (socket)", wall, count(LDAP_SEARCH) - n0, 0, 0, len(gids))
        joined_cached.gids = gids  # type: ignore[attr-defined]
    return [cold, warm]


def joined_sssd(host: adjoin.JoinedHost, work: Path) -> list[JoinedRow]:
    s = sssd.SssdDaemon(work, "", "")
    conf = adjoin.REALMD_SSSD_CONF.replace("services = nss, pam", "services = nss")
    s.config = conf + "debug_level = 0x0400\n"
    s.prefix = host.prefix

    def searches() -> int:
        files = [s.stderr_path, *s.log_dir.glob("*.log")]
        return sum(len(_SSSD_SEARCH.findall(f.read_bytes())) for f in files if f.exists())

    with s:
        n0, v0 = searches(), joined_rx_bytes(host)
        wall, gids = _joined_id(host, s)
        veth = joined_rx_bytes(host) - v0
        cold = ("SSSD 2.8.2", "cold id", wall, searches() - n0, veth, 0, len(gids))
        n0 = searches()
        wall, warm_gids = _joined_id(host, s)
        warm = ("SSSD 2.8.2", "warm id (socket)", wall, searches() - n0, 0, 0, len(warm_gids))
        joined_sssd.gids = gids  # type: ignore[attr-defined]
    return [cold, warm]


JOINED_PASSWORD = "Big-Gr0up-Us3r-pw7"
JOINED_LOGIN = ["authenticate", "acct_mgmt"]
# Neither daemon can read SYSVOL from this DC (no SMB): GPOs not evaluated, for both.
LOGIN_EXTRA = "ad_gpo_access_control = disabled\n"
LOGIN_RESULTS: list[str] = []


def _login_conf(text: str) -> str:
    head = f"[domain/{adjoin.DOMAIN}]\n"
    return text.replace(head, head + LOGIN_EXTRA, 1)


def _joined_logins(
    who: str, host: adjoin.JoinedHost, d: CachedDaemon | sssd.SssdDaemon,
    searches: Callable[[], int], ldap_bytes: Callable[[], int],
) -> list[JoinedRow]:  # fmt: skip
    """A cold then a warm login of the big user through pam_sss on the host."""
    d.pipes_dir.chmod(0o755)  # the public socket is for uid 65534 too
    env = host.pam_env(d.pipes_dir, {"login": service_file()}, d.mc_dir)
    rows: list[JoinedRow] = []
    for step in ("cold login", "warm login"):
        n0, b0, v0 = searches(), ldap_bytes(), joined_rx_bytes(host)
        r = env.drive("login", JOINED_USER, JOINED_LOGIN, answers=[JOINED_PASSWORD],
                      timeout=3600)  # fmt: skip
        # A failed login is reported, not raised: pam_sss gives up on a responder that
        # has not answered within its own timeout, which a cold login may exceed.
        errors = ", ".join(c.error for c in r.calls)
        LOGIN_RESULTS.append(f"{who} {step}: PAM codes {r.codes} ({errors}), {r.seconds:.2f} "
                             f"s, KRB5CCNAME set: {'KRB5CCNAME' in r.env}")  # fmt: skip
        rows.append((who, step, r.seconds, searches() - n0, joined_rx_bytes(host) - v0,
                     ldap_bytes() - b0, 0))  # fmt: skip
        if "KRB5CCNAME" in r.env:
            CCACHES.append(r.env["KRB5CCNAME"])
        print(rows[-1], LOGIN_RESULTS[-1], flush=True)
    return rows


def joined_cached_logins(host: adjoin.JoinedHost, work: Path) -> list[JoinedRow]:
    text = _login_conf(host.cached_config(work))
    with CachedDaemon.from_text(work, text, prefix=host.prefix, log_level="info") as d:
        def count(name: str) -> int:
            return int(d.counters().get(name, [0, 0, 0])[0 if name == LDAP_SEARCH else 2])

        return _joined_logins("cached", host, d, lambda: count(LDAP_SEARCH),
                              lambda: count(LDAP_BYTES))  # fmt: skip


def joined_sssd_logins(host: adjoin.JoinedHost, work: Path) -> list[JoinedRow]:
    s = sssd.SssdDaemon(work, "", "", pam={})
    s.config = _login_conf(adjoin.REALMD_SSSD_CONF) + "debug_level = 0x0400\n"
    s.prefix = host.prefix

    def searches() -> int:
        files = [s.stderr_path, *s.log_dir.glob("*.log")]
        return sum(len(_SSSD_SEARCH.findall(f.read_bytes())) for f in files if f.exists())

    with s:
        return _joined_logins("SSSD 2.8.2", host, s, searches, lambda: 0)


# The ccaches the logins left (KRB5CCNAME), removed at the end of the run.
CCACHES: list[str] = []


def _remove_ccaches() -> None:
    for ccname in CCACHES:
        Path(ccname.removeprefix("FILE:")).unlink(missing_ok=True)


def joined_main(work: Path | None, repeat: int, no_sssd: bool, login: bool = False) -> int:
    """``--joined``: the module doc's last part."""
    reason = adjoin.skip_reason()
    if reason:
        print(f"cannot make a joined host: {reason}", file=sys.stderr)
        return 2
    work = work or Path(tempfile.mkdtemp(prefix="adjb", dir="/tmp"))
    d = gendir.build(gendir.BIGROUPUSER)
    entries, modify = ad_entries(d)
    t0 = time.monotonic()
    with adjoin.JoinedHost(work / "host", ADDirectory(entries, modify)) as host:
        print(f"provisioned, loaded and joined in {time.monotonic() - t0:.0f} s", flush=True)
        joined_cached(host, work / "warmup", "warm-up")
        rows: list[JoinedRow] = []
        for i in range(repeat):
            rows += joined_cached(host, work / f"cached{i}")
            print(rows[-2], rows[-1], flush=True)
        if login:
            host.set_password(BIG, JOINED_PASSWORD)
            try:
                # The daemons alternate, the order swapped each round.
                for i in range(repeat):
                    order = ["cached", "sssd"] if i % 2 == 0 else ["sssd", "cached"]
                    for who in order:
                        if who == "cached":
                            rows += joined_cached_logins(host, work / f"cached-login{i}")
                        elif not no_sssd:
                            rows += joined_sssd_logins(host, work / f"sssd-login{i}")
            finally:
                _remove_ccaches()
        elif not no_sssd:
            rows += joined_sssd(host, work / "sssd")
            print(rows[-2], rows[-1], flush=True)
            same = joined_sssd.gids == joined_cached.gids  # type: ignore[attr-defined]
            print(f"cached and SSSD answer the same gids: {same}")
    _joined_print(rows)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _joined_print(rows: list[JoinedRow]) -> None:
    print("\n| daemon | step | wall (s) | LDAP searches | bytes received (veth) "
          "| LDAP bytes (cached) | gids (0: a login) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    keys = dict.fromkeys((r[0], r[1]) for r in rows)
    for who, step in keys:
        runs = [r for r in rows if (r[0], r[1]) == (who, step)]
        walls = [r[2] for r in runs]
        wall = f"{statistics.median(walls):.2f}"
        if len(walls) > 1:
            wall += f" ({min(walls):.2f}-{max(walls):.2f}, {len(walls)} runs)"
        last = runs[-1]
        print(f"| {who} | {step} | {wall} | {last[3]} | {last[4]:,} | {last[5]:,} | {last[6]} |")
    if LOGIN_RESULTS:
        print("\nLogins:\n")
        for line in LOGIN_RESULTS:
            print(f"* {line}")


# -- Kerberos logins (--krb5-login) ------------------------------------------------
# Kerberos logins, cached beside SSSD 2.8.2 in one run: a cold and a warm whole login
# (``authenticate acct_mgmt`` through pam_sss.so) of an AD user over Kerberos, with
# ``auth_provider = krb5`` and ``krb5_validate = true`` against the host keytab, on the
# Samba DC of :mod:`testing.adkrb`.
#
# Each round starts each daemon afresh on an empty cache (cold: the user is resolved, the
# TGT got, validated and stored) and logs the same user in again at once (warm: the user
# is within ``pam_id_timeout``, the TGT is got again; SSSD and cached both ask the KDC at
# every login). The two daemons alternate, the order swapped each round; the figure is
# pam_sss's transaction as :mod:`testing.pamdriver` times it, from ``pam_start`` to
# ``pam_end``, so no daemon's start-up or namespace set-up is in it. SSSD runs in the DC's
# network namespace (:mod:`testing.adkrb_sssd`), cached on the host through the TCP
# forwarders: cached's KDC round trips pass one more hop.
#
#     python -m perf.adbig --krb5-login --rounds 7 --out perf/results/DATE-krb5-login/report.md

KRB_USER = "kalice"
KRB_LOGIN = ["authenticate", "acct_mgmt"]
KRB_CASES: list[dict[str, Any]] = [
    {"name": "cold", "user": KRB_USER, "ops": KRB_LOGIN, "answers": [adkrb.PASSWORDS[KRB_USER]]},
    {"name": "warm", "user": KRB_USER, "ops": KRB_LOGIN, "answers": [adkrb.PASSWORDS[KRB_USER]]},
]


def _krb_options(kdc: adkrb.KerberosDC, ccdir: Path) -> dict[str, Any]:
    return {
        "ldap_schema": "ad", "ldap_default_bind_dn": kdc.dc.admin_dn,
        "ldap_default_authtok": kdc.dc.admin_pw, "ldap_referrals": "false",
        "auth_provider": "krb5", "krb5_realm": adkrb.REALM, "krb5_server": "127.0.0.1",
        "krb5_use_enterprise_principal": "true", "krb5_validate": "true",
        "krb5_keytab": str(kdc.keytab), "krb5_ccachedir": str(ccdir),
        "cache_credentials": "true",
    }  # fmt: skip


def krb5_cached_round(kdc: adkrb.KerberosDC, work: Path, ccdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    opts = _krb_options(kdc, ccdir)
    with CachedDaemon(work, [kdc.ldapi_uri], kdc.dc.base_dn, log_level="info",
                      daemon={"services": "nss, pam"}, **opts) as d:  # fmt: skip
        env = d.pam_env({"krb5-oracle": service_file()})
        for case in KRB_CASES:
            r = env.drive("krb5-oracle", case["user"], case["ops"], answers=case["answers"])
            out[case["name"]] = {"codes": r.codes, "seconds": r.seconds,
                                 "ccache": "KRB5CCNAME" in r.env}  # fmt: skip
    return out


def krb5_login_main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="krblogin-"))
    ccdir = Path(tempfile.mkdtemp(prefix="krblogin-cc-"))
    ccdir.chmod(0o1777)
    rows: list[tuple[int, str, str, dict[str, Any]]] = []
    load = os.getloadavg()
    try:
        with adkrb.kerberos_dc(work / "dc") as kdc:
            os.environ["KRB5_CONFIG"] = str(kdc.krb5_conf)
            assert kdc.dc.pid is not None
            for rnd in range(args.rounds):
                order = ["cached", "sssd"] if rnd % 2 == 0 else ["sssd", "cached"]
                for who in order:
                    w = work / f"{who}{rnd}"
                    if who == "cached":
                        got = krb5_cached_round(kdc, w, ccdir)
                    else:
                        opts = _krb_options(kdc, ccdir)
                        got = adkrb_sssd.run(kdc.dc.pid, w, ccdir, opts, KRB_CASES)
                    for name, r in got.items():
                        rows.append((rnd, who, name, r))
                        secs = r.get("seconds", 0.0)
                        print(f"round={rnd} {who:6} {name:4} {secs * 1000:8.1f} ms "
                              f"codes={r['codes']}", file=sys.stderr, flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ccdir, ignore_errors=True)
    text = krb5_report(rows, args, load)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


def krb5_report(rows: list[tuple[int, str, str, dict[str, Any]]], args: argparse.Namespace,
           load: tuple[float, float, float]) -> str:  # fmt: skip
    lines = [
        f"# perf.adbig --krb5-login {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"* command: `python -m perf.adbig --krb5-login --rounds {args.rounds}`",
        f"* host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()};"
        f" load average at start {' '.join(f'{x:.2f}' for x in load)}",
        f"* login: `{' '.join(KRB_LOGIN)}` of {KRB_USER} through pam_sss.so, auth_provider = krb5,"
        " krb5_validate = true; cold: a fresh daemon, empty cache; warm: the next login",
        "",
        "| | cached median | SSSD 2.8.2 median | cached / SSSD |",
        "|---|---|---|---|",
    ]
    for name in ("cold", "warm"):
        med = {}
        for who in ("cached", "sssd"):
            vals = [r["seconds"] for _, w, n, r in rows if w == who and n == name
                    and r["codes"] == [0, 0]]  # fmt: skip
            med[who] = statistics.median(vals) if vals else float("nan")
        ratio = med["cached"] / med["sssd"]
        lines.append(f"| {name} login | {med['cached'] * 1000:.1f} ms | "
                     f"{med['sssd'] * 1000:.1f} ms | {ratio:.2f} |")  # fmt: skip
    lines += ["", "```"]
    for rnd, who, name, r in rows:
        ccache = r.get("ccache", "KRB5CCNAME" in r.get("env", {}))
        lines.append(f"round={rnd} {who:6} {name:4} {r.get('seconds', 0.0) * 1000:8.1f} ms "
                     f"codes={r['codes']} ccache={ccache}")  # fmt: skip
    lines += ["```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keeps the loaded DC between runs (short path: ldapi socket)")  # fmt: skip
    ap.add_argument("--no-sssd", action="store_true", help="measure cached only")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of cached's steps (medians); SSSD's take minutes: once")  # fmt: skip
    ap.add_argument("--inner-sssd", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--joined", action="store_true",
                    help="on an adcli-joined host, realmd's sssd.conf")  # fmt: skip
    ap.add_argument("--login", action="store_true",
                    help="--joined: cold and warm logins too (SSSD: the logins only)")  # fmt: skip
    ap.add_argument("--krb5-login", action="store_true",
                    help="instead: Kerberos logins, cached beside SSSD")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5, help="--krb5-login: rounds")
    ap.add_argument("--out", type=Path, default=None, help="--krb5-login: report.md to write")
    args = ap.parse_args(argv)
    if args.joined:
        return joined_main(args.workdir, args.repeat, args.no_sssd, args.login)
    if args.krb5_login:
        return krb5_login_main(args)
    if args.inner_sssd:  # in the DC's network namespace (sssd_in_dc_netns)
        d = gendir.build(gendir.BIGROUPUSER)
        exp = gendir.Expected(gendir.expected_data(d))
        rows = measure_sssd("ldap://127.0.0.1", addc.BASE_DN, args.workdir / "run",
                            exp.initgroups(BIG, exp.depth), exp.members("large01", exp.depth))
        print(json.dumps(rows))
        return 0
    missing = addc.available()
    if missing:
        print(f"cannot run a Samba DC: {missing}", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="adbig", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    dc, load = prepared_dc(work)
    if load:
        print(f"loaded bigroupuser into Samba in {load:.1f} s")
    d = gendir.build(gendir.BIGROUPUSER)
    exp = gendir.Expected(gendir.expected_data(d))
    want = exp.initgroups(BIG, exp.depth)
    large01 = exp.members("large01", exp.depth)
    # Every daemon starts from an empty cache: a cache left by an earlier run would
    # turn the cold steps into refreshes of expired entries.
    shutil.rmtree(work / "run", ignore_errors=True)
    results: dict[str, list[Row]] = {}
    with dc:
        _warm(dc)
        results["cached"] = measure_cached(dc, work / "run", want, large01, args.repeat)
        _print(results, len(want))
        if not args.no_sssd:
            results["SSSD 2.8.2"] = sssd_in_dc_netns(dc, work)
            _print(results, len(want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
