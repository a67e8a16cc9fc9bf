"""A non-default ``re_expression`` through glibc and the real libnss_sss, beside SSSD
2.8.2 on the same slapd: the AD-style expression (``DOMAIN\\name`` and
``name@DOMAIN``) set in [sssd] and in the domain, with and without qualified names;
every answer, from the socket and again from the memory cache, equal to SSSD's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached.config.parsers import SSSD_AD_DEFAULT_RE
from testing import sssd
from testing.checks import SOCKET_ONLY
from testing.daemon import CachedDaemon
from testing.marks import requires_nss
from testing.slapd import Slapd
from tests.integration.test_qualified_names import BASE, LDIF

pytestmark = requires_nss

LOOKUPS = [
    ["getent", "passwd", "LDAP\\alice"],
    ["getent", "passwd", "ldap\\alice"],
    ["getent", "passwd", "alice@LDAP"],
    ["getent", "passwd", "alice"],
    ["getent", "passwd", "OTHER\\alice"],
    ["getent", "passwd", "alice@other"],
    ["getent", "group", "LDAP\\staff"],
    ["getent", "group", "dev"],
    ["getent", "initgroups", "LDAP\\alice"],
    ["id", "LDAP\\alice"],
    ["id", "Bob"],
]


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    d = tmp_path_factory.mktemp("re")
    (d / "d.ldif").write_text(LDIF)
    with Slapd(d / "s", d / "d.ldif", BASE) as s:
        yield s


def _answers(run: Any, env: dict[str, str] | None) -> dict[str, str]:
    """The answers, group members in name order (SSSD keeps the directory's order,
    cached sorts them; glibc passes on either)."""
    out = {}
    for argv in LOOKUPS:
        r = run(argv, env=env)
        text = r.stdout.strip() if r.returncode == 0 else f"status {r.returncode}"
        if argv[1] == "group" and r.returncode == 0:
            head, _, members = text.rpartition(":")
            text = f"{head}:{','.join(sorted(members.split(',')))}"
        out[" ".join(argv)] = text
    return out


@pytest.mark.parametrize("qualified", ["false", "true"])
def test_ad_style_re_expression_answers_as_sssd(
    tmp_path: Path, slapd: Slapd, qualified: str
) -> None:
    opts: dict[str, Any] = {"re_expression": SSSD_AD_DEFAULT_RE,
                            "use_fully_qualified_names": qualified}
    s = sssd.SssdDaemon(tmp_path / "sssd", slapd.uri, BASE, **opts)
    s.start()
    try:
        want = _answers(s.run_nss, SOCKET_ONLY)
    finally:
        s.stop()
    # The oracle answers what the test is about: DOMAIN\name is found.
    assert want["getent passwd LDAP\\alice"].startswith("alice")
    d = CachedDaemon(tmp_path / "c", [slapd.uri], BASE, ldap_schema="rfc2307bis", **opts)
    d.start()
    try:
        assert _answers(d.run_nss, SOCKET_ONLY) == want
        assert _answers(d.run_nss, None) == want
    finally:
        d.stop()
