"""Harbor's oracle agent through ``envlayer_harbor:Environment`` on the Docker backend.

One ``harbor run`` (the command a user types) over the three tasks in ``tasks/``; each
trial's reward and exception come from Harbor's own ``result.json``. Harbor's built-in
docker environment cannot run here for comparison: it calls ``docker compose`` (v2),
which this machine lacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from harbor_runs import BASE_IMAGE, TASKS, harbor_run, reward

from envlayer.sandbox.dockerfile import resolve_build
from envlayer.testing.fixtures import require_docker


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
    """The oracle over every task once (:func:`harbor_runs.harbor_run`); removes the images
    the run built and (on failure) what it left."""
    existing = {tag for tag in _task_tags() if _exists(docker_api, tag)}
    result: dict[str, Any] = {"profile": "", "existing": existing}
    try:
        result.update(harbor_run(tmp_path_factory.mktemp("jobs"), ["--ek", "backend=docker"]))
        yield result
    finally:
        if result["profile"]:
            for summary in docker_api.containers(all=True, filters={"label": f"envlayer.profile={result['profile']}"}):
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


def test_hello_world_gets_reward_one(run: dict[str, Any]) -> None:
    assert reward(run, "hello-world") == 1.0  # the test script also checks it ran in the image's WORKDIR
    assert run["trials"]["hello-world"]["exception_info"] is None


def test_several_files_and_a_test_script_get_reward_one(run: dict[str, Any]) -> None:
    trial = run["trials"].get("several-files") or {}
    stdout = (trial["dir"] / "verifier" / "test-stdout.txt").read_text() if trial else ""
    assert reward(run, "several-files") == 1.0, stdout
    assert "4 of 4 checks passed" in stdout  # totals, file list, .dockerignore, no network


def test_a_command_past_the_agent_timeout_is_killed_with_its_tree(run: dict[str, Any]) -> None:
    assert reward(run, "times-out") == 0.0
    trial = run["trials"]["times-out"]
    assert trial["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert (trial["dir"] / "verifier" / "leftover.txt").read_text() == ""  # no `sleep 600` survived


def test_the_run_leaves_no_sandbox_and_the_images_can_go_at_once(run: dict[str, Any], docker_api: Any) -> None:
    assert run["proc"].returncode == 0, run["proc"].stderr[-3000:]
    assert docker_api.containers(all=True, filters={"label": f"envlayer.profile={run['profile']}"}) == []
    for tag in set(_task_tags()) - run["existing"]:
        docker_api.remove_image(tag)  # no container uses it any more: no force needed
