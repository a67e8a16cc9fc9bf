"""The ``cached`` command.

Subcommands import what they need when they run: the tools (``cache``, ``status``,
``perf``, ``id``, ``getent``) must start fast, and asyncio or ldap3 would dominate
their run time."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from cached import __version__, printable
from cached.config import DEFAULT_CONFIG, Config, ConfigError, load_config

if TYPE_CHECKING:
    from cached.nss.client import NssClient

T = TypeVar("T")

log = logging.getLogger("cached")

LOG_LEVELS = ("debug", "info", "warning", "error")
EPILOG = """\
configuration: sssd.conf syntax; an existing /etc/sssd/sssd.conf with an LDAP domain
loads unchanged. Every option: cached.conf(5) (man ./docs/man/cached.conf.5 in the
source) or README.md ("Configuration").
"""


def _setup_logging(level: str, role: str) -> None:
    """One log call, one line on stderr (the journal), whatever names are in it:
    ``printable.Formatter`` escapes the message's control characters (a name is
    directory or local-user data; docs/threat-model.md)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        printable.Formatter(
            f"%(asctime)s cached[{role}:%(process)d] %(levelname)s %(name)s: %(message)s"
        )
    )
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])


def _load(path: str, tool: bool = True) -> Config:
    """The configuration; ``tool=False`` for the daemons (load_config)."""
    config = load_config(path, tool=tool)
    for warning in config.warnings:
        log.warning("%s", warning)
    return config


# -- daemon ------------------------------------------------------------------------------


def _run(main: Coroutine[Any, Any, T]) -> T:
    """Run a daemon's event loop on uvloop (libuv): the NSS responder answers a warm
    getgrgid inside ``data_received``, so the loop's own work is a large part of each
    request, and uvloop's is smaller (ARCHITECTURE.md §1; ``perf.warmsocket --loop``)."""
    import uvloop

    return uvloop.run(main)


def cmd_serve(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, "monitor")
    from cached.monitor import run_monitor

    config = _load(args.config, tool=False)
    return _run(run_monitor(config, os.path.abspath(args.config), args.log_level))


def cmd_backend(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, f"be/{args.domain}")
    from cached.ldap.service import BackendService
    from cached.monitor import report_ready

    config = _load(args.config, tool=False)
    service = BackendService(config, config.domain(args.domain))
    _run(service.run(report_ready))
    return 0


def cmd_responder(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, "nss")
    from cached.monitor import report_ready
    from cached.responder.main import run_responder

    _run(run_responder(_load(args.config, tool=False), report_ready))
    return 0


# -- clients of the NSS socket -------------------------------------------------------------

# getent(1)'s exit statuses (glibc nss/getent.c, its man page): 1 missing arguments or
# unknown database, 2 a key not found. glibc reports an unreachable service the same
# way as a missing key (the NSS module answers UNAVAIL), so cached getent does too.
GETENT_NOT_FOUND = 2
# id(1): 1 for "no such user" and every other failure.
ID_FAILED = 1
UID_MAX = 0xFFFFFFFF  # ids are u32 on the wire (reference §1.5)


def _pipes_dir(args: argparse.Namespace) -> str:
    return str(args.pipes_dir or _load(args.config).daemon.pipes_dir)


def _shown(key: str) -> str:
    """``key`` for a one-line message: a 10 KiB argument is cut, not echoed, bytes that
    are not UTF-8 are shown as ``\\xff`` and control characters escaped (``printable``)."""
    key = key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    key = printable.printable(key) if not key.isprintable() else key
    return key if len(key) <= 64 else key[:64] + "…"


def _bad_name(key: str) -> str:
    """Why libnss_sss would never send ``key`` as a name (reference §1.5), or ''."""
    from cached.nss.protocol import MAX_NAME_BYTES

    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as surrogates (PEP 383)
        return "a name that is not valid UTF-8"
    if not raw:
        return "an empty name"
    if len(raw) > MAX_NAME_BYTES:
        return f"a name of {len(raw)} bytes (at most {MAX_NAME_BYTES})"
    return ""


def _as_id(key: str) -> int | None:
    """``key`` as a uid/gid when it is one: digits within u32. Longer digit strings are
    names, as for getent(1) and id(1), which ask NSS for them by name."""
    if key.isascii() and key.isdigit() and int(key) <= UID_MAX:
        return int(key)
    return None


def cmd_id(args: argparse.Namespace) -> int:
    from cached.nss.client import NssClient, NssClientError

    uid = _as_id(args.name)
    why = "" if uid is not None else _bad_name(args.name)
    if why:
        print(f"cached id: '{_shown(args.name)}': no such user ({why})", file=sys.stderr)
        return ID_FAILED
    try:
        with NssClient(_pipes_dir(args)) as c:
            user = c.getpwuid(uid) if uid is not None else c.getpwnam(args.name)
            if user is None:
                print(f"cached id: '{_shown(args.name)}': no such user", file=sys.stderr)
                return ID_FAILED
            gids = [user.gid] + [g for g in c.initgroups(user.name) if g != user.gid]
            parts = []
            names: dict[int, str] = {}
            for gid in dict.fromkeys(gids):
                g = c.getgrgid(gid)
                # A directory name printed to a terminal: a newline, a CR or an escape
                # sequence in it is shown escaped, never acted on (docs/threat-model.md).
                names[gid] = printable.printable(g.name) if g else ""
                parts.append(f"{gid}({names[gid]})" if g else str(gid))
    except NssClientError as e:
        print(f"cached id: cannot ask cached: {e}", file=sys.stderr)
        return ID_FAILED
    primary = f"{user.gid}({names[user.gid]})" if names.get(user.gid) else str(user.gid)
    name = printable.printable(user.name)
    print(f"uid={user.uid}({name}) gid={primary} groups={','.join(parts)}")
    return 0


class _ForgedField(Exception):
    """An entry whose fields hold the format's own separators."""


#: Exit status when an entry is refused for a forged field (not "not found": it exists).
FORGED_FIELD = 1


def _fields(line: list[str], members: list[str] | None = None) -> str:
    """A passwd/group line. A field holding a character of the format itself (a name
    with a newline, ':' or, in a member, ',') would print a forged line or field
    (docs/threat-model.md): such an entry is refused, never printed. Other control
    characters (a CR, an ANSI or OSC escape sequence rewriting root's terminal) are
    printed escaped, as in the log (``printable``: ``\\r``, ``\\x1b``, and a
    backslash as ``\\\\``)."""
    if any(ch in f for f in line for ch in "\n:") or any(
        ch in m for m in members or () for ch in "\n:,"
    ):
        raise _ForgedField
    shown = printable.printable
    fields = [shown(f) for f in line]
    return ":".join([*fields, ",".join(map(shown, members))] if members is not None else fields)


def cmd_getent(args: argparse.Namespace) -> int:
    from cached.nss.client import NssClient, NssClientError

    status = 0
    try:
        with NssClient(_pipes_dir(args)) as c:
            for key in args.keys:
                n = _as_id(key) if args.database != "initgroups" else None
                why = "" if n is not None else _bad_name(key)
                if why:
                    # libnss_sss answers such a key "not found" without asking (§1.5).
                    print(f"cached getent: {args.database}: '{_shown(key)}' is not a valid key "
                          f"({why})", file=sys.stderr)  # fmt: skip
                    status = GETENT_NOT_FOUND
                    continue
                try:
                    line = _getent_line(c, args.database, key, n)
                except _ForgedField:
                    what = f"the {args.database} entry of '{_shown(key)}'"
                    print(f"cached getent: {what} holds a newline, ':' or ',' in a field; "
                          "not printed", file=sys.stderr)  # fmt: skip
                    status = FORGED_FIELD
                    continue
                if line is None:
                    status = GETENT_NOT_FOUND  # getent(1) goes on with the other keys
                else:
                    print(line)
    except NssClientError as e:
        print(f"cached getent: cannot ask cached: {e}", file=sys.stderr)
        return GETENT_NOT_FOUND
    return status


def _getent_line(c: NssClient, database: str, key: str, n: int | None) -> str | None:
    if database == "passwd":
        u = c.getpwuid(n) if n is not None else c.getpwnam(key)
        if u is None:
            return None
        return _fields([u.name, "*", str(u.uid), str(u.gid), u.gecos, u.home, u.shell])
    if database == "group":
        g = c.getgrgid(n) if n is not None else c.getgrnam(key)
        if g is None:
            return None
        return _fields([g.name, g.passwd, str(g.gid)], list(g.members))
    if c.getpwnam(key) is None:
        return None
    gids = list(dict.fromkeys(c.initgroups(key)))
    return f"{printable.printable(key):<24}" + " ".join(str(g) for g in gids)


# -- administration ---------------------------------------------------------------------


def _drop_credentials(args: argparse.Namespace) -> int:
    """``cached cache --drop-credentials NAME``: the backends forget NAME's cached
    password (they alone write the entry store, so the daemon must run)."""
    from cached.ipc import framing
    from cached.ipc.ops import DropCredentials, Op
    from cached.tools.cache import NO_MATCH

    if os.geteuid() != 0:
        print("cached cache: must be run as root", file=sys.stderr)
        return 1
    config = _load(args.config)
    dropped = 0
    for name in args.drop_credentials:
        drop = DropCredentials(name, args.domain or "")
        try:
            reply = framing.call_sync(
                framing.control_socket(config.daemon.pipes_dir), Op.DROP_CREDENTIALS,
                timeout=30, **drop.args(),
            )  # fmt: skip
        except framing.RpcError as e:
            print(f"cached cache: dropping credentials needs the running daemon (its "
                  f"backends alone write the cache): {e}", file=sys.stderr)  # fmt: skip
            return 3
        dropped += int(reply.get("dropped") or 0)
    if not dropped:
        print(NO_MATCH, file=sys.stderr)
        return errno.ENOENT
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from cached.tools import ToolError
    from cached.tools.cache import NO_MATCH, Invalidation, invalidate, notify_invalidated

    if args.drop_credentials:
        return _drop_credentials(args)
    what = Invalidation(
        everything=args.everything, users=args.users, groups=args.groups,
        user_names=args.user, group_names=args.group, domain=args.domain or "",
        netgroups=args.netgroups, netgroup_names=args.netgroup,
        sudo_rules=args.sudo_rules, sudo_rule_names=args.sudo_rule,
    )  # fmt: skip
    if what.empty():
        print("cached cache: select at least one object to invalidate (-E, -u, -U, -g, -G, "
              "-n, -N, -r, -R); see cached cache --help", file=sys.stderr)  # fmt: skip
        return 1
    if os.geteuid() != 0:
        print("cached cache: must be run as root", file=sys.stderr)
        return 1
    config = _load(args.config)
    try:
        matched = invalidate(config, what)
    except ToolError as e:
        print(f"cached cache: {e}", file=sys.stderr)
        return e.code
    if not matched:
        # sss_cache's message and status (reference §4); the memory cache is left alone.
        print(NO_MATCH, file=sys.stderr)
        return errno.ENOENT
    warning = notify_invalidated(config)
    if warning:
        print(warning, file=sys.stderr)
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    from cached.config.check import check_config

    report = check_config(args.config)
    for line in report.lines():
        print(printable.printable(line))
    return 1 if report.refused else 0


def cmd_status(args: argparse.Namespace) -> int:
    from cached.tools.status import format_status, status

    config = _load(args.config)
    st, running = status(config)
    if args.json:
        import json

        print(json.dumps({"running": running, **st}, indent=2, default=str))
    else:
        print(format_status(config, st, running))
    # LSB's status codes (as systemctl's): 0 running, 3 not running. A user who may not
    # open the control socket still learns that the daemon runs (0); the details need root.
    return 0 if running else 3


def cmd_perf(args: argparse.Namespace) -> int:
    from cached.tools import ToolError
    from cached.tools.perf import perf

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:  # a usage error: before the configuration is read
        print(
            "cached perf: give the command to measure after --, e.g. "
            "cached perf -- id bigroupuser (see cached perf --help)",
            file=sys.stderr,
        )
        return USAGE_ERROR
    try:
        text, code = perf(_load(args.config), argv, args.json, args.command_name)
    except ToolError as e:
        print(f"cached perf: {e}", file=sys.stderr)
        return e.code
    print(text)
    return code


# The exit statuses, for cached(8) (cached/docgen.py).
EXIT_STATUS = (
    ("0", "Success. `cached status`: the daemon runs (for a user other than root, who may "
          "not read its details, only that). `cached perf`: the measured command's status."),
    ("1", "A mistake on the command line (one line on stderr), as getent(1) and id(1). "
          "`cached id`: no such user, or the daemon cannot be asked. `cached cache`: not "
          "root, nothing selected, or a store that cannot be written."),
    ("2", "`cached getent`: a key not found or not valid, or the daemon cannot be asked "
          "(glibc's getent(1) reports an unreachable service so too). `cached cache`: "
          "nothing matched, or an unknown domain (as sss_cache(8)). `cached perf`: the "
          "command cannot be run."),
    ("3", "The configuration is missing or wrong (one line naming the file, section, option "
          "and value); systemd does not restart the unit for it. `cached status` and "
          "`cached perf`: the daemon is not running."),
)  # fmt: skip


# -- the parser ----------------------------------------------------------------------------

# The processes the monitor starts (monitor.py). They are not commands for users, so
# they are parsed by their own parser and never offered in usage or "invalid choice".
INTERNAL = ("_backend", "_responder")
USAGE_ERROR = 1  # getent(1), id(1) and sss_cache(8) answer a bad command line with 1


class Parser(argparse.ArgumentParser):
    """Mistakes on the command line get one line and status 1, as from getent(1)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c", "--config", default=DEFAULT_CONFIG, metavar="FILE",
        help=f"configuration file (default {DEFAULT_CONFIG})",
    )  # fmt: skip


def _add_log_level(p: argparse.ArgumentParser, default: str | None = "info") -> None:
    p.add_argument(
        "--log-level", choices=LOG_LEVELS, default=default or argparse.SUPPRESS,
        help="log level of the daemon (debug adds one PROFILE line per backend request)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="cached",
        description="A directory-service client cache daemon: LDAP users and nested groups, "
        "served over SSSD's NSS protocol to the stock libnss_sss.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cached {__version__}")
    _add_log_level(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str | None,
            **kw: str) -> argparse.ArgumentParser:  # fmt: skip
        p = sub.add_parser(name, help=help, description=help, **kw)  # type: ignore[arg-type]
        _add_config(p)
        p.set_defaults(func=fn)
        return p

    p = add("serve", cmd_serve, "run the daemon in the foreground (monitor, backends, responder)")
    # Accepted after the subcommand too (`cached serve --log-level debug`); there it
    # overrides the one before it.
    _add_log_level(p, default=None)

    p = add(
        "cache", cmd_cache,
        "expire cached entries, as sss_cache(8): the next lookup refreshes them from the "
        "server (only timestamps are written; nothing is deleted)",
    )  # fmt: skip
    p.add_argument("-E", "--everything", action="store_true",
                   help="all users, groups, netgroups and sudo rules")  # fmt: skip
    p.add_argument("-u", "--user", action="append", default=[], metavar="NAME",
                   help="one user (repeatable; NAME@DOMAIN limits it to DOMAIN)")  # fmt: skip
    p.add_argument("-U", "--users", action="store_true", help="all users")
    p.add_argument("-g", "--group", action="append", default=[], metavar="NAME",
                   help="one group (repeatable)")  # fmt: skip
    p.add_argument("-G", "--groups", action="store_true", help="all groups")
    p.add_argument("-n", "--netgroup", action="append", default=[], metavar="NAME",
                   help="one netgroup (repeatable)")  # fmt: skip
    p.add_argument("-N", "--netgroups", action="store_true", help="all netgroups")
    p.add_argument("-r", "--sudo-rule", action="append", default=[], metavar="NAME",
                   help="one sudo rule (repeatable)")  # fmt: skip
    p.add_argument("-R", "--sudo-rules", action="store_true", help="all sudo rules")
    p.add_argument("-d", "--domain", metavar="DOMAIN", help="only this domain")
    p.add_argument("--drop-credentials", action="append", default=[], metavar="NAME",
                   help="forget the cached password of user NAME (repeatable; the daemon "
                   "must run): offline logins need an online one first")  # fmt: skip

    p = add(
        "status", cmd_status,
        "show domains (online/offline, last refresh, entries), stores, memory cache, "
        "processes and uptime; exit status 3 when the daemon is not running; for users "
        "other than root only whether it runs",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add(
        "perf", cmd_perf,
        "run a command and print what the daemon did meanwhile, in the layout of SSSD's "
        "id_perf.stp, e.g.: cached perf -- id bigroupuser",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--command-name", metavar="NAME",
                   help="name in 'Total run time of NAME' (default: CMD's basename)")  # fmt: skip
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to measure")  # fmt: skip

    p = add(
        "config-check", cmd_config_check,
        "check a configuration (an sssd.conf, say) before switching, as sssctl "
        "config-check: print each option of the file and of its conf.d snippets as "
        "FILE:LINE: loads, ignored or refused, with why; then the warnings and the "
        "refusal that loading the whole file adds. Exit status 0 when cached would start "
        "with it, 1 when something is refused, 3 when the file cannot be read or parsed",
    )  # fmt: skip

    p = add("id", cmd_id, "print a user's uid, gid and groups as id(1), through the NSS socket")
    p.add_argument("name", help="user name or uid")
    p.add_argument("--pipes-dir", metavar="DIR",
                   help="directory of the nss socket (default: from the config)")  # fmt: skip

    p = add("getent", cmd_getent, "look entries up through the NSS socket, as getent(1)")
    p.add_argument("database", choices=("passwd", "group", "initgroups"),
                   help="the database: passwd, group or initgroups")  # fmt: skip
    p.add_argument("keys", nargs="+", metavar="KEY", help="name, or uid/gid")
    p.add_argument("--pipes-dir", metavar="DIR",
                   help="directory of the nss socket (default: from the config)")  # fmt: skip
    return parser


def build_internal_parser() -> argparse.ArgumentParser:
    """``cached [--log-level L] _backend|_responder -c FILE ...``: what monitor.py runs."""
    parser = Parser(prog="cached")
    _add_log_level(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("_backend")
    _add_config(p)
    p.add_argument("--domain", required=True)
    p.set_defaults(func=cmd_backend)
    p = sub.add_parser("_responder")
    _add_config(p)
    p.set_defaults(func=cmd_responder)
    return parser


def _command_of(argv: Sequence[str]) -> str:
    """The subcommand word of ``argv``: the first word that is not an option of the
    top-level parser (whose only option with a value is --log-level)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_internal_parser() if _command_of(argv) in INTERNAL else build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as e:
        print(f"cached: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
