"""``envlayer-mcp`` on the Docker backend (a real daemon), driven by the ``mcp`` SDK's stdio
client: every tool, a cancelled call whose process tree is gone from the container (seen
with ``ps`` inside it), a refused backend and option, and no container or volume left
once the server exits (its sandboxes are private to it: owner label, removed at exit)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from envlayer.testing.fixtures import require_docker
from tests.integrations.mcp_harness import (
    SCRIPT,
    error_of,
    server_env,
    stdio_session,
    structured,
    unique_profile,
    write_config,
)

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _docker(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()


def _managed(kind: str, profile: str) -> list[str]:
    """Ids of the managed containers (``ps``), volumes or images of ``profile``."""
    label = f"label=envlayer.profile={profile}"
    if kind == "ps":
        return _docker("ps", "-aq", "--filter", label)
    if kind == "volume":
        return _docker("volume", "ls", "-q", "--filter", label)
    return _docker("images", "-q", "--filter", label)


@pytest.fixture
def profile() -> Iterator[str]:
    """A profile of its own; whatever carries it is removed afterwards, even on failure."""
    require_docker(IMAGE, "the MCP Docker tests")
    name = unique_profile()
    yield name
    for container in _managed("ps", name):
        subprocess.run(["docker", "rm", "-fv", container], capture_output=True, timeout=120)
    for volume in _managed("volume", name):
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True, timeout=120)
    for image in set(_managed("image", name)):
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)


def docker_config(home: Path, profile: str, extra: str = "") -> str:
    return write_config(
        home, f'backend = "docker"\nprofile = "{profile}"\n[backends.docker]\nimage = "{IMAGE}"\n{extra}'
    )


def test_every_tool_on_docker_and_nothing_left_after(tmp_path: Path, profile: str) -> None:
    async def go() -> None:
        async with stdio_session(tmp_path, docker_config(tmp_path, profile)) as s:
            call = s.call_tool
            assert "snapshot" in [t.name for t in (await s.list_tools()).tools]
            out = structured(await call("terminal", {"command": "mkdir -p /w && cd /w && echo in $(pwd)"}))
            assert out["output"] == "in /w\n"
            assert structured(await call("terminal", {"command": "pwd", "workdir": "/tmp"}))["output"] == "/tmp\n"
            assert error_of(await call("terminal", {"command": "sleep 30", "timeout": 1}))["type"] == "timeout"
            job = structured(await call("terminal", {"command": "echo from-job; sleep 30", "background": True}))
            assert structured(await call("terminal_job", {"job_id": job["job_id"]}))["status"] == "running"
            files = [{"path": "a/x.txt", "content": "x\n"}, {"path": "b.bin", "content": "AAE=", "encoding": "base64"}]
            assert structured(await call("upload_files", {"directory": "/w/up", "files": files}))["files_written"] == 2
            assert structured(await call("read_file", {"path": "/w/up/a/x.txt"}))["content"] == "x\n"
            structured(await call("write_file", {"path": "/w/up/c.txt", "content": "c"}))
            listed = structured(await call("list_files", {"path": "/w/up", "depth": 2}))
            assert [e["path"] for e in listed["entries"]] == ["/w/up/a", "/w/up/a/x.txt", "/w/up/b.bin", "/w/up/c.txt"]
            assert structured(await call("file_info", {"path": "/w/up/b.bin"}))["size"] == 2
            moved = structured(await call("move_file", {"source": "/w/up/c.txt", "destination": "/w/up/d/c.txt"}))
            assert moved["moved"]["path"] == "/w/up/d/c.txt"
            assert structured(await call("make_dir", {"path": "/w/up/e"}))["type"] == "directory"
            assert (
                structured(await call("delete_file", {"path": "/w/up/e", "recursive": True}))["deleted"]["type"]
                == "directory"
            )
            down = structured(await call("download_files", {"directory": "/w/up"}))
            assert [(f["path"], f["encoding"]) for f in down["files"]] == [
                ("a/x.txt", "utf-8"),
                ("b.bin", "base64"),
                ("d/c.txt", "utf-8"),
            ]
            structured(await call("snapshot", {"name": "prep"}))
            assert structured(await call("fork", {"new_sandboxes": ["f1"]}))["sandboxes"] == ["f1"]
            forked = structured(await call("terminal", {"command": "cat /w/up/a/x.txt", "sandbox": "f1"}))
            assert forked["output"] == "x\n"
            names = [r["name"] for r in structured(await call("list_sandboxes", {}))["sandboxes"]]
            assert names == ["default", "f1"]
            assert structured(await call("remove_sandbox", {"name": "f1"}))["removed"]
            names = [r["name"] for r in structured(await call("list_sandboxes", {}))["sandboxes"]]
            assert names == ["default"]
            assert len(_managed("ps", profile)) == 1

    anyio.run(go)
    assert _managed("ps", profile) == [] and _managed("volume", profile) == []


def test_a_cancelled_call_kills_the_process_tree_in_the_container(tmp_path: Path, profile: str) -> None:
    async def go() -> None:
        async with stdio_session(tmp_path, docker_config(tmp_path, profile)) as s:
            command = "sleep 3001 & sh -c 'sleep 3002 & wait' & wait"
            with pytest.raises(MCPError):  # the client's timeout sends notifications/cancelled
                await s.call_tool("terminal", {"command": command}, read_timeout_seconds=3)

            async def sleepers() -> list[str]:
                out = structured(await s.call_tool("terminal", {"command": "ps -o args | grep '[s]leep 300' || true"}))
                return str(out["output"]).splitlines()

            with anyio.fail_after(30):  # a bound against hanging, not a speed target
                while await sleepers():
                    await anyio.sleep(0.2)

    anyio.run(go)


def test_a_backend_or_image_the_config_does_not_allow_is_refused(tmp_path: Path, profile: str) -> None:
    async def go() -> None:
        config = docker_config(tmp_path, profile, f'[mcp]\nallowed_options = {{ image = ["{IMAGE}"] }}\n')
        async with stdio_session(tmp_path, config) as s:
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "backend": "local"}))
            assert refused["type"] == "not_allowed" and "docker" in refused["hint"]
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "options": {"image": "alpine"}}))
            assert refused["type"] == "not_allowed" and IMAGE in refused["hint"]
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "options": {"privileged": True}}))
            assert refused["type"] == "not_allowed"
            assert _managed("ps", profile) == []  # nothing was created
            made = structured(await s.call_tool("create_sandbox", {"name": "x", "options": {"image": IMAGE}}))
            assert made["backend"] == "docker" and len(_managed("ps", profile)) == 1

    anyio.run(go)
    assert _managed("ps", profile) == []


def test_keep_sandboxes_leaves_them_for_the_next_run(tmp_path: Path, profile: str) -> None:
    async def go(marker: str) -> str:
        config = docker_config(tmp_path, profile, "[mcp]\nkeep_sandboxes = true\n")
        async with stdio_session(tmp_path, config) as s:
            cmd = f"cat /kept 2>/dev/null || echo {marker} > /kept; cat /kept"
            return str(structured(await s.call_tool("terminal", {"command": cmd}))["output"])

    assert anyio.run(go, "first") == "first\n"
    assert len(_managed("ps", profile)) == 1
    assert anyio.run(go, "second") == "first\nfirst\n"
    labels = json.loads(subprocess.check_output(["docker", "inspect", _managed("ps", profile)[0]], timeout=60))
    assert labels[0]["Config"]["Labels"]["envlayer.task_id"] == "mcp-default"


def test_a_killed_servers_sandboxes_are_reaped_as_its_own(tmp_path: Path, profile: str) -> None:
    config = docker_config(tmp_path, profile)
    made: list[str] = []

    async def go() -> None:
        async with stdio_session(tmp_path, config) as s:
            structured(await s.call_tool("terminal", {"command": "true"}))
            made.extend(_managed("ps", profile))
            labels = json.loads(subprocess.check_output(["docker", "inspect", made[0]], timeout=60))[0]["Config"]
            os.kill(int(labels["Labels"]["envlayer.owner"].split("-")[0]), signal.SIGKILL)  # no cleanup possible

    with contextlib.suppress(Exception):  # the client's session may end in an error: its server died
        anyio.run(go)
    assert len(made) == 1 and _managed("ps", profile) == made  # left behind, still running
    reaped = subprocess.run(
        [str(Path(SCRIPT).with_name("envlayer")), "reap", "--config", config, "--json"],
        env=server_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reaped.returncode == 0, reaped.stderr
    assert [s["task"] for o in json.loads(reaped.stdout) for s in o["sandboxes"]] == ["mcp-default"]
    assert _managed("ps", profile) == []


def test_a_server_exiting_leaves_another_servers_sandbox_of_the_same_task_alone(tmp_path: Path, profile: str) -> None:
    config = docker_config(tmp_path, profile)

    async def go() -> None:
        async with stdio_session(tmp_path, config) as first:
            structured(await first.call_tool("terminal", {"command": "echo first > /who"}))
            (first_container,) = _managed("ps", profile)
            (tmp_path / "second").mkdir()
            async with stdio_session(tmp_path / "second", config) as second:
                structured(await second.call_tool("terminal", {"command": "echo second > /who"}))
                assert len(_managed("ps", profile)) == 2  # each server's private sandbox of task mcp-default
            assert _managed("ps", profile) == [first_container]  # the second's exit removed its own only
            assert structured(await first.call_tool("terminal", {"command": "cat /who"}))["output"] == "first\n"

    anyio.run(go)
    assert _managed("ps", profile) == []
