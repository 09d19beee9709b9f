"""Startup cost of envlayer, against `python -c pass` measured in the same run.

Each case runs in a fresh interpreter N times; the script prints the median wall time,
the cost over the baseline, and which SDK modules each case imported (must be none
for `import envlayer` and listing backends).

    .venv/bin/python benchmarks/import_cost.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SDKS = ("docker", "paramiko", "modal", "daytona", "requests", "grpclib", "stevedore")
CASES = {
    "python -c pass (baseline)": "pass",
    "import envlayer": "import envlayer",
    "import envlayer + list_backends()": (
        "import envlayer\nfrom envlayer.discovery.backend_registry import list_backends\nlist_backends()"
    ),
    "load_backend('local') + exec('true')": (
        "from envlayer.discovery.backend_registry import load_backend\nload_backend('local')().exec('true')"
    ),
}
REPORT = "\nimport sys\nprint(','.join(m for m in {sdks!r} if m in sys.modules))"


def time_case(code: str, runs: int) -> tuple[float, str]:
    samples = []
    imported = ""
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code + REPORT.format(sdks=SDKS)], capture_output=True, text=True, check=True
        )
        samples.append(time.perf_counter() - start)
        imported = out.stdout.strip()
    return statistics.median(samples), imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    from envlayer.discovery.backend_registry import list_backends

    print(f"installed backends: {', '.join(b.name for b in list_backends())}")
    print(f"{'case':<40} {'median':>9} {'over baseline':>14}  SDK modules imported")
    baseline = None
    for name, code in CASES.items():
        median, imported = time_case(code, args.runs)
        baseline = median if baseline is None else baseline
        over = f"+{(median - baseline) * 1000:.1f} ms"
        print(f"{name:<40} {median * 1000:>7.1f} ms {over:>14}  {imported or 'none'}")


if __name__ == "__main__":
    main()
