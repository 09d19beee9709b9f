"""Fixtures for the ssh backend's tests: a real sshd on loopback, environments that are
always cleaned up, and a check that no shared connection outlives its test."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest
from envlayer_ssh import pool
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions

# The test modules import the sshd helper by name under any pytest import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ssh_testserver import SSHServer, running_sshd

EnvFactory = Callable[..., SSHEnvironment]
SSHD_LOG_TAIL = 6000
"""Characters of the sshd log attached to a failed test's report."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a test sshd gets the end of that sshd's log in its report
    (the server's side of a flaky failure is otherwise gone with the server)."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, SSHServer):
            title = f"sshd log ({name}, last {SSHD_LOG_TAIL} characters)"
            report.sections.append((title, value.read_log()[-SSHD_LOG_TAIL:]))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"ssh tests cannot run in CI: {reason}")
    pytest.skip(f"ssh tests skipped: {reason}; install it (apt-get install openssh-server) and run as root")


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHServer]:
    """One sshd shared by the tests that do not disturb it."""
    with running_sshd(_unavailable) as server:
        yield server


@pytest.fixture
def own_sshd() -> Iterator[SSHServer]:
    """A private sshd for a test that stops, restarts or re-keys it."""
    with running_sshd(_unavailable) as server:
        yield server


@pytest.fixture(autouse=True)
def no_leaked_connections() -> Iterator[None]:
    """Every test must leave no shared connection behind."""
    before = set(pool.open_pools())
    yield
    leaked = {t.describe(): n for t, n in pool.open_pools().items() if t not in before}
    assert not leaked, f"connections left open: {leaked}"


@pytest.fixture
def make_env() -> Iterator[EnvFactory]:
    """Build environments from a server plus option overrides; all are cleaned up."""
    created: list[SSHEnvironment] = []

    def make(server: SSHServer, **overrides: object) -> SSHEnvironment:
        env = SSHEnvironment(SSHOptions(**server.options(**overrides)))
        created.append(env)
        return env

    yield make
    for env in created:
        env.cleanup()
