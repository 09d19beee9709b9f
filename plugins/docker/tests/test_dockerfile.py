"""An image built from a Dockerfile by the real daemon, and ``cwd`` from its WORKDIR."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.errors import ConfigError, ImageBuildFailed

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
pytestmark = pytest.mark.docker


@pytest.fixture
def built_images(docker_api: Any) -> Iterator[list[str]]:
    """Tags a test built; removed after its environments (request it before ``make_env``)."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        with contextlib.suppress(Exception):
            docker_api.remove_image(tag, force=True)


def _task() -> str:
    return f"df-{uuid.uuid4().hex[:8]}"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "Dockerfile"


APP = f"FROM {IMAGE}\nWORKDIR /srv/app\nCOPY greeting.txt ./\nRUN echo built > /built\n"


def test_builds_from_the_dockerfile_and_starts_in_its_workdir(
    built_images: list[str], make_env: Callable[..., Any], docker_api: Any, tmp_path: Path
) -> None:
    dockerfile = _write(tmp_path, {"Dockerfile": APP, "greeting.txt": "hello\n", ".dockerignore": "secret\n"})
    (tmp_path / "secret").write_text("not sent")
    env = make_env(_task(), dockerfile=str(dockerfile))
    built_images.append(env.options.image)
    assert env.options.image.startswith("envlayer-build:")
    assert docker_api.inspect_image(env.options.image)["Config"]["Labels"]["envlayer.build"]
    result = env.exec("pwd; cat greeting.txt /built; ls /srv/app")
    assert result.exit_code == 0, result.stderr_text
    assert result.stdout_text == "/srv/app\nhello\nbuilt\ngreeting.txt\n"


def test_unchanged_context_reuses_image_and_container_a_change_replaces_both(
    built_images: list[str],
    make_env: Callable[..., Any],
    docker_api: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="envlayer.docker")
    dockerfile = _write(tmp_path, {"Dockerfile": APP, "greeting.txt": "v1\n"})
    task = _task()
    first = make_env(task, dockerfile=str(dockerfile))
    built_images.append(first.options.image)
    image_id = docker_api.inspect_image(first.options.image)["Id"]
    again = make_env(task, dockerfile=str(dockerfile))
    assert again.options.image == first.options.image
    assert docker_api.inspect_image(again.options.image)["Id"] == image_id  # not rebuilt
    assert again.container_id == first.container_id  # same fingerprint: the container is reused
    assert "hides" not in caplog.text
    time.sleep(1.1)  # the daemon dates volumes to the second: the new image must be a second newer
    (tmp_path / "greeting.txt").write_text("v2\n")
    changed = make_env(task, dockerfile=str(dockerfile))
    built_images.append(changed.options.image)
    assert changed.options.image != first.options.image
    assert "was filled from an older image; it hides what image" in caplog.text  # said, never silent
    assert changed.container_id != first.container_id
    # the durable workspace (a volume at the WORKDIR, filled from the first image) outlives the
    # container, so the new image's files there stay hidden; the layer outside it is new
    first_result = changed.exec("cat /srv/app/greeting.txt")
    assert first_result.stdout_text == "v1\n"
    # the replacement is announced in the first result and the log, naming the rebuilt image
    assert "was replaced" in first_result.notice and f"image: {first.options.image!r}" in first_result.notice.replace(
        '"', "'"
    ), first_result.notice
    assert "was replaced" in caplog.text
    assert changed.exec("true").notice == ""  # only the first result carries it
    with pytest.raises(Exception, match="No such container"):
        docker_api.inspect_container(first.container_id)


def test_without_a_durable_workspace_a_rebuilt_workdir_shows_the_new_files(
    built_images: list[str], make_env: Callable[..., Any], tmp_path: Path
) -> None:
    dockerfile = _write(tmp_path, {"Dockerfile": APP, "greeting.txt": "v1\n"})
    task = _task()
    first = make_env(task, dockerfile=str(dockerfile), workspace="none")
    built_images.append(first.options.image)
    assert first.exec("cat greeting.txt").stdout_text == "v1\n"
    (tmp_path / "greeting.txt").write_text("v2\n")
    changed = make_env(task, dockerfile=str(dockerfile), workspace="none")
    built_images.append(changed.options.image)
    assert changed.exec("cat greeting.txt").stdout_text == "v2\n"


def test_a_failing_step_is_a_clear_error_with_the_build_log(
    built_images: list[str], make_env: Callable[..., Any], docker_api: Any, tmp_path: Path
) -> None:
    task = _task()
    dockerfile = _write(tmp_path, {"Dockerfile": f"FROM {IMAGE}\nRUN echo step-output && exit 3\n"})
    with pytest.raises(ImageBuildFailed) as failed:
        make_env(task, dockerfile=str(dockerfile))
    text = str(failed.value)
    assert "returned a non-zero code: 3" in text and "step-output" in text
    assert str(dockerfile) in text and "fix the Dockerfile" in failed.value.hint
    assert not docker_api.containers(all=True, filters={"label": f"envlayer.task={task}"})


def test_a_missing_dockerfile_is_a_config_error(make_env: Callable[..., Any], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dockerfile"):
        make_env(_task(), dockerfile=str(tmp_path / "Dockerfile"))


def test_explicit_cwd_wins_over_workdir_and_an_image_without_workdir_keeps_workspace(
    built_images: list[str], make_env: Callable[..., Any], tmp_path: Path
) -> None:
    dockerfile = _write(tmp_path, {"Dockerfile": APP, "greeting.txt": "x\n"})
    env = make_env(_task(), dockerfile=str(dockerfile), cwd="/opt/here")
    built_images.append(env.options.image)
    assert env.exec("pwd").stdout_text == "/opt/here\n"
    assert make_env(_task()).exec("pwd").stdout_text == "/workspace\n"  # the test image declares no WORKDIR


def test_workdir_of_a_prebuilt_image_is_the_default_cwd(
    build_image: Callable[..., str], make_env: Callable[..., Any]
) -> None:
    tag = build_image(f"envlayer-test-workdir:{uuid.uuid4().hex[:8]}", f"FROM {IMAGE}\nWORKDIR /data/w\n".encode())
    env = make_env(_task(), image=tag)
    assert env.exec("pwd").stdout_text == "/data/w\n"
    env.write_file("rel.txt", b"r")
    assert env.read_file("/data/w/rel.txt") == b"r"  # relative file paths start there too
