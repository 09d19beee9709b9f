"""A secret passed to one command on Docker reaches it and nothing else: no command line
on the host, no container label, nothing in `docker inspect` or the container's log, no
envlayer log line or error message, not `envlayer config`; in both exec modes."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest

from envlayer.testing.secrets import cli_exec_while_scanning, exec_while_scanning, make_marker

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _docker_views(api: Any, container_id: str) -> str:
    """Everything `docker inspect` and `docker logs` show about the container."""
    inspect = json.dumps(api.inspect_container(container_id))
    logs = api.logs(container_id, stdout=True, stderr=True).decode(errors="replace")
    return inspect + logs


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_secret_reaches_the_command_only(make_env, docker_api, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="envlayer")
    marker = make_marker()
    env = make_env(exec_mode=mode)
    result, leaks = exec_while_scanning(env, marker)
    assert result.stdout_text == marker and leaks == []
    failed = env.exec("true", cwd="/nonexistent", env={"EL_TEST_SECRET": marker})
    assert failed.exit_code != 0 and marker not in failed.stderr_text
    assert marker not in _docker_views(docker_api, env.container_id)
    assert marker not in caplog.text


def test_cli_secret_from_the_callers_environment(docker_api, profile: str, cli) -> None:
    marker = make_marker()
    prof = f"{profile}-secret"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    try:
        args = ["--backend", "docker", "--profile", prof, "-o", f"image={IMAGE}"]
        done, leaks = cli_exec_while_scanning(args, marker, environ)
        assert done.returncode == 0 and done.stdout == marker, done.stderr
        assert leaks == [] and marker not in done.stderr
        containers = docker_api.containers(all=True, filters={"label": f"envlayer.profile={prof}"})
        assert containers and all(marker not in _docker_views(docker_api, c["Id"]) for c in containers)
        shown = cli("config", profile=prof, env={"ENVLAYER_DOCKER_ENV": json.dumps({"TOKEN": marker})})
        assert shown.returncode == 0 and "TOKEN" in shown.stdout, shown.stderr
        assert marker not in shown.stdout + shown.stderr
    finally:
        cli("rm", "default", "--force", "--purge", profile=prof)
