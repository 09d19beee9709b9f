"""examples/agent_loop.py runs as documented, on local and on Docker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def run_example(extra_env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    env.update(extra_env)
    return subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def test_example_on_local_with_no_setup(tmp_path: Path, profile: str) -> None:
    proc = run_example({"ENVLAYER_CONFIG": "", "ENVLAYER_PROFILE": profile}, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "backend: local" in proc.stdout and "all steps gave the expected results" in proc.stdout
    for call in ("write_file", "terminal", "read_file", "terminal_job"):
        assert f">>> {call} " in proc.stdout
    assert '"type": "timeout"' in proc.stdout


@pytest.mark.docker
def test_example_on_docker_by_configuration(docker_profile: str, tmp_path: Path, containers, test_image: str) -> None:  # type: ignore[no-untyped-def]
    proc = run_example(
        {"ENVLAYER_BACKEND": "docker", "ENVLAYER_DOCKER_IMAGE": test_image, "ENVLAYER_PROFILE": docker_profile},
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "backend: docker" in proc.stdout
    assert containers(docker_profile) == []  # the example releases with force_remove
