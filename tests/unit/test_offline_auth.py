"""The rules of offline authentication (cached.auth.offline; PAM reference §2.2)."""

from __future__ import annotations

from cached.auth import shacrypt
from cached.auth.offline import (
    AUTH_ERR,
    DAY,
    PERM_DENIED,
    SUCCESS,
    Credentials,
    OfflinePolicy,
    after_online_login,
    offline_auth,
)

NOW = 1_800_000_000.0
PW = b"right"
HASH = shacrypt.sha512_crypt(PW, "saltsaltsaltsalt")


def creds(**kw: float) -> Credentials:
    base = {"last_online": NOW - DAY, "last_login": NOW - DAY, "failed": 0, "last_failed": 0.0}
    base.update(kw)
    return Credentials(HASH, base["last_online"], base["last_login"], int(base["failed"]),
                       base["last_failed"])  # fmt: skip


def test_no_record_or_no_hash_is_permission_denied() -> None:
    assert offline_auth(None, PW, NOW, OfflinePolicy()).status == PERM_DENIED
    assert offline_auth(Credentials(""), PW, NOW, OfflinePolicy()).status == PERM_DENIED


def test_right_password_succeeds_resets_failures_and_says_the_expiry() -> None:
    v = offline_auth(creds(failed=1, last_failed=NOW - 5), PW, NOW, OfflinePolicy())
    assert (v.status, v.expiry) == (SUCCESS, 0)
    assert v.record is not None and v.record.failed == 0 and v.record.last_login == NOW
    v = offline_auth(creds(), PW, NOW, OfflinePolicy(expiration_days=3))
    assert v.status == SUCCESS and v.expiry == int(NOW - DAY + 3 * DAY)


def test_wrong_password_counts_a_failure() -> None:
    v = offline_auth(creds(failed=2), b"wrong", NOW, OfflinePolicy())
    assert v.status == AUTH_ERR
    assert v.record is not None and v.record.failed == 3 and v.record.last_failed == NOW


def test_expired_credentials_are_denied() -> None:
    policy = OfflinePolicy(expiration_days=1)
    assert offline_auth(creds(last_online=NOW - 2 * DAY), PW, NOW, policy).status == PERM_DENIED
    assert offline_auth(creds(last_online=NOW - 0.5 * DAY), PW, NOW, policy).status == SUCCESS


def test_the_failed_attempts_delay_and_its_end() -> None:
    policy = OfflinePolicy(failed_attempts=3, failed_delay_minutes=5)
    locked = creds(failed=3, last_failed=NOW - 60)
    v = offline_auth(locked, PW, NOW, policy)
    assert v.status == PERM_DENIED and v.delayed_until == int(NOW - 60 + 300)
    assert v.record is None
    over = creds(failed=3, last_failed=NOW - 301)
    v = offline_auth(over, PW, NOW, policy)
    assert v.status == SUCCESS and v.record is not None and v.record.failed == 0
    # After the delay the count starts again: one wrong password is one failure.
    v = offline_auth(over, b"wrong", NOW, policy)
    assert v.status == AUTH_ERR and v.record is not None and v.record.failed == 1
    # Below the limit there is no delay.
    assert offline_auth(creds(failed=2, last_failed=NOW), PW, NOW, policy).status == SUCCESS


def test_a_delay_of_zero_denies_until_the_next_online_login() -> None:
    policy = OfflinePolicy(failed_attempts=1, failed_delay_minutes=0)
    v = offline_auth(creds(failed=1, last_failed=NOW - 10 * DAY), PW, NOW, policy)
    assert v.status == PERM_DENIED and v.delayed_until == 0


def test_an_online_login_stores_a_fresh_hash_only_when_asked() -> None:
    c = after_online_login(creds(failed=4), b"new", NOW, cache=True)
    assert shacrypt.verify(b"new", c.hash) and c.failed == 0 and c.last_online == NOW
    assert after_online_login(creds(), b"new", NOW, cache=False).hash == ""
