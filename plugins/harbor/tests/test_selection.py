"""From a Harbor task and ``--ek`` keywords to envlayer options (no Harbor needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from envlayer_harbor.selection import DOCKER_DEFAULT_CAPABILITIES, OUTPUT_CAP, TaskSpec, resolve, task_options

from envlayer.errors import ConfigError


def _task(tmp_path: Path, *, dockerfile: bool = True, **fields: object) -> TaskSpec:
    if dockerfile:
        (tmp_path / "Dockerfile").write_text("FROM envlayer-test:debian\n")
    return TaskSpec(environment_dir=tmp_path, **fields)  # type: ignore[arg-type]


def test_docker_gets_the_dockerfile_resources_and_harness_defaults(tmp_path: Path) -> None:
    task = _task(tmp_path, cpus=2, memory_mb=2048, workdir="/work", no_network=True)
    chosen = resolve({"backend": "docker"}, task)
    options = chosen.options
    assert chosen.profile == "harbor"
    assert options.dockerfile == str(tmp_path / "Dockerfile")  # type: ignore[attr-defined]
    assert (options.cpus, options.memory_mb, options.network, options.cwd) == (2.0, 2048, False, "/work")  # type: ignore[attr-defined]
    assert options.shell == "/bin/bash" and options.timeout is None  # type: ignore[attr-defined]
    assert options.max_output_bytes == OUTPUT_CAP
    assert options.cap_add == DOCKER_DEFAULT_CAPABILITIES and options.tmpfs == {}  # type: ignore[attr-defined]
    assert options.persist_across_processes is False and options.workspace == "none"  # type: ignore[attr-defined]


def test_ek_keywords_win_over_defaults_and_task(tmp_path: Path) -> None:
    task = _task(tmp_path, cpus=2)
    options = resolve({"backend": "docker", "profile": "p", "cpus": 1, "shell": "/bin/sh"}, task).options
    assert options.cpus == 1.0 and options.shell == "/bin/sh"  # type: ignore[attr-defined]


def test_an_unknown_ek_keyword_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cpu"):
        resolve({"backend": "docker", "cpu": 2}, _task(tmp_path))


def test_a_prebuilt_image_and_gpus_per_backend(tmp_path: Path) -> None:
    task = _task(tmp_path, dockerfile=False, docker_image="img:1", gpus=2, gpu_types=("A100",), memory_mb=1536)
    docker = task_options("docker", {"image": 0, "memory_mb": 0, "extra_create_kwargs": 0}, task)
    assert docker["image"] == "img:1" and docker["memory_mb"] == 1536
    assert docker["extra_create_kwargs"]["device_requests"][0]["Count"] == 2
    assert task_options("modal", {"image": 0, "memory": 0, "gpu": 0}, task)["gpu"] == "A100:2"
    daytona = task_options("daytona", {"image": 0, "memory_gib": 0, "gpu": 0}, task)
    assert daytona["memory_gib"] == 2 and daytona["gpu"] == 2
    k8s = task_options("kubernetes", {"image": 0, "requests": 0, "limits": 0}, task)
    assert k8s["limits"] == {"memory": "1536Mi", "nvidia.com/gpu": "2"}


def test_what_a_backend_cannot_do_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot build images"):
        task_options("kubernetes", {"image": 0, "dockerfile": 0}, _task(tmp_path))
    prebuilt = tmp_path / "prebuilt"
    prebuilt.mkdir()
    with pytest.raises(ValueError, match="GPU"):
        task_options("ssh", {}, _task(prebuilt, dockerfile=False, gpus=1))
    with pytest.raises(ValueError, match="no network"):
        task_options("daytona", {"image": 0}, _task(prebuilt, dockerfile=False, no_network=True))
