"""Distinguished names: parsing (RFC 4514) and a comparison key.

Used by the cache (its DN index) and by the LDAP backend (member DNs), so both agree
on when two spellings of a DN are the same entry.
"""

from __future__ import annotations

__all__ = ["first_rdn", "is_under", "normalize_dn", "split_dn"]


def split_dn(dn: str) -> list[tuple[str, str]]:
    """RDNs of a DN as (attribute lower-cased, value unescaped), honouring RFC 4514
    escapes (``\\,`` and ``\\2c``). A multi-valued RDN keeps its first AVA."""
    raw = dn.encode("utf-8")
    rdns: list[tuple[str, str]] = []
    attr: str | None = None
    tok = bytearray()
    skip = False  # inside the 2nd+ AVA of a multi-valued RDN
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x5C and i + 1 < n:  # backslash: \XX hex pair or an escaped character
            pair = raw[i + 1 : i + 3]
            if len(pair) == 2 and all(x in _HEX for x in pair):
                if not skip:
                    tok.append(int(pair, 16))
                i += 3
                continue
            if not skip:
                tok.append(raw[i + 1])
            i += 2
            continue
        if c == 0x3D and attr is None:  # '='
            attr = tok.decode("utf-8", errors="replace").strip().lower()
            tok = bytearray()
        elif c == 0x2B and attr is not None:  # '+'
            skip = True
        elif c == 0x2C:  # ','
            rdns.append((attr or "", tok.decode("utf-8", errors="replace").strip()))
            attr, tok, skip = None, bytearray(), False
        elif not skip:
            tok.append(c)
        i += 1
    if attr is not None or tok:
        rdns.append((attr or "", tok.decode("utf-8", errors="replace").strip()))
    return rdns


_HEX = frozenset(b"0123456789abcdefABCDEF")


def normalize_dn(dn: str) -> str:
    """A comparison key for DNs: attribute types and values lower-cased, no spaces
    around separators. Exact for the case-insensitive string attributes naming
    POSIX entries (uid, cn, ou, dc); DNs are compared, never printed, in this form."""
    key = _KEYS.get(dn)
    if key is None:
        if "\\" in dn or "+" in dn or '"' in dn:
            key = ",".join(f"{a}={_escape_value(v.lower())}" for a, v in split_dn(dn))
        else:
            # The common case, measured: member lists of a user in 2,000 groups hold
            # ~90,000 DNs, which the general parser takes 3 s to split.
            key = dn.lower()
            if " " in key:
                key = ",".join("=".join(x.strip() for x in p.split("=", 1)) for p in key.split(","))
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        _KEYS[dn] = key
    return key


def first_rdn(dn: str) -> tuple[str, str]:
    """The first RDN of ``dn``: (attribute lower-cased, value), without parsing the
    rest when the DN has no escapes."""
    if "\\" in dn or "+" in dn or '"' in dn:
        rdns = split_dn(dn)
        return rdns[0] if rdns else ("", "")
    attr, _, value = dn.split(",", 1)[0].partition("=")
    return attr.strip().lower(), value.strip()


# Member DNs repeat across groups (a user in 20 groups appears 20 times): memoise.
_KEYS: dict[str, str] = {}
_KEYS_MAX = 200_000


def _escape_value(v: str) -> str:
    # Re-escape the separators so that the key of "cn=a\\,b" differs from "cn=a,cn=b".
    return v.replace("\\", "\\5c").replace(",", "\\2c").replace("+", "\\2b")


def is_under(dn_key: str, base_key: str) -> bool:
    return not base_key or dn_key == base_key or dn_key.endswith("," + base_key)
