"""``envlayer_harbor.Environment`` called the way Harbor calls it, on the Docker backend:
a cancelled exec (Harbor's agent timeout is an ``asyncio.wait_for`` around the agent)
kills the command's tree, output streams to Harbor's callback, files and directories
travel both ways, and ``stop`` returns once the container is gone."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envlayer_harbor import Environment
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from envlayer.testing.fixtures import require_docker

TASK = Path(__file__).parent / "tasks" / "hello-world"
SLEEPERS = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null | grep '^sleep 60' || true"
"""Prints the command lines of the tests' ``sleep 60N`` processes still alive."""


@pytest.fixture
def harbor_env(tmp_path: Path) -> Iterator[Any]:
    require_docker("envlayer-test:debian", "the Harbor tests on Docker")
    import docker
    from docker.errors import ImageNotFound

    from envlayer.sandbox.dockerfile import resolve_build

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    build = resolve_build(str(TASK / "environment" / "Dockerfile"), None)
    assert build is not None
    try:
        built_before = bool(api.inspect_image(build.tag))
    except ImageNotFound:
        built_before = False
    profile = f"envlayer-test-harbor-{uuid.uuid4().hex[:8]}"
    env = Environment(
        environment_dir=TASK / "environment",
        environment_name="hello-world",
        session_id=f"hello-world__{uuid.uuid4().hex[:7]}__env",
        trial_paths=TrialPaths(trial_dir=tmp_path / "trial"),
        task_env_config=EnvironmentConfig(),
        backend="docker",
        profile=profile,
    )
    asyncio.run(env.start(force_build=False))
    env.api, env.profile = api, profile
    try:
        yield env
    finally:
        asyncio.run(env.stop(delete=True))
        for summary in api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
            api.remove_container(summary["Id"], force=True, v=True)
        if not built_before:
            with contextlib.suppress(Exception):
                api.remove_image(build.tag)  # not forced: another run may use it


def test_a_cancelled_exec_kills_the_commands_tree(harbor_env: Any) -> None:
    async def scenario() -> str:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(harbor_env.exec("sleep 600 & sleep 601; echo never"), 2)
        await asyncio.sleep(0.5)
        found = await harbor_env.exec(SLEEPERS, user="root")
        return found.stdout or ""

    assert asyncio.run(scenario()) == ""


def test_a_timeout_kills_the_tree_and_raises_like_harbors_docker_environment(harbor_env: Any) -> None:
    async def scenario() -> str:
        with pytest.raises(RuntimeError, match="timed out after 1 seconds"):
            await harbor_env.exec("sleep 602", timeout_sec=1)
        return (await harbor_env.exec(SLEEPERS)).stdout or ""

    assert asyncio.run(scenario()) == ""


def test_output_streams_to_harbors_callback_and_the_result_keeps_both_streams(harbor_env: Any) -> None:
    seen: list[tuple[str, str]] = []

    async def callback(text: str, stream: str) -> None:
        seen.append((stream, text))

    async def scenario() -> Any:
        with harbor_env.scoped_output_callback(callback):
            return await harbor_env.exec("echo out; echo err >&2; exit 3", env={"X": "1"})

    result = asyncio.run(scenario())
    assert (result.return_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert ("stdout", "out\n") in seen and ("stderr", "err\n") in seen


def test_workdir_logs_and_files_both_ways(harbor_env: Any, tmp_path: Path) -> None:
    source = tmp_path / "up"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "b.txt").write_text("bee")
    (source / "a.txt").write_text("ay")

    async def scenario() -> Any:
        await harbor_env.upload_dir(source, "/tests")
        await harbor_env.upload_file(source / "a.txt", "/solution/a.txt")
        await harbor_env.upload_file(source / "a.txt", "/tests/sub")  # a directory: lands as /tests/sub/a.txt
        listing = await harbor_env.exec("pwd; ls -ld /logs/agent /logs/verifier /logs/artifacts | cut -c1-10")
        await harbor_env.exec("echo 1 > /logs/verifier/reward.txt")
        await harbor_env.download_dir("/tests", tmp_path / "down")
        await harbor_env.download_file("/logs/verifier/reward.txt", tmp_path / "reward.txt")
        return listing

    listing = asyncio.run(scenario())
    assert listing.stdout == "/app\n" + "drwxrwxrwx\n" * 3  # the image's WORKDIR; Harbor's log dirs
    assert (tmp_path / "down" / "sub" / "b.txt").read_text() == "bee"
    assert (tmp_path / "down" / "sub" / "a.txt").read_text() == "ay"
    assert (tmp_path / "down" / "a.txt").read_text() == "ay"
    assert (tmp_path / "reward.txt").read_text() == "1\n"


def test_stop_returns_once_the_container_is_gone(harbor_env: Any) -> None:
    asyncio.run(harbor_env.stop(delete=True))
    assert harbor_env.api.containers(all=True, filters={"label": f"envlayer.profile={harbor_env.profile}"}) == []


def test_a_start_cancelled_during_the_build_leaves_no_sandbox(tmp_path: Path) -> None:
    """Harbor's build timeout cancels ``start`` while the image builds; the worker thread
    goes on and creates the sandbox, which ``start`` then removes."""
    require_docker("envlayer-test:debian", "the Harbor tests on Docker")
    import docker

    from envlayer.sandbox.dockerfile import resolve_build

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    dockerfile = tmp_path / "environment" / "Dockerfile"
    dockerfile.parent.mkdir()
    dockerfile.write_text(f"FROM envlayer-test:debian\nRUN echo {uuid.uuid4().hex} > /id && sleep 3\n")
    build = resolve_build(str(dockerfile), None)
    assert build is not None
    profile = f"envlayer-test-harbor-{uuid.uuid4().hex[:8]}"
    env = Environment(
        environment_dir=dockerfile.parent,
        environment_name="slow-build",
        session_id=f"slow-build__{uuid.uuid4().hex[:7]}__env",
        trial_paths=TrialPaths(trial_dir=tmp_path / "trial"),
        task_env_config=EnvironmentConfig(),
        backend="docker",
        profile=profile,
    )
    try:
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(env.start(force_build=False), 1))
        assert api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}) == []
    finally:
        for summary in api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
            api.remove_container(summary["Id"], force=True, v=True)
        with contextlib.suppress(Exception):
            api.remove_image(build.tag, force=True)


def test_preflight_names_an_unknown_keyword_before_any_trial() -> None:
    from envlayer.errors import ConfigError

    Environment.preflight({"backend": "docker", "cpus": 2})
    with pytest.raises(ConfigError, match="cpu") as refused:
        Environment.preflight({"backend": "docker", "cpu": 2})
    assert "did you mean 'cpus'" in refused.value.hint
