"""Background termination: ``Sandbox.terminate`` on a worker thread of
:mod:`envlayer.sandbox.teardown_threads`, joined by ``wait_for_cleanup`` and, up to 15 s, at interpreter
exit, so a process that exits right after ``cleanup()`` does not leave its sandbox running
(and billing). The handle is detached afterwards (``Sandbox.detach``: its command-router
connection is closed), so a long-lived process that makes many environments keeps no
connection per closed one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from envlayer.sandbox import teardown_threads as background

log = logging.getLogger("envlayer.modal.teardown")


def _terminate(handle: Callable[[], Any], sandbox_id: str) -> None:
    from envlayer_modal.client import control
    from envlayer_modal.sandbox import detach_quietly

    try:
        sandbox = handle()
        control(sandbox.terminate, f"terminating sandbox {sandbox_id}")
    except Exception as exc:
        log.warning("terminating sandbox %s failed: %r", sandbox_id, exc)
        return
    detach_quietly(sandbox)


def schedule(handle: Callable[[], Any], sandbox_id: str) -> threading.Thread:
    """Start terminating the sandbox ``handle()`` returns (a fresh handle when the
    environment's own was already detached) in the background; return the worker."""
    return background.schedule(lambda: _terminate(handle, sandbox_id), f"envlayer-modal-teardown-{sandbox_id}")


def wait_all(timeout: float) -> bool:
    """Join every pending teardown of this process; True when all finished in time."""
    return background.wait_all(timeout)
