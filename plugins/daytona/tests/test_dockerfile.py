"""An image built from a Dockerfile on Daytona: the real SDK's ``Image.from_dockerfile``
and ``CreateSandboxFromImageParams`` against the fake, which builds with the local dockerd
(``fake_daytona_builds.py``). The Dockerfiles here copy nothing: the SDK uploads COPY
sources to object storage over HTTPS, which the fake does not serve."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daytona_testkit import IMAGE

from envlayer.errors import ImageBuildFailed
from envlayer.options import OptionError


def _dockerfile(root: Path, marker: str, steps: str = "") -> Path:
    path = root / "Dockerfile"
    path.write_text(
        f"FROM {IMAGE}\nRUN mkdir -p /srv/app && echo {marker} > /srv/app/marker\nWORKDIR /srv/app\n{steps}"
    )
    return path


def test_built_from_the_dockerfile_started_in_its_workdir_and_reused(
    make_env: Callable[..., Any], tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path, "one")
    task = f"df-{uuid.uuid4().hex[:6]}"
    env = make_env(task, snapshot=None, cwd=None, dockerfile=str(dockerfile))
    result = env.exec("pwd; cat marker")
    assert result.stdout_text == "/srv/app\none\n", result.stderr_text
    again = make_env(task, snapshot=None, cwd=None, dockerfile=str(dockerfile))
    assert again.sandbox_id == env.sandbox_id  # unchanged: same fingerprint, the sandbox is reused
    _dockerfile(tmp_path, "two")
    changed = make_env(task, snapshot=None, cwd=None, dockerfile=str(dockerfile))
    assert changed.sandbox_id != env.sandbox_id
    assert changed.exec("cat /srv/app/marker").stdout_text == "two\n"


def test_a_failing_step_is_an_image_build_error_with_daytonas_reason(
    make_env: Callable[..., Any], tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path, "x", steps="RUN echo failing-step && exit 9\n")
    with pytest.raises(ImageBuildFailed) as failed:
        make_env(f"df-{uuid.uuid4().hex[:6]}", snapshot=None, cwd=None, dockerfile=str(dockerfile))
    assert "build_failed" in str(failed.value).lower() and "non-zero code: 9" in str(failed.value)


def test_a_context_other_than_the_dockerfiles_directory_is_refused(tmp_path: Path) -> None:
    from envlayer_daytona.options import DaytonaOptions

    with pytest.raises(OptionError, match="Dockerfile's own directory"):
        DaytonaOptions(dockerfile=str(_dockerfile(tmp_path, "x")), build_context="/elsewhere")
