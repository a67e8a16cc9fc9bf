"""contrib/install-deps against shimmed apt-get and dpkg-query and a scratch policy-rc.d.

The script runs for real (dash, its EXIT trap, its exit status) but installs nothing
and never touches /usr/sbin/policy-rc.d: ``CACHED_POLICY_RC_D`` points it at a file
in the test's directory, and ``apt-get``/``dpkg-query`` on PATH are small scripts that
record what they were asked and what the policy file said at that moment.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final

import pytest

SCRIPT: Final = Path(__file__).resolve().parents[2] / "contrib" / "install-deps"
DOCKER_POLICY: Final = "#!/bin/sh\n# the image's own\nexit 101\n"

# dpkg-query: every package installed except slapd. apt-get: log its arguments and the
# policy file's content while it runs, then exit with $APT_STATUS.
DPKG_QUERY: Final = """#!/bin/sh
case "$*" in *" slapd") printf 'deinstall ok config-files';; *) printf 'install ok installed';; esac
"""
APT_GET: Final = """#!/bin/sh
{ echo "apt-get $*"; echo "policy:"; cat "$CACHED_POLICY_RC_D" 2>&1; } >> "$LOG"
exit "${APT_STATUS:-0}"
"""


def run(tmp_path: Path, apt_status: int = 0) -> tuple[subprocess.CompletedProcess[str], str]:
    shims = tmp_path / "bin"
    shims.mkdir(exist_ok=True)
    for name, text in (("dpkg-query", DPKG_QUERY), ("apt-get", APT_GET)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    log = tmp_path / "apt.log"
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "CACHED_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
        "LOG": str(log),
        "APT_STATUS": str(apt_status),
    }
    proc = subprocess.run(
        ["sh", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    return proc, log.read_text() if log.exists() else ""


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="install-deps installs as root only")


def test_with_the_images_own_policy_rc_d(tmp_path: Path) -> None:
    """Docker's images ship a policy-rc.d: the script succeeds and leaves it as it was."""
    policy = tmp_path / "policy-rc.d"
    policy.write_text(DOCKER_POLICY)
    policy.chmod(0o750)
    proc, log = run(tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout == "install-deps: installing slapd\n"
    assert log.startswith("apt-get install -y -q --no-install-recommends slapd\n")
    assert "policy:\n" + DOCKER_POLICY in log
    assert policy.read_text() == DOCKER_POLICY
    assert policy.stat().st_mode & 0o7777 == 0o750


def test_without_a_policy_rc_d(tmp_path: Path) -> None:
    """None before: one that refuses every service start while apt runs, none after."""
    proc, log = run(tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert "policy:\n#!/bin/sh\nexit 101\n" in log
    assert not (tmp_path / "policy-rc.d").exists()


def test_a_failing_apt_fails_the_script_and_still_cleans_up(tmp_path: Path) -> None:
    proc, log = run(tmp_path, apt_status=100)
    assert proc.returncode != 0
    # install, then update (which fails too): the retry is not reached.
    assert log.count("apt-get ") == 2 and "apt-get update -q" in log
    assert not (tmp_path / "policy-rc.d").exists()
