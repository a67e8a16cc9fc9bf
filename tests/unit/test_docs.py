"""The documentation in the repository against the code it documents.

* docs/configuration.md's option tables and the manual pages are what ``python -m cached.docgen``
  makes from cached/config.py and cli.py, and the pages render without warnings.
* Every ``cached ...`` command line in README.md, docs/ and contrib/ parses with the
  real parser.
* Every "§x.y" citation in cached/ names a heading of docs/sssd-reference.md (§1-§8) or
  docs/compatibility.md (§9), every
  "invariant N" one of docs/ARCHITECTURE.md, and nothing points outside the repository.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest

from cached import cli, docgen
from cached.cli import build_parser
from cached.config import DAEMON_OPTIONS, DOMAIN_OPTIONS, NSS_OPTIONS

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs"
MAN_PAGES: Final = (DOCS / "man" / "cached.8", DOCS / "man" / "cached.conf.5")


# -- generated files -------------------------------------------------------------------


def test_generated_files_are_up_to_date() -> None:
    for path, text in docgen.outputs().items():
        assert path.read_text() == text, (
            f"{path.relative_to(REPO)} is not what cached/config.py and cli.py make of it: "
            "run python -m cached.docgen"
        )


def test_docgen_check_reports_a_stale_file(tmp_path: Path) -> None:
    """The table row is the option's row: a changed doc string changes it."""
    readme = (REPO / docgen.OPTIONS_PAGE).read_text()
    row = "| `ldap_page_size` | 1000 | Paged-results page size; 0 = no paging. |"
    assert row in readme
    opt = DOMAIN_OPTIONS["ldap_page_size"]
    changed = {**DOMAIN_OPTIONS, "ldap_page_size": type(opt)(opt.parse, 500, "Page size.")}
    sections = tuple((h, n, changed if t is DOMAIN_OPTIONS else t) for h, n, t in docgen.SECTIONS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(docgen, "SECTIONS", sections)
        assert "| `ldap_page_size` | 500 | Page size. |" in docgen.readme(readme)
        assert row not in docgen.readme(readme)


requires_groff = pytest.mark.skipif(
    shutil.which("groff") is None or shutil.which("man") is None,
    reason="groff and man are not installed (Debian packages groff-base, man-db)",
)


@requires_groff
@pytest.mark.parametrize("page", MAN_PAGES, ids=lambda p: p.name)
def test_man_pages_render(page: Path) -> None:
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert (r.returncode, r.stderr) == (0, "")
    r = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60,
                       env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"}, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = r.stdout
    if page.name == "cached.conf.5":
        for table in (DAEMON_OPTIONS, NSS_OPTIONS, DOMAIN_OPTIONS):
            missing = [name for name in table if f"\n       {name} (default: " not in text]
            assert not missing, f"{page.name} does not document {missing}"
    else:
        for name in ("serve", "cache", "status", "perf", "id", "getent"):
            assert f"\n   {name}\n" in text
        assert "_backend" not in text and "EXIT STATUS" in text


# -- command lines ---------------------------------------------------------------------

# Placeholders in synopses, and a value that parses in their place.
SAMPLES: Final = {
    "FILE": "/etc/cached/cached.conf", "NAME": "alice", "DOMAIN": "LDAP", "KEY": "alice",
    "CMD": "id", "ARGS": "alice", "COMMAND": "status", "NAME@DOMAIN": "alice@LDAP",
}  # fmt: skip


def command_lines() -> list[tuple[str, str]]:
    """(file, line) for each `cached ...` in inline code or a shell block of the docs."""
    files = [REPO / "README.md", *DOCS.glob("*.md"), *(REPO / "contrib").glob("*.md")]
    found = []
    for f in files:
        text = f.read_text()
        spans = re.findall(r"`(cached [^`]+)`", text)
        for block in re.findall(r"```(?:sh|ini)\n(.*?)```", text, flags=re.DOTALL):
            spans += [ln.split("#")[0].strip() for ln in block.splitlines()]
        for span in spans:
            span = re.sub(r"^\S*/bin/cached ", "cached ", span.strip())
            span = span.removeprefix("ExecStart=")
            if span.startswith("cached ") and not span.startswith("cached.") and "=" not in span:
                found.append((f.name, span))
    return found


def variants(line: str) -> list[list[str]]:
    """Every argv a synopsis stands for: ``[x]`` with and without, ``a\\|b`` each."""
    words = line.replace("\\|", "|").split()[1:]
    choices: list[list[list[str]]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("["):
            group = [w]
            while not group[-1].endswith("]"):
                i += 1
                group.append(words[i])
            inner = " ".join(group)[1:-1].split()
            choices.append([[], [SAMPLES.get(x, x) for x in inner]])
        elif "|" in w and not w.startswith("-"):
            choices.append([[alt] for alt in w.split("|")])
        elif w == "...":
            choices.append([[]])
        else:
            choices.append([[SAMPLES.get(w, w)]])
        i += 1
    return [list(itertools.chain.from_iterable(c)) for c in itertools.product(*choices)]


def test_the_docs_have_command_lines() -> None:
    lines = {line for _, line in command_lines()}
    assert "cached serve [-c FILE] [--log-level debug]" in lines
    assert "cached serve -c /etc/sssd/sssd.conf" in lines and len(lines) > 15


@pytest.mark.parametrize(("where", "line"), command_lines())
def test_documented_command_lines_parse(where: str, line: str) -> None:
    for argv in variants(line):
        if len(argv) == 1 and argv[0] in dict(docgen._subcommands(build_parser())):
            continue  # the command's name in prose ("`cached getent` is ...")
        internal = cli._command_of(argv) in cli.INTERNAL
        parser = cli.build_internal_parser() if internal else build_parser()
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            if e.code == 0:  # --help
                continue
            pytest.fail(f"{where}: `{line}` as {argv} does not parse (exit {e.code})")


def test_variants_expand_options_and_alternatives() -> None:
    conf = ["-c", "/etc/cached/cached.conf"]
    assert variants("cached getent passwd\\|group KEY [-c FILE]") == [
        ["getent", "passwd", "alice"], ["getent", "passwd", "alice", *conf],
        ["getent", "group", "alice"], ["getent", "group", "alice", *conf],
    ]  # fmt: skip
    # The check can fail: a line of the old README.
    with pytest.raises(SystemExit):
        for argv in variants("cached cache -E \\| -u NAME [-d DOMAIN]"):
            build_parser().parse_args(argv)


# -- citations -------------------------------------------------------------------------

# "§x.y", "reference §x.y", "§3.1-§3.2"; not "RFC 4515 §3" (another document's section).
CITATION: Final = re.compile(r"(RFC[ -]?\d+,?\s*|draft-\S+\s*)?§(\d+(?:\.\d+)*)")
INVARIANT: Final = re.compile(r"\binvariants? (\d+)")
CODE_DIRS: Final = ("cached", "perf", "testing", "tests", "systemd", "contrib")


def code_files() -> list[Path]:
    files = []
    for d in CODE_DIRS:
        files += [p for p in (REPO / d).rglob("*") if p.is_file() and p.suffix != ".pyc"
                  and "results" not in p.parts and p.suffix not in (".png", ".json")]  # fmt: skip
    return files


def headings(path: Path) -> set[str]:
    """The section numbers of ``path``'s headings: ``## 6. ...`` → 6, ``### 6.4 ...`` → 6.4."""
    return set(re.findall(r"^#+ (\d+(?:\.\d+)*)\.? ", path.read_text(), flags=re.MULTILINE))


def test_section_citations_resolve() -> None:
    """§1 to §8 are SSSD's behaviour (docs/sssd-reference.md), §9 cached's deliberate
    differences (docs/compatibility.md); the two files kept the numbers of the one they
    were split from, so a citation's number alone says which file it is in."""
    reference, contract = headings(DOCS / "sssd-reference.md"), headings(DOCS / "compatibility.md")
    assert {"1.1", "1.9", "2.2", "3.5", "4", "5.2", "6.4", "7", "8"} <= reference
    assert {"9", "9.1", "9.2", "9.3", "9.4", "9.5", "9.6"} <= contract
    assert not {s for s in reference if s.split(".")[0] == "9"}
    assert not {s for s in contract if s.split(".")[0] != "9"}
    cited, unresolved = 0, []
    for path in code_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in CITATION.finditer(line):
                if m[1]:
                    continue  # an RFC's or a draft's own section
                cited += 1
                if m[2].rstrip(".") not in reference | contract:
                    unresolved.append(f"{path.relative_to(REPO)}:{n}: §{m[2]}")
    assert not unresolved, "no such section in docs/:\n" + "\n".join(unresolved)
    assert cited > 150  # the code cites the reference about 200 times


def test_invariant_citations_resolve_in_architecture_md() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text()
    invariants = set(re.findall(r"^(\d+)\. \*\*", text, flags=re.MULTILINE))
    assert invariants == {"1", "2", "3", "4", "5", "6"}
    unresolved = []
    for path in [*code_files(), DOCS / "compatibility.md", DOCS / "CONTRIBUTING.md"]:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            unresolved += [f"{path.relative_to(REPO)}:{n}: invariant {m[1]}"
                           for m in INVARIANT.finditer(line) if m[1] not in invariants]  # fmt: skip
    assert not unresolved, "\n".join(unresolved)


def test_nothing_points_outside_the_repository() -> None:
    """Citations of files only the project's authors had: the reader of a clone has docs/."""
    bad = re.compile(r"\.\./shared|STYLE\.md|sssd-behaviour\.md|\bissue \d+\b|"
                     r"(?<![/\[(])\bARCHITECTURE\b(?!\.md)")  # fmt: skip
    found = []
    for path in [*code_files(), REPO / "README.md", *DOCS.rglob("*.md"), REPO / "Makefile"]:
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if bad.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_citation_pattern_tells_rfc_sections_apart() -> None:
    assert [(m[1], m[2]) for m in CITATION.finditer("per RFC 4515 §3, reference §6.4")] == [
        ("RFC 4515 ", "3"), (None, "6.4")
    ]  # fmt: skip


# Words about who found something or in which sitting: the project speaks of itself
# only, what it does and why, measured how (docs/CONTRIBUTING.md, Style).
PROVENANCE: Final = re.compile(r"found in review|a helper|session ?[0-9]|\(item [0-9]")
PROVENANCE_SCOPE: Final = ("cached", "docs", "README.md", "perf")


def provenance(paths: list[Path], root: Path = REPO) -> list[str]:
    """``file:line: text`` (relative to ``root``) of each line of ``paths`` (files, or
    folders walked whole) that says who found something or when; binary files are
    skipped."""
    found = []
    for top in paths:
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue  # charts, compiled readers
            for n, line in enumerate(text.splitlines(), 1):
                if PROVENANCE.search(line):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()[:120]}")
    return found


def test_the_provenance_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("ok = 1\n# (found in review: x)\n# a helper's fix\n# see (item 3)\n")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.md").write_text("perf/results/2026-12-01-session7 and session 4\n")
    (tmp_path / "r" / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe session 1")
    found = provenance([bad, tmp_path / "r"], tmp_path)
    assert [f.split(":")[:2] for f in found] == [
        ["x.py", "2"], ["x.py", "3"], ["x.py", "4"], ["r/run.md", "1"]
    ]  # fmt: skip


def test_comments_and_docs_say_what_and_why_not_who_found_it_when() -> None:
    """The whole of cached/, docs/, README.md and perf/ (results included): what
    ``grep -rnE "found in review|a helper|session ?[0-9]|\\(item [0-9]"`` finds there."""
    found = provenance([REPO / p for p in PROVENANCE_SCOPE])
    assert not found, "rewrite as what and why:\n" + "\n".join(found)
