"""Scale against the fake API server: tasks created, used and reaped from several
processes, nothing left. The full-size run (100 tasks, 8 processes) with timings is
``benchmarks/kubernetes_scale.py``; this is the smaller version for the normal test run."""

from __future__ import annotations

import uuid
from typing import Any


def test_tasks_from_several_processes_are_created_used_and_reaped(fake_apiserver: Any, control: Any) -> None:
    profile = f"k8s-scale-{uuid.uuid4().hex[:6]}"
    run = control.run_scale(fake_apiserver, profile, tasks=12, processes=4, deadline=15)
    assert run.reaped == 12
    assert run.left == 0
