"""Forking a task's environment from the agent layer: ``EnvironmentManager.fork``,
``ToolRegistry.fork`` and their ``envlayer.aio`` forms, through the real local backend
(a temporary working directory and snapshot store) and real Docker (the test image).

Each test releases its forks with ``purge`` and checks that nothing of its profile is
left: fork directories (local), containers, volumes and snapshot images (Docker)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from envlayer.agents.manager import EnvironmentManager, TaskBindingConflict
from envlayer.agents.tools import ToolRegistry
from envlayer.aio import AsyncEnvironmentManager, AsyncToolRegistry
from envlayer.config import Settings

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=BACKENDS)
def settings(request: pytest.FixtureRequest, make_settings: Callable[..., Settings], tmp_path: Path) -> Settings:
    """Settings of the backend under test, in the test's profile."""
    if request.param == "local":
        work = tmp_path / "work"
        work.mkdir()
        self_store = tmp_path / "store"
        return make_settings(backend="local", backend_options={"cwd": str(work), "snapshot_dir": str(self_store)})
    return request.getfixturevalue("docker_settings")


def leftovers(settings: Settings, tmp_path: Path) -> list[str]:
    """What the forks left: local fork directories, or Docker containers, volumes and
    snapshot images of the profile."""
    if settings.backend == "local":
        forks = tmp_path / "store" / "forks"
        return os.listdir(forks) if forks.is_dir() else []
    label = f"label=envlayer.profile={settings.profile}"
    out = []
    for args in (["ps", "-aq"], ["volume", "ls", "-q"], ["images", "-aq"]):
        done = subprocess.run(["docker", *args, "--filter", label], capture_output=True, text=True, timeout=60)
        out += done.stdout.split()
    return out


def release_all(manager: EnvironmentManager, tasks: list[str]) -> None:
    for task in tasks:
        manager.release(task, force_remove=True, purge=True)
    manager.close(timeout=60)


def test_manager_fork_binds_new_tasks_to_copies(settings: Settings, make_manager, tmp_path: Path) -> None:
    manager = make_manager(settings)
    tasks = ["src", "a", "b"]
    try:
        manager.get("src").write_file("state.txt", "prepared")
        a, b = manager.fork("src", ["a", "b"])
        assert (a.task_id, b.task_id) == ("a", "b")
        assert manager.get("a") is a and manager.key_for("b") == b.key
        assert b.read_file("state.txt") == b"prepared"
        a.write_file("state.txt", "changed in a")
        assert manager.get("src").read_file("state.txt") == b"prepared"
        assert b.exec("cat state.txt").stdout == b"prepared"
        with pytest.raises(TaskBindingConflict, match="cannot fork into task 'a'"):
            manager.fork("src", ["c", "a"])
        assert manager.key_for("c") not in manager.active_keys()
    finally:
        release_all(manager, tasks)
    assert leftovers(settings, tmp_path) == []


def test_tool_registry_fork_then_run_tool_in_the_fork(settings: Settings, make_manager, tmp_path: Path) -> None:
    manager = make_manager(settings)
    tools = ToolRegistry(manager)
    try:
        assert "error" not in tools.run_tool("write_file", {"path": "notes.txt", "content": "seen"}, "src")
        assert tools.fork("src", ["t1"]) == {"tasks": ["t1"]}
        out = tools.run_tool("terminal", {"command": "cat notes.txt"}, "t1")
        assert out["output"].strip() == "seen" and out["exit_code"] == 0
        refused = tools.fork("src", ["src"])
        assert refused["error"]["type"] == "bad_arguments" and "differ from the source" in refused["error"]["message"]
    finally:
        release_all(manager, ["src", "t1"])
    assert leftovers(settings, tmp_path) == []


def test_aio_fork(settings: Settings, make_manager, tmp_path: Path) -> None:
    manager = make_manager(settings)

    async def scenario() -> None:
        amanager = AsyncEnvironmentManager(manager)
        src = await amanager.get("src")
        await src.write_file("f.txt", "one")
        (fork,) = await amanager.fork("src", ["x"])
        assert await fork.read_text("f.txt") == "one"
        tools = AsyncToolRegistry(amanager)
        assert await tools.fork("src", ["y"]) == {"tasks": ["y"]}
        assert (await tools.run_tool("read_file", {"path": "f.txt"}, "y"))["content"] == "one"

    try:
        asyncio.run(scenario())
    finally:
        release_all(manager, ["src", "x", "y"])
    assert leftovers(settings, tmp_path) == []
