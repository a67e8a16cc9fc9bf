"""GeneralizedTime (RFC 4517 §3.3.13: ``YYYYmmddHH[MM[SS]][(.|,)fraction](Z|±HHMM)``)
as cached reads it from directory attributes: one parser, the form SSSD accepts for
each attribute an explicit parameter (:class:`TimeForm`), since SSSD reads them with
different ``strptime`` formats on purpose.
"""

from __future__ import annotations

import calendar
import re
from enum import Enum
from typing import Final

# Every form is a narrowing of this one; ASCII digits only, as C's strptime reads them.
_TIME: Final = re.compile(
    r"(\d{4})(\d{2})(\d{2})(\d{2})(?:(\d{2})(\d{2})?)?(?:([.,])(\d*))?(?:Z|([+-])(\d{2})(\d{2}))",
    re.ASCII,
)


class TimeForm(Enum):
    #: ``YYYYmmddHHMMSSZ``: SSSD's ``strptime(..., "%Y%m%d%H%M%SZ")`` (krbPasswordExpiration,
    #: loginExpirationTime, and a modifyTimestamp's first 14 characters). Seconds 60 and 61
    #: are read, as strptime reads them, as the next minute's.
    SECONDS = "seconds"
    #: ``YYYYmmddHHMMSS[.digits]Z``: as SECONDS or with a fraction of a second after a
    #: dot (pwdAccountLockedTime, which OpenLDAP writes with one).
    FRACTION = "fraction"
    #: sudoNotBefore/sudoNotAfter as SSSD's ``sysdb_sudo_convert_time`` tries them:
    #: ``YYYYmmddHH[MM[SS]]``, an optional ``.0`` or ``,0``, then ``Z`` or ``±HHMM``;
    #: seconds 0..59 (a calendar time).
    SUDO = "sudo"


def generalized_time(text: str, form: TimeForm) -> float | None:
    """``text`` in ``form`` as seconds since 1970 (UTC), or None when it is not one: a
    different shape, or a date or time that does not exist (a 13th month, a 30th of
    February, a 25th hour)."""
    m = _TIME.fullmatch(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, sep, fraction, sign, oh, om = m.groups()
    sudo = form is TimeForm.SUDO
    if sudo:
        shaped = sep is None or fraction == "0"
    else:  # to the second, in UTC, a fraction only after a dot and where the form has one
        shaped = s is not None and sign is None and (
            sep is None or (form is TimeForm.FRACTION and sep == ".")
        )
    if not shaped:
        return None
    year, month, day, hour = int(y), int(mo), int(d), int(h)
    minute, second = int(mi or 0), int(s or 0)
    if not (
        year >= 1
        and 1 <= month <= 12
        and 1 <= day <= calendar.monthrange(year, month)[1]
        and hour <= 23
        and minute <= 59
        and second <= (59 if sudo else 61)
    ):
        return None
    t = float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))
    if sign:
        off = int(oh) * 3600 + int(om) * 60
        t -= off if sign == "+" else -off
    elif fraction and not sudo:
        t += float("0." + fraction)
    return t
