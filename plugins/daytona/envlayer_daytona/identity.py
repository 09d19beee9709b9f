"""Who a sandbox belongs to: its name, its labels and the fingerprint of what shaped it.

* The name is the atomic "one sandbox per (profile, task)" lock: Daytona refuses a second
  sandbox with the same name (HTTP 409), so racing processes end with one winner and the
  losers attach to it. ``envlayer-<profile>-<task>-<16 hex of sha256(profile, task)>``:
  readable, and different pairs never share a name. Only ``[A-Za-z0-9_.-]`` is kept and
  ``www.`` is broken, so no task id makes a name the API refuses as unsafe to display.
* Labels are set in the create request (never afterwards, so a crash cannot leave an
  unlabelled sandbox). Daytona label values are arbitrary strings, matched exactly by the
  list filter, so task and profile are stored as they are.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from envlayer.sandbox.tags import fingerprint, managed_keys, managed_selector, managed_tags

__all__ = ["fingerprint", "managed_labels", "parse_time", "private_name", "sandbox_name", "selector"]

LABEL_PREFIX = "envlayer."
MANAGED, TASK, PROFILE, FINGERPRINT, PERSIST, _OWNER = managed_keys(LABEL_PREFIX)
CREATED_AT = LABEL_PREFIX + "created-at"
OPTIONS = LABEL_PREFIX + "options"
"""The options the sandbox was created with, as JSON (see
:mod:`envlayer.sandbox.recorded_options`; no secret values)."""

PREFIX = "envlayer"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


_URLISH = re.compile(r"www\.", re.I)
"""The part of the API's ``IsSafeDisplayString`` check on sandbox names that survives
:data:`_UNSAFE` (apps/api/src/common/validators/is-safe-string.validator.ts: no URL schemes,
which need ``:``, no ``www.``, no HTML tags or control characters, which need ``<`` or
control bytes): a name matching it is refused with 400."""


def _slug(value: str, limit: int) -> str:
    slug = _UNSAFE.sub("_", value)[:limit].strip("._-") or "x"
    return _URLISH.sub(lambda m: m.group(0)[:3] + "_", slug)


def sandbox_name(profile: str, task: str) -> str:
    """The persist-mode name of (profile, task)'s sandbox."""
    digest = hashlib.sha256(f"{profile}\0{task}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{PREFIX}-{_slug(profile, 20)}-{_slug(task, 30)}-{digest}"


def private_name(profile: str, task: str) -> str:
    """A unique name for a sandbox owned by one environment (persist_across_processes = false)."""
    return f"{sandbox_name(profile, task)}-p{secrets.token_hex(4)}"


def managed_labels(**fields: Any) -> dict[str, str]:
    """The full label set of a new sandbox: :func:`envlayer.sandbox.tags.managed_tags` (same
    keywords; ``extra`` user labels never override ours; values as given) plus :data:`CREATED_AT`."""
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**managed_tags(LABEL_PREFIX, value=str, **fields), CREATED_AT: created}


def selector(*, profile: str | None = None, task: str | None = None) -> dict[str, str]:
    """The label filter selecting managed sandboxes of ``profile`` / ``task``."""
    return managed_selector(LABEL_PREFIX, profile=profile, task=task, value=str)


def parse_time(value: object) -> float | None:
    """Epoch seconds of an ISO-8601 timestamp (``Z`` or an offset, fractions allowed);
    ``None`` for anything else. Pure; never raises."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00")
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
    if m:
        text = m.group(1) + (m.group(2) or "")[:7] + m.group(3)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
