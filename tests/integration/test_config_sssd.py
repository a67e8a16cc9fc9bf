"""sssd.conf settings that decide who exists, end to end through glibc and libnss_sss
(review of the configuration loading against SSSD 2.8.2): filter_users/filter_groups
in a domain section, and the deprecated ldap_user/group_search_filter."""

from __future__ import annotations

from testing.marks import requires_nss

pytestmark = requires_nss

SOCKET_ONLY = {"SSS_NSS_USE_MEMCACHE": "NO"}


def members(line: str) -> set[str]:
    return set(filter(None, line.strip().split(":")[3].split(",")))


def test_domain_filter_users_and_groups_hide_entries(daemon_factory, slapd_small):
    exp = slapd_small.expected
    direct = sorted(m for m in exp.members("large01", 0) if m != exp.big_user)
    gone, kept = direct[0], direct[1]
    hidden_group = sorted(g for g in exp.direct_groups(exp.big_user) if g != "large01")[0]
    d = daemon_factory(
        slapd_small, filter_users=f"{gone}, nobody@OTHER", filter_groups=hidden_group
    )
    r = d.run_nss(["getent", "passwd", gone], env=SOCKET_ONLY)
    assert (r.returncode, r.stdout) == (2, "")
    assert d.run_nss(["getent", "passwd", kept], env=SOCKET_ONLY).returncode == 0
    r = d.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    got = members(r.stdout)
    assert kept in got and gone not in got
    assert got == exp.members("large01", 2) - {gone}
    r = d.run_nss(["getent", "group", hidden_group], env=SOCKET_ONLY)
    assert r.returncode == 2
    r = d.run_nss(["id", "-G", exp.big_user], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    assert exp.group(hidden_group).gid not in {int(g) for g in r.stdout.split()}


def test_deprecated_search_filters_limit_who_exists(daemon_factory, slapd_small):
    exp = slapd_small.expected
    other = sorted(u for u in exp.user_names() if u != exp.big_user)[0]
    d = daemon_factory(
        slapd_small,
        ldap_user_search_filter=f"uid={exp.big_user}",
        ldap_group_search_filter="(|(cn=large01)(cn=users))",
    )
    r = d.run_nss(["getent", "passwd", exp.big_user], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    assert d.run_nss(["getent", "passwd", other], env=SOCKET_ONLY).returncode == 2
    r = d.run_nss(["getent", "group", "large01"], env=SOCKET_ONLY)
    assert r.returncode == 0, r.stderr
    assert members(r.stdout) <= {exp.big_user}
    hidden = sorted(g for g in exp.direct_groups(exp.big_user) if g != "large01")[0]
    assert d.run_nss(["getent", "group", hidden], env=SOCKET_ONLY).returncode == 2
