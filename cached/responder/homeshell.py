"""The home directory and login shell a user is answered with: the directory's, or what
sssd.conf's home and shell options make of them, as SSSD's NSS responder computes them
(nss_protocol_pwent.c ``sss_nss_get_homedir_override``, responder_utils.c
``sss_resp_get_shell_override``, sss_nss.c ``expand_homedir_template``). Pure: the
caller reads /etc/shells (``read_etc_shells``) once, as SSSD does at its start."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from cached.config import DomainConfig, NssConfig

# SSSD's NOLOGIN_SHELL (configure's --with-nologin-shell default), answered for a shell
# that is neither in /etc/shells nor allowed.
NOLOGIN_SHELL = "/sbin/nologin"

ETC_SHELLS = "/etc/shells"
_SHELL_LINE = re.compile(r"[^#/]*(/[^#\s]*)")


def read_etc_shells(path: str = ETC_SHELLS) -> frozenset[str]:
    """The shells of /etc/shells as glibc's getusershell() lists them (initshells):
    on each line, from the first ``/`` before any ``#`` up to a blank or ``#``; glibc's
    own two when the file is missing."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return frozenset(("/bin/sh", "/bin/csh"))
    return frozenset(m[1] for line in lines if (m := _SHELL_LINE.match(line)))


def expand_homedir(
    template: str, name: str, uid: int, domain: str, original: str, substring: str
) -> str:
    """``template`` with its ``%`` sequences expanded (the config loader has refused
    any other: parsers.homedir_template): ``name`` is the user's short name as answered
    (lower-cased in a case-insensitive domain, never qualified), ``original`` the
    directory's home directory ("" when it has none)."""
    out: list[str] = []
    i = 0
    while (j := template.find("%", i)) >= 0:
        out.append(template[i:j])
        key = template[j + 1 : j + 2]
        if key == "u":
            out.append(name)
        elif key == "U":
            out.append(str(uid))
        elif key == "d":
            out.append(domain)
        elif key == "f":
            out.append(f"{name}@{domain}")
        elif key == "l":
            out.append(name[:1])
        elif key == "o":
            out.append(original)
        elif key == "h":
            out.append(original.lower())
        elif key == "H":
            out.append(substring)
        elif key == "%":
            out.append("%")
        else:  # refused when the configuration loaded
            raise ValueError(f"unknown home directory template %{key} in {template!r}")
        i = j + 2
    out.append(template[i:])
    return "".join(out)


@dataclass(frozen=True)
class HomeShell:
    """One domain's home and shell options, the domain's own before [nss]'s."""

    domain: str
    override_homedir: str
    fallback_homedir: str
    substring: str
    override_shell: str
    default_shell: str
    allowed_shells: tuple[str, ...]
    vetoed_shells: frozenset[str]
    shell_fallback: str
    etc_shells: frozenset[str]

    @classmethod
    def of(
        cls, domain: DomainConfig, nss: NssConfig, etc_shells: Iterable[str] = ()
    ) -> HomeShell:
        return cls(
            domain=domain.name,
            override_homedir=domain.override_homedir or nss.override_homedir,
            fallback_homedir=domain.fallback_homedir or nss.fallback_homedir,
            substring=domain.homedir_substring or nss.homedir_substring,
            override_shell=domain.override_shell or nss.override_shell,
            default_shell=domain.default_shell or nss.default_shell,
            allowed_shells=tuple(nss.allowed_shells),
            vetoed_shells=frozenset(nss.vetoed_shells),
            shell_fallback=nss.shell_fallback,
            etc_shells=frozenset(etc_shells),
        )

    @staticmethod
    def needs_etc_shells(nss: NssConfig) -> bool:
        """SSSD looks at /etc/shells only when a shell may be refused."""
        return bool(nss.allowed_shells or nss.vetoed_shells)

    @property
    def changes_nothing(self) -> bool:
        """No option set: every user is answered with the directory's values, but for
        a home directory holding a template (which SSSD expands: ``home``)."""
        return not (
            self.override_homedir
            or self.fallback_homedir
            or self.override_shell
            or self.default_shell
            or self.allowed_shells
            or self.vetoed_shells
        )

    def home(self, name: str, uid: int, original: str) -> str:
        """SSSD's order: override_homedir; for an empty home directory
        fallback_homedir; else the directory's, itself expanded as a template (SSSD
        expands what the provider returns too, and answers "" when that fails)."""
        if self.override_homedir:
            template = self.override_homedir
        elif not original and self.fallback_homedir:
            template = self.fallback_homedir
        elif "%" not in original:
            return original
        else:
            template = original
        try:
            return expand_homedir(template, name, uid, self.domain, original, self.substring)
        except ValueError:
            return ""

    def shell(self, original: str) -> str:
        """SSSD's order: override_shell; for none default_shell; then, when
        allowed_shells or vetoed_shells is set: a vetoed shell is shell_fallback, one
        in /etc/shells stays, an allowed one (or any, with ``*`` first) is
        shell_fallback, any other /sbin/nologin."""
        if self.override_shell:
            return self.override_shell
        if not original:
            return self.default_shell
        if not (self.allowed_shells or self.vetoed_shells):
            return original
        if original in self.vetoed_shells:
            return self.shell_fallback
        if original in self.etc_shells:
            return original
        if self.allowed_shells and (
            self.allowed_shells[0] == "*" or original in self.allowed_shells
        ):
            return self.shell_fallback
        return NOLOGIN_SHELL
