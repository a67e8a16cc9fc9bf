"""The Samba AD DC fixture serves the small AD directory as its expected answers say.

The directory (testing/addir.py) and the DC (testing/addc.py) are what ``ldap_schema = ad``
will be tested against; this checks them with the server's own answers: tokenGroups
(the DC's transitive closure) for each user equals the expected initgroups, the
primary group comes from primaryGroupID, non-POSIX users and groups are there without
ids, and the large group holds every member.
"""

from __future__ import annotations

from typing import Any

import ldap3

from testing import addc, addir


def _sid(raw: bytes) -> str:
    """objectSid (binary, [MS-DTYP] 2.4.2) as S-1-..."""
    rev, count = raw[0], raw[1]
    auth = int.from_bytes(raw[2:8], "big")
    subs = [int.from_bytes(raw[8 + 4 * i : 12 + 4 * i], "little") for i in range(count)]
    return "S-" + "-".join(str(x) for x in (rev, auth, *subs))


def test_token_groups_equal_the_expected_initgroups(
    ad: tuple[addc.SambaDC, addir.ADDirectory],
) -> None:
    dc, data = ad
    groups = dc.search(
        dc.base_dn, "(objectClass=group)", ["sAMAccountName", "objectSid", "gidNumber"]
    )
    by_sid = {
        _sid(g["raw_attributes"]["objectSid"][0]): g["raw_attributes"]["sAMAccountName"][0].decode()
        for g in groups
        if g["raw_attributes"].get("gidNumber")
    }
    # One connection for the two searches of each of the ~1,600 users: a connection
    # and a bind apiece took most of the test's time.
    conn = dc.connect()

    def search(base: str, filt: str, attrs: list[str], scope: str = ldap3.SUBTREE
               ) -> list[dict[str, Any]]:  # fmt: skip
        conn.search(base, filt, scope, attributes=attrs)
        return [r for r in conn.response or [] if r.get("type") == "searchResEntry"]

    try:
        for login, want in data.initgroups.items():
            (user,) = search(
                addir.PEOPLE, f"(sAMAccountName={login})", ["objectSid", "primaryGroupID"]
            )
            (tok,) = search(user["dn"], "(objectClass=*)", ["tokenGroups"], scope=ldap3.BASE)
            sids = [_sid(v) for v in tok["raw_attributes"]["tokenGroups"]]
            # The domain's groups, plus BUILTIN ones (S-1-5-32-545 Users, through Domain
            # Users): the AD schema must skip those, as SSSD does (they have no ids).
            assert all(s.startswith((dc.domain_sid + "-", "S-1-5-32-")) for s in sids), sids
            assert any(s.startswith("S-1-5-32-") for s in sids)
            assert sorted(by_sid[s] for s in sids if s in by_sid) == want, login
            assert user["raw_attributes"]["primaryGroupID"] == [b"513"]
            assert _sid(user["raw_attributes"]["objectSid"][0]).startswith(dc.domain_sid + "-")
    finally:
        conn.unbind()


def test_posix_attributes_and_members_as_loaded(ad: tuple[addc.SambaDC, addir.ADDirectory]) -> None:
    dc, data = ad
    users = dc.search(addir.PEOPLE, "(objectClass=user)", ["sAMAccountName", "uidNumber"])
    posix = {
        u["raw_attributes"]["sAMAccountName"][0].decode(): int(u["raw_attributes"]["uidNumber"][0])
        for u in users
        if u["raw_attributes"].get("uidNumber")
    }
    assert posix == {login: v[0] for login, v in data.passwd.items()}
    names = {u["raw_attributes"]["sAMAccountName"][0].decode() for u in users}
    assert set(data.non_posix_users) <= names - set(posix)
    (big,) = dc.search(f"CN=big,{addir.GROUPS}", "(objectClass=*)", ["member"], scope=ldap3.BASE)
    assert len(big["raw_attributes"]["member"]) == len(data.groups["big"][1]) > addir.MAX_VAL_RANGE
    (du,) = dc.search(addir.DOMAIN_USERS, "(objectClass=*)", ["gidNumber"], scope=ldap3.BASE)
    assert du["raw_attributes"]["gidNumber"] == [str(addir.DOMAIN_USERS_GID).encode()]
