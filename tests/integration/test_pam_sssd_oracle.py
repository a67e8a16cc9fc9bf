"""The PAM matrix harness proven against the oracle: cases of :mod:`testing.pammatrix`
through real SSSD 2.8.2 (Debian's sssd-ldap, ``services = nss, pam``, ``auth_provider =
ldap``, ``cache_credentials = true``) and the real ``pam_sss.so``, against slapd over
ldaps and StartTLS.

These pin what ``python -m testing.pamcompat`` compares cached with: if SSSD's answers
here change (another SSSD, a broken harness), the differential's baseline has moved.
Needs root, libpam-sss, pamtester and SSSD (``make compat`` installs SSSD with service
starts forbidden, :mod:`testing.install`); skipped otherwise, as the other SSSD-backed
tools are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import pamenv, pammatrix

_SKIP = pamenv.skip_reason() or pammatrix.SssdPam().skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

PAM_SUCCESS = 0
PAM_PERM_DENIED = 6
PAM_AUTH_ERR = 7
PAM_USER_UNKNOWN = 10
OFFLINE_TEXT = "Authenticated with cached credentials"


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pammatrix.MatrixDirectory]:
    with pammatrix.MatrixDirectory(tmp_path_factory.mktemp("pamdir")) as d:
        yield d


def run(directory: pammatrix.MatrixDirectory, tmp_path: Path, name: str,
        transport: str) -> pammatrix.CaseResult:  # fmt: skip
    case = pammatrix.cases([name])[0]
    r = pammatrix.run_case(pammatrix.SssdPam(), directory, case, transport, tmp_path / name)
    assert r.error is None and r.skipped is None, r.error or r.skipped
    return r


def codes(r: pammatrix.CaseResult) -> list[list[int]]:
    return [[rc for _op, rc, _msgs in step.calls] for step in r.steps]


@pytest.mark.parametrize("transport", ["ldaps", "starttls"])
def test_right_password_whole_login_root_and_nobody(
    directory: pammatrix.MatrixDirectory, tmp_path: Path, transport: str
) -> None:
    for name in ("right", "right-nobody"):
        r = run(directory, tmp_path, name, transport)
        assert codes(r) == [[PAM_SUCCESS] * 4], r.steps


@pytest.mark.parametrize("transport", ["ldaps", "starttls"])
def test_wrong_and_empty_password_and_unknown_user(
    directory: pammatrix.MatrixDirectory, tmp_path: Path, transport: str
) -> None:
    assert codes(run(directory, tmp_path, "wrong", transport)) == [[PAM_AUTH_ERR]]
    assert codes(run(directory, tmp_path, "wrong-nobody", transport)) == [[PAM_AUTH_ERR]]
    assert codes(run(directory, tmp_path, "empty", transport)) == [[PAM_AUTH_ERR]]
    assert codes(run(directory, tmp_path, "unknown", transport)) == [[PAM_USER_UNKNOWN]]


def test_offline_login_with_cached_credentials(
    directory: pammatrix.MatrixDirectory, tmp_path: Path
) -> None:
    """Online once (the hash is cached), slapd stopped: the right password logs in with
    the offline message at pam_verbosity 2, a wrong one fails, a user who never logged
    in online is denied."""
    r = run(directory, tmp_path, "offline-verbose", "ldaps")
    assert codes(r) == [[PAM_SUCCESS], [PAM_SUCCESS]]
    assert r.steps[1].calls[0][2] == [f"{OFFLINE_TEXT}."]
    assert codes(run(directory, tmp_path, "offline-wrong", "ldaps")) == [
        [PAM_SUCCESS], [PAM_AUTH_ERR]
    ]  # fmt: skip
    assert codes(run(directory, tmp_path, "offline-no-hash", "ldaps")) == [
        [PAM_SUCCESS], [PAM_PERM_DENIED]
    ]  # fmt: skip


def test_cached_credentials_expire_and_failed_logins_delay(
    directory: pammatrix.MatrixDirectory, tmp_path: Path
) -> None:
    """The time stamps are moved back in SSSD's cache (ldbmodify), not waited for."""
    r = run(directory, tmp_path, "offline-expiry", "starttls")
    assert codes(r) == [[PAM_SUCCESS], [PAM_SUCCESS], [PAM_PERM_DENIED]]
    assert r.steps[1].calls[0][2] == [
        f"{OFFLINE_TEXT}, your cached password will expire at: <date>."
    ]
    r = run(directory, tmp_path, "offline-delay", "ldaps")
    assert codes(r) == [[PAM_SUCCESS], [PAM_AUTH_ERR], [PAM_AUTH_ERR], [PAM_PERM_DENIED],
                        [PAM_SUCCESS]]  # fmt: skip
    assert r.steps[3].calls[0][2] == ["Authentication is denied until: <date>."]


def test_admin_changed_password_and_unencrypted_server(
    directory: pammatrix.MatrixDirectory, tmp_path: Path
) -> None:
    """The server's answer beats the cached hash; a server without TLS never gets the
    password (SSSD goes offline, and without a cached hash denies)."""
    r = run(directory, tmp_path, "admin-changed", "starttls")
    assert codes(r) == [[PAM_SUCCESS], [PAM_AUTH_ERR], [PAM_SUCCESS]]
    assert codes(run(directory, tmp_path, "plain", "plain")) == [[PAM_PERM_DENIED]]


def test_frozen_server_over_starttls_falls_back_to_cached_credentials(
    directory: pammatrix.MatrixDirectory, tmp_path: Path
) -> None:
    """The fault proxy stops forwarding after the login that cached the hash: StartTLS
    times out (ldap_opt_timeout) and the cached hash decides. The time it took is the
    differential report's business, not asserted here."""
    r = run(directory, tmp_path, "frozen", "starttls")
    assert codes(r) == [[PAM_SUCCESS], [PAM_SUCCESS], [PAM_SUCCESS]]
