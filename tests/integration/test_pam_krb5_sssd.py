"""Kerberos logins, cached beside SSSD 2.8.2: the same sssd.conf lines (``id_provider =
ldap``, ``ldap_schema = ad``, ``auth_provider = krb5``, ``chpass_provider = krb5``,
``krb5_validate = true`` with the host keytab), the same Samba KDC, the same pam_sss;
each case's PAM codes, whether KRB5CCNAME is set, and the messages shown must be the
same, or the difference is one of ``DELIBERATE`` (docs/compatibility.md, "Kerberos
logins").
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from testing import adkrb, adkrb_sssd, pammatrix
from testing.daemon import CachedDaemon
from testing.pamenv import service_file, skip_reason

_SKIP = skip_reason() or pammatrix.SssdPam().skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

P = adkrb.PASSWORDS
LOGIN = ["authenticate", "acct_mgmt"]
CASES: list[dict[str, Any]] = [
    {"name": "right", "user": "kalice", "ops": LOGIN, "answers": [P["kalice"]]},
    {"name": "wrong", "user": "kbob", "ops": LOGIN, "answers": ["Not-The-Passw0rd"]},
    {"name": "disabled", "user": adkrb.DISABLED, "ops": LOGIN,
     "answers": [P[adkrb.DISABLED]]},
    {"name": "expired-wrong", "user": adkrb.EXPIRED, "ops": LOGIN,
     "answers": ["Not-The-Passw0rd"]},
    {"name": "expired", "user": adkrb.EXPIRED, "ops": LOGIN, "answers": [P[adkrb.EXPIRED]]},
    {"name": "chpass-refused", "user": "kerin", "ops": ["chauthtok"],
     "answers": [P["kerin"], "short", "short"], "as_user": True},
    {"name": "chpass-wrong-old", "user": "kerin", "ops": ["chauthtok"],
     "answers": ["Not-The-Passw0rd"], "as_user": True},
]  # fmt: skip
ROGUE = [{"name": "rogue-keytab", "user": "kalice", "ops": LOGIN, "answers": [P["kalice"]]}]

# Where cached answers otherwise, on purpose (docs/compatibility.md "Kerberos logins").
DELIBERATE = {
    "expired": "SSSD asks for the kadmin/changepw ticket with the user's UPN as an "
    "enterprise principal, which Samba 4.17 answers in a way MIT rejects "
    "(KRB5_KDCREP_MODIFIED): PAM_SYSTEM_ERR, and the user cannot change the expired "
    "password; cached asks as name@REALM and answers NEW_AUTHTOK_REQD.",
    "chpass-refused": "the same kadmin/changepw ticket: SSSD says \"Old password not "
    "accepted.\" for the right one and changes nothing; cached sends the change and "
    "shows the kpasswd server's reason for refusing it.",
}


def _options(kdc: adkrb.KerberosDC, ccdir: Path, keytab: Path) -> dict[str, Any]:
    return {
        "ldap_schema": "ad",
        "ldap_default_bind_dn": kdc.dc.admin_dn,
        "ldap_default_authtok": kdc.dc.admin_pw,
        "ldap_referrals": "false",
        "auth_provider": "krb5",
        "chpass_provider": "krb5",
        "krb5_realm": adkrb.REALM,
        # SSSD's KDC (it runs in the DC's namespace); cached takes its KDCs from
        # krb5.conf (the forwarded port) and accepts the option unused.
        "krb5_server": "127.0.0.1",
        # The AD provider's default; SSSD's krb5 provider's is false, and then asks for
        # the UPN's realm (cached.test, lowercase, as AD writes UPNs) as written. cached
        # asks for name@REALM either way (docs/compatibility.md) and ignores the option.
        "krb5_use_enterprise_principal": "true",
        "krb5_validate": "true",
        "krb5_keytab": str(keytab),
        "krb5_ccachedir": str(ccdir),
        "cache_credentials": "true",
    }


def _cached(kdc: adkrb.KerberosDC, work: Path, opts: dict[str, Any],
            cases: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    with CachedDaemon(work, [kdc.ldapi_uri], kdc.dc.base_dn, daemon={"services": "nss, pam"},
                      **opts) as d:  # fmt: skip
        env = d.pam_env({"krb5-oracle": service_file()})
        for case in cases:
            r = env.drive("krb5-oracle", case["user"], case["ops"], answers=case["answers"],
                          as_user=case.get("as_user", False))  # fmt: skip
            out[case["name"]] = {"codes": r.codes, "env": r.env,
                                 "infos": [i for c in r.calls for i in c.infos]}  # fmt: skip
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["codes"] == b["codes"] and ("KRB5CCNAME" in a["env"]) == ("KRB5CCNAME" in b["env"])
            and a["infos"] == b["infos"])  # fmt: skip


def test_kerberos_pam_answers_are_sssds(kdc: adkrb.KerberosDC, tmp_path: Path) -> None:
    ccdir = Path(tempfile.mkdtemp(prefix="cached-krb5-oracle-"))
    ccdir.chmod(0o1777)
    try:
        # SSSD first: the cases change nothing on the DC (the expired password stays
        # expired, the refused changes change nothing).
        assert kdc.dc.pid is not None
        sssd = adkrb_sssd.run(kdc.dc.pid, tmp_path / "sssd", ccdir,
                              _options(kdc, ccdir, kdc.keytab), CASES)  # fmt: skip
        sssd |= adkrb_sssd.run(kdc.dc.pid, tmp_path / "sssd-rogue", ccdir,
                               _options(kdc, ccdir, kdc.rogue_keytab), ROGUE)  # fmt: skip
        ours = _cached(kdc, tmp_path / "cached", _options(kdc, ccdir, kdc.keytab), CASES)
        ours |= _cached(kdc, tmp_path / "cached-rogue", _options(kdc, ccdir, kdc.rogue_keytab),
                        ROGUE)  # fmt: skip
    finally:
        shutil.rmtree(ccdir, ignore_errors=True)
    table = "\n".join(f"{n}: sssd {sssd[n]} cached {ours[n]}" for n in sssd)
    assert sssd["right"]["codes"] == [0, 0] and "KRB5CCNAME" in sssd["right"]["env"], table
    for name in sssd:
        if name in DELIBERATE:
            assert not _same(sssd[name], ours[name]), f"{name} is the same now:\n{table}"
        else:
            assert _same(sssd[name], ours[name]), f"{name} differs:\n{table}"
