"""Background teardown work (removing a container, terminating a sandbox) on worker
threads that the process can wait for.

``schedule`` starts ``work`` on a daemon thread and returns it, so an environment's
``wait_for_cleanup`` can join it. Every pending job of the process is also joined (up to
15 s in total) by an ``atexit`` hook, so a process that exits right after ``cleanup()``
does not leave its sandbox behind. A job's exceptions are the job's to log: ``work``
should not raise. :class:`ThreadTeardown` gives a backend whose ``cleanup()`` keeps its job in
``self._teardown`` the two waiting methods of the capabilities ``wait_for_cleanup``.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable

_PENDING: set[threading.Thread] = set()
_LOCK = threading.Lock()
_HOOKED = False
EXIT_WAIT = 15.0


def schedule(work: Callable[[], None], name: str) -> threading.Thread:
    """Run ``work`` on a new daemon thread called ``name``; return the thread."""
    global _HOOKED

    def run() -> None:
        try:
            work()
        finally:
            with _LOCK:
                _PENDING.discard(threading.current_thread())

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _LOCK:
        _PENDING.add(thread)
        if not _HOOKED:
            atexit.register(wait_all, EXIT_WAIT)
            _HOOKED = True
    thread.start()
    return thread


def wait_all(timeout: float) -> bool:
    """Join every pending job of this process; True when all finished in time."""
    deadline = time.monotonic() + timeout
    with _LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return not any(t.is_alive() for t in threads)


class ThreadTeardown:
    """Mixin for an environment whose ``cleanup()`` stores the teardown thread that
    :func:`schedule` returned in ``self._teardown`` (None: nothing to tear down)."""

    _teardown: threading.Thread | None = None

    def wait_for_cleanup(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for this environment's teardown; True when done
        (or when there was nothing to tear down)."""
        thread = self._teardown
        if thread is None:
            return True
        thread.join(max(timeout, 0))
        return not thread.is_alive()

    @classmethod
    def wait_for_all_cleanups(cls, timeout: float) -> bool:
        """Join every teardown started in this process (also run at exit, up to 15 s)."""
        return wait_all(timeout)
