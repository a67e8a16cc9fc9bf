"""testing/pamdriver.py's own time of a PAM transaction, which perf.ab's login scenarios
report: it covers the modules' work between pam_start and pam_end and leaves out the
driver's start-up. A service whose auth module runs ``sleep`` (pam_exec) needs no daemon."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testing import pamenv

pytestmark = pytest.mark.skipif(pamenv.skip_reason() is not None, reason=pamenv.skip_reason() or "")

SLEEP = 0.3
SECURITY = pamenv.PAM_SSS.parent


def test_the_driver_times_the_transaction_alone(tmp_path: Path) -> None:
    service = (
        f"auth     required {SECURITY}/pam_exec.so quiet /bin/sleep {SLEEP}\n"
        f"account  required {SECURITY}/pam_permit.so\n"
        f"session  required {SECURITY}/pam_permit.so\n"
    )
    env = pamenv.PamEnv(
        pamenv.make_pipes(tmp_path / "pipes"),
        pamenv.make_pamd(tmp_path / "pam.d", {"timed": service}),
        tmp_path / "mc",
    )
    (tmp_path / "mc").mkdir()
    start = time.monotonic()
    got = env.drive("timed", "root", ("authenticate", "acct_mgmt", "open_session"))
    process = time.monotonic() - start
    assert got.codes == [0, 0, 0]
    # The sleep is inside the transaction; the interpreter's start-up is not.
    assert SLEEP <= got.seconds < process
