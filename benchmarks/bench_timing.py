"""Timing shared by the benchmarks that compare warm calls of several variants."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

WARMUP = 10
"""Calls of each variant before any is timed (connections, caches, the session shell)."""


def interleaved_medians(variants: dict[str, Callable[[], object]], calls: int, rounds: int = 5) -> dict[str, float]:
    """Median milliseconds per variant after :data:`WARMUP` untimed calls of each.

    Each variant runs back to back in blocks of ``calls // rounds`` (as an agent's calls
    would), and the blocks of all variants alternate over ``rounds`` rounds, so a change
    in machine load during the run affects every variant alike."""
    for run in variants.values():
        for _ in range(WARMUP):
            run()
    times: dict[str, list[float]] = {label: [] for label in variants}
    block = max(1, calls // rounds)
    for _ in range(rounds):
        for label, run in variants.items():
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - start)
    return {label: statistics.median(samples) * 1000 for label, samples in times.items()}
