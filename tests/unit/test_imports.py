"""The seams between cached's packages, read from every import statement of cached/ (ast,
function-local imports included), in the spirit of SSSD's tree: the responders depend on
what they share, never on each other; only the provider talks LDAP; only the backend
writes the cache (docs/ARCHITECTURE.md). The harness and the tests are not checked: they
drive ldap3 and the cache writer on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import cached.cache

REPO: Final = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports; ``from a import b`` counts as ``a`` and ``a.b``."""
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            # `from .x import y` (level 1) is relative to the module's own package.
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


GRAPH: Final = {_module(p): _imports(p) for p in (REPO / "cached").rglob("*.py")}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def edges(importer: str, imported: str) -> list[str]:
    """``module -> import`` for every module under ``importer`` importing ``imported``."""
    return sorted(
        f"{m} -> {i}"
        for m, found in GRAPH.items()
        if _within(m, importer)
        for i in found
        if _within(i, imported)
    )


def test_the_graph_sees_the_imports_the_rules_are_about() -> None:
    # Without these the rules below would pass on an empty graph.
    assert "cached.ldap.connection -> ldap3" in edges("cached.ldap", "ldap3")
    assert "cached.ldap.provider -> cached.cache.writer" in edges("cached", "cached.cache.writer")
    assert edges("cached.nss", "cached.nss.protocol")


def test_nss_and_ifp_do_not_import_each_other() -> None:
    assert edges("cached.nss", "cached.ifp") + edges("cached.ifp", "cached.nss") == []


def test_only_the_ldap_connection_imports_ldap3() -> None:
    # The transport layer of the read path: ldap3 opens the socket and wraps it in
    # TLS; the codec, the exchange and the client above it never see ldap3.
    outside = [e for e in edges("cached", "ldap3") if e.split()[0] != "cached.ldap.connection"]
    assert outside == []


def test_only_the_backend_imports_the_cache_writer() -> None:
    writers = [
        e
        for e in edges("cached", "cached.cache.writer")
        if not _within(e.split()[0], "cached.ldap") and e.split()[0] != "cached.cache.writer"
    ]
    assert writers == []
    # Nor can it be had through the package: cached.cache exports the reader only.
    assert not hasattr(cached.cache, "BackendCache")
    assert not hasattr(cached.cache, "WriteBatch")
