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
from collections.abc import Callable, Sequence

from cached import __version__
from cached.config import DEFAULT_CONFIG, Config, ConfigError, load_config

log = logging.getLogger("cached")

LOG_LEVELS = ("debug", "info", "warning", "error")
EPILOG = """\
configuration: sssd.conf syntax; an existing /etc/sssd/sssd.conf with an LDAP domain
loads unchanged. See README.md ("Configuration") for every option.
"""


def _setup_logging(level: str, role: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format=f"%(asctime)s cached[{role}:%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _load(path: str) -> Config:
    config = load_config(path)
    for warning in config.warnings:
        log.warning("%s", warning)
    return config


# -- daemon ------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, "monitor")
    import asyncio

    from cached.monitor import run_monitor

    config = _load(args.config)
    return asyncio.run(run_monitor(config, os.path.abspath(args.config), args.log_level))


def cmd_backend(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, f"be/{args.domain}")
    import asyncio

    from cached.ldap.service import BackendService
    from cached.monitor import report_ready

    config = _load(args.config)
    service = BackendService(config, config.domain(args.domain))
    asyncio.run(service.run(report_ready))
    return 0


def cmd_responder(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, "nss")
    import asyncio

    from cached.monitor import report_ready
    from cached.nss.server import run_responder

    asyncio.run(run_responder(_load(args.config), report_ready))
    return 0


# -- clients of the NSS socket -------------------------------------------------------------


def _pipes_dir(args: argparse.Namespace) -> str:
    return str(args.pipes_dir or _load(args.config).daemon.pipes_dir)


def cmd_id(args: argparse.Namespace) -> int:
    from cached.nss.client import NssClient

    with NssClient(_pipes_dir(args)) as c:
        user = c.getpwuid(int(args.name)) if args.name.isdigit() else c.getpwnam(args.name)
        if user is None:
            print(f"cached id: '{args.name}': no such user", file=sys.stderr)
            return 1
        gids = [user.gid] + [g for g in c.initgroups(user.name) if g != user.gid]
        seen: set[int] = set()
        parts = []
        names: dict[int, str] = {}
        for gid in gids:
            if gid in seen:
                continue
            seen.add(gid)
            g = c.getgrgid(gid)
            names[gid] = g.name if g else ""
            parts.append(f"{gid}({g.name})" if g else str(gid))
    primary = f"{user.gid}({names[user.gid]})" if names.get(user.gid) else str(user.gid)
    print(f"uid={user.uid}({user.name}) gid={primary} groups={','.join(parts)}")
    return 0


def _fields(line: list[str], members: list[str] | None = None) -> str | None:
    """A passwd/group line, or None when a field holds a character of the format
    itself: a name with a newline, ':' or (a member) ',' would print a forged line or
    field (issue 17); such an entry is refused, never printed."""
    if any(ch in f for f in line for ch in "\n:") or any(
        ch in m for m in members or () for ch in "\n:,"
    ):
        return None
    return ":".join([*line, ",".join(members)] if members is not None else line)


def cmd_getent(args: argparse.Namespace) -> int:
    from cached.nss.client import NssClient

    with NssClient(_pipes_dir(args)) as c:
        for key in args.keys:
            if args.database == "passwd":
                u = c.getpwuid(int(key)) if key.isdigit() else c.getpwnam(key)
                if u is None:
                    return 2
                text = _fields([u.name, "*", str(u.uid), str(u.gid), u.gecos, u.home, u.shell])
            elif args.database == "group":
                g = c.getgrgid(int(key)) if key.isdigit() else c.getgrnam(key)
                if g is None:
                    return 2
                text = _fields([g.name, g.passwd, str(g.gid)], list(g.members))
            if args.database in ("passwd", "group"):
                if text is None:
                    what = f"the {args.database} entry of {key!r}"
                    print(f"cached getent: {what} holds a newline, ':' or ',' in a field; "
                          "not printed", file=sys.stderr)  # fmt: skip
                    return 1
                print(text)
            else:
                u = c.getpwnam(key)
                if u is None:
                    return 2
                gids = list(dict.fromkeys(c.initgroups(key)))
                print(f"{key:<24}" + " ".join(str(g) for g in gids))
    return 0


# -- administration ---------------------------------------------------------------------


def cmd_cache(args: argparse.Namespace) -> int:
    from cached.tools import NO_MATCH, Invalidation, ToolError, invalidate, notify_invalidated

    what = Invalidation(
        everything=args.everything, users=args.users, groups=args.groups,
        user_names=args.user, group_names=args.group, domain=args.domain or "",
    )  # fmt: skip
    if what.empty():
        print("cached cache: select at least one object to invalidate (-E, -u, -U, -g, -G);"
              " see cached cache --help", file=sys.stderr)  # fmt: skip
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


def cmd_status(args: argparse.Namespace) -> int:
    from cached.tools import format_status, status

    config = _load(args.config)
    st, running = status(config)
    if args.json:
        import json

        print(json.dumps({"running": running, **st}, indent=2, default=str))
    else:
        print(format_status(config, st, running))
    return 0 if running else 3


def cmd_perf(args: argparse.Namespace) -> int:
    from cached.tools import ToolError, perf

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    try:
        text, code = perf(_load(args.config), argv, args.json, args.command_name)
    except ToolError as e:
        print(f"cached perf: {e}", file=sys.stderr)
        return e.code
    print(text)
    return code


# -- the parser ----------------------------------------------------------------------------


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c", "--config", default=DEFAULT_CONFIG, metavar="FILE",
        help=f"configuration file (default {DEFAULT_CONFIG})",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cached",
        description="A directory-service client cache daemon: LDAP users and nested groups, "
        "served over SSSD's NSS protocol to the stock libnss_sss.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cached {__version__}")
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info",
        help="log level of the daemon (debug adds one PROFILE line per backend request)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str | None,
            **kw: str) -> argparse.ArgumentParser:  # fmt: skip
        p = sub.add_parser(name, help=help, description=help, **kw)  # type: ignore[arg-type]
        _add_config(p)
        p.set_defaults(func=fn)
        return p

    add("serve", cmd_serve, "run the daemon in the foreground (monitor, backends, responder)")

    p = add(
        "cache", cmd_cache,
        "expire cached entries, as sss_cache(8): the next lookup refreshes them from the "
        "server (only timestamps are written; nothing is deleted)",
    )  # fmt: skip
    p.add_argument("-E", "--everything", action="store_true", help="all users and groups")
    p.add_argument("-u", "--user", action="append", default=[], metavar="NAME",
                   help="one user (repeatable; NAME@DOMAIN limits it to DOMAIN)")  # fmt: skip
    p.add_argument("-U", "--users", action="store_true", help="all users")
    p.add_argument("-g", "--group", action="append", default=[], metavar="NAME",
                   help="one group (repeatable)")  # fmt: skip
    p.add_argument("-G", "--groups", action="store_true", help="all groups")
    p.add_argument("-d", "--domain", metavar="DOMAIN", help="only this domain")

    p = add(
        "status", cmd_status,
        "show domains (online/offline, last refresh, entries), stores, memory cache, "
        "processes and uptime; exit status 3 when the daemon is not running",
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

    p = add("id", cmd_id, "print a user's uid, gid and groups as id(1), through the NSS socket")
    p.add_argument("name", help="user name or uid")
    p.add_argument("--pipes-dir", help="directory of the nss socket (default: from the config)")

    p = add("getent", cmd_getent, "look entries up through the NSS socket, as getent(1)")
    p.add_argument("database", choices=("passwd", "group", "initgroups"))
    p.add_argument("keys", nargs="+", metavar="KEY", help="name, or uid/gid")
    p.add_argument("--pipes-dir", help="directory of the nss socket (default: from the config)")

    # Internal: the processes the monitor starts.
    p = sub.add_parser("_backend")
    _add_config(p)
    p.add_argument("--domain", required=True)
    p.set_defaults(func=cmd_backend)
    p = sub.add_parser("_responder")
    _add_config(p)
    p.set_defaults(func=cmd_responder)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
