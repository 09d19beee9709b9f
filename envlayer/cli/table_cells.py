"""Table cells of ``envlayer ls`` / ``reap`` / ``snapshots ls``: when a sandbox was
created and its data last used (both as ``3d 4h ago``, the one time format of the
listings), and its size. Pure functions of the strings a backend reports (see
:class:`envlayer.environment.SandboxInfo`)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_SIZES = ("B", "KiB", "MiB", "GiB", "TiB")


def last_used_cell(value: str | None, now: float | None = None) -> str:
    """``detail["last_used"]`` (epoch seconds, ``in use``, or empty when unknown) as
    ``3d 4h ago`` / ``in use`` / ``?``; empty when the row has none."""
    if value is None:
        return ""
    if value == "in use":
        return value
    try:
        seconds = max(0.0, (time.time() if now is None else now) - float(value))
    except ValueError:
        return "?"
    if seconds < 1:
        return "just now"
    first = next(i for i, (_, size) in enumerate(_UNITS) if seconds >= size)
    unit, size = _UNITS[first]
    text = f"{int(seconds // size)}{unit}"
    if first + 1 < len(_UNITS):
        next_unit, next_size = _UNITS[first + 1]
        rest = int(seconds % size // next_size)
        text += f" {rest}{next_unit}" if rest else ""
    return f"{text} ago"


_EXCESS_FRACTION = re.compile(r"(\.\d{6})\d+")
"""Digits past microseconds (Docker and Kubernetes report nanoseconds), which
:meth:`datetime.fromisoformat` does not take."""


def epoch_of(value: str) -> float | None:
    """A time as a backend reports it (epoch seconds, or ISO 8601 with or without a zone,
    ``Z`` included; no zone means UTC) in epoch seconds; None when it is not one."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(_EXCESS_FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def ago_cell(value: str, now: float | None = None) -> str:
    """A CREATED cell: ``value`` (see :func:`epoch_of`) as ``2h 5m ago``; the text as it is
    when it is no time, empty when empty."""
    if not value:
        return ""
    moment = epoch_of(value)
    return value if moment is None else last_used_cell(str(moment), now)


def size_cell(value: str | None) -> str:
    """``detail["size_bytes"]`` (a byte count, or empty when the backend cannot tell) as
    ``12.3 MiB`` / ``?``; empty when the row has none."""
    if value is None:
        return ""
    try:
        size = float(int(value))
    except ValueError:
        return "?"
    for unit in _SIZES:
        if size < 1024 or unit == _SIZES[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "?"
