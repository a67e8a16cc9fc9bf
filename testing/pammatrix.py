"""The PAM matrix as data, and a runner that puts it through any PAM daemon.

A :class:`Case` is a named list of steps against one daemon started fresh for it: PAM
logins through the real ``pam_sss.so`` (:mod:`testing.pamdriver`, exact return codes and
conversation texts) as root (the private socket) or as uid 65534 (the public one); the
directory going down (slapd stopped), freezing (the fault proxy in front of it stops
forwarding) or coming back; the admin changing a password on the server; and moving a
cached credential's time stamps into the past, so that ``offline_credentials_expiration``
(days) and ``offline_failed_login_delay`` (minutes) can be tested without waiting.

Every case runs over each of its transports: ``ldaps`` (``ldaps://``), ``starttls``
(``ldap://`` with ``ldap_id_use_start_tls = true``) and ``plain`` (``ldap://`` without
TLS: only the case that shows a password refused there). The daemon always reaches slapd
through a :class:`testing.faultproxy.FaultProxy`, so a case can freeze the server.

The runner knows a daemon only through :class:`PamDaemonKind` / :class:`PamDaemon`:
:class:`SssdPam` (SSSD 2.8.2, :mod:`testing.sssd`) and :class:`CachedPam`
(:class:`testing.daemon.CachedDaemon`) satisfy them with the same sssd.conf options. A
daemon that cannot run a case raises :class:`Unsupported`; the case is then reported as
skipped with its reason (cached without a PAM responder: no ``pipes/pam`` after start).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cached.auth.offline import Credentials
from cached.cache import records as rec
from cached.cache.integrity import ENTRY_TABLES, cache_paths
from cached.cache.store import ENTRY_MAP_SIZE, Store
from testing import pamenv, sssd
from testing.daemon import CachedDaemon
from testing.faultproxy import FaultProxy
from testing.slapd import ACCESS_SCHEMA, PasswordPolicy, Slapd, TLSFiles, make_tls_material

BASE = "dc=pam,dc=test"
DOMAIN = "LDAP"
SERVICE = "cached-pam"
#: The users of the matrix directory and their passwords on the server.
PASSWORDS: dict[str, str] = {
    "alice": "Alice-pw-1",
    "bob": "Bob-pw-1",
    "carol": "Carol-pw-1",
}
#: What the access rules read on each user's entry (extensibleObject; testing's
#: access.schema): alice may log in by every rule; bob is refused by each (denied
#: group, locked, disabled, expired in 1970, no service, a password changed on day 1
#: that lasts 30 days); carol's AD account expired, and she has no shadowLastChange.
ACCESS_ATTRS: dict[str, dict[str, tuple[str, ...]]] = {
    "alice": {"employeeType": ("staff",), "authorizedService": ("cached-pam", "sshd"),
              "accountExpires": ("9223372036854775807",), "shadowLastChange": ("99999",),
              "shadowMax": ("30",)},
    "bob": {"nsAccountLock": ("TRUE",), "userAccountControl": ("514",),
            "shadowExpire": ("1",), "authorizedService": ("*", "!cached-pam"),
            "shadowLastChange": ("1",), "shadowMax": ("30",)},
    "carol": {"userAccountControl": ("512",), "accountExpires": ("116444736000000000",)},
}  # fmt: skip
#: Groups nested above alice (acc-l1 > acc-l2 > acc-l3 > alice) and bob's acc-deny.
ACCESS_GROUPS = (("acc-l3", 20013, "uid=alice"), ("acc-l2", 20012, "cn=acc-l3"),
                 ("acc-l1", 20011, "cn=acc-l2"), ("acc-deny", 20014, "uid=bob"))  # fmt: skip
NEW_PASSWORD = "Alice-pw-2"
WRONG = "not-the-password"
UNKNOWN_USER = "nosuchuser"
LOGIN = ("authenticate", "acct_mgmt", "open_session", "close_session")
TRANSPORTS = ("ldaps", "starttls", "plain")
#: Network timeouts in the daemon's configuration: the bounded wait a frozen server
#: costs is built from these (SSSD: connect, then the TLS handshake and bind operations).
#: 6 s, SSSD's default ldap_search_timeout: with 3 s, a search that two test workers
#: and a loaded machine held up past it took the domain offline before the user was
#: cached, and cached answered "user unknown" where SSSD, a moment later, answered.
NETWORK_TIMEOUT = 6
#: What a login may cost with the server frozen: the connect, the TLS handshake and one
#: operation each bounded by :data:`NETWORK_TIMEOUT`, and slack for a loaded machine.
FROZEN_BOUND = 3 * NETWORK_TIMEOUT + 10
#: SSSD's cache, in the daemon's work directory (varlib is /var/lib/sss in its namespace).
SSSD_CACHE_LDB = f"cache_{DOMAIN}.ldb"
LDBSEARCH = "/usr/bin/ldbsearch"
LDBMODIFY = "/usr/bin/ldbmodify"
# strftime %c in the C locale, as pam_sss prints dates ("Mon Dec  7 05:09:04 2026").
_DATE = re.compile(r"\b[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\b")


class Unsupported(Exception):
    """This daemon cannot run this case (or any): the case is skipped with the reason."""


# --------------------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    """One PAM transaction of ``ops`` (a name, or ``(name, flags)``) for ``user``;
    ``password`` answers the first prompt, ``answers`` the next ones (a password
    change's new password, twice). ``bound``: the seconds the login may take at most
    (a frozen server's bounded wait); the result says whether it kept to it."""

    user: str
    password: str
    ops: tuple[str | tuple[str, int], ...] = ("authenticate",)
    as_user: bool = False
    note: str = ""
    bound: float | None = None
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """The directory's password policy from now on (slapo-ppolicy's default policy
    entry), or none."""

    policy: PasswordPolicy | None


@dataclass(frozen=True)
class Directory:
    """The directory's state from now on: ``online``, ``stopped`` or ``frozen``."""

    state: str


@dataclass(frozen=True)
class AdminSetsPassword:
    """The admin replaces ``user``'s ``userPassword`` on the server."""

    user: str
    password: str


@dataclass(frozen=True)
class Age:
    """Move ``user``'s cached ``attribute`` (a time stamp: ``lastOnlineAuth``,
    ``lastCachedPasswordChange``, ``lastFailedLogin``) ``seconds`` into the past."""

    user: str
    attribute: str
    seconds: int


Step = Login | Directory | AdminSetsPassword | Age | Policy


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    steps: tuple[Step, ...]
    transports: tuple[str, ...] = ("ldaps", "starttls")
    domain: dict[str, Any] = field(default_factory=dict)
    pam: dict[str, Any] = field(default_factory=dict)


def _online_then(user: str, *steps: Step, password: str | None = None) -> tuple[Step, ...]:
    """Log ``user`` in once online (caching the credentials), stop the server, then
    ``steps``."""
    pw = password or PASSWORDS[user]
    return (Login(user, pw, note="online, caches the credentials"), Directory("stopped"), *steps)


ALICE = PASSWORDS["alice"]
#: pam_chauthtok's flag to change only an expired password (security/_pam_types.h).
CHANGE_EXPIRED_AUTHTOK = 0x20


def _passwd(old: str, new: str, *, again: str | None = None, as_user: bool = True,
            note: str = "") -> Login:  # fmt: skip
    """alice's ``passwd`` (uid 65534 is asked the old password; root is not)."""
    answers = (new, new if again is None else again)
    if as_user:
        return Login("alice", old, ("chauthtok",), as_user=True, answers=answers, note=note)
    return Login("alice", new, ("chauthtok",), answers=answers[1:], note=note)


def _binds(*passwords: str) -> tuple[Login, ...]:
    return tuple(Login("alice", pw, note="after the change") for pw in passwords)


def _account(user: str, note: str = "") -> Login:
    """acct_mgmt alone (a key-based ssh login's account check)."""
    return Login(user, "", ("acct_mgmt",), note=note)


def _expire(policy: str) -> dict[str, Any]:
    return {"access_provider": "ldap", "ldap_access_order": "expire",
            "ldap_account_expire_policy": policy}  # fmt: skip


_EXPIRED_MESSAGE = {"pam_verbosity": 2, "pam_account_expired_message": "Ask the help desk."}

CASES: tuple[Case, ...] = (
    Case("right", "right password, whole login, root (private socket)",
         (Login("alice", ALICE, LOGIN),)),
    Case("right-nobody", "right password, whole login, uid 65534 (public socket)",
         (Login("alice", ALICE, LOGIN, as_user=True),)),
    Case("wrong", "wrong password, root", (Login("alice", WRONG),)),
    Case("wrong-nobody", "wrong password, uid 65534", (Login("alice", WRONG, as_user=True),)),
    Case("empty", "empty password, root", (Login("alice", ""),)),
    Case("empty-nobody", "empty password, uid 65534", (Login("alice", "", as_user=True),)),
    Case("unknown", "unknown user, root", (Login(UNKNOWN_USER, WRONG, LOGIN),)),
    Case("unknown-nobody", "unknown user, uid 65534",
         (Login(UNKNOWN_USER, WRONG, LOGIN, as_user=True),)),
    Case("admin-changed", "the admin changes the password on the server",
         (Login("alice", ALICE, note="online, caches the credentials"),
          AdminSetsPassword("alice", NEW_PASSWORD),
          Login("alice", ALICE, note="the old password, online"),
          Login("alice", NEW_PASSWORD, note="the new password, online"))),
    Case("offline-right", "server stopped: right password against the cached hash",
         _online_then("alice", Login("alice", ALICE, LOGIN, note="offline"))),
    Case("offline-right-nobody", "server stopped: right password, uid 65534",
         _online_then("alice", Login("alice", ALICE, LOGIN, as_user=True, note="offline"))),
    Case("offline-verbose", "server stopped: right password, pam_verbosity = 2",
         _online_then("alice", Login("alice", ALICE, note="offline")),
         pam={"pam_verbosity": 2}),
    Case("offline-wrong", "server stopped: wrong password",
         _online_then("alice", Login("alice", WRONG, note="offline"))),
    Case("offline-no-hash", "server stopped: a cached user who never logged in",
         (Login("bob", "", ("acct_mgmt",), note="online, caches the user, no password"),
          Directory("stopped"),
          Login("bob", PASSWORDS["bob"], note="offline"))),
    Case("offline-unknown", "server stopped: a user never seen",
         (Directory("stopped"), Login(UNKNOWN_USER, WRONG, note="offline"))),
    Case("offline-expiry", "offline_credentials_expiration = 1: in time, then 2 days later",
         _online_then("alice",
                      Login("alice", ALICE, note="offline, within a day"),
                      Age("alice", "lastOnlineAuth", 2 * 86400),
                      Age("alice", "lastCachedPasswordChange", 2 * 86400),
                      Login("alice", ALICE, note="offline, 2 days after the last online login"),
                      ),
         pam={"offline_credentials_expiration": 1}),
    Case("offline-delay",
         "offline_failed_login_attempts = 2, offline_failed_login_delay = 1: the delay and "
         "its end",
         _online_then("alice",
                      Login("alice", WRONG, note="offline, 1st failure"),
                      Login("alice", WRONG, note="offline, 2nd failure"),
                      Login("alice", ALICE, note="offline, right password during the delay"),
                      Age("alice", "lastFailedLogin", 120),
                      Login("alice", ALICE, note="offline, 2 minutes later"),
                      ),
         pam={"offline_failed_login_attempts": 2, "offline_failed_login_delay": 1}),
    Case("frozen", "server frozen (fault proxy): the bounded wait, then cached credentials",
         (Login("alice", ALICE, note="online, caches the credentials"),
          Directory("frozen"),
          Login("alice", ALICE, note="frozen server", bound=FROZEN_BOUND),
          Login("alice", ALICE, note="frozen server, again", bound=FROZEN_BOUND))),
    Case("plain", "ldap:// to a server without TLS: the password is never sent",
         (Login("alice", ALICE, note="unencrypted connection"),),
         transports=("plain",)),
    # -- password changes (chpass_provider = ldap) and the server's password policy
    Case("passwd", "alice changes her password (exop): the new one works, the old not",
         (_passwd(ALICE, NEW_PASSWORD), *_binds(NEW_PASSWORD, ALICE)),
         transports=("ldaps",)),
    Case("passwd-ldap-modify", "the same with ldap_pwmodify_mode = ldap_modify",
         (_passwd(ALICE, NEW_PASSWORD), *_binds(NEW_PASSWORD, ALICE)),
         transports=("ldaps",), domain={"ldap_pwmodify_mode": "ldap_modify"}),
    Case("passwd-wrong-old", "passwd with a wrong old password",
         (_passwd(WRONG, NEW_PASSWORD), *_binds(ALICE)), transports=("ldaps",)),
    Case("passwd-empty-new", "passwd with an empty new password",
         (_passwd(ALICE, ""), *_binds(ALICE)), transports=("ldaps",)),
    Case("passwd-root", "root's passwd for alice: no old password asked",
         (_passwd("", NEW_PASSWORD, as_user=False), *_binds(ALICE)), transports=("ldaps",)),
    Case("passwd-offline", "server stopped, the daemon offline: passwd",
         _online_then("alice", Login("alice", ALICE, note="offline, cached credentials"),
                      _passwd(ALICE, NEW_PASSWORD, note="offline")),
         transports=("ldaps",)),
    Case("passwd-server-gone", "server stopped, the daemon not yet offline: passwd",
         _online_then("alice", _passwd(ALICE, NEW_PASSWORD, note="first request since")),
         transports=("ldaps",)),
    Case("passwd-quality", "slapd's quality check refuses a short password",
         (Policy(PasswordPolicy(max_age=0, must_change=False)), _passwd(ALICE, "Sh0rt"),
          *_binds(ALICE)), transports=("ldaps",)),
    Case("passwd-reset", "the admin resets the password: a change at the next login",
         # Half a day past whole days: the warning's day count does not depend on how
         # many seconds each daemon's login takes after the reset.
         (Policy(PasswordPolicy(max_age=30 * 86400 + 43200, must_change=True)),
          AdminSetsPassword("alice", ALICE),
          Login("alice", ALICE, ("authenticate", "acct_mgmt"), note="must change"),
          Login("alice", ALICE, ("authenticate", ("chauthtok", CHANGE_EXPIRED_AUTHTOK)),
                answers=(ALICE, NEW_PASSWORD, NEW_PASSWORD), note="changes it"),
          Login("alice", NEW_PASSWORD, ("authenticate", "acct_mgmt"), note="the new one")),
         transports=("ldaps",)),
    Case("expiry-warning", "the password expires in 30.5 days: warned at the login",
         (Policy(PasswordPolicy(max_age=30 * 86400 + 43200, must_change=False)),
          AdminSetsPassword("alice", ALICE),
          Login("alice", ALICE, ("authenticate", "acct_mgmt"))),
         transports=("ldaps",)),
    Case("lockout", "three wrong passwords lock the account (slapd's lockout)",
         (Policy(PasswordPolicy(must_change=False, lockout_duration=600)),
          Login("alice", WRONG), Login("alice", WRONG), Login("alice", WRONG),
          Login("alice", ALICE, note="locked")),
         transports=("ldaps",)),
    *(  # access_provider: who may log in (docs/compatibility.md §9.9)
        Case(f"access-{name}", title, steps, ("ldaps",), domain, pam)
        for name, title, steps, domain, pam in (
            ("deny", "access_provider = deny",
             (Login("alice", ALICE, LOGIN),), {"access_provider": "deny"}, {}),
            ("simple-nested", "simple: a group reached through three levels of nesting",
             (Login("alice", ALICE, LOGIN), _account("bob")),
             {"access_provider": "simple", "simple_allow_groups": "acc-l1",
              "ldap_group_nesting_level": 3}, {}),
            ("simple-deny", "simple: a denied group beats an allowed name",
             (_account("alice"), _account("bob"), _account("carol")),
             {"access_provider": "simple", "simple_allow_users": "alice, bob",
              "simple_deny_groups": "acc-deny, nosuchgroup"}, {}),
            ("filter", "ldap: a filter with & | ! and a wildcard",
             (Login("alice", ALICE, LOGIN), _account("bob"), _account("carol")),
             {"access_provider": "ldap",
              "ldap_access_filter": "(&(|(employeeType=st*)(uid=carol))(!(uid=bob)))"}, {}),
            ("no-filter", "ldap without ldap_access_filter: nobody",
             (Login("alice", ALICE, LOGIN),), {"access_provider": "ldap"}, {}),
            ("shadow", "expire, shadow: shadowExpire in the past (pam_verbosity = 2)",
             (_account("alice"), _account("bob")), _expire("shadow"), _EXPIRED_MESSAGE),
            ("rhds", "expire, rhds: nsAccountLock",
             (_account("alice"), _account("bob")), _expire("rhds"), {}),
            ("ad", "expire, ad: userAccountControl disabled, accountExpires past",
             (_account("alice"), _account("bob"), _account("carol")), _expire("ad"),
             _EXPIRED_MESSAGE),
            ("pwd-reject", "pwd_expire_policy_reject, shadow: expired, current, missing",
             (_account("alice"), _account("bob"), _account("carol")),
             {"access_provider": "ldap", "ldap_pwd_policy": "shadow",
              "ldap_access_order": "pwd_expire_policy_reject"}, {}),
            ("pwd-renew", "pwd_expire_policy_renew, shadow: a new password asked",
             (_account("alice"), _account("bob")),
             {"access_provider": "ldap", "ldap_pwd_policy": "shadow",
              "ldap_access_order": "pwd_expire_policy_renew"}, {}),
            ("service", "authorized_service: listed, !denied, missing",
             (_account("alice"), _account("bob"), _account("carol")),
             {"access_provider": "ldap", "ldap_access_order": "authorized_service"}, {}),
            ("offline", "server stopped: the last online decision stands",
             (Login("alice", ALICE, LOGIN, note="online"), _account("bob", "online"),
              Directory("stopped"),
              Login("alice", ALICE, LOGIN, note="offline"), _account("bob", "offline")),
             {"access_provider": "ldap", "ldap_access_filter": "(employeeType=staff)"}, {}),
        )
    ),
)  # fmt: skip


def cases(names: Sequence[str] | None = None) -> list[Case]:
    if not names:
        return list(CASES)
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise KeyError(f"unknown PAM cases {unknown}; known: {sorted(by_name)}")
    return [by_name[n] for n in names]


# --------------------------------------------------------------------------------------
# The directory: slapd with TLS, behind one fault proxy per listener
# --------------------------------------------------------------------------------------


def ldif() -> str:
    out = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: pam\no: pam\n",
        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for n, (user, pw) in enumerate(PASSWORDS.items()):
        uid = 20001 + n
        extra = "".join(f"{a}: {v}\n" for a, vs in ACCESS_ATTRS.get(user, {}).items() for v in vs)
        out.append(
            f"dn: uid={user},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nobjectClass: extensibleObject\n"
            f"uid: {user}\ncn: {user}\nsn: {user}\n"
            f"uidNumber: {uid}\ngidNumber: 20000\nhomeDirectory: /home/{user}\n"
            f"loginShell: /bin/sh\nuserPassword: {pw}\n{extra}"
        )
    for name, gid, member in ACCESS_GROUPS:
        where = "people" if member.startswith("uid=") else "groups"
        out.append(
            f"dn: cn={name},ou=groups,{BASE}\nobjectClass: groupOfNames\n"
            f"objectClass: posixGroup\ncn: {name}\ngidNumber: {gid}\n"
            f"member: {member},ou={where},{BASE}\n"
        )
    members = "".join(f"member: uid={u},ou=people,{BASE}\n" for u in PASSWORDS)
    out.append(
        f"dn: cn=pamusers,ou=groups,{BASE}\nobjectClass: groupOfNames\n"
        f"objectClass: posixGroup\ncn: pamusers\ngidNumber: 20000\n{members}"
    )
    return "\n".join(out)


class MatrixDirectory:
    """slapd with TLS (ldap:// with StartTLS, and ldaps://) behind a fault proxy per
    listener, and a slapd without TLS for the ``plain`` transport (started when first
    used): SSSD's authentication connection runs StartTLS on an ``ldap://`` URI even with
    ``ldap_id_use_start_tls = false``, so only a server that cannot do TLS shows the
    refusal of an unencrypted connection."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tls: TLSFiles = make_tls_material(self.workdir / "tls", "localhost")
        ldif_path = self.workdir / "pam.ldif"
        ldif_path.write_text(ldif())
        # The password policy overlay (a policy entry only while a case puts one in
        # force) and Debian's access rules, under which users change their passwords.
        self.slapd = Slapd(self.workdir / "slapd", ldif_path, BASE, tls=self.tls,
                           ppolicy=True, self_write=True, schemas=(ACCESS_SCHEMA,))  # fmt: skip
        self.plain_slapd = Slapd(self.workdir / "slapd-plain", ldif_path, BASE,
                                 schemas=(ACCESS_SCHEMA,))  # fmt: skip
        self.policy: PasswordPolicy | None = None
        self.servers: list[Slapd] = []
        self.proxies: dict[str, FaultProxy] = {}
        self.state = "online"

    def start(self) -> None:
        self.slapd.start()
        self.servers = [self.slapd]
        plain, ldaps = self.slapd.port, int(self.slapd.ldaps_uri.rsplit(":", 1)[1])
        self.proxies = {
            "ldap": FaultProxy("127.0.0.1", plain).start(),
            "ldaps": FaultProxy("127.0.0.1", ldaps).start(),
        }

    def _start_plain(self) -> None:
        if "plain" not in self.proxies:
            self.plain_slapd.start()
            self.servers.append(self.plain_slapd)
            self.proxies["plain"] = FaultProxy("127.0.0.1", self.plain_slapd.port).start()

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        for server in self.servers:
            server.stop()

    def __enter__(self) -> MatrixDirectory:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def uri(self, transport: str) -> str:
        if transport == "ldaps":
            return f"ldaps://127.0.0.1:{self.proxies['ldaps'].port}"
        if transport == "plain":
            self._start_plain()
            return f"ldap://127.0.0.1:{self.proxies['plain'].port}"
        return f"ldap://127.0.0.1:{self.proxies['ldap'].port}"

    def options(self, transport: str) -> dict[str, Any]:
        """The sssd.conf domain options of a transport (both daemons read them)."""
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; known: {TRANSPORTS}")
        return {
            "ldap_uri": self.uri(transport),
            "ldap_tls_cacert": self.tls.ca_cert,
            "ldap_tls_reqcert": "demand",
            "ldap_id_use_start_tls": "true" if transport == "starttls" else "false",
        }

    def set_state(self, state: str) -> None:
        if state == self.state:
            return
        # Back to online first, then into the new state.
        if self.state == "stopped":
            for server in self.servers:
                server.start()
        elif self.state == "frozen":
            for proxy in self.proxies.values():
                proxy.heal()
        if state == "stopped":
            for proxy in self.proxies.values():
                proxy.drop_all()
            for server in self.servers:
                server.stop()
        elif state == "frozen":
            for proxy in self.proxies.values():
                proxy.set(stall=True)
        elif state != "online":
            raise ValueError(f"unknown directory state {state!r}")
        self.state = state

    def set_password(self, user: str, password: str) -> None:
        if self.state == "stopped":
            raise RuntimeError("the directory is stopped: cannot change a password")
        for server in self.servers:
            server.ldap_modify(
                f"dn: uid={user},ou=people,{BASE}\nchangetype: modify\n"
                f"replace: userPassword\nuserPassword: {password}\n"
            )

    def set_policy(self, policy: PasswordPolicy | None) -> None:
        """Put ``policy`` in force on the TLS server, or (None) remove the one there."""
        if policy is None:
            if self.policy is not None:
                self.slapd.ldap_modify(
                    f"dn: cn=default,ou=policies,{BASE}\nchangetype: delete\n\n"
                    f"dn: ou=policies,{BASE}\nchangetype: delete\n"
                )
        else:
            self.slapd.set_policy(policy, replace=self.policy is not None)
        self.policy = policy

    def reset(self) -> None:
        """Online, no password policy, every password as :data:`PASSWORDS` has it
        (set by the administrator: the policy's failure counts, lock and reset flag
        go with the old password)."""
        self.set_state("online")
        # The passwords first, while the policy is in force: the policy overlay then
        # clears its failure times and lock with the old password.
        for user, pw in PASSWORDS.items():
            self.set_password(user, pw)
        self.set_policy(None)
        for server in self.servers:
            for user in PASSWORDS:
                with contextlib.suppress(Exception):
                    server.ldap_modify(f"dn: uid={user},ou=people,{BASE}\nchangetype: modify\n"
                                       "delete: pwdReset\n")  # fmt: skip


# --------------------------------------------------------------------------------------
# The daemons
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PamConfig:
    """What both daemons are configured with: sssd.conf domain and ``[pam]`` options."""

    base: str
    domain: dict[str, Any]
    pam: dict[str, Any]


class PamDaemon(Protocol):
    """A running PAM server for one case: its pipes directory holds ``pam`` (0666) and
    ``private/pam`` (0600)."""

    pipes_dir: Path
    mc_dir: Path

    def start(self) -> None: ...

    def stop(self) -> object: ...

    def age(self, user: str, attribute: str, seconds: int) -> None:
        """Move a cached credential time stamp ``seconds`` into the past."""
        ...

    def log_tail(self, lines: int = 40) -> str: ...


class PamDaemonKind(Protocol):
    name: str
    title: str

    def skip_reason(self) -> str | None: ...

    def make(self, workdir: Path, config: PamConfig) -> PamDaemon: ...


def base_domain_options() -> dict[str, Any]:
    """The domain options of every case: LDAP identity and authentication, cached
    credentials, and network timeouts that bound what a frozen server costs."""
    return {
        "id_provider": "ldap",
        "auth_provider": "ldap",
        "chpass_provider": "ldap",
        "access_provider": "permit",
        "ldap_schema": "rfc2307bis",
        "cache_credentials": "true",
        "ldap_network_timeout": NETWORK_TIMEOUT,
        "ldap_opt_timeout": NETWORK_TIMEOUT,
        "ldap_search_timeout": NETWORK_TIMEOUT,
    }


class SssdPamDaemon(sssd.SssdDaemon):
    """SSSD with its PAM responder; ages credentials by editing its cache with ldb-tools
    (``ldbmodify`` on ``cache_<domain>.ldb``; ldb's tdb locking makes that safe while
    SSSD runs, and SSSD reads the entry from the file at every authentication)."""

    def age(self, user: str, attribute: str, seconds: int) -> None:
        db = self.db_dir / SSSD_CACHE_LDB
        found = subprocess.run(
            [LDBSEARCH, "-H", str(db), f"(&(objectCategory=user)(name={user}@{DOMAIN.lower()}))",
             "dn", attribute],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        dn = re.search(r"^dn: (.*)$", found.stdout, re.M)
        value = re.search(rf"^{attribute}: (\d+)$", found.stdout, re.M)
        if found.returncode != 0 or dn is None or value is None:
            raise RuntimeError(
                f"{user}'s {attribute} is not in SSSD's cache {db}:\n{found.stdout}{found.stderr}"
            )
        new = int(value.group(1)) - seconds
        change = (
            f"dn: {dn.group(1)}\nchangetype: modify\nreplace: {attribute}\n{attribute}: {new}\n"
        )
        done = subprocess.run(
            [LDBMODIFY, "-H", str(db)], input=change, capture_output=True, text=True,
            check=False, timeout=60,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"ldbmodify of {db} failed: {done.stdout}{done.stderr}")


class SssdPam:
    name = "sssd"
    title = "SSSD"

    def skip_reason(self) -> str | None:
        reason = sssd.skip_reason()
        if reason is None and not Path(LDBMODIFY).exists():
            reason = f"{LDBMODIFY} is missing: install ldb-tools (ages SSSD's cached credentials)"
        return reason

    def make(self, workdir: Path, config: PamConfig) -> PamDaemon:
        domain = {k: v for k, v in config.domain.items() if k != "ldap_uri"}
        return SssdPamDaemon(workdir, config.domain["ldap_uri"], config.base, pam=config.pam,
                             **domain)  # fmt: skip


class CachedPamDaemon(CachedDaemon):
    """cached with ``services = nss, pam`` and the same domain and ``[pam]`` options.

    Raises :class:`Unsupported` when cached refuses that configuration or starts without
    the PAM sockets. Aging credentials rewrites the times of the user's record in the
    entry store's ``creds`` table (:func:`rewrite_credentials`), as SSSD's are aged in
    its ldb cache.
    """

    def __init__(self, workdir: Path, config: PamConfig) -> None:
        domain = {k: v for k, v in config.domain.items() if k != "ldap_uri"}
        super().__init__(
            workdir, [config.domain["ldap_uri"]], config.base,
            daemon={"services": "nss, pam"}, **domain,
        )  # fmt: skip
        pam = "".join(f"{k} = {v}\n" for k, v in config.pam.items())
        with open(self.config_path, "a") as f:
            f.write(f"[pam]\n{pam}")

    def start(self) -> None:
        try:
            super().start()
        except RuntimeError as e:
            raise Unsupported(f"cached refused `services = nss, pam`: {_last_line(str(e))}") from e
        if not (self.pipes_dir / "pam").exists() or not (self.pipes_dir / "private/pam").exists():
            self.stop()
            raise Unsupported("cached has no PAM responder: no pipes/pam socket after start")

    def age(self, user: str, attribute: str, seconds: int) -> None:
        field = CACHED_CREDENTIAL_TIMES.get(attribute)
        if field is None:
            raise Unsupported(f"cached keeps no time like SSSD's {attribute}")

        def older(c: Credentials) -> Credentials:
            return dataclasses.replace(c, **{field: getattr(c, field) - seconds})

        rewrite_credentials(self.db_dir, DOMAIN, user, older)


# SSSD's cached-credential time stamps (sysdb attributes) and the field of cached's
# record that plays each part: the expiry of cached credentials counts from the last
# online login in both (SSSD from lastCachedPasswordChange, set by that login).
CACHED_CREDENTIAL_TIMES = {
    "lastOnlineAuth": "last_online",
    "lastCachedPasswordChange": "last_online",
    "lastFailedLogin": "last_failed",
}


def rewrite_credentials(
    db_dir: Path, domain: str, user: str, change: Callable[[Credentials], Credentials]
) -> Credentials:
    """Rewrite ``user``'s credentials record in a running daemon's entry store (LMDB
    serialises this writer with the backend's), as ``change`` makes it; returns the
    record as it was."""
    entry_path, _ = cache_paths(str(db_dir), domain)
    store = Store(entry_path, ENTRY_TABLES, writer=True, sync=True, map_size=ENTRY_MAP_SIZE)
    try:
        with store.read() as txn:
            data = txn.get(user.encode(), db=store.tables["creds"])
            if data is None:
                raise RuntimeError(f"no credentials record for {user} in {entry_path}")
            old = rec.decode_creds(bytes(data))
        store.write([("creds", user.encode(), rec.encode_creds(change(old)))])
        return old
    finally:
        store.close()


class CachedPam:
    name = "cached"
    title = "cached"

    def skip_reason(self) -> str | None:
        return None

    def make(self, workdir: Path, config: PamConfig) -> PamDaemon:
        return CachedPamDaemon(workdir, config)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else text


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """A conversation text with its dates (``%c``) replaced, so runs compare."""
    return _DATE.sub("<date>", text)


@dataclass
class StepResult:
    """A login's calls as ``[op, rc, [messages]]`` (messages normalized) and its time."""

    label: str
    calls: list[tuple[str, int, list[str]]]
    seconds: float
    bound: float | None = None

    @property
    def over_bound(self) -> bool:
        return self.bound is not None and self.seconds > self.bound

    def key(self) -> list[Any]:
        return [[op, rc, msgs] for op, rc, msgs in self.calls]


@dataclass
class CaseResult:
    case: str
    transport: str
    daemon: str
    steps: list[StepResult] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None

    def key(self) -> Any:
        if self.skipped is not None or self.error is not None:
            return None
        return [s.key() for s in self.steps]


def describe(step: Step) -> str:
    match step:
        case Login():
            who = "uid 65534" if step.as_user else "root"
            pw = ("right" if step.password in (ALICE, NEW_PASSWORD, *PASSWORDS.values())
                  else "empty" if step.password == "" else "wrong")  # fmt: skip
            ops = " ".join(op if isinstance(op, str) else f"{op[0]}({op[1]:#x})"
                           for op in step.ops)  # fmt: skip
            return f"{step.user} ({who}, {pw} password): {ops}" + (
                f" — {step.note}" if step.note else ""
            )
        case Directory():
            return f"directory {step.state}"
        case AdminSetsPassword():
            return f"admin sets {step.user}'s password"
        case Age():
            return f"{step.user}'s {step.attribute} moved {step.seconds} s back"
        case Policy():
            return "no password policy" if step.policy is None else f"password policy {step.policy}"
    raise TypeError(step)


@contextlib.contextmanager
def _running(daemon: PamDaemon) -> Iterator[PamDaemon]:
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def run_case(
    kind: PamDaemonKind,
    directory: MatrixDirectory,
    case: Case,
    transport: str,
    workdir: Path,
) -> CaseResult:
    """One case over one transport through a daemon of ``kind`` started fresh for it."""
    result = CaseResult(case.name, transport, kind.name)
    config = PamConfig(
        BASE, {**base_domain_options(), **directory.options(transport), **case.domain},
        dict(case.pam),
    )  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    pamd = pamenv.make_pamd(workdir / "pam.d", {SERVICE: pamenv.service_file()})
    directory.reset()
    # "d": the daemon's sockets (<workdir>/d/pipes/private/be_LDAP) must fit in sun_path
    # (108 bytes, unix(7)) under a test's tmp_path on an xdist worker.
    daemon = kind.make(workdir / "d", config)
    try:
        with _running(daemon):
            env = pamenv.PamEnv(daemon.pipes_dir, pamd, daemon.mc_dir)
            for step in case.steps:
                match step:
                    case Login():
                        start = time.monotonic()
                        got = env.drive(SERVICE, step.user, step.ops,
                                        answers=[step.password, *step.answers],
                                        as_user=step.as_user)  # fmt: skip
                        result.steps.append(StepResult(
                            describe(step),
                            [(c.op, c.rc, [normalize(t) for t in c.infos]) for c in got.calls],
                            time.monotonic() - start,
                            step.bound,
                        ))  # fmt: skip
                    case Directory():
                        directory.set_state(step.state)
                    case AdminSetsPassword():
                        directory.set_password(step.user, step.password)
                    case Age():
                        daemon.age(step.user, step.attribute, step.seconds)
                    case Policy():
                        directory.set_policy(step.policy)
    except Unsupported as e:
        result.skipped = str(e)
    except Exception as e:  # reported per case; the matrix goes on
        result.error = f"{type(e).__name__}: {e}\n{daemon.log_tail(20)}"
    finally:
        directory.reset()
    return result


def run_matrix(
    kind: PamDaemonKind,
    directory: MatrixDirectory,
    workdir: Path,
    selected: Sequence[Case] = CASES,
    transports: Sequence[str] = TRANSPORTS,
) -> list[CaseResult]:
    """Every case over each of its transports (those in ``transports``). When the daemon
    cannot run PAM at all (its first case says :class:`Unsupported` at start), the rest
    are marked skipped with the same reason, without starting it again."""
    out: list[CaseResult] = []
    whole: str | None = kind.skip_reason()
    for case in selected:
        for transport in case.transports:
            if transport not in transports:
                continue
            if whole is not None:
                out.append(CaseResult(case.name, transport, kind.name, skipped=whole))
                continue
            r = run_case(kind, directory, case, transport,
                         workdir / kind.name / f"{case.name}-{transport}")  # fmt: skip
            if r.skipped is not None and not r.steps:
                whole = r.skipped
            out.append(r)
    return out
