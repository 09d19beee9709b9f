"""A real Inspect eval with ``--sandbox envlayer`` on Docker: the scripted model's bash
tool call runs inside a container of the configured profile, and when the eval process
has exited no container of that profile is left."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

SCRIPT = Path(__file__).with_name("scripted_eval.py")


def _containers(api: Any, profile: str) -> list[dict[str, Any]]:
    return [
        c
        for c in api.containers(all=True, filters={"label": "envlayer.managed=1"})
        if (c.get("Labels") or {}).get("envlayer.profile") == profile
    ]


def test_scripted_eval_runs_the_tool_call_in_a_container_and_leaves_nothing(
    docker_ready: str, docker_image: str, tmp_path: Path
) -> None:
    import docker

    api = docker.APIClient(version="auto", timeout=60)
    profile = f"{docker_ready}-eval"
    marker = f"landed-{uuid.uuid4().hex[:8]}"
    seen: list[str] = []
    env = {
        **os.environ,
        "ENVLAYER_BACKEND": "docker",
        "ENVLAYER_PROFILE": profile,
        "ENVLAYER_DOCKER_IMAGE": docker_image,
        "ENVLAYER_CONFIG": "",
    }
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(tmp_path / "logs"), marker],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        for c in _containers(api, profile):
            seen.append(c["Id"])
            api.remove_container(c["Id"], force=True, v=True)
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["status"] == "success", report
    [tool_output] = report["tool_output"]
    lines = tool_output.strip().splitlines()
    assert lines[0] == marker and lines[1] == "0", tool_output
    assert lines[-1] != socket.gethostname(), "the command ran on the host, not in a container"
    assert not Path(f"/tmp/{marker}").exists(), "the command ran on the host, not in the container"
    assert seen == [], f"containers left after the eval: {seen}"
