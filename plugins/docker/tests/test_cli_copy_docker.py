"""`envlayer cp` against the real Docker daemon: a directory tree round-trips byte for
byte through the task's container (the one `exec --task` uses), and a task with no
container is refused without creating one; a full disk in the sandbox is a clear error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from envlayer.errors import SandboxFileError


def test_a_directory_round_trips_through_the_tasks_container(
    tmp_path: Path, make_env: Any, cli: Any, profile: str
) -> None:
    env = make_env(task="cp-round-trip")
    env.exec("mkdir -p /tmp/existing")
    env.cleanup()  # persist mode: the container stays for the CLI
    files = {"top.txt": b"hi\n", "a/b/deep.bin": os.urandom(200_000), "a/empty": b""}
    for name, data in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(data)
    up = cli("cp", str(tmp_path / "src"), "cp-round-trip:/tmp/existing/tree", profile=profile)
    assert up.returncode == 0, up.stderr
    down = cli("cp", "--json", "cp-round-trip:/tmp/existing/tree", str(tmp_path / "back"), profile=profile)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["files"] == 3
    got = {str(p.relative_to(tmp_path / "back")): p.read_bytes() for p in (tmp_path / "back").rglob("*") if p.is_file()}
    assert got == files


def test_a_task_without_a_container_is_refused(tmp_path: Path, cli: Any, profile: str) -> None:
    refused = cli("cp", "no-such-task:/etc/hostname", str(tmp_path / "x"), profile=profile)
    assert refused.returncode == 1
    assert "task 'no-such-task' has no docker sandbox" in refused.stderr
    listed = json.loads(cli("ls", "--json", profile=profile).stdout)
    assert "no-such-task" not in {s["task"] for outcome in listed for s in outcome["sandboxes"]}


def test_a_full_disk_is_a_clear_error_not_an_internal_one(tmp_path: Path, make_env: Any) -> None:
    env = make_env(tmpfs={"/tmp": "size=1m"})
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "big.bin").write_bytes(os.urandom(3_000_000))
    with pytest.raises(SandboxFileError) as caught:
        env.upload_dir(str(tmp_path / "src"), "/tmp/up")
    assert "cannot unpack into '/tmp/up' in the sandbox" in str(caught.value)
    assert "No space left on device" in str(caught.value) and "free space in the sandbox" in caught.value.hint
    assert isinstance(caught.value, OSError), "still an OSError for callers that catch those"
