"""The registry's file, transfer and sandbox tools on the local backend (in-process): what
a bad call gets, that nothing is written or deleted by a refused one, names no shell
quoting could carry, the create_sandbox policy, and background jobs stopped on request."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.agents.manager import EnvironmentManager
from envlayer.agents.tools import ALL_TOOLS, SandboxPolicy, ToolConfig, ToolRegistry
from envlayer.agents.tools.output_schemas import OUTPUTS
from envlayer.agents.tools.sandbox_tools import ANY
from envlayer.config import load_settings
from tests.integrations.mcp_harness import alive, wait_until


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def registry(work: Path, *, file_root: str | None = None, **config: Any) -> ToolRegistry:
    options = {"cwd": str(work), "snapshot_dir": str(work.parent / "snaps")}
    if file_root is not None:
        options["file_root"] = file_root
    settings = load_settings(
        backend="local", profile="envlayer-test-tools", backend_options=options, config_path=_empty(work)
    )
    return ToolRegistry(EnvironmentManager(settings), ToolConfig(**config), tools=ALL_TOOLS)


def _empty(work: Path) -> str:
    path = work.parent / "empty.toml"
    path.write_text("")
    return str(path)


@pytest.fixture
def tools(work: Path) -> Iterator[ToolRegistry]:
    reg = registry(work)
    yield reg
    reg.manager.close()


def test_every_tool_has_an_output_schema_that_its_definition_carries(tools: ToolRegistry) -> None:
    assert sorted(d.name for d in tools.definitions) == sorted(OUTPUTS) == sorted(ALL_TOOLS)
    assert all(d.output == OUTPUTS[d.name] for d in tools.definitions)
    with pytest.raises(ValueError, match="unknown tool"):
        ToolRegistry(tools.manager, tools=["terminal", "rm_rf"])


def test_names_with_spaces_quotes_and_newlines_are_listed_as_they_are(tools: ToolRegistry, work: Path) -> None:
    odd = ["a b", "it's", 'q"uote', "new\nline", "$(touch pwned)", "-n"]
    for name in odd:
        (work / name).write_text("x")
    listed = tools.run_tool("list_files", {"path": str(work)})
    assert sorted(e["path"] for e in listed["entries"]) == sorted(f"{work}/{n}" for n in odd)
    for name in odd:
        assert tools.run_tool("file_info", {"path": f"{work}/{name}"})["size"] == 1
    assert tools.run_tool("delete_file", {"path": f"{work}/-n"})["deleted"]["type"] == "file"
    assert not (work / "pwned").exists() and not (work / "-n").exists()


def test_paths_outside_file_root_are_refused_before_anything_runs(work: Path) -> None:
    (work.parent / "outside.txt").write_text("keep me")
    reg = registry(work, file_root=str(work))
    try:
        for name, args in [
            ("delete_file", {"path": "../outside.txt"}),
            ("move_file", {"source": "../outside.txt", "destination": "in.txt"}),
            ("list_files", {"path": ".."}),
            ("upload_files", {"directory": "/tmp", "files": [{"path": "x", "content": "y"}]}),
        ]:
            assert reg.run_tool(name, args)["error"]["type"] == "path_outside_sandbox", name
        assert (work.parent / "outside.txt").read_text() == "keep me"
        assert reg.run_tool("file_info", {"path": "nul\0byte"})["error"]["type"] == "bad_arguments"
    finally:
        reg.manager.close()


def test_an_upload_with_one_bad_file_writes_none(tools: ToolRegistry, work: Path) -> None:
    files = [{"path": "good.txt", "content": "fine"}, {"path": "bad.bin", "content": "!!", "encoding": "base64"}]
    result = tools.run_tool("upload_files", {"directory": str(work), "files": files})
    assert result["error"]["type"] == "bad_arguments" and "files[1]" in result["error"]["message"]
    assert not (work / "good.txt").exists()
    wrong = tools.run_tool("upload_files", {"directory": str(work), "files": [{"path": "a", "content": 1}]})
    assert "files[0]" in wrong["error"]["message"] and "must be a string" in wrong["error"]["message"]
    none = tools.run_tool("upload_files", {"directory": str(work), "files": []})
    assert "at least 1" in none["error"]["message"]


def test_transfer_limits_are_enforced(work: Path) -> None:
    reg = registry(work, transfer_bytes=10, list_entries=2)
    try:
        big = [{"path": "a", "content": "x" * 11}]
        assert (
            "more than 10" in reg.run_tool("upload_files", {"directory": str(work), "files": big})["error"]["message"]
        )
        many = [{"path": str(i), "content": ""} for i in range(3)]
        assert (
            "more than 2" in reg.run_tool("upload_files", {"directory": str(work), "files": many})["error"]["message"]
        )
        (work / "blob").write_bytes(base64.b64decode("AAAAAAAAAAAAAAAA"))
        down = reg.run_tool("download_files", {"directory": str(work)})
        assert down["files"] == [] and down["skipped"][0]["path"] == "blob" and down["truncated"] is True
    finally:
        reg.manager.close()


def test_the_policy_matches_values_given_as_text_and_as_json() -> None:
    policy = SandboxPolicy(backends=("docker",), options={"cpus": ("2",), "image": ANY, "privileged": ("false",)})
    policy.check("local", "docker", {"cpus": 2, "image": "anything", "privileged": False})
    for backend, options in [("ssh", {}), (None, {"cpus": 3}), (None, {"memory": "1g"})]:
        with pytest.raises(Exception, match="not allowed") as info:
            policy.check("local", backend, options)
        assert info.value.hint  # type: ignore[attr-defined]


def test_stop_jobs_kills_the_registrys_background_jobs_and_deletes_their_files(tools: ToolRegistry, work: Path) -> None:
    quick = tools.run_tool("terminal", {"command": "echo done", "background": True}, "t")
    started = tools.run_tool("terminal", {"command": f"echo $$ > {work}/pid; sleep 300", "background": True}, "t")
    wait_until(lambda: (work / "pid").exists() and (work / "pid").read_text().strip() != "", "the job wrote its pid")
    job_dirs = [Path(quick["log_file"]).parent, Path(started["log_file"]).parent]
    assert all(d.is_dir() for d in job_dirs)
    assert tools.stop_jobs() == 2
    wait_until(lambda: not alive(int((work / "pid").read_text())), "the job is gone")
    assert not any(d.exists() for d in job_dirs)
    assert tools.run_tool("terminal_job", {"job_id": started["job_id"]}, "t")["error"]["type"] == "job_error"
    assert tools.stop_jobs() == 0
