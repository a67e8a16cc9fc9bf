"""The benchmark suite's shape: perf/ sits above the tests and the harness, and every
module in it is run by a make target or documented in perf/README.md.

The tests and testing/ must not need perf/ (a test that imports a benchmark breaks
when the benchmark is retired, and testing/ is what perf/ builds on); a module nothing
runs and nobody documents is dead weight that still has to pass lint.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
MAX_MODULES: Final = 14


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports (function-local imports included); ``from a import
    b`` counts as ``a`` and ``a.b``. Relative imports are left out: a package below
    tests/ or testing/ can reach perf/ only by its absolute name."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def perf_imports(folders: list[Path]) -> list[str]:
    """``file -> module`` for every import of perf or a module of it under ``folders``."""
    return sorted(
        f"{p.relative_to(REPO)} -> {name}"
        for folder in folders
        for p in folder.rglob("*.py")
        for name in imported(p)
        if name == "perf" or name.startswith("perf.")
    )


def test_the_import_scan_sees_perf_imports(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text(
        "import perf.run\ndef f():\n    from perf import ab\nfrom performance import x\n"
    )
    found = sorted(n for n in imported(tmp_path / "t" / "a.py") if n.split(".")[0] == "perf")
    assert found == ["perf", "perf.ab", "perf.run"]


def test_tests_and_the_harness_import_nothing_from_perf() -> None:
    assert perf_imports([REPO / "tests", REPO / "testing"]) == []


def perf_modules() -> list[str]:
    return sorted(p.stem for p in (REPO / "perf").glob("*.py"))


def test_perf_has_few_modules() -> None:
    assert "run" in perf_modules() and "ab" in perf_modules()
    assert len(perf_modules()) <= MAX_MODULES, perf_modules()


def test_every_perf_module_is_run_by_make_or_documented() -> None:
    """Reachable: ``-m perf.NAME`` in the Makefile, or ``perf/NAME.py`` / ``perf.NAME``
    named in perf/README.md (the package's ``__init__`` is the package itself)."""
    makefile = (REPO / "Makefile").read_text()
    readme = (REPO / "perf" / "README.md").read_text()
    unreachable = [
        name
        for name in perf_modules()
        if name != "__init__"
        and not re.search(rf"-m perf\.{name}\b", makefile)
        and not re.search(rf"\bperf(/{name}\.py|\.{name})\b", readme)
    ]
    assert unreachable == []
    # The check can fail: a module named nowhere.
    assert not re.search(r"\bperf(/nowhere\.py|\.nowhere)\b", readme)
