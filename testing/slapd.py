"""A throwaway real slapd for tests, in the style of python-ldap's ``slapdtest``.

:class:`Slapd` writes a ``slapd.conf`` into its work directory, checks it with
``slapd -Ttest``, loads an LDIF with ``slapadd -q``, and runs slapd in the foreground
as our child on free loopback ports (plus an ``ldapi://`` socket in the work directory
and ``ldaps://`` when TLS material is given).  Readiness is a real LDAP call (a root
DSE read), never a sleep.

Stats logging, and why it is not ``logfile``: in slapd 2.5 the ``logfile`` directive
only copies *debug* (``-d``) output, so with ``-d 0`` it stays empty while ``loglevel
stats`` goes to syslog only; and slapd truncates it at every start, which would break
log offsets across :meth:`Slapd.restart`.  So slapd runs with ``-d stats`` (which also
keeps it in the foreground) and its stderr is appended to ``slapd.log`` by us: one
append-only file for the server's whole life, every stats line flushed as written
(slapd fflush()es each debug line).

Counting: :meth:`Slapd.count_searches` counts search *operations* (each page of a paged
search is one), :meth:`Slapd.count_logical_searches` counts what a client counts (the
pages of one search once).  slapd cuts log messages at ~4 KiB and glues the next message
to a cut one; the parser splits them again (long OR filters hit this).

Everything lives in the work directory; an ``atexit`` hook stops any server still running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import ldap3
from ldap3.core.exceptions import LDAPException

from testing import procstat
from testing.gendir import Expected
from testing.service import Service

SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
LDAPMODIFY = "/usr/bin/ldapmodify"
OPENSSL = "openssl"
MODULE_PATH = "/usr/lib/ldap"
SCHEMA_DIR = Path("/etc/ldap/schema")
CONTRIB_SCHEMA = Path(__file__).resolve().parent.parent / "contrib" / "rfc2307bis.schema"
# sshPublicKey and ldapPublicKey (ldap_user_ssh_public_key's default).
LPK_SCHEMA = CONTRIB_SCHEMA.with_name("openssh-lpk.schema")
# sudoers.ldap(5)'s sudoRole: every test server can hold sudo rules.
SUDO_SCHEMA = Path(__file__).resolve().parent.parent / "contrib" / "sudo.schema"
# Order matters: each file depends on the ones before it.  namedobject gives groups
# without `member` a structural class (posixGroup is auxiliary in our schema).
SCHEMAS = (
    SCHEMA_DIR / "core.schema",
    SCHEMA_DIR / "cosine.schema",
    SCHEMA_DIR / "inetorgperson.schema",
    SCHEMA_DIR / "namedobject.schema",
    CONTRIB_SCHEMA,
    LPK_SCHEMA,
    SUDO_SCHEMA,
)
# The account attributes of other servers that SSSD's access rules read (testing/).
ACCESS_SCHEMA = Path(__file__).resolve().parent / "access.schema"
# groupOfURLs and memberURL, for dynamic groups (slapo-dynlist(5)'s example includes it).
DYNGROUP_SCHEMA = SCHEMA_DIR / "dyngroup.schema"
# The dynamic group of slapo-dynlist(5): a groupOfURLs entry's memberURL values are
# searched and the DNs found listed as its `member` values, computed at every read.
DYNLIST_ATTRSET = "dynlist-attrset groupOfURLs memberURL member"
DEREF_CONTROL = "1.3.6.1.4.1.4203.666.5.16"  # OpenLDAP deref control, reference §6.2
PAGED_RESULTS_CONTROL = "1.2.840.113556.1.4.319"  # RFC 2696
# SSSD's ldap_page_size default (reference §6.1): the page size logical_searches()
# assumes unless told otherwise.
DEFAULT_PAGE_SIZE = 1000

# A start-up usually answers within ~50 ms; the margin is for a loaded CI machine.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# Only a guard against a paused server: the kill soak's set-up (10,000 entries in one
# ldapmodify) took over 30 s beside two fuzzers running Samba and SSSD (2026-12-02).
MODIFY_TIMEOUT = 180.0
# How long count_searches() waits for the result lines of searches already logged.
# slapd logs "SEARCH RESULT" after sending the result, so a client can be a few
# microseconds ahead of the log; anything longer means a search never finished.
SETTLE_TIMEOUT = 5.0
# sun_path is 108 bytes on Linux (unix(7)); longer paths cannot be bound.
MAX_SOCKET_PATH = 107

# The readiness probe uses a filter of its own so that count_searches() can leave the
# probe's search out: tests count the searches *they* cause, and restart() probes.
PROBE_FILTER = "(|(objectClass=*)(cn=tests-slapd-readiness-probe))"

# Every log message starts with "<hex seconds>.<hex fraction> <thread id> ".  slapd
# cuts a message at ~4 KiB *and drops its newline*, so the next message is glued to
# the cut one (seen with filters ORing a few hundred member DNs): messages are split
# at this prefix, wherever it is in a line.
_PREFIX = re.compile(r"[0-9a-f]{8,}\.[0-9a-f]{8} 0x[0-9a-f]+ ")
# The prefix's time: seconds and nanoseconds (OpenLDAP's debug output), in hex.
_STAMP = re.compile(r"([0-9a-f]{8,})\.([0-9a-f]{8}) 0x[0-9a-f]+ ")
# The stats messages of a search, after that prefix.  The filter of a cut SRCH
# message has no closing quote.
_SRCH = re.compile(r'conn=(\d+) op=(\d+) SRCH base="(.*?)" scope=(\d+) deref=\d+ filter="(.*)$')
_RESULT = re.compile(r"conn=(\d+) op=(\d+) SEARCH RESULT tag=\d+ err=(\d+) .*nentries=(\d+)")
_ATTRS = re.compile(r"conn=(\d+) op=(\d+) SRCH attr=(.*)$")
_STARTING = "slapd starting"


@dataclass(frozen=True)
class PasswordPolicy:
    """A slapo-ppolicy(5) policy entry (pwdPolicy, ``cn=default,ou=policies,<base>``,
    the overlay's default): every attribute a test of logins and password changes
    needs, in seconds where it is a time. The defaults give a warning of expiry at
    every login (the password expires in 30 days, the warning starts 60 days
    before), two grace logins, a lockout after 3 failures for 5 s, a change forced
    after an administrator's reset (pwdMustChange + the user's pwdReset), and a
    quality check of at least 8 characters (pwdCheckQuality 2: a password the
    server cannot check is refused too)."""

    max_age: int = 30 * 86400
    expire_warning: int = 60 * 86400
    grace_logins: int = 2
    lockout: bool = True
    max_failure: int = 3
    lockout_duration: int = 5
    must_change: bool = True
    check_quality: int = 2
    min_length: int = 8

    def ldif(self, base: str, *, changetype: str = "add") -> str:
        """The policy entry as an LDIF record (``add``, or ``modify``: replace every
        attribute), with its parent ``ou=policies`` when added."""

        def b(flag: bool) -> str:
            return "TRUE" if flag else "FALSE"

        attrs = {
            "pwdAttribute": "userPassword",
            "pwdMaxAge": str(self.max_age),
            "pwdExpireWarning": str(self.expire_warning),
            "pwdGraceAuthnLimit": str(self.grace_logins),
            "pwdLockout": b(self.lockout),
            "pwdMaxFailure": str(self.max_failure),
            "pwdLockoutDuration": str(self.lockout_duration),
            "pwdMustChange": b(self.must_change),
            "pwdAllowUserChange": "TRUE",
            "pwdCheckQuality": str(self.check_quality),
            "pwdMinLength": str(self.min_length),
        }
        dn = f"cn=default,ou=policies,{base}"
        if changetype == "modify":
            body = "-\n".join(f"replace: {k}\n{k}: {v}\n" for k, v in attrs.items())
            return f"dn: {dn}\nchangetype: modify\n{body}"
        values = "".join(f"{k}: {v}\n" for k, v in attrs.items())
        return (
            f"dn: ou=policies,{base}\nobjectClass: organizationalUnit\nou: policies\n\n"
            f"dn: {dn}\nobjectClass: device\nobjectClass: pwdPolicy\ncn: default\n{values}"
        )


class SlapdError(RuntimeError):
    """slapd, slapadd or ldapmodify failed; the message carries their output."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for ldaps: a CA certificate, and a server certificate and key it signed."""

    ca_cert: Path
    cert: Path
    key: Path


def make_tls_material(directory: Path, hostname: str = "localhost") -> TLSFiles:
    """Create a throwaway CA and a server certificate for ``hostname`` and 127.0.0.1.

    EC P-256 keys: generated in milliseconds, where RSA 2048 takes a noticeable part of a
    second.  Valid for two days; tests never outlive that.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "server.ext"
    ext.write_text(
        f"subjectAltName = DNS:{hostname}, IP:127.0.0.1\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = serverAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _run(
        [OPENSSL, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_cert, "-days", "2",
         "-subj", "/CN=cached test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    )  # fmt: skip
    _run([OPENSSL, "req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN={hostname}"])
    _run(
        [OPENSSL, "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
         "-set_serial", "2", "-days", "2", "-extfile", ext, "-out", cert],
    )  # fmt: skip
    return TLSFiles(ca_cert=ca_cert, cert=cert, key=key)


@dataclass(frozen=True)
class SearchOp:
    """One search operation as slapd's stats log shows it."""

    conn: int
    op: int
    base: str
    scope: int  # 0 base, 1 one level, 2 subtree
    filter: str
    # slapd cuts log messages at ~4 KiB: a longer filter is logged (and kept here) only
    # in part.
    filter_cut: bool = False
    attrs: tuple[str, ...] = ()  # as requested; () = all user attributes
    err: int | None = None  # None: no result line (yet)
    nentries: int | None = None
    run: int = 0  # restarts of slapd between the offset and this search
    at: float = 0.0  # when slapd logged the request (epoch seconds, its own clock)

    @property
    def shape(self) -> tuple[str, int, str, tuple[str, ...]]:
        """What the pages of one paged search have in common."""
        return (self.base, self.scope, self.filter, self.attrs)


class Slapd(Service):
    """A slapd serving one LDIF, as a context manager or with start()/stop().

    The first :meth:`start` writes the config, checks it and loads the LDIF; later starts
    (:meth:`restart`) reuse the same database and the same ports.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        ldif: str | os.PathLike[str],
        base_dn: str,
        *,
        tls: TLSFiles | None = None,
        root_pw: str = "secret",
        sizelimit: int | None = None,
        deref: bool = True,
        dynlist: bool = False,
        ppolicy: bool = False,
        self_write: bool = False,
        schemas: tuple[Path, ...] = (),
    ) -> None:
        """``sizelimit``: a server-wide size limit as Debian's default slapd.conf sets
        it (``sizelimit 500``), applied to every client but the rootdn, paged
        searches included (slapd-limits(5): size.prtotal follows the hard limit);
        None: unlimited.  ``deref=False`` leaves out the deref overlay, as Debian's
        default configuration does.  ``dynlist=True`` loads the dyngroup schema and
        the dynlist overlay (:data:`DYNLIST_ATTRSET`): groups whose members the server
        computes.  ``ppolicy=True`` loads the password policy overlay
        (slapo-ppolicy(5)) with ``cn=default,ou=policies,<base>`` as the default policy
        (add it with :meth:`set_policy`, or :meth:`ldap_modify`, to put a policy in
        force), ``ppolicy_hash_cleartext`` (a userPassword a user replaces in clear,
        ldap_pwmodify_mode = ldap_modify, is stored hashed) and
        ``ppolicy_use_lockout`` (a bind to a locked account says accountLocked).
        ``self_write=True``: Debian's default access rules (a user may write their own
        userPassword and shadowLastChange; nobody but the user reads userPassword)
        instead of slapd's built-in ``access to * by * read``, under which no user can
        change a password.  ``schemas``: more schema files, included after the others
        (``ACCESS_SCHEMA``)."""
        if sizelimit is not None and sizelimit < 1:
            raise SlapdError(f"sizelimit {sizelimit} must be a positive number of entries")
        self.sizelimit = sizelimit
        self.deref = deref
        self.dynlist = dynlist
        self.ppolicy = ppolicy
        self.self_write = self_write
        self.schemas = schemas
        self.workdir = Path(workdir).resolve()
        self.ldif = Path(ldif)
        self._base_dn = base_dn
        self._root_pw = root_pw
        self.tls = tls
        self.conf = self.workdir / "slapd.conf"
        self.db_dir = self.workdir / "db"
        self.log_path = self.workdir / "slapd.log"
        self.socket_path = self.workdir / "ldapi"
        self._pw_file = self.workdir / "rootpw"
        self._port: int | None = None
        self._ldaps_port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._loaded = False
        self.root_dse: dict[str, list[str]] = {}
        if len(str(self.socket_path).encode()) > MAX_SOCKET_PATH:
            raise SlapdError(
                f"work directory {self.workdir} is too long for an ldapi socket"
                f" ({MAX_SOCKET_PATH} bytes at most); use a shorter temporary directory"
            )

    # -- properties ----------------------------------------------------------------

    @property
    def base_dn(self) -> str:
        return self._base_dn

    @property
    def root_dn(self) -> str:
        return f"cn=admin,{self._base_dn}"

    @property
    def root_pw(self) -> str:
        return self._root_pw

    @property
    def port(self) -> int:
        if self._port is None:
            raise SlapdError("slapd was never started: no port yet")
        return self._port

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ldapi_uri(self) -> str:
        return "ldapi://" + urllib.parse.quote(str(self.socket_path), safe="")

    @property
    def ldaps_uri(self) -> str:
        if self._ldaps_port is None:
            raise SlapdError("this slapd has no TLS material, so no ldaps:// listener")
        return f"ldaps://127.0.0.1:{self._ldaps_port}"

    @property
    def pid(self) -> int | None:
        """slapd's process id while it runs (paused included), else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        if self.running:
            raise SlapdError(f"slapd is already running (pid {self.pid})")
        if not self._loaded:
            self._setup()
        # Ports are chosen once and kept, so restart() serves the same URIs.  Binding
        # port 0 and closing leaves a small window in which another process could take
        # the port; slapd then exits with errno 98 and we try fresh ports.
        first = self._port is None
        for _attempt in range(3):
            if first:
                self._port = free_port()
                self._ldaps_port = free_port() if self.tls else None
            try:
                self._launch()
                return
            except _PortTaken:
                if not first:
                    raise SlapdError(
                        f"port {self._port} is now taken by another process; cannot"
                        " restart on the same port"
                    ) from None
        raise SlapdError("could not find free ports for slapd in 3 attempts")

    def stop(self) -> None:
        """SIGTERM (slapd then closes its database cleanly), SIGKILL if it hangs."""
        proc = self._proc
        if proc is None:
            return
        procstat.terminate(proc, STOP_TIMEOUT, cont=self._paused)
        self._proc = None
        self._paused = False
        self._stopped()

    def restart(self) -> None:
        """Stop and start again: same data, same ports."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel but nothing answers."""
        proc = self._require_running()
        proc.send_signal(signal.SIGSTOP)
        self._paused = True
        # Signal delivery is asynchronous; wait until the kernel shows it stopped, so
        # that the caller's next request really meets a frozen server.
        self._wait_state(lambda state: state in "tT", "stopped")

    def resume(self) -> None:
        proc = self._require_running()
        proc.send_signal(signal.SIGCONT)
        self._paused = False
        self._wait_state(lambda state: state not in "tT", "running")

    # -- working with the server ---------------------------------------------------

    def connect(
        self,
        uri: str | None = None,
        *,
        bind: bool = False,
        receive_timeout: int | None = 10,
    ) -> ldap3.Connection:
        """An ldap3 connection, bound anonymously or (``bind=True``) as the rootdn.

        ``get_info=NONE``: ldap3's default (SCHEMA) would read the root DSE and the
        subschema at bind time, two searches a test did not ask for.  Use it as a
        context manager so the socket is closed (pytest turns ResourceWarning into
        an error).  ``receive_timeout`` is whole seconds: ldap3 packs it into
        SO_RCVTIMEO with struct "LL" and fails on a float.
        """
        uri = uri or self.uri
        tls = None
        if uri.startswith("ldaps://"):
            if self.tls is None:
                raise SlapdError("ldaps:// needs TLS material")
            tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(self.tls.ca_cert))
        server = ldap3.Server(uri, get_info=ldap3.NONE, tls=tls, connect_timeout=5)
        return ldap3.Connection(
            server,
            user=self.root_dn if bind else None,
            password=self.root_pw if bind else None,
            receive_timeout=receive_timeout,
            raise_exceptions=True,
        )

    def ldap_modify(self, ldif_text: str) -> str:
        """Apply LDIF change records (``changetype: modify|add|delete|modrdn``; records
        without a changetype are added, ldapmodify -a) as the rootdn; returns
        ldapmodify's output.  Raises SlapdError on failure, naming the input."""
        self._require_running()
        cmd = [LDAPMODIFY, "-a", "-x", "-H", self.uri, "-D", self.root_dn]
        cmd += ["-y", str(self._pw_file)]
        try:
            # A timeout, because a paused server would otherwise hang the test run.
            proc = subprocess.run(
                cmd,
                input=ldif_text,
                capture_output=True,
                text=True,
                check=False,
                timeout=MODIFY_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise SlapdError(
                f"ldapmodify got no answer within {MODIFY_TIMEOUT} s (is slapd paused?)"
            ) from None
        if proc.returncode != 0:
            raise SlapdError(
                f"ldapmodify failed ({proc.returncode}): {proc.stderr.strip()}\ninput:\n{ldif_text}"
            )
        return proc.stdout

    def set_policy(self, policy: PasswordPolicy, *, replace: bool = False) -> None:
        """Put ``policy`` in force (``ppolicy=True``): add its entry, or (``replace``)
        change the one added before."""
        if not self.ppolicy:
            raise SlapdError("this slapd has no ppolicy overlay: Slapd(..., ppolicy=True)")
        self.ldap_modify(policy.ldif(self._base_dn, changetype="modify" if replace else "add"))

    # -- stats log -----------------------------------------------------------------

    def log_offset(self) -> int:
        """The current end of the stats log: pass it to :meth:`count_searches`."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def searches(
        self,
        since_offset: int,
        *,
        include_probes: bool = False,
        settle_timeout: float = SETTLE_TIMEOUT,
    ) -> list[SearchOp]:
        """The search operations slapd logged after ``since_offset``, in log order.

        Each operation counts once: a paged search is one operation per page (that is
        what the server sees), and the ``SRCH attr=`` continuation line is not another
        search.  Waits (up to ``settle_timeout``) until every logged search also has its
        ``SEARCH RESULT`` line, since slapd logs that line after sending the result.
        Searches of the readiness probe are left out unless ``include_probes``.
        """
        deadline = time.monotonic() + settle_timeout
        while True:
            ops = self._parse_searches(since_offset, include_probes)
            if all(op.err is not None for op in ops) or time.monotonic() >= deadline:
                return ops
            # A short pause between re-reads of the log: the condition polled is the
            # log content itself, this only keeps the loop from spinning.
            time.sleep(0.005)

    def count_searches(
        self,
        since_offset: int,
        *,
        include_probes: bool = False,
        settle_timeout: float = SETTLE_TIMEOUT,
    ) -> int:
        """How many search operations slapd logged after ``since_offset`` (see
        :meth:`searches` for what counts as one)."""
        ops = self.searches(
            since_offset, include_probes=include_probes, settle_timeout=settle_timeout
        )
        return len(ops)

    def logical_searches(
        self,
        since_offset: int,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        include_probes: bool = False,
        settle_timeout: float = SETTLE_TIMEOUT,
    ) -> list[list[SearchOp]]:
        """The searches after ``since_offset`` with the pages of one paged search
        grouped together, as a client counts them (SSSD counts all pages of a search
        once, reference §5.1).

        The stats log does not show controls or cookies, so pages are recognised by
        their shape: the same connection, base, scope, filter and attributes as the
        previous operation of that shape on that connection, which returned exactly
        ``page_size`` entries (a full page; the last page returns up to that many).
        Other searches may come between the pages: a client sends unpaged searches
        with a paged one (several message ids outstanding), and slapd's threads log
        them in any order.  An identical search repeated after one that happened to
        return exactly ``page_size`` entries would be taken for a next page: keep
        ``page_size`` equal to the client's page size.  Filters cut in the log compare
        by their logged ~4 KiB.
        """
        ops = self.searches(
            since_offset, include_probes=include_probes, settle_timeout=settle_timeout
        )
        result: list[list[SearchOp]] = []
        # (run, conn, shape) -> the last search of that shape on that connection
        latest: dict[tuple[int, int, tuple[str, int, str, tuple[str, ...]]], list[SearchOp]] = {}
        for op in ops:
            key = (op.run, op.conn, op.shape)
            pages = latest.get(key)
            if pages and pages[-1].nentries == page_size:
                pages.append(op)
                continue
            pages = [op]
            result.append(pages)
            latest[key] = pages
        return result

    def count_logical_searches(
        self,
        since_offset: int,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        include_probes: bool = False,
        settle_timeout: float = SETTLE_TIMEOUT,
    ) -> int:
        """How many searches a client made after ``since_offset``, all pages of a paged
        search counting once (see :meth:`logical_searches`)."""
        runs = self.logical_searches(
            since_offset,
            page_size=page_size,
            include_probes=include_probes,
            settle_timeout=settle_timeout,
        )
        return len(runs)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- internals -----------------------------------------------------------------

    def _setup(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_dir.mkdir(exist_ok=True)
        self._pw_file.write_text(self._root_pw)  # ldapmodify -y reads it verbatim
        self._pw_file.chmod(0o600)
        self._write_conf()
        # -u: dry run; the database does not exist yet, slapadd creates it.
        _run([SLAPD, "-Ttest", "-u", "-f", self.conf])
        _run([SLAPADD, "-q", "-f", self.conf, "-l", self.ldif])
        self._loaded = True

    def _write_conf(self) -> None:
        w = self.workdir
        lines = ["# Generated by testing/slapd.py for one test session; do not edit."]
        schemas = SCHEMAS + ((DYNGROUP_SCHEMA,) if self.dynlist else ()) + self.schemas
        lines += [f'include "{schema}"' for schema in schemas]
        lines += [
            f"modulepath {MODULE_PATH}",
            "moduleload back_mdb",
            *(["moduleload deref"] if self.deref else []),
            *(["moduleload dynlist"] if self.dynlist else []),
            *(["moduleload ppolicy"] if self.ppolicy else []),
            f'pidfile "{w}/slapd.pid"',
            f'argsfile "{w}/slapd.args"',
            # Stats reach slapd.log through -d stats on stderr (see the module doc);
            # loglevel only feeds syslog but says what the config is for.
            "loglevel stats",
        ]
        if self.sizelimit is None:
            # Searches return 5,000+ entries (every user, a large group's members):
            # no frontend limit either.
            lines += ["sizelimit unlimited", "timelimit unlimited"]
        else:
            # As Debian ships slapd (docs/compatibility.md §9.5): soft = hard = N for everyone
            # but the rootdn, and no `limits` line in the database to lift it.
            lines += [f"sizelimit {self.sizelimit}", "timelimit unlimited"]
        if self.tls:
            lines += [
                f'TLSCACertificateFile "{self.tls.ca_cert}"',
                f'TLSCertificateFile "{self.tls.cert}"',
                f'TLSCertificateKeyFile "{self.tls.key}"',
            ]
        lines += [
            "",
            "database mdb",
            # An upper bound of the memory map, not an allocation (the file is sparse);
            # bigroupuser takes ~60 MB, the 20,000-member sweeps a few times that.
            "maxsize 4294967296",
            f'suffix "{self._base_dn}"',
            f'rootdn "{self.root_dn}"',
            f'rootpw "{self._root_pw}"',
            f'directory "{self.db_dir}"',
            *(["overlay deref"] if self.deref else []),
            # The deref control follows no computed member value, configured before
            # or after it (measured on slapd 2.5.13): those are looked up by search.
            *(["overlay dynlist", DYNLIST_ATTRSET] if self.dynlist else []),
            *(
                [
                    "overlay ppolicy",
                    f'ppolicy_default "cn=default,ou=policies,{self._base_dn}"',
                    "ppolicy_hash_cleartext",
                    "ppolicy_use_lockout",
                ]
                if self.ppolicy
                else []
            ),
        ]
        if self.self_write:
            # Debian's slapd.postinst (olcAccess of the mdb database), as slapd.conf.
            lines += [
                "access to attrs=userPassword by self write by anonymous auth by * none",
                "access to attrs=shadowLastChange by self write by * read",
                "access to * by * read",
            ]
        if self.sizelimit is None:
            lines += [
                # Unlimited for everyone, paged searches included (size.pr and
                # size.prtotal follow the hard limit, which size=unlimited sets as well).
                "limits * size=unlimited time=unlimited",
            ]
        lines += [
            # Equality indexes for every attribute a client filters on: the user and
            # group lookups (uid, cn, uidNumber, gidNumber) and membership searches
            # (member for rfc2307bis initgroups, memberUid for rfc2307).
            "index objectClass,uid,cn,member,memberUid,uidNumber,gidNumber eq",
            "",
        ]
        self.conf.write_text("\n".join(lines))

    def _listen_urls(self) -> str:
        urls = [f"ldap://127.0.0.1:{self.port}/", self.ldapi_uri + "/"]
        if self._ldaps_port is not None:
            urls.append(f"ldaps://127.0.0.1:{self._ldaps_port}/")
        return " ".join(urls)

    def _launch(self) -> None:
        offset = self.log_offset()
        with open(self.log_path, "ab") as log:
            # -d stats: foreground (our child, pid known) with stats on stderr.
            proc = subprocess.Popen(
                [SLAPD, "-f", str(self.conf), "-h", self._listen_urls(), "-d", "stats"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self._proc = proc
        self._started()
        try:
            self._wait_ready(proc)
        except BaseException:
            self.stop()
            text = self._log_since(offset)
            if "errno=98" in text:  # EADDRINUSE: lost the race for the port
                raise _PortTaken() from None
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last_error: Exception | None = None
        while True:
            if proc.poll() is not None:
                raise SlapdError(
                    f"slapd exited with status {proc.returncode} while starting;"
                    f" log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                self.root_dse = self._probe()
                return
            except (LDAPException, OSError) as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise SlapdError(
                    f"slapd (pid {proc.pid}) did not answer on {self.uri} within"
                    f" {START_TIMEOUT} s: {last_error}; log:\n{self.log_tail()}"
                )
            # Wait for slapd to die, briefly: returns at once if it does, and paces
            # the next probe otherwise.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.01)

    def _probe(self) -> dict[str, list[str]]:
        """Read the root DSE, and make sure the answer comes from our database."""
        # Is the port open yet?  Asked with a socket of our own: ldap3 2.9.1 does not
        # close its socket when connect() fails (strategy/base.py open()), and pytest
        # turns the ResourceWarning into an error.
        with socket.create_connection(("127.0.0.1", self.port), timeout=5):
            pass
        with self.connect(receive_timeout=5) as conn:
            conn.search(
                "",
                PROBE_FILTER,
                search_scope=ldap3.BASE,
                attributes=["namingContexts", "supportedControl"],
            )
            attrs = conn.response[0]["attributes"]
        contexts = [c.lower() for c in attrs.get("namingContexts", [])]
        if self._base_dn.lower() not in contexts:
            raise SlapdError(
                f"the server on {self.uri} serves {contexts}, not {self._base_dn}:"
                " another process has the port"
            )
        return {k: list(v) for k, v in attrs.items()}

    def _require_running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            raise SlapdError("slapd is not running")
        return self._proc

    def _wait_state(self, wanted: Callable[[str], bool], what: str) -> None:
        proc = self._require_running()
        deadline = time.monotonic() + STOP_TIMEOUT
        while not wanted(_proc_state(proc.pid)):
            if time.monotonic() >= deadline:
                raise SlapdError(f"slapd (pid {proc.pid}) did not become {what}")
            time.sleep(0.001)  # polling /proc for the state change, not a readiness wait

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _parse_searches(self, since_offset: int, include_probes: bool) -> list[SearchOp]:
        text = self._log_since(since_offset)
        # Ignore a last line still being written.
        lines = text.splitlines()[:-1] if not text.endswith("\n") else text.splitlines()
        # conn numbers start again at 1000 after a restart: key by run as well.
        run = 0
        found: dict[tuple[int, int, int], SearchOp] = {}
        for at, line in _timed_messages(lines):
            if line == _STARTING:
                run += 1
                continue
            m = _SRCH.match(line)
            if m:
                conn, op, base, scope, filt = m.groups()
                cut = not filt.endswith('"')
                filt = filt if cut else filt[:-1]
                if filt == PROBE_FILTER and base == "" and not include_probes:
                    continue
                found[(run, int(conn), int(op))] = SearchOp(
                    conn=int(conn),
                    op=int(op),
                    base=base,
                    scope=int(scope),
                    filter=filt,
                    filter_cut=cut,
                    run=run,
                    at=at,
                )
                continue
            m = _ATTRS.match(line)
            if m:
                key = (run, int(m.group(1)), int(m.group(2)))
                if key in found:
                    found[key] = dataclasses.replace(found[key], attrs=tuple(m.group(3).split()))
                continue
            m = _RESULT.match(line)
            if m:
                key = (run, int(m.group(1)), int(m.group(2)))
                if key in found:
                    found[key] = dataclasses.replace(
                        found[key], err=int(m.group(3)), nentries=int(m.group(4))
                    )
        return list(found.values())


class _PortTaken(Exception):
    pass


def _messages(lines: list[str]) -> Iterator[str]:
    """The log messages without their prefix, a cut message and the one glued to it
    yielded separately (see _PREFIX)."""
    for line in lines:
        for message in _PREFIX.split(line):
            if message:
                yield message


def _timed_messages(lines: list[str]) -> Iterator[tuple[float, str]]:
    """:func:`_messages`, each with the time of its prefix (0.0: none)."""
    for line in lines:
        stamps = list(_STAMP.finditer(line))
        if not stamps:
            if line:
                yield 0.0, line
            continue
        if stamps[0].start() > 0:
            yield 0.0, line[: stamps[0].start()]
        for m, nxt in zip(stamps, [*stamps[1:], None], strict=True):
            message = line[m.end() : nxt.start() if nxt is not None else len(line)]
            if message:
                yield int(m.group(1), 16) + int(m.group(2), 16) / 1e9, message


def _proc_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T, ...); the name field may hold
    spaces and parentheses, so split after its last ')'."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def free_port() -> int:
    """A loopback TCP port nothing listens on now (bound and closed: another process
    may take it before the caller binds it; callers retry on a taken port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(cmd: list[str | Path]) -> None:
    args = [str(c) for c in cmd]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SlapdError(
            f"{' '.join(args)} failed with status {proc.returncode}:\n"
            f"{proc.stdout}{proc.stderr}".rstrip()
        )


@dataclass(frozen=True)
class Dataset:
    """A generated scenario on disk: its LDIF and its expected answers."""

    ldif: Path
    expected: Expected


@dataclass(frozen=True)
class LiveDirectory:
    """A running slapd serving a generated scenario, and that scenario's answers."""

    slapd: Slapd
    expected: Expected

    @property
    def base_dn(self) -> str:
        return self.slapd.base_dn
