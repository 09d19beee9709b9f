"""Say why a container stopped right after it started: its exit code and its last log lines.

A container whose image entrypoint (or init) fails exits at once; every exec into it is
then refused with "container is not running", which names neither the cause nor the fix.
Only a container that ran for at most :data:`QUICK_EXIT_SECONDS` counts: one that ran
for a while and then stopped (killed, out of memory, stopped by hand) is another story,
told by the caller's own error.

The exec can fail before the daemon has recorded the exit: a container started moments ago
that still shows as running is given :data:`STOPPING_WAIT_SECONDS` to stop.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer_docker.listing import parse_docker_time

LOG_LINES = 10
QUICK_EXIT_SECONDS = 10.0
STOPPING_WAIT_SECONDS = 2.0
"""How long a container that started at most :data:`QUICK_EXIT_SECONDS` ago, and still
shows as running when an exec into it failed, is waited for to stop (``POST
/containers/{id}/wait``, which answers as soon as it stops). Its entrypoint may be exiting:
runc then refuses the exec (126) before dockerd has handled the exit and cleared
``State.Running`` (seen on a loaded machine: the session shell refused, the container still
"running"). Only on this error path, once per failure."""


def exited_container_error(api: Any, container_id: str, task_id: str) -> BackendUnavailable | None:
    """A :class:`BackendUnavailable` giving the exit code and the last :data:`LOG_LINES`
    log lines of ``container_id`` when it stopped at most :data:`QUICK_EXIT_SECONDS` after
    it started (waiting up to :data:`STOPPING_WAIT_SECONDS` for a young one that still
    runs); None otherwise, or when it cannot be inspected (then the caller's own error
    stands)."""
    try:
        state = api.inspect_container(container_id).get("State") or {}
        started = parse_docker_time(state.get("StartedAt"))
        if state.get("Running") and started is not None and time.time() - started <= QUICK_EXIT_SECONDS:
            with contextlib.suppress(Exception):  # a read timeout: it still runs
                api.wait(container_id, timeout=STOPPING_WAIT_SECONDS)
            state = api.inspect_container(container_id).get("State") or {}
        started, finished = parse_docker_time(state.get("StartedAt")), parse_docker_time(state.get("FinishedAt"))
        if state.get("Running") or started is None or finished is None or finished - started > QUICK_EXIT_SECONDS:
            return None
        raw = api.logs(container_id, stdout=True, stderr=True, tail=LOG_LINES)
    except Exception:
        return None
    logs = raw.decode("utf-8", errors="replace").strip() if isinstance(raw, bytes) else str(raw).strip()
    shown = "\n".join(f"  | {line}" for line in logs.splitlines()) if logs else "  (it logged nothing)"
    error = f" ({state['Error']})" if state.get("Error") else ""
    return BackendUnavailable(
        f"the container for task {task_id!r} exited with code {state.get('ExitCode')} right after it "
        f"started{error}; its last log lines:\n{shown}",
        hint="the image's entrypoint or init failed (see its log above): fix the image, or set "
        'image_entrypoint = "replace" to run envlayer\'s own keep-alive instead',
    )
