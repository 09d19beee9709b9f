"""The at-exit registry: close the environment managers still alive at interpreter exit.

:func:`track` registers one ``atexit`` hook for the process (on first use) and holds
each manager weakly: a manager that is garbage-collected is simply forgotten (nothing
destructive ever runs from ``__del__``). At exit, every tracked manager is closed within
one shared deadline, the largest ``exit_timeout`` among them; a failure to close one is
logged and the others are still closed.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Protocol

log = logging.getLogger("envlayer.manager")


class Closable(Protocol):
    """What the exit hook needs from a manager."""

    exit_timeout: float

    def close(self, *, timeout: float | None = None) -> bool: ...


_live: weakref.WeakSet[Closable] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False


def track(manager: Closable) -> None:
    """Close ``manager`` at interpreter exit unless :func:`untrack` is called first."""
    global _registered
    with _lock:
        _live.add(manager)
        if not _registered:
            atexit.register(close_all)
            _registered = True


def untrack(manager: Closable) -> None:
    """Forget ``manager`` (it closed on its own)."""
    with _lock:
        _live.discard(manager)


def close_all() -> None:
    """Close every tracked manager within one deadline (the at-exit hook)."""
    with _lock:
        managers = list(_live)
    if not managers:
        return
    deadline = time.monotonic() + max(m.exit_timeout for m in managers)
    for manager in managers:
        try:
            manager.close(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:
            log.warning("closing an environment manager at exit failed", exc_info=True)
