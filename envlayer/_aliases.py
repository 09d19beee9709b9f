"""Old import paths of the modules that moved into subpackages, kept working for one release.

``import envlayer.manager`` (or ``from envlayer import lifecycle``) gives the very module object now at
its new path (``envlayer.agents.manager``, ``envlayer.dispatch``), so ``isinstance`` checks and
monkeypatching through either path agree. The old paths of modules that ``docs/api.md`` lists as public
warn with ``DeprecationWarning``; the others (internal modules) resolve silently. Installed by
``envlayer/__init__.py``; nothing else is imported until an old path is asked for.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module path -> new module path; a moved package also maps every submodule by prefix.
MOVED: dict[str, str] = {
    "envlayer.lifecycle": "envlayer.dispatch",
    "envlayer.shell_session": "envlayer.execution.shell_session",
    "envlayer.shell_script": "envlayer.execution.shell_script",
    "envlayer.streams": "envlayer.execution.streams",
    "envlayer.collector": "envlayer.execution.collector",
    "envlayer.output": "envlayer.execution.output",
    "envlayer.cancel": "envlayer.execution.cancel",
    "envlayer.proctree": "envlayer.execution.tree_kill",
    "envlayer.sandbox_kill": "envlayer.execution.tree_kill",
    "envlayer.execution.proctree": "envlayer.execution.tree_kill",
    "envlayer.execution.sandbox_kill": "envlayer.execution.tree_kill",
    "envlayer.sandbox_base": "envlayer.sandbox.base",
    "envlayer.sandbox_options": "envlayer.sandbox.options",
    "envlayer.sandbox_paths": "envlayer.sandbox.paths",
    "envlayer.sandbox_tags": "envlayer.sandbox.tags",
    "envlayer.archive": "envlayer.sandbox.archive",
    "envlayer.tar_extract": "envlayer.sandbox.archive",
    "envlayer.retry": "envlayer.sandbox.retry",
    "envlayer.owner": "envlayer.sandbox.owner",
    "envlayer.background": "envlayer.sandbox.teardown_threads",
    "envlayer.idle_check": "envlayer.sandbox.idle_check",
    "envlayer.agent_env": "envlayer.sandbox.command_env",
    "envlayer.registry": "envlayer.discovery.backend_registry",
    "envlayer.entrypoints": "envlayer.discovery.entrypoints",
    "envlayer.plugin_errors": "envlayer.discovery.plugin_calls",
    "envlayer.install_hints": "envlayer.discovery.install_hints",
    "envlayer.manager": "envlayer.agents.manager",
    "envlayer.task_bindings": "envlayer.agents.task_bindings",
    "envlayer.orphan_sweeps": "envlayer.agents.orphan_sweeps",
    "envlayer.exit_hook": "envlayer.agents.exit_hook",
    "envlayer.tools": "envlayer.agents.tools",
    "envlayer.tools.registry": "envlayer.agents.tools.tool_registry",
    "envlayer.cli_exec": "envlayer.cli.exec_plan",
    "envlayer.cli_env": "envlayer.cli.exec_env",
    "envlayer.cli_cells": "envlayer.cli.table_cells",
    "envlayer.cli_completion": "envlayer.cli.completion",
    "envlayer.cli_snapshot": "envlayer.cli.snapshot",
    "envlayer.progress": "envlayer.cli.progress",
    "envlayer.broker": "envlayer.cli.broker",
    "envlayer.bench.command": "envlayer.cli.bench",
    "envlayer.backends": "envlayer.local",
    "envlayer.backends.local": "envlayer.local.backend",
    "envlayer.backends.local_session": "envlayer.local.session",
    "envlayer.backends.local_snapshots": "envlayer.local.snapshots",
    "envlayer.backends.local_tasks": "envlayer.local.tasks",
    "envlayer.backends.local_terminal": "envlayer.local.terminal",
    "envlayer.backends.piped_output": "envlayer.sandbox.piped_output",
}

#: old paths that docs/api.md listed as public: importing them warns.
DEPRECATED: frozenset[str] = frozenset(
    f"envlayer.{name}"
    for name in [
        "lifecycle",
        "sandbox_base",
        "sandbox_options",
        "registry",
        "collector",
        "output",
        "streams",
        "shell_session",
        "manager",
        "task_bindings",
        "orphan_sweeps",
        "tools",
        "agent_env",
        "cancel",
        "sandbox_kill",
        "owner",
        "plugin_errors",
        "sandbox_tags",
        "sandbox_paths",
        "idle_check",
        "archive",
        "tar_extract",
        "background",
        "retry",
        "execution.sandbox_kill",
    ]
)


def new_path(old: str) -> str | None:
    """The module path that ``old`` moved to, or ``None`` when ``old`` did not move."""
    if old in MOVED:
        return MOVED[old]
    package, _, leaf = old.rpartition(".")
    parent = new_path(package) if package.startswith("envlayer.") else None
    return f"{parent}.{leaf}" if parent else None


class _AliasLoader:
    """Hands out the already imported module at the new path, leaving its own ``__spec__`` intact."""

    def __init__(self, target: ModuleType) -> None:
        self.target = target
        self.spec = target.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.target

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's spec on it; put the real one back


class _AliasFinder:
    """A meta-path finder that resolves old ``envlayer`` module paths to the moved modules."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_path(fullname) if fullname.startswith("envlayer.") else None
        if new is None:
            return None
        if fullname in DEPRECATED:
            warnings.warn(f"{fullname} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module))


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if _AliasFinder not in sys.meta_path:
        sys.meta_path.insert(0, _AliasFinder)
