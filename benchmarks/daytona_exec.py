"""Daytona exec latency against the fake Daytona API (sandboxes are Docker containers), with
the SDK's own ``process.exec`` as the baseline measured in the same run.

* envlayer session exec: ``DaytonaEnvironment.exec`` in ``session`` mode (one Daytona session
  per environment; separate stdout/stderr, binary-safe, cd/export persist, timeouts that
  keep output).
* envlayer oneshot exec: the same in ``oneshot`` mode (a subshell per command).
* baseline: ``sandbox.process.exec("sh -c ...")`` per call through the real SDK (merged
  output, a 408 that loses output on timeout): the cheapest way the SDK runs a command.

Medians over ``--runs`` calls of ``true`` and of a 100 KB output, after a warm-up.

    .venv/bin/python benchmarks/daytona_exec.py [--runs 30]

Needs a running Docker daemon and the test image (``scripts/provision``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench_timing import median_ms

from envlayer.bench.interrupts import run_script
from envlayer.testing.fixtures import docker_problem, import_by_path

KIT = Path(__file__).resolve().parent.parent / "plugins" / "daytona" / "tests" / "daytona_testkit.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    kit: Any = import_by_path(KIT, "envlayer_daytona_testkit")
    problem = docker_problem(kit.IMAGE)
    if problem:
        print(f"cannot run: {problem}", file=sys.stderr)
        return 1
    os.environ["DAYTONA_API_KEY"] = kit.FAKE_KEY
    from envlayer_daytona.backend import DaytonaEnvironment
    from envlayer_daytona.options import DaytonaOptions

    with tempfile.TemporaryDirectory() as tmp:
        fake = kit.start_fake(Path(tmp))
        profile = f"envlayer-bench-{uuid.uuid4().hex[:6]}"
        envs: list[DaytonaEnvironment] = []
        try:
            rows = []
            for mode in ("session", "oneshot"):
                opts = DaytonaOptions(api_url=fake.url, snapshot=kit.IMAGE, cwd="/workspace", exec_mode=mode)
                env = DaytonaEnvironment(opts, task_id=f"bench-{mode}", profile=profile)
                envs.append(env)
                rows.append((f"envlayer {mode} exec", env))
            sandbox = envs[0]._sandbox
            big = "head -c 100000 /dev/zero"
            results = []
            for label, env in rows:
                results.append(
                    (
                        label,
                        median_ms(lambda e=env: e.exec("true"), args.runs),
                        median_ms(lambda e=env: e.exec(big), args.runs),
                    )
                )
            base_true = median_ms(lambda: sandbox.process.exec("sh -c true"), args.runs)
            base_big = median_ms(lambda: sandbox.process.exec(f"sh -c '{big}'"), args.runs)
            results.append(("baseline process.exec", base_true, base_big))
            print(f"{'':28} {'true (ms)':>10} {'100 KB (ms)':>12} {'ratio true':>11}")
            for label, t_true, t_big in results:
                print(f"{label:28} {t_true:10.1f} {t_big:12.1f} {t_true / base_true:10.2f}x")
            print(f"medians of {args.runs} calls each, after one warm-up call; ratio against the baseline")
        finally:
            for env in envs:
                env.cleanup(force_remove=True)
            DaytonaEnvironment.wait_for_all_cleanups(60)
            kit.stop_fake(fake)
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
