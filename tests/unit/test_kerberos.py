"""The pure parts of Kerberos logins: SSSD's reading of KDC errors, the ccache template
and the file written for the user, the krb5_* option parsers, the messages of a refused
password change."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cached.config.parsers import ccname_template, krb5_delta
from cached.ipc.ops import AuthReply, ChpassReply, ChpassRequest
from cached.kerberos import ccache, kinit, kpasswd, renew
from cached.kerberos import status as st


@pytest.mark.parametrize(
    ("code", "status", "reachable"),
    [
        (st.KDC_ERR_PREAUTH_FAILED, st.AUTH_ERR, True),  # wrong password
        (st.AP_ERR_BAD_INTEGRITY, st.AUTH_ERR, True),  # a ticket the keytab cannot decrypt
        (st.KDC_ERR_CLIENT_REVOKED, st.PERM_DENIED, True),  # disabled, locked
        (st.KDC_ERR_KEY_EXP, st.NEW_AUTHTOK_REQD, True),
        (st.KDC_ERR_NAME_EXP, st.ACCT_EXPIRED, True),
        (st.KDC_ERR_C_PRINCIPAL_UNKNOWN, st.SYSTEM_ERR, True),  # no case in SSSD
        (st.ERR_GENERIC, st.SYSTEM_ERR, True),
        (st.KDC_UNREACH, st.AUTHINFO_UNAVAIL, False),
        (st.REALM_CANT_RESOLVE, st.AUTHINFO_UNAVAIL, False),
        (st.AP_ERR_SKEW, st.AUTHINFO_UNAVAIL, False),
    ],
)
def test_kdc_errors_read_as_sssd_reads_them(code: int, status: int, reachable: bool) -> None:
    assert st.verdict(code) == st.Verdict(status, reachable)


def test_the_ccache_template_expands_as_sssds() -> None:
    got = ccache.expand(
        "FILE:%d/krb5cc_%U_%u_%r_%p%%_XXXXXX", name="kalice", uid=30001,
        principal="kalice@CACHED.TEST", home="/home/kalice", ccachedir="/tmp",
    )  # fmt: skip
    assert got == "FILE:/tmp/krb5cc_30001_kalice_CACHED.TEST_kalice@CACHED.TEST%_XXXXXX"
    assert ccache.expand("FILE:%h/.cc", name="a", uid=1, principal="a@R", home="/h",
                         ccachedir="/tmp") == "FILE:/h/.cc"  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    ["KEYRING:persistent:%U", "DIR:/run/user/%U", "FILE:/tmp/cc_%P", "FILE:cc_%U", "FILE:/x%"],
)
def test_a_template_cached_cannot_write_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        ccname_template(bad)


def test_lifetimes_take_krb5_units() -> None:
    assert krb5_delta("3600") == 3600
    assert krb5_delta("10h") == 36000
    assert krb5_delta("1d12h") == 129600
    assert krb5_delta(" 90m ") == 5400
    with pytest.raises(ValueError):
        krb5_delta("ten hours")


def _fill_with(data: bytes) -> Callable[[str], None]:
    def fill(name: str) -> None:
        Path(name.removeprefix("FILE:")).write_bytes(data)

    return fill


def test_a_unique_ccache_is_new_and_the_users_alone(tmp_path: Path) -> None:
    uid, gid = os.getuid(), os.getgid()
    name = ccache.write(f"FILE:{tmp_path}/krb5cc_1_XXXXXX", uid, gid, _fill_with(b"tickets"))
    path = Path(name.removeprefix("FILE:"))
    assert path.parent == tmp_path and path.name.startswith("krb5cc_1_")
    assert len(path.name) == len("krb5cc_1_XXXXXX") and "XXXXXX" not in path.name
    assert path.read_bytes() == b"tickets"
    assert path.stat().st_mode & 0o777 == 0o600
    other = ccache.write(f"FILE:{tmp_path}/krb5cc_1_XXXXXX", uid, gid, _fill_with(b"x"))
    assert other != name


def test_a_fixed_name_replaces_a_symlink_never_its_target(tmp_path: Path) -> None:
    """A user may put a symbolic link where a fixed ccache name will be (their own file
    in a sticky /tmp can be replaced): the rename replaces the link, the target stays."""
    target = tmp_path / "etc-shadow"
    target.write_bytes(b"precious")
    link = tmp_path / "krb5cc_1"
    link.symlink_to(target)
    name = ccache.write(f"FILE:{link}", os.getuid(), os.getgid(), _fill_with(b"tickets"))
    assert name == f"FILE:{link}"
    assert not link.is_symlink() and link.read_bytes() == b"tickets"
    assert target.read_bytes() == b"precious"


def test_a_ccache_is_read_back_only_when_it_is_the_users_own_file(tmp_path: Path) -> None:
    """The renewal reads the user's ccache as root: a link (to another user's ccache)
    or a file of another owner is refused, never read."""
    uid = os.getuid()
    own = tmp_path / "krb5cc_own"
    own.write_bytes(b"tickets")
    assert ccache.read_owned(f"FILE:{own}", uid) == b"tickets"
    link = tmp_path / "krb5cc_link"
    link.symlink_to(own)
    with pytest.raises(PermissionError):
        ccache.read_owned(f"FILE:{link}", uid)
    with pytest.raises(PermissionError):
        ccache.read_owned(f"FILE:{own}", uid + 1)
    with pytest.raises(PermissionError):
        ccache.read_owned(str(tmp_path), uid)  # a directory
    with pytest.raises(FileNotFoundError):
        ccache.read_owned(f"FILE:{tmp_path}/gone", uid)


def _entry(principal: str, start: int, end: int, renew_till: int) -> renew.Entry:
    user = kinit.User("alice", 1000, 1000)
    return renew.Entry(user, principal, "FILE:/tmp/krb5cc_1000_abcdef",
                       kinit.Times(start, end, renew_till))  # fmt: skip


def test_renewals_are_due_at_half_the_lifetime_as_sssds() -> None:
    r = renew.Renewals()
    assert not r.add(_entry("bob@R", 0, 100, 100))  # not renewable beyond its end
    assert not r.add(_entry("bob@R", 0, 100, 0))
    e = _entry("alice@R", 1000, 1600, 5000)
    assert r.add(e) and len(r) == 1
    assert e.renew_at == 1300
    assert r.due(1300) == [] and r.due(1301) == [e]
    # A later login of the same principal replaces the entry.
    later = _entry("alice@R", 1200, 1800, 5200)
    r.add(later)
    assert r.due(1501) == [later] and len(r) == 1


def test_a_renewal_replaces_or_drops_its_entry() -> None:
    r = renew.Renewals()
    e = _entry("alice@R", 0, 600, 5000)
    r.add(e)
    renewed = _entry("alice@R", 400, 1000, 5000)
    r.renewed(e, renewed)
    assert r.entries == {"alice@R": renewed}
    # The last renewal (the new end is renew_till) drops it.
    last = _entry("alice@R", 4700, 5000, 5000)
    r.renewed(renewed, last)
    assert r.entries == {}
    # A failure drops it, unless a login replaced it meanwhile.
    r.add(e)
    newer = _entry("alice@R", 100, 700, 5100)
    r.add(newer)
    r.renewed(e, None)
    assert r.entries == {"alice@R": newer}
    r.renewed(newer, None)
    assert r.entries == {}


def test_a_renewal_without_a_kdc_is_retried_and_a_refused_one_dropped() -> None:
    """SSSD's renew_tgt_done: offline (no KDC) the entry stays for the next round; a
    KDC's refusal drops it; a success puts the renewed TGT's times in its place."""
    r = renew.Renewals()
    e = _entry("alice@R", 0, 600, 5000)
    r.add(e)
    offline = kinit.Result(st.AUTHINFO_UNAVAIL, reachable=False)
    assert r.settle(e, offline) == "retry" and r.entries == {"alice@R": e}
    times = kinit.Times(400, 1000, 5000)
    done = kinit.Result(st.SUCCESS, ccname=e.ccname, principal="alice@R", times=times)
    assert r.settle(e, done) == "renewed"
    (renewed,) = r.entries.values()
    assert renewed.times == times and renewed.renew_at == 700
    refused = kinit.Result(st.NEW_AUTHTOK_REQD, reason="the TGT has expired")
    assert r.settle(renewed, refused) == "failed" and r.entries == {}


def test_a_refused_change_says_what_sssd_says() -> None:
    assert kpasswd._message(4, b"Password change rejected", b"Too short.") == "Too short."
    # AD's policy block starts with a NUL: SSSD's hint for a soft error instead.
    assert kpasswd._message(4, b"Password change rejected", b"\0\0" + bytes(28)) == (
        kpasswd.COMPLEXITY
    )
    assert kpasswd._message(5, b"Access denied", b"") == "Access denied"


def test_passwords_stay_out_of_reprs_and_replies_round_trip() -> None:
    req = ChpassRequest("kalice", "CN=kalice", b"old-secret", b"new-secret", False, 0)
    assert "secret" not in repr(req)
    assert ChpassRequest.parse(req.args()) == req
    reply = ChpassReply(20, "Too short.", ccname="FILE:/tmp/krb5cc_1_abcdef")
    assert ChpassReply.parse(reply.fields()) == reply
    auth = AuthReply(0, ccname="FILE:/tmp/krb5cc_1_abcdef")
    assert AuthReply.parse(auth.fields()).ccname == "FILE:/tmp/krb5cc_1_abcdef"


def test_the_response_filter_is_sssds() -> None:
    from cached.config.parsers import RESPONSE_FILTER_DEFAULTS, response_filter

    assert response_filter("") == list(RESPONSE_FILTER_DEFAULTS)
    assert response_filter("ENV") == ["ENV"]
    assert response_filter("-ENV:KRB5CCNAME:sudo, +ENV:KRB5CCNAME:su") == [
        "ENV:KRB5CCNAME:sudo-i", "ENV:KRB5CCNAME:su"
    ]  # fmt: skip
    with pytest.raises(ValueError):
        response_filter("ENV:X, +ENV:Y")
