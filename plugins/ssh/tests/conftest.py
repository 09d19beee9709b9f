"""Fixtures for the ssh backend's tests: a real sshd on loopback, environments that are
always cleaned up, and a check that no shared connection outlives its test."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from envlayer_ssh import pool
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions

# The test modules import the sshd helper by name under any pytest import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ssh_testserver import TEST_USER, SSHServer, requirements_missing

EnvFactory = Callable[..., SSHEnvironment]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"ssh tests cannot run in CI: {reason}")
    pytest.skip(f"ssh tests skipped: {reason}; install it (apt-get install openssh-server) and run as root")


def _kill_test_user_processes() -> None:
    """Kill, by PID, whatever the dedicated test user still runs (commands the tests started)."""
    try:
        uid = pwd.getpwnam(TEST_USER).pw_uid
    except KeyError:
        return
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


def _remove_test_user_tmp_files() -> None:
    """Remove the scratch files the test user's remote shells may leave in /tmp (private
    directories of session shells killed mid-test, conformance pid files); only that user's."""
    try:
        uid = pwd.getpwnam(TEST_USER).pw_uid
    except KeyError:
        return
    for name in os.listdir("/tmp"):
        if name.startswith((".envlayer-session-", "envlayer-conformance-")):
            path = os.path.join("/tmp", name)
            try:
                if os.lstat(path).st_uid != uid:
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


# In 2 of 7 full-suite runs one SSH test failed because the test sshd dropped the whole
# connection under concurrent channel churn (EOFError on channel open, or ConnectionLost
# mid-command); it never reproduced in isolation or under a CPU-load stress, and its cause
# is not found. Such a failure is re-run once; any other failure, or the same one twice,
# fails the run. See docs/development.md.
_CONNECTION_DROPPED = ["BackendUnavailable", "ConnectionLost", "EOFError"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=_CONNECTION_DROPPED))


@contextmanager
def _running_sshd() -> Iterator[SSHServer]:
    """A started test sshd, closed (with everything it spawned) on exit."""
    missing = requirements_missing()
    if missing:
        _unavailable(missing)
    server = SSHServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHServer]:
    """One sshd shared by the tests that do not disturb it."""
    try:
        with _running_sshd() as server:
            yield server
    finally:
        _kill_test_user_processes()
        _remove_test_user_tmp_files()


@pytest.fixture
def own_sshd() -> Iterator[SSHServer]:
    """A private sshd for a test that stops, restarts or re-keys it."""
    with _running_sshd() as server:
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
