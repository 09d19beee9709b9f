"""The toy plugin against the conformance kit, as its author would run it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from envlayer_toy import ToyEnvironment

from envlayer.testing import EnvironmentConformance


class TestToy(EnvironmentConformance):
    kills_escaped_processes = False  # it kills the process group only: a setsid child escapes
    replaces_files_atomically = False  # it writes a file in place
    confines_symlinks = False  # it checks file_root by the path's text only

    @pytest.fixture
    def env(self) -> Iterator[ToyEnvironment]:
        environment = ToyEnvironment(ToyEnvironment.Options(timeout=60))
        yield environment
        environment.cleanup()
