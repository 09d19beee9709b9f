"""The Daytona backend through the real service's failure modes, against the fake that
reproduces them (see ``fake_daytona.md``): a process's exit status, throttling, 409 while a
state changes, recoverable errors, every state the SDK lists, builds that outlast the
create timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from daytona_testkit import FAKE_KEY, FakeDaytona, child_code

pytestmark = pytest.mark.docker

_ENDINGS = {
    "closed": "env.cleanup()\n",
    "left open": "",
    "force_remove": "env.cleanup(force_remove=True)\n",
    "private": "env.cleanup()\n",
}


def _remove_task(fake: FakeDaytona, profile: str, task: str) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment
    from envlayer_daytona.options import DaytonaOptions

    DaytonaEnvironment.remove_sandbox(task, profile=profile, options=DaytonaOptions(api_url=fake.url), force=True)


@pytest.mark.parametrize("ending", list(_ENDINGS))
def test_a_script_exits_with_its_own_status(fake_daytona: FakeDaytona, profile: str, ending: str) -> None:
    """A script that opens an environment, runs one command and ends it (or not) exits 0
    with nothing on stderr: no thread of the backend or the SDK is caught mid-call by the
    interpreter's shutdown (that aborted the process with SIGABRT, exit 134)."""
    task = f"exit-{uuid.uuid4().hex[:8]}"
    opts = {"persist_across_processes": ending != "private"}
    code = child_code(fake_daytona.url, task, profile, **opts) + textwrap.dedent(
        """\
        result = env.exec("echo hello")
        print(result.stdout.decode(), end="")
        """
    ) + _ENDINGS[ending]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "DAYTONA_API_KEY": FAKE_KEY},
        )
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello\n", "")
    finally:
        _remove_task(fake_daytona, profile, task)

