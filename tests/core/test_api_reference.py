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
    "envlayer.cli": "the command line, documented in docs/cli.md",
    "envlayer.entrypoints": "the fast entry-point reader behind envlayer.registry",
    "envlayer.proctree": "the local backend's process-tree killer",
    "envlayer.exit_hook": "the manager's at-exit registry",
    "envlayer.shell_script": "the shell text and framing behind envlayer.shell_session",
    "envlayer.backends": "built-in backends, loaded by name through envlayer.registry",
    "envlayer.coercion": "the one coercion engine behind envlayer.config and envlayer.options",
    "envlayer.cli_env": "exec's -e / --env-file parsing, documented in docs/cli.md",
    "envlayer.cli_snapshot": "snapshot, fork and snapshots ls|rm of the command line, documented in docs/cli.md",
    "envlayer.cli_exec": "exec's planning and reporting, shared by the command line and the broker",
    "envlayer.cli_entry": "the console script: exec to the broker, else the in-process command line",
    "envlayer.cli_parser": "the command line's parser, shared by the command line and the broker",
    "envlayer.cli_report": "the sweeping commands' tables and JSON, documented in docs/cli.md",
    "envlayer.broker": "the session broker behind `envlayer exec`, documented in docs/cli.md",
    "envlayer.cli_completion": "the shell completion script of the command line",
    "envlayer.cli_cells": "the LAST USED and SIZE cells of `envlayer ls` / `reap`, documented in docs/cli.md",
    "envlayer.progress": "the command line's status line on a terminal",
    "envlayer.install_hints": "install and start hints that fit where the user is",
    "envlayer.bench": "`envlayer bench`, documented in docs/cli.md and docs/benchmarks.md",
}


def test_every_module_is_public_or_declared_internal() -> None:
    modules = {
        f"envlayer.{p.stem if p.suffix == '.py' else p.name}"
        for p in (ROOT / "envlayer").iterdir()
        if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert modules - set(PUBLIC) - set(INTERNAL) == set(), "list new modules in docs/api.md (or INTERNAL here)"
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
