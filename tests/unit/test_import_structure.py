"""The import graphs of ``local`` and ``tiered``: no cycles between the modules of either (if two need each other, a third holds what they share), and ``local``
never imports ``tiered``.

Imports are read with ``ast`` from the source, function-level (lazy) imports included: a cycle hidden inside a
function is still a cycle, only deferred. Imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, package: str) -> Iterator[str]:
    """Every module name an import under ``node`` may load (``from a import b`` may load ``a`` or ``a.b``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _imports_of_statement(other, package)
            continue
        yield from _imports_of_statement(child, package)


def _imports_of_statement(node: ast.AST, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        yield base
        yield from (f"{base}.{alias.name}" for alias in node.names)
    else:
        yield from _imports(node, package)


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules it imports: those of ``package``, and any ``tiered`` one."""
    files = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = _imports(ast.parse(path.read_text(encoding="utf-8")), pkg)
        graph[name] = {t for t in imported if t != name and (t in files or t.split(".")[0] == "tiered")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_graph_sees_a_lazy_import_and_a_cycle() -> None:
    # The checker itself: the import in load_worker's function body is an edge, and a planted cycle is found.
    graph = import_graph("local")
    assert "local.index.sanity" in graph["local.load_worker"]
    graph["local.segment"].add("local.log")
    assert find_cycle(graph) is not None


def test_no_import_cycles_among_local_modules() -> None:
    assert find_cycle(import_graph("local")) is None


def test_no_import_cycles_among_tiered_modules() -> None:
    assert find_cycle(import_graph("tiered")) is None


def test_local_never_imports_tiered() -> None:
    graph = import_graph("local")
    assert [(a, b) for a, targets in graph.items() for b in targets if b.split(".")[0] == "tiered"] == []
