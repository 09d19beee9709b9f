"""The order of a run, and its cleanup: everything the run created is removed when it
ends, fails, or is stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP (:mod:`envlayer.bench.interrupts`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from envlayer.bench.baselines import exec_baselines
from envlayer.bench.figures import Figure
from envlayer.bench.interrupts import signals_ignored, signals_raise
from envlayer.bench.ledger import Ledger
from envlayer.bench.machine import LOCAL_PROCESSES, one_cpu
from envlayer.bench.measure import (
    Plan,
    measure_agent_loop,
    measure_exec,
    measure_file_calls,
    measure_flood,
    measure_start,
    measure_transfer,
)
from envlayer.bench.sweep import SWEEPS
from envlayer.bench.target import BackendTarget
from envlayer.capabilities import Capability, supports
from envlayer.factory import backend_class

Step = Callable[[str], Any]
"""``with step("docker: flood"):``, a context manager showing what the run is doing."""


def bench_backend(target: BackendTarget, ledger: Ledger, plan: Plan, step: Step) -> list[Figure]:
    """Every measurement of one backend (see :mod:`envlayer.bench.measure`); those of one
    environment's session (warm exec, file transfer, file calls, agent loop) of a backend
    in :data:`~envlayer.bench.machine.LOCAL_PROCESSES` on ``plan.local_cpu`` alone."""
    name = target.name
    with step(f"{name}: start"):
        figures = measure_start(target, ledger, plan)
    task_id = ledger.task(target, "warm")
    mode = target.mode_option()
    with one_cpu(plan.local_cpu if name in LOCAL_PROCESSES else None):
        with step(f"{name}: warm exec"):
            session = ledger.open(target, task_id, {mode: "session"} if mode else None)
            oneshot = ledger.open(target, task_id, {mode: "oneshot"}) if mode else None
            baselines = exec_baselines(name, session)
            try:
                figures += measure_exec(name, session, oneshot, baselines, plan)
            finally:
                baselines.close()
        with step(f"{name}: file transfer"):
            figures += measure_transfer(name, session, ledger.scratch_dir(session), plan)
        with step(f"{name}: file calls"):
            figures += measure_file_calls(name, session, ledger.scratch_dir(session), plan)
        with step(f"{name}: agent loop"):
            figures += measure_agent_loop(name, session, ledger.scratch_dir(session), plan)
    with step(f"{name}: flood"):
        figures += measure_flood(target, task_id, plan)
    sweep = SWEEPS.get(name)
    if sweep is not None and supports(backend_class(name), Capability.REAP_ORPHANS):
        with step(f"{name}: sweep over {plan.sweep_count} stale sandboxes"):
            figures += sweep(target, ledger, plan.sweep_count, plan.sweep_rounds)
    return figures


def run_bench(targets: list[BackendTarget], plan: Plan, step: Step) -> tuple[list[Figure], list[str]]:
    """Measure every target in turn, each stage under ``step(text)`` (a status line: the
    CLI passes :func:`envlayer.cli.progress.progress`); the figures and the cleanup
    problems (empty when everything was removed). The cleanup runs in ``finally`` with SIGINT and SIGTERM
    ignored; an interrupt (KeyboardInterrupt, :class:`~envlayer.bench.interrupts.Terminated`)
    propagates after it."""
    ledger = Ledger()
    figures: list[Figure] = []
    try:
        with signals_raise():
            for target in targets:
                figures += bench_backend(target, ledger, plan, step)
    finally:
        with signals_ignored(), step("removing what the run created"):
            problems = ledger.release_all()
        for problem in problems:
            print(f"envlayer: warning: bench cleanup: {problem}", file=sys.stderr)
    return figures, problems
