"""Docker: what a background job left by a session costs the next calls, against the same
calls with no job left, in the same run.

For each kind of job (none: the baseline; one writing to the session's stdout, `sleep 300 &`;
one redirected to /dev/null), an environment starts it in its session shell and is
cleaned up in persist mode; a new environment of the same task then runs, right away,
one call that needs a helper exec (100 KB of stdin, staged by a second exec) and one
call that times out after 0.5 s (its kill runs in a helper exec). Prints the median of
``--runs`` repetitions of each. Each repetition uses a fresh task; all containers and
workspace volumes are removed at the end.

    .venv/bin/python benchmarks/docker_background_job.py [--image envlayer-test:busybox] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from envlayer.bench.interrupts import run_script

JOBS = {
    "no job (baseline)": "true",
    "`sleep 300 &`": "sleep 300 &",
    "`sleep 300 >/dev/null 2>&1 &`": "sleep 300 >/dev/null 2>&1 &",
}


CALLS = {
    "100 KB stdin": lambda env: env.exec("wc -c", stdin=b"x" * 100_000).check(),
    "timeout=0.5 s": lambda env: env.exec("sleep 30", timeout=0.5),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import docker
    from envlayer_docker import workspace
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    options = DockerOptions(image=args.image, timeout=60)
    profile = f"envlayer-bench-{uuid.uuid4().hex[:8]}"
    made: list[DockerEnvironment] = []
    figures: dict[str, dict[str, list[float]]] = {job: {call: [] for call in CALLS} for job in JOBS}
    try:
        for _ in range(args.runs):
            for label, job in JOBS.items():
                for call, run in CALLS.items():
                    task = f"bg-{uuid.uuid4().hex[:8]}"
                    first = DockerEnvironment(options, task_id=task, profile=profile)
                    made.append(first)
                    first.exec(job).check()
                    first.cleanup()
                    again = DockerEnvironment(options, task_id=task, profile=profile)
                    made.append(again)
                    start = time.perf_counter()
                    run(again)
                    figures[label][call].append(time.perf_counter() - start)
                    again.cleanup()
    finally:
        for env in made:
            env.cleanup(force_remove=True)
        for env in made:
            env.wait_for_cleanup(30)
        for task in {env.task_id for env in made}:
            workspace.remove(api, options, profile=profile, task=task)
    width = max(len(label) for label in JOBS)
    print(f"median of {args.runs} runs; the next call right after a persist cleanup that left the job")
    print(f"{'job left':<{width}}" + "".join(f"  {call:>14}" for call in CALLS))
    for label, calls in figures.items():
        print(f"{label:<{width}}" + "".join(f"  {statistics.median(calls[c]):12.2f} s" for c in CALLS))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
