"""A flood (``head -c SIZE /dev/zero``) read to its end in a fresh child interpreter, so
its peak memory is its own.

Cases: ``streamed`` (every chunk handed to a callback that discards it), ``captured``
(the default output caps: 1 MiB kept per stream), ``floor`` (the backend's raw
transport, :data:`envlayer.bench.baselines.FLOOD_FLOORS`). The child opens the sandbox
of the given task (which the parent created: it attaches) and leaves it to the parent.

The parent calls :func:`run_flood`; the child is ``python -m envlayer.bench.flood JSON``
and prints ``{"seconds": [...], "peak_rss_mib": ...}``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

from envlayer.bench.target import BackendTarget

CASES = ("streamed", "captured", "floor")


def flood_once(target: BackendTarget, task_id: str, case: str, size: int) -> float:
    """Seconds one flood of ``size`` bytes takes through ``case``, in this process
    (opening the sandbox is not timed)."""
    from envlayer import dispatch as lifecycle
    from envlayer.bench.baselines import FLOOD_FLOORS

    env = target.open(task_id)
    try:
        command = f"head -c {size} /dev/zero"
        start = time.perf_counter()
        if case == "floor":
            total = FLOOD_FLOORS[target.name][1](env, size)
        elif case == "streamed":
            received = [0]

            def count(stream: str, chunk: bytes) -> None:
                received[0] += len(chunk)

            lifecycle.run(env, command, on_output=count, timeout=3600)
            total = received[0]
        else:
            result = lifecycle.run(env, command, timeout=3600)
            total = result.stdout_truncation.total if result.stdout_truncation else len(result.stdout)
        seconds = time.perf_counter() - start
    finally:
        env.cleanup()
    if total < size:
        raise RuntimeError(f"the {case} flood read {total} of {size} bytes")
    return seconds


def run_flood(target: BackendTarget, task_id: str, case: str, size: int, rounds: int = 1) -> dict[str, Any]:
    """Run ``rounds`` floods of one case in a child interpreter: ``{"seconds": [...],
    "peak_rss_mib": ...}``. The child is killed if this process is interrupted
    (``subprocess.run``).

    Raises: RuntimeError with the child's stderr when it failed."""
    spec = json.dumps({"target": target.to_json(), "task_id": task_id, "case": case, "size": size, "rounds": rounds})
    proc = subprocess.run(
        [sys.executable, "-m", "envlayer.bench.flood", spec], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the {case} flood failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: ``VmHWM`` of /proc/self/status (its
    own address space; ``ru_maxrss`` also counts the parent's at the fork), else
    ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    """The child: run the flood ``argv[0]`` describes and print its figures."""
    spec: dict[str, Any] = json.loads(argv[0])
    target = BackendTarget.from_json(spec["target"])
    seconds = [flood_once(target, spec["task_id"], spec["case"], spec["size"]) for _ in range(spec["rounds"])]
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak_rss_mib()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
