"""Recover-and-retry, in one place: a container that vanished or stopped under us is
re-attached (started, or re-created) at most once per call, and only when the operation
provably did not start (the daemon answered :class:`~envlayer_docker.errors.ContainerGone`
before anything ran). A command is never run twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from envlayer.errors import BackendUnavailable
from envlayer_docker.errors import ContainerGone

T = TypeVar("T")


def retry_after_recovery(
    operation: Callable[[], T], *, current_id: Callable[[], str], recover: Callable[[str], None], task: str
) -> tuple[T, bool]:
    """Run ``operation``; on :class:`ContainerGone`, ``recover(seen_container_id)`` and run
    it once more. Returns ``(value, recovered)``.

    Raises :class:`BackendUnavailable` when the container is gone again right after the
    recovery (something keeps removing it).
    """
    seen = current_id()
    try:
        return operation(), False
    except ContainerGone:
        recover(seen)
    try:
        return operation(), True
    except ContainerGone as exc:
        raise BackendUnavailable(
            f"the container for task {task!r} is gone again right after being recreated: {exc}",
            hint="check the daemon (`docker ps -a`, its log); something keeps removing the container",
        ) from exc
