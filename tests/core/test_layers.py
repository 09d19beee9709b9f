"""``envlayer`` reads top-down: every import goes from a layer to the same or a lower one.

:data:`LAYERS` lists the layers bottom first; a module belongs to the layer of the longest
prefix that names it. The import graph is read from the source with ``ast``
(:func:`test_import_cycles.import_graph`: function-level imports count, ``TYPE_CHECKING``
blocks do not), and an edge from a lower layer to a higher one fails with that edge. Within
a layer, modules may import each other but never in a circle (the cycle test).

Why this order: the contract's types at the bottom; ``execution`` (the shell protocol,
streams, output caps, tree kill) runs a request; ``discovery`` and ``dispatch`` (loading,
capability-checked calls, the one way in for ``exec``) need only the contract; the sandbox
base and the built-in backends implement the contract and use the dispatcher's snapshot
and fork calls; ``factory`` opens an environment by name; the fronts come last.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_import_cycles import PACKAGE_ROOT, cycles, import_graph

PLUGIN_PACKAGES = sorted(PACKAGE_ROOT.parent.glob("plugins/*/envlayer_*"))

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("package", ("envlayer", "envlayer._aliases")),
    ("errors", ("envlayer.errors",)),
    ("result", ("envlayer.result", "envlayer.cancel_token", "envlayer.frozen")),
    ("request", ("envlayer.request", "envlayer.random_pool")),
    ("capabilities", ("envlayer.capabilities", "envlayer.coercion")),
    ("options", ("envlayer.options", "envlayer.transfer")),
    ("exec_call", ("envlayer.exec_call",)),
    ("environment", ("envlayer.environment",)),
    ("snapshot", ("envlayer.snapshot",)),
    ("execution", ("envlayer.execution",)),
    ("discovery", ("envlayer.discovery", "envlayer.config")),
    ("dispatch", ("envlayer.dispatch",)),
    ("sandbox", ("envlayer.sandbox",)),
    ("local", ("envlayer.local",)),
    ("factory", ("envlayer.factory",)),
    ("agents", ("envlayer.agents",)),
    ("aio", ("envlayer.aio",)),
    ("integrations", ("envlayer.integrations",)),
    ("bench", ("envlayer.bench",)),
    ("cli", ("envlayer.cli",)),
    ("testing", ("envlayer.testing",)),
]
"""Bottom first. The package itself (``envlayer/__init__.py``: ``__version__``, and names
exported lazily by their module's name) and ``_aliases`` (old module paths, resolved at run
time) import no layer: they are the bottom, and ``envlayer`` names only the package, not
its submodules."""


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (longest matching prefix)."""
    best, length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = prefix != "envlayer" and module.startswith(prefix + ".")
            if (module == prefix or below) and len(prefix) > length:
                best, length = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")
    return best


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b (layer x below layer y)`` for every import from a lower layer to a higher one."""
    found = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            low, high = layer_of(module), layer_of(target)
            if high > low:
                found.append(f"{module} -> {target} ({LAYERS[low][0]} imports {LAYERS[high][0]}, a layer above it)")
    return found


def test_every_module_has_a_layer() -> None:
    for module in import_graph(PACKAGE_ROOT):
        layer_of(module)


def test_no_import_goes_up_a_layer() -> None:
    assert upward_edges(import_graph(PACKAGE_ROOT)) == []


def test_no_circle_anywhere() -> None:
    assert cycles(import_graph(PACKAGE_ROOT)) == []


def plugin_imports(root: Path) -> list[str]:
    """``module:line: name`` for every import of a plugin package (``envlayer_*``) in the
    modules under ``root``: the core reaches backends only through entry points."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{path.relative_to(root.parent)}:{node.lineno}: {n}" for n in names if n.startswith("envlayer_")]
    return found


def test_the_core_imports_no_plugin() -> None:
    assert plugin_imports(PACKAGE_ROOT) == []


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_no_circle_in_a_plugin(package: Path) -> None:
    assert cycles(import_graph(package)) == []


def test_an_upward_import_is_named_with_its_layers() -> None:
    graph = {"envlayer.errors": {"envlayer.discovery.install_hints"}, "envlayer.discovery.install_hints": set()}
    assert upward_edges(graph) == [
        "envlayer.errors -> envlayer.discovery.install_hints (errors imports discovery, a layer above it)"
    ]
