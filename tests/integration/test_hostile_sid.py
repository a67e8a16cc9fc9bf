"""A SID no real DC can hold, from the server cached asks: dropped, never the request.

The Samba AD DC fixture (testing/addc.py) cannot store a SID of more than 15
sub-authorities (Samba's dom_sid has room for 15), so a proxy rewrites what it
answers (testing/ldaprewrite.py): alice's ``tokenGroups`` gain a 16-sub-authority
value, bob's ``primaryGroupID`` becomes 2^32. The binary reader used to accept the
first and the filter writer to raise ValueError on it; every `id alice` failed with
a full traceback in the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testing import addc, addir
from testing.daemon import CachedDaemon
from testing.ldaprewrite import Attrs, LdapRewriteProxy
from testing.marks import requires_nss

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}

# Revision 1, 16 sub-authorities, authority 5 (NT), S-1-5-21-... then 12 more: 72 bytes.
SID16 = bytes([1, 16]) + (5).to_bytes(6, "big") + b"".join(
    (21 + i).to_bytes(4, "little") for i in range(16)
)


def hostile(dn: bytes, attrs: Attrs) -> Attrs:
    dn_l = dn.lower()
    out: Attrs = []
    for name, values in attrs:
        if name.lower() == b"tokengroups" and dn_l.startswith(b"cn=alice"):
            values = [*values, SID16]
        if name.lower() == b"primarygroupid" and dn_l.startswith(b"cn=bob"):
            values = [b"4294967296"]
        out.append((name, values))
    return out


def groups_of(out: str) -> dict[int, str]:
    groups = out.strip().split("groups=", 1)[1].split(",")
    return {int(x.split("(")[0]): x.split("(", 1)[1].rstrip(")") for x in groups}


@requires_nss
def test_a_sid_of_16_sub_authorities_drops_that_value_not_the_lookup(
    tmp_path: Path, ad: tuple[addc.SambaDC, addir.ADDirectory]
) -> None:
    dc, data = ad
    opts: dict[str, Any] = {"ldap_schema": "ad", "ldap_default_bind_dn": dc.admin_dn,
            "ldap_default_authtok": dc.admin_pw}  # fmt: skip
    with (
        LdapRewriteProxy(hostile, unix_path=str(dc.socket_path)) as px,
        CachedDaemon(tmp_path / "d", [px.uri], dc.base_dn, **opts) as d,
    ):
        for round_ in range(3):  # a cold lookup, then the same again from scratch
            for login in ("alice", "bob"):
                uid, gid = data.passwd[login][:2]
                want = {data.groups[g][0]: g for g in data.initgroups[login]}
                r = d.run_nss(["id", login], env=SOCKET_ONLY)
                assert r.returncode == 0, (login, r.stderr, d.log_tail())
                assert r.stdout.startswith(f"uid={uid}({login}) gid={gid}(Domain Users) ")
                assert groups_of(r.stdout) == want, (login, r.stdout)
            assert d.cli("cache", "-E").returncode == 0, round_
        assert px.rewritten > 0
        log = d.log_text()
        assert "Traceback" not in log, d.log_tail()
        dropped = [line for line in log.splitlines() if "ignoring a" in line]
        # One line for the SID, one for the primaryGroupID: each kind once a minute.
        assert len(dropped) == 2, dropped
        assert any("not a SID: 0110" in line for line in dropped), dropped
        assert any("not a RID: b'4294967296'" in line for line in dropped), dropped
