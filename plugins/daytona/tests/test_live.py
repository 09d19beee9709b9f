"""Opt-in tests against real Daytona: they check the fake's assumptions (fake_daytona.md).

Skipped unless ``DAYTONA_API_KEY`` is set when the tests start (never in this project's CI).
``DAYTONA_API_URL`` / ``DAYTONA_TARGET`` are honoured as the SDK honours them;
``ENVLAYER_DAYTONA_LIVE_SNAPSHOT`` picks the snapshot (Daytona's default when unset). Every
sandbox made here is deleted at the end, even when a test fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance

LIVE = bool(os.environ.get("DAYTONA_API_KEY")) and os.environ.get("DAYTONA_API_KEY") != "envlayer-fake-key"
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not LIVE, reason="set DAYTONA_API_KEY to run the live Daytona tests"),
]
PROFILE = f"envlayer-live-{uuid.uuid4().hex[:8]}"


def _options(**kw: Any) -> Any:
    from envlayer_daytona.options import DaytonaOptions

    snapshot = os.environ.get("ENVLAYER_DAYTONA_LIVE_SNAPSHOT")
    if snapshot:
        kw.setdefault("snapshot", snapshot)
    kw.setdefault("timeout", 120)
    kw.setdefault("auto_stop_interval", 5)
    return DaytonaOptions(**kw)


@pytest.fixture(scope="module")
def live_sweep() -> Iterator[None]:
    """Deletes every sandbox of this run's profile at the end."""
    yield
    from envlayer_daytona.backend import DaytonaEnvironment

    DaytonaEnvironment.wait_for_all_cleanups(60)
    for info in DaytonaEnvironment.list_sandboxes(profile=PROFILE, options=_options()):
        DaytonaEnvironment.remove_sandbox(info.task, profile=PROFILE, options=_options(), force=True)


class TestLiveDaytonaConformance(EnvironmentConformance):
    task = f"live-conformance-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def env(self, live_sweep: None) -> Iterator[Any]:
        from envlayer_daytona.backend import DaytonaEnvironment

        environment = DaytonaEnvironment(_options(), task_id=self.task, profile=PROFILE)
        try:
            yield environment
        finally:
            environment.cleanup()


def test_live_lifecycle(live_sweep: None) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    env = DaytonaEnvironment(_options(), task_id=f"live-{uuid.uuid4().hex[:6]}", profile=PROFILE)
    try:
        result = env.exec("echo out; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
        timed = env.exec("echo started; sleep 60", timeout=2)
        assert timed.timed_out and timed.stdout == b"started\n"
        env._sandbox.stop()
        assert env.exec("echo back").recovered == "sandbox restarted"
        listed = DaytonaEnvironment.list_sandboxes(profile=PROFILE, options=_options())
        assert env.sandbox_id in [i.id for i in listed]
    finally:
        env.cleanup(force_remove=True)
        assert env.wait_for_cleanup(120)


def test_live_script_exits_with_its_own_status(live_sweep: None) -> None:
    """With the real event websocket connected, a script that uses Daytona exits 0 with
    nothing on stderr (the fake has no websocket: only this shows the SDK's threads end)."""
    import subprocess
    import sys

    opts = {"persist_across_processes": False, "timeout": 120, "auto_stop_interval": 5}
    snapshot = os.environ.get("ENVLAYER_DAYTONA_LIVE_SNAPSHOT")
    if snapshot:
        opts["snapshot"] = snapshot
    code = (
        "from envlayer_daytona.backend import DaytonaEnvironment\n"
        "from envlayer_daytona.options import DaytonaOptions\n"
        f"env = DaytonaEnvironment(DaytonaOptions(**{opts!r}), task_id='live-exit', profile={PROFILE!r})\n"
        "print(env.exec('echo hello').stdout.decode(), end='')\n"
        "env.cleanup()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello\n", "")


def test_live_rm_while_the_sandbox_is_stopping(live_sweep: None) -> None:
    """A delete sent while the sandbox is stopping (Daytona answers 409 then) still removes it."""
    from envlayer_daytona.backend import DaytonaEnvironment

    task = f"live-rm-{uuid.uuid4().hex[:6]}"
    env = DaytonaEnvironment(_options(), task_id=task, profile=PROFILE)
    env.cleanup()
    env._sandbox._sandbox_api.stop_sandbox(env.sandbox_id)  # the API call alone: no wait for `stopped`
    removed = DaytonaEnvironment.remove_sandbox(task, profile=PROFILE, options=_options(), force=True)
    assert [info.id for info in removed] == [env.sandbox_id]
    assert task not in [info.task for info in DaytonaEnvironment.list_sandboxes(profile=PROFILE, options=_options())]
