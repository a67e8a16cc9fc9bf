"""The ``cached`` command line: every mistake gets one line and a getent-like status.

getent(1): 1 for a bad command line or an unknown database, 2 for a key not found (and,
through glibc, for a service that cannot be reached). id(1): 1 for every failure. No
traceback, ever: each test checks the whole of stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cached.cli import build_internal_parser, build_parser
from testing.asuser import open_the_way, run_python
from testing.marks import requires_nss

LONG = "x" * 300  # over libnss_sss's 256-byte name limit (reference §1.5)


def cached(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cached", *args], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def result(r: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    return r.returncode, r.stdout, r.stderr


# -- parsing ---------------------------------------------------------------------------


def test_log_level_is_accepted_after_serve() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--log-level", "debug"]).log_level == "debug"
    assert parser.parse_args(["--log-level", "debug", "serve"]).log_level == "debug"
    assert parser.parse_args(["--log-level", "error", "serve", "--log-level", "debug"]).log_level \
        == "debug"  # fmt: skip
    assert parser.parse_args(["serve"]).log_level == "info"
    # And it reaches the configuration (which does not exist here): parsed, not rejected.
    r = cached("serve", "--log-level", "debug", "-c", "/nonexistent/cached.conf")
    assert result(r) == (3, "", "cached: /nonexistent/cached.conf: no such file; create it "
                                "(see contrib/cached.conf) or pass -c FILE\n")  # fmt: skip


def test_usage_errors_are_one_line_with_status_1() -> None:
    assert result(cached()) == (
        1,
        "",
        "cached: the following arguments are required: COMMAND (see cached --help)\n",
    )
    assert result(cached("serve", "--log-level", "loud")) == (
        1, "", "cached serve: argument --log-level: invalid choice: 'loud' (choose from "
        "'debug', 'info', 'warning', 'error') (see cached serve --help)\n",
    )  # fmt: skip
    assert result(cached("getent", "hosts", "x")) == (
        1, "", "cached getent: argument database: invalid choice: 'hosts' (choose from "
        "'passwd', 'group', 'initgroups') (see cached getent --help)\n",
    )  # fmt: skip


def test_internal_commands_are_not_offered() -> None:
    r = cached("nosuch")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("cached: argument COMMAND: invalid choice: 'nosuch' (choose from")
    assert "_backend" not in r.stderr and "_responder" not in r.stderr
    r = cached("--help")
    assert r.returncode == 0 and "serve" in r.stdout
    assert "_backend" not in r.stdout and "_responder" not in r.stdout
    # ...but the monitor's command lines (monitor.py) still parse.
    args = build_internal_parser().parse_args(
        ["--log-level", "debug", "_backend", "-c", "/x.conf", "--domain", "LDAP"]
    )
    assert (args.command, args.log_level, args.config, args.domain) == (
        "_backend",
        "debug",
        "/x.conf",
        "LDAP",
    )
    assert result(cached("_responder", "-c", "/nonexistent/c.conf")) == (
        3, "", "cached: /nonexistent/c.conf: no such file; create it (see contrib/cached.conf) "
        "or pass -c FILE\n",
    )  # fmt: skip


def test_perf_without_a_command_is_one_line() -> None:
    # A usage error, reported before the configuration (absent here) is read.
    for args in ([], ["--"], ["--json", "--"]):
        assert result(cached("perf", "-c", "/nonexistent/c.conf", *args)) == (
            1, "", "cached perf: give the command to measure after --, e.g. cached perf -- id "
            "bigroupuser (see cached perf --help)\n",
        ), args  # fmt: skip


# -- id and getent without a daemon -----------------------------------------------------


def test_getent_and_id_without_a_daemon(tmp_path: Path) -> None:
    nss = tmp_path / "nss"
    no_daemon = f"cannot ask cached: {nss}: No such file or directory\n"
    for args, status, who in (
        (["getent", "passwd", "alice"], 2, "getent"),
        (["getent", "group", "10001"], 2, "getent"),
        (["getent", "passwd", "99999999999"], 2, "getent"),  # not a u32: a name, as getent
        (["getent", "initgroups", "alice", "bob"], 2, "getent"),
        (["id", "alice"], 1, "id"),
        (["id", "4294967296"], 1, "id"),
    ):
        r = cached(*args, "--pipes-dir", str(tmp_path))
        assert result(r) == (status, "", f"cached {who}: {no_daemon}"), args


def test_names_libnss_sss_never_sends_are_not_looked_up(tmp_path: Path) -> None:
    """Empty and over-long names: answered without a socket (there is none here)."""
    for db in ("passwd", "group", "initgroups"):
        assert result(cached("getent", db, "", "--pipes-dir", str(tmp_path))) == (
            2, "", f"cached getent: {db}: '' is not a valid key (an empty name)\n"
        )  # fmt: skip
        assert result(cached("getent", db, LONG, "--pipes-dir", str(tmp_path))) == (
            2, "", f"cached getent: {db}: '{'x' * 64}…' is not a valid key (a name of 300 bytes "
            "(at most 256))\n",
        )  # fmt: skip
    r = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"cached",
            b"getent",
            b"group",
            b"\xff",
            b"--pipes-dir",
            bytes(tmp_path),
        ],
        capture_output=True,
        timeout=120,
    )
    assert (r.returncode, r.stdout, r.stderr) == (
        2, b"", b"cached getent: group: '\\xff' is not a valid key (a name that is not valid "
        b"UTF-8)\n",
    )  # fmt: skip
    assert result(cached("id", "", "--pipes-dir", str(tmp_path))) == (
        1, "", "cached id: '': no such user (an empty name)\n"
    )  # fmt: skip
    assert result(cached("id", LONG, "--pipes-dir", str(tmp_path))) == (
        1, "", f"cached id: '{'x' * 64}…': no such user (a name of 300 bytes (at most 256))\n"
    )  # fmt: skip


# -- against a running daemon ------------------------------------------------------------


@requires_nss
def test_getent_and_id_against_the_daemon(cached_small, slapd_small) -> None:
    exp = slapd_small.expected
    u = exp.user(exp.big_user)
    pipes = ["--pipes-dir", str(cached_small.pipes_dir)]
    r = cached("getent", "passwd", "", exp.big_user, "nosuchuser", "4294967296", *pipes)
    # getent(1) goes on after a key it cannot find, and answers 2 at the end.
    assert r.returncode == 2
    assert r.stdout.startswith(f"{exp.big_user}:*:{u.uid}:{u.gid}:") and r.stdout.count("\n") == 1
    assert r.stderr == "cached getent: passwd: '' is not a valid key (an empty name)\n"
    assert result(cached("getent", "group", str(2**32), *pipes)) == (2, "", "")
    assert result(cached("id", "nosuchuser", *pipes)) == (
        1, "", "cached id: 'nosuchuser': no such user\n"
    )  # fmt: skip
    assert result(cached("id", str(2**32 + u.uid), *pipes)) == (
        1, "", f"cached id: '{2**32 + u.uid}': no such user\n"
    )  # fmt: skip
    r = cached("id", str(u.uid), *pipes)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith(f"uid={u.uid}({exp.big_user}) gid={u.gid}")


@requires_nss
def test_perf_of_a_command_that_cannot_run(cached_small) -> None:
    r = cached("perf", "-c", str(cached_small.config_path), "--", "/nonexistent/cmd", "-x")
    assert result(r) == (
        2, "", "cached perf: cannot run /nonexistent/cmd -x: No such file or directory\n"
    )  # fmt: skip


@requires_nss
@pytest.mark.skipif(sys.platform != "linux", reason="setpriv")
def test_status_for_a_user_other_than_root(daemon_factory, slapd_small) -> None:
    d = daemon_factory(slapd_small)
    open_the_way(d.pipes_dir / "nss")
    open_the_way(d.config_path)
    d.config_path.chmod(0o644)  # no password in it; an administrator's would be 0600
    # A snippet only root may read, as it must be: a user's tool reads the rest (found
    # in review: it stopped `cached status`, `getent` and `id` for every user).
    confd = d.config_path.parent / "conf.d"
    confd.mkdir()
    (confd / "50-site.conf").write_text("[nss]\nfilter_users = root, alice\n")
    (confd / "50-site.conf").chmod(0o600)
    ctl = d.pipes_dir / "private" / "control"
    # The daemon itself never skips it: started as a user, it stops (found in review:
    # it would lose what the snippet sets, TLS checks or the bind).
    r = run_python(["-c", "import sys; from cached.config import load_config; "
                    "load_config(sys.argv[1])", str(d.config_path)])  # fmt: skip
    assert r.returncode != 0 and "50-site.conf: cannot read" in r.stderr, r.stderr
    r = run_python(["-m", "cached", "status", "-c", str(d.config_path)])
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout.splitlines()[0] == (
        f"cached is running (its NSS socket answers); the details need root ({ctl}: "
        "Permission denied)"
    )
    r = run_python(["-m", "cached", "status", "--json", "-c", str(d.config_path)])
    js = json.loads(r.stdout)
    assert (r.returncode, js["running"], js["needs_root"]) == (0, True, True)
    # Root sees the details; once stopped, everyone is told it is not running.
    assert d.cli("status").stdout.startswith("cached is running: monitor pid ")
    d.stop()
    r = run_python(["-m", "cached", "status", "-c", str(d.config_path)])
    assert r.returncode == 3 and r.stdout.startswith("cached is not running (")
