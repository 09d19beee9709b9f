"""The public conformance suite (envlayer.testing) on the Kubernetes backend: the real
``kubernetes`` client against the fake API server, pods as Docker containers.

Each class shares one pod (persist mode, one task); every test gets a fresh environment
object attached to it. The v4 class runs against a fake that speaks only
``v4.channel.k8s.io`` (no stdin close), so the bounded-stdin path is conformant too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance


class TestKubernetesOneShotConformance(EnvironmentConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"

    @pytest.fixture
    def env(self, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_kubernetes.backend import KubernetesEnvironment

        environment = KubernetesEnvironment(options(exec_mode=self.mode), task_id=self.task, profile=profile)
        try:
            yield environment
        finally:
            environment.cleanup()


class TestKubernetesV4Conformance(EnvironmentConformance):
    task = f"conformance-v4-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def env(self, profile: str, options: Any, fake_apiserver_v4: Any) -> Iterator[Any]:
        from envlayer_kubernetes.backend import KubernetesEnvironment

        environment = KubernetesEnvironment(
            options(exec_mode="oneshot", kubeconfig=fake_apiserver_v4.kubeconfig), task_id=self.task, profile=profile
        )
        try:
            yield environment
        finally:
            environment.cleanup()
