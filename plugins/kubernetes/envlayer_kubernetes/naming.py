"""Pod names, envlayer's pod labels and the label selectors that find them.

* Pod name of (profile, task): ``envlayer-<profile slug>-<task slug>-<16 hex>``, a DNS-1123
  label of at most 63 characters; the hex is sha256 over (profile, task), so the name is
  the same in every process and on every machine, and two (profile, task) pairs never
  share one. Creating it is the atomic step of the cross-process attach (409 -> read).
  A private pod (``persist_across_processes = false``) adds ``-p<8 random hex>``.
* Label values are made valid Kubernetes label values (at most 63 characters of
  ``[A-Za-z0-9_.-]``, alphanumeric at both ends). The mapping is injective: a value that
  is already valid, not ``unknown`` and not shaped like a rewritten one is kept; anything
  else becomes ``<readable prefix>.h<12 hex of sha256>`` (``h<12 hex>`` when no readable
  prefix survives); the empty value becomes ``unknown``.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from envlayer_kubernetes.options import LABEL_VALUE

PREFIX = "envlayer/"
MANAGED = PREFIX + "managed"
TASK = PREFIX + "task"
PROFILE = PREFIX + "profile"
FINGERPRINT = PREFIX + "fingerprint"
PERSIST = PREFIX + "persist"
OWNER = PREFIX + "owner"
CONTAINER = "sandbox"
"""The name of the one container in every envlayer pod."""

MAX_NAME = 63
MAX_VALUE = 63
_HASH = 12
_REWRITTEN = re.compile(rf"(^|\.)h[0-9a-f]{{{_HASH}}}$")
_UNSAFE_VALUE = re.compile(r"[^A-Za-z0-9_.-]")
_UNSAFE_NAME = re.compile(r"[^a-z0-9]+")
FINGERPRINT_VERSION = "v1"


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


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """``v1-<32 hex>``: a stable digest of everything that shapes a pod (JSON, key order
    irrelevant); a valid label value."""
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
    """The full label set of a new pod; ``extra`` (user labels) never overrides ours.
    ``owner`` (see :mod:`envlayer.sandbox.owner`) is set on private pods only."""
    labels = dict(extra)
    if owner is not None:
        labels[OWNER] = owner
    labels.update(
        {
            MANAGED: "1",
            TASK: label_value(task),
            PROFILE: label_value(profile),
            FINGERPRINT: fingerprint_value,
            PERSIST: "1" if persist else "0",
        }
    )
    return labels


def selector(*, profile: str | None = None, task: str | None = None) -> str:
    """A label selector for managed pods of ``profile`` / ``task`` (None: any)."""
    terms = [f"{MANAGED}=1"]
    if profile is not None:
        terms.append(f"{PROFILE}={label_value(profile)}")
    if task is not None:
        terms.append(f"{TASK}={label_value(task)}")
    return ",".join(terms)
