"""``SandboxEnvironment`` (envlayer.sandbox.base): the base every built-in backend uses.

The backend here is the ``dir`` example of docs/plugins.md, taken from the page as it is:
the conformance kit runs over it, and over subclasses that exercise each part the base
owns (the session-or-one-shot choice, retry once after recovery and never twice, the
refusal of ``user=``, capabilities narrowed by options)."""

from __future__ import annotations

import re
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.capabilities import Capability, capabilities_of
from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer.sandbox.options import ManagedSandboxOptions
from envlayer.testing import EnvironmentConformance, ExecContractConformance

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
EXAMPLE = re.search(r"^```python\n# example: dir_sandbox.py\n(.*?)^```$", PAGE.read_text(), re.MULTILINE | re.DOTALL)
assert EXAMPLE is not None, "docs/plugins.md lost its SandboxEnvironment example"
dir_sandbox = types.ModuleType("dir_sandbox")
exec(compile(EXAMPLE.group(1), f"{PAGE}:dir_sandbox.py", "exec"), dir_sandbox.__dict__)
DirSandbox: Any = dir_sandbox.DirSandbox


class TestDirSandboxConformance(EnvironmentConformance, ExecContractConformance):
    """The documented example passes the kit (it kills its process group only, and
    buffers output until the command ends, as it documents)."""

    kills_escaped_processes = False
    handles_output_floods = False

    @pytest.fixture
    def env(self) -> Iterator[Any]:
        environment = DirSandbox(DirSandbox.Options(timeout=60))
        try:
            yield environment
        finally:
            environment.cleanup()


class Counting(DirSandbox):  # type: ignore[misc, valid-type]
    """The example, counting the one-shot runs and recoveries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.oneshots = 0
        self.recoveries = 0

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        self.oneshots += 1
        return super().run_oneshot(request)

    def recover(self, seen: str) -> str:
        self.recoveries += 1
        return super().recover(seen)


@pytest.fixture
def counting() -> Iterator[Counting]:
    environment = Counting(DirSandbox.Options(timeout=60))
    try:
        yield environment
    finally:
        environment.cleanup()


def test_a_gone_sandbox_is_recovered_and_the_command_runs_once(counting: Counting) -> None:
    Path(counting.root).rmdir()
    result = counting.exec("echo ran >> log; cat log")
    assert (result.exit_code, result.stdout, result.recovered) == (0, b"ran\n", "directory recreated")
    assert (counting.oneshots, counting.recoveries) == (2, 1)
    assert counting.exec("cat log").recovered == "", "a call after a recovery is a plain call"


def test_gone_again_after_recovery_raises_and_nothing_ran(counting: Counting) -> None:
    class NeverBack(Counting):
        def recover(self, seen: str) -> str:
            self.recoveries += 1
            return "pretended"

    env = NeverBack(DirSandbox.Options(timeout=60))
    try:
        Path(env.root).rmdir()
        with pytest.raises(BackendUnavailable, match="gone again right after being recovered"):
            env.exec("true")
        assert (env.oneshots, env.recoveries) == (2, 1), "one retry, never a third run"
    finally:
        env.cleanup()


def test_a_failure_after_the_command_may_have_started_is_never_retried() -> None:
    class LostMidway(Counting):
        def run_oneshot(self, request: ExecRequest) -> ExecResult:
            super().run_oneshot(request)
            raise BackendUnavailable("the connection dropped while the command ran")

    env = LostMidway(DirSandbox.Options(timeout=60))
    try:
        with pytest.raises(BackendUnavailable, match="dropped"):
            env.exec("echo ran >> log")
        assert (env.oneshots, env.recoveries) == (1, 0)
        assert Path(env.root, "log").read_text() == "ran\n"
    finally:
        env.cleanup()


def test_user_is_refused_without_exec_as_user_and_nothing_runs(counting: Counting) -> None:
    with pytest.raises(InvalidArgument, match="has no exec_as_user"):
        counting.exec("touch ran", user="nobody")
    assert counting.oneshots == 0 and not Path(counting.root, "ran").exists()


class Session(DirSandbox):  # type: ignore[misc, valid-type]
    """The example with a pretend session: calls it takes are recorded, not run."""

    capabilities = frozenset({Capability.PERSISTENT_SESSION, Capability.PERSIST_ACROSS_PROCESSES})
    Options = ManagedSandboxOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.ran_in: list[str] = []

    def session_lock(self) -> threading.Lock | None:
        return self.lock if self.options.exec_mode == "session" else None

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        self.ran_in.append("session")
        return ExecResult(0, b"", b"", 0.0)

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        self.ran_in.append("oneshot")
        return ExecResult(0, b"", b"", 0.0)


def test_the_session_when_free_else_one_shot() -> None:
    env = Session(ManagedSandboxOptions())
    try:
        env.exec("true")
        with env.lock:  # another thread's command holds the shell
            env.exec("true")
        assert env.ran_in == ["session", "oneshot"]
    finally:
        env.cleanup()


def test_waiting_for_a_busy_session_when_the_backend_says_so() -> None:
    class Waiting(Session):
        wait_for_busy_session = True

    env = Waiting(ManagedSandboxOptions(timeout=5))
    try:
        env.lock.acquire()
        caller = threading.Thread(target=env.exec, args=("true",))
        caller.start()
        caller.join(0.2)
        assert caller.is_alive() and env.ran_in == [], "the call must wait for the shell"
        env.lock.release()
        caller.join(10)
        assert env.ran_in == ["session"]
    finally:
        env.cleanup()


def test_capabilities_are_narrowed_by_the_options() -> None:
    full = Session(ManagedSandboxOptions())
    narrow = Session(ManagedSandboxOptions(exec_mode="oneshot", persist_across_processes=False))
    try:
        assert capabilities_of(full) == {Capability.PERSISTENT_SESSION, Capability.PERSIST_ACROSS_PROCESSES}
        assert capabilities_of(narrow) == frozenset()
        narrow.exec("true")
        assert narrow.ran_in == ["oneshot"]
        assert Session.capabilities == {Capability.PERSISTENT_SESSION, Capability.PERSIST_ACROSS_PROCESSES}
    finally:
        full.cleanup()
        narrow.cleanup()
