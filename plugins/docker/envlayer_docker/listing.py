"""Managed containers as the daemon lists them, and the daemon's timestamps: what the
reaper (:mod:`envlayer_docker.reaper`) and workspace retention
(:mod:`envlayer_docker.retention`) both read (the reaper calls retention; neither is
imported by this module)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from envlayer_docker import labels as L

_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
STALE_STATES = ("exited", "created", "dead")
"""Container states the reaper may remove: never running (again) on its own."""


def parse_docker_time(value: object) -> float | None:
    """Epoch seconds of a Docker timestamp (RFC 3339, nanoseconds allowed).

    ``None`` for anything that is not one: empty, non-string, Docker's zero time
    (``0001-01-01T00:00:00Z``) or malformed text. Pure; never raises.
    """
    if not isinstance(value, str):
        return None
    m = _TIME.match(value.strip())
    if not m:
        return None
    base, frac, tz = m.groups()
    if base.startswith("0001-"):
        return None
    micro = ((frac or "") + "000000")[:6]
    try:
        return datetime.fromisoformat(f"{base}.{micro}{'+00:00' if tz == 'Z' else tz}").timestamp()
    except ValueError:
        return None


def list_managed(
    api: Any, *, profile: str | None, task: str | None = None, states: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Container summaries of managed containers (``profile`` None: every profile)."""
    filters: dict[str, Any] = {"label": L.filters(profile=profile, task=task)}
    if states:
        filters["status"] = list(states)
    return api.containers(all=True, filters=filters)
