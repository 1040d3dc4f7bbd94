"""Which way jobrun's imports run: no two of jobrun's modules import each other, directly or round a longer loop: a module-level
  import (under ``if TYPE_CHECKING`` too, which states the same dependency) is an edge of the
  graph, and the graph has no cycle. A loop is how "the lower module needs the upper one"
  starts; the fix is a module below both (as redact.py, observe.py and admin/options.py are).

The cycle finder has a twin that shows it can fail: it finds the cycles of small graphs and
of a small package on disk. What ``jobrun web`` loads is checked in a fresh interpreter
(tests/acceptance/test_import_probe.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

JOBRUN = Path(__file__).resolve().parents[2] / "jobrun"


# --- the module graph and its cycles ------------------------------------------------------

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_level(body: list[ast.stmt]):
    """The import statements a module runs when imported (or names under TYPE_CHECKING):
    those of its body and of the if/try/with blocks there, not those inside functions."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _module_level(handler.body)


def module_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at ``root`` and the package's modules it imports at module
    level (``from pkg import name`` counts as pkg.name when that is a module, else as pkg)."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _module_level(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                           for a in node.names]
            edges.update(t for t in targets if t in paths)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import loops of ``graph``: its strongly connected components of two or more
    modules, and any module that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_jobrun_has_no_import_cycle() -> None:
    graph = module_graph(JOBRUN)
    assert len(graph) > 50 and "jobrun.observe" in graph["jobrun.web.reads"]
    loops = cycles(graph)
    assert loops == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in loops)


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"a"}, "b": {"a"}}) == [{"a"}]
    assert sorted(map(sorted, cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}))) \
        == [["a", "b"], ["c", "d"]]


def test_the_module_graph_sees_every_way_of_importing(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("from typing import TYPE_CHECKING\n"
                                "if TYPE_CHECKING:\n    from pkg.sub import high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\n\ndef later():\n"
                                         "    import pkg.sub.side\n")
    (pkg / "sub" / "side.py").write_text("import pkg.sub.high\nfrom pkg import sub\n")
    graph = module_graph(pkg)
    assert graph == {"pkg": set(), "pkg.sub": set(), "pkg.low": {"pkg.sub.high"},
                     "pkg.sub.high": {"pkg.low"}, "pkg.sub.side": {"pkg.sub.high", "pkg.sub"}}
    assert cycles(graph) == [{"pkg.low", "pkg.sub.high"}]
