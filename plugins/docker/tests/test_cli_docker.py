"""The `envlayer` command against the real Docker daemon: `ls` shows task ids that `rm`
takes (the empty id and ids with characters labels cannot hold included); a container
whose entrypoint fails is reported with its exit code and log, through the API and the
CLI, also when the exec failed before the daemon saw the container stop."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from envlayer.errors import BackendUnavailable

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


@pytest.mark.parametrize("task", ["", "team/alpha: task ü"], ids=["empty", "unlabelable"])
def test_ls_shows_the_task_id_rm_takes(cli: Any, profile: str, task: str) -> None:
    prof = f"{profile}-cli"
    try:
        assert cli("exec", "--task", task, "true", profile=prof).returncode == 0
        listed = json.loads(cli("ls", "--json", profile=prof).stdout)
        tasks = [s["task"] for outcome in listed for s in outcome["sandboxes"] if s["status"] != "data"]
        assert tasks == [task]
        table = cli("ls", profile=prof).stdout
        assert ("''" if task == "" else "'team/alpha: task ü'") in table
        removed = cli("rm", task, "--force", "--purge", "--json", profile=prof)
        assert removed.returncode == 0, removed.stderr
        assert [s["task"] for o in json.loads(removed.stdout) for s in o["sandboxes"]][:1] == [task]
        assert not [s for o in json.loads(cli("ls", "--json", profile=prof).stdout) for s in o["sandboxes"]]
    finally:
        cli("rm", task, "--force", "--purge", profile=prof)


@pytest.fixture
def failing_entrypoint_image(build_image: Any) -> str:
    """An image whose entrypoint logs why it cannot start and exits 3 (removed afterwards)."""
    dockerfile = (
        f'FROM {IMAGE}\nENTRYPOINT ["/bin/sh", "-c", "echo init: cannot start: /etc/app.conf is missing >&2; exit 3"]\n'
    )
    return build_image(f"envlayer-test:bad-entrypoint-{uuid.uuid4().hex[:8]}", dockerfile.encode())


def test_an_entrypoint_that_cannot_start_is_reported_with_its_exit_code_and_log(
    failing_entrypoint_image: str, make_env: Any, profile: str, cli: Any
) -> None:
    with pytest.raises(BackendUnavailable) as info:
        make_env(image=failing_entrypoint_image, image_entrypoint="keep").exec("true")
    assert "exited with code 3" in info.value.message
    assert "init: cannot start: /etc/app.conf is missing" in info.value.message
    assert "image_entrypoint" in info.value.hint
    prof = f"{profile}-cli"
    try:
        out = cli(
            "exec", "-o", f"image={failing_entrypoint_image}", "-o", "image_entrypoint=keep", "true", profile=prof
        )
        assert out.returncode == 125
        assert "exited with code 3" in out.stderr and "/etc/app.conf is missing" in out.stderr
    finally:
        cli("rm", "default", "--force", "--purge", profile=prof)


def test_an_exec_refused_before_the_daemon_saw_the_entrypoint_exit_still_gets_the_report(docker_api: Any) -> None:
    """An exec can fail while the container still shows as running: the entrypoint is
    exiting, and dockerd has not yet handled it (a loaded machine's suite run got the
    session shell's 126 instead of this report). Here the report is asked for while the
    container still runs, a moment before its entrypoint exits 3."""
    from envlayer_docker.exit_report import exited_container_error

    script = "echo init: cannot start: /etc/app.conf is missing >&2; sleep 1; exit 3"
    cid = docker_api.create_container(IMAGE, ["sh", "-c", script], labels={"envlayer.test": "exit-report"})["Id"]
    try:
        docker_api.start(cid)
        assert docker_api.inspect_container(cid)["State"]["Running"]
        error = exited_container_error(docker_api, cid, "t")
        assert error is not None, "a container that stops a moment later must get the report"
        assert "exited with code 3" in error.message and "/etc/app.conf is missing" in error.message
    finally:
        docker_api.remove_container(cid, force=True)


def test_a_young_container_that_keeps_running_gets_no_exit_report(docker_api: Any) -> None:
    """The wait for a stopping container ends without a report when it runs on (the
    caller's own error then stands)."""
    from envlayer_docker.exit_report import exited_container_error

    cid = docker_api.create_container(IMAGE, ["sleep", "300"], labels={"envlayer.test": "exit-report"})["Id"]
    try:
        docker_api.start(cid)
        assert exited_container_error(docker_api, cid, "t") is None
        assert docker_api.inspect_container(cid)["State"]["Running"]
    finally:
        docker_api.remove_container(cid, force=True)
