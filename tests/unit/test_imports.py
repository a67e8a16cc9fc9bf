"""The seams between cached's packages, read from every import statement of cached/ (ast,
function-local imports included), in the spirit of SSSD's tree: the responders depend on
what they share, never on each other; only the provider talks LDAP; only the backend
writes the cache (docs/ARCHITECTURE.md). The harness and the tests are not checked: they
drive ldap3 and the cache writer on purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import cached.cache

REPO: Final = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each import statement of ``path`` (function-local ones included) as (module,
    names): ``import a`` is ("a", []); ``from a import b, c`` is ("a", ["b", "c"]), a
    relative ``from .x import y`` resolved against the module's own package."""
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield module, [alias.name for alias in node.names]


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports; ``from a import b`` counts as ``a`` and ``a.b``."""
    out: set[str] = set()
    for module, names in _import_statements(path):
        out.add(module)
        out.update(f"{module}.{name}" for name in names)
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


RESPONDERS: Final = ("cached.nss", "cached.ifp", "cached.pam", "cached.ssh", "cached.sudo")


def test_the_responders_do_not_import_each_other() -> None:
    # What they share (the lookup flow, the socket framing) is in cached.responder.
    crossing = [e for a in RESPONDERS for b in RESPONDERS if a != b for e in edges(a, b)]
    assert crossing == []
    assert edges("cached.pam", "cached.responder.wire")
    assert edges("cached.nss", "cached.responder.wire")
    assert edges("cached.ssh", "cached.responder.wire")
    assert edges("cached.sudo", "cached.responder.wire")


def test_the_pam_ssh_and_sudo_codecs_are_sans_io() -> None:
    # Bytes in, values out: no sockets, event loop, cache or backend.
    codecs = ("cached.pam.protocol", "cached.ssh.protocol", "cached.sudo.protocol",
              "cached.sudo.rules")  # fmt: skip
    for codec in codecs:
        found = GRAPH[codec]
        assert not {m for m in found if m.split(".")[0] in ("asyncio", "socket", "lmdb")}
        assert not [m for m in found if _within(m, "cached.ipc") or _within(m, "cached.cache")]


def test_the_backend_does_not_import_the_sudo_responder() -> None:
    # cached.ldap.sudo (the rules' refresh) and cached.sudo (the socket) meet in the
    # cache and the RPC only.
    assert edges("cached.ldap", "cached.sudo") == []
    assert edges("cached.sudo", "cached.ldap") == []


def test_only_the_ldap_connection_imports_ldap3() -> None:
    # The transport layer of the read path: ldap3 opens the socket and wraps it in
    # TLS; the codec, the exchange and the client above it never see ldap3.
    outside = [e for e in edges("cached", "ldap3") if e.split()[0] != "cached.ldap.connection"]
    assert outside == []


def test_only_kerberos_imports_gssapi_and_discovery_dns() -> None:
    # The host's Kerberos identity (id_provider = ad) in one module of the backend;
    # the transport sees only sasl.GssContext; users' logins (auth_provider = krb5 |
    # ad) in cached.kerberos. DNS SRV discovery likewise.
    gss = [
        e
        for e in edges("cached", "gssapi")
        if e.split()[0] != "cached.ldap.kerberos" and not _within(e.split()[0], "cached.kerberos")
    ]
    assert gss == []
    dns = [e for e in edges("cached", "dns") if e.split()[0] != "cached.ldap.discovery"]
    assert dns == []
    assert "cached.ldap.kerberos -> gssapi" in edges("cached.ldap", "gssapi")


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


def _module_edges(path: Path) -> set[str]:
    """The modules of cached that ``path`` imports, precisely: ``from a import b`` is an
    edge to ``a.b`` when that is a module (Python imports package ``a`` first for any
    submodule, an edge every submodule has, so not one of the code's making), else to
    ``a``."""
    out: set[str] = set()
    for module, names in _import_statements(path):
        if not names:  # `import a`
            out.add(module)
        for name in names:
            sub = f"{module}.{name}"
            out.add(sub if sub in GRAPH else module)
    return {m for m in out if m in GRAPH}


MODULE_GRAPH: Final = {_module(p): _module_edges(p) for p in (REPO / "cached").rglob("*.py")}


def _cycles(graph: dict[str, set[str]] = MODULE_GRAPH) -> list[list[str]]:
    """Every import cycle among cached's own modules (Tarjan's strongly connected
    components of ``graph``), each as its sorted modules."""
    deps = {m: sorted(d for d in found if d in graph and d != m) for m, found in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for d in deps[m]:
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in on_stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            part = []
            while True:
                d = stack.pop()
                on_stack.discard(d)
                part.append(d)
                if d == m:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for m in sorted(deps):
        if m not in index:
            visit(m)
    return out


def test_the_cycle_check_sees_cycles_and_the_edges_they_are_made_of() -> None:
    # Without these the check below would pass on a graph with no edges.
    assert "cached.ldap.client" in MODULE_GRAPH["cached.ldap.provider"]
    assert "cached.cache.records" in MODULE_GRAPH["cached.cache.cache"]  # from-import of a module
    # Through a third module, and a function-local import (as validate.py's were).
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert "cached.ldap.service" in MODULE_GRAPH["cached.cli"]  # imported in a function


def test_no_import_cycle_in_cached() -> None:
    """Imports flow downwards (docs/ARCHITECTURE.md): no module of cached imports one
    that imports it back, directly or through others, function-local and
    type-checking imports included. A cycle is a module doing two modules' jobs (as
    SSSD's tree has none between its request files)."""
    assert _cycles() == []
