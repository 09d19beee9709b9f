"""Background teardown: stop + remove a container on a worker thread of
:mod:`envlayer.sandbox.teardown_threads` (joined by ``wait_for_cleanup`` and, up to 15 s, at exit).
Nothing goes through a shell: only API calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from envlayer.sandbox import teardown_threads as background

log = logging.getLogger("envlayer.docker.teardown")

REMOVAL_WAIT = 30.0
"""Seconds a teardown waits for a removal that another process began (the daemon's 409)."""


def _stop_and_remove(api: Any, container_id: str, stop_timeout: float) -> None:
    from docker.errors import APIError, NotFound

    try:
        api.stop(container_id, timeout=int(max(stop_timeout, 0)))
    except NotFound:
        return
    except Exception as exc:
        log.debug("stop %s: %r", container_id[:12], exc)
    try:
        api.remove_container(container_id, force=True, v=True)
    except NotFound:
        pass
    except APIError as exc:
        if exc.status_code == 409:  # removal already in progress elsewhere: gone when we return
            _wait_until_gone(api, container_id)
        else:
            log.warning("removing container %s failed: %s", container_id[:12], exc.explanation or exc)
    except Exception as exc:
        log.warning("removing container %s failed: %r", container_id[:12], exc)


def _wait_until_gone(api: Any, container_id: str, timeout: float = REMOVAL_WAIT) -> None:
    from docker.errors import NotFound

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.inspect_container(container_id)
        except NotFound:
            return
        time.sleep(0.05)
    log.warning("container %s still there %.0f s after another removal began", container_id[:12], timeout)


def schedule(
    api: Any, container_id: str, stop_timeout: float, *, then: Callable[[], None] | None = None
) -> threading.Thread:
    """Start tearing ``container_id`` down in the background, then run ``then`` (e.g.
    removing the task's durable data; its failure is logged); return the worker."""

    def work() -> None:
        try:
            _stop_and_remove(api, container_id, stop_timeout)
            if then is not None:
                then()
        except Exception as exc:
            log.warning("teardown of %s: %r", container_id[:12], exc)

    return background.schedule(work, f"envlayer-docker-teardown-{container_id[:12]}")


def wait_all(timeout: float) -> bool:
    """Join every pending teardown of this process; True when all finished in time."""
    return background.wait_all(timeout)
