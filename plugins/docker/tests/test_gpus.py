"""The ``gpus`` option: parsed as ``docker run --gpus``, sent as a device request, and a
daemon without a GPU runtime (this machine's) refuses with a clear error and leaves no
container behind."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from envlayer_docker import labels
from envlayer_docker.gpus import device_requests
from envlayer_docker.options import DockerOptions

from envlayer.errors import BackendUnavailable
from envlayer.options import OptionError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]),
        (2, [{"Driver": "", "Count": 2, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]),
        ("1", [{"Driver": "", "Count": 1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]),
        (
            "device=0,GPU-3a2b",
            [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "GPU-3a2b"], "Capabilities": [["gpu"]], "Options": {}}],
        ),
        (0, None),
        (None, None),
    ],
)
def test_gpus_become_the_device_request_docker_run_builds(value: Any, expected: Any) -> None:
    assert device_requests(DockerOptions(gpus=value).gpus) == expected


@pytest.mark.parametrize("value", ["two", "-1", "device=", "device=0;rm", "all,capabilities=utility"])
def test_a_bad_gpus_value_says_what_to_write(value: str) -> None:
    with pytest.raises(OptionError, match="use all, a count such as 2, or device=0,1"):
        DockerOptions(gpus=value)


def test_gpus_and_a_raw_device_request_together_are_refused() -> None:
    with pytest.raises(OptionError, match=r"either gpus or extra_create_kwargs\.device_requests"):
        DockerOptions(gpus="all", extra_create_kwargs={"device_requests": []})


def test_a_daemon_without_a_gpu_runtime_refuses_clearly_and_keeps_no_container(
    make_env: Any, docker_api: Any, profile: str
) -> None:
    """This machine's dockerd has no NVIDIA runtime: the container must not start without
    its GPU, the error must say what is missing, and the half-made container is removed."""
    task = f"gpu-{uuid.uuid4().hex[:8]}"
    with pytest.raises(BackendUnavailable) as info:
        make_env(task=task, gpus="all").exec("true")
    assert "has no GPU runtime" in info.value.message and "gpus=all" in info.value.message
    assert "NVIDIA Container Toolkit" in (info.value.hint or "")
    left = docker_api.containers(all=True, filters={"label": labels.filters(profile=profile, task=task)})
    assert left == []
