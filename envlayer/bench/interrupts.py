"""Stopping a measurement cleanly: SIGTERM and SIGHUP raise :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so the same ``finally`` blocks that a Ctrl-C runs
remove what a run created; a cleanup in progress runs with the signals ignored.

``envlayer bench`` uses :func:`signals_raise` and :func:`signals_ignored` around its run;
the scripts in ``benchmarks/`` end with ``sys.exit(run_script(main))``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a run like Ctrl-C does (a ``kill``, a closed terminal)."""

INTERRUPTED_EXIT_CODE = 130
TERMINATED_EXIT_CODE = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C's KeyboardInterrupt so the same cleanup runs."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def signals_raise() -> Iterator[None]:
    """:data:`STOP_SIGNALS` raise :class:`Terminated` in the main thread while the block runs."""
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT and :data:`STOP_SIGNALS` are ignored while the block runs (a cleanup in
    progress finishes even when Ctrl-C is pressed again)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_code_of(stop: KeyboardInterrupt) -> int:
    """143 for :class:`Terminated`, 130 for Ctrl-C (128 + the signal, as a shell reports it)."""
    return TERMINATED_EXIT_CODE if isinstance(stop, Terminated) else INTERRUPTED_EXIT_CODE


def run_script(main: Callable[[], int | None]) -> int:
    """Run a benchmark script's ``main`` with :func:`signals_raise`; its exit code, or
    130/143 after a Ctrl-C/SIGTERM/SIGHUP once its ``finally`` blocks have cleaned up."""
    try:
        with signals_raise():
            return main() or 0
    except KeyboardInterrupt as stop:
        word = "terminated" if isinstance(stop, Terminated) else "interrupted"
        print(f"{word}; what the run created was removed", file=sys.stderr)
        return exit_code_of(stop)
