"""Daemon calls that an interrupt never abandons half-way.

Ctrl-C (``KeyboardInterrupt``, also the bench's SIGTERM) raised while docker-py waits
for the daemon's answer leaves the request running in the daemon: a ``create`` lands a
moment later, after every cleanup of the caller has already listed what exists, and
the container is left behind. :func:`finish_then_interrupt` runs the call on a worker
thread and, when the calling thread is interrupted meanwhile, waits for the call to end
(the daemon's answer says what was made), undoes its result, and only then lets the
interrupt propagate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def finish_then_interrupt(call: Callable[[], T], *, undo: Callable[[T], object], name: str) -> T:
    """Return ``call()``, run on a thread named ``name``. A ``KeyboardInterrupt`` in the
    calling thread meanwhile (even repeated) is held until ``call`` has ended; then
    ``undo(result)`` runs (when ``call`` returned) and the first interrupt is raised,
    also when ``call`` or ``undo`` failed (their error is chained to it). Without an
    interrupt, ``call``'s own exceptions propagate as they are."""
    outcome: dict[str, object] = {}
    ended = threading.Event()  # not Thread.join: an interrupted join can leave is_alive() wrong

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the calling thread below
            outcome["error"] = exc
        finally:
            ended.set()

    interrupt: KeyboardInterrupt | None = None
    threading.Thread(target=work, name=name, daemon=True).start()
    while not ended.is_set():
        try:
            ended.wait()
        except KeyboardInterrupt as exc:
            interrupt = interrupt or exc
    error = outcome.get("error")
    if interrupt is None:
        if isinstance(error, BaseException):
            raise error
        return outcome["value"]  # type: ignore[return-value]
    if isinstance(error, BaseException):
        raise interrupt from error
    try:
        undo(outcome["value"])  # type: ignore[arg-type]
    except Exception as exc:
        raise interrupt from exc
    raise interrupt
