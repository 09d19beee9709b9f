"""Scale against the fake API server: tasks created, used and reaped from several
processes, nothing left. The full-size run (100 tasks, 8 processes) with timings is
``benchmarks/kubernetes_scale.py``; this is the smaller version for the normal test run."""

from __future__ import annotations

import uuid
from typing import Any


def test_tasks_from_several_processes_are_created_used_and_reaped(fake_apiserver: Any, control: Any) -> None:
    profile = f"k8s-scale-{uuid.uuid4().hex[:6]}"
    run = control.run_scale(fake_apiserver, profile, tasks=12, processes=4, deadline=15, age_past_deadline=True)
    assert run.reaped == 12
    assert run.left == 0


def test_execs_in_threads_never_disturb_rest_calls_of_other_threads(fake_apiserver: Any, control: Any) -> None:
    """One process: threads running one-shot execs while other threads create and remove
    environments. Each exec's websocket handshake must not turn another thread's REST call
    (create, status poll, delete) into a websocket request (the ``kubernetes`` client's
    ``stream()`` swaps the request method of the ``ApiClient`` it is given while it
    connects). Full size (8 x 25 execs, 3 x 4 lifecycles): ``benchmarks/kubernetes_threads.py``."""
    profile = f"k8s-storm-{uuid.uuid4().hex[:6]}"
    storm = control.run_thread_storm(
        fake_apiserver, profile, exec_threads=8, execs_per_thread=6, lifecycle_threads=3, lifecycles_per_thread=2
    )
    assert storm.errors == [], f"{len(storm.errors)} errors, first: {storm.errors[:3]}"
    assert (storm.execs, storm.lifecycles) == (48, 6)
    rest_as_websocket = [r for r in fake_apiserver.routes() if r.get("upgrade") and not r["route"].endswith("/exec")]
    assert rest_as_websocket == []
