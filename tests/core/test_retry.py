"""The control-plane retry loop (envlayer.sandbox.retry): bounded, honours Retry-After, raises
non-transient errors at once and the last transient one unchanged."""

from __future__ import annotations

import email.utils
import time

import pytest

from envlayer.sandbox.retry import (
    RetryPolicy,
    Transient,
    backoff_delay,
    call_with_retries,
    parse_retry_after,
    retry_after_from_headers,
)


class Throttled(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("429")
        self.retry_after = retry_after


def classify(exc: BaseException) -> Transient | None:
    if isinstance(exc, Throttled):
        return Transient("429 Too Many Requests", exc.retry_after)
    return None


def flaky(failures: list[BaseException], value: str = "ok"):
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return value

    return fn, calls


def test_throttled_twice_then_served() -> None:
    waits: list[float] = []
    fn, calls = flaky([Throttled(1.5), Throttled()])
    assert call_with_retries(fn, classify, doing="listing", sleep=waits.append) == "ok"
    assert len(calls) == 3
    assert waits[0] == 1.5  # the server's Retry-After, as given
    assert 0 < waits[1] <= RetryPolicy().base_delay * 2


def test_other_errors_are_raised_at_once() -> None:
    waits: list[float] = []
    fn, calls = flaky([KeyError("nope")])
    with pytest.raises(KeyError):
        call_with_retries(fn, classify, doing="reading", sleep=waits.append)
    assert calls == [1] and waits == []


def test_attempts_are_bounded_and_the_last_error_is_raised_unchanged() -> None:
    last = Throttled()
    fn, calls = flaky([Throttled(), Throttled(), last, Throttled()])
    with pytest.raises(Throttled) as info:
        call_with_retries(fn, classify, doing="x", policy=RetryPolicy(attempts=3), sleep=lambda s: None)
    assert info.value is last and len(calls) == 3


def test_the_waiting_budget_stops_retries_before_a_long_retry_after() -> None:
    waits: list[float] = []
    fn, calls = flaky([Throttled(5.0), Throttled(5.0)])
    with pytest.raises(Throttled):
        call_with_retries(fn, classify, doing="x", policy=RetryPolicy(budget=6.0), sleep=waits.append)
    assert waits == [5.0] and len(calls) == 2


def test_retry_after_is_capped_by_max_delay() -> None:
    assert backoff_delay(1, RetryPolicy(max_delay=3.0), 120.0) == 3.0


def test_backoff_grows_and_stays_under_its_cap() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delay = backoff_delay(attempt, policy, None)
        assert ceiling / 2 <= delay <= ceiling


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), (" 0.5 ", 0.5), ("-4", 0.0), ("", None), (None, None), ("soon", None)],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    now = time.time()
    stamp = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= (parse_retry_after(stamp, now=now) or 0) <= 31
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0


def test_header_lookup_is_case_insensitive() -> None:
    assert retry_after_from_headers({"retry-after": "2"}) == 2.0
    assert retry_after_from_headers({"Retry-After": "7"}) == 7.0
    assert retry_after_from_headers({"Content-Type": "x"}) is None
    assert retry_after_from_headers(None) is None
