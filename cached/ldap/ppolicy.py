"""The password policy controls of a bind: the request control cached sends with the
user's bind, and the response control's value (draft-behera-ldap-password-policy-10
§6.1-6.2, OID 1.3.6.1.4.1.42.2.27.8.5.1; slapo-ppolicy(5)), and the Netscape
expiry controls older servers send instead (389-DS: 2.16.840.1.113730.3.4.4/.5).

    PasswordPolicyResponseValue ::= SEQUENCE {
        warning [0] CHOICE {
            timeBeforeExpiration [0] INTEGER (0 .. maxInt),
            graceAuthNsRemaining [1] INTEGER (0 .. maxInt) } OPTIONAL,
        error   [1] ENUMERATED {
            passwordExpired (0), accountLocked (1), changeAfterReset (2),
            passwordModNotAllowed (3), mustSupplyOldPassword (4),
            insufficientPasswordQuality (5), passwordTooShort (6),
            passwordTooYoung (7), passwordInHistory (8) } OPTIONAL }
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cached.ldap.ber import SEQUENCE, BerError, header
from cached.ldap.controls import Control

PPOLICY_OID = "1.3.6.1.4.1.42.2.27.8.5.1"
NETSCAPE_EXPIRED_OID = "2.16.840.1.113730.3.4.4"
NETSCAPE_EXPIRING_OID = "2.16.840.1.113730.3.4.5"


class PolicyError(enum.IntEnum):
    PASSWORD_EXPIRED = 0
    ACCOUNT_LOCKED = 1
    CHANGE_AFTER_RESET = 2
    PASSWORD_MOD_NOT_ALLOWED = 3
    MUST_SUPPLY_OLD_PASSWORD = 4
    INSUFFICIENT_PASSWORD_QUALITY = 5
    PASSWORD_TOO_SHORT = 6
    PASSWORD_TOO_YOUNG = 7
    PASSWORD_IN_HISTORY = 8


@dataclass(frozen=True, slots=True)
class PolicyResponse:
    """What the server said of the password: seconds before it expires, grace logins
    left (None: not said), and an error."""

    expires_in: int | None = None
    grace: int | None = None
    error: PolicyError | int | None = None


def request_control() -> Control:
    """The request control: no value, not critical (a server without the overlay
    ignores it, as the draft asks)."""
    return (PPOLICY_OID, False, None)


def _uint(value: bytes, a: int, b: int, what: str) -> int:
    if a == b or b - a > 8:
        raise BerError(f"ppolicy: bad {what}")
    n = int.from_bytes(value[a:b], "big", signed=True)
    if n < 0:
        raise BerError(f"ppolicy: negative {what}")
    return n


def decode_response(value: bytes | None) -> PolicyResponse:
    """The response control's value; BerError when it is not one. An empty value (or
    none) says nothing."""
    if not value:
        return PolicyResponse()
    tag, pos, end = header(value, 0, len(value))
    if tag != SEQUENCE or end != len(value):
        raise BerError("ppolicy: the value is not one SEQUENCE")
    expires_in = grace = None
    error: PolicyError | int | None = None
    while pos < end:
        tag, a, b = header(value, pos, end)
        pos = b
        if tag == 0xA0:  # warning [0], constructed: a CHOICE
            wtag, wa, wb = header(value, a, b)
            if wtag == 0x80:
                expires_in = _uint(value, wa, wb, "timeBeforeExpiration")
            elif wtag == 0x81:
                grace = _uint(value, wa, wb, "graceAuthNsRemaining")
            else:
                raise BerError(f"ppolicy: unknown warning tag {wtag:#x}")
        elif tag == 0x81:  # error [1] ENUMERATED
            n = _uint(value, a, b, "error")
            try:
                error = PolicyError(n)
            except ValueError:
                error = n
        else:
            raise BerError(f"ppolicy: unknown element tag {tag:#x}")
    return PolicyResponse(expires_in, grace, error)
