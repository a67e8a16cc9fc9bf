"""Batched searches: ORs of assertions in one search, all of a round's searches sent
together, and answers a server's size limit cuts split until they fit
(docs/compatibility.md §9.5). A cut answer is never stored: only a part that cannot
be split further fails the request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cached.config import SearchBase
from cached.ldap.context import Context
from cached.ldap.exchange import Entry, LdapLimitExceeded, Search
from cached.ldap.schema import BATCH, escape

log = logging.getLogger(__name__)

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class NamePart:
    """Entries whose name starts with ``prefix`` and then one of ``chars`` — plus,
    with ``rest``, those whose name is ``prefix`` or goes on with any other
    character. Halving ``chars`` and lengthening ``prefix`` partitions any set of
    names (matching is case-insensitive, so lower case covers upper)."""

    prefix: str
    chars: str
    rest: bool

    def filter(self, attr: str) -> str:
        p = escape(self.prefix)
        terms = [f"({attr}={p}{c}*)" for c in self.chars]
        if self.rest:
            alnum = "".join(f"({attr}={p}{c}*)" for c in _ALNUM)
            terms.append(f"(&({attr}={p}*)(!(|{alnum})))")
        return terms[0] if len(terms) == 1 else "(|" + "".join(terms) + ")"

    def split(self) -> list[NamePart]:
        if len(self.chars) > 1:
            h = len(self.chars) // 2
            return [
                NamePart(self.prefix, self.chars[:h], False),
                NamePart(self.prefix, self.chars[h:], self.rest),
            ]
        if len(self.chars) == 1 and len(self.prefix) < 64:
            out = [NamePart(self.prefix + self.chars, _ALNUM, True)]
            if self.rest:
                out.append(NamePart(self.prefix, "", True))
            return out
        return []


def chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# One batched search: (bases, assertions, attributes, deref specs). Each assertion is
# tagged with its kind for Searcher.round_filter: "u" walk-up, "m" member look-up
# where users and groups share a base, "g" groups, "s" users, "x" a whole filter.
DerefSpecs = list[tuple[str, list[str]]]
Job = tuple[tuple[SearchBase, ...], list[tuple[str, str]], list[str], DerefSpecs | None]
Answers = list[list[Entry] | LdapLimitExceeded]


class Searcher:
    """The domain's searches, per base and batched."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def search(
        self,
        bases: tuple[SearchBase, ...],
        filt: str,
        attrs: list[str],
        deref_specs: DerefSpecs | None = None,
        deref_seen: set[bytes] | None = None,
    ) -> list[Entry]:
        """One search per base (SSSD's ``base?scope?filter`` list), the base's filter
        ANDed in (SSSD's ``ldap_*_search_base`` with a filter)."""
        out: list[Entry] = []
        seen = deref_seen if deref_specs else None
        for b in bases:
            out += self.ctx.client.search(
                b.dn, self.ctx.schema.with_base(filt, b), attrs, scope=b.scope,
                deref_specs=deref_specs, deref_seen=seen,
            )  # fmt: skip
        return out

    def jobs_by_name(self, names: list[str], attrs: list[str]) -> list[Job]:
        """Searches of groups by name under the group bases, ORs of up to BATCH names
        (``g`` items: round_filter asks for the group class), for split:
        the refresh's stamps and whole groups, and changed_since_read."""
        s = self.ctx.schema
        items = [("g", f"({s.group_name}={escape(n)})") for n in names]
        return [(s.group_bases, items[i : i + BATCH], attrs, None)
                for i in range(0, len(items), BATCH)]  # fmt: skip

    def round_filter(self, items: list[tuple[str, str]]) -> str:
        s = self.ctx.schema
        parts = {kind: [a for k, a in items if k == kind] for kind in ("u", "m", "g", "s", "x")}

        def any_of(assertions: list[str]) -> str:
            return assertions[0] if len(assertions) == 1 else "(|" + "".join(assertions) + ")"

        branches = []
        if parts["m"]:
            # First: slapd tests each candidate against the branches in order, and
            # most candidates are the members looked up (measured: 3x less slapd time).
            branches.append(f"(&{s.member_classes()}{any_of(parts['m'])})")
        if parts["u"]:
            # Walking up passes through groups of the class without a gidNumber (as
            # SSSD); they are never answered.
            branches.append(f"(&(objectClass={s.group_oc}){any_of(parts['u'])})")
        if parts["g"]:
            branches.append(f"(&(objectClass={s.group_oc}){any_of(parts['g'])})")
        if parts["s"]:
            branches.append(f"(&(objectClass={s.user_oc}){any_of(parts['s'])})")
        branches += parts["x"]
        return any_of(branches)

    def split(
        self,
        jobs: list[Job],
        build: Callable[[list[tuple[str, str]]], str],
        paged: bool | list[bool] = True,
        also: tuple[list[Search], Answers] | None = None,
        deref_seen: set[bytes] | None = None,
    ) -> list[list[Entry]]:
        """Search with the OR of each job's items, all jobs at once; when the server's
        size limit cuts an answer, split that batch in two and search again
        (docs/compatibility.md §9.5). A single assertion still cut (a user in more
        groups than the limit) is split by name: entries whose name starts with one
        half of the letters and digits, then the other half and the rest, refining
        the prefix as needed. Only a part that cannot be split further fails the
        request: a cut answer is never stored. Returns each job's entries.
        ``paged`` (one flag, or one per job): False sends a job without the paging
        control, so that it goes out together with the others (slapd keeps one
        paged state per connection); a size limit cuts it like a paged one.
        ``also``: searches sent first, with the first wave (unpaged, they go out at
        once), and the list their answers are put in, limits not split.
        """
        out: list[list[Entry]] = [[] for _ in jobs]
        wave: list[tuple[int, list[tuple[str, str]], NamePart | None]] = [
            (j, items, None) for j, (_b, items, _a, _d) in enumerate(jobs) if items
        ]
        extra, extra_answers = also or ([], [])
        while wave or extra:
            searches: list[Search] = list(extra)
            spans: list[int] = []
            for j, chunk, part in wave:
                bases, _items, attrs, specs = jobs[j]
                filt = build(chunk)
                if part is not None:
                    filt = f"(&{filt}{part.filter(self.name_attr(bases))})"
                for b in bases:
                    pg = paged if isinstance(paged, bool) else paged[j]
                    searches.append(Search(b.dn, self.ctx.schema.with_base(filt, b), attrs,
                                           b.scope, specs, paged=pg))  # fmt: skip
                spans.append(len(bases))
            got = self.ctx.client.search_many(searches, deref_seen)
            extra_answers += got[: len(extra)]
            nxt: list[tuple[int, list[tuple[str, str]], NamePart | None]] = []
            pos = len(extra)
            extra = []
            for (j, chunk, part), span in zip(wave, spans, strict=True):
                per_base = got[pos : pos + span]
                pos += span
                cut = next((a for a in per_base if isinstance(a, LdapLimitExceeded)), None)
                if cut is None:
                    for a in per_base:
                        if not isinstance(a, LdapLimitExceeded):
                            out[j] += a
                    continue
                pg = paged if isinstance(paged, bool) else paged[j]
                info = self.ctx.client.info
                if not pg and cut.code == "sizeLimitExceeded" and info:
                    self.ctx.walk_paged.add(info.uri)
                if len(chunk) > 1:
                    log.info("%s; splitting a batch of %d assertions", cut.code, len(chunk))
                    half = len(chunk) // 2
                    nxt += [(j, chunk[:half], None), (j, chunk[half:], None)]
                    continue
                parts = (part or NamePart("", _ALNUM, True)).split()
                if not parts:
                    raise cut
                log.info("%s; splitting by %s prefix", cut.code, self.name_attr(jobs[j][0]))
                nxt += [(j, chunk, p) for p in parts]
            wave = nxt
        return out

    def name_attr(self, bases: tuple[SearchBase, ...]) -> str:
        s = self.ctx.schema
        return s.group_name if bases == s.group_bases else s.user_name
