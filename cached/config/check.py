"""``cached config-check`` (SSSD's ``sssctl config-check``): every line of a
configuration and its snippets with what loading does with it (loads, ignored and why,
refused and why) and where it is (file:line), so an administrator can try an sssd.conf
before switching. The verdicts are the loader's own (load.judge, load.config_of):
nothing here decides what an option means."""

from __future__ import annotations

from dataclasses import dataclass

from cached.config.errors import ConfigError
from cached.config.ini import SECRET_OPTION, Ini
from cached.config.load import (
    IGNORED,
    LOADS,
    REFUSED,
    check_file_permissions,
    config_of,
    judge,
    read_files,
)
from cached.config.options import (
    DAEMON_OPTIONS,
    DOMAIN_OPTIONS,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    Option,
)
from cached.config.parsers import str_list
from cached.config.sssd import IGNORED_SECTIONS, enabled_domains


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``where`` is ``file:line``, ``kind`` LOADS, IGNORED or
    REFUSED, ``text`` what and why."""

    where: str
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.text}"


@dataclass(frozen=True)
class Report:
    findings: list[Finding]
    # What loading the whole file adds: warnings not already said of one line, and the
    # refusal of a combination of options (checked only once every line loads).
    warnings: list[str]

    @property
    def refused(self) -> bool:
        return any(f.kind == REFUSED for f in self.findings)

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.findings)

    def lines(self) -> list[str]:
        out = [str(f) for f in self.findings]
        out += [f"warning: {w}" for w in self.warnings]
        verdict = (
            "cached would not start with this configuration"
            if self.refused
            else "cached would start with this configuration"
        )
        out.append(
            f"{self.count(LOADS)} load, {self.count(IGNORED)} ignored, "
            f"{self.count(REFUSED)} refused: {verdict}"
        )
        return out


def _shown(name: str, raw: str) -> str:
    return "'********'" if name == SECRET_OPTION and raw.strip() else repr(raw.strip())


def _options(ini: Ini, section: str, table: dict[str, Option]) -> list[Finding]:
    out = []
    for name, raw in ini.sections[section].items():
        v = judge(section, name, raw, table)
        where = ini.located(section, name)
        what = f"[{section}] {name} = {_shown(name, raw)}"
        if v.kind == LOADS:
            text = what + (f" ({v.message})" if v.message else "")
        elif v.kind == IGNORED and not v.warn:
            text = f"{what}: {v.message}"
        else:
            text = v.message
        out.append(Finding(where, v.kind, text))
    return out


def _served_domains(ini: Ini, main: str) -> list[str]:
    """The domain names the loader serves, as it computes them (enabled_domains)."""
    domain_sections = {s[len("domain/") :]: s for s in ini.sections if s.startswith("domain/")}
    try:
        listed = str_list(ini.sections[main].get("domains", ""))
        names = enabled_domains(ini, main, listed, domain_sections)
    except ConfigError:
        return []  # judged on its line
    return [n.lower() for n in names]


def _sections(ini: Ini) -> list[Finding]:
    out: list[Finding] = []
    mains = [s for s in ini.sections if s in ("cached", "sssd")]
    main = mains[0] if mains else ""
    served = _served_domains(ini, main) if main else []
    for s in ini.sections:
        where = ini.located(s)
        if s in mains:
            out += _options(ini, s, DAEMON_OPTIONS)
        elif s == "nss":
            out += _options(ini, s, NSS_OPTIONS)
        elif s == "pam":
            out += _options(ini, s, PAM_OPTIONS)
        elif s == "ssh":
            out += _options(ini, s, SSH_OPTIONS)
        elif s == "sudo":
            out += _options(ini, s, SUDO_OPTIONS)
        elif s.startswith("domain/") and s[len("domain/") :].lower() in served:
            out += _options(ini, s, DOMAIN_OPTIONS)
        elif s.startswith("domain/"):
            # The loader's words, so that its warning is not said twice.
            out.append(
                Finding(where, IGNORED, f"[{s}] is not listed in [{main}] domains; ignored")
            )
        elif s.startswith("application/"):
            out.append(
                Finding(where, IGNORED, f"[{s}]: application domains are not served over NSS")
            )
        elif s in IGNORED_SECTIONS:
            out.append(
                Finding(where, IGNORED, f"[{s}]: configures an SSSD responder cached does not have")
            )
        else:
            out.append(Finding(where, IGNORED, f"unknown section [{s}] is ignored"))
    return out


def check_config(path: str, *, tool: bool = True) -> Report:
    """The report on ``path`` and its snippets. Raises ConfigError only when the file
    cannot be read or parsed at all."""
    warnings: list[str] = []
    ini, stats = read_files(path, warnings, tool=tool, permissions=False)
    findings: list[Finding] = []
    problem = check_file_permissions(path, stats.get(path))
    if problem is not None:
        findings.append(Finding(path, REFUSED, problem.removeprefix(f"{path}: ")))
    findings += _sections(ini)
    load_warnings = list(warnings)
    try:
        config_of(ini, stats, load_warnings)
    except ConfigError as e:
        if not any(f.kind == REFUSED and f.text in str(e) for f in findings):
            findings.append(Finding(path, REFUSED, str(e).removeprefix(f"{path}: ")))
    said = [f.text for f in findings]
    extra = [w for w in load_warnings if not any(t in w for t in said)]
    return Report(findings, extra)
