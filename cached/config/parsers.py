"""Value parsers: each takes the raw string of an option and returns its value, or
raises ValueError with a short description of what was expected (the loader adds the
file, section, option and value). ``NotSupported`` marks a value SSSD accepts and cached
does not. No parser knows an option's name: options.py pairs them."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

E = TypeVar("E", bound=enum.StrEnum)


class NotSupported(ValueError):
    """A value SSSD accepts that cached does not support: the message says why and
    what to write instead (reported as "is not supported", never "is invalid")."""


def boolean(raw: str) -> bool:
    # SSSD's ini parser accepts true/false case-insensitively; yes/no/1/0 are common in
    # hand-written files, so accept them as well.
    v = raw.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A decimal integer within ``lo``..``hi`` (inclusive; None: unbounded)."""

    def parse(raw: str) -> int:
        try:
            v = int(raw.strip(), 10)
        except ValueError:
            raise ValueError("expected an integer") from None
        if lo is not None and v < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and v > hi:
            raise ValueError(f"must be at most {hi}")
        return v

    return parse


_DELTA_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def krb5_delta(raw: str) -> int:
    """A Kerberos time span as SSSD's ``krb5_lifetime`` takes it: seconds, or numbers
    each followed by ``s``, ``m``, ``h`` or ``d`` (``1d12h``)."""
    text = raw.strip().lower()
    if text.isdigit():
        return int(text)
    m = re.fullmatch(r"(?:\d+[smhd])+", text)
    if not m:
        raise ValueError("expected seconds, or numbers with s, m, h or d (e.g. 10h, 1d12h)")
    return sum(int(n) * _DELTA_UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))


# SSSD's pam_response_filter when unset (pamsrv_cmd.c filter_responses): a ccache
# name is not handed to sudo's PAM stack.
RESPONSE_FILTER_DEFAULTS = ("ENV:KRB5CCNAME:sudo", "ENV:KRB5CCNAME:sudo-i")


def response_filter(raw: str) -> list[str]:
    """``pam_response_filter``: replaces SSSD's defaults, or, when every item starts
    with ``+`` or ``-``, adds to them or removes from them (SSSD's mod_defaults_list)."""
    items = str_list(raw)
    prefixed = [i[0] in "+-" for i in items]
    if any(prefixed) and not all(prefixed):
        raise ValueError("either every item starts with + or -, or none does (SSSD's rule)")
    if items and not any(prefixed):
        return items
    out = list(RESPONSE_FILTER_DEFAULTS)
    for item in items:
        name = item[1:].strip()
        if item[0] == "+" and name not in out:
            out.append(name)
        elif item[0] == "-" and name in out:
            out.remove(name)
    return out


def ccname_template(raw: str) -> str:
    """``krb5_ccname_template``: an absolute ``FILE:`` path with only the expansions
    cached makes (``cached/kerberos/ccache.py``: ``%u %U %p %r %h %d %%``)."""
    template = raw.strip()
    if not template.startswith("FILE:"):
        raise ValueError(
            "cached writes FILE: caches only (DIR:, KEYRING: and KCM: are not implemented)"
        )
    for m in re.finditer(r"%(.?)", template):
        if m.group(1) not in tuple("uUprhd%"):
            raise ValueError(f"unknown expansion {m.group(0)!r} (known: %u %U %p %r %h %d %%)")
    path = template[5:]
    if not (path.startswith("/") or path.startswith("%d") or path.startswith("%h")):
        raise ValueError("the path must be absolute")
    return template


def string(raw: str) -> str:
    return raw.strip()


def str_list(raw: str) -> list[str]:
    """A comma-separated list; empty items are dropped."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def space_list(raw: str) -> list[str]:
    """A space-separated list (SSSD's ldap_sudo_hostnames, ldap_sudo_ip)."""
    return raw.split()


def closed(
    kind: type[E], why: Mapping[str, str] | None = None, expected: str = ""
) -> Callable[[str], E]:
    """One member of ``kind``, by its value, case-insensitively. An SSSD value in
    ``why`` is refused as not supported, with its reason; anything else is invalid,
    ``expected`` (default: "one of" the values in declaration order) saying what to
    write."""
    unsupported = dict(why or {})
    expect = expected or "one of " + ", ".join(m.value for m in kind)

    def parse(raw: str) -> E:
        v = raw.strip().lower()
        try:
            return kind(v)
        except ValueError:
            pass
        if v in unsupported:
            raise NotSupported(unsupported[v])
        raise ValueError("expected " + expect)

    return parse


def not_supported(choices: tuple[str, ...], why: dict[str, str]) -> Callable[[str], str]:
    """One of ``choices``; an SSSD value in ``why`` is refused with its reason."""

    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v in choices:
            return v
        if v in why:
            raise NotSupported(why[v])
        raise ValueError("expected one of " + ", ".join(choices))

    return parse


def uri_list(raw: str) -> list[str]:
    uris = str_list(raw)
    for uri in uris:
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme not in ("ldap", "ldaps", "ldapi"):
            raise ValueError(f"{uri!r} is not an ldap://, ldaps:// or ldapi:// URI")
    return uris


def provider(raw: str) -> str:
    """``ldap`` or ``ad``; SSSD's other providers are refused, each saying what to do
    instead."""
    v = raw.strip().lower()
    if v in ("files", "proxy", "ipa", "krb5", "local"):
        raise NotSupported(
            {
                "files": "SSSD's files provider serves /etc/passwd and /etc/group, which "
                "glibc's own `files` module answers (keep `files` before `sss` in "
                "nsswitch.conf); remove this domain from `domains`",
                "ipa": "cached has no IPA provider (HBAC, views, trusts); it supports "
                "`id_provider = ldap` (and `ad`), with which an IPA server's users and "
                "groups can be read as rfc2307bis",
            }.get(v, f"cached has no {v} provider; it supports `id_provider = ldap` and `ad`")
        )
    if v not in ("ldap", "ad"):
        raise ValueError("expected one of ldap, ad")  # as the other closed sets say it
    return v


def domain_sid(raw: str) -> str:
    v = raw.strip()
    parts = v.split("-")
    if v and (len(parts) < 4 or parts[0].upper() != "S" or not all(p.isdigit() for p in parts[1:])):
        raise ValueError("expected a domain SID such as S-1-5-21-1-2-3")
    return v


@dataclass(frozen=True)
class SearchBase:
    """One search base of SSSD's ``base?scope?filter`` syntax (sssd-ldap(5))."""

    dn: str
    scope: str = "sub"  # "base" | "one" | "sub"
    filter: str = ""  # with its parentheses, or ""


_SCOPES = {"": "sub", "sub": "sub", "subtree": "sub", "one": "one", "onelevel": "one",
           "base": "base"}  # fmt: skip


def parse_search_bases(raw: str) -> tuple[SearchBase, ...]:
    """SSSD's search-base syntax (``common_parse_search_base``): a plain DN, or
    ``base?scope?filter`` repeated (``b1?subtree?(f1)?b2?onelevel?``); scope
    ``base``, ``onelevel`` (``one``) or ``subtree`` (``sub``, the default when
    empty); a filter without parentheses gets them. Empty: no base (the root DSE's)."""
    raw = raw.strip()
    if not raw:
        return ()
    parts = raw.split("?")
    if len(parts) == 1:
        return (SearchBase(raw),)
    if len(parts) % 3:
        raise ValueError(
            "expected a DN or base?scope?filter (several separated by '?'): "
            f"{len(parts)} '?'-separated fields is not a multiple of 3"
        )
    out = []
    for i in range(0, len(parts), 3):
        dn, scope, filt = parts[i].strip(), parts[i + 1].strip().lower(), parts[i + 2].strip()
        if not dn or "=" not in dn:
            raise ValueError(f"base {i // 3 + 1}: {dn!r} is not a DN")
        if scope not in _SCOPES:
            raise ValueError(
                f"base {i // 3 + 1}: unknown scope {parts[i + 1]!r}; "
                "expected base, onelevel or subtree"
            )
        try:
            filt = search_filter(filt)
        except ValueError as e:
            raise ValueError(f"base {i // 3 + 1}: {e}") from None
        out.append(SearchBase(dn, _SCOPES[scope], filt))
    return tuple(out)


def search_filter(raw: str) -> str:
    """An LDAP filter, parenthesised as the filters of search bases are."""
    filt = raw.strip()
    if filt and not filt.startswith("("):
        filt = f"({filt})"
    depth = 0
    for ch in filt:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth != 0:
        raise ValueError(f"filter {filt!r} has unbalanced parentheses")
    return filt


def search_base(raw: str) -> str:
    """A search base as written (the backend splits it with parse_search_bases),
    checked here so that an error names the option."""
    parse_search_bases(raw)
    return raw.strip()


# ---------------------------------------------------------------------------
# Home directory templates (override_homedir, fallback_homedir): SSSD's
# expand_homedir_template (src/util/sss_nss.c) expands these and fails on any other
# `%` sequence, answering an empty home directory for every user; cached refuses such
# a template when it loads instead.
HOMEDIR_TEMPLATE_KEYS = "uUdflohH%"

# Expansions SSSD has that need what cached does not keep: with them SSSD answers an
# empty home directory for every user of an LDAP domain that lacks the value.
_HOMEDIR_NOT_SUPPORTED = {
    "P": "cached does not read users' principal names (%P, the UPN); write the home "
    "directory without it, e.g. /home/%d/%u",
    "F": "an LDAP domain has no flat (NetBIOS) name, so SSSD answers an empty home "
    "directory for %F; write the home directory without it, e.g. /home/%d/%u",
}


def homedir_template(raw: str) -> str:
    """A home directory template: ``%`` followed by one of u U d f l o h H %."""
    value = raw.strip()
    i = 0
    while (i := value.find("%", i)) >= 0:
        key = value[i + 1 : i + 2]
        if not key:
            raise ValueError("a single % at the end (write %% for a percent sign)")
        if key in _HOMEDIR_NOT_SUPPORTED:
            raise NotSupported(_HOMEDIR_NOT_SUPPORTED[key])
        if key not in HOMEDIR_TEMPLATE_KEYS:
            raise ValueError(
                f"unknown template %{key} (known: "
                + " ".join(f"%{k}" for k in HOMEDIR_TEMPLATE_KEYS)
                + ")"
            )
        i += 2
    return value


# ---------------------------------------------------------------------------
# full_name_format: SSSD formats a qualified name with printf(3) and three string
# arguments (sss_names.c sss_fqname): %1$s the name, %2$s the domain, %3$s the flat
# name (for an LDAP domain its name, calc_flat_name). Anything else printf would read
# (another conversion, an argument that is not there) is refused.
_NAME_FORMAT = ("%1$s", "%2$s", "%3$s", "%%")


def name_format(raw: str) -> str:
    """A full_name_format: text with ``%1$s``, ``%2$s``, ``%3$s`` and ``%%``; it
    must name the user (``%1$s``)."""
    value = raw.strip()
    i = 0
    while (i := value.find("%", i)) >= 0:
        if not value.startswith(_NAME_FORMAT, i):
            raise ValueError(
                f"{value[i : i + 4]!r}: only %1$s (name), %2$s (domain), %3$s and %% may appear"
            )
        i += 2 if value.startswith("%%", i) else 4
    if "%1$s" not in value.replace("%%", ""):
        raise ValueError("it must contain %1$s, the name")
    return value


def one_char(raw: str) -> str:
    """One character (override_space); SSSD takes the first of a longer value and logs
    that it did, cached refuses it: nothing here is read otherwise than written."""
    value = raw.strip()
    if len(value) > 1:
        raise ValueError("expected a single character")
    return value


# SSSD's default re_expression (util.h): SSS_DEFAULT_RE for LDAP domains, and
# SSS_IPA_AD_DEFAULT_RE for id_provider = ad or ipa (usertools.c
# get_id_provider_default_re), which also reads DOMAIN\\name.
SSSD_DEFAULT_RE = "(?P<name>[^@]+)@?(?P<domain>[^@]*$)"
SSSD_AD_DEFAULT_RE = (
    "(((?P<domain>[^\\\\]+)\\\\(?P<name>.+$))|"
    "((?P<name>.+)@(?P<domain>[^@]+$))|"
    "(^(?P<name>[^@\\\\]+)$))"
)
_GROUP_NAME = re.compile(r"\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")


def compile_name_regex(pattern: str) -> re.Pattern[str]:
    """An re_expression as SSSD compiles it (usertools.c: PCRE2 with EXTENDED and
    DUPNAMES), in Python's ``re``: ``re.VERBOSE``, and a group name used again renamed
    ``NAME__2``, ``NAME__3``... (``name_groups`` reads the first that took part, as
    pcre2_substring_get_byname does). ValueError for a pattern ``re`` cannot compile
    or without a ``name`` group (SSSD would find no name in any lookup)."""
    seen: dict[str, int] = {}

    def rename(m: re.Match[str]) -> str:
        n = seen[m[1]] = seen.get(m[1], 0) + 1
        return m[0] if n == 1 else f"(?P<{m[1]}__{n}>"

    try:
        compiled = re.compile(_GROUP_NAME.sub(rename, pattern), re.VERBOSE)
    except re.error as e:
        raise ValueError(f"not a regular expression cached can read (Python re): {e}") from None
    if "name" not in seen:
        raise ValueError("it has no (?P<name>...) group, so it would find no name to look up")
    return compiled


def name_groups(m: re.Match[str], group: str) -> str | None:
    """The first group called ``group`` (or a renamed duplicate) that took part in
    the match ``m`` of a pattern of :func:`compile_name_regex`."""
    for key in m.re.groupindex:
        if (key == group or key.startswith(group + "__")) and m[key] is not None:
            return m[key]
    return None


def name_regex(raw: str) -> str:
    """An re_expression (checked by compiling it); "" for unset."""
    value = raw.strip()
    if value:
        compile_name_regex(value)
    return value
# nslcd's pam_authz_search variables (nslcd.conf(5)) that cached fills in.
AUTHZ_VARIABLES = ("username", "service", "ruser", "rhost", "tty", "hostname", "fqdn",
                   "domain", "dn", "uid")  # fmt: skip
AUTHZ_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def authz_filter(raw: str) -> str:
    """``pam_authz_search``: an LDAP filter with nslcd's ``$name`` or ``${name}``
    variables (:data:`AUTHZ_VARIABLES`), parenthesised."""
    filt = search_filter(raw)
    for m in AUTHZ_VARIABLE.finditer(filt):
        name = m.group(1) or m.group(2)
        if name not in AUTHZ_VARIABLES:
            raise ValueError(
                f"${name} is not a variable of pam_authz_search ({', '.join(AUTHZ_VARIABLES)})"
            )
    stripped = AUTHZ_VARIABLE.sub("", filt)
    if "$" in stripped:
        raise ValueError("a `$` that does not begin a variable ($name or ${name})")
    return filt
