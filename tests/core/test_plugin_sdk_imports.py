"""Each backend plugin imports its SDK in one module, ``envlayer_<name>/sdk.py``, on first use.

A plugin's SDK is its distribution's requirements other than envlayer (docker, paramiko,
modal, daytona, kubernetes) and what those require in turn, as installed
(``importlib.metadata``), less the standard library and what envlayer itself requires: so
``urllib3``, ``websocket``, ``grpclib`` and ``requests`` count too. Two checks:

* from the source (``ast``): no module of a plugin but its ``sdk`` module imports the SDK at
  run time (imports under ``if TYPE_CHECKING:`` never run and are allowed), named
  ``file:line``;
* in a new interpreter: loading each backend class by its entry point (what ``envlayer
  backends`` and every CLI call do) loads no module of its SDK.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from envlayer.testing.fixtures import run_in_new_interpreter

REPO = Path(__file__).resolve().parents[2]


def backend_plugins() -> dict[str, Path]:
    """``distribution -> plugin directory`` for every plugin under ``plugins/`` that
    registers an ``envlayer.backends`` entry point."""
    found = {}
    for pyproject in sorted(REPO.glob("plugins/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        if "envlayer.backends" in project.get("entry-points", {}):
            found[project["name"]] = pyproject.parent
    return found


def _requirements(distribution: str, seen: set[str]) -> set[str]:
    """``distribution`` and every distribution it requires (extras left out), normalised."""
    name = re.sub(r"[-_.]+", "-", distribution).lower()
    if name in seen:
        return seen
    seen.add(name)
    try:
        requires = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return seen
    for requirement in requires:
        if "extra ==" not in requirement:
            _requirements(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0), seen)  # type: ignore[union-attr]
    return seen


@cache
def sdk_modules(distribution: str) -> frozenset[str]:
    """The top-level import names of ``distribution``'s SDK (the module docstring)."""
    own = _requirements("envlayer", set()) | {re.sub(r"[-_.]+", "-", distribution).lower()}
    sdk = _requirements(distribution, set()) - own
    names = {
        top
        for top, distributions in metadata.packages_distributions().items()
        if any(re.sub(r"[-_.]+", "-", d).lower() in sdk for d in distributions)
    }
    return frozenset(names - set(sys.stdlib_module_names))


def _under_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and getattr(test, "id", getattr(test, "attr", "")) == (
        "TYPE_CHECKING"
    )


def runtime_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``source`` that runs (anywhere but the body
    of an ``if TYPE_CHECKING:``), relative imports left out."""
    found: list[tuple[int, str]] = []
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        if _under_type_checking(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, node.module or ""))
        todo.extend(ast.iter_child_nodes(node))
    return sorted(found)


def sdk_imports_outside_sdk_module(plugin: Path, sdk: frozenset[str]) -> list[str]:
    """``file:line: module`` for each run-time SDK import in a module of ``plugin`` other
    than its ``sdk`` module."""
    found = []
    for path in sorted(plugin.glob("envlayer_*/*.py")):
        where = str(path.relative_to(REPO))
        if path.name == "sdk.py":
            continue
        for line, module in runtime_imports(path.read_text()):
            if module.split(".")[0] in sdk:
                found.append(f"{where}:{line}: {module} (read it through {path.parent.name}.sdk)")
    return found


PLUGINS = backend_plugins()


def test_every_backend_plugin_is_checked() -> None:
    assert {path.name for path in PLUGINS.values()} >= {"docker", "ssh", "modal", "daytona", "kubernetes"}


@pytest.mark.parametrize("distribution", sorted(PLUGINS))
def test_only_the_sdk_module_imports_the_sdk(distribution: str) -> None:
    plugin = PLUGINS[distribution]
    assert sdk_imports_outside_sdk_module(plugin, sdk_modules(distribution)) == []
    assert (next(plugin.glob("envlayer_*")) / "sdk.py").is_file(), f"{plugin.name} has no sdk module"


def test_the_source_check_names_runtime_imports_only() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import docker\n"
        "def f():\n    from docker.errors import NotFound\n    import paramiko\n"
        "from . import sdk\n"
    )
    assert runtime_imports(source) == [(1, "typing"), (5, "docker.errors"), (6, "paramiko")]


def test_the_sdk_of_a_plugin_includes_what_it_pulls_in() -> None:
    assert {"docker", "requests", "urllib3"} <= sdk_modules("envlayer-docker")
    assert "envlayer" not in sdk_modules("envlayer-docker") and "json" not in sdk_modules("envlayer-docker")


LOADED_SDK = """
    import importlib.metadata, json, sys
    [entry] = importlib.metadata.entry_points(group="envlayer.backends", name={name!r})
    entry.load()
    {extra}
    print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({sdk!r}))))
"""


def sdk_loaded_by_backend_class(distribution: str, extra: str = "") -> list[str]:
    """The SDK's top-level modules in ``sys.modules`` of a new interpreter after it loaded
    ``distribution``'s backend class (and ran ``extra``)."""
    [name] = metadata.distribution(distribution).entry_points.select(group="envlayer.backends").names
    code = LOADED_SDK.format(name=name, sdk=sorted(sdk_modules(distribution)), extra=extra)
    return json.loads(run_in_new_interpreter(code).strip().splitlines()[-1])


@pytest.mark.parametrize("distribution", sorted(PLUGINS))
def test_loading_the_backend_class_loads_no_sdk(distribution: str) -> None:
    assert sdk_loaded_by_backend_class(distribution) == []


def test_the_new_interpreter_check_sees_an_sdk_once_read() -> None:
    assert "docker" in sdk_loaded_by_backend_class("envlayer-docker", "from envlayer_docker import sdk; sdk.errors")
