"""Distinguished names: parsing (RFC 4514) and a comparison key.

Used by the cache (its DN index) and by the LDAP backend (member DNs), so both agree
on when two spellings of a DN are the same entry. Member values are written by
people: ``UID=Alice,OU=People,…``, ``cn=Smith\\, John,…``, ``cn="Smith, John",…``
(RFC 2253's quoting), ``uid=mvx+cn=Max,…`` (multi-valued RDN, in any AVA order),
``uid=m\\c3\\bcller`` for ``uid=müller`` — all name the same entry as the DN the
server returns for it, and all get the same key here (docs/compatibility.md §9.5).
"""

from __future__ import annotations

import unicodedata
from itertools import filterfalse

__all__ = ["ALIASED_TYPES", "in_scope", "is_under", "normalize_dn", "normalize_dns", "rdn_avas"]

# Attribute type names and OIDs of the attributes naming POSIX entries (RFC 4519), so
# ``commonName=x`` and ``2.5.4.3=x`` key like ``cn=x``.
_TYPE_ALIASES = {
    "commonname": "cn",
    "2.5.4.3": "cn",
    "userid": "uid",
    "0.9.2342.19200300.100.1.1": "uid",
    "organizationalunitname": "ou",
    "2.5.4.11": "ou",
    "organizationname": "o",
    "2.5.4.10": "o",
    "domaincomponent": "dc",
    "0.0.9.2342.19200300.100.1.25": "dc",
    "0.9.2342.19200300.100.1.25": "dc",
}


def _type(raw: str) -> str:
    t = raw.strip().lower()
    if t.startswith("oid."):
        t = t[4:]
    return _TYPE_ALIASES.get(t, t)


def _parse(dn: str) -> list[list[tuple[str, str]]]:
    """RDNs of a DN, each a list of AVAs (attribute type lower-cased, value unescaped),
    honouring RFC 4514 escapes (``\\,``, ``\\2c``) and RFC 2253 quoted values."""
    raw = dn.encode("utf-8", errors="surrogateescape")
    rdns: list[list[tuple[str, str]]] = []
    avas: list[tuple[str, str]] = []
    attr: str | None = None
    tok = bytearray()
    quoted = False
    i, n = 0, len(raw)

    def value() -> str:
        return tok.decode("utf-8", errors="replace").strip()

    while i < n:
        c = raw[i]
        if c == 0x5C and i + 1 < n:  # backslash: \XX hex pair or an escaped character
            pair = raw[i + 1 : i + 3]
            if len(pair) == 2 and all(x in _HEX for x in pair):
                tok.append(int(pair, 16))
                i += 3
                continue
            tok.append(raw[i + 1])
            i += 2
            continue
        if c == 0x22 and attr is not None:  # '"': RFC 2253 quoted value
            quoted = not quoted
        elif quoted:
            tok.append(c)
        elif c == 0x3D and attr is None:  # '='
            attr = _type(tok.decode("utf-8", errors="replace"))
            tok = bytearray()
        elif c == 0x2B and attr is not None:  # '+': next AVA of a multi-valued RDN
            avas.append((attr, value()))
            attr, tok = None, bytearray()
        elif c in (0x2C, 0x3B):  # ',' (and ';', RFC 2253's alternative)
            avas.append((attr or "", value()))
            rdns.append(avas)
            avas, attr, tok = [], None, bytearray()
        else:
            tok.append(c)
        i += 1
    if attr is not None or tok or avas:
        avas.append((attr or "", value()))
        rdns.append(avas)
    return rdns


def rdn_avas(dn: str) -> list[tuple[str, str]]:
    """Every AVA of the first RDN: [(attribute lower-cased, value), ...]."""
    if "\\" not in dn and "+" not in dn and '"' not in dn:
        attr, _, value = dn.split(",", 1)[0].partition("=")
        return [(_type(attr), value.strip())]
    rdns = _parse(dn)
    return rdns[0] if rdns else []


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _fold(value: str) -> str:
    """caseIgnoreMatch as RFC 4518 prepares strings: case folded, NFKC, insignificant
    spaces collapsed. Exact for the attributes naming POSIX entries (uid, cn, ou, dc
    are all caseIgnore)."""
    return " ".join(unicodedata.normalize("NFKC", value.casefold()).split())


def _escape_value(v: str) -> str:
    # Re-escape the separators so that the key of "cn=a\\,b" differs from "cn=a,cn=b".
    return v.replace("\\", "\\5c").replace(",", "\\2c").replace("+", "\\2b").replace("=", "\\3d")


def normalize_dn(dn: str) -> str:
    """A comparison key for DNs: attribute types by their short name, values case
    folded (RFC 4518), escapes and quotes resolved, the AVAs of a multi-valued RDN
    sorted, no spaces around separators. DNs are compared, never printed, in this form."""
    key = _KEYS.get(dn)
    if key is None:
        if dn.isascii() and "\\" not in dn and "+" not in dn and '"' not in dn and ";" not in dn:
            # The common case, measured: member lists of a user in 2,000 groups hold
            # ~90,000 DNs, which the general parser takes 3 s to split.
            parts = []
            for p in dn.lower().split(","):
                a, _, v = p.partition("=")
                a = a.strip()
                v = v.strip()
                if "  " in v:
                    v = " ".join(v.split())
                if "=" in v:
                    v = v.replace("=", "\\3d")
                parts.append(f"{_TYPE_ALIASES.get(a, a)}={v}")
            key = ",".join(parts)
        else:
            key = ",".join(
                "+".join(sorted(f"{a}={_escape_value(_fold(v))}" for a, v in avas))
                for avas in _parse(dn)
            )
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        _KEYS[dn] = key
    return key


# Member DNs repeat across groups (a user in 20 groups appears 20 times): memoise.
_KEYS: dict[str, str] = {}
_KEYS_MAX = 200_000

# DNs that are their own key: every RDN one ``type=value`` with nothing normalize_dn's
# fast path changes — no upper case, no space or other control character to strip
# or collapse, no ``=`` in the value, no escape, quote, ``+`` or ``;`` (the general
# parser's), and a type that is no alias of _TYPE_ALIASES. Checked on many DNs at
# once, each condition a pass in C over their text (a regular expression took 80
# instructions a character).
_PLAIN = bytes(
    c for c in range(0x21, 0x7F) if chr(c) not in '\\+";=,' and not chr(c).isupper()
)  # the characters such an RDN may hold, but for its "=" and its separator
_ALIASED = tuple(f",{a}=" for a in _TYPE_ALIASES)
# The RDN types normalize_dn replaces: a DN with one of them is no own key (also read
# in C, cached/ldap/_ber.c's key_new).
ALIASED_TYPES = tuple(_TYPE_ALIASES)


def _own_keys(dns: list[str]) -> bool:
    """Is each of ``dns`` its own normalize_dn key? They are joined by commas: a DN
    with an empty RDN (a comma at either end, two together, or none at all) leaves
    an empty RDN in the text, which fails as an RDN of its own would."""
    text = ",".join(dns)
    if not text.isascii():
        return False  # the general parser's (and not for encode(): a lone surrogate)
    # Without the plain characters, what is left must be the "=" and "," of RDNs of
    # one "=" each: "=,=,…,=". Anything else left is a character normalize_dn changes.
    marks = text.encode().translate(None, _PLAIN)
    if len(marks) % 2 == 0 or marks[::2].strip(b"=") or marks[1::2].strip(b","):
        return False
    rdns = "," + text
    return not any(a in rdns for a in _ALIASED)


def normalize_dns(dns: list[str]) -> list[str]:
    """normalize_dn of each DN, memoised the same way. Member values as directories
    write them are usually their own key (``uid=user00042,ou=people,dc=example``): the
    DNs not memoised yet are checked together (_own_keys), and such DNs are their own
    answer; any others take normalize_dn. Its parse of each of the 7,000 new member
    values of a cold initgroups of bigroupuser cost 19,000 instructions per value;
    the check, 900 (valgrind)."""
    memo = _KEYS
    new = list(filterfalse(memo.__contains__, dns))
    if not new:
        return list(map(memo.__getitem__, dns))
    if len(memo) + len(new) <= _KEYS_MAX and _own_keys(new):
        memo.update(zip(new, new, strict=True))
        return list(map(memo.__getitem__, dns))
    return [normalize_dn(dn) for dn in dns]


def is_under(dn_key: str, base_key: str) -> bool:
    return not base_key or dn_key == base_key or dn_key.endswith("," + base_key)


def in_scope(dn_key: str, base_key: str, scope: str) -> bool:
    """Is the entry with key ``dn_key`` inside a search of ``base_key`` with ``scope``
    ("base", "one" or "sub"; both keys from :func:`normalize_dn`)?"""
    if scope == "base":
        return dn_key == base_key
    if scope == "one":
        # Keys escape a comma inside a value (\2c), so a bare ',' separates RDNs.
        if not base_key:
            return dn_key != "" and "," not in dn_key
        return dn_key.endswith("," + base_key) and "," not in dn_key[: -len(base_key) - 1]
    return is_under(dn_key, base_key)


def split_rdns(dn: str) -> list[str]:
    """A DN's RDNs as written (escapes and quoting kept), first the leftmost: the
    parents of ``dn`` are ``",".join(rdns[i:])``. Commas inside RFC 4514 escapes and
    RFC 2253 quoted values do not split."""
    rdns: list[str] = []
    start = 0
    quoted = False
    i, n = 0, len(dn)
    while i < n:
        c = dn[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c in ",;" and not quoted:
            rdns.append(dn[start:i].strip())
            start = i + 1
        i += 1
    if dn[start:].strip():
        rdns.append(dn[start:].strip())
    return rdns
