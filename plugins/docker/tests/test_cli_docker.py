"""The `envlayer` command against the real Docker daemon: `ls` shows task ids that `rm`
takes (the empty id and ids with characters labels cannot hold included)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

ENVLAYER = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"
IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _cli(*args: str, profile: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    env.update(ENVLAYER_PROFILE=profile, ENVLAYER_DOCKER_IMAGE=IMAGE)
    command, *rest = args
    return subprocess.run(
        [ENVLAYER, command, "--backend", "docker", *rest], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize("task", ["", "team/alpha: task ü"], ids=["empty", "unlabelable"])
def test_ls_shows_the_task_id_rm_takes(docker_api: Any, profile: str, task: str) -> None:
    prof = f"{profile}-cli"
    try:
        assert _cli("exec", "--task", task, "true", profile=prof).returncode == 0
        listed = json.loads(_cli("ls", "--json", profile=prof).stdout)
        tasks = [s["task"] for outcome in listed for s in outcome["sandboxes"] if s["status"] != "data"]
        assert tasks == [task]
        table = _cli("ls", profile=prof).stdout
        assert ("''" if task == "" else "'team/alpha: task ü'") in table
        removed = _cli("rm", task, "--force", "--purge", "--json", profile=prof)
        assert removed.returncode == 0, removed.stderr
        assert [s["task"] for o in json.loads(removed.stdout) for s in o["sandboxes"]][:1] == [task]
        assert not [s for o in json.loads(_cli("ls", "--json", profile=prof).stdout) for s in o["sandboxes"]]
    finally:
        _cli("rm", task, "--force", "--purge", profile=prof)
