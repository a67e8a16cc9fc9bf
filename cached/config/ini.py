"""sssd.conf syntax as SSSD's libini reads it (ding-libs ini_parse.c, called by sss_ini.c):
sections of ``option = value`` lines, comments, section names folded as confdb folds them,
later files overriding earlier ones. What the options mean is not this module's."""

from __future__ import annotations

import re

from cached.config.errors import ConfigError

# The option whose value is a secret: the files that set it are kept (their mode is
# checked), and its value is never shown.
SECRET_OPTION = "ldap_default_authtok"


class Ini:
    """The sections of a file (and, later, its snippets) as SSSD's libini reads them
    (sss_ini.c ``sss_ini_parse``: INI_PARSE_NOWRAP, INI_MV1S_OVERWRITE, sections merged),
    with the file that set each option, so a message names the file at fault."""

    def __init__(self, path: str) -> None:
        self.path = path  # the main file
        self.sections: dict[str, dict[str, str]] = {}  # in order of first appearance
        self.origin: dict[tuple[str, str], str] = {}  # (section, option) -> file
        self.section_origin: dict[str, str] = {}  # section -> file it first appeared in
        self.line: dict[tuple[str, str], int] = {}  # (section, option) -> its line there
        self.section_line: dict[str, int] = {}  # section -> its header's line there
        # Every file that set the bind password, not only the last (its mode is checked).
        self.secret_files: dict[str, set[str]] = {}  # section -> files
        self._folded: dict[str, str] = {}  # a section name case-folded -> its name here

    def canonical(self, name: str) -> str:
        """A section's name as this reader keeps it: SSSD's confdb stores a section as
        a case-insensitive ``cn``, so ``[NSS]`` is ``[nss]`` and ``[domain/LDAP]`` is
        ``[DOMAIN/ldap]``, and ``filter_users`` under ``[NSS]`` applies. The kind
        (``nss``, ``domain/``...) is lower-cased; a domain's name keeps the spelling it
        first had."""
        kind, slash, rest = name.partition("/")
        return self._folded.setdefault(name.lower(), kind.lower() + slash + rest)

    def where(self, section: str, option: str | None = None) -> str:
        """The file that set ``option`` of ``section`` (or that holds the section)."""
        if option is not None and (section, option) in self.origin:
            return self.origin[(section, option)]
        return self.section_origin.get(section, self.path)

    def located(self, section: str, option: str | None = None) -> str:
        """``file:line`` of what ``where`` names (``cached config-check``)."""
        line = self.line.get((section, option)) if option else self.section_line.get(section)
        return f"{self.where(section, option)}:{line}" if line else self.where(section, option)

    # `option = value`. Only `=`, as libini ("Equal sign is missing"): with `:` too, a
    # wrapped `ldaps://host` line would be an option `ldaps`.
    _OPTION = re.compile(r"(?P<key>[^=]*?)\s*=\s*(?P<value>.*)")

    def read(self, text: str, path: str, warnings: list[str]) -> None:
        """Add the sections of ``text`` (the file ``path``); what it sets overrides
        what an earlier file set. Every line stands alone, as in libini: leading blanks
        are dropped, and an indented line is never a continuation of the one before.
        The one exception is libini's C comment: ``/*`` in the first column to a line
        ending in ``*/`` (_ends_c_comment); ``//`` there comments out its line."""
        current: str | None = None
        header_line: dict[str, int] = {}  # in this file
        option_line: dict[tuple[str, str], int] = {}
        # A leading byte-order mark is no part of the first line (editors on other
        # systems write one). Lines end at "\n" only, as libini's: str.splitlines()
        # also ends one at a form feed, a vertical tab, U+2028..., which would make an
        # option of the rest of a comment (`# retired<FF>ldap_tls_reqcert = never`
        # would turn certificate checks off for cached only).
        comment_from = 0  # the line of an open `/*`
        for lineno, raw_line in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
            if comment_from:
                if _ends_c_comment(raw_line, 2):
                    comment_from = 0
                continue
            if raw_line.startswith(("//", "/*")):
                # C comments, which libini reads as SSSD calls it (no
                # INI_PARSE_NO_C_COMMENTS): only from the line's first column, as
                # there; an indented one is an `option = value` line in both.
                if raw_line.startswith("/*") and not _ends_c_comment(raw_line, 3):
                    comment_from = lineno
                continue
            line = raw_line.strip()
            if not line or line[0] in "#;":
                continue
            if line[0] == "[":
                name = line[1:-1].strip() if line.endswith("]") else ""
                if not name:
                    raise ConfigError(
                        f"{path}: line {lineno}: cannot parse {line!r}: a section header "
                        "is `[name]`"
                    )
                name = self.canonical(name)
                if name in header_line:
                    warnings.append(
                        f"{path}: line {lineno}: section [{name}] appears again (first at "
                        f"line {header_line[name]}); its options are merged, as SSSD does"
                    )
                header_line.setdefault(name, lineno)
                self.sections.setdefault(name, {})
                if name not in self.section_origin:
                    self.section_origin[name] = path
                    self.section_line[name] = lineno
                current = name
                continue
            m = self._OPTION.fullmatch(line)
            if m is None or not m["key"]:
                raise ConfigError(
                    f"{path}: line {lineno}: cannot parse {line!r}: expected "
                    "`option = value`, a `[section]` header or a `#` comment"
                )
            if current is None:
                raise ConfigError(f"{path}: line {lineno}: option outside any section: {line!r}")
            key = m["key"].lower()
            if (current, key) in option_line:
                warnings.append(
                    f"{path}: line {lineno}: [{current}] option {key!r} is set again (first "
                    f"at line {option_line[(current, key)]}); the last value is used, as "
                    "SSSD does"
                )
            option_line[(current, key)] = lineno
            self.sections[current][key] = m["value"]
            self.origin[(current, key)] = path
            self.line[(current, key)] = lineno
            if key == SECRET_OPTION and m["value"]:
                self.secret_files.setdefault(current, set()).add(path)
        if comment_from:
            # SSSD refuses the file ("Incomplete comment at the end of the file").
            raise ConfigError(
                f"{path}: line {comment_from}: the comment opened by `/*` is never closed: "
                "SSSD ends one only at a line ending in `*/` with something before the `*/` "
                "on that line (a line of just `*/` does not end it)"
            )


# libini (ding-libs ini_parse.c, check_for_comment): a line ends a C comment when its
# last non-blank characters are `*/` with the `/` at index 2 or more (on the opening
# line 3 or more, so `/*/` opens one and `/**/` is whole). SSSD 2.8.2's `sssctl
# config-check` accepts `/* a` then ` b */` and refuses `/*` then `*/`.
_BLANKS = " \t\n\v\f\r"  # C isspace() in the C locale


def _ends_c_comment(raw_line: str, least: int) -> bool:
    """Whether ``raw_line`` closes a C comment: it ends in ``*/`` (blanks after it
    aside) whose ``/`` is at index ``least`` or more, counting leading blanks."""
    line = raw_line.rstrip(_BLANKS)
    return line.endswith("*/") and len(line) - 1 >= least
