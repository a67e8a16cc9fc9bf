"""``ad_access_filter`` (sssd-ad(5); SSSD 2.8.2 ``ad_access.c`` ``ad_parse_access_filter``):
which of its filters applies to a domain.

The value is a list separated by ``?`` (empty entries dropped, each trimmed). An entry
is ``FILTER`` (any domain), ``DOM:<domain>:FILTER`` or ``<domain>:FILTER`` (one
domain), or ``FOREST:<forest>:FILTER`` (the domains of one forest); the filter after
a name must begin with ``(``. A malformed entry is skipped (SSSD: "at worst, the user
won't be allowed access"). Of the entries that name this domain or its forest, or
none, the most specific applies — a domain's over a forest's over a generic one — and
among equals the first. None applies: the filter rule denies everyone (SSSD's
``sdap_access_filter_send`` with no filter). A filter not in parentheses is put in
them (``sdap_get_access_filter``).
"""

from __future__ import annotations

GENERIC = 1
FOREST = 2
DOMAIN = 4


def _entry(text: str) -> tuple[int, str, str] | None:
    """(kind, name, filter) of one entry; None when it is malformed."""
    first = text.find(":")
    if first < 0:
        return GENERIC, "", text
    second = text.find(":", first + 1)
    if second < 0:
        kind, name, filt = DOMAIN, text[:first], text[first + 1 :]
    else:
        keyword = text[:first]
        # SSSD compares the keyword with strncmp over the keyword's own length, so a
        # prefix of DOM or FOREST (even an empty one) is taken for it.
        if "DOM".startswith(keyword):
            kind = DOMAIN
        elif "FOREST".startswith(keyword):
            kind = FOREST
        else:
            return None
        if second - first <= 1:
            return None  # no name between the colons
        rest = text[first + 1 :]
        colon = rest.find(":")
        name, filt = rest[:colon], rest[colon + 1 :]
    if not filt.startswith("("):
        return None
    return kind, name, filt


def applicable(value: str, domain: str, forest: str) -> str | None:
    """The filter of ``value`` that applies to ``domain`` (of ``forest``), in
    parentheses; None when none does."""
    best, best_kind = None, 0
    for raw in value.split("?"):
        text = raw.strip()
        if not text:
            continue
        parsed = _entry(text)
        if parsed is None:
            continue
        kind, name, filt = parsed
        if kind == DOMAIN and name.casefold() != domain.casefold():
            continue
        if kind == FOREST and name.casefold() != forest.casefold():
            continue
        if kind > best_kind:
            best, best_kind = filt, kind
    if best is None:
        return None
    return best if best.startswith("(") else f"({best})"
