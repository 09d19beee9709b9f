"""The summary of interleaved timings (:mod:`envlayer.bench.timing`): pure, on made-up samples."""

from __future__ import annotations

from envlayer.bench.timing import Spread, interleaved_rounds


def test_the_median_of_rounds_is_the_median_of_the_round_medians_the_spread_is_pooled() -> None:
    rounds = [[1.0, 7.0, 7.0], [1.0, 7.0, 7.0], [2.0, 2.0, 2.0]]
    pooled = Spread.of([sample for samples in rounds for sample in samples])
    spread = Spread.of_rounds(rounds)
    assert (spread.median, pooled.median) == (7.0, 2.0)
    assert (spread.p10, spread.p90, spread.runs) == (pooled.p10, pooled.p90, 9)


def test_interleaved_rounds_time_each_variant_in_every_round_in_turn_the_order_reversed_every_other_round() -> None:
    order: list[str] = []
    variants = {name: (lambda name=name: order.append(name)) for name in ("a", "b")}
    times = interleaved_rounds(variants, calls=6, rounds=3, warmup=1)
    assert {name: [len(block) for block in blocks] for name, blocks in times.items()} == {"a": [2] * 3, "b": [2] * 3}
    assert order == ["a", "b", *["a", "a", "b", "b"], *["b", "b", "a", "a"], *["a", "a", "b", "b"]]
