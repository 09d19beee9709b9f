"""The manager and the tools on real Docker (the envlayer_docker plugin, a real daemon,
the local test image): tool calls end to end, and the at-exit path in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envlayer.agents.tools import ToolConfig, ToolRegistry

pytestmark = pytest.mark.docker

CHILD = """
import sys
from envlayer.config import load_settings
from envlayer.agents.manager import EnvironmentManager
config, profile, image = sys.argv[1:4]
settings = load_settings(config_path=config, env={}, backend="docker", profile=profile,
                         backend_options={"image": image})
manager = EnvironmentManager(settings)
manager.register_overrides("opt-out", options={"persist_across_processes": False})
for task in ("persist", "opt-out"):
    env = manager.get(task)
    assert env.exec("echo ready").stdout_text == "ready\\n"
    print(task, flush=True)
# no close(): the at-exit hook must release both, removing only the opt-out container
"""


def labels_of(name: str) -> tuple[str, bool]:
    out = subprocess.run(
        ["docker", "inspect", "-f", '{{index .Config.Labels "envlayer.task"}} {{.State.Running}}', name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    return out[0], out[1] == "true"


def test_at_exit_keeps_persist_mode_and_removes_opt_out(
    docker_profile: str, tmp_path: Path, containers, test_image: str
) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), docker_profile, test_image],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["persist", "opt-out"]
    left = [labels_of(name) for name in containers(docker_profile)]
    assert left == [("persist", True)], left


def test_tools_end_to_end_on_docker(make_manager, docker_settings, wait_until) -> None:  # type: ignore[no-untyped-def]
    tools = ToolRegistry(make_manager(docker_settings), ToolConfig(output_chars=400))
    run = lambda name, args: tools.run_tool(name, args, "docker-task")  # noqa: E731

    assert (
        run("write_file", {"path": "/tmp/w/hello.sh", "content": "echo hello from $(uname -s)\n"})["bytes_written"] > 0
    )
    ran = run("terminal", {"command": "sh hello.sh > out.txt; echo err >&2", "workdir": "/tmp/w"})
    assert ran["exit_code"] == 0 and ran["output"] == "err\n"
    # separate pipes: writes a few ms apart arrive in order (simultaneous ones may swap)
    ordered = run("terminal", {"command": "echo one; sleep 0.05; echo two >&2; sleep 0.05; echo three"})
    assert ordered["output"] == "one\ntwo\nthree\n"  # arrival order, as in a terminal
    assert run("read_file", {"path": "/tmp/w/out.txt"})["content"] == "hello from Linux\n"

    long = run("terminal", {"command": "seq 1 3000; echo TAIL"})
    assert long["truncated"] and long["output"].startswith("1\n") and long["output"].endswith("TAIL\n")
    # the cut middle is kept in a private file in the container, readable through the tools
    assert long["output_file"].startswith("/root/.cache/envlayer/output/")
    middle = run("read_file", {"path": long["output_file"], "offset": 1500, "limit": 2})
    assert middle["content"] == "1500\n1501\n" and middle["total_lines"] == 3001
    mode = run("terminal", {"command": f"stat -c %a {long['output_file']}"})
    assert mode["output"] == "600\n"

    timed = run("terminal", {"command": "echo partial; sleep 30", "timeout": 1})
    assert timed["error"]["type"] == "timeout" and timed["output"] == "partial\n"
    assert run("terminal", {"command": "echo alive"})["output"] == "alive\n"  # usable after the kill

    job = run("terminal", {"command": "echo in background; sleep 1; echo end", "background": True})
    status: dict = {}  # type: ignore[type-arg]

    def finished() -> bool:
        status.update(run("terminal_job", {"job_id": job["job_id"]}))
        return status["status"] != "running"

    assert wait_until(finished)
    assert status.get("exit_code") == 0, status
    assert status["output"] == "in background\nend\n"
    forever = run("terminal", {"command": "sleep 300", "background": True})
    assert run("terminal_job", {"job_id": forever["job_id"], "action": "kill"})["status"] == "killed"
    assert run("terminal", {"command": "ps | grep -c '[s]leep 300' || true"})["output"].strip() == "0"

    assert run("read_file", {"path": "/nope"})["error"]["type"] == "file_not_found"
    assert run("read_file", {"path": "/tmp"})["error"]["type"] == "is_a_directory"


def test_idle_reap_keeps_a_persist_mode_container_and_reattaches(
    make_manager, make_settings, docker_profile: str, containers, wait_until, test_image: str
) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(
        backend="docker", profile=docker_profile, lifetime_seconds=0.5, backend_options={"image": test_image}
    )
    manager = make_manager(settings, reap_interval=0.1)
    env = manager.get("kept")
    env.write_file("/tmp/state.txt", "survives")
    assert wait_until(lambda: env.closed)  # reaped (no force)
    assert len(containers(docker_profile, running_only=True)) == 1
    again = manager.get("kept")
    assert again is not env
    assert again.read_file("/tmp/state.txt") == b"survives"  # the same container
    assert manager.release("kept", force_remove=True) is not None
    assert wait_until(lambda: containers(docker_profile) == [])
