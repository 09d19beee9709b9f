"""An image built from a Dockerfile on Modal: the real SDK's ``Image.from_dockerfile``
against the fake, which builds with the local dockerd (``fake_modal/image_builds.py``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlayer.errors import ImageBuildFailed

pytestmark = pytest.mark.modal

BASE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
BUILD_RPCS = {"MountBatchedCheckExistence", "MountPutFile", "MountGetOrCreate", "ImageGetOrCreate"}


def _context(root: Path, greeting: str, steps: str = "") -> Path:
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "greeting.txt").write_text(greeting)
    (root / "data" / "ignored.txt").write_text("kept out")
    (root / ".dockerignore").write_text("data/ignored.txt\n")
    dockerfile = root / "Dockerfile"
    dockerfile.write_text(f"FROM {BASE}\nWORKDIR /srv/app\nCOPY data/ ./data/\n{steps}")
    return dockerfile


def test_built_with_its_context_started_in_its_workdir_and_reused(
    make_env: Callable[..., Any], fake_modal: Any, tmp_path: Path
) -> None:
    dockerfile = _context(tmp_path, "hello\n")
    task = f"df-{uuid.uuid4().hex[:6]}"
    env = make_env(task, dockerfile=str(dockerfile))
    assert env.options.image.startswith("envlayer-build:") and env.options.cwd == "/srv/app"
    result = env.exec("pwd; cat data/greeting.txt; ls data")
    assert result.stdout_text == "/srv/app\nhello\ngreeting.txt\n", result.stderr_text
    assert {"ImageJoinStreaming", *BUILD_RPCS} <= {str(c["rpc"]) for c in fake_modal.calls()}
    again = make_env(task, dockerfile=str(dockerfile))
    assert again.sandbox_id == env.sandbox_id  # same context: same fingerprint, the sandbox is reused
    (tmp_path / "data" / "greeting.txt").write_text("changed\n")
    changed = make_env(task, dockerfile=str(dockerfile))
    assert changed.sandbox_id != env.sandbox_id
    assert changed.exec("cat data/greeting.txt").stdout_text == "changed\n"
    assert not fake_modal.unimplemented()


def test_a_failing_step_is_an_image_build_error(make_env: Callable[..., Any], tmp_path: Path) -> None:
    dockerfile = _context(tmp_path, "x\n", steps="RUN exit 7\n")
    with pytest.raises(ImageBuildFailed) as failed:
        make_env(f"df-{uuid.uuid4().hex[:6]}", dockerfile=str(dockerfile))
    assert str(dockerfile) in str(failed.value) and "modal image logs" in failed.value.hint
