"""Container labels: names, and the label set of a managed container.

Values go through :func:`envlayer.sandbox.tags.sanitize` (what ``docker ps --filter
label=K=V`` round-trips; the rules are in that module), and the configuration fingerprint
is :func:`envlayer.sandbox.tags.fingerprint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envlayer.sandbox.tags import fingerprint, managed_keys, managed_selector, managed_tags, sanitize

RESERVED_PREFIX = "envlayer."
MANAGED, TASK, PROFILE, FINGERPRINT, PERSIST, OWNER = managed_keys(RESERVED_PREFIX)
TASK_ID = "envlayer.task_id"
"""The task id as given (any string, empty included), for display and ``envlayer rm``;
:data:`TASK` holds its sanitized form, which is what filters match."""
DATA = "envlayer.data"
"""On a durable volume: ``workspace``, ``home``, or ``record`` (a last-use record)."""
OPTIONS = "envlayer.options"
"""On a container: the options it was created with, as JSON (see
:mod:`envlayer.sandbox.recorded_options`; no secret values)."""
LAST_USED = "envlayer.last_used"
"""On a last-use record: when the task's data was last used (epoch seconds)."""

__all__ = ["filters", "fingerprint", "managed_labels", "sanitize"]


def managed_labels(*, task: str, **fields: Any) -> dict[str, str]:
    """The full label set of a new container: :func:`envlayer.sandbox.tags.managed_tags`
    (same keywords; ``extra`` user labels never override ours) plus :data:`TASK_ID`."""
    return {**managed_tags(RESERVED_PREFIX, task=task, **fields), TASK_ID: task}


def task_id_of(labels: Mapping[str, str]) -> str:
    """The task id a labelled object belongs to: the id as given when it carries
    :data:`TASK_ID`, else (objects made before that label existed) the sanitized one."""
    return labels[TASK_ID] if TASK_ID in labels else labels.get(TASK, "")


def filters(*, profile: str | None = None, task: str | None = None) -> list[str]:
    """``label`` filter terms selecting managed containers of ``profile`` / ``task``."""
    return [f"{key}={value}" for key, value in managed_selector(RESERVED_PREFIX, profile=profile, task=task).items()]
