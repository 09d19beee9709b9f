"""The conformance suite on the built-in local backend and on the toy third-party plugin."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from envlayer.backends.local import LocalEnvironment, LocalOptions
from envlayer.registry import load_backend
from envlayer.testing import EnvironmentConformance, ExecContractConformance


class TestLocalConformance(EnvironmentConformance, ExecContractConformance):
    @pytest.fixture
    def env(self) -> Iterator[LocalEnvironment]:
        workdir = tempfile.mkdtemp(prefix="envlayer-test-local-")
        environment = LocalEnvironment(LocalOptions(cwd=workdir, timeout=60))
        try:
            yield environment
        finally:
            environment.cleanup()
            shutil.rmtree(workdir, ignore_errors=True)


class TestToyPluginConformance(EnvironmentConformance, ExecContractConformance):
    """The toy plugin is loaded through its real entry point, as a user would.
    It kills only its process group on timeout, as many simple plugins do, and keeps
    all output in memory (``communicate``), so floods are out of its reach."""

    kills_escaped_processes = False
    handles_output_floods = False

    @pytest.fixture
    def env(self) -> Iterator[object]:
        toy = load_backend("toy")
        environment = toy(toy.Options(timeout=60))
        try:
            yield environment
        finally:
            environment.cleanup()
