"""The conformance suite on the built-in local backend and on the toy third-party plugin."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from envlayer.discovery.backend_registry import load_backend
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.testing import EnvironmentConformance, ExecContractConformance
from envlayer.testing.fixtures import cleaned_up
from envlayer.testing.unprivileged import pytest_as_nobody


class TestLocalConformance(EnvironmentConformance, ExecContractConformance):
    @pytest.fixture
    def env(self) -> Iterator[LocalEnvironment]:
        with tempfile.TemporaryDirectory(prefix="envlayer-test-local-", ignore_cleanup_errors=True) as workdir:
            yield from cleaned_up(LocalEnvironment(LocalOptions(cwd=workdir, timeout=60)))


class TestToyPluginConformance(EnvironmentConformance, ExecContractConformance):
    """The toy plugin is loaded through its real entry point, as a user would.
    It kills only its process group on timeout, as many simple plugins do, and keeps
    all output in memory (``communicate``), so floods are out of its reach. It writes files
    in place and confines paths lexically only, as simple plugins do."""

    kills_escaped_processes = False
    handles_output_floods = False
    replaces_files_atomically = False
    confines_symlinks = False

    @pytest.fixture
    def env(self) -> Iterator[object]:
        toy = load_backend("toy")
        environment = toy(toy.Options(timeout=60))
        try:
            yield environment
        finally:
            environment.cleanup()


def test_local_kit_permission_checks_as_unprivileged_user() -> None:
    """The kit's permission checks expect root's rights when the suite runs as root, so
    they are run again here, in a child pytest as uid 65534, where they expect denials."""
    proc = pytest_as_nobody(
        ["--import-mode=importlib", f"{__file__}::TestLocalConformance", "-k", "follows_the_users_rights", "-rs"],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout


class TestLocalOneshotConformance(EnvironmentConformance, ExecContractConformance):
    """The kit on the local backend's one-shot mode (a process per command), which waits
    for the command's end on a process descriptor where the kernel gives one (the polled
    way, elsewhere: ``tests/core/test_local_oneshot.py``)."""

    @pytest.fixture
    def env(self) -> Iterator[LocalEnvironment]:
        with tempfile.TemporaryDirectory(prefix="envlayer-test-local-", ignore_cleanup_errors=True) as workdir:
            yield from cleaned_up(LocalEnvironment(LocalOptions(cwd=workdir, timeout=60, exec_mode="oneshot")))
