"""The mini-swe-agent environment on real backends (local; Docker when available).

* its own scripted example: mini-swe-agent's ``DefaultAgent`` with its
  ``DeterministicModel`` (from the installed package) runs four steps on the envlayer
  environment and submits;
* the ``execute(command, cwd, timeout)`` contract: merged ordered output, per-call cwd,
  env and forwarded env, no state between calls, timeouts that kill the tree, sandbox
  failures as ``returncode -1`` with ``exception_info``;
* selection from mini-swe-agent's config (``environment_class`` dotted path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from envlayer.integrations.minisweagent import EnvlayerEnvironment

DEBIAN_IMAGE = os.environ.get("ENVLAYER_TEST_DEBIAN_IMAGE", "")
PROFILE = f"envlayer-test-mswea-{uuid.uuid4().hex[:6]}"


def _docker_options() -> dict[str, Any]:
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    from envlayer.errors import BackendUnavailable

    if not DEBIAN_IMAGE:
        pytest.skip("needs the Debian test image: set ENVLAYER_TEST_DEBIAN_IMAGE (scripts/test does when it exists)")
    try:
        DockerEnvironment.check_available(DockerOptions(image=DEBIAN_IMAGE))
    except BackendUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Docker is not usable: {exc.message}", pytrace=False)
        pytest.skip(f"Docker is not usable ({exc.message}); run scripts/provision")
    return {"image": DEBIAN_IMAGE}


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def environment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EnvlayerEnvironment]:
    if request.param == "local":
        env = EnvlayerEnvironment(backend="local", profile=PROFILE, cwd=str(tmp_path))
    else:
        env = EnvlayerEnvironment(backend="docker", profile=PROFILE, options=_docker_options(), cwd="/tmp")
    try:
        yield env
    finally:
        env.cleanup()


def test_scripted_default_agent_submits(environment: EnvlayerEnvironment) -> None:
    from minisweagent import package_dir
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models.test_models import DeterministicModel, make_output

    def step(command: str) -> dict[str, Any]:
        return make_output(f"THOUGHT: run it\n\n```mswea_bash_command\n{command}\n```", [{"command": command}])

    model = DeterministicModel(
        outputs=[
            step("printf 'def add(a, b):\\n    return a - b\\n' > calc.py"),
            step("sed -i 's/a - b/a + b/' calc.py && python3 -c 'import calc; print(calc.add(2, 3))'"),
            step("ls /definitely-missing"),
            step("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat calc.py"),
        ]
    )
    agent_config = yaml.safe_load(Path(package_dir / "config" / "default.yaml").read_text())["agent"]
    agent = DefaultAgent(model, environment, **agent_config)
    info = agent.run("make add() add")
    assert info["exit_status"] == "Submitted"
    assert info["submission"] == "def add(a, b):\n    return a + b\n"
    observations = [m["content"] for m in agent.messages if m.get("role") == "user"][1:]
    assert "<returncode>0</returncode>" in observations[1] and "5" in observations[1]
    assert "<returncode>2</returncode>" in observations[2] and "definitely-missing" in observations[2]


def test_execute_contract(environment: EnvlayerEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    run = environment.execute
    assert run({"command": "echo one; echo two >&2; echo three"}) == {
        "output": "one\ntwo\nthree\n",
        "returncode": 0,
        "exception_info": "",
    }
    assert run({"command": "exit 3"})["returncode"] == 3
    run({"command": "mkdir -p sub && cd sub && export LEAK=1"})
    home = os.path.basename(environment.config.cwd)
    assert run({"command": "basename $PWD; echo ${LEAK:-none}"})["output"] == f"{home}\nnone\n", "state carried over"
    assert run({"command": "pwd"}, cwd="/")["output"] == "/\n"
    monkeypatch.setenv("MSWEA_FORWARDED", "from-host")
    environment.config.forward_env = ["MSWEA_FORWARDED"]
    environment.config.env = {"MSWEA_SET": "set"}
    assert run({"command": "echo $MSWEA_FORWARDED $MSWEA_SET"})["output"] == "from-host set\n"


def test_timeout_kills_the_tree_and_returns_partial_output(environment: EnvlayerEnvironment) -> None:
    marker = f"mswea-{uuid.uuid4().hex[:8]}"
    result = environment.execute({"command": f"echo started; sh -c 'sleep 60; : {marker}' & sleep 60"}, timeout=1)
    assert result["returncode"] == -1
    assert result["output"] == "started\n"
    assert "timed out after 1 seconds" in result["exception_info"]
    assert result["extra"]["exception_type"] == "TimeoutExpired"
    left = environment.execute({"command": f"ps -eo args | grep -v grep | grep -c {marker} || true"})
    assert left["output"].strip() == "0", "a process of the timed-out command survived"


def test_submission_raises_submitted(environment: EnvlayerEnvironment) -> None:
    from minisweagent.exceptions import Submitted

    with pytest.raises(Submitted) as caught:
        environment.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo patch"})
    assert caught.value.messages[0]["extra"]["submission"] == "patch\n"


def test_selected_from_minisweagent_config(tmp_path: Path) -> None:
    from minisweagent.environments import get_environment

    env = get_environment(
        {
            "environment_class": "envlayer.integrations.minisweagent.EnvlayerEnvironment",
            "backend": "local",
            "profile": PROFILE,
            "cwd": str(tmp_path),
            "timeout": 5,
        }
    )
    try:
        assert isinstance(env, EnvlayerEnvironment)
        assert env.execute({"command": "pwd"})["output"] == f"{tmp_path}\n"
        assert env.serialize()["info"]["config"]["environment"]["backend"] == "local"
        assert env.get_template_vars()["system"] == os.uname().sysname
    finally:
        env.cleanup()


def test_sandbox_failure_is_a_result_not_a_traceback(tmp_path: Path) -> None:
    env = EnvlayerEnvironment(backend="local", profile=PROFILE, cwd=str(tmp_path))
    env.cleanup()
    result = env.execute({"command": "true"})
    assert result["returncode"] == -1
    assert result["extra"]["exception_type"] == "EnvironmentClosed"


def test_importing_the_adapter_imports_no_framework() -> None:
    code = "import sys, envlayer.integrations.minisweagent; print('minisweagent' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
