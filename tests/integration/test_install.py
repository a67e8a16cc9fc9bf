"""README.md's "Running it as a service" commands, run verbatim, and the unit's ExecStart=.

In a private mount namespace, /opt, /etc and /var/lib are overlays whose writes land in
the test's directory and /run is a fresh tmpfs, so the commands install exactly where
README says (/opt/cached, /etc/cached, /etc/systemd/system, /etc/tmpfiles.d) and the host
is left as it was. The test then edits /etc/cached/cached.conf as an administrator
would (the test slapd instead of ldap.example.com), and starts the daemon the way the
installed unit does: ExecStartPre=, then ExecStart= with the unit's Environment=,
NOTIFY_SOCKET and cwd /, with /root and /home hidden (ProtectHome=). It must report
READY=1 and answer a lookup of the test directory on /var/lib/sss/pipes/nss.
`systemctl enable --now` itself needs systemd as PID 1, which CI containers lack;
tests/integration/test_systemd.py verifies the unit and runs the daemon in its sandbox.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from testing.slapd import LiveDirectory

REPO: Final = Path(__file__).resolve().parents[2]
README: Final = REPO / "README.md"
UNIT: Final = REPO / "systemd" / "cached.service"
INSTALL_TIMEOUT: Final = 900.0  # pip builds the wheel and installs the pinned packages

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: unshare -m and overlay mounts"
)


def readme_install_commands() -> list[str]:
    section = README.read_text().split("## Running it as a service", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert block, "README.md: no ```sh block under 'Running it as a service'"
    return [ln.strip() for ln in block[1].splitlines() if ln.strip()]


def test_readme_and_unit_agree() -> None:
    commands = readme_install_commands()
    exec_start = next(
        ln.split("=", 1)[1] for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStart=")
    )
    venv = exec_start.split()[0].removesuffix("/bin/cached")
    assert f"/usr/bin/python3 -m venv {venv}" in commands
    assert f"{venv}/bin/pip install ." in commands
    assert "install -m 0644 systemd/cached.service /etc/systemd/system/" in commands
    assert commands[-1] == "systemctl enable --now cached"


# Runs as root inside `unshare --mount`; prints one JSON object on its last line.
DRIVER: Final = r"""
import json, os, re, shlex, signal, subprocess, sys
spec = json.loads(sys.argv[1])
scratch = spec["scratch"]
out = {"steps": []}

def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    out["steps"].append({"argv": argv, "status": r.returncode,
                         "output": (r.stdout + r.stderr)[-3000:]})
    return r

for d in ("/opt", "/etc", "/var/lib"):
    up, work = f"{scratch}/ovl{d}/upper", f"{scratch}/ovl{d}/work"
    os.makedirs(up); os.makedirs(work)
    r = run(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={d},upperdir={up},workdir={work}", d])
    if r.returncode:
        print(json.dumps({"skip": f"overlay on {d}: {r.stderr.strip()}"})); sys.exit(0)
run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run"])

env = {k: v for k, v in os.environ.items()
       if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "NOTIFY_SOCKET")}
for cmd in spec["commands"]:
    if run(["sh", "-ec", cmd], cwd=spec["src"], env=env, timeout=spec["timeout"]).returncode:
        print(json.dumps(out)); sys.exit(0)
# What the wheel installed, by top-level folder: the package, never the harness or tests.
files = "import importlib.metadata as m; print(*{str(f).split('/')[0] for f in m.files('cached')})"
out["installed"] = run(["/opt/cached/bin/python", "-c", files], env=env, timeout=120).stdout.split()
# The C entry reader was built (gcc and python3-dev are in the README's apt-get line).
c_reader = "from cached.ldap import _ber, entry; print(entry.decode_entry is _ber.decode_entry)"
out["c_reader"] = run(["/opt/cached/bin/python", "-c", c_reader], env=env, timeout=120).stdout

# The administrator's edit: our directory instead of the sample's, no D-Bus here.
conf = "/etc/cached/cached.conf"
text = open(conf).read()
for key, value in spec["edits"].items():
    text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}" if value is not None else "",
                      text, flags=re.MULTILINE)
    assert n == 1, key
text = text.replace("[cached]\n", "[cached]\ndbus_address = none\n", 1)
open(conf, "w").write(text)
out["conf_mode"] = oct(os.stat(conf).st_mode & 0o777)

# The unit as installed: ExecStartPre=, then ExecStart= as systemd runs it.
unit = open("/etc/systemd/system/cached.service").read()
def values(key):
    return [ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith(key + "=")]
for pre in values("ExecStartPre"):
    if run(shlex.split(pre.lstrip("+-@"))).returncode:
        print(json.dumps(out)); sys.exit(0)
[exec_start] = values("ExecStart")
out["exec_start"] = exec_start
daemon_env = dict(kv.split("=", 1) for e in values("Environment") for kv in shlex.split(e))
daemon_env.update({"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "NOTIFY_SOCKET": f"{scratch}/notify"})
sys.path.insert(0, spec["repo"])
from tests.integration.test_systemd import NotifySocket
from cached.nss.client import NssClient
notify = NotifySocket(__import__("pathlib").Path(f"{scratch}/notify"))
# ProtectHome=yes: the daemon must not need /root or /home.
hide = "mount -t tmpfs tmpfs /root && mount -t tmpfs tmpfs /home && exec \"$@\""
log = open(f"{scratch}/daemon.log", "wb")
proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                         "sh", "-c", hide, "sh", *shlex.split(exec_start)],
                        env=daemon_env, cwd="/", stdin=subprocess.DEVNULL,
                        stdout=log, stderr=log)
try:
    ready = notify.receive(proc, __import__("pathlib").Path(f"{scratch}/daemon.log"))
    out["ready"] = ready.fields.get("READY")
    with NssClient("/var/lib/sss/pipes", timeout=60) as c:
        u = c.getpwnam(spec["user"])
    out["uid"] = u.uid if u else None
    st = run(["/opt/cached/bin/cached", "status"], env=daemon_env, timeout=120)
    out["status"] = st.returncode
finally:
    proc.send_signal(signal.SIGTERM)
    try:
        out["exit"] = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill(); out["exit"] = proc.wait()
    notify.close()
out["log"] = open(f"{scratch}/daemon.log", errors="replace").read()[-3000:]
print(json.dumps(out))
"""


def copy_checkout(dest: Path) -> Path:
    """The checkout as a clone has it: without the venv, caches and build output."""
    junk = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build",
                                  ".*_cache", ".benchmarks", "results", "*.so")  # fmt: skip
    shutil.copytree(REPO, dest, ignore=junk)
    return dest


def test_readme_install_and_the_units_exec_start(
    slapd_small: LiveDirectory, tmp_path: Path
) -> None:
    commands = readme_install_commands()
    for cmd in [c for c in commands if c.startswith("apt-get install")]:
        for pkg in cmd.split()[2:]:  # installed by contrib/install-deps, not here
            r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                               capture_output=True, text=True, check=False)  # fmt: skip
            assert r.stdout == "install ok installed", f"{pkg} is not installed: {cmd}"
    runnable = [c for c in commands if not c.startswith(("apt-get ", "systemctl "))]
    s, exp = slapd_small.slapd, slapd_small.expected
    user = exp.user_names()[0]
    spec: dict[str, Any] = {
        "scratch": str(tmp_path),
        "src": str(copy_checkout(tmp_path / "src")),
        "repo": str(REPO),
        "commands": runnable,
        "timeout": INSTALL_TIMEOUT,
        "user": user,
        "edits": {
            "ldap_uri": s.uri,
            "ldap_search_base": s.base_dn,
            "ldap_user_search_base": s.base_dn,
            "ldap_group_search_base": s.base_dn,
            "ldap_id_use_start_tls": "false",
            "ldap_tls_cacert": None,
        },
    }
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         sys.executable, "-c", DRIVER, json.dumps(spec)],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT + 300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    failed = [st for st in out["steps"] if st["status"] != 0]
    assert not failed, json.dumps(failed, indent=2)
    assert [st["argv"][-1] for st in out["steps"] if st["argv"][:2] == ["sh", "-ec"]] == runnable
    assert out["c_reader"] == "True\n", out["c_reader"]
    assert "cached" in out["installed"] and not {"testing", "tests", "perf"} & set(
        out["installed"]
    ), out["installed"]
    assert out["conf_mode"] == "0o600"
    assert out["exec_start"] == "/opt/cached/bin/cached serve"
    assert out.get("ready") == "1", out.get("log")
    assert out["uid"] == exp.user(user).uid, out["log"]
    assert out["status"] == 0 and out["exit"] == 0, out["log"]
