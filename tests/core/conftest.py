"""Helpers for core tests: fake plugin distributions on a temporary sys.path entry."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Test modules import their helpers (cli_run) by name under any pytest import mode.
sys.path.insert(0, str(Path(__file__).parent))

PluginMaker = Callable[..., Path]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working directory for the CLI, with no user config file (its own
    ``XDG_CONFIG_HOME``)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def make_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginMaker]:
    """Create an installed-looking distribution (``*.dist-info`` with entry points and a
    module) in a temp dir placed first on ``sys.path``. Removed after the test."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    created_modules: list[str] = []

    def make(dist: str, entry_points: dict[str, str], module: str | None = None, source: str = "") -> Path:
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(f"[envlayer.backends]\n{lines}\n")
        if module:
            (root / f"{module}.py").write_text(textwrap.dedent(source))
            created_modules.append(module)
        importlib.invalidate_caches()
        return info

    yield make
    for module in created_modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
