"""Repeated timings, and their median with the spread (p10 and p90).

Timings of fast calls interleaved in rounds (:func:`interleaved_rounds`) are summarised by
:meth:`Spread.of_rounds`: the median of the per-round medians. A burst of other load on
the machine then moves one round's median of every variant alike, and the figure (and the
ratio of two figures) only by that round's share, where the median of all samples pooled
moves with every slow call of every round."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

WARMUP = 10
"""Calls of each variant before any is timed (connections, caches, the session shell)."""


@dataclass(frozen=True)
class Spread:
    """The median of repeated samples with their 10th and 90th percentiles."""

    median: float
    p10: float
    p90: float
    runs: int

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        """The spread of ``samples`` (at least one). With fewer than two samples, the
        percentiles equal the median."""
        if not samples:
            raise ValueError("no samples to summarise")
        if len(samples) < 2:
            return cls(samples[0], samples[0], samples[0], 1)
        deciles = statistics.quantiles(samples, n=10, method="inclusive")
        return cls(statistics.median(samples), deciles[0], deciles[-1], len(samples))

    @classmethod
    def of_rounds(cls, rounds: list[list[float]]) -> Spread:
        """The spread of samples taken in rounds (at least one non-empty): the median is
        the median of the per-round medians; p10, p90 and ``runs`` are those of all samples."""
        pooled = cls.of([sample for samples in rounds for sample in samples])
        median = statistics.median(statistics.median(samples) for samples in rounds if samples)
        return cls(median, pooled.p10, pooled.p90, pooled.runs)

    def scaled(self, factor: float) -> Spread:
        """The same spread with every value multiplied by ``factor`` (a unit change)."""
        return Spread(self.median * factor, self.p10 * factor, self.p90 * factor, self.runs)


def seconds_of(run: Callable[[], object]) -> float:
    """Wall seconds one call of ``run`` takes."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def median_ms(run: Callable[[], object], runs: int, warmup: int = 3) -> float:
    """Median milliseconds of ``runs`` timed calls of ``run``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    return statistics.median(seconds_of(run) for _ in range(runs)) * 1000


def interleaved_rounds(
    variants: dict[str, Callable[[], object]], calls: int, rounds: int = 5, warmup: int = WARMUP
) -> dict[str, list[list[float]]]:
    """Seconds of each timed call per variant and round, after ``warmup`` untimed calls of each.

    Each variant runs back to back in blocks of ``calls // rounds`` (as an agent's calls
    would), and the blocks of all variants alternate over ``rounds`` rounds, in the
    given order and then in reverse (so no variant always follows the same one), so a
    change in machine load during the run affects every variant alike."""
    for run in variants.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[list[float]]] = {label: [] for label in variants}
    block = max(1, calls // rounds)
    order = list(variants.items())
    for index in range(rounds):
        for label, run in order if index % 2 == 0 else reversed(order):
            times[label].append([seconds_of(run) for _ in range(block)])
    return times


def interleaved_samples(
    variants: dict[str, Callable[[], object]], calls: int, rounds: int = 5, warmup: int = WARMUP
) -> dict[str, list[float]]:
    """The samples of :func:`interleaved_rounds`, the rounds of each variant joined."""
    per_round = interleaved_rounds(variants, calls, rounds, warmup)
    return {label: [sample for samples in blocks for sample in samples] for label, blocks in per_round.items()}


def interleaved_medians(variants: dict[str, Callable[[], object]], calls: int, rounds: int = 5) -> dict[str, float]:
    """Median milliseconds per variant of :func:`interleaved_samples`."""
    samples = interleaved_samples(variants, calls, rounds)
    return {label: statistics.median(times) * 1000 for label, times in samples.items()}
