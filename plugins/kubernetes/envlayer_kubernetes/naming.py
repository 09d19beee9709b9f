"""Pod names, envlayer's pod labels and the label selectors that find them.

* Pod name of (profile, task): ``envlayer-<profile slug>-<task slug>-<16 hex>``, a DNS-1123
  label of at most 63 characters; the hex is sha256 over (profile, task), so the name is
  the same in every process and on every machine, and two (profile, task) pairs never
  share one. Creating it is the atomic step of the cross-process attach (409 -> read).
  A private pod (``persist_across_processes = false``) adds ``-p<8 random hex>``.
* Label values (the label set and selector are :mod:`envlayer.sandbox.tags`'s, keys under
  ``envlayer/``) are made valid Kubernetes label values (at most 63 characters of
  ``[A-Za-z0-9_.-]``, alphanumeric at both ends). The mapping is injective: a value that
  is already valid, not ``unknown`` and not shaped like a rewritten one is kept; anything
  else becomes ``<readable prefix>.h<12 hex of sha256>`` (``h<12 hex>`` when no readable
  prefix survives); the empty value becomes ``unknown``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

from envlayer.sandbox.tags import fingerprint, managed_keys, managed_selector, managed_tags
from envlayer_kubernetes.options import LABEL_VALUE

__all__ = ["fingerprint", "label_value", "managed_labels", "pod_name", "selector"]

PREFIX = "envlayer/"
MANAGED, TASK, PROFILE, FINGERPRINT, PERSIST, OWNER = managed_keys(PREFIX)
OPTIONS = PREFIX + "options"
"""Annotation of a pod: the options it was created with, as JSON (see
:mod:`envlayer.sandbox.recorded_options`; no secret values)."""
CONTAINER = "sandbox"
"""The name of the one container in every envlayer pod."""

MAX_NAME = 63
MAX_VALUE = 63
_HASH = 12
_REWRITTEN = re.compile(rf"(^|\.)h[0-9a-f]{{{_HASH}}}$")
_UNSAFE_VALUE = re.compile(r"[^A-Za-z0-9_.-]")
_UNSAFE_NAME = re.compile(r"[^a-z0-9]+")


def label_value(value: str | None) -> str:
    """The label value for ``value`` (module rules). Pure; never raises."""
    if not value:
        return "unknown"
    if len(value) <= MAX_VALUE and LABEL_VALUE.match(value) and value != "unknown" and not _REWRITTEN.search(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH]
    prefix = _UNSAFE_VALUE.sub("_", value)[: MAX_VALUE - _HASH - 2]
    prefix = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", prefix)
    return f"{prefix}.h{digest}" if prefix else f"h{digest}"


def _slug(text: str, size: int) -> str:
    return _UNSAFE_NAME.sub("-", text.lower()).strip("-")[:size].strip("-") or "x"


def pod_name(profile: str, task: str, *, private: bool = False) -> str:
    """The deterministic pod name of (profile, task) (module rules); with ``private`` a
    fresh random suffix makes it unique to one environment."""
    digest = hashlib.sha256(f"{profile}\0{task}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    suffix = f"-{digest}" + (f"-p{secrets.token_hex(4)}" if private else "")
    room = MAX_NAME - len("envlayer--") - len(suffix)
    profile_part = _slug(profile, room // 3)
    task_part = _slug(task, room - len(profile_part))
    return f"envlayer-{profile_part}-{task_part}{suffix}"


def managed_labels(**fields: Any) -> dict[str, str]:
    """The full label set of a new pod: :func:`envlayer.sandbox.tags.managed_tags` (same
    keywords; ``extra`` user labels never override ours) with :func:`label_value` values."""
    return managed_tags(PREFIX, value=label_value, **fields)


def selector(*, profile: str | None = None, task: str | None = None) -> str:
    """A label selector for managed pods of ``profile`` / ``task`` (None: any)."""
    want = managed_selector(PREFIX, profile=profile, task=task, value=label_value)
    return ",".join(f"{key}={value}" for key, value in want.items())
