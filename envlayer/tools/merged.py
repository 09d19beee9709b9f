"""The terminal tool's view of a command's output: both streams in arrival order.

A :class:`MergedOutput` is an ``on_output`` callback: it keeps the chunks of stdout and
stderr in the order the backend delivered them (as a terminal shows ``cmd 2>&1``),
bounded in memory by a :class:`~envlayer.output.CappedBuffer` (head and tail kept).
"""

from __future__ import annotations

from envlayer.output import CappedBuffer, Truncation

BYTES_PER_CHAR = 4
"""Bytes kept per character of the tool's text budget (UTF-8 is at most 4 per character)."""


class MergedOutput:
    """Collects ``(stream, chunk)`` callbacks into one byte stream, in arrival order.

    Keeps at most ``budget_chars * BYTES_PER_CHAR`` bytes (first 40 %, last 60 %), so a
    flood never grows memory. Safe to call from the backend's reading thread only
    (backends call ``on_output`` from the calling thread).
    """

    def __init__(self, budget_chars: int) -> None:
        self._buffer = CappedBuffer(max(budget_chars, 1) * BYTES_PER_CHAR, "head_tail")

    def __call__(self, stream: str, chunk: bytes) -> None:
        self._buffer.write(chunk)

    @property
    def text(self) -> str:
        """The kept bytes decoded as UTF-8 (bad bytes become U+FFFD), with a marker
        where the middle was dropped."""
        return self._buffer.getvalue().decode("utf-8", errors="replace")

    @property
    def truncation(self) -> Truncation | None:
        """What the memory bound dropped; None when nothing was."""
        return self._buffer.truncation
