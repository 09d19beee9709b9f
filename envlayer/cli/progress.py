"""A status line on stderr for work that may take a while (starting a sandbox, which can
mean pulling an image or creating many containers; reaping), shown only on a terminal.

``with progress("starting the docker sandbox of task t1"):`` prints nothing for the first
``delay`` seconds (most work is quick), then ``envlayer: <what> (3s)`` rewritten in place
every second, and erases the line when the work ends. When stderr is not a terminal it
prints nothing at all, so logs and pipes stay clean.

Given a :class:`Meter` (a total and a callable counting the bytes done so far), the line is
a bar instead: ``envlayer: <what> [#####-----]  48%  48.0/100.0 MB  21.3 MB/s``.
:func:`io_meter` counts what this process reads (``rchar`` of ``/proc/self/io``) or writes
(``wchar``) with ``read``/``write`` calls (files and pipes; a socket's ``recv``/``send`` are not
counted): ``envlayer cp`` counts the host files an upload reads and a download writes, which
follows a transfer made by any backend without asking it for progress.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

_MB = 1_000_000
_BAR_CELLS = 24


@dataclass(frozen=True)
class Meter:
    """``total`` units of work and ``done()``, the units done so far (it may overshoot:
    the bar stops at 99% until the work ends)."""

    total: int
    done: Callable[[], int]


def io_meter(total: int, *, written: bool) -> Meter | None:
    """A meter of the bytes this process reads (or, if ``written``, writes) from now on,
    out of ``total``; None where the kernel does not say (no ``/proc/self/io``) or
    ``total`` is 0."""
    line = 1 if written else 0  # /proc/self/io begins "rchar: N\nwchar: N\n"

    def so_far() -> int:
        with open("/proc/self/io", "rb") as fh:
            return int(fh.read().split(b"\n")[line].split()[1])

    try:
        start = so_far()
    except (OSError, ValueError, IndexError):
        return None
    return Meter(total, lambda: so_far() - start) if total > 0 else None


def _bar_line(what: str, meter: Meter, elapsed: float) -> str:
    """``<what> [###---]  48%  48.0/100.0 MB  21.3 MB/s`` for ``meter`` after ``elapsed`` s."""
    done = min(meter.done(), meter.total)
    share = min(done / meter.total, 0.99)
    filled = int(share * _BAR_CELLS)
    rate = done / elapsed / _MB if elapsed > 0 else 0.0
    return (
        f"{what} [{'#' * filled}{'-' * (_BAR_CELLS - filled)}] {share:4.0%}  "
        f"{done / _MB:.1f}/{meter.total / _MB:.1f} MB  {rate:.1f} MB/s"
    )


@contextmanager
def progress(
    what: str, *, stream: TextIO | None = None, delay: float = 1.0, meter: Meter | None = None
) -> Iterator[None]:
    """Show ``what`` with the elapsed seconds (or, with ``meter``, a bar) on ``stream``
    (default stderr) while the block runs, if ``stream`` is a terminal (see the module
    docstring)."""
    out = sys.stderr if stream is None else stream
    if not out.isatty():
        yield
        return
    done = threading.Event()
    shown = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        if done.wait(delay):
            return
        while True:
            elapsed = time.monotonic() - start
            line = _bar_line(what, meter, elapsed) if meter else f"{what} ({elapsed:.0f}s)"
            out.write(f"\r\033[Kenvlayer: {line}")
            out.flush()
            shown.set()
            if done.wait(0.5 if meter else 1.0):
                return

    ticker = threading.Thread(target=tick, name="envlayer-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        if shown.is_set():
            out.write("\r\033[K")
            out.flush()
