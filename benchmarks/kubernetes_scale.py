"""Kubernetes backend at scale, against the fake API server (pods are Docker containers),
with a baseline measured in the same run.

* envlayer: N tasks created and used (exec, write_file, read_file) from P processes through
  the real ``kubernetes`` client, pods left running (persist mode) with
  ``active_deadline = D``; then, once the deadline has ended them all, one
  ``reap_orphans(max_age=0)`` call; then the time until the API lists 0 pods.
* baseline: the same N containers made directly with docker-py from P threads
  (create + start + one ``exec_run``), then removed: the cost of the containers
  themselves, without the Kubernetes path (client, fake API server, exec websocket).

    .venv/bin/python benchmarks/kubernetes_scale.py [--tasks 100] [--processes 8] [--deadline 30]

Needs a running Docker daemon and the test image (``scripts/provision``). Exits 1 if any
pod is left.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envlayer.bench.interrupts import run_script
from envlayer.testing.fixtures import docker_problem, import_by_path

CONTROL = Path(__file__).resolve().parent.parent / "plugins" / "kubernetes" / "tests" / "fake_control.py"


def load_control() -> Any:
    """The tests' ``fake_control`` module (loaded by path: the tests are not a package).
    Exits with status 2 and a hint when Docker or the test image is missing."""
    module: Any = import_by_path(CONTROL, "envlayer_k8s_fake_control")
    problem = docker_problem(module.IMAGE)
    if problem:
        print(f"cannot run: {problem}; run scripts/provision", file=sys.stderr)
        sys.exit(2)
    return module


def docker_baseline(image: str, tasks: int, processes: int) -> tuple[float, float]:
    """(seconds to create + start + exec N containers, seconds to remove them)."""
    import docker

    api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
    label = f"envlayer-bench-k8s-baseline-{uuid.uuid4().hex[:8]}"

    def make(i: int) -> str:
        cid = api.create_container(image, command=["sleep", "3600"], labels={label: "1"}, name=f"{label}-{i}")["Id"]
        api.start(cid)
        eid = api.exec_create(cid, ["echo", str(i)])["Id"]
        api.exec_start(eid)
        return cid

    start = time.monotonic()
    with ThreadPoolExecutor(processes) as pool:
        ids = list(pool.map(make, range(tasks)))
    made = time.monotonic()
    with ThreadPoolExecutor(processes) as pool:
        list(pool.map(lambda cid: api.remove_container(cid, force=True), ids))
    return made - start, time.monotonic() - made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--deadline", type=int, default=30)
    args = parser.parse_args()
    control = load_control()
    with control.running_fake() as server:
        profile = f"k8s-bench-{uuid.uuid4().hex[:6]}"
        run = control.run_scale(server, profile, tasks=args.tasks, processes=args.processes, deadline=args.deadline)
    base_make, base_remove = docker_baseline(control.IMAGE, args.tasks, args.processes)
    print(f"{run.tasks} tasks from {run.processes} processes (fake API server, pods = Docker containers)")
    per_task = run.create_and_use / run.tasks * 1000
    ratio = run.create_and_use / base_make
    print(f"  create + use (exec, write, read) : {run.create_and_use:7.1f} s  ({per_task:.0f} ms per task)")
    print(f"  tasks whose pod's deadline came mid-task (documented error): {run.expired}")
    print(f"  baseline docker-py create+start+exec, {args.processes} threads: {base_make:7.1f} s -> ratio {ratio:.2f}x")
    print(f"  wait for activeDeadlineSeconds ({args.deadline} s) to end them: {run.until_ended:7.1f} s")
    print(f"  reap_orphans(max_age=0)          : {run.reap:7.1f} s  ({run.reaped} pods deleted)")
    print(f"  until the API lists none         : {run.until_gone:7.1f} s")
    print(f"  baseline docker-py remove, {args.processes} threads: {base_remove:7.1f} s")
    print(f"  pods left                        : {run.left}")
    return 0 if run.left == 0 and run.reaped == run.tasks else 1


if __name__ == "__main__":
    sys.exit(run_script(main))
