"""Timing shared by the benchmarks that compare warm calls of several variants: the same
helpers ``envlayer bench`` uses (:mod:`envlayer.bench.timing`)."""

from envlayer.bench.timing import WARMUP, interleaved_medians, median_ms

__all__ = ["WARMUP", "interleaved_medians", "median_ms"]
