"""Bounded capture of a byte stream: what every backend uses to apply output caps.

A :class:`CappedBuffer` accepts any amount of input and keeps at most ``limit`` bytes,
according to a policy:

* ``head_tail`` (default): the first 40 % and the last 60 % of the budget, so the
  beginning of a log and its final error both survive;
* ``head``: the first ``limit`` bytes;
* ``tail``: the last ``limit`` bytes.

It always counts the total, so the result can say exactly how much was dropped.
"""

from __future__ import annotations

import functools
from collections import deque

from envlayer.request import OutputCallback
from envlayer.result import POLICIES, Truncation, TruncationPolicy

__all__ = [
    "HEAD_SHARE",
    "POLICIES",
    "CappedBuffer",
    "CappedBuffers",
    "OutputCallback",
    "Truncation",
    "TruncationPolicy",
]
"""``Truncation``, ``TruncationPolicy``, ``POLICIES`` (:mod:`envlayer.result`) and
``OutputCallback`` (:mod:`envlayer.request`) are the contract's; this old path still
exports them (for one release)."""

HEAD_SHARE = 0.4
"""Share of a ``head_tail`` budget kept from the beginning; the rest keeps the end."""


@functools.lru_cache(maxsize=64)
def _caps(limit: int | None, policy: TruncationPolicy) -> tuple[int | None, int]:
    """The bytes a buffer keeps from the head (``None``: all) and from the tail under
    ``limit`` and ``policy`` (computed once per pair: every command makes two buffers).
    Raises ``ValueError`` for an unknown policy or a negative limit."""
    if policy not in POLICIES:
        raise ValueError(f"unknown truncation policy {policy!r}; use one of {POLICIES}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if limit is None:
        return None, 0
    if policy == "head":
        return limit, 0
    if policy == "tail":
        return 0, limit
    head = int(limit * HEAD_SHARE)
    return head, limit - head


def _checked_caps(limit: int | None, policy: TruncationPolicy) -> tuple[int | None, int]:
    """:func:`_caps`, with ``ValueError`` also for an unhashable ``limit`` or ``policy``."""
    try:
        return _caps(limit, policy)
    except TypeError:  # unhashable: no policy or limit
        raise ValueError(f"bad output cap {limit!r} / policy {policy!r}") from None


class CappedBuffers(dict[str, "CappedBuffer"]):
    """One :class:`CappedBuffer` per stream name under the same ``limit`` and ``policy``,
    each made when first asked for (most commands write to one stream or none; use
    :meth:`taken` to read one without making it). Raises ``ValueError`` for a bad cap at
    once, as a buffer would."""

    __slots__ = ("limit", "policy")

    def __init__(self, limit: int | None, policy: TruncationPolicy) -> None:
        _checked_caps(limit, policy)
        self.limit, self.policy = limit, policy

    def __missing__(self, stream: str) -> CappedBuffer:
        buffer = self[stream] = CappedBuffer(self.limit, self.policy)
        return buffer

    def taken(self, stream: str) -> tuple[bytes, Truncation | None]:
        """:meth:`CappedBuffer.taken` of ``stream`` (``b""`` and ``None`` when it got nothing)."""
        buffer = self.get(stream)
        return (b"", None) if buffer is None else buffer.taken()


class CappedBuffer:
    """Accumulates a stream, keeping at most ``limit`` bytes under ``policy``.

    ``limit=None`` keeps everything. Memory use is bounded by ``limit`` plus one chunk.
    """

    __slots__ = ("_head", "_head_cap", "_tail", "_tail_cap", "_tail_len", "limit", "policy", "total")

    def __init__(self, limit: int | None, policy: TruncationPolicy = "head_tail") -> None:
        self._head_cap, self._tail_cap = _checked_caps(limit, policy)
        self.limit = limit
        self.policy = policy
        self.total = 0
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0

    def write(self, data: bytes) -> None:
        """Append ``data``; never raises for size."""
        if not data:
            return
        self.total += len(data)
        if self._head_cap is None:
            self._head += data
            return
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or self._tail_cap == 0:
            return
        self._tail.append(bytes(data))
        self._tail_len += len(data)
        while self._tail_len - len(self._tail[0]) >= self._tail_cap:
            self._tail_len -= len(self._tail.popleft())

    @property
    def truncation(self) -> Truncation | None:
        """``None`` when nothing was dropped."""
        if len(self._head) == self.total:  # all of it in the head: the common case
            return None
        kept = len(self._head) + min(self._tail_len, self._tail_cap)
        if kept >= self.total:
            return None
        return Truncation(
            policy=self.policy,
            total=self.total,
            dropped=self.total - kept,
            kept_head=len(self._head),
            kept_tail=min(self._tail_len, self._tail_cap),
        )

    def taken(self) -> tuple[bytes, Truncation | None]:
        """:meth:`getvalue` and :attr:`truncation` at once (what a result needs)."""
        if len(self._head) == self.total:
            return bytes(self._head), None
        return self.getvalue(), self.truncation

    def getvalue(self) -> bytes:
        """The kept bytes. When something was dropped and both ends are kept, the
        truncation marker stands between head and tail."""
        if not self._tail:
            return bytes(self._head)
        tail = b"".join(self._tail)
        if len(tail) > self._tail_cap:
            tail = tail[len(tail) - self._tail_cap :]
        trunc = self.truncation
        if trunc is None:
            return bytes(self._head) + tail
        if self.policy == "head_tail":
            return bytes(self._head) + trunc.marker() + tail
        return bytes(self._head) + tail
