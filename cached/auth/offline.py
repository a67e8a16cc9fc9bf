"""Offline authentication against cached credentials: SSSD's ``sysdb_cache_auth``
(``src/db/sysdb_ops.c``, 2.8.2) as pure functions of the stored record, the password,
the time and the ``[pam]`` options. The backend applies them (it is the only writer of
the entry store, and a failed attempt is a write); the responder turns the verdict into
PAM status and user-info (PAM reference §2.2).

=========================================================  ==============================
state                                                      verdict
=========================================================  ==============================
no stored hash                                             PERM_DENIED
``offline_credentials_expiration`` = D > 0 days, the last  PERM_DENIED
online login more than D days ago
``offline_failed_login_attempts`` = N > 0 failures, the    PERM_DENIED, ``delayed_until``
last one less than ``offline_failed_login_delay`` minutes  (its end); a delay of 0: denied
ago                                                        until the next online login
the hash matches                                           SUCCESS, ``expiry`` (0: never);
                                                           failures reset
the hash differs                                           AUTH_ERR, one more failure
=========================================================  ==============================

Once the delay has passed the failure count starts again from 0 (SSSD resets it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cached.auth import shacrypt

DAY = 86400

# PAM status values (Linux-PAM's, the PAM protocol's PamStatus): the verdict carries
# the number, so the backend needs nothing of the responder's codec.
SUCCESS = 0
PERM_DENIED = 6
AUTH_ERR = 7


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the entry store keeps of one user's logins (times: seconds since the epoch).

    ``hash``: the SHA-512-crypt of the last password an online login accepted ("" when
    ``cache_credentials`` was off then); ``last_online``: that login; ``last_login``:
    the last successful login, online or offline; ``failed``/``last_failed``: offline
    failures since the last success and when the last one was."""

    hash: str = ""
    last_online: float = 0.0
    last_login: float = 0.0
    failed: int = 0
    last_failed: float = 0.0


@dataclass(frozen=True, slots=True)
class OfflinePolicy:
    """The ``[pam]`` options of offline authentication."""

    expiration_days: int = 0  # offline_credentials_expiration; 0: never
    failed_attempts: int = 0  # offline_failed_login_attempts; 0: unlimited
    failed_delay_minutes: int = 5  # offline_failed_login_delay


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status``: a PAM status; ``expiry``: with SUCCESS, when the cached password stops
    working offline (0: never); ``delayed_until``: with a delay, its end;
    ``record``: what to store (None: nothing changes)."""

    status: int
    expiry: int = 0
    delayed_until: int = 0
    record: Credentials | None = None


def expiry(creds: Credentials, policy: OfflinePolicy) -> int:
    """When the cached password stops working offline (0: never)."""
    if policy.expiration_days <= 0:
        return 0
    return int(creds.last_online + policy.expiration_days * DAY)


def offline_auth(
    creds: Credentials | None, password: bytes, now: float, policy: OfflinePolicy
) -> Verdict:
    """The verdict on ``password`` for a user whose stored record is ``creds``."""
    if creds is None or not creds.hash:
        return Verdict(PERM_DENIED)
    ends = expiry(creds, policy)
    if ends and ends < now:
        return Verdict(PERM_DENIED)
    if policy.failed_attempts > 0 and creds.failed >= policy.failed_attempts:
        if policy.failed_delay_minutes <= 0:
            return Verdict(PERM_DENIED)
        until = int(creds.last_failed + policy.failed_delay_minutes * 60)
        if until >= now:
            return Verdict(PERM_DENIED, delayed_until=until)
        creds = dataclasses.replace(creds, failed=0)
    if shacrypt.verify(password, creds.hash):
        return Verdict(SUCCESS, expiry=ends, record=dataclasses.replace(
            creds, last_login=now, failed=0, last_failed=0.0))  # fmt: skip
    return Verdict(
        AUTH_ERR, record=dataclasses.replace(creds, failed=creds.failed + 1, last_failed=now)
    )


def after_online_login(
    creds: Credentials | None, password: bytes, now: float, *, cache: bool
) -> Credentials:
    """The record after an online login accepted ``password``: a fresh hash when
    ``cache_credentials`` is on (else none: a hash of an earlier password must not
    outlive a login that did not store one), the times, no failures."""
    return Credentials(
        hash=shacrypt.new_hash(password) if cache else "",
        last_online=now,
        last_login=now,
        failed=0,
        last_failed=0.0,
    )


def after_password_change(creds: Credentials | None, new: bytes, now: float) -> Credentials:
    """The record after the server accepted ``new`` as the user's password (with
    ``cache_credentials``): its hash replaces the old one, so the old password stops
    working offline at once (SSSD's LDAP provider keeps the old hash until the next
    online login); the change counts as an online login, failures are forgotten."""
    return Credentials(
        hash=shacrypt.new_hash(new),
        last_online=now,
        last_login=creds.last_login if creds is not None else 0.0,
        failed=0,
        last_failed=0.0,
    )
