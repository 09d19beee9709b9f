"""Fit tool output into an LLM's context: keep the head and the tail, say what was cut."""

from __future__ import annotations

from envlayer.execution.output import HEAD_SHARE


def truncate_middle(text: str, budget: int, *, unit: str = "characters") -> tuple[str, int]:
    """Return ``(text, omitted)``: ``text`` itself when it fits in ``budget``, otherwise
    its first 40 % and last 60 % of ``budget`` around a marker stating how many
    ``unit`` were omitted out of how many. ``omitted`` is 0 when nothing was cut.

    Raises: ValueError for a negative ``budget``.
    """
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if len(text) <= budget:
        return text, 0
    head = int(budget * HEAD_SHARE)
    tail = budget - head
    omitted = len(text) - head - tail
    marker = (
        f"\n[... {omitted} {unit} omitted: the output had {len(text)}; "
        f"showing the first {head} and the last {tail} ...]\n"
    )
    return text[:head] + marker + (text[-tail:] if tail else ""), omitted
