"""The public conformance suite (envlayer.testing) on the Docker backend, in both exec modes.

Each class shares one container (persist mode, one task); every test gets a fresh
environment object attached to it, so a fresh shell session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance, ExecContractConformance
from envlayer.testing.fixtures import cleaned_up

pytestmark = pytest.mark.docker


class TestDockerSessionConformance(EnvironmentConformance, ExecContractConformance):
    task = f"conformance-session-{uuid.uuid4().hex[:6]}"
    mode = "session"

    @pytest.fixture
    def env(self, docker_api: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_docker.backend import DockerEnvironment

        yield from cleaned_up(DockerEnvironment(options(exec_mode=self.mode), task_id=self.task, profile=profile))


class TestDockerOneShotConformance(TestDockerSessionConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"


class TestDockerUnprivilegedConformance(EnvironmentConformance):
    """The kit as uid 65534, working in the image's own ``/tmp`` (no tmpfs mounted, so
    the path lies on the container's root filesystem that the daemon's archive API
    reaches, acting as root): file operations must act with uid 65534's rights."""

    task = f"conformance-nobody-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def env(self, docker_api: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_docker.backend import DockerEnvironment

        opts = options(user="65534:65534", tmpfs={}, cwd="/tmp")
        yield from cleaned_up(DockerEnvironment(opts, task_id=self.task, profile=profile))
