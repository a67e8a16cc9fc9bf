"""Generate the option documentation from the one declaration of each option.

``python -m cached.docgen`` rewrites, from the fields that declare the options
(``cached/config/options.py``: parser, default and doc in each field's metadata) and the
parser of ``cached/cli.py``:

* the option tables of docs/configuration.md (between the ``options`` markers);
* ``docs/man/cached.conf.5``, the configuration file's manual page;
* ``docs/man/cached.8``, the command's manual page.

``python -m cached.docgen --check`` writes nothing and exits 1 when a file differs from
what it would write (tests/unit/test_docs.py runs it). Adding an option is adding its field
to its section in cached/config/options.py and running ``python -m cached.docgen``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from cached import __version__
from cached.config import (
    ACCEPTED_UNUSED,
    DAEMON_OPTIONS,
    DEFAULT_CONFIG,
    DOMAIN_OPTIONS,
    IGNORED_SECTIONS,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    UNSUPPORTED,
    Option,
)
from cached.config.noeffect import NO_EFFECT
from cached.config.sssd_documented import DOCUMENTED

REPO: Final = Path(__file__).resolve().parent.parent
BEGIN: Final = (
    "<!-- BEGIN options: generated from cached/config.py by `python -m cached.docgen` -->"
)
END: Final = "<!-- END options -->"
OPTIONS_PAGE: Final = "docs/configuration.md"  # the page that holds the option tables

# (heading, section name in the file, its options: a view of the section's fields)
SECTIONS: Final = (
    ("[cached] (alias [sssd])", "cached", DAEMON_OPTIONS),
    ("[nss]", "nss", NSS_OPTIONS),
    ("[pam]", "pam", PAM_OPTIONS),
    ("[ssh]", "ssh", SSH_OPTIONS),
    ("[sudo]", "sudo", SUDO_OPTIONS),
    ("[domain/NAME]", "domain/NAME", DOMAIN_OPTIONS),
)


def shown_default(opt: Option) -> str:
    if opt.shown_default:
        return opt.shown_default
    d = opt.default
    if d is None or d == "":
        return "(unset)"
    if isinstance(d, bool):
        return "true" if d else "false"
    if isinstance(d, list):
        return ", ".join(d) if d else "(empty)"
    return str(d)


# -- README ----------------------------------------------------------------------------


def readme_tables() -> str:
    out = [BEGIN]
    for heading, _, table in SECTIONS:
        out += ["", f"#### {heading}", "", "| option | default | meaning |", "|---|---|---|"]
        out += [f"| `{name}` | {shown_default(o)} | {o.doc} |" for name, o in table.items()]
    out += ["", END]
    return "\n".join(out)


def readme(text: str) -> str:
    """``text`` (docs/configuration.md) with its option tables regenerated."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{OPTIONS_PAGE}: the markers {BEGIN!r} ... {END!r} are missing")
    return text[:start] + readme_tables() + text[end + len(END) :]


# -- the table of SSSD's options (docs/compatibility.md) ----------------------------------

TABLE_PAGE: Final = "docs/compatibility.md"
TABLE_BEGIN: Final = (
    "<!-- BEGIN sssd-options: generated from cached/config by `python -m cached.docgen` -->"
)
TABLE_END: Final = "<!-- END sssd-options -->"
IMPLEMENTED, REFUSED, NO_EFFECT_KIND, UNCLASSIFIED = (
    "implemented", "refused", "accepted, no effect", "unclassified",
)  # fmt: skip


def verdict(name: str) -> tuple[str, str]:
    """What cached does with an SSSD option, and why: implemented (a field of a
    section, whose doc says how), refused but at a value that changes nothing
    (``UNSUPPORTED``), accepted with no effect (``NO_EFFECT``, why that is right), or
    unclassified (tests/unit/test_option_table.py fails on it)."""
    where = [(heading, table[name]) for heading, _, table in SECTIONS if name in table]
    if where:
        return IMPLEMENTED, f"{', '.join(h for h, _ in where)}: {where[0][1].doc}"
    u = UNSUPPORTED.get(name)
    if u is not None:
        return REFUSED, f"loads only at the value under which SSSD answers as cached: {u.instead}"
    why = NO_EFFECT.get(name)
    if why is not None:
        return NO_EFFECT_KIND, why[0].upper() + why[1:] + "."
    return UNCLASSIFIED, ""


def option_table() -> str:
    out = [TABLE_BEGIN]
    for part, names in DOCUMENTED.items():
        out += ["", f"#### {part}", "", "| option | cached | how, or why |", "|---|---|---|"]
        for name in names:
            kind, text = verdict(name)
            text = text.replace("|", "\\|")
            out.append(f"| `{name}` | {kind} | {text} |")
    out += ["", TABLE_END]
    return "\n".join(out)


def with_option_table(text: str) -> str:
    """``text`` (docs/compatibility.md) with its table of SSSD's options regenerated."""
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{TABLE_PAGE}: the markers {TABLE_BEGIN!r} ... {TABLE_END!r} are missing")
    return text[:start] + option_table() + text[end + len(TABLE_END) :]


# -- roff ------------------------------------------------------------------------------


def roff(text: str) -> str:
    """Markdown-ish ``text`` (backquoted code) as roff: code in bold, escapes done."""
    text = text.replace("\\", "\\e")
    parts = re.split(r"`([^`]*)`", text)
    for i in range(1, len(parts), 2):
        parts[i] = "\\fB" + parts[i].replace("-", "\\-") + "\\fR"
    text = "".join(parts)
    # A line that starts with . or ' would be a roff request.
    return "\n".join("\\&" + ln if ln[:1] in (".", "'") else ln for ln in text.split("\n"))


def _header(name: str, section: int, title: str) -> list[str]:
    source = "cached/config/options.py" if section == 5 else "cached/cli.py"
    return [
        f'.\\" Generated by `python -m cached.docgen` from {source}; edit that, not this.',
        f'.TH {name.upper()} {section} "" "cached {__version__}" "{title}"',
    ]


def _paragraphs(*texts: str) -> list[str]:
    out: list[str] = []
    for t in texts:
        out += [".PP", roff(t)]
    return out


def conf_page() -> str:
    out = _header("cached.conf", 5, "File Formats")
    out += [".SH NAME", "cached.conf \\- configuration of the cached directory\\-service cache"]
    out += [".SH SYNOPSIS", roff(f"`{DEFAULT_CONFIG}`, or the file given to `cached -c FILE`")]
    out += [".SH DESCRIPTION"]
    out += _paragraphs(
        "sssd.conf syntax: an existing `/etc/sssd/sssd.conf` with an LDAP domain loads "
        "unchanged. Sections: `[cached]` (or `[sssd]`), `[nss]`, `[pam]` (with `services = "
        "nss, pam`), `[ssh]` (with `ssh` in `services`), and `[domain/NAME]` for each name "
        "in `domains`. Lists are separated by commas; booleans are `true` or `false`.",
        "Lines are read as SSSD reads them: each is `option = value`, a `[section]` header "
        "or a comment (`#` or `;`) on its own, or, from the first column as libini reads "
        "them, `//` to the end of the line or `/*` to a line ending in `*/` (a line of just "
        "`*/` does not end it: SSSD and cached then refuse the file); leading blanks are "
        "dropped, so an indented "
        "line is an option of its own, never the continuation of the line before. An "
        "option set twice keeps its last value, and a section that appears again is merged "
        "into the first, each with a warning.",
        "Unknown options warn and name the option. SSSD options cached does not use are "
        "accepted quietly (see IGNORED SSSD OPTIONS). SSSD options that would change who is "
        "who are refused (see REFUSED SSSD OPTIONS). A bad value stops the start with the "
        "file, section, option and value at fault. A file holding `ldap_default_authtok` "
        "must be mode 0600. Defaults are SSSD 2.8.2's.",
        "Snippets: as SSSD, the files of the `conf.d` directory beside the configuration "
        "file (`/etc/sssd/conf.d` for `/etc/sssd/sssd.conf`) whose names end in `.conf` and "
        "do not start with `.` are read after it, in alphabetical order; what a later file "
        "sets overrides, and sections merge. As SSSD, a snippet not owned by root:root (or by "
        "the user running cached) or giving group or others any access is skipped with a "
        "warning. An error in a snippet names the snippet.",
        "The configuration file must belong to root (or to the user running cached) and "
        "not be writable by group or others, or cached does not start: whoever can write "
        "it chooses the servers, and so every uid and group membership.",
    )
    out += [".SH OPTIONS"]
    for heading, _, table in SECTIONS:
        out += [f".SS {roff(heading)}"]
        for name, o in table.items():
            out += [".TP", f"\\fB{roff(name)}\\fR (default: {roff(shown_default(o))})", roff(o.doc)]
    out += [".SH REFUSED SSSD OPTIONS"]
    out += _paragraphs(
        "These SSSD options load quietly at the value under which SSSD answers as cached "
        "does; any other value is refused, and the message says what cached does instead:"
    )
    for name, u in UNSUPPORTED.items():
        out += [".TP", f"\\fB{roff(name)}\\fR", roff(u.instead[0].upper() + u.instead[1:] + ".")]
    out += [".SH IGNORED SSSD OPTIONS"]
    out += _paragraphs(
        "Accepted and ignored, so that an sssd.conf loads without warnings (none "
        "changes an answer; docs/compatibility.md says why for each): "
        + ", ".join(f"`{o}`" for o in sorted(ACCEPTED_UNUSED | NO_EFFECT.keys()))
        + ". The sections "
        + ", ".join(f"`[{s}]`" for s in IGNORED_SECTIONS)
        + " configure SSSD responders cached does not have and are ignored. "
        "contrib/MIGRATING-FROM-SSSD.md says what each of them meant."
    )
    out += [".SH FILES", ".TP", f"\\fB{DEFAULT_CONFIG}\\fR", "The default configuration file."]
    out += [".TP", roff("`conf.d/*.conf` beside the configuration file"),
            "Snippets merged after it, in alphabetical order (see DESCRIPTION)."]  # fmt: skip
    out += [".SH SEE ALSO", "\\fBcached\\fR(8), \\fBsssd.conf\\fR(5), \\fBsssd\\-ldap\\fR(5)"]
    return "\n".join(out) + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _options(p: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for a in p._actions:
        if isinstance(a, argparse._HelpAction) or a.help == argparse.SUPPRESS:
            continue
        if isinstance(a, argparse._SubParsersAction):
            continue
        if a.option_strings:
            names = ", ".join(f"\\fB{roff(s)}\\fR" for s in a.option_strings)
            if a.nargs != 0:
                metavar = a.metavar or (
                    "{" + ",".join(a.choices) + "}" if a.choices else a.dest.upper()
                )
                names += f" \\fI{roff(str(metavar))}\\fR"
        else:
            names = f"\\fI{roff(str(a.metavar or a.dest))}\\fR"
            if a.choices:
                names = f"\\fI{roff('|'.join(a.choices))}\\fR"
        out += [".TP", names, roff((a.help or "").replace("%(default)s", str(a.default)))]
    return out


def command_page() -> str:
    from cached.cli import EXIT_STATUS, build_parser

    parser = build_parser()
    out = _header("cached", 8, "System Administration")
    out += [".SH NAME", "cached \\- directory\\-service client cache daemon (LDAP users and nested"
            " groups over SSSD's NSS protocol)"]  # fmt: skip
    out += [".SH SYNOPSIS", ".nf"]
    for _, p in _subcommands(parser):
        usage = p.format_usage().removeprefix("usage: ").replace(" [-h]", "")
        out.append(roff(" ".join(usage.split())))
    out += [".fi"]
    out += [".SH DESCRIPTION"]
    out += _paragraphs(
        "cached resolves users and nested groups from LDAP (rfc2307 and rfc2307bis), keeps "
        "them in a split cache and answers getpwnam, getpwuid, getgrnam, getgrgid and "
        "initgroups over SSSD's NSS socket protocol, so the distribution's unchanged "
        "`libnss_sss.so.2` is the client: `id`, `getent` and sshd work through glibc. It "
        "also writes SSSD-compatible memory-cache files.",
        "`cached serve` runs the daemon; the other commands are tools for a running (or, for "
        "`cached cache`, a stopped) daemon. `cached perf`, `cached cache` and `cached status` "
        "use the root-only control socket `<pipes_dir>/private/control`.",
    )
    out += [".SH OPTIONS", *_options(parser)]
    out += [".SH COMMANDS"]
    for name, p in _subcommands(parser):
        out += [f".SS {name}", roff(p.description or "")]
        out += _options(p)
    out += [".SH EXIT STATUS"]
    for code, meaning in EXIT_STATUS:
        out += [".TP", f"\\fB{code}\\fR", roff(meaning)]
    out += [".SH FILES", ".TP", f"\\fB{DEFAULT_CONFIG}\\fR",
            "The configuration, see \\fBcached.conf\\fR(5)."]  # fmt: skip
    out += [".SH SEE ALSO", "\\fBcached.conf\\fR(5), \\fBsss_cache\\fR(8), \\fBgetent\\fR(1), "
            "\\fBid\\fR(1), \\fBsssd\\fR(8)"]  # fmt: skip
    return "\n".join(out) + "\n"


# -- main ------------------------------------------------------------------------------


def outputs(repo: Path = REPO) -> dict[Path, str]:
    """Every generated file and the text it should have."""
    return {
        repo / OPTIONS_PAGE: readme((repo / OPTIONS_PAGE).read_text()),
        repo / TABLE_PAGE: with_option_table((repo / TABLE_PAGE).read_text()),
        repo / "docs" / "man" / "cached.conf.5": conf_page(),
        repo / "docs" / "man" / "cached.8": command_page(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cached.docgen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if out of date")
    args = ap.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        old = path.read_text() if path.exists() else None
        if old == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        rel = path.relative_to(REPO)
        print(f"{rel}: {'out of date' if args.check else 'rewritten'}", file=sys.stderr)
    if args.check and stale:
        print("run: python -m cached.docgen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
