"""Fixtures for the session broker's tests: real ``envlayer`` processes, a real broker.

Every test gets its own runtime directory (short, under /tmp: Unix socket paths are
limited to 107 bytes), profile and working directory, so nothing collides with other
test runs or the user's own broker; at teardown, even when the test failed, every broker
that ran there is stopped and then killed with everything it started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The test modules import the helpers by name under any pytest import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from broker_helpers import BrokerRun


@pytest.fixture
def brk(tmp_path: Path) -> Iterator[BrokerRun]:
    """A private runtime directory, profile and working directory; brokers killed at the end."""
    run = BrokerRun(tmp_path)
    try:
        yield run
    finally:
        run.close()


@pytest.fixture
def other_user() -> Iterator[str]:
    """A throwaway user (removed at teardown); skipped when users cannot be created."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        if os.environ.get("CI") == "true":
            pytest.fail("the other-user test needs root and useradd in CI")
        pytest.skip("needs root and useradd")
    name = f"elb{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)
