"""The public conformance suite (envlayer.testing) on the Daytona backend, through the real SDK
against the Docker-backed fake Daytona API, in both exec modes.

Each class shares one sandbox (persist mode, one task); every test gets a fresh environment
object attached to it, so a fresh session shell. The third class runs the session mode as a
non-root user.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance, ExecContractConformance
from envlayer.testing.fixtures import cleaned_up

pytestmark = pytest.mark.docker


class TestDaytonaSessionConformance(EnvironmentConformance, ExecContractConformance):
    task = f"conformance-session-{uuid.uuid4().hex[:6]}"
    mode = "session"
    extra: dict[str, Any] = {}

    @pytest.fixture
    def env(self, profile: str, options: Callable[..., Any]) -> Iterator[Any]:
        from envlayer_daytona.backend import DaytonaEnvironment

        opts = options(exec_mode=self.mode, **self.extra)
        yield from cleaned_up(DaytonaEnvironment(opts, task_id=self.task, profile=profile))


class TestDaytonaOneShotConformance(TestDaytonaSessionConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"


class TestDaytonaNonRootConformance(TestDaytonaSessionConformance):
    """As the image's ``nobody`` (the ``user`` option) in the directory Daytona gives it: the
    kit's permission checks expect denials (as root they expect root's rights)."""

    task = f"conformance-nonroot-{uuid.uuid4().hex[:6]}"
    extra = {"user": "nobody", "cwd": None}
