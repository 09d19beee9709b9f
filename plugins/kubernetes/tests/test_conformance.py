"""The public conformance suite (envlayer.testing) on the Kubernetes backend: the real
``kubernetes`` client against the fake API server, pods as Docker containers.

Each class shares one pod (persist mode, one task); every test gets a fresh environment
object attached to it (so a fresh session shell). Session and one-shot mode run against a
fake speaking ``v5.channel.k8s.io``; session mode runs again against a fake that speaks
only ``v4.channel.k8s.io`` (no stdin close), so the bounded-stdin paths are conformant too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance
from envlayer.testing.fixtures import cleaned_up


class TestKubernetesSessionConformance(EnvironmentConformance):
    task = f"conformance-session-{uuid.uuid4().hex[:6]}"
    mode = "session"

    @pytest.fixture
    def kubeconfig(self, fake_apiserver: Any) -> str:
        return fake_apiserver.kubeconfig

    @pytest.fixture
    def env(self, profile: str, options: Any, kubeconfig: str) -> Iterator[Any]:
        from envlayer_kubernetes.backend import KubernetesEnvironment

        opts = options(exec_mode=self.mode, kubeconfig=kubeconfig)
        yield from cleaned_up(KubernetesEnvironment(opts, task_id=self.task, profile=profile))


class TestKubernetesOneShotConformance(TestKubernetesSessionConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"


class TestKubernetesV4SessionConformance(TestKubernetesSessionConformance):
    task = f"conformance-v4-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def kubeconfig(self, fake_apiserver_v4: Any) -> str:
        return fake_apiserver_v4.kubeconfig
