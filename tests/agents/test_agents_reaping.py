"""Idle reaping spares environments with a command in flight; the orphan sweep runs
once per process and profile, with the 60 s floor, the opt-out, and never blocks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from envlayer.capabilities import Capability
from envlayer.errors import BackendUnavailable
from envlayer.local.backend import LocalEnvironment


def test_reaper_thread_spares_a_command_running_longer_than_the_lifetime(
    make_manager, make_settings, tmp_path: Path, wait_until
) -> None:
    settings = make_settings(backend="local", lifetime_seconds=1.0, backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, reap_interval=0.1)
    env = manager.get("t")
    result = env.exec("sleep 3; echo finished")  # ~30 reaper passes while it runs
    assert result.stdout_text == "finished\n"
    assert not env.closed, "reaped in the middle of (or right at the end of) a command"
    assert wait_until(lambda: env.closed)  # idle afterwards: now it goes
    assert manager.active_keys() == []
    assert manager.get("t") is not env


def test_reap_pass_during_a_command_skips_it(make_manager, make_settings, tmp_path: Path, wait_until) -> None:
    settings = make_settings(backend="local", lifetime_seconds=0.2, backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, reap_interval=3600)  # passes run only when called here
    busy, idle = manager.get("busy"), manager.get("idle")
    marker = tmp_path / "started"
    done = threading.Event()
    release = tmp_path / "release"
    thread = threading.Thread(
        target=lambda: (
            busy.exec(f"touch {marker}; while [ ! -e {release} ]; do sleep 0.05; done", timeout=60),
            done.set(),
        )
    )
    thread.start()
    try:
        assert wait_until(marker.exists)

        def reap_pass() -> bool:
            manager.reap_idle()
            return idle.closed

        assert wait_until(reap_pass)  # passes every 20 ms until the idle one is older than its lifetime
        assert not busy.closed
        assert manager.active_keys() == [manager.key_for("busy")]
    finally:
        release.touch()
        thread.join(30)
    assert done.is_set() and not busy.closed


def reaping_backend(behaviour: str = "record", gate: threading.Event | None = None) -> type[LocalEnvironment]:
    """A local backend with a class-level orphan reaper that records its calls."""

    class Reaping(LocalEnvironment):
        name = "reaping"
        capabilities = frozenset({*LocalEnvironment.capabilities, Capability.REAP_ORPHANS})
        calls: list[tuple[str, float, bool]] = []

        @classmethod
        def reap_orphans(cls, *, profile, max_age, dry_run, options):  # type: ignore[no-untyped-def]
            cls.calls.append((profile, max_age, dry_run))
            if gate is not None:
                gate.wait(30)
            if behaviour == "fail":
                raise BackendUnavailable("daemon went away during the sweep")
            return []

    return Reaping


@pytest.mark.parametrize("lifetime, expected_age", [(10.0, 120.0), (300.0, 600.0)])
def test_orphan_sweep_once_per_process_with_floor(
    make_manager, make_settings, tmp_path: Path, profile: str, lifetime: float, expected_age: float
) -> None:
    backend = reaping_backend()
    settings = make_settings(backend="reaping", lifetime_seconds=lifetime, backend_options={"cwd": str(tmp_path)})
    first = make_manager(settings, backends={"reaping": backend})
    second = make_manager(settings, backends={"reaping": backend})
    for task in ("a", "b"):
        first.get(task)
        second.get(task)
    sweep = first.orphan_sweep()
    assert sweep is not None and sweep.wait(30)
    assert second.orphan_sweep() is sweep
    assert backend.calls == [(profile, expected_age, False)]
    assert sweep.outcomes[0].supported and sweep.outcomes[0].error is None


def test_orphan_sweep_opt_out(make_manager, make_settings, tmp_path: Path) -> None:
    backend = reaping_backend()
    settings = make_settings(backend="reaping", orphan_reaper=False, backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, backends={"reaping": backend})
    manager.get("t").exec("true")
    assert manager.orphan_sweep() is None and backend.calls == []


def test_orphan_sweep_failure_is_logged_and_creation_proceeds(
    make_manager, make_settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = reaping_backend("fail")
    settings = make_settings(backend="reaping", backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, backends={"reaping": backend})
    with caplog.at_level(logging.WARNING):
        assert manager.get("t").exec("echo fine").stdout_text == "fine\n"
        sweep = manager.orphan_sweep()
        assert sweep is not None and sweep.wait(30)
    assert "daemon went away" in (sweep.outcomes[0].error or "")
    assert any("daemon went away" in r.getMessage() for r in caplog.records)


def test_slow_orphan_sweep_never_blocks_creation(make_manager, make_settings, tmp_path: Path) -> None:
    gate = threading.Event()
    backend = reaping_backend(gate=gate)
    settings = make_settings(backend="reaping", backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, backends={"reaping": backend})
    try:
        env = manager.get("t")  # returns while the sweep is blocked
        assert env.exec("echo created").stdout_text == "created\n"
        sweep = manager.orphan_sweep()
        assert sweep is not None and not sweep.done.is_set()
    finally:
        gate.set()
    assert sweep.wait(30)


def test_running_background_job_keeps_its_environment(make_manager, make_settings, tmp_path: Path, wait_until) -> None:  # type: ignore[no-untyped-def]
    from envlayer.agents.tools import ToolConfig, ToolRegistry

    settings = make_settings(backend="local", lifetime_seconds=0.2, backend_options={"cwd": str(tmp_path)})
    manager = make_manager(settings, reap_interval=3600)  # passes run only when called here
    tools = ToolRegistry(manager, ToolConfig(jobs_dir=str(tmp_path / "jobs")))
    gate = tmp_path / "go"
    started = tools.run_tool(
        "terminal", {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done", "background": True}, "t"
    )
    assert started["status"] == "running"
    with_job, without = manager.get("t"), manager.get("no-jobs")

    def reap_until(env) -> Callable[[], bool]:  # type: ignore[no-untyped-def]
        def check() -> bool:
            manager.reap_idle()
            return env.closed

        return check

    assert wait_until(reap_until(without))  # idle and no job: released
    assert not with_job.closed  # idle too, but its job runs: kept
    gate.touch()
    assert wait_until(reap_until(with_job))  # the job ended: reaped, without any terminal_job call
