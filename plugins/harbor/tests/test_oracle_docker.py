"""Harbor's oracle agent through ``envlayer_harbor:Environment`` on the Docker backend.

One ``harbor run`` (the command a user types) over the three tasks in ``tasks/``; each
trial's reward and exception come from Harbor's own ``result.json``. Harbor's built-in
docker environment cannot run here for comparison: it calls ``docker compose`` (v2),
which this machine lacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.sandbox.dockerfile import resolve_build
from envlayer.testing.fixtures import require_docker

TASKS = Path(__file__).parent / "tasks"
BASE_IMAGE = "envlayer-test:debian"
"""What the tasks' Dockerfiles start FROM (scripts/provision builds it)."""
HARBOR = Path(sys.executable).parent / "harbor"


def _task_tags() -> list[str]:
    tags = []
    for task in sorted(TASKS.iterdir()):
        build = resolve_build(str(task / "environment" / "Dockerfile"), None)
        assert build is not None
        tags.append(build.tag)
    return tags


@pytest.fixture(scope="module")
def docker_api() -> Iterator[Any]:
    require_docker(BASE_IMAGE, "the Harbor tests on Docker")
    import docker

    yield docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())


@pytest.fixture(scope="module")
def run(docker_api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the oracle over every task once; yields {"profile", "trials": {task: result.json}}
    and removes what the run built and (on failure) left."""
    profile = f"envlayer-test-harbor-{uuid.uuid4().hex[:8]}"
    jobs = tmp_path_factory.mktemp("jobs")
    existing = {tag for tag in _task_tags() if _exists(docker_api, tag)}
    argv = [
        str(HARBOR), "run", "-p", str(TASKS), "-a", "oracle", "--env", "envlayer_harbor:Environment",
        "--ek", "backend=docker", "--ek", f"profile={profile}", "-o", str(jobs), "-y", "-q",
    ]  # fmt: skip
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "0"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
        trials = {}
        for path in jobs.glob("*/*/result.json"):
            result = json.loads(path.read_text())
            trials[result["task_name"]] = {**result, "dir": path.parent}
        yield {"profile": profile, "trials": trials, "proc": proc, "existing": existing}
    finally:
        for summary in docker_api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
            with contextlib.suppress(Exception):
                docker_api.remove_container(summary["Id"], force=True, v=True)
        for tag in set(_task_tags()) - existing:
            with contextlib.suppress(Exception):
                docker_api.remove_image(tag, force=True)


def _exists(api: Any, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        api.inspect_image(tag)
        return True
    except ImageNotFound:
        return False


def _trial(run: dict[str, Any], task: str) -> dict[str, Any]:
    assert task in run["trials"], f"no result for {task}: {run['proc'].stdout[-3000:]}{run['proc'].stderr[-3000:]}"
    return run["trials"][task]


def _reward(trial: dict[str, Any]) -> float:
    return trial["verifier_result"]["rewards"]["reward"]


def test_hello_world_gets_reward_one(run: dict[str, Any]) -> None:
    trial = _trial(run, "hello-world")
    assert trial["exception_info"] is None
    assert _reward(trial) == 1.0  # the test script also checks it ran in the image's WORKDIR


def test_several_files_and_a_test_script_get_reward_one(run: dict[str, Any]) -> None:
    trial = _trial(run, "several-files")
    stdout = (trial["dir"] / "verifier" / "test-stdout.txt").read_text()
    assert _reward(trial) == 1.0, stdout
    assert "4 of 4 checks passed" in stdout  # totals, file list, .dockerignore, no network


def test_a_command_past_the_agent_timeout_is_killed_with_its_tree(run: dict[str, Any]) -> None:
    trial = _trial(run, "times-out")
    assert trial["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert _reward(trial) == 0.0
    assert (trial["dir"] / "verifier" / "leftover.txt").read_text() == ""  # no `sleep 600` survived


def test_the_run_leaves_no_sandbox_and_the_images_can_go_at_once(run: dict[str, Any], docker_api: Any) -> None:
    assert run["proc"].returncode == 0, run["proc"].stderr[-3000:]
    assert docker_api.containers(all=True, filters={"label": f"envlayer.profile={run['profile']}"}) == []
    for tag in set(_task_tags()) - run["existing"]:
        docker_api.remove_image(tag)  # no container uses it any more: no force needed
