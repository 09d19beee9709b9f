"""Modal backend exec latency against the local fake Modal server, baselines in the same run.

Starts the Docker-backed fake (plugins/modal/tests/fake_modal/server.py) on a free loopback
port, points the real modal SDK at it, and times warm execs of `true` (medians):

* envlayer session (one long-lived shell exec; a call is one stdin write and the reads
  of its output),
* envlayer one-shot (one `Sandbox.exec` per call, stdin closed, output collected),
* the SDK's own `sb.exec("true")` + `wait()` per call (the baseline a user of the raw SDK
  pays).

Figures against the fake measure the client and the gRPC round trips plus the fake's
`docker exec`, not Modal's network: only the ratios carry over. Target: session median
< 10 ms.

    .venv/bin/python benchmarks/modal_exec.py [--image envlayer-test:busybox] [--runs 100] [--sdk-runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Any

from bench_timing import median_ms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "plugins", "modal", "tests", "fake_modal"))

import modal_fake_launcher

from envlayer.bench.interrupts import run_script

PROFILE = f"envlayer-bench-{uuid.uuid4().hex[:8]}"
APP = f"envlayer-bench-{uuid.uuid4().hex[:6]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--sdk-runs", type=int, default=30)
    args = parser.parse_args()

    fake = modal_fake_launcher.start()
    os.environ.update(fake.env("ak-envlayer-bench"))
    from envlayer_modal.backend import ModalEnvironment
    from envlayer_modal.options import ModalOptions

    envs: list[Any] = []
    try:

        def make(mode: str) -> Any:
            opts = ModalOptions(image=args.image, app_name=APP, exec_mode=mode, timeout=60)
            env = ModalEnvironment(opts, task_id=f"bench-{mode}", profile=PROFILE)
            envs.append(env)
            return env

        session, oneshot = make("session"), make("oneshot")
        sandbox = session._attached.sandbox

        def sdk_exec() -> None:
            proc = sandbox.exec("true", text=False)
            proc.wait()

        results = {
            "envlayer session": median_ms(lambda: session.exec("true").check(), args.runs),
            "envlayer one-shot": median_ms(lambda: oneshot.exec("true").check(), args.sdk_runs),
            "SDK sb.exec + wait": median_ms(sdk_exec, args.sdk_runs),
        }
        base = results["SDK sb.exec + wait"]
        print(f"warm exec of `true` against the fake Modal server (medians; {args.runs} session runs)")
        for name, ms in results.items():
            print(f"  {name:<22} {ms:8.2f} ms   {base / ms:6.1f}x the SDK baseline")
        target = results["envlayer session"] < 10
        print(f"target: session < 10 ms: {'met' if target else 'NOT met'}")
        return 0
    finally:
        for env in envs:
            env.cleanup(force_remove=True)
        for env in envs:
            env.wait_for_cleanup(30)
        fake.stop()


if __name__ == "__main__":
    sys.exit(run_script(main))
