"""Sandbox tags: what marks a sandbox as envlayer's and who it belongs to.

Every tag is set in the ``Sandbox.create`` call itself (never afterwards: a crash between
create and tagging would leave a sandbox no reaper can find). Values go through
:func:`envlayer.sandbox.tags.sanitize`, so a tag filter in ``Sandbox.list`` matches them
exactly. ``Sandbox.list`` objects carry no creation time, so it is a tag too.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Mapping
from typing import Any

from envlayer.sandbox import recorded_options
from envlayer.sandbox.owner import owner_label
from envlayer.sandbox.tags import fingerprint, managed_keys, managed_selector, managed_tags, sanitize
from envlayer_modal.options import ModalOptions

PREFIX = "envlayer."
MANAGED, TASK, PROFILE, FINGERPRINT, PERSIST, OWNER = managed_keys(PREFIX)
CREATED_AT = PREFIX + "created-at"
CREATOR = PREFIX + "creator"
"""``<login name>@<host>`` of the process that created the sandbox (:func:`creator_label`):
sandbox names are shared by everyone in the Modal workspace, and only the creator's own
user on its own host may replace a sandbox over a fingerprint mismatch."""
OPTIONS = PREFIX + "options"
"""The options the sandbox was created with, as JSON (:data:`SHAPING_OPTIONS`; see
:mod:`envlayer.sandbox.recorded_options`; no secret values)."""
SHAPING_OPTIONS = (
    "image",
    "cpu",
    "memory",
    "gpu",
    "region",
    "cloud",
    "block_network",
    "secrets",
    "sandbox_timeout",
    "idle_timeout",
    "cwd",
    "environment_name",
    "tags",
)
"""The options that shape a sandbox (those :func:`fingerprint_inputs` reads)."""
IDLE_TIMEOUT = PREFIX + "idle-timeout"
"""The sandbox's ``idle_timeout`` in seconds (0: none), for the reaper: the SDK's
``Sandbox.list`` objects do not expose it."""


def fingerprint_inputs(options: ModalOptions) -> dict[str, Any]:
    """The options that shape a sandbox at creation (see :mod:`envlayer_modal.options`)."""
    return {
        "image": options.image,
        "cpu": options.cpu,
        "memory": options.memory,
        "gpu": options.gpu,
        "region": options.region,
        "cloud": options.cloud,
        "block_network": options.block_network,
        "secrets": sorted(options.secrets),
        "sandbox_timeout": options.sandbox_timeout,
        "idle_timeout": options.idle_timeout,
        "workdir": options.workdir,
        "environment_name": options.environment_name,
        "tags": dict(sorted(options.tags.items())),
    }


def sandbox_fingerprint(options: ModalOptions) -> str:
    """``v1-<32 hex>`` digest of :func:`fingerprint_inputs`."""
    return fingerprint(fingerprint_inputs(options))


def creator_label() -> str:
    """``<login name>@<host>`` for this process, sanitized; the host is the owner label's
    (host name and pid namespace, :mod:`envlayer.sandbox.owner`)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    host = (owner_label() or "--unknown").split("-", 2)[2]
    return sanitize(f"{user}@{host}")


def create_tags(
    *, profile: str, task: str, options: ModalOptions, persist: bool, owner: str | None, now: float | None = None
) -> dict[str, str]:
    """The full tag set of a new sandbox. User tags never override envlayer's."""
    tags = managed_tags(
        PREFIX,
        profile=profile,
        task=task,
        fingerprint_value=sandbox_fingerprint(options),
        persist=persist,
        extra=options.tags,
        owner=owner,
    )
    tags.update(
        {
            CREATED_AT: str(int(time.time() if now is None else now)),
            IDLE_TIMEOUT: str(options.idle_timeout or 0),
            CREATOR: creator_label(),
            OPTIONS: recorded_options.encode(recorded_options.record_of(options, SHAPING_OPTIONS)),
        }
    )
    return tags


def selector(*, profile: str | None, task: str | None = None) -> dict[str, str]:
    """Tags that select envlayer's sandboxes (of ``profile`` / ``task`` when given)."""
    return managed_selector(PREFIX, profile=profile, task=task)


def created_at(tags: Mapping[str, str]) -> float | None:
    """Epoch seconds from the created-at tag; None when missing or malformed."""
    return _number(tags, CREATED_AT)


def idle_timeout(tags: Mapping[str, str]) -> float | None:
    """The sandbox's idle timeout from its tag (0: none); None when missing or malformed."""
    return _number(tags, IDLE_TIMEOUT)


def _number(tags: Mapping[str, str], key: str) -> float | None:
    try:
        return float(tags[key])
    except (KeyError, ValueError):
        return None
