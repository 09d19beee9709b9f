"""``ManagedSandboxEnvironment`` (envlayer.sandbox.managed): the cleanup template (closed
flag, session, remove-or-keep, one removal on the shared teardown threads, joined by
``wait_for_cleanup``), reaping as "sweep, then expire snapshots", and the teardown
threads' exit hook, over a tiny in-memory backend whose sandboxes are entries of a dict."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable, EnvironmentClosed
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer.sandbox.managed import ManagedSandboxEnvironment
from envlayer.sandbox.options import ManagedSandboxOptions
from envlayer.snapshot import Snapshot


class MemorySandbox(ManagedSandboxEnvironment):
    """A sandbox that is an entry of :attr:`sandboxes`; its removal waits for :attr:`gate`
    and raises :attr:`removal_error` when set."""

    name = "memory"
    Options = ManagedSandboxOptions
    sandboxes: ClassVar[dict[str, list[str]]] = {}

    def open_sandbox(self) -> None:
        self._state_lock = threading.RLock()
        self.sandboxes.setdefault(self.task_id, [])
        self.events: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.removal_error: Exception | None = None
        self.session_error: Exception | None = None

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        self.sandboxes[self.task_id].append(str(request.command))
        return ExecResult(0, b"", b"", 0.0)

    def read_file(self, path: str) -> bytes:
        raise NotImplementedError

    def write_file(self, path: str, data: bytes | str) -> None:
        raise NotImplementedError

    def sandbox_identity(self) -> str:
        return self.task_id

    def holds_sandbox(self) -> bool:
        return self.task_id in self.sandboxes

    def close_session(self) -> None:
        self.events.append("session closed")
        if self.session_error is not None:
            raise self.session_error

    def release_sandbox(self) -> None:
        self.events.append("released")

    def removal(self) -> Callable[[], None]:
        task, gate, error = self.task_id, self.gate, self.removal_error
        self.events.append("removal scheduled")

        def work() -> None:
            gate.wait(30)
            if error is not None:
                raise error
            del self.sandboxes[task]

        return work


@pytest.fixture
def make() -> Iterator[Callable[..., MemorySandbox]]:
    made: list[MemorySandbox] = []

    def factory(task: str, **options: Any) -> MemorySandbox:
        env = MemorySandbox(ManagedSandboxOptions(**options), task_id=task)
        made.append(env)
        return env

    yield factory
    for env in made:
        env.gate.set()
        assert env.wait_for_cleanup(30)
    MemorySandbox.sandboxes.clear()


def test_a_plain_cleanup_keeps_the_sandbox_and_is_idempotent(make: Callable[..., MemorySandbox]) -> None:
    env = make("keep")
    env.exec("true")
    env.cleanup()
    env.cleanup()
    assert env.closed and "keep" in MemorySandbox.sandboxes
    assert env.events == ["session closed", "released", "session closed", "released"]
    assert env.wait_for_cleanup(0), "nothing to tear down"
    with pytest.raises(EnvironmentClosed):
        env.exec("true")


def test_force_remove_after_a_plain_cleanup_still_removes_once(make: Callable[..., MemorySandbox]) -> None:
    env = make("force")
    env.cleanup()
    env.cleanup(force_remove=True)
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30)
    assert "force" not in MemorySandbox.sandboxes
    assert env.events.count("removal scheduled") == 1


def test_a_private_sandbox_is_removed_by_a_plain_cleanup(make: Callable[..., MemorySandbox]) -> None:
    env = make("private", persist_across_processes=False)
    env.cleanup()
    assert env.wait_for_cleanup(30)
    assert "private" not in MemorySandbox.sandboxes and "released" not in env.events


def test_wait_for_cleanup_joins_the_teardown(make: Callable[..., MemorySandbox]) -> None:
    env = make("slow")
    env.gate.clear()
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(0.05) is False, "the removal is still waiting for its gate"
    assert "slow" in MemorySandbox.sandboxes
    env.gate.set()
    assert env.wait_for_cleanup(30) is True
    assert "slow" not in MemorySandbox.sandboxes


def test_a_failing_teardown_is_logged_not_raised(
    make: Callable[..., MemorySandbox], caplog: pytest.LogCaptureFixture
) -> None:
    env = make("broken")
    env.removal_error = BackendUnavailable("the platform said no")
    env.session_error = OSError("the shell was already gone")
    with caplog.at_level(logging.DEBUG, logger="envlayer"):
        env.cleanup(force_remove=True)
        assert env.wait_for_cleanup(30)
    assert env.closed and "broken" in MemorySandbox.sandboxes
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["envlayer-memory-teardown-broken failed: BackendUnavailable('the platform said no')"]
    assert any("the shell was already gone" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


class Reaper(MemorySandbox):
    """A reaper whose steps record their order and fail on demand."""

    calls: ClassVar[list[str]] = []
    failing: ClassVar[set[str]] = set()

    @classmethod
    def reaper_context(cls, options: Any) -> str:
        cls.calls.append("connect")
        return "client"

    @classmethod
    def sweep_orphans(cls, context: Any, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
        cls.calls.append(f"sweep {context} {profile} {max_age} {dry_run}")
        if "sweep" in cls.failing:
            raise BackendUnavailable("listing failed")
        return [SandboxInfo("memory", "sb-1", "t", profile, "exited")]

    @classmethod
    def expire_snapshots(cls, context: Any, *, profile: str, dry_run: bool) -> list[Snapshot]:
        cls.calls.append(f"expire {context} {profile} {dry_run}")
        if "expire" in cls.failing:
            raise BackendUnavailable("snapshots unreachable")
        return [Snapshot(backend="memory", id="snap-1", name="s", profile=profile, source_task="t", created="")]

    @classmethod
    def release_reaped(cls, context: Any, removed: list[SandboxInfo]) -> None:
        cls.calls.append(f"release {[r.id for r in removed]}")


@pytest.fixture
def reaper() -> Iterator[type[Reaper]]:
    Reaper.calls.clear()
    Reaper.failing.clear()
    yield Reaper
    Reaper.calls.clear()
    Reaper.failing.clear()


def test_reaping_is_sweep_then_expire_then_release(reaper: type[Reaper]) -> None:
    removed = reaper.reap_orphans(profile="p", max_age=120.0, dry_run=False, options=ManagedSandboxOptions())
    assert [(r.id, r.status) for r in removed] == [("sb-1", "exited"), ("snap-1", "snapshot")]
    assert reaper.calls == [
        "connect",
        "sweep client p 120.0 False",
        "expire client p False",
        "release ['sb-1', 'snap-1']",
    ]


def test_a_dry_run_releases_nothing(reaper: type[Reaper]) -> None:
    removed = reaper.reap_orphans(profile="p", max_age=1.0, dry_run=True, options=ManagedSandboxOptions())
    assert [r.id for r in removed] == ["sb-1", "snap-1"]
    assert reaper.calls == ["connect", "sweep client p 1.0 True", "expire client p True"]


@pytest.mark.parametrize(
    ("failing", "error", "released", "warning"),
    [
        (
            "sweep",
            "listing failed",
            "['snap-1']",
            "sweeping sandboxes failed: listing failed; the other steps removed snapshot snap-1",
        ),
        (
            "expire",
            "snapshots unreachable",
            "['sb-1']",
            "expiring snapshots failed: snapshots unreachable; the other steps removed exited sb-1",
        ),
    ],
)
def test_a_failed_step_does_not_stop_the_other_and_is_raised(
    reaper: type[Reaper], caplog: pytest.LogCaptureFixture, failing: str, error: str, released: str, warning: str
) -> None:
    """The other step still runs and what it removed is released and named in a warning;
    the failure is raised for the dispatcher to report."""
    reaper.failing.add(failing)
    with pytest.raises(BackendUnavailable, match=error):
        reaper.reap_orphans(profile="p", max_age=1.0, dry_run=False, options=ManagedSandboxOptions())
    assert reaper.calls == ["connect", "sweep client p 1.0 False", "expire client p False", f"release {released}"]
    assert warning in caplog.text


EXIT_SCRIPT = textwrap.dedent(
    """\
    import time
    from envlayer.sandbox import teardown_threads

    teardown_threads.EXIT_WAIT = 0.0  # unbounded jobs get no time at all
    teardown_threads.after_teardowns(lambda: print("hook ran", flush=True))

    def slow() -> None:
        time.sleep(1.0)
        print("bounded job ended", flush=True)

    def failing() -> None:
        raise RuntimeError("boom")

    teardown_threads.schedule(slow, "slow-job", bound=20.0)
    teardown_threads.schedule(failing, "failing-job")
    """
)


def test_at_exit_a_bounded_job_is_waited_for_then_the_hooks_run() -> None:
    """The exit hook waits for a job until its bound (not the shared wait, here 0 s), then
    runs the after-teardown hooks; a job's exception is logged, not lost."""
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "bounded job ended\nhook ran\n")
    assert "failing-job failed: RuntimeError('boom')" in proc.stderr
