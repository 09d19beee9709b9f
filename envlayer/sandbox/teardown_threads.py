"""Background teardown work (removing a container, terminating a sandbox, ending a
session shell) on worker threads that the process waits for.

``schedule`` starts ``work`` on a daemon thread and returns it, so an environment's
``wait_for_cleanup`` can join it; an exception ``work`` raises is logged (a warning),
never lost. At interpreter exit an ``atexit`` hook joins every pending job: one given a
``bound`` (the seconds it can take at most, each of its calls carrying a timeout) until
that bound has passed, plus :data:`EXIT_GRACE`; the others for up to :data:`EXIT_WAIT`
seconds in total. A job still running then is named in a warning: CPython ends daemon
threads at shutdown, and one caught inside a socket call aborts the process (SIGABRT).
Then the hooks given to :func:`after_teardowns` run (a backend stopping its SDK clients'
own threads, which its jobs were still using), so a process that exits right after
``cleanup()`` neither leaves its sandbox behind nor dies in a thread of it.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("envlayer.teardown")

_PENDING: dict[threading.Thread, float | None] = {}
"""Every job not yet ended, with the monotonic time its ``bound`` ends (None: no bound)."""
_AFTER: list[Callable[[], None]] = []
_LOCK = threading.Lock()
_HOOKED = False
EXIT_WAIT = 15.0
"""Seconds, in total, the exit hook waits for the jobs that have no bound."""
EXIT_GRACE = 2.0
"""Seconds the exit hook allows a bounded job past its bound (its last connection's teardown)."""


def _hook_exit() -> None:
    """Register :func:`_finish_at_exit` once; the caller holds ``_LOCK``."""
    global _HOOKED
    if not _HOOKED:
        atexit.register(_finish_at_exit)
        _HOOKED = True


def schedule(work: Callable[[], None], name: str, *, bound: float | None = None) -> threading.Thread:
    """Run ``work`` on a new daemon thread called ``name``; return the thread. ``bound``:
    the seconds ``work`` can take at most, which the process waits for at exit (module
    docstring); None: it shares the exit's :data:`EXIT_WAIT`."""

    def run() -> None:
        try:
            work()
        except Exception as exc:
            log.warning("%s failed: %r", name, exc)
        finally:
            with _LOCK:
                _PENDING.pop(threading.current_thread(), None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _LOCK:
        _PENDING[thread] = None if bound is None else time.monotonic() + bound
        _hook_exit()
    thread.start()
    return thread


def after_teardowns(hook: Callable[[], None]) -> None:
    """Run ``hook`` at interpreter exit once every pending job has been waited for (module
    docstring); its exceptions are logged. Call it once per hook (e.g. at import)."""
    with _LOCK:
        _AFTER.append(hook)
        _hook_exit()


def wait_all(timeout: float) -> bool:
    """Join every pending job of this process; True when all finished in time."""
    deadline = time.monotonic() + timeout
    with _LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return not any(t.is_alive() for t in threads)


def _finish_at_exit() -> None:
    """Join every pending job (each until its bound, the others within :data:`EXIT_WAIT`),
    warn about any still running, then run the :func:`after_teardowns` hooks."""
    shared = time.monotonic() + EXIT_WAIT
    with _LOCK:
        jobs = list(_PENDING.items())
        hooks = list(_AFTER)
    for thread, bound_end in jobs:
        until = shared if bound_end is None else bound_end + EXIT_GRACE
        thread.join(max(until - time.monotonic(), 0))
        if thread.is_alive():
            log.warning("%s did not finish by its deadline at exit", thread.name)
    for hook in hooks:
        try:
            hook()
        except Exception as exc:
            log.warning("an exit hook of the teardown threads failed: %r", exc)
