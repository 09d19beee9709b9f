"""Listing, removing and reaping managed sandboxes, always by labels and never across profiles.

Reaper rules (:func:`reap`): only sandboxes labelled ``envlayer.managed=1`` AND this profile;
only states ``stopped``, ``archived``, ``error`` and ``build_failed``; only when the latest of
``updatedAt``, ``lastActivityAt`` and the ``envlayer.created-at`` label is older than
``max_age`` seconds (no parseable time: left alone). Running sandboxes are never reaped:
Daytona's auto-stop stops an abandoned one, then it becomes reapable (and a private one,
created with ``auto_delete_interval = 0``, is deleted by Daytona as soon as it stops). One
failure is logged and the sweep goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable
from envlayer_daytona import identity, sdk
from envlayer_daytona.client import retrying, translate
from envlayer_daytona.options import DaytonaOptions
from envlayer_daytona.sandbox import remove as remove_one

log = logging.getLogger("envlayer.daytona.reaper")
STALE_STATES = ("stopped", "archived", "error", "build_failed")


def _state(sandbox: Any) -> str:
    state = sandbox.state
    return str(getattr(state, "value", state) or "")


def info_from(sandbox: Any) -> SandboxInfo:
    """A :class:`SandboxInfo` for an SDK sandbox."""
    labels = sandbox.labels or {}
    return SandboxInfo(
        backend="daytona",
        id=sandbox.id,
        task=labels.get(identity.TASK, ""),
        profile=labels.get(identity.PROFILE, ""),
        status=_state(sandbox),
        created=labels.get(identity.CREATED_AT, "") or str(getattr(sandbox, "created_at", "") or ""),
        detail={
            "name": sandbox.name,
            "fingerprint": labels.get(identity.FINGERPRINT, ""),
            "persist": labels.get(identity.PERSIST, ""),
            "last_activity": str(getattr(sandbox, "last_activity_at", "") or ""),
            "target": str(getattr(sandbox, "target", "") or ""),
        },
    )


def list_managed(client: Any, *, profile: str | None, task: str | None = None) -> list[Any]:
    """SDK sandboxes labelled as managed (of ``profile``/``task``; every profile when None)."""
    query = sdk.daytona.ListSandboxesQuery(labels=identity.selector(profile=profile, task=task))
    return retrying(lambda: list(client.list(query)), "listing sandboxes")


def last_seen(sandbox: Any) -> float | None:
    """Epoch seconds of the sandbox's latest known change, or None when nothing parses."""
    times = [
        identity.parse_time(getattr(sandbox, "updated_at", None)),
        identity.parse_time(getattr(sandbox, "last_activity_at", None)),
        identity.parse_time((sandbox.labels or {}).get(identity.CREATED_AT)),
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def is_reapable(sandbox: Any, *, profile: str, max_age: float, now: float) -> bool:
    """The reaper's rule for one sandbox (module docstring). Pure."""
    labels = sandbox.labels or {}
    if labels.get(identity.MANAGED) != "1" or labels.get(identity.PROFILE) != profile:
        return False
    if _state(sandbox) not in STALE_STATES:
        return False
    seen = last_seen(sandbox)
    return seen is not None and now - seen > max_age


def _delete_each(sandboxes: list[Any], *, timeout: float, dry_run: bool = False) -> list[SandboxInfo]:
    """Delete each sandbox (unless ``dry_run``); one failure is logged and skipped. Returns
    the :class:`SandboxInfo` of those deleted (or, ``dry_run``, of all of them)."""
    removed = []
    for sandbox in sandboxes:
        if not dry_run:
            try:
                retrying(lambda s=sandbox: s.delete(timeout=timeout), f"deleting sandbox {sandbox.name}")
            except Exception as exc:
                log.warning("could not delete sandbox %s: %s", sandbox.name, exc)
                continue
        removed.append(info_from(sandbox))
    return removed


def reap(client: Any, *, profile: str, max_age: float, dry_run: bool, timeout: float) -> list[SandboxInfo]:
    """Delete this profile's stale sandboxes; returns what was (with ``dry_run``: would be)
    removed. Raises only when listing fails."""
    now = time.time()
    stale = [
        s for s in list_managed(client, profile=profile) if is_reapable(s, profile=profile, max_age=max_age, now=now)
    ]
    return _delete_each(stale, timeout=timeout, dry_run=dry_run)


def remove(client: Any, *, profile: str, task: str, force: bool, options: DaytonaOptions) -> list[SandboxInfo]:
    """Delete (profile, task)'s sandboxes: stopped ones, and running ones too with ``force``,
    each waited for until Daytona says it is gone (a state change under way, 409, is waited
    out: :func:`envlayer_daytona.sandbox.remove`). Returns what was removed; raises
    :class:`BackendUnavailable` naming every sandbox that is still there."""
    removed, failed, hint = [], [], ""
    for sandbox in list_managed(client, profile=profile, task=task):
        if not force and _state(sandbox) == "started":
            continue
        try:
            remove_one(sandbox, options)
        except Exception as exc:
            error = translate(exc, "deleting it", options)
            failed.append(f"{sandbox.name} ({_state(sandbox)}): {error.message}")
            hint = error.hint
            continue
        removed.append(info_from(sandbox))
    if failed:
        done = f"; removed {', '.join(i.detail['name'] for i in removed)}" if removed else ""
        raise BackendUnavailable(
            f"could not remove {len(failed)} sandbox(es) of task {task!r}, still there: {'; '.join(failed)}{done}",
            hint=f"{hint}; if it persists, delete it in the Daytona dashboard",
        )
    return removed
