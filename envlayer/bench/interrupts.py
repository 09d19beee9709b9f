"""Stopping a measurement cleanly: SIGTERM and SIGHUP raise :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so the same ``finally`` blocks that a Ctrl-C runs
remove what a run created; a cleanup in progress runs with the signals ignored.

``envlayer bench`` uses :func:`signals_raise` and :func:`signals_ignored` around its run;
the scripts in ``benchmarks/`` end with ``sys.exit(run_script(main))``, which also turns the
death of the script's parent (a runner killed at its timeout) into SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a run like Ctrl-C does (a ``kill``, a closed terminal)."""

PARENT_CHECK_INTERVAL = 1.0
"""Seconds between checks that a script's parent process is still alive."""

INTERRUPTED_EXIT_CODE = 130
TERMINATED_EXIT_CODE = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C's KeyboardInterrupt so the same cleanup runs."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def _handling(signals: Iterable[int], handler: Callable[[int, object], None] | int) -> Iterator[None]:
    """``handler`` for each of ``signals`` while the block runs; the previous ones after."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def signals_raise() -> AbstractContextManager[None]:
    """:data:`STOP_SIGNALS` raise :class:`Terminated` in the main thread while the block runs,
    except a SIGHUP this process was started ignoring (``nohup``: it is meant to outlive its
    terminal)."""
    return _handling([sig for sig in STOP_SIGNALS if not _detached(sig)], _raise_terminated)


def signals_ignored() -> AbstractContextManager[None]:
    """SIGINT and :data:`STOP_SIGNALS` are ignored while the block runs (a cleanup in
    progress finishes even when Ctrl-C is pressed again)."""
    return _handling((signal.SIGINT, *STOP_SIGNALS), signal.SIG_IGN)


@contextmanager
def terminated_with_parent() -> Iterator[None]:
    """While the block runs, this process gets SIGTERM once its parent has died (seen within
    :data:`PARENT_CHECK_INTERVAL`): a runner killed by SIGKILL passes no signal on, and its
    orphaned child would otherwise run on and never clean up. Sent once: a cleanup running
    with the signals ignored is not cut short. Nothing is watched under ``nohup`` (SIGHUP
    inherited as ignored): such a run is meant to outlive the shell that started it."""
    done = threading.Event()
    if _detached(signal.SIGHUP):
        yield
        return
    args = (os.getppid(), done)
    threading.Thread(target=_watch_parent, args=args, daemon=True, name="envlayer-parent-watch").start()
    try:
        yield
    finally:
        done.set()


def _detached(sig: int) -> bool:
    """True for SIGHUP inherited as ignored: the process was started with ``nohup``."""
    return sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN


def _watch_parent(parent: int, done: threading.Event) -> None:
    while not done.wait(PARENT_CHECK_INTERVAL):
        if os.getppid() != parent:  # re-parented: the parent is gone
            os.kill(os.getpid(), signal.SIGTERM)
            return


def exit_code_of(stop: KeyboardInterrupt) -> int:
    """143 for :class:`Terminated`, 130 for Ctrl-C (128 + the signal, as a shell reports it)."""
    return TERMINATED_EXIT_CODE if isinstance(stop, Terminated) else INTERRUPTED_EXIT_CODE


def run_script(main: Callable[[], int | None]) -> int:
    """Run a benchmark script's ``main`` with :func:`signals_raise` and
    :func:`terminated_with_parent`; its exit code, or 130/143 after a Ctrl-C, SIGTERM, SIGHUP
    or the parent's death once its ``finally`` blocks have cleaned up."""
    try:
        with signals_raise(), terminated_with_parent():
            return main() or 0
    except KeyboardInterrupt as stop:
        word = "terminated" if isinstance(stop, Terminated) else "interrupted"
        print(f"{word}; what the run created was removed", file=sys.stderr)
        return exit_code_of(stop)
