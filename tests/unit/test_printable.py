"""Names from a directory entry or a local user's request printed on one line: log lines
and ``cached status`` (cached/printable.py; docs/threat-model.md)."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest

from cached.printable import Formatter, printable
from cached.tools.status import format_status
from testing.backend import make_config

FORGED = "cn=x\n2026-12-02 00:00:00 cached[nss:1] ERROR cached: forged\x1b[2J\u202eresu"


@pytest.mark.parametrize("name", ["alice", "Jürgen Müller", "山田 太郎", "Doe, John", "a b"])
def test_printable_names_print_as_they_are(name: str) -> None:
    assert printable(name) == name


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("a\r\nb", "a\\r\\nb"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("nul\x00", "nul\\x00"),
        ("del\x7f", "del\\x7f"),
        ("\x85next line", "\\x85next line"),  # C1 NEL
        ("\u202euser", "\\u202euser"),  # right-to-left override
        ("ad\u200bmin", "ad\\u200bmin"),  # zero-width space
        ("a\u2028b", "a\\u2028b"),  # line separator
        ("bytes \udcff", "bytes \\udcff"),  # surrogateescape
        # a backslash is escaped too, so these two names print differently
        ("a\\nb", "a\\\\nb"),
    ],
)
def test_unsafe_characters_are_escaped(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_escaped_forms_never_collide() -> None:
    names = ["a\nb", "a\\nb", "a\\\\nb", "a\x1bb", "a\\x1bb"]
    assert len({printable(n) for n in names}) == len(names)


def test_formatter_keeps_one_call_on_one_line_and_the_traceback_whole() -> None:
    fmt = Formatter("%(levelname)s %(name)s: %(message)s")
    rec = logging.LogRecord("cached", logging.ERROR, __file__, 1, "%s: bad", (FORGED,), None)
    line = fmt.format(rec)
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert line.startswith("ERROR cached: cn=x\\n2026")
    try:
        raise ValueError("boom")
    except ValueError:
        exc = sys.exc_info()
    rec = logging.LogRecord("cached", logging.ERROR, __file__, 1, "%s", (FORGED,), exc)
    out = fmt.format(rec).splitlines()
    assert out[0].startswith("ERROR cached: cn=x\\n") and out[1].startswith("Traceback")
    assert out[-1] == "ValueError: boom"


def test_daemon_logging_escapes_what_a_name_carries() -> None:
    """The daemons' own logging set-up (cli._setup_logging), in a process of its own."""
    code = (
        "import logging, sys\n"
        "from cached.cli import _setup_logging\n"
        "_setup_logging('info', 'nss')\n"
        "logging.getLogger('cached.x').warning('%s: not UTF-8 text; user ignored', sys.argv[1])\n"
    )
    r = subprocess.run([sys.executable, "-c", code, FORGED], capture_output=True, text=True,
                       timeout=60, check=True)  # fmt: skip
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "cached[nss:" in lines[0] and "WARNING cached.x: cn=x\\n2026" in lines[0]
    assert "\x1b" not in r.stderr


def test_status_prints_a_servers_error_on_its_line() -> None:
    config = make_config(["ldap://127.0.0.1:1"], "dc=t")
    backend = {
        "domain": "LDAP", "online": False, "last_error": FORGED, "retry_in": 5.0,
        "offline_since": 0, "last_success": 0, "requests": 1,
        "entries": {"users": 0, "groups": 0, "initgr": 0},
        "limit_error": "initgroups u1: " + FORGED, "limit_time": 0, "ts_rebuilt": FORGED,
    }  # fmt: skip
    st = {
        "monitor": {"pid": 1, "started": 0, "config": "/etc/sssd/sssd.conf"},
        "children": [{"name": "backend LDAP", "running": True, "pid": 2, "uptime": 1,
                      "restarts": 0, "last_exit": "", "status": backend}],
        "stores": {}, "memcache": {},
    }  # fmt: skip
    out = format_status(config, st, True)
    assert "\x1b" not in out and "\u202e" not in out
    assert not any(line.startswith("2026-12-02") for line in out.splitlines())
    assert out.count("forged") == 3  # last_error, limit_error, ts_rebuilt: each on its line


def test_status_escapes_every_line_it_prints() -> None:
    """Not only a server's words: an error quoting a peer or a path, a child's exit, a
    memory-cache file's error are printed escaped too."""
    config = make_config(["ldap://127.0.0.1:1"], "dc=t")
    empty: dict[str, Any] = {"stores": {}, "memcache": {}}
    out = format_status(config, {"error": FORGED, **empty}, False)
    assert out.splitlines()[0] == f"cached is not running ({printable(FORGED)})"
    out = format_status(config, {"needs_root": True, "error": FORGED, **empty}, True)
    assert out.splitlines()[0].endswith(f"need root ({printable(FORGED)})")
    st = {
        "monitor": {"pid": 1, "started": 0, "config": "/etc/cached/cached.conf"},
        "children": [{"name": "responder", "running": False, "pid": 2, "uptime": 1,
                      "restarts": 3, "last_exit": FORGED, "status": {}}],
        "stores": {"/var/lib/cached/\x1b]0;title\x07": 4096},
        "memcache": {"passwd": {"error": FORGED}},
    }  # fmt: skip
    out = format_status(config, st, True)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert not any(line.startswith("2026-12-02") for line in out.splitlines())
    assert out.count("forged") == 2  # last_exit, the memory cache's error
