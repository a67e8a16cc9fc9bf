"""A PAM application in ctypes: exact return codes and conversation transcripts.

``pamtester`` prints ``pam_strerror`` text and the TEXT_INFO messages, stops at the first
failure and exits 0 or 1; tests of the PAM responder need more: the numeric code of every
call and every message in the order the conversation saw it. This module drives
``libpam.so.0`` directly, as ``login``, ``su`` or ``sshd`` do: ``pam_start`` with a
conversation callback, ``pam_set_item`` for TTY/RUSER/RHOST, then ``pam_authenticate``,
``pam_setcred``, ``pam_acct_mgmt``, ``pam_open_session``, ``pam_close_session``,
``pam_chauthtok`` in the order asked, and ``pam_end``.

It is a script with no imports beyond the standard library, run inside the test's mount
namespace (:mod:`testing.pamenv`) as ``python -I pamdriver.py SPEC``. ``SPEC`` is JSON::

    {"service": "cached-test", "user": "alice",
     "items": {"tty": "pts/1", "ruser": "bob", "rhost": "example.net"},
     "answers": ["secret"],            # one per prompt, in order
     "ops": ["authenticate", "acct_mgmt", ["chauthtok", 32]],   # name or [name, flags]
     "uid": 65534}                     # optional: drop to this uid/gid before pam_start

and it prints one JSON object: ``{"start": rc, "results": [{"op", "rc", "error",
"messages": [[style, text], ...]}, ...], "unanswered": n, "seconds": s, "env":
["NAME=value", ...]}`` (``env``: ``pam_getenvlist`` after the last call, what the
modules put there, such as pam_sss's KRB5CCNAME), where ``seconds``
is the wall time from ``pam_start`` to the return of ``pam_end`` (the transaction alone,
without the interpreter's start-up or the namespace set-up). Like pamtester it stops after
the first call that fails, except acct_mgmt's NEW_AUTHTOK_REQD right before a
chauthtok, which goes on as ``login`` does. Styles are PAM's: 1 PROMPT_ECHO_OFF, 2 PROMPT_ECHO_ON,
3 ERROR_MSG, 4 TEXT_INFO. Prompts are recorded, answers are not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import time
from typing import Any, Final

PAM_SUCCESS: Final = 0
PAM_CONV_ERR: Final = 19
PAM_NEW_AUTHTOK_REQD: Final = 12
PAM_BUF_ERR: Final = 5
PROMPT_ECHO_OFF: Final = 1
PROMPT_ECHO_ON: Final = 2
ERROR_MSG: Final = 3
TEXT_INFO: Final = 4
#: pam_set_item item types (security/_pam_types.h)
ITEMS: Final = {"tty": 3, "rhost": 4, "ruser": 8}
#: pam_setcred needs one of the credential flags; PAM_ESTABLISH_CRED is what login uses.
PAM_ESTABLISH_CRED: Final = 0x2
OPS: Final = (
    "authenticate", "setcred", "acct_mgmt", "open_session", "close_session", "chauthtok",
)  # fmt: skip


class PamMessage(ctypes.Structure):
    _fields_ = [("msg_style", ctypes.c_int), ("msg", ctypes.c_char_p)]


class PamResponse(ctypes.Structure):
    _fields_ = [("resp", ctypes.c_void_p), ("resp_retcode", ctypes.c_int)]


ConvFunc = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_int,
    ctypes.POINTER(ctypes.POINTER(PamMessage)),
    ctypes.POINTER(ctypes.POINTER(PamResponse)),
    ctypes.c_void_p,
)


class PamConv(ctypes.Structure):
    _fields_ = [("conv", ConvFunc), ("appdata_ptr", ctypes.c_void_p)]


class Driver:
    def __init__(self, answers: list[str]) -> None:
        self.libpam = ctypes.CDLL("libpam.so.0")
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        self.libc.calloc.restype = ctypes.c_void_p
        self.libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self.libc.strdup.restype = ctypes.c_void_p
        self.libc.strdup.argtypes = [ctypes.c_char_p]
        self.libc.free.argtypes = [ctypes.c_void_p]
        lp = self.libpam
        lp.pam_start.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(PamConv),
            ctypes.POINTER(ctypes.c_void_p),
        ]  # fmt: skip
        lp.pam_set_item.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        lp.pam_strerror.restype = ctypes.c_char_p
        lp.pam_strerror.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lp.pam_end.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lp.pam_getenvlist.restype = ctypes.POINTER(ctypes.c_void_p)
        lp.pam_getenvlist.argtypes = [ctypes.c_void_p]
        for op in OPS:
            getattr(lp, f"pam_{op}").argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.answers = list(answers)
        self.messages: list[list[Any]] = []
        # Kept referenced for as long as libpam may call it.
        self.conv_func = ConvFunc(self._conv)

    def _conv(
        self,
        n: int,
        msgs: Any,
        resp: Any,
        _appdata: int | None,
    ) -> int:
        size = ctypes.sizeof(PamResponse)
        block = self.libc.calloc(n, size)
        if not block:
            return PAM_BUF_ERR
        replies = ctypes.cast(block, ctypes.POINTER(PamResponse))
        for i in range(n):
            m = msgs[i].contents
            text = (m.msg or b"").decode("utf-8", "replace")
            self.messages.append([m.msg_style, text])
            if m.msg_style in (PROMPT_ECHO_OFF, PROMPT_ECHO_ON):
                if not self.answers:  # a prompt nobody scripted: fail it visibly
                    for j in range(i):
                        self.libc.free(replies[j].resp)
                    self.libc.free(block)
                    return PAM_CONV_ERR
                replies[i].resp = self.libc.strdup(self.answers.pop(0).encode("utf-8"))
        resp[0] = replies
        return PAM_SUCCESS

    @staticmethod
    def _changes_next(ops: list[Any], op: Any, rc: int) -> bool:
        """acct_mgmt's NEW_AUTHTOK_REQD followed by chauthtok goes on, as login and
        sshd do: the change runs in the same transaction (pam_sss asks root for the
        old password only there, where authenticate left its must-change mark)."""
        if rc != PAM_NEW_AUTHTOK_REQD or op not in ("acct_mgmt", ["acct_mgmt", 0]):
            return False
        i = ops.index(op)
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        return nxt == "chauthtok" or (isinstance(nxt, list) and nxt[0] == "chauthtok")

    def _env(self, pamh: ctypes.c_void_p) -> list[str]:
        """The PAM environment (pam_getenvlist), its copies freed."""
        lst = self.libpam.pam_getenvlist(pamh)
        out: list[str] = []
        if not lst:
            return out
        i = 0
        while lst[i]:
            out.append(ctypes.string_at(lst[i]).decode("utf-8", "replace"))
            self.libc.free(lst[i])
            i += 1
        self.libc.free(lst)
        return out

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        conv = PamConv(self.conv_func, None)
        pamh = ctypes.c_void_p()
        start = time.perf_counter()
        rc = self.libpam.pam_start(
            spec["service"].encode(), spec["user"].encode(), ctypes.byref(conv),
            ctypes.byref(pamh),
        )  # fmt: skip
        out: dict[str, Any] = {"start": rc, "results": []}
        if rc != PAM_SUCCESS:
            out["seconds"] = time.perf_counter() - start
            return out
        last = PAM_SUCCESS
        try:
            for name, value in (spec.get("items") or {}).items():
                self.libpam.pam_set_item(pamh, ITEMS[name], ctypes.c_char_p(value.encode()))
            for op in spec["ops"]:
                name, flags = (op, 0) if isinstance(op, str) else (op[0], int(op[1]))
                if name == "setcred" and not flags:
                    flags = PAM_ESTABLISH_CRED
                before = len(self.messages)
                last = getattr(self.libpam, f"pam_{name}")(pamh, flags)
                error = self.libpam.pam_strerror(pamh, last).decode("utf-8", "replace")
                out["results"].append(
                    {"op": name, "rc": last, "error": error, "messages": self.messages[before:]}
                )
                if last != PAM_SUCCESS and not self._changes_next(spec["ops"], op, last):
                    break
            out["env"] = self._env(pamh)
        finally:
            self.libpam.pam_end(pamh, last)
            out["seconds"] = time.perf_counter() - start
        out["unanswered"] = len(self.answers)
        return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -I pamdriver.py SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    driver = Driver(spec.get("answers") or [])  # libraries loaded before dropping root
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    print(json.dumps(driver.run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
