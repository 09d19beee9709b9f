"""EnvironmentManager: keys, creation at most once, aliases, overrides, release, close."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlayer.agents.manager import EnvironmentManager, EnvKey, ManagedEnvironment, ManagerClosed, TaskBindingConflict
from envlayer.errors import BackendUnavailable, EnvironmentClosed
from envlayer.local.backend import LocalEnvironment


def counting_backend(gate: threading.Event | None = None, fail_first: int = 0) -> type[LocalEnvironment]:
    """A real local backend that counts constructions; optionally each construction
    waits for ``gate`` and the first ``fail_first`` ones raise BackendUnavailable."""

    class Counting(LocalEnvironment):
        name = "counting"
        attempts = 0
        entered = threading.Event()
        lock = threading.Lock()

        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            cls = type(self)
            with cls.lock:
                cls.attempts += 1
                attempt = cls.attempts
            cls.entered.set()
            if gate is not None:
                assert gate.wait(30), "test gate never opened"
            if attempt <= fail_first:
                raise BackendUnavailable("daemon not reachable (simulated)", hint="start it")
            super().__init__(*args, **kwargs)

    return Counting


def run_threads(n: int, target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)


def _open_after_the_others_queue(backend: Any, gate: threading.Event) -> None:
    """Once ``backend`` is creating, let the other threads queue behind it, then open ``gate``."""
    backend.entered.wait(30)
    time.sleep(0.3)  # give the others time to queue behind the creation (not asserted)
    gate.set()


def test_32_threads_get_one_environment(make_manager, tmp_path: Path) -> None:
    gate = threading.Event()
    backend = counting_backend(gate)
    manager = make_manager(backend="counting", backend_options={"cwd": str(tmp_path)}, backends={"counting": backend})
    barrier = threading.Barrier(32)
    got: list[ManagedEnvironment | None] = [None] * 32

    def worker(i: int) -> None:
        barrier.wait()
        if i == 0:
            _open_after_the_others_queue(backend, gate)
        got[i] = manager.get("task-1")

    run_threads(32, worker)
    assert backend.attempts == 1
    assert all(env is got[0] for env in got)
    assert got[0].exec("echo ok").stdout_text == "ok\n"
    assert manager.active_keys() == [EnvKey(manager.settings.profile, "counting", "task-1")]


def test_slow_creation_blocks_only_its_own_key(make_manager, tmp_path: Path) -> None:
    gate = threading.Event()
    slow = counting_backend(gate)
    manager = make_manager(backend="local", backend_options={"cwd": str(tmp_path)}, backends={"slow": slow})
    manager.register_overrides("slow-task", backend="slow")
    creator = threading.Thread(target=manager.get, args=("slow-task",))
    creator.start()
    try:
        assert slow.entered.wait(30)
        fast: list[ManagedEnvironment] = []
        other = threading.Thread(target=lambda: fast.append(manager.get("fast-task")))
        other.start()
        other.join(30)
        assert fast and fast[0].exec("true").ok  # created while "slow-task" is still being created
    finally:
        gate.set()
        creator.join(30)
    assert slow.attempts == 1


def test_waiters_share_a_creation_failure_and_a_later_call_retries(make_manager, tmp_path: Path) -> None:
    gate = threading.Event()
    backend = counting_backend(gate, fail_first=1)
    manager = make_manager(backend="counting", backend_options={"cwd": str(tmp_path)}, backends={"counting": backend})
    errors: list[BaseException] = []
    successes: list[ManagedEnvironment] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        if i == 0:
            _open_after_the_others_queue(backend, gate)
        try:
            successes.append(manager.get("t"))
        except BackendUnavailable as exc:
            errors.append(exc)

    run_threads(8, worker)
    # Every thread that waited for the failing creation got its error; a thread the
    # scheduler held back until after the failure creates again (once).
    assert errors and len(errors) + len(successes) == 8
    assert backend.attempts == 1 + bool(successes)
    assert len({id(env) for env in successes}) <= 1
    assert manager.get("t").exec("echo again").stdout_text == "again\n"
    assert backend.attempts == 2


def test_alias_shares_and_release_resolves_like_get(make_manager, local_settings) -> None:
    manager = make_manager(local_settings)
    parent = manager.get("parent")
    manager.alias("child", "parent")
    manager.alias("grandchild", "child")
    assert manager.get("grandchild") is parent
    assert manager.key_for("grandchild") == manager.key_for("parent")
    outcome = manager.release("grandchild")  # upstream looked up the raw id and missed
    assert outcome is not None and parent.closed
    assert manager.active_keys() == []
    assert manager.release("grandchild") is None


def test_alias_cycles_are_refused(make_manager, local_settings) -> None:
    manager = make_manager(local_settings)
    manager.alias("b", "a")
    manager.alias("c", "b")
    for child, parent in [("a", "c"), ("a", "a"), ("b", "c")]:
        with pytest.raises(TaskBindingConflict):
            manager.alias(child, parent)
    assert manager.key_for("c").task == "a"


def test_overrides_isolate_a_task_and_apply_options(make_manager, local_settings, tmp_path: Path) -> None:
    manager = make_manager(local_settings)
    own = tmp_path / "own"
    own.mkdir()
    manager.alias("rl-task", "parent")
    key = manager.register_overrides("rl-task", options={"cwd": str(own)})
    assert key.task == "rl-task" and key.overrides
    isolated = manager.get("rl-task")
    shared = manager.get("parent")
    assert isolated is not shared
    assert isolated.exec("pwd").stdout_text.strip() == str(own)
    manager.alias("rl-sub", "rl-task")  # a subagent of the isolated task shares it
    assert manager.get("rl-sub") is isolated
    with pytest.raises(TaskBindingConflict):  # too late: it has a live environment
        manager.register_overrides("rl-task", options={"cwd": str(tmp_path)})
    with pytest.raises(TaskBindingConflict):
        manager.alias("parent", "rl-task")


def test_overrides_are_validated_when_registered(make_manager, local_settings) -> None:
    from envlayer.errors import BackendNotFound, ConfigError

    manager = make_manager(local_settings)
    with pytest.raises(ConfigError):
        manager.register_overrides("t", options={"no_such_option": 1})
    with pytest.raises(BackendNotFound):
        manager.register_overrides("t", backend="no-such-backend")


def test_forget_drops_registrations(make_manager, local_settings) -> None:
    manager = make_manager(local_settings)
    manager.alias("child", "parent")
    manager.forget("child")
    assert manager.key_for("child").task == "child"


def test_handle_released_by_the_manager_refuses_calls(make_manager, local_settings) -> None:
    manager = make_manager(local_settings)
    env = manager.get("t")
    env.cleanup()  # a handle's cleanup releases through the manager
    assert env.closed and manager.active_keys() == []
    with pytest.raises(EnvironmentClosed):
        env.exec("true")
    assert manager.get("t") is not env


def test_close_cleans_up_and_refuses_new_work(make_manager, local_settings) -> None:
    manager: EnvironmentManager = make_manager(local_settings)
    envs = [manager.get(f"t{i}") for i in range(3)]
    assert manager.close() is True
    assert all(env.closed and env.environment.closed for env in envs)
    assert manager.close() is True  # idempotent
    with pytest.raises(ManagerClosed):
        manager.get("t0")


def test_streaming_passes_through_the_handle(make_manager, local_settings) -> None:  # type: ignore[no-untyped-def]
    from envlayer.dispatch import exec_streaming

    env = make_manager(local_settings).get("t")
    chunks: list[tuple[str, bytes]] = []
    result = exec_streaming(env, "echo a; echo b >&2", lambda stream, chunk: chunks.append((stream, chunk)))
    assert result.ok
    assert b"".join(c for s, c in chunks if s == "stdout") == b"a\n"
    assert b"".join(c for s, c in chunks if s == "stderr") == b"b\n"
