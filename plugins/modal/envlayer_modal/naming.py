"""Deterministic sandbox names: the atomic "one sandbox per (profile, task)" lock.

Modal refuses a second running sandbox with the same name in an App (``AlreadyExistsError``),
so processes racing to create ``sandbox_name(profile, task)`` end with one winner and the
losers attach with ``Sandbox.from_name``. Names are at most 63 characters of
``[A-Za-z0-9._-]`` (Modal's rule), with a hash of the exact pair so different pairs never
collide even when their readable parts do.
"""

from __future__ import annotations

import hashlib
import secrets

from envlayer.sandbox.tags import slug as _slug


def sandbox_name(profile: str, task: str) -> str:
    """The persist-mode name of (profile, task): ``el-<profile>-<task>-<hash16>``, <= 63 chars."""
    digest = hashlib.sha256(f"{profile}\0{task}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"el-{_slug(profile, 18)}-{_slug(task, 24)}-{digest}"


def private_name(profile: str, task: str) -> str:
    """A unique name for a private sandbox (opt-out mode), also <= 63 chars."""
    return f"el-{_slug(profile, 18)}-{_slug(task, 24)}-p{secrets.token_hex(7)}"
