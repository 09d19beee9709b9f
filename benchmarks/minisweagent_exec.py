"""mini-swe-agent per-call latency: the envlayer environment against mini-swe-agent's own
DockerEnvironment (``docker exec`` through the CLI per call), in the same run, same image.

Cases (median milliseconds of ``execute({"command": ...})``, one environment per case,
every container removed at the end):

* ``true`` and a small script with output on both streams (``ls /; echo x >&2``);
* each through mini-swe-agent's default interpreter ``bash -lc`` (a login shell: its
  startup dominates a short command), and through ``sh -c``, on both sides.

envlayer runs on Docker in its default session mode (one persistent shell per
container; each call still starts a fresh ``bash -lc``) and in one-shot mode (one
Docker exec per call, like mini-swe-agent's). Target: with ``sh -c`` the session mode is
>= 10x faster per call than mini-swe-agent's DockerEnvironment.

    .venv/bin/python benchmarks/minisweagent_exec.py [--image envlayer-test:debian] [--runs 100]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import uuid
from typing import Any

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="envlayer-bench-mswea-"))

from bench_timing import median_ms

from envlayer.bench.interrupts import run_script

PROFILE = f"envlayer-bench-mswea-{uuid.uuid4().hex[:8]}"
COMMANDS = {"true": "true", "ls + stderr": "ls /; echo x >&2"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:debian")
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    logging.getLogger("minisweagent").setLevel(logging.WARNING)

    from minisweagent.environments.docker import DockerEnvironment as MiniDocker

    from envlayer.integrations.minisweagent import EnvlayerEnvironment

    envs: dict[str, Any] = {}
    results: dict[tuple[str, str], float] = {}
    baseline = "mini-swe-agent DockerEnvironment"
    try:
        for interpreter in (["bash", "-lc"], ["sh", "-c"]):
            shell = " ".join(interpreter)
            envs[baseline] = MiniDocker(image=args.image, cwd="/tmp", interpreter=interpreter)
            for mode in ("session", "oneshot"):
                envs[f"envlayer docker ({mode})"] = EnvlayerEnvironment(
                    backend="docker",
                    profile=PROFILE,
                    cwd="/tmp",
                    interpreter=interpreter,
                    options={"image": args.image, "exec_mode": mode},
                )
            for label, command in COMMANDS.items():
                for name, env in envs.items():
                    runs = args.runs if name != baseline else max(args.runs // 3, 10)
                    assert env.execute({"command": command})["returncode"] == 0, (name, command)
                    timed = median_ms(lambda env=env, c=command: env.execute({"command": c}), runs)
                    results[name, f"{shell}: {label}"] = timed
            for env in envs.values():
                env.cleanup()
            envs.clear()
    finally:
        for env in envs.values():
            env.cleanup()
    print(f"{'case':<34} {'command':<24} {'median ms':>10} {'vs mini docker':>15}")
    for (name, label), ms in results.items():
        print(f"{name:<34} {label:<24} {ms:>10.2f} {results[baseline, label] / ms:>14.1f}x")
    labels = [label for (name, label) in results if name == baseline and label.startswith("sh -c")]
    session = min(results[baseline, lbl] / results["envlayer docker (session)", lbl] for lbl in labels)
    print(f"\nsh -c: envlayer session vs mini-swe-agent docker: {session:.1f}x faster (target >= 10x)")
    return 0 if session >= 10 else 1


if __name__ == "__main__":
    sys.exit(run_script(main))
