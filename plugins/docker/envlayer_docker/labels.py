"""Container labels: names, and the label set of a managed container.

Values go through :func:`envlayer.sandbox.tags.sanitize` (what ``docker ps --filter
label=K=V`` round-trips; the rules are in that module), and the configuration fingerprint
is :func:`envlayer.sandbox.tags.fingerprint`.
"""

from __future__ import annotations

from collections.abc import Mapping

from envlayer.sandbox.tags import fingerprint, sanitize

MANAGED = "envlayer.managed"
TASK = "envlayer.task"
TASK_ID = "envlayer.task_id"
"""The task id as given (any string, empty included), for display and ``envlayer rm``;
:data:`TASK` holds its sanitized form, which is what filters match."""
PROFILE = "envlayer.profile"
FINGERPRINT = "envlayer.fingerprint"
PERSIST = "envlayer.persist"
OWNER = "envlayer.owner"
DATA = "envlayer.data"
"""On a durable volume: ``workspace``, ``home``, or ``record`` (a last-use record)."""
LAST_USED = "envlayer.last_used"
"""On a last-use record: when the task's data was last used (epoch seconds)."""
RESERVED_PREFIX = "envlayer."

__all__ = ["filters", "fingerprint", "managed_labels", "sanitize"]


def managed_labels(
    *,
    profile: str,
    task: str,
    fingerprint_value: str,
    persist: bool,
    extra: Mapping[str, str],
    owner: str | None = None,
) -> dict[str, str]:
    """The full label set of a new container. ``extra`` (user labels) never overrides ours.
    ``owner`` (see :mod:`envlayer.sandbox.owner`) is set on private containers only."""
    labels = dict(extra)
    if owner is not None:
        labels[OWNER] = owner
    labels.update(
        {
            MANAGED: "1",
            TASK: sanitize(task),
            TASK_ID: task,
            PROFILE: sanitize(profile),
            FINGERPRINT: fingerprint_value,
            PERSIST: "1" if persist else "0",
        }
    )
    return labels


def task_id_of(labels: Mapping[str, str]) -> str:
    """The task id a labelled object belongs to: the id as given when it carries
    :data:`TASK_ID`, else (objects made before that label existed) the sanitized one."""
    return labels[TASK_ID] if TASK_ID in labels else labels.get(TASK, "")


def filters(*, profile: str | None = None, task: str | None = None) -> list[str]:
    """``label`` filter terms selecting managed containers of ``profile`` / ``task``."""
    terms = [f"{MANAGED}=1"]
    if profile is not None:
        terms.append(f"{PROFILE}={sanitize(profile)}")
    if task is not None:
        terms.append(f"{TASK}={sanitize(task)}")
    return terms
