"""Kubernetes backend, many threads in one process, against the fake API server: T threads
each run N one-shot execs in one shared environment while L threads each create and
force-remove M private environments. Counts the errors (every one is a failure: a REST
call of one thread must never be disturbed by another thread's exec handshake) and the
REST requests that reached the server as websocket upgrades.

    .venv/bin/python benchmarks/kubernetes_threads.py [--threads 8] [--execs 25] [--lifecycle-threads 3]
        [--lifecycles 4]

Needs a running Docker daemon and the test image (``scripts/provision``). Exits 1 on any
error. The smaller version runs in the test suite
(``plugins/kubernetes/tests/test_scale.py``).
"""

from __future__ import annotations

import argparse
import sys
import uuid

from kubernetes_scale import load_control

from envlayer.bench.interrupts import run_script


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--execs", type=int, default=25)
    parser.add_argument("--lifecycle-threads", type=int, default=3)
    parser.add_argument("--lifecycles", type=int, default=4)
    args = parser.parse_args()
    control = load_control()
    with control.running_fake() as server:
        storm = control.run_thread_storm(
            server,
            f"k8s-bench-{uuid.uuid4().hex[:6]}",
            exec_threads=args.threads,
            execs_per_thread=args.execs,
            lifecycle_threads=args.lifecycle_threads,
            lifecycles_per_thread=args.lifecycles,
        )
        upgrades = [r for r in server.routes() if r.get("upgrade") and not r["route"].endswith("/exec")]
    print(
        f"{args.threads} threads x {args.execs} one-shot execs, {args.lifecycle_threads} threads x "
        f"{args.lifecycles} create+remove, one process (fake API server, pods = Docker containers)"
    )
    print(f"  execs ok           : {storm.execs} of {args.threads * args.execs}")
    print(f"  lifecycles ok      : {storm.lifecycles} of {args.lifecycle_threads * args.lifecycles}")
    print(f"  errors             : {len(storm.errors)}")
    for line in storm.errors[:5]:
        print(f"    {line[:200]}")
    print(f"  REST requests sent as websocket upgrades: {len(upgrades)}")
    print(f"  wall time          : {storm.seconds:.1f} s")
    return 1 if storm.errors else 0


if __name__ == "__main__":
    sys.exit(run_script(main))
