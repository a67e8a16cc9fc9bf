"""``access_provider = ad`` on a host joined with ``adcli join`` (testing/adjoin.py),
with realmd's sssd.conf as written, through the real ``pam_sss.so``: the AD account
expiry (a disabled account, an expired one), ``ad_access_filter`` (with its ``DOM:``
entries) and the GPO-based login rights (``ad_gpo_access_control``), each an
``acct_mgmt`` of pam_sss against ``cached serve`` running in the host's namespaces.

One DC and one join for the module; each test its own daemon (its own options).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import addir, adjoin
from testing.addc import ADEntry
from testing.adjoin import DOMAIN, JoinedHost
from testing.daemon import CachedDaemon
from testing.pamenv import service_file
from testing.pamenv import skip_reason as pam_skip_reason

pytestmark = pytest.mark.skipif(
    (adjoin.skip_reason() or pam_skip_reason()) is not None,
    reason=adjoin.skip_reason() or pam_skip_reason() or "",
)

SUCCESS, SYSTEM_ERR, PERM_DENIED, ACCT_EXPIRED = 0, 4, 6, 13
UF_NORMAL_ACCOUNT, UF_ACCOUNTDISABLE, UF_PASSWD_NOTREQD = 0x200, 0x2, 0x20
SERVICES = ("login", "su", "sshd")


def _directory() -> addir.ADDirectory:
    """The small directory, its users enabled (without a password), with an account
    disabled on the DC and one past its accountExpires (yesterday)."""
    d = addir.small(big_members=5)
    enabled = UF_NORMAL_ACCOUNT | UF_PASSWD_NOTREQD
    # Accounts made without a password are disabled (as AD makes them): these enabled.
    for e in d.entries:
        if e.attrs.get("objectClass") == "user" and e.dn.endswith(addir.PEOPLE):
            d.modify.append(ADEntry(e.dn, {"userAccountControl": str(enabled)}))
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    ticks = int((yesterday.timestamp() + 11644473600) * 10_000_000)
    for name, attrs in {
        "acdisabled": {"userAccountControl": str(enabled | UF_ACCOUNTDISABLE)},
        "acexpired": {"userAccountControl": str(enabled), "accountExpires": str(ticks)},
    }.items():
        d.entries.append(ADEntry(f"CN={name},{addir.PEOPLE}", {
            "objectClass": "user", "sAMAccountName": name, **attrs}))  # fmt: skip
    return d


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JoinedHost]:
    work = tmp_path_factory.mktemp("ada", numbered=True)
    with JoinedHost(work, _directory()) as h:
        yield h


def _daemon(host: JoinedHost, work: Path, extra: str = "") -> CachedDaemon:
    """realmd's sssd.conf unchanged (access_provider = ad included), ``extra`` lines
    added to the domain."""
    text = host.cached_config(work, adjoin.REALMD_SSSD_CONF)
    assert "access_provider = ad\n" in text
    if extra:
        text = text.replace(f"[domain/{DOMAIN}]\n", f"[domain/{DOMAIN}]\n{extra}", 1)
    return CachedDaemon.from_text(work, text, prefix=host.prefix)


def _account(d: CachedDaemon, user: str, service: str = "login") -> int:
    env = d.pam_env({s: service_file() for s in SERVICES})
    (rc,) = env.drive(service, f"{user}@{DOMAIN}", ["acct_mgmt"]).codes
    return rc


def test_expiry_of_ad_accounts(host: JoinedHost, tmp_path: Path) -> None:
    """The AD provider's expire rule: a disabled account PERM_DENIED, one past its
    accountExpires ACCT_EXPIRED, others allowed (GPOs not evaluated here)."""
    with _daemon(host, tmp_path, "ad_gpo_access_control = disabled\n") as d:
        assert _account(d, "alice") == SUCCESS, d.log_tail()
        assert _account(d, "acdisabled") == PERM_DENIED, d.log_tail()
        assert _account(d, "acexpired") == ACCT_EXPIRED, d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_ad_access_filter(host: JoinedHost, tmp_path: Path) -> None:
    """The filter that names this domain (DOM:) wins over a generic one; a user the
    search does not find is denied, the expiry still checked first."""
    eng = f"CN=eng,{addir.GROUPS}"
    flt = f"(memberOf=CN=nobody,{addir.GROUPS})?DOM:{DOMAIN}:(memberOf={eng})"
    with _daemon(host, tmp_path, f"ad_access_filter = {flt}\n"
                 "ad_gpo_access_control = disabled\n") as d:  # fmt: skip
        assert _account(d, "alice") == SUCCESS, d.log_tail()
        assert _account(d, "bob") == PERM_DENIED, d.log_tail()
        assert _account(d, "acdisabled") == PERM_DENIED, d.log_tail()
        assert "Traceback" not in d.log_text(), d.log_tail()


def test_ad_access_filter_of_another_domain_denies(host: JoinedHost, tmp_path: Path) -> None:
    with _daemon(host, tmp_path, "ad_access_filter = DOM:other.test:(objectClass=user)\n"
                 "ad_gpo_access_control = disabled\n") as d:  # fmt: skip
        assert _account(d, "alice") == PERM_DENIED, d.log_tail()
