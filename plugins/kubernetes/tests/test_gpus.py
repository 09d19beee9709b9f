"""The ``gpus`` option: a limit on the GPU extended resource in the pod the real client
creates, and a cluster with no GPU node (the fake's one node has none) fails clearly at
``startup_timeout`` instead of running the sandbox without its GPUs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from envlayer_kubernetes.options import KubernetesOptions

from envlayer.errors import BackendUnavailable
from envlayer.options import OptionError

NAMESPACE = "envlayer-test"


def _pods(fake_apiserver: Any, selector: str) -> list[Any]:
    from kubernetes import config
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(config.new_client_from_config(config_file=fake_apiserver.kubeconfig))
    return list(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)


def test_gpus_and_a_raw_limit_on_the_same_resource_are_refused() -> None:
    with pytest.raises(OptionError, match=r"either gpus or limits\['nvidia.com/gpu'\]"):
        KubernetesOptions(gpus=1, limits={"nvidia.com/gpu": "1"})
    with pytest.raises(OptionError, match="extended resource name"):
        KubernetesOptions(gpus=1, gpu_resource="gpu")
    with pytest.raises(OptionError, match="must be >= 0"):
        KubernetesOptions(gpus=-1)


def test_the_pod_asks_for_the_gpus_and_a_cluster_without_them_fails_clearly(
    fake_apiserver: Any, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import selector

    task = f"gpu-{uuid.uuid4().hex[:8]}"
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(
            options(gpus=2, gpu_resource="amd.com/gpu", startup_timeout=2), task_id=task, profile=profile
        )
    assert "still Unschedulable: 0/1 nodes are available: 1 Insufficient amd.com/gpu" in str(info.value)
    assert "no node offers the GPUs" in (info.value.hint or "")  # the limit reached the scheduler: its words
    end = time.monotonic() + 30
    while _pods(fake_apiserver, selector(profile=profile, task=task)):
        assert time.monotonic() < end, "the pod that could not start was not deleted"
        time.sleep(0.1)
