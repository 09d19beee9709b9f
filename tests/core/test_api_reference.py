"""The API reference (docs/api.md) is generated from the docstrings and builds cleanly."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = re.findall(r"^\| `(envlayer(?:\.\w+)+)` \|", (ROOT / "docs" / "api.md").read_text(), re.MULTILINE)
INTERNAL = {
    "envlayer.cli": "the command line and its session broker, documented in docs/cli.md",
    "envlayer.discovery.entrypoints": "the fast entry-point reader behind envlayer.discovery.backend_registry",
    "envlayer.agents.exit_hook": "the manager's at-exit registry",
    "envlayer.execution.shell_script": "the shell text and framing behind envlayer.execution.shell_session",
    "envlayer.execution.session_dirs": "the sweep of dead session shells' directories (local and SSH sessions)",
    "envlayer.local": "the local backend, loaded by name through envlayer.discovery.backend_registry",
    "envlayer.coercion": "the one coercion engine behind envlayer.config and envlayer.options",
    "envlayer.discovery.install_hints": "install and start hints that fit where the user is",
    "envlayer.bench": "`envlayer bench`, documented in docs/cli.md and docs/benchmarks.md",
    "envlayer.frozen": "the one-step __init__ of the request and result dataclasses",
    "envlayer.random_pool": "the pool of exec ids and marker seeds behind envlayer.request and the shell protocol",
}
#: subpackages that only group modules: each module inside is public or internal on its own
GROUPS = {"envlayer.execution", "envlayer.sandbox", "envlayer.discovery", "envlayer.agents"}


def _modules() -> set[str]:
    """Every public-named module and package of envlayer/, down to the groups' members."""
    found = set()
    for path in (ROOT / "envlayer").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if len(parts) > 1 and not any(part.startswith("_") for part in parts):
            found.add(".".join(parts))
    return found


def _listed(module: str, listed: set[str]) -> bool:
    """``module`` is listed itself or lies inside a listed package that is not a mere group."""
    parents = [module.rsplit(".", n)[0] for n in range(module.count("."))]
    return module in listed or any(parent in listed and parent not in GROUPS for parent in parents)


def test_every_module_is_public_or_declared_internal() -> None:
    modules = _modules()
    listed = set(PUBLIC) | set(INTERNAL) | GROUPS
    assert {m for m in modules if not _listed(m, listed)} == set(), "list new modules in docs/api.md (or INTERNAL here)"
    assert set(PUBLIC) - modules == set(), "docs/api.md lists modules that do not exist"
    command = (ROOT / "docs" / "api.md").read_text().split("```sh", 1)[1].split("#", 1)[0]
    assert sorted(re.findall(r"envlayer(?:\.\w+)+", command)) == sorted(PUBLIC), "the build command lists other modules"


def test_public_classes_and_functions_have_docstrings() -> None:
    undocumented = []
    for name in PUBLIC:
        module = importlib.import_module(name)
        if not (module.__doc__ or "").strip():
            undocumented.append(name)
        for attr, obj in vars(module).items():
            public = not attr.startswith("_") and getattr(obj, "__module__", None) == name
            if public and (inspect.isclass(obj) or inspect.isfunction(obj)) and not (obj.__doc__ or "").strip():
                undocumented.append(f"{name}.{attr}")
    assert undocumented == []


def test_pdoc_builds_the_reference_without_warnings(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "pdoc", "-o", str(tmp_path), *PUBLIC],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for name in PUBLIC:
        page = tmp_path.joinpath(*name.split(".")).with_suffix(".html")
        assert page.is_file(), f"no page for {name}"
        assert "<!doctype html>" in page.read_text().lower()
