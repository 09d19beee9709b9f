"""Tags (labels) of sandboxes that backends sweep by tag: value sanitizing, the
configuration fingerprint, and envlayer's own tag set and selector (shared by the Docker,
Kubernetes and Modal backends; each names its keys with its platform's prefix).

Values are sanitized to what label/tag filters round-trip everywhere:
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
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

MAX_LEN = 63
_HASH_LEN = 12
_CLEAN = re.compile(r"^[A-Za-z0-9_.-]+$")
_SUFFIX = re.compile(rf"\.h[0-9a-f]{{{_HASH_LEN}}}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
FINGERPRINT_VERSION = "v1"


def sanitize(value: str | None) -> str:
    """The tag or label value for ``value`` (see the module docstring). Pure; never raises."""
    if not value:
        return "unknown"
    if len(value) <= MAX_LEN and _CLEAN.match(value) and value != "unknown" and not _SUFFIX.search(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    prefix = _UNSAFE.sub("_", value)[: MAX_LEN - _HASH_LEN - 2]
    return f"{prefix}.h{digest}"


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """A short stable digest of every input that shapes a sandbox.

    ``inputs`` must be JSON-serializable; key order does not matter. The result is
    ``v1-<32 hex>``, a valid label value.
    """
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return f"{FINGERPRINT_VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


def slug(value: str, limit: int) -> str:
    """A readable fragment of ``value`` for a sandbox name: ``[A-Za-z0-9_.-]`` only, at most
    ``limit`` characters, no leading/trailing ``._-``; ``x`` when nothing is left. Lossy:
    names add a hash of the exact value. Pure."""
    return _UNSAFE.sub("_", value)[:limit].strip("._-") or "x"


class ManagedKeys(NamedTuple):
    """The keys of envlayer's own tags under one platform prefix (:func:`managed_keys`)."""

    managed: str
    task: str
    profile: str
    fingerprint: str
    persist: str
    owner: str


def managed_keys(prefix: str) -> ManagedKeys:
    """``<prefix>managed``, ``<prefix>task``, ... : a backend unpacks them into its constants."""
    return ManagedKeys(*(prefix + field for field in ManagedKeys._fields))


def managed_tags(
    prefix: str,
    *,
    profile: str,
    task: str,
    fingerprint_value: str,
    persist: bool,
    extra: Mapping[str, str],
    owner: str | None = None,
    value: Callable[[str], str] = sanitize,
) -> dict[str, str]:
    """envlayer's tag set of a new sandbox under :func:`managed_keys` ``(prefix)`` (``owner``
    only when given: private sandboxes,
    see :mod:`envlayer.sandbox.owner`), over the user's ``extra`` tags, which never override
    them. ``value`` makes task and profile valid tag values on the platform."""
    keys = managed_keys(prefix)
    tags = dict(extra)
    if owner is not None:
        tags[keys.owner] = owner
    tags.update(
        {
            keys.managed: "1",
            keys.task: value(task),
            keys.profile: value(profile),
            keys.fingerprint: fingerprint_value,
            keys.persist: "1" if persist else "0",
        }
    )
    return tags


def managed_selector(
    prefix: str, *, profile: str | None = None, task: str | None = None, value: Callable[[str], str] = sanitize
) -> dict[str, str]:
    """The tags that select envlayer's sandboxes (of ``profile`` / ``task`` when given),
    keys as in :func:`managed_tags`."""
    keys = managed_keys(prefix)
    want = {keys.managed: "1"}
    if profile is not None:
        want[keys.profile] = value(profile)
    if task is not None:
        want[keys.task] = value(task)
    return want
