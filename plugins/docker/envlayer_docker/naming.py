"""Deterministic container names: the atomic "one container per (profile, task)" lock.

Docker refuses a second container with the same name (HTTP 409), so racing processes that
all try to create ``container_name(profile, task)`` end with exactly one winner, and the
losers attach to it. The name carries a readable part and a hash of the exact pair, so
different pairs never share a name even when their readable parts coincide.
"""

from __future__ import annotations

import hashlib
import secrets

from envlayer.sandbox.tags import slug as _slug

PREFIX = "envlayer"


def container_name(profile: str, task: str) -> str:
    """The persist-mode name for (profile, task): ``envlayer-<profile>-<task>-<hash16>``."""
    digest = hashlib.sha256(f"{profile}\0{task}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{PREFIX}-{_slug(profile, 24)}-{_slug(task, 40)}-{digest}"


def private_name(profile: str, task: str) -> str:
    """A unique name for a container owned by one environment (opt-out mode)."""
    return f"{container_name(profile, task)}-p{secrets.token_hex(4)}"
