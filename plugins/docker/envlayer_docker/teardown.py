"""Background teardown: stop + remove a container on a bounded worker thread.

``schedule`` returns the thread so the environment's ``wait_for_cleanup`` can join it.
Every pending teardown is also joined (up to 15 s in total) by an ``atexit`` hook, so a
process that exits right after ``cleanup()`` does not leave its container behind.
Nothing goes through a shell: only API calls.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("envlayer.docker.teardown")
_PENDING: set[threading.Thread] = set()
_LOCK = threading.Lock()
_HOOKED = False
EXIT_WAIT = 15.0


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
        if exc.status_code != 409:  # 409: removal already in progress
            log.warning("removing container %s failed: %s", container_id[:12], exc.explanation or exc)
    except Exception as exc:
        log.warning("removing container %s failed: %r", container_id[:12], exc)


def schedule(
    api: Any, container_id: str, stop_timeout: float, *, then: Callable[[], None] | None = None
) -> threading.Thread:
    """Start tearing ``container_id`` down in the background, then run ``then`` (e.g.
    removing the task's durable data; its failure is logged); return the worker."""
    global _HOOKED

    def work() -> None:
        try:
            _stop_and_remove(api, container_id, stop_timeout)
            if then is not None:
                then()
        except Exception as exc:
            log.warning("teardown of %s: %r", container_id[:12], exc)
        finally:
            with _LOCK:
                _PENDING.discard(threading.current_thread())

    thread = threading.Thread(target=work, name=f"envlayer-docker-teardown-{container_id[:12]}", daemon=True)
    with _LOCK:
        _PENDING.add(thread)
        if not _HOOKED:
            atexit.register(wait_all, EXIT_WAIT)
            _HOOKED = True
    thread.start()
    return thread


def wait_all(timeout: float) -> bool:
    """Join every pending teardown of this process; True when all finished in time."""
    deadline = time.monotonic() + timeout
    with _LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return not any(t.is_alive() for t in threads)
