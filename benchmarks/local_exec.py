"""Warm ``exec`` latency of the local backend: session mode against one-shot mode and
against a bare ``subprocess.run`` of ``sh -c true``, all in one run.

Each variant runs ``true`` back to back in blocks; the blocks of all variants alternate
over 5 rounds (so load changes hit every variant alike); medians in milliseconds, and
ratios against the bare subprocess baseline.

Run: ``uv run --no-sync python benchmarks/local_exec.py [--calls 300]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

from bench_timing import WARMUP, interleaved_medians

from envlayer.bench.interrupts import run_script
from envlayer.local.backend import LocalEnvironment, LocalOptions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="envlayer-bench-local-")
    session = LocalEnvironment(LocalOptions(cwd=workdir, exec_mode="session"))
    oneshot = LocalEnvironment(LocalOptions(cwd=workdir, exec_mode="oneshot"))
    try:
        results = interleaved_medians(
            {
                "subprocess sh -c true": lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True),
                "envlayer local session": lambda: session.exec("true"),
                "envlayer local one-shot": lambda: oneshot.exec("true"),
            },
            args.calls,
        )
    finally:
        session.cleanup()
        oneshot.cleanup()
    base = results["subprocess sh -c true"]
    print(f"warm exec of `true`, median of {args.calls} calls (5 alternating blocks) after {WARMUP} warm-up")
    for label, ms in results.items():
        print(f"  {label:<26} {ms:8.3f} ms   {ms / base:5.2f}x subprocess")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
