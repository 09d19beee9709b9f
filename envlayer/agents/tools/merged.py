"""The terminal tool's view of a command's output: both streams in arrival order.

A :class:`MergedOutput` is an ``on_output`` callback: it keeps the chunks of stdout and
stderr in the order the backend delivered them (as a terminal shows ``cmd 2>&1``),
bounded in memory by a :class:`~envlayer.execution.output.CappedBuffer` (head and tail kept).
"""

from __future__ import annotations

from envlayer.execution.output import CappedBuffer, Truncation

BYTES_PER_CHAR = 4
"""Bytes kept per character of the tool's text budget (UTF-8 is at most 4 per character)."""


class MergedOutput:
    """Collects ``(stream, chunk)`` callbacks into one byte stream, in arrival order.

    Keeps at most ``budget_chars * BYTES_PER_CHAR`` bytes (first 40 %, last 60 %) for the
    result text and, with ``spill_bytes``, up to that many for :meth:`full` (the spill
    file), so a flood never grows memory beyond both. Safe to call from the backend's reading thread only
    (backends call ``on_output`` from the calling thread).
    """

    def __init__(self, budget_chars: int, spill_bytes: int = 0) -> None:
        self._buffer = CappedBuffer(max(budget_chars, 1) * BYTES_PER_CHAR, "head_tail")
        self._full = CappedBuffer(spill_bytes, "head_tail") if spill_bytes else None

    def __call__(self, stream: str, chunk: bytes) -> None:
        self._buffer.write(chunk)
        if self._full is not None:
            self._full.write(chunk)

    @property
    def total(self) -> int:
        """Bytes received in all."""
        return self._buffer.total

    def full(self) -> bytes:
        """Everything received, up to ``spill_bytes`` (beyond: head and tail around a
        marker); empty without ``spill_bytes``."""
        return b"" if self._full is None else self._full.getvalue()

    @property
    def text(self) -> str:
        """The kept bytes decoded as UTF-8 (bad bytes become U+FFFD), with a marker
        where the middle was dropped."""
        return self._buffer.getvalue().decode("utf-8", errors="replace")

    @property
    def truncation(self) -> Truncation | None:
        """What the memory bound dropped; None when nothing was."""
        return self._buffer.truncation
