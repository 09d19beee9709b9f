"""No import cycle in the ``envlayer`` package, function-level imports included.

The graph is built from the source (``ast``): every ``import`` and ``from ... import``
anywhere in a module (at the top, inside functions, under ``try``) is an edge, except
those under ``if TYPE_CHECKING:`` (never executed). A name imported from a package is an
edge to its submodule when one exists, else to the package. Importing a submodule also
runs its parent packages' ``__init__``; those implicit edges are left out (every module
would otherwise depend on ``envlayer/__init__.py``), so a cycle through an ``__init__``
shows only where that ``__init__`` is imported by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envlayer

PACKAGE_ROOT = Path(envlayer.__file__).parent


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name of every module under ``root`` (the ``envlayer`` package)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The package a ``from ... import`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, node.module] if node.module else anchor)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The package's modules an import statement loads by name."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = _from_base(node, module, is_package)
    found = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            found.add(f"{base}.{alias.name}")
        elif base in modules:
            found.add(base)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """``module -> modules of the package it imports`` (see the module docstring)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        todo: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and _is_type_checking(node):
                todo.extend(node.orelse)
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _targets(node, name, path.name == "__init__.py", modules) - {name}
            todo.extend(ast.iter_child_nodes(node))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph(PACKAGE_ROOT)
    assert "envlayer.cli.app" in graph["envlayer.cli.entry"]  # imported inside main()
    assert "envlayer.cli.broker.spawn" in graph["envlayer.cli.broker.client"]  # imported inside _open()


def test_no_import_cycle_through_the_cli_or_the_broker() -> None:
    found = cycles(import_graph(PACKAGE_ROOT))
    assert [c for c in found if any(m.startswith(("envlayer.cli", "envlayer.broker")) for m in c)] == []


def test_no_import_cycle_in_envlayer() -> None:
    assert cycles(import_graph(PACKAGE_ROOT)) == []
