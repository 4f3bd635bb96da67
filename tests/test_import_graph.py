"""The product's import graph, read from the source with ``ast`` (nothing is imported).

Rules (DESIGN §1, §2): the core knows nothing of protocols, sockets or the packages built on
it; config is a leaf the gateway reads; and no two modules import each other at import time.

Each edge is one import statement, of one of three kinds:

- ``module``: executed when the importing module is imported (module level, class bodies,
  ``try``/``if`` blocks other than ``if TYPE_CHECKING:``);
- ``deferred``: inside a function, so executed only when that function runs;
- ``typing``: under ``if TYPE_CHECKING:``, never executed.

A cycle of ``module`` edges is an import-time cycle: which module finishes first depends on
who imports first, and a name imported from a half-initialised module fails.  A cycle that
needs a ``deferred`` edge works, but it is still two modules that cannot be understood apart,
so it counts as a run-time cycle too.  A cycle made only with ``typing`` edges is allowed;
such cycles are reported (``-rA`` shows them) but do not fail.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "waystation"
PACKAGES = ("core", "wire", "gateway", "bridges", "client", "config", "pipeline")
KINDS = ("module", "deferred", "typing")

# Libraries that talk to the network: the core never needs one.
NETWORK_LIBS = (
    "socket", "ssl", "selectors", "socketserver", "http", "urllib.request", "aiohttp",
    "websockets", "yarl", "requests", "httpx", "asyncio.streams", "stomp",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Edge:
    src: str
    dst: str
    kind: str  # one of KINDS
    where: str  # path:line
    text: str  # the import statement

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}  [{self.kind}] {self.where}: {self.text}"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([NAMESPACE, *parts])


def _sources() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "__pycache__" not in path.parts:
                out[_module_name(path)] = path
    out[NAMESPACE] = ROOT / NAMESPACE / "__init__.py"
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Every import statement with its kind (see the module doc)."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, str]] = []
        self._kind = "module"

    def _within(self, kind: str, nodes: list[ast.stmt]) -> None:
        outer = self._kind
        if outer != "typing":  # typing wins over deferred: never executed at all
            self._kind = kind
        for n in nodes:
            self.visit(n)
        self._kind = outer

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._within("typing", node.body)
            self._within(self._kind, node.orelse)
        else:
            self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self._within("deferred", node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self._kind))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node, self._kind))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def build_graph() -> tuple[set[str], list[Edge], list[Edge]]:
    """(product modules, edges between them, edges to modules outside the product)."""
    sources = _sources()
    modules = set(sources)
    internal: list[Edge] = []
    external: list[Edge] = []
    for mod, path in sources.items():
        tree = ast.parse(path.read_text(), str(path))
        visitor = _Imports()
        visitor.visit(tree)
        is_pkg = path.name == "__init__.py"
        rel = path.relative_to(ROOT).as_posix()
        for node, kind in visitor.found:
            text = ast.unparse(node)
            where = f"{rel}:{node.lineno}"
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _resolve(mod, is_pkg, node)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in modules else base)
            for t in dict.fromkeys(targets):
                if t == mod:
                    continue
                edge = Edge(mod, t, kind, where, text)
                (internal if t in modules else external).append(edge)
    return modules, internal, external


def _sccs(nodes: set[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    succ: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        succ[e.src].append(e.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(set(succ[start]))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(set(succ[w])))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _shortest_cycle(comp: list[str], edges: list[Edge]) -> list[Edge]:
    """One shortest cycle through the component's first module, as its edges."""
    members = set(comp)
    by_src: dict[str, list[Edge]] = defaultdict(list)
    for e in edges:
        if e.src in members and e.dst in members:
            by_src[e.src].append(e)
    start = comp[0]
    prev: dict[str, Edge] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for e in by_src[v]:
                if e.dst == start:
                    path = [e]
                    while path[0].src != start:
                        path.insert(0, prev[path[0].src])
                    return path
                if e.dst not in seen:
                    seen.add(e.dst)
                    prev[e.dst] = e
                    nxt.append(e.dst)
        frontier = nxt
    return []


def describe_cycles(comps: list[list[str]], edges: list[Edge]) -> str:
    lines: list[str] = []
    for comp in comps:
        members = set(comp)
        lines.append(f"cycle among {len(comp)} modules: {', '.join(comp)}")
        lines.append("  shortest loop:")
        lines += [f"    {e}" for e in _shortest_cycle(comp, edges)]
        lines.append("  every import inside it:")
        lines += [
            f"    {e}"
            for e in sorted(edges, key=lambda e: (e.src, e.dst, e.where))
            if e.src in members and e.dst in members
        ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def graph() -> tuple[set[str], list[Edge], list[Edge]]:
    return build_graph()


def test_the_graph_sees_the_product(graph: tuple[set[str], list[Edge], list[Edge]]) -> None:
    """Guards the reader itself: known modules and a known edge are found."""
    modules, internal, _ = graph
    for m in ("waystation.core.engine", "waystation.wire.stomp", "waystation.gateway.cli"):
        assert m in modules
    assert len(modules) > 50
    assert any(e.dst.startswith("waystation.core") for e in internal)
    kinds = {e.kind for e in internal}
    assert "module" in kinds and "deferred" in kinds


def test_no_import_cycles_at_run_time(graph: tuple[set[str], list[Edge], list[Edge]]) -> None:
    modules, internal, _ = graph
    runtime = [e for e in internal if e.kind != "typing"]
    comps = _sccs(modules, runtime)
    typing_only = [c for c in _sccs(modules, internal) if c not in comps]
    if typing_only:  # allowed; shown with -rA
        print("cycles made with TYPE_CHECKING imports (allowed):")
        print(describe_cycles(typing_only, internal))
    assert not comps, "import cycles at run time:\n" + describe_cycles(comps, runtime)


def _violations(edges: list[Edge], sources: tuple[str, ...], banned: tuple[str, ...]) -> str:
    bad = [
        e
        for e in edges
        if any(e.src == s or e.src.startswith(s + ".") for s in sources)
        and any(e.dst == b or e.dst.startswith(b + ".") for b in banned)
    ]
    return "\n".join(f"  {e}" for e in sorted(bad, key=lambda e: e.where))


def test_core_imports_no_outer_package_and_no_network_library(
    graph: tuple[set[str], list[Edge], list[Edge]],
) -> None:
    """Every kind of edge counts: a TYPE_CHECKING import of a gateway type still makes the
    core describe itself in terms of a protocol."""
    _, internal, external = graph
    outer = tuple(f"{NAMESPACE}.{p}" for p in ("gateway", "bridges", "pipeline", "config",
                                               "client", "wire"))  # fmt: skip
    bad = _violations(internal, (f"{NAMESPACE}.core",), outer)
    bad_libs = _violations(external, (f"{NAMESPACE}.core",), NETWORK_LIBS)
    assert not bad, "core imports outer packages:\n" + bad
    assert not bad_libs, "core imports network libraries:\n" + bad_libs


def test_core_and_config_never_import_the_adapters(
    graph: tuple[set[str], list[Edge], list[Edge]],
) -> None:
    _, internal, _ = graph
    adapters = tuple(f"{NAMESPACE}.{p}" for p in ("gateway", "bridges", "pipeline"))
    bad = _violations(internal, (f"{NAMESPACE}.core", f"{NAMESPACE}.config"), adapters)
    assert not bad, "core/config import gateway, bridges or pipeline:\n" + bad


def test_imports_use_the_installed_namespace(
    graph: tuple[set[str], list[Edge], list[Edge]],
) -> None:
    """A bare ``import core`` works only in a checkout, never from the wheel."""
    _, _, external = graph
    bad = [e for e in external if e.dst.split(".")[0] in PACKAGES]
    assert not bad, "imports outside the waystation namespace:\n" + "\n".join(f"  {e}" for e in bad)
