"""Tearing a container down: stop, then remove it (with its anonymous volumes), waiting
out a removal that another process began. The work of ``DockerEnvironment``'s removal,
run on a thread of :mod:`envlayer.sandbox.teardown_threads` (see
:mod:`envlayer.sandbox.managed`). Nothing goes through a shell: only API calls.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from envlayer_docker import sdk

log = logging.getLogger("envlayer.docker.teardown")

REMOVAL_WAIT = 30.0
"""Seconds a teardown waits for a removal that another process began (the daemon's 409)."""


def stop_and_remove(api: Any, container_id: str, stop_timeout: float) -> None:
    """Stop ``container_id`` (``stop_timeout`` seconds of grace) and remove it; a container
    already gone is fine, a failure is logged. Never raises."""
    try:
        api.stop(container_id, timeout=int(max(stop_timeout, 0)))
    except sdk.errors.NotFound:
        return
    except Exception as exc:
        log.debug("stop %s: %r", container_id[:12], exc)
    try:
        api.remove_container(container_id, force=True, v=True)
    except sdk.errors.NotFound:
        pass
    except sdk.errors.APIError as exc:
        if exc.status_code == 409:  # removal already in progress elsewhere: gone when we return
            _wait_until_gone(api, container_id)
        else:
            log.warning("removing container %s failed: %s", container_id[:12], exc.explanation or exc)
    except Exception as exc:
        log.warning("removing container %s failed: %r", container_id[:12], exc)


def _wait_until_gone(api: Any, container_id: str, timeout: float = REMOVAL_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.inspect_container(container_id)
        except sdk.errors.NotFound:
            return
        time.sleep(0.05)
    log.warning("container %s still there %.0f s after another removal began", container_id[:12], timeout)
