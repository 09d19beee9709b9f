"""The adapter's config resolution and lifecycle rules, against real backends.

* configs: envlayer's own files/variables, a config file path, the mapping form (as
  Inspect deserializes it), adapter defaults applied only where nothing was set;
* ``inspect sandbox cleanup envlayer [ID]`` (the real CLI): with an id it removes that
  sample's sandbox; without, the orphan reaper removes the sandbox of an Inspect process
  that died without cleaning up, and leaves a live one alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest
from envlayer_inspect.config import EnvlayerSandboxConfig, resolve
from envlayer_inspect.sandbox import EnvlayerSandboxEnvironment
from inspect_ai.util import SandboxEnvironmentSpec

from envlayer.errors import ConfigError

LIMITS = {"exec_output_limit": 10 * 1024**2, "read_file_limit": 100 * 1024**2}


def test_config_file_path_selects_backend_options_and_profile(tmp_path: Path) -> None:
    config = tmp_path / "envlayer.toml"
    config.write_text('backend = "local"\nprofile = "evals"\n[backends.local]\nmax_output_bytes = 2048\n')
    selection = resolve(str(config), **LIMITS)
    assert selection.backend.name == "local"
    assert selection.profile == "evals"
    assert selection.options.max_output_bytes == 2048, "an explicit value is never replaced by a default"
    assert selection.options.timeout is None, "an Inspect exec without a timeout has none"


def test_defaults_apply_where_nothing_was_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    selection = resolve(EnvlayerSandboxConfig(backend="docker", options={"image": "x:1"}), **LIMITS)
    assert selection.profile == "inspect"
    assert selection.options.persist_across_processes is False  # type: ignore[attr-defined]
    assert selection.options.max_output_bytes == LIMITS["exec_output_limit"]
    kept = resolve(EnvlayerSandboxConfig(backend="docker", options={"persist_across_processes": True}), **LIMITS)
    assert kept.options.persist_across_processes is True  # type: ignore[attr-defined]


def test_mapping_config_is_deserialized_as_inspect_does() -> None:
    spec = SandboxEnvironmentSpec.model_validate(
        {"type": "envlayer", "config": {"backend": "local", "options": {"max_file_bytes": 4096}}}
    )
    assert spec.config == EnvlayerSandboxConfig(backend="local", options={"max_file_bytes": 4096})
    assert hash(spec) == hash(
        SandboxEnvironmentSpec("envlayer", EnvlayerSandboxConfig(backend="local", options={"max_file_bytes": 4096}))
    )
    assert resolve(spec.config, **LIMITS).options.max_file_bytes == 4096


def test_bad_configs_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        resolve(str(tmp_path / "missing.toml"), **LIMITS)
    with pytest.raises(ConfigError, match="no_such_option"):
        resolve(EnvlayerSandboxConfig(backend="local", options={"no_such_option": 1}), **LIMITS)
    with pytest.raises(TypeError, match="EnvlayerSandboxConfig"):
        resolve(SandboxEnvironmentSpec("docker"), **LIMITS)


@pytest.mark.anyio
async def test_local_sample_dir_is_private_and_removed(anyio_backend: str) -> None:
    config = EnvlayerSandboxConfig(backend="local")
    first = (await EnvlayerSandboxEnvironment.sample_init("t", config, {}))["default"]
    second = (await EnvlayerSandboxEnvironment.sample_init("t", config, {}))["default"]
    dirs = [s.as_type(EnvlayerSandboxEnvironment).sample_dir for s in (first, second)]
    try:
        assert dirs[0] != dirs[1] and all(d and os.path.isdir(d) for d in dirs)
        await first.write_file("note.txt", "mine")
        assert (await first.exec(["cat", "note.txt"])).stdout == "mine"
        assert not (await second.exec(["ls", "-A"])).stdout
        assert (await first.exec(["id", "-u"], user=str(os.geteuid()))).success
    finally:
        await EnvlayerSandboxEnvironment.sample_cleanup("t", config, {"default": first}, False)
        await EnvlayerSandboxEnvironment.task_cleanup("t", config, True)
    assert not any(os.path.exists(str(d)) for d in dirs), "task_cleanup removes what sample_cleanup did not"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.docker
@pytest.mark.anyio
async def test_cancelled_exec_returns_at_once_and_cleanup_kills_it(
    docker_ready: str, docker_image: str, anyio_backend: str
) -> None:
    config = EnvlayerSandboxConfig(backend="docker", profile=docker_ready, options={"image": docker_image})
    envs = await EnvlayerSandboxEnvironment.sample_init("cancel", config, {})
    try:
        started = time.monotonic()
        with anyio.move_on_after(1):
            await envs["default"].exec(["sleep", "600"])
        # long before the command could have ended (how soon is a speed figure, not a check)
        assert time.monotonic() - started < 120, "a cancelled exec must not wait for the command"
    finally:
        await EnvlayerSandboxEnvironment.sample_cleanup("cancel", config, envs, True)
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    task_id = envs["default"].as_type(EnvlayerSandboxEnvironment).env.task_id
    left = DockerEnvironment.list_sandboxes(profile=docker_ready, options=DockerOptions())
    assert task_id not in {info.task for info in left}, "the sandbox (and the command in it) must be gone"


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_a_cancelled_exec_kills_the_command_tree(
    request: pytest.FixtureRequest, backend: str, anyio_backend: str
) -> None:
    """A sample's time limit cancels the await once the command runs: the command and
    its children are killed in the sandbox (through the call's CancelToken), not left to
    run to their end."""
    if backend == "docker":
        options = {"image": request.getfixturevalue("docker_image")}
        profile = request.getfixturevalue("docker_ready")
        config = EnvlayerSandboxConfig(backend="docker", profile=profile, options=options)
    else:
        config = EnvlayerSandboxConfig(backend="local")
    envs = await EnvlayerSandboxEnvironment.sample_init("cancel-kill", config, {})
    sandbox = envs["default"]
    pidfile = f"/tmp/envlayer-inspect-cancel-{uuid.uuid4().hex[:8]}.pids"
    pids_of = ["sh", "-c", f"cat {pidfile} 2>/dev/null"]
    alive_of = ["sh", "-c", f"for p in $(cat {pidfile}); do kill -0 $p 2>/dev/null && echo $p; done"]
    script = f"sleep 601 & echo $! > {pidfile}; sleep 602 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"
    scope = anyio.CancelScope()

    async def cancel_once_running() -> None:
        while len((await sandbox.exec(pids_of)).stdout.split()) < 3:
            await anyio.sleep(0.1)
        scope.cancel()

    try:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                group.start_soon(cancel_once_running)
                with scope:
                    await sandbox.exec(["sh", "-c", script])
                    pytest.fail("the command ran to its end")
        assert scope.cancelled_caught
        assert len((await sandbox.exec(pids_of)).stdout.split()) == 3
        alive = "?"
        for _ in range(100):  # the kill runs on a thread of its own: give it up to ~20 s
            alive = (await sandbox.exec(alive_of)).stdout.strip()
            if not alive:
                break
            await anyio.sleep(0.2)
        assert alive == "", f"processes survived the cancel: {alive}"
    finally:
        await sandbox.exec(["sh", "-c", f"kill -9 $(cat {pidfile}) 2>/dev/null; rm -f {pidfile}"])
        await EnvlayerSandboxEnvironment.sample_cleanup("cancel-kill", config, envs, True)


def _inspect_cli(*args: str, env: dict[str, str], cwd: Path) -> str:
    inspect = shutil.which("inspect", path=os.path.dirname(sys.executable))
    assert inspect, "the inspect CLI is installed with inspect-ai"
    proc = subprocess.run([inspect, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


CRASHING_EVAL = """
import os, anyio
from envlayer_inspect.sandbox import EnvlayerSandboxEnvironment
async def main():
    for _ in range(2):
        envs = await EnvlayerSandboxEnvironment.sample_init("crash", None, {})
        print(envs["default"].env.task_id, flush=True)
    os._exit(0)  # dies without cleanup, as a killed eval would
anyio.run(main)
"""


@pytest.mark.docker
def test_inspect_cleanup_cli_removes_by_id_and_reaps_dead_evals(
    docker_ready: str, docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    profile = f"{docker_ready}-cli-{uuid.uuid4().hex[:4]}"
    variables = {"ENVLAYER_BACKEND": "docker", "ENVLAYER_PROFILE": profile, "ENVLAYER_DOCKER_IMAGE": docker_image}
    variables.update(ENVLAYER_CONFIG="", ENVLAYER_ORPHAN_REAPER="false")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    options = DockerOptions(image=docker_image)

    def tasks() -> set[str]:
        return {i.task for i in DockerEnvironment.list_sandboxes(profile=profile, options=options)}

    try:
        crashed = subprocess.run(
            [sys.executable, "-c", CRASHING_EVAL], capture_output=True, text=True, timeout=120, check=True
        ).stdout.split()
        alive = anyio.run(EnvlayerSandboxEnvironment.sample_init, "alive", None, {})["default"]
        assert {*crashed, alive.env.task_id} == tasks()
        anyio.run(EnvlayerSandboxEnvironment.cli_cleanup, crashed[0])
        assert crashed[0] not in tasks(), "cleanup with an id removes that sandbox"
        out = _inspect_cli("sandbox", "cleanup", "envlayer", env=dict(os.environ), cwd=tmp_path)
        assert crashed[1] in out, out
        assert tasks() == {alive.env.task_id}, "the reaper removes only sandboxes whose process died"
    finally:
        for task in tasks():
            DockerEnvironment.remove_sandbox(task, profile=profile, options=options, force=True)
