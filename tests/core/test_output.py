"""CappedBuffer: the output cap every backend uses."""

from __future__ import annotations

import pytest

from envlayer.execution.output import CappedBuffer


def feed(buf: CappedBuffer, data: bytes, chunk: int) -> None:
    for i in range(0, len(data), chunk):
        buf.write(data[i : i + chunk])


@pytest.mark.parametrize("chunk", [1, 7, 1000, 100_000])
def test_head_tail_keeps_both_ends_exactly(chunk: int) -> None:
    data = bytes(i % 251 for i in range(50_000))
    buf = CappedBuffer(1000, "head_tail")
    feed(buf, data, chunk)
    trunc = buf.truncation
    assert trunc is not None
    assert (trunc.total, trunc.kept_head, trunc.kept_tail, trunc.dropped) == (50_000, 400, 600, 49_000)
    value = buf.getvalue()
    assert value.startswith(data[:400])
    assert value.endswith(data[-600:])
    assert trunc.marker() in value


@pytest.mark.parametrize("policy", ["head", "tail"])
def test_single_ended_policies(policy: str) -> None:
    data = bytes(range(256)) * 10
    buf = CappedBuffer(100, policy)  # type: ignore[arg-type]
    feed(buf, data, 33)
    expected = data[:100] if policy == "head" else data[-100:]
    assert buf.getvalue() == expected
    assert buf.truncation is not None and buf.truncation.dropped == len(data) - 100


def test_under_cap_is_untouched_and_unmarked() -> None:
    buf = CappedBuffer(1000)
    feed(buf, b"\x00\xffabc" * 100, 9)
    assert buf.getvalue() == b"\x00\xffabc" * 100
    assert buf.truncation is None


def test_exactly_at_cap_is_not_truncated() -> None:
    buf = CappedBuffer(10)
    buf.write(b"0123456789")
    assert buf.truncation is None
    assert buf.getvalue() == b"0123456789"


def test_unlimited() -> None:
    buf = CappedBuffer(None)
    feed(buf, b"x" * 100_000, 4096)
    assert len(buf.getvalue()) == 100_000
    assert buf.truncation is None


def test_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown truncation policy"):
        CappedBuffer(10, "middle")  # type: ignore[arg-type]
