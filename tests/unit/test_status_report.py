"""``cached status``'s lines for the responders of the PAM, SSH and sudo sockets
(cached/tools/status.py): each counter named, a counter the status lacks shown as 0,
a responder whose status is absent or empty not shown."""

from __future__ import annotations

from typing import Any

from cached.tools.status import format_status
from testing.backend import make_config

PAM = {"connections": 2, "logins_ok": 5, "logins_refused": 1, "access_denied": 3}
SSH = {"connections": 1, "requests": 9, "keys_served": 4, "users_unknown": 2,
       "host_requests": 7}  # fmt: skip
SUDO = {"requests": 6, "rules_sent": 11, "users_not_found": 1, "refreshes_asked": 2,
        "refresh_failures": 1}  # fmt: skip


def responder_lines(status: dict[str, Any]) -> list[str]:
    config = make_config(["ldap://127.0.0.1:1"], "dc=t")
    st = {
        "monitor": {"pid": 1, "started": 0, "config": "/etc/cached/cached.conf"},
        "children": [{"name": "responder", "running": True, "pid": 2, "uptime": 1,
                      "restarts": 0, "last_exit": "", "status": status}],
        "stores": {}, "memcache": {},
    }  # fmt: skip
    lines = format_status(config, st, True).splitlines()
    return [line for line in lines if line.startswith("  ") and " responder: " in line]


def test_every_responder_counter_is_shown() -> None:
    got = responder_lines({"connections": 1, "pam": PAM, "ssh": SSH, "sudo": SUDO})
    assert got == [
        "  PAM responder: 2 connections, 5 logins served, 1 refused, 3 account checks denied",
        "  SSH responder: 1 connections, 9 requests, 4 keys served, 2 unknown users, "
        "7 host key requests (none served)",
        "  sudo responder: 6 requests, 11 rules sent, 1 users not found, 2 refreshes asked "
        "(1 failed)",
    ]


def test_a_missing_counter_is_zero_and_an_absent_responder_is_not_shown() -> None:
    got = responder_lines({"connections": 1, "pam": {"logins_ok": 1}, "ssh": {}})
    assert got == ["  PAM responder: 0 connections, 1 logins served, 0 refused, "
                   "0 account checks denied"]  # fmt: skip
    assert responder_lines({"connections": 1}) == []
