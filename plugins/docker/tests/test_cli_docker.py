"""The `envlayer` command against the real Docker daemon: `ls` shows task ids that `rm`
takes (the empty id and ids with characters labels cannot hold included); a container
whose entrypoint fails is reported with its exit code and log, through the API and the
CLI."""

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
def failing_entrypoint_image(docker_api: Any) -> Any:
    """An image whose entrypoint logs why it cannot start and exits 3 (removed afterwards)."""
    import io

    tag = f"envlayer-test:bad-entrypoint-{uuid.uuid4().hex[:8]}"
    dockerfile = (
        f'FROM {IMAGE}\nENTRYPOINT ["/bin/sh", "-c", "echo init: cannot start: /etc/app.conf is missing >&2; exit 3"]\n'
    )
    for _ in docker_api.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, decode=True):
        pass
    try:
        yield tag
    finally:
        docker_api.remove_image(tag, force=True)


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
