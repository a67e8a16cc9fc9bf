"""Text from outside (a directory entry, a name a local user asked for) made safe to
print on one line: a log line, a line of ``cached status``.

A name is data a directory writer or any local user chooses (docs/threat-model.md,
"Directory entries"): with a newline in it a log line written to the journal becomes
two, the second one a forged ``cached[...] ERROR ...`` line of the writer's choosing;
an ANSI escape rewrites the administrator's terminal; a bidirectional override shows
``resu`` for ``user``. Each such character is written as its Python escape
(``\\n``, ``\\x1b``, ``\\u202e``), as ``repr`` would, and nothing else changes: a
printable name, including any letter of any script, prints as it is.
"""

from __future__ import annotations

import logging
import unicodedata

# Cc: C0 and C1 controls and DEL (newline, carriage return, ESC, NUL). Cf: format
# characters, among them the bidirectional overrides and isolates (U+202A-202E,
# U+2066-2069) and the zero-width ones that make two names look alike. Zl, Zp: the
# line and paragraph separators some terminals and log viewers break lines at. Cs:
# lone surrogates (bytes a name decoded with surrogateescape would carry).
_UNSAFE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


class _Table(dict[int, str]):
    """``str.translate`` table built as characters are met: a name of 10,000 code
    points costs one category lookup for each new one, not one for each character."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        out = _escape(ch) if unicodedata.category(ch) in _UNSAFE or ch == "\\" else ch
        self[code] = out
        return out


# Backslashes are escaped too, so that ``a\nb`` (four characters in the directory)
# and ``a<newline>b`` (three) print differently.
_TABLE = _Table()


def printable(text: object) -> str:
    """``text`` (``str()`` of it) on one line, its unsafe characters escaped."""
    s = str(text)
    if s.isprintable() and "\\" not in s:  # the usual case: one C-level scan
        return s
    return s.translate(_TABLE)


class Formatter(logging.Formatter):
    """A log formatter escaping the *message* (format and arguments), so that one log
    call is one line whatever the names in it. A traceback, added after the message,
    keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)
