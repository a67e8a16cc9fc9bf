"""Per-host jitter: a fraction of an interval that differs between hosts and stays the
same on one host, for each purpose (connection expiry, refresh ahead, its early runs and its
catch-up after an outage, offline retries).

A fleet of hosts started together (a data-centre power cycle, a configuration rollout
restarting every daemon) does everything on the same timers. With SSSD's default of no
offset, every host reconnects at the same second each ``ldap_connection_expire_timeout``
(SSSD PR #951) and comes back after an outage in step, re-overloading the directory in
a loop (SSSD #5609). A random offset drawn at each start spreads one run but is drawn
afresh at the next restart; an offset derived from the host's identity spreads the
fleet once and for all: two hosts differ, one host is the same after every restart.

The identity is ``/etc/machine-id`` (machine-id(5)), which the manual asks to be
treated as confidential and to be hashed with an application-specific key before use:
the fraction is an HMAC-SHA256 keyed with the machine-id over ``cached:<purpose>``, so
neither the id nor anything that reveals it is stored or logged, and the fractions of
different purposes are independent. A host without a usable machine-id (an empty
file in a container image, ``uninitialized`` during first boot, no file) draws a random
seed once and keeps it in ``db_dir`` (``host-seed``): a file of the state directory
survives restarts as the machine-id does, and outlives the timestamp store, which is
rebuilt after an unclean stop (a new seed then would move the host's timers); it goes
only with the whole cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re

log = logging.getLogger(__name__)

MACHINE_ID = "/etc/machine-id"
SEED_FILE = "host-seed"
_ID = re.compile(rb"[0-9a-fA-F]{32}")

# The purposes, one independent fraction each.
CONNECTION_EXPIRE = "connection-expire"
REFRESH_AHEAD = "refresh-ahead"
# Where in each refresh-ahead interval, on the wall clock, this host's scheduled runs
# fall after the first (:func:`next_at`).
REFRESH_PHASE = "refresh-phase"
REFRESH_SOON = "refresh-soon"  # the delay of an early run (entries past their midpoint)
# The delay of the catch-up run when the domain comes back online: a fleet whose
# directory was down comes back together, and would revalidate in the same second.
CATCH_UP = "catch-up"
OFFLINE_RETRY = "offline-retry"
SUDO_FULL = "sudo-full-refresh"
SUDO_SMART = "sudo-smart-refresh"


class Jitter:
    """The host's fractions in [0, 1), one per purpose, from a secret key (the
    machine-id, or the stored seed)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __repr__(self) -> str:  # never the key
        return "Jitter(...)"

    def fraction(self, purpose: str) -> float:
        digest = hmac.new(self._key, b"cached:" + purpose.encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def offset(self, purpose: str, spread: float) -> float:
        """This host's offset within ``spread`` seconds for ``purpose``."""
        return self.fraction(purpose) * spread

    @classmethod
    def for_host(cls, machine_id_file: str, db_dir: str) -> Jitter:
        """The host's jitter: keyed by the machine-id in ``machine_id_file``, or by a
        seed drawn once and kept in ``db_dir`` when the host has none."""
        key = read_machine_id(machine_id_file)
        if key is None:
            key = _stored_seed(db_dir)
        return cls(key)


def next_at(after: float, period: float, fraction: float) -> float:
    """The first time at or after ``after`` (seconds since the epoch) that lies
    ``fraction`` of the way through a ``period`` counted from the epoch.

    A host whose runs follow a period from its own start keeps the phase of that start:
    a fleet started within a minute runs within that minute of every period, however the
    offsets are drawn. Runs placed at a fixed point of the period on the wall clock,
    that point the host's own fraction, are spread over the whole period whenever the
    hosts started, and a restart does not move them."""
    at = after - after % period + fraction * period
    return at if at >= after else at + period


def read_machine_id(path: str) -> bytes | None:
    """The machine-id in ``path`` (32 hexadecimal digits and a newline, machine-id(5)),
    or None when the file is missing, unreadable, empty or ``uninitialized``."""
    try:
        with open(path, "rb") as f:
            data = f.read(64).strip()
    except OSError as e:
        log.info("no machine-id (%s: %s); per-host offsets from a stored seed", path,
                 e.strerror)  # fmt: skip
        return None
    if not _ID.fullmatch(data) or data.strip(b"0") == b"":
        log.info("%s holds no machine-id; per-host offsets from a stored seed", path)
        return None
    return data.lower()


def _stored_seed(db_dir: str) -> bytes:
    """The seed kept in ``db_dir``, drawn and written (atomically, 0600) the first time.
    A seed that cannot be kept serves this run only, with a warning: the offsets stay
    spread, but may move at the next start."""
    path = os.path.join(db_dir, SEED_FILE)
    with contextlib.suppress(OSError), open(path, "rb") as f:
        seed = f.read(64)
        if len(seed) == 32:
            return seed
    seed = os.urandom(32)
    # Linked into place only if no other backend of this host (one per domain, started
    # together) kept its own first: then that one is read, and both use the same.
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, seed)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            with open(path, "rb") as f:
                kept = f.read(64)
            if len(kept) == 32:
                return kept
            os.replace(tmp, path)  # a torn file: ours replaces it
    except OSError as e:
        log.warning("cannot keep the per-host seed in %s (%s): offsets drawn for this run only",
                    path, e.strerror)  # fmt: skip
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return seed
