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



def _statuses(fake: FakeDaytona, mark: int, route: str) -> list[int]:
    return [e["status"] for e in fake.entries_since(mark) if e["route"] == route]


def test_throttling_and_brief_outages_are_retried(
    fake_daytona: FakeDaytona, make_env: Any, options: Any, profile: str
) -> None:
    """429 with Retry-After, 502, 503 and 504 on create, get, start, list and delete are
    retried with backoff (each call succeeds after its faults; the route log shows them)."""
    from envlayer_daytona.backend import DaytonaEnvironment

    task = f"thr-{uuid.uuid4().hex[:8]}"
    mark = fake_daytona.mark()
    fake_daytona.fail_next("create", 2, 429, retry_after=0.2)
    env = make_env(task)
    assert _statuses(fake_daytona, mark, "create") == [429, 429, 200]
    env.cleanup()
    env._sandbox.stop()  # the next environment finds it stopped: get, then start
    mark = fake_daytona.mark()
    fake_daytona.fail_next("create", 1, 503)
    fake_daytona.fail_next("get", 1, 502)
    fake_daytona.fail_next("start", 1, 504)
    again = make_env(task)
    assert again.exec("echo back").stdout == b"back\n"
    assert _statuses(fake_daytona, mark, "create") == [503, 409]
    assert _statuses(fake_daytona, mark, "get")[:2] == [502, 200]
    assert _statuses(fake_daytona, mark, "start") == [504, 200]
    opts = options()
    mark = fake_daytona.mark()
    fake_daytona.fail_next("list", 2, 503)
    fake_daytona.fail_next("delete", 1, 429, retry_after=0)
    removed = DaytonaEnvironment.remove_sandbox(task, profile=profile, options=opts, force=True)
    assert [info.task for info in removed] == [task]
    assert _statuses(fake_daytona, mark, "list") == [503, 503, 200]
    assert _statuses(fake_daytona, mark, "delete")[:2] == [429, 200]


def test_a_throttle_that_does_not_end_fails_clearly(fake_daytona: FakeDaytona, options: Any, profile: str) -> None:
    """Retries are bounded: a route that keeps answering 503 fails after the policy's
    attempts with an error that says what happened and what to do."""
    from envlayer.errors import BackendUnavailable
    from envlayer.retry import DEFAULT_POLICY
    from envlayer_daytona.backend import DaytonaEnvironment

    mark = fake_daytona.mark()
    fake_daytona.fail_next("list", DEFAULT_POLICY.attempts, 503)
    with pytest.raises(BackendUnavailable) as caught:
        DaytonaEnvironment.list_sandboxes(profile=profile, options=options())
    assert "HTTP 503" in str(caught.value) and "retry" in caught.value.hint
    assert _statuses(fake_daytona, mark, "list") == [503] * DEFAULT_POLICY.attempts
