"""Background termination: ``Sandbox.terminate`` on a worker thread per sandbox.

``schedule`` returns the thread so the environment's ``wait_for_cleanup`` can join it.
Every pending termination is also joined (up to 15 s in total) at interpreter exit, so a
process that exits right after ``cleanup()`` does not leave its sandbox running (and billing).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any

log = logging.getLogger("envlayer.modal.teardown")
_PENDING: set[threading.Thread] = set()
_LOCK = threading.Lock()
_HOOKED = False
EXIT_WAIT = 15.0


def schedule(sandbox: Any, sandbox_id: str) -> threading.Thread:
    """Start terminating ``sandbox`` in the background; return the worker."""
    global _HOOKED

    def work() -> None:
        try:
            sandbox.terminate()
        except Exception as exc:
            log.warning("terminating sandbox %s failed: %r", sandbox_id, exc)
        finally:
            with _LOCK:
                _PENDING.discard(threading.current_thread())

    thread = threading.Thread(target=work, name=f"envlayer-modal-teardown-{sandbox_id}", daemon=True)
    with _LOCK:
        _PENDING.add(thread)
        if not _HOOKED:
            atexit.register(wait_all, EXIT_WAIT)
            _HOOKED = True
    thread.start()
    return thread


def wait_all(timeout: float) -> bool:
    """Join every pending termination of this process; True when all finished in time."""
    deadline = time.monotonic() + timeout
    with _LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return not any(t.is_alive() for t in threads)
