"""What is measured through envlayer, one function per measurement, each returning its
figures together with those of its baselines (:mod:`envlayer.bench.baselines`)."""

from __future__ import annotations

import os
import posixpath
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any

from envlayer.bench.baselines import FLOOD_FLOORS, SESSION_FLOOR, ExecBaselines
from envlayer.bench.figures import ENVLAYER, Figure
from envlayer.bench.file_calls import (
    FILE_SIZES,
    directory_samples,
    docker_cli_agent_loop,
    envlayer_agent_loop,
    file_call_samples,
)
from envlayer.bench.flood import run_flood
from envlayer.bench.ledger import Ledger
from envlayer.bench.target import BackendTarget
from envlayer.bench.timing import Spread, interleaved_rounds
from envlayer.capabilities import Capability, supports
from envlayer.dispatch import run
from envlayer.environment import Environment

DOCKER_CLI_LOOP = "docker exec + docker cp (CLI)"
"""The method name of the agent loop's baseline on Docker."""

MB = 1_000_000
MIB = 1 << 20


@dataclass(frozen=True)
class Plan:
    """How much a run measures: the full run, or a quick one (``--quick``)."""

    start_runs: int
    session_calls: int
    session_rounds: int
    spawning_calls: int
    rounds: int
    transfer_sizes: tuple[int, ...]
    transfer_runs: int
    flood_bytes: int
    flood_children: int
    flood_rounds_per_child: int
    sweep_count: int
    sweep_rounds: int
    file_calls: int = 30
    agent_rounds: int = 100
    local_cpu: int | None = None
    """The CPU the session measures of a backend in
    :data:`~envlayer.bench.machine.LOCAL_PROCESSES` run on (None: wherever they land)."""

    @classmethod
    def of(cls, quick: bool, *, local_cpu: int | None = None) -> Plan:
        """The quick plan (seconds on local) or the full one (minutes), pinning local
        session measures to ``local_cpu``."""
        if quick:
            quick_plan = (2, 24, 4, 6, 2, (1 * MB, 8 * MB), 2, 64 * MIB, 1, 2, 5, 1)
            return cls(*quick_plan, file_calls=5, agent_rounds=10, local_cpu=local_cpu)
        return cls(5, 600, 40, 40, 5, (1 * MB, 100 * MB), 5, 1024 * MIB, 3, 1, 30, 3, local_cpu=local_cpu)


def size_label(size: int) -> str:
    """``1 MB``, ``100 MB``, ``64 MiB``, ``1 GiB``: how a size is named in a measure."""
    for unit, name in ((1 << 30, "GiB"), (MIB, "MiB"), (MB, "MB"), (1024, "KiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def measure_start(target: BackendTarget, ledger: Ledger, plan: Plan) -> list[Figure]:
    """Create a new sandbox and run its first command (``true``); removed after each run."""
    samples = []
    for _ in range(plan.start_runs):
        task_id = ledger.task(target, "start")
        began = time.perf_counter()
        env = ledger.open(target, task_id)
        run(env, "true")
        samples.append(time.perf_counter() - began)
        ledger.release(env)
    return [Figure(target.name, "start", ENVLAYER, "ms", Spread.of(samples).scaled(1000))]


def _exec_figures(
    backend: str, measure: str, samples: dict[str, list[list[float]]], baseline: str | None
) -> list[Figure]:
    """One figure per method from its samples per round (the median of the round medians)."""
    return _figures(backend, measure, {method: Spread.of_rounds(times) for method, times in samples.items()}, baseline)


def _figures(backend: str, measure: str, spreads: dict[str, Spread], baseline: str | None) -> list[Figure]:
    """One figure in milliseconds per method; envlayer's is compared to ``baseline``."""
    return [
        Figure(backend, measure, method, "ms", spread.scaled(1000), baseline=baseline if method == ENVLAYER else None)
        for method, spread in spreads.items()
    ]


def measure_exec(
    backend: str, session: Environment, oneshot: Environment | None, baselines: ExecBaselines, plan: Plan
) -> list[Figure]:
    """Warm ``exec("true")``: the session (interleaved with the persistent-shell floor, in
    ``session_rounds`` short rounds: the calls take tens of microseconds, so many rounds
    cost little and keep a burst of other load to a round or two) and one-shot
    (interleaved with the baselines that spawn a process per call). Each figure is the
    median of its round medians. Without a one-shot environment, only the session's figures."""
    fast = {ENVLAYER: lambda: run(session, "true"), **baselines.fast}
    figures = _exec_figures(
        backend,
        "session exec",
        interleaved_rounds(fast, plan.session_calls, plan.session_rounds),
        SESSION_FLOOR if baselines.fast else None,
    )
    if oneshot is not None:
        spawning = {ENVLAYER: lambda: run(oneshot, "true"), **baselines.spawning}
        samples = interleaved_rounds(spawning, plan.spawning_calls, plan.rounds, warmup=2)
        figures += _exec_figures(backend, "one-shot exec", samples, baselines.oneshot_baseline)
    return figures


def measure_transfer(backend: str, env: Environment, scratch: str, plan: Plan) -> list[Figure]:
    """``write_file`` then ``read_file`` of random bytes of each planned size."""
    figures = []
    for size in plan.transfer_sizes:
        data = os.urandom(size)
        path = f"{scratch}/payload-{size}.bin"
        ups, downs = [], []
        for _ in range(plan.transfer_runs):
            began = time.perf_counter()
            env.write_file(path, data)
            ups.append(time.perf_counter() - began)
            began = time.perf_counter()
            back = env.read_file(path)
            downs.append(time.perf_counter() - began)
            if len(back) != size:
                raise RuntimeError(f"read_file returned {len(back)} of the {size} bytes written")
        label = size_label(size)
        for measure, samples in ((f"upload {label}", ups), (f"download {label}", downs)):
            figures.append(Figure(backend, measure, ENVLAYER, "ms", Spread.of(samples).scaled(1000), bytes=size))
    return figures


def measure_file_calls(backend: str, env: Environment, scratch: str, plan: Plan) -> list[Figure]:
    """Single ``write_file`` and ``read_file`` calls of 1 KiB, 256 KiB and 1 MiB, as an
    editor makes them (``plan.file_calls`` of each, alternating); on a backend with
    ``directory_transfer``, ``upload_dir`` then ``download_dir`` of 100 files of 1 KiB
    (``plan.file_calls`` pairs)."""
    figures = []
    for size in FILE_SIZES:
        samples = file_call_samples(env, f"{scratch}/file-call-{size}.bin", size, plan.file_calls)
        for call, times in samples.items():
            measure = f"{call}_file {size_label(size)}"
            figures.append(Figure(backend, measure, ENVLAYER, "ms", Spread.of(times).scaled(1000), bytes=size))
    if supports(type(env), Capability.DIRECTORY_TRANSFER):
        for call, times in directory_samples(env, f"{scratch}/tree", plan.file_calls).items():
            figures.append(Figure(backend, f"{call} 100 x 1 KiB", ENVLAYER, "ms", Spread.of(times).scaled(1000)))
    return figures


def measure_agent_loop(backend: str, env: Environment, scratch: str, plan: Plan) -> list[Figure]:
    """``plan.agent_rounds`` rounds of an agent's edit (read a 20 KiB file, write it back
    changed, run a command: :mod:`envlayer.bench.file_calls`), per round; on Docker also
    the same loop through the ``docker`` CLI (``docker exec`` + ``docker cp``), the baseline."""
    measure = f"agent loop ({plan.agent_rounds} rounds), per round"
    samples = {ENVLAYER: envlayer_agent_loop(env, f"{scratch}/agent-loop.txt", plan.agent_rounds)}
    baseline = None
    cli = shutil.which("docker")
    if backend == "docker" and cli is not None:
        baseline = DOCKER_CLI_LOOP
        workdir = env.options.workdir  # type: ignore[attr-defined]
        path = posixpath.join(workdir, f".envlayer-bench-{uuid.uuid4().hex[:12]}.txt")
        container = env.container_id  # type: ignore[attr-defined]
        samples[baseline] = docker_cli_agent_loop(container, path, plan.agent_rounds, cli)
    return _figures(backend, measure, {method: Spread.of(times) for method, times in samples.items()}, baseline)


def measure_flood(target: BackendTarget, task_id: str, plan: Plan) -> list[Figure]:
    """A flood streamed and captured through envlayer, and the backend's floor when the
    bench knows one; each case in fresh child interpreters (``flood_children`` of them,
    the cases interleaved, each running ``flood_rounds_per_child`` floods)."""
    floor = FLOOD_FLOORS.get(target.name)
    cases = {"streamed": f"{ENVLAYER} streamed", "captured": f"{ENVLAYER} captured"}
    if floor is not None:
        cases["floor"] = floor[0]
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for _ in range(plan.flood_children):
        for case in cases:
            runs[case].append(run_flood(target, task_id, case, plan.flood_bytes, plan.flood_rounds_per_child))
    measure = f"flood {size_label(plan.flood_bytes)}"
    baseline = floor[0] if floor is not None else None
    return [
        Figure(
            target.name,
            measure,
            method,
            "s",
            Spread.of([seconds for r in runs[case] for seconds in r["seconds"]]),
            bytes=plan.flood_bytes,
            peak_rss_mib=max(r["peak_rss_mib"] for r in runs[case]),
            baseline=baseline if case != "floor" else None,
        )
        for case, method in cases.items()
    ]
