"""The backend is a configuration choice: file, environment variable, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlayer.agents.manager import EnvironmentManager
from envlayer.agents.tools import ToolRegistry


@pytest.fixture
def toy_config(tmp_path: Path, profile: str) -> Path:
    work = tmp_path / "local-work"
    work.mkdir()
    path = tmp_path / "envlayer.toml"
    path.write_text(
        f'backend = "toy"\nprofile = "{profile}"\nlifetime_seconds = 42\n\n[backends.local]\ncwd = "{work}"\n'
    )
    return path


def where(tools: ToolRegistry) -> str:
    return tools.run_tool("terminal", {"command": "pwd"}, "t")["output"].strip()


def test_config_file_selects_the_backend(make_manager, make_settings, toy_config: Path) -> None:  # type: ignore[no-untyped-def]
    manager = make_manager(make_settings(config_path=toy_config))
    tools = ToolRegistry(manager)
    assert "envlayer-toy-" in where(tools)  # the third-party plugin, loaded by entry point
    assert manager.key_for("t").backend == "toy"
    assert manager.settings.lifetime_seconds == 42


def test_env_var_switches_the_backend_without_code_changes(
    make_manager, make_settings, toy_config: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    manager = make_manager(make_settings(config_path=toy_config, env={"ENVLAYER_BACKEND": "local"}))
    assert where(ToolRegistry(manager)) == str(tmp_path / "local-work")  # [backends.local] from the file


def test_default_manager_reads_the_process_configuration(monkeypatch: pytest.MonkeyPatch, toy_config: Path) -> None:
    monkeypatch.setenv("ENVLAYER_CONFIG", str(toy_config))
    monkeypatch.delenv("ENVLAYER_BACKEND", raising=False)
    monkeypatch.delenv("ENVLAYER_PROFILE", raising=False)
    tools = ToolRegistry()  # no arguments at all: what an agent framework would write
    try:
        assert tools.manager.settings.backend == "toy"
        assert "envlayer-toy-" in where(tools)
        monkeypatch.setenv("ENVLAYER_BACKEND", "local")
        switched = EnvironmentManager()
        try:
            assert switched.key_for("t").backend == "local"
        finally:
            switched.close()
    finally:
        tools.manager.close()
