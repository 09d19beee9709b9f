"""Warm session exec before and after, in the same run: medians of ``run(env, "true")``
per backend, through an older envlayer ("before") and this checkout ("after"), and on the
local backend the bench's same-job floor (:func:`envlayer.bench.baselines.same_job_call`)
beside them, and this checkout's session protocol driven by a client as minimal as the
floor's ("protocol, bare": :func:`envlayer.bench.baselines.protocol_call`), which splits the gap to the floor into
the shell's share and the Python client's.

Each version runs in a child interpreter of its own holding one environment per backend
(:class:`file_calls.Child`); the driver asks the children (and the floor) for blocks of
calls in turn, so a change in machine load hits all alike. With ``--pin`` (the default) the
driver, and so every process it starts (children, their local shells, the floor's shell),
runs on one CPU, as ``envlayer bench`` measures the local backend (see its docs).

    .venv/bin/python benchmarks/session_exec.py [--before DIR | --before-commit 72414a6]
        [--backend local --backend docker] [--calls 3000] [--blocks 30] [--no-pin]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from file_calls import CHILD_ENV, ROOT, Child, backend_options, before_after_parser, clone, start_services

from envlayer.bench.baselines import PipedShell, protocol_call, same_job_call
from envlayer.bench.interrupts import run_script
from envlayer.bench.machine import pinnable_cpu

CHILD = (
    CHILD_ENV
    + r"""
import time
import envlayer
run = getattr(envlayer, "run", None) or (lambda env, command: env.exec(command))
try:
    for _ in range(50):
        run(env, "true")
    print(json.dumps({}), flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(json.loads(line)["calls"]):
            start = time.perf_counter()
            result = run(env, "true")
            times.append(time.perf_counter() - start)
            if result.exit_code != 0:
                raise SystemExit(f"wrong result: {result}")
        print(json.dumps({"times": times}), flush=True)
finally:
    removed(env)
"""
)


def timed(call: Callable[[], object], calls: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``call``."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = before_after_parser(__doc__, before_commit="72414a6", calls=3000)
    parser.add_argument("--blocks", type=int, default=30, help="the calls come in this many alternating blocks")
    parser.add_argument("--no-pin", action="store_true", help="let the processes run on any CPU")
    args = parser.parse_args()
    backends = args.backend or ["local"]
    cpu = None if args.no_pin else pinnable_cpu()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    print(f"pinned to CPU {cpu}" if cpu is not None else "not pinned", flush=True)
    profile = f"bench-exec-{uuid.uuid4().hex[:6]}"
    per_block = max(1, args.calls // args.blocks)
    print(f"{'backend':<11} {'variant':<16} {'median us':>10}  vs before  vs floor", flush=True)
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="envlayer-bench-exec-"))
        before = Path(args.before) if args.before else clone(args.before_commit, tmp)
        services = start_services(backends, stack, tmp)
        for backend in backends:
            variants: dict[str, Callable[[], list[float]]] = {}
            children: list[Child] = []
            try:
                for label, root in (("before", before), ("after", ROOT)):
                    workdir = os.path.join(tmp, f"{backend}-{label}")
                    os.makedirs(workdir, exist_ok=True)
                    opts = backend_options(backend, args.image, services, workdir)
                    child = Child(root, backend, opts, profile, label, program=CHILD)
                    children.append(child)
                    variants[label] = lambda child=child: child.ask(calls=per_block)["times"]
                if backend == "local":
                    shell = PipedShell(stderr=True)
                    stack.callback(shell.close)
                    floor = same_job_call(shell.send, shell.recv_tagged, os.path.join(tmp, "local-after"))
                    variants["same job, bare"] = lambda floor=floor: timed(floor, per_block)
                    own = PipedShell(stderr=True)
                    stack.callback(own.close)
                    protocol = protocol_call(own.send, own.recv_tagged, os.path.join(tmp, "local-after"))
                    variants["protocol, bare"] = lambda protocol=protocol: timed(protocol, per_block)
                samples: dict[str, list[float]] = {label: [] for label in variants}
                for _ in range(args.blocks):
                    for label, measure in variants.items():
                        samples[label] += measure()
            finally:
                for child in children:
                    child.close()
            medians = {label: statistics.median(times) * 1e6 for label, times in samples.items()}
            floor_us = medians.get("same job, bare")
            for label, us in medians.items():
                vs_before = f"{us / medians['before']:.2f}x" if label == "after" else ""
                vs_floor = f"{us / floor_us:.2f}x" if floor_us and label != "same job, bare" else ""
                print(f"{backend:<11} {label:<16} {us:10.1f}  {vs_before:>9}  {vs_floor:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
