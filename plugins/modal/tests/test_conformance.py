"""The public conformance suite (envlayer.testing) on the Modal backend, through the real
modal SDK against the Docker-backed fake Modal server, in both exec modes.

Each class shares one sandbox (persist mode, one task); every test gets a fresh
environment object attached to it, so a fresh session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance, ExecContractConformance
from envlayer.testing.fixtures import cleaned_up

pytestmark = pytest.mark.modal


class TestModalSessionConformance(EnvironmentConformance, ExecContractConformance):
    task = f"conformance-session-{uuid.uuid4().hex[:6]}"
    mode = "session"

    @pytest.fixture
    def env(self, fake_modal: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_modal.backend import ModalEnvironment

        yield from cleaned_up(ModalEnvironment(options(exec_mode=self.mode), task_id=self.task, profile=profile))


class TestModalOneShotConformance(TestModalSessionConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"
