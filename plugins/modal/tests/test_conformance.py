"""The public conformance suite (envlayer.testing) on the Modal backend, through the real
modal SDK against the Docker-backed fake Modal server, in one-shot exec mode.

The class shares one sandbox (persist mode, one task); every test gets a fresh
environment object attached to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance

pytestmark = pytest.mark.modal


class TestModalOneShotConformance(EnvironmentConformance):
    task = f"conformance-oneshot-{uuid.uuid4().hex[:6]}"
    mode = "oneshot"

    @pytest.fixture
    def env(self, fake_modal: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_modal.backend import ModalEnvironment

        environment = ModalEnvironment(options(exec_mode=self.mode), task_id=self.task, profile=profile)
        try:
            yield environment
        finally:
            environment.cleanup()
