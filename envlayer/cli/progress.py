"""A status line on stderr for work that may take a while (starting a sandbox, which can
mean pulling an image or creating many containers; reaping), shown only on a terminal.

``with progress("starting the docker sandbox of task t1"):`` prints nothing for the first
``delay`` seconds (most work is quick), then ``envlayer: <what> (3s)`` rewritten in place
every second, and erases the line when the work ends. When stderr is not a terminal it
prints nothing at all, so logs and pipes stay clean.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


@contextmanager
def progress(what: str, *, stream: TextIO | None = None, delay: float = 1.0) -> Iterator[None]:
    """Show ``what`` with the elapsed seconds on ``stream`` (default stderr) while the
    block runs, if ``stream`` is a terminal (see the module docstring)."""
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
            out.write(f"\r\033[Kenvlayer: {what} ({time.monotonic() - start:.0f}s)")
            out.flush()
            shown.set()
            if done.wait(1.0):
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
