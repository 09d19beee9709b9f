"""Fails a test that leaves a local session shell's private directory behind.

Every local session shell makes ``${TMPDIR:-/tmp}/.envlayer-session-<id>`` when it starts
and removes it when it is closed (:func:`envlayer.execution.shell_script.init_script`,
:func:`~envlayer.execution.shell_script.close_script`). A directory that is still there
after a test ends means a shell was abandoned (never closed, or killed): the test, or the
product path it exercises, leaks. After each test the directories that appeared during it
get :data:`GRACE` seconds to go (a broker or a manager closes its sessions in the
background after the test's last call returns); one still there is reported: a warning, or a
failure of the test with ``ENVLAYER_TEST_SESSION_LEAKS_FAIL=1``.

The glob is of the shared temp directory, so another pytest-xdist worker of the same run, or
a run started at the same time by someone else, can be blamed for a directory it did not make
(hence a warning by default), and a test would wait out the grace for another worker's
shell. So in a pytest-xdist worker (``scripts/test``'s default) the check is off unless the
variable is set: run the files to check in one process (``ENVLAYER_TEST_WORKERS=0
ENVLAYER_TEST_SESSION_LEAKS_FAIL=1 scripts/test tests/``).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator

import pytest

GRACE = 10.0
FAIL_VAR = "ENVLAYER_TEST_SESSION_LEAKS_FAIL"
"""Set to ``1`` to fail the test (default: a warning in the run's summary)."""
_POLL = 0.05


def session_dirs() -> set[str]:
    """The local session shells' private directories present now."""
    base = os.environ.get("TMPDIR") or tempfile.gettempdir()
    return set(glob.glob(os.path.join(base, ".envlayer-session-*")))


def _checking(config: pytest.Config) -> bool:
    """Whether this process checks: always in one process, in an xdist worker only on request."""
    return not hasattr(config, "workerinput") or os.environ.get(FAIL_VAR) == "1"


def _left_after(before: set[str]) -> set[str]:
    """The directories not in ``before`` still present after up to :data:`GRACE` seconds."""
    deadline = time.monotonic() + GRACE
    new = session_dirs() - before
    while new and time.monotonic() < deadline:
        time.sleep(_POLL)
        new &= session_dirs()
    return new


_BEFORE = pytest.StashKey[set[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note the directories present before the test's fixtures run."""
    if _checking(item.config):
        item.stash[_BEFORE] = session_dirs()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After every fixture is torn down (brokers stopped, environments closed), fail the
    test if a directory it made is still there after :data:`GRACE` seconds."""
    result = yield
    if _BEFORE not in item.stash:  # not checking in this process
        return result
    left = _left_after(item.stash[_BEFORE])
    if left:
        message = f"the test left {len(left)} local session directories behind (a session shell never closed): "
        message += ", ".join(sorted(left))
        if os.environ.get(FAIL_VAR) == "1":
            raise pytest.fail.Exception(message, pytrace=False)
        item.warn(pytest.PytestWarning(message))
    return result
