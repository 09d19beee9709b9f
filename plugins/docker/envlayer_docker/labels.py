"""Container labels: names, value sanitizing and the configuration fingerprint.

Label values are sanitized to what ``docker ps --filter label=K=V`` round-trips:
``[A-Za-z0-9_.-]``, at most 63 characters, never empty. The mapping is injective:

* a value that is already clean, at most 63 characters, not ``unknown`` and not ending in
  the hash suffix is kept as is;
* anything else becomes ``<readable prefix>.h<12 hex of sha256(value)>`` (the prefix is the
  value with other characters replaced by ``_``, cut to fit); the empty value becomes
  ``unknown``.

So a kept value never ends in the suffix, and two rewritten values differ unless their
sha256 prefixes collide (48 bits).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

MANAGED = "envlayer.managed"
TASK = "envlayer.task"
TASK_ID = "envlayer.task_id"
"""The task id as given (any string, empty included), for display and ``envlayer rm``;
:data:`TASK` holds its sanitized form, which is what filters match."""
PROFILE = "envlayer.profile"
FINGERPRINT = "envlayer.fingerprint"
PERSIST = "envlayer.persist"
OWNER = "envlayer.owner"
RESERVED_PREFIX = "envlayer."

MAX_LEN = 63
_HASH_LEN = 12
_CLEAN = re.compile(r"^[A-Za-z0-9_.-]+$")
_SUFFIX = re.compile(rf"\.h[0-9a-f]{{{_HASH_LEN}}}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
FINGERPRINT_VERSION = "v1"


def sanitize(value: str | None) -> str:
    """The label value for ``value`` (see the module docstring). Pure; never raises."""
    if not value:
        return "unknown"
    if len(value) <= MAX_LEN and _CLEAN.match(value) and value != "unknown" and not _SUFFIX.search(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    prefix = _UNSAFE.sub("_", value)[: MAX_LEN - _HASH_LEN - 2]
    return f"{prefix}.h{digest}"


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """A short stable digest of every input that shapes a container.

    ``inputs`` must be JSON-serializable; key order does not matter. The result is
    ``v1-<32 hex>``, a valid label value.
    """
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return f"{FINGERPRINT_VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


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
    ``owner`` (see :mod:`envlayer.owner`) is set on private containers only."""
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
