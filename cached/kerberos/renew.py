"""Users' TGTs renewed in the background (``krb5_renew_interval``; SSSD 2.8.2's
``krb5_renew_tgt.c`` and ``krb5_child``'s ``renew_tgt_child``).

* A login (online, or an offline login's delayed kinit) whose TGT is renewable
  (``renew_till`` after its end time) puts its ccache in the list, keyed by the
  principal: a later login of the same principal replaces the entry.
* Every ``krb5_renew_interval``, while the domain is online (and when it comes back),
  each ccache whose TGT is past half its lifetime (``starttime + (endtime -
  starttime) / 2``) is renewed: the ccache is read back (a regular file the user
  owns), the TGT renewed with the KDC (a TGS request with the RENEW flag), validated
  against the keytab as a login's is (``krb5_validate``), and written back into the
  same file for the user. The renewed TGT takes the entry's place while it is still
  renewable; the last renewal (``renew_till`` reached) drops it.
* No KDC answered: the entry stays, for the next round. Any other failure (the
  ccache gone or not the user's, the TGT expired, the KDC's refusal) drops it.

Pure list handling here; the renewal itself (blocking libkrb5) is :func:`renew`, run
on the backend's login thread as the logins are.
"""

from __future__ import annotations

from dataclasses import dataclass

import krb5

from cached.kerberos import ccache, kinit
from cached.kerberos import status as st


@dataclass(frozen=True, slots=True)
class Entry:
    """A ccache to renew: whose, where, and its TGT's times (seconds since the
    epoch)."""

    user: kinit.User
    principal: str
    ccname: str
    times: kinit.Times

    @property
    def renew_at(self) -> float:
        """SSSD's ``start_renew_at``: half the TGT's lifetime gone."""
        return self.times.start + (self.times.end - self.times.start) / 2


class Renewals:
    """The renewable ccaches of logged-in users, by principal."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: Entry) -> bool:
        """Keep ``entry`` when its TGT is renewable beyond its end; whether it was."""
        if entry.times.renew_till <= entry.times.end:
            return False
        self.entries[entry.principal] = entry
        return True

    def due(self, now: float) -> list[Entry]:
        """The entries whose renewal time has passed (SSSD: ``start_renew_at < now``)."""
        return [e for e in self.entries.values() if e.renew_at < now]

    def renewed(self, old: Entry, new: Entry | None) -> None:
        """After ``old``'s renewal: ``new`` takes its place while renewable; a failed
        or final renewal (``new`` None or not renewable) drops it, unless a login
        replaced it meanwhile."""
        if new is not None and self.add(new):
            return
        if self.entries.get(old.principal) is old:
            del self.entries[old.principal]

    def settle(self, old: Entry, res: kinit.Result) -> str:
        """The list after ``old``'s renewal went as ``res`` says (SSSD's
        ``renew_tgt_done``): ``"retry"`` when no KDC answered (kept for the next
        round), ``"renewed"``, or ``"failed"`` (dropped)."""
        if not res.reachable:
            return "retry"
        if res.status != st.SUCCESS or res.times is None:
            self.renewed(old, None)
            return "failed"
        self.renewed(old, Entry(old.user, old.principal, res.ccname, res.times))
        return "renewed"


def renew(settings: kinit.Settings, entry: Entry) -> kinit.Result:
    """Renew the TGT in ``entry``'s ccache and write it back for the user (blocking).
    ``reachable`` false when no KDC answered (the caller keeps the entry)."""
    try:
        data = ccache.read_owned(entry.ccname, entry.user.uid)
    except OSError as e:
        return kinit.Result(st.SYSTEM_ERR, reason=f"cannot read the ccache {entry.ccname}: {e}")
    ctx = krb5.init_context()
    princ = krb5.parse_name_flags(ctx, entry.principal.encode())

    def renewed(name: str) -> krb5.Creds:
        return krb5.get_renewed_creds(ctx, princ, krb5.cc_resolve(ctx, name.encode()))

    try:
        creds = ccache.staged(data, renewed)
    except krb5.Krb5Error as e:
        code = e.err_code
        if code == st.AP_ERR_TKT_EXPIRED:
            # SSSD's renew_tgt_child: ERR_CREDS_EXPIRED, not a network error.
            return kinit.Result(st.NEW_AUTHTOK_REQD, reason="the TGT has expired")
        v = st.verdict(code)
        return kinit.Result(v.status, v.reachable, reason=st.reason(code, str(e)))
    return kinit.save(ctx, settings, entry.user, entry.principal, creds, entry.ccname)
