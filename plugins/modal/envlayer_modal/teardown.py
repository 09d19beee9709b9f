"""Terminating a sandbox: ``Sandbox.terminate``, the work of ``ModalEnvironment``'s
removal, run on a thread of :mod:`envlayer.sandbox.teardown_threads` (see
:mod:`envlayer.sandbox.managed`), joined by ``wait_for_cleanup`` and, up to 15 s, at
interpreter exit, so a process that exits right after ``cleanup()`` does not leave its
sandbox running (and billing). The handle is detached afterwards (``Sandbox.detach``: its
command-router connection is closed), so a long-lived process that makes many
environments keeps no connection per closed one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from envlayer_modal.client import control
from envlayer_modal.sandbox import detach_quietly

log = logging.getLogger("envlayer.modal.teardown")


def terminate(handle: Callable[[], Any], sandbox_id: str) -> None:
    """Terminate the sandbox ``handle()`` returns, then detach it; a failure is logged.
    Never raises."""
    try:
        sandbox = handle()
        control(sandbox.terminate, f"terminating sandbox {sandbox_id}")
    except Exception as exc:
        log.warning("terminating sandbox %s failed: %r", sandbox_id, exc)
        return
    detach_quietly(sandbox)
