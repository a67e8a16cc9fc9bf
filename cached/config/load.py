"""Loading: the configuration file and its conf.d snippets read as SSSD reads them
(ini.py), each section's options parsed through the fields that declare them
(options.py), SSSD's options checked (sssd.py) and each domain completed (rules.py)."""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

from cached.config.errors import ConfigError
from cached.config.ini import Ini
from cached.config.noeffect import NO_EFFECT
from cached.config.options import (
    DAEMON_OPTIONS,
    DOMAIN_OPTIONS,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    Config,
    DaemonConfig,
    DomainConfig,
    DomainType,
    NssConfig,
    Option,
    PamConfig,
    SshConfig,
    SudoConfig,
)
from cached.config.parsers import NotSupported
from cached.config.rules import check_required, complete_domain
from cached.config.sssd import (
    ACCEPTED_UNUSED,
    IGNORED_SECTIONS,
    UNSUPPORTED,
    enabled_domains,
    unsupported_problem,
)

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "/etc/cached/cached.conf"


@dataclass(frozen=True)
class Verdict:
    """What loading does with one ``option = value`` line: ``loads`` (``value`` is
    the parsed value, for an option of the section's table), or not, with ``message``
    saying why: ``refused`` stops the start, an ``ignored`` one is warned of when
    ``warn``, else accepted quietly (an SSSD option that changes nothing here)."""

    kind: str  # LOADS, IGNORED or REFUSED
    message: str = ""
    value: Any = None
    warn: bool = False


LOADS, IGNORED, REFUSED = "loads", "ignored", "refused"


def judge(section: str, name: str, raw: str, table: dict[str, Option]) -> Verdict:
    """The verdict on ``name = raw`` in ``section``, whose options are ``table``: the
    one place that knows, for the loader and ``cached config-check`` alike."""
    what = f"[{section}] {name} = {raw.strip()!r}"
    opt = table.get(name)
    if opt is not None:
        try:
            return Verdict(LOADS, value=opt.parse(raw))
        except NotSupported as e:
            return Verdict(REFUSED, f"{what} is not supported: {e}")
        except ValueError as e:
            return Verdict(REFUSED, f"{what} is invalid: {e}")
    unsupported = UNSUPPORTED.get(name)
    if unsupported is not None:
        problem = unsupported_problem(section, name, raw, unsupported)
        if problem is not None:
            return Verdict(REFUSED, problem)
        return Verdict(LOADS, "SSSD answers as cached at this value")
    if name in NSS_OPTIONS and section != "nss":
        # allowed_shells, vetoed_shells, shell_fallback, ...: SSSD reads them in [nss]
        # only (responder_common.c), and ignores them elsewhere.
        return Verdict(
            IGNORED,
            f"[{section}] {name} is an option of [nss], where SSSD reads it; ignored here",
            warn=True,
        )
    if name in ACCEPTED_UNUSED or name in NO_EFFECT:
        why = NO_EFFECT.get(name)
        return Verdict(
            IGNORED,
            f"no effect: {why}" if why else "an SSSD option cached accepts and has no use for",
        )
    return Verdict(IGNORED, f"[{section}] unknown option {name!r} is ignored", warn=True)


def read_section(
    ini: Ini, section: str, table: dict[str, Option], warnings: list[str]
) -> dict[str, Any]:
    """The values of ``section`` by option name: each option the file sets, parsed;
    the default of each it leaves unset, but for a computed one (rules.py sets it).
    Each option set is judged (``judge``): a refused one stops the load."""
    values: dict[str, Any] = {
        name: list(opt.default) if isinstance(opt.default, list) else opt.default
        for name, opt in table.items()
        if not opt.computed
    }
    for name, raw in ini.sections.get(section, {}).items():
        path = ini.where(section, name)
        v = judge(section, name, raw, table)
        if v.kind == REFUSED:
            raise ConfigError(f"{path}: {v.message}")
        if v.kind == LOADS and name in table:
            values[name] = v.value
        elif v.warn:
            warnings.append(f"{path}: {v.message}")
    return values


def _check_secret_permissions(path: str, st: os.stat_result, section: str) -> None:
    """Refuse a bind password readable by others, as SSSD refuses such an sssd.conf."""
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{path}: [{section}] holds ldap_default_authtok, but the file is mode "
            f"{stat.S_IMODE(st.st_mode):04o} (readable by group or others); "
            f"run: chmod 600 {path}"
        )


def parse_config(text: str, path: str = "<string>", st: os.stat_result | None = None) -> Config:
    """Parse sssd.conf-syntax ``text``; ``st`` is the file's stat for the permission check."""
    warnings: list[str] = []
    ini = Ini(path)
    ini.read(text, path, warnings)
    return config_of(ini, {path: st}, warnings)


def config_of(ini: Ini, stats: dict[str, os.stat_result | None], warnings: list[str]) -> Config:
    """The configuration the sections of ``ini`` say; ``stats`` holds each file's stat
    for the permission check of a bind password."""
    path = ini.path
    sections = list(ini.sections)
    main = [s for s in sections if s in ("cached", "sssd")]
    if len(main) > 1:
        raise ConfigError(f"{path}: both [cached] and [sssd] are present; keep one of them")
    if not main:
        raise ConfigError(f"{path}: no [cached] section (or [sssd]); it must list `domains`")
    main_name = main[0]
    daemon_vals = read_section(ini, main_name, DAEMON_OPTIONS, warnings)
    nss_vals = read_section(ini, "nss", NSS_OPTIONS, warnings)
    pam_vals = read_section(ini, "pam", PAM_OPTIONS, warnings)
    ssh_vals = read_section(ini, "ssh", SSH_OPTIONS, warnings)
    sudo_vals = read_section(ini, "sudo", SUDO_OPTIONS, warnings)

    domain_sections = {s[len("domain/") :]: s for s in sections if s.startswith("domain/")}
    app_sections = {s[len("application/") :]: s for s in sections if s.startswith("application/")}
    names = enabled_domains(ini, main_name, daemon_vals["domains"], domain_sections)
    # `domains` names its sections case-insensitively too (confdb's cn): a domain is
    # called as its section spells it.
    spelled = {d.lower(): d for d in [*domain_sections, *app_sections]}
    names = list(dict.fromkeys(spelled.get(n.lower(), n) for n in names))
    if not names:
        raise ConfigError(
            f"{ini.where(main_name, 'domains')}: [{main_name}] domains is not set; "
            "list at least one domain (or set `enabled = true` in a [domain/NAME] section)"
        )
    left_out: set[str] = set()
    for dname in list(names):
        sname = domain_sections.get(dname)
        dtype = ini.sections[sname].get("domain_type", "") if sname else ""
        if dname in app_sections or dtype.strip().lower() == DomainType.APPLICATION:
            where = ini.where(sname, "domain_type") if sname else ini.where(app_sections[dname])
            warnings.append(
                f"{where}: domain {dname!r} is an application domain; left out, as SSSD "
                "does not serve application domains over NSS"
            )
            names.remove(dname)
            left_out.add(dname)
    if not names:
        raise ConfigError(
            f"{ini.where(main_name, 'domains')}: [{main_name}] domains lists only "
            "application domains, which are not served over NSS; nothing to serve"
        )
    for s in sections:
        if s in (main_name, "nss", "pam", "ssh", "sudo") or s.startswith(
            ("domain/", "application/")
        ):
            continue
        if s in IGNORED_SECTIONS:
            log.debug("%s: section [%s] is for an SSSD responder cached does not have", path, s)
        else:
            warnings.append(f"{ini.where(s)}: unknown section [{s}] is ignored")
    for dname, sname in domain_sections.items():
        quiet = dname in left_out or "enabled" in ini.sections[sname]
        if dname not in names and not quiet:
            warnings.append(
                f"{ini.where(sname)}: [{sname}] is not listed in [{main_name}] domains; ignored"
            )

    domains: list[DomainConfig] = []
    for dname in names:
        if dname not in domain_sections:
            raise ConfigError(
                f"{ini.where(main_name, 'domains')}: [{main_name}] domains lists {dname!r} but "
                f"there is no [domain/{dname}] section"
            )
        sname = domain_sections[dname]
        vals = read_section(ini, sname, DOMAIN_OPTIONS, warnings)
        check_required(ini, sname, vals)
        # Every file that set a password, not only the one whose value won, and even
        # when a later one empties it: a password in a world-readable main file stays
        # readable whatever a snippet sets later.
        for holder in sorted(ini.secret_files.get(sname, ())):
            st = stats.get(holder)
            if st is not None:
                _check_secret_permissions(holder, st, sname)
        complete_domain(ini, sname, vals, warnings)
        domains.append(DomainConfig(name=dname, **vals))

    suffix = daemon_vals["default_domain_suffix"]
    if suffix and suffix.lower() not in {d.name.lower() for d in domains}:
        raise ConfigError(
            f"{ini.where(main_name, 'default_domain_suffix')}: [{main_name}] "
            f"default_domain_suffix = {suffix!r} is not supported: it names no domain of "
            f"[{main_name}] domains (cached serves no trusted subdomains); name one of "
            + ", ".join(d.name for d in domains)
        )
    return Config(
        path=path,
        daemon=DaemonConfig(**daemon_vals),
        nss=NssConfig(**nss_vals),
        domains=domains,
        pam=PamConfig(**pam_vals),
        ssh=SshConfig(**ssh_vals),
        sudo=SudoConfig(**sudo_vals),
        warnings=warnings,
    )


def _read_file(path: str) -> tuple[str, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; create it (see contrib/cached.conf) or pass -c FILE"
        ) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {e.start})") from None


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def _check_file_permissions(path: str, st: os.stat_result) -> None:
    """Whoever can write the configuration chooses the servers, so every uid and group
    membership: refuse a file that another user owns or that group or others may write
    (SSSD refuses any sssd.conf not root-owned and mode 0600/0400)."""
    if not _owner_ok(st):
        raise ConfigError(
            f"{path}: owned by uid {st.st_uid}; the configuration must belong to root (or to "
            f"the user running cached); run: chown root:root {path}"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others change the "
            f"configuration; run: chmod go-w {path}"
        )


# SSSD's snippets (sss_ini.c sss_ini_add_snippets): files of conf.d whose names match
# this, merged in alphabetical order.
SNIPPET_NAME = re.compile(r"[^.].*\.conf")


def _snippets(
    path: str, warnings: list[str], tool: bool = False
) -> list[tuple[str, str, os.stat_result]]:
    """The conf.d snippets of ``path`` as SSSD merges them: ``conf.d`` beside the file,
    names ending in ``.conf`` and not starting with ``.``, in alphabetical order. A
    snippet that fails SSSD's access check (owned by root:root, nothing for group or
    others; cached also takes a file owned by the user running it and its group) is
    skipped with a warning, as SSSD skips it with a log line."""
    confd = os.path.join(os.path.dirname(path) or ".", "conf.d")
    try:
        names = sorted(n for n in os.listdir(confd) if SNIPPET_NAME.fullmatch(n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise ConfigError(f"{confd}: cannot read the snippet directory: {e.strerror}") from None
    out = []
    for name in names:
        spath = os.path.join(confd, name)
        try:
            regular = stat.S_ISREG(os.stat(spath).st_mode)
        except OSError as e:
            raise ConfigError(f"{spath}: cannot read: {e.strerror}") from None
        if not regular:
            warnings.append(f"{spath}: not a regular file; skipped")
            continue
        if tool and os.geteuid() != 0 and not os.access(spath, os.R_OK):
            # A tool run by a user (cached status, getent, id) reads what it may: a
            # snippet only root may read, as it must be, would otherwise stop them all.
            # The daemon never skips one: started unprivileged, it would lose what the
            # snippet sets (TLS checks, the bind), so it stops instead.
            log.debug("%s: only root may read it; skipped (run as root to use it)", spath)
            continue
        text, st = _read_file(spath)
        # SSSD's check is uid, gid and mode (libini ini_access_check with 0, 0, 0600 in
        # sss_ini.c): a root-owned 0600 snippet of group `wheel` is skipped there too
        # (sssctl config-check: "did not pass access check. Skipping."), so cached must
        # not apply what SSSD leaves out.
        group_ok = st.st_gid in (0, os.getegid())
        if not _owner_ok(st) or not group_ok or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"{spath}: skipped, as SSSD skips it: a snippet must belong to root:root (or "
                "to the user running cached) and give group and others no access, but it is "
                f"owned by {st.st_uid}:{st.st_gid} with mode {stat.S_IMODE(st.st_mode):04o}; "
                f"run: chown root:root {spath}; chmod 600 {spath}"
            )
            continue
        out.append((spath, text, st))
    return out


def read_files(
    path: str, warnings: list[str], *, tool: bool = False, permissions: bool = True
) -> tuple[Ini, dict[str, os.stat_result | None]]:
    """``path`` and its ``conf.d`` snippets read into one Ini, with each file's stat;
    ``permissions``: refuse a main file others may change (ConfigError)."""
    text, st = _read_file(path)
    if permissions:
        _check_file_permissions(path, st)
    ini = Ini(path)
    ini.read(text, path, warnings)
    stats: dict[str, os.stat_result | None] = {path: st}
    for spath, stext, sst in _snippets(path, warnings, tool):
        try:
            Ini(spath).read(stext, spath, [])  # whole, or not at all
        except ConfigError as e:
            # SSSD skips a snippet it cannot parse, with a log line, and starts.
            warnings.append(f"{e}; the snippet is skipped, as SSSD skips it")
            continue
        ini.read(stext, spath, warnings)
        stats[spath] = sst
    return ini, stats


def check_file_permissions(path: str, st: os.stat_result | None) -> str | None:
    """Why the main file's owner or mode stops the start, or None."""
    if st is None:
        return None
    try:
        _check_file_permissions(path, st)
    except ConfigError as e:
        return str(e)
    return None


def load_config(path: str = DEFAULT_CONFIG, *, tool: bool = False) -> Config:
    """Read and validate ``path`` and the snippets of the ``conf.d`` directory beside
    it, which override it (sssd.conf(5), "CONFIGURATION SNIPPETS FROM INCLUDE
    DIRECTORY"). Raises ConfigError with a message for the administrator. ``tool``:
    for a command other than the daemon's, which as a user skips the snippets only
    root may read."""
    warnings: list[str] = []
    ini, stats = read_files(path, warnings, tool=tool)
    return config_of(ini, stats, warnings)
