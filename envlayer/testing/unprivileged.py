"""Run a child pytest as an unprivileged user from a test run that runs as root.

The kit's permission checks skip when the sandbox's user is root (root's rights cover
every file). A root test run can still check them for a backend that runs commands as
the test process's own user (local-style backends) by running the same checks again in
a child pytest as uid/gid 65534 (``nobody``): :func:`pytest_as_nobody`.

The child runs the same interpreter (``sys.executable``) through ``setpriv``
(util-linux), with ``HOME`` and the working directory in the temp directory. When uid
65534 cannot start that interpreter here (an interpreter installed under a directory
only root may enter, such as a pyenv build in ``/root`` whose ``libpython`` the dynamic
loader cannot read), the check is skipped with the interpreter's own message: that is
a property of the machine, not of the backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import pytest

NOBODY = 65534
"""The uid and gid the child runs as."""


def _as_nobody(argv: Sequence[str]) -> list[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to drop to uid 65534: apt-get install util-linux")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *argv]


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": tempfile.gettempdir()}


def interpreter_problem() -> str | None:
    """Why uid 65534 cannot start ``sys.executable`` with its packages here (None when
    it can): the probe imports pytest and envlayer as that user."""
    probe = subprocess.run(
        _as_nobody([sys.executable, "-c", "import pytest, envlayer"]),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tempfile.gettempdir(),
        env=_environment(),
    )
    if probe.returncode == 0:
        return None
    output = (probe.stderr or probe.stdout).strip()
    return output.splitlines()[-1] if output else f"exit {probe.returncode}"


def pytest_as_nobody(args: Sequence[str], *, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -q -p no:cacheprovider *args`` as uid/gid 65534; returns the
    finished process (output as text). Skips the calling test when this process is not
    root (the checks already ran unprivileged) or when uid 65534 cannot start this
    interpreter (see the module docstring); fails it when ``setpriv`` is missing."""
    if os.geteuid() != 0:
        pytest.skip("not root: the permission checks already ran unprivileged")
    problem = interpreter_problem()
    if problem is not None:
        pytest.skip(f"uid {NOBODY} cannot start this interpreter ({sys.executable}): {problem}")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(
        _as_nobody(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tempfile.gettempdir(),
        env=_environment(),
    )
