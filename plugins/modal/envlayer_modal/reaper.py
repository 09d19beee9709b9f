"""Finding envlayer's sandboxes by tag, and the reaper.

Listing (:func:`list_managed`): ``Sandbox.list(app_id=, tags=)`` in the configured App,
filtered server-side by envlayer's tags (managed, profile, task), then ``get_tags`` on each
for the rest. Only running sandboxes are listed: a terminated one costs nothing.

Reaper (:func:`reap`), only ever for sandboxes tagged with THIS profile:

* a private sandbox (``envlayer.persist=0``) whose owner process on this host is gone
  (:func:`envlayer.sandbox.owner.owner_is_dead`) is terminated whatever its age;
* any other sandbox is terminated when it has been unused for ``max_age`` seconds (the
  last-used lease, ``/tmp/.envlayer-lease`` touched by commands, or the created-at tag
  when there is none) AND no process started by a command is alive in it. Both are read
  by one exec inside the sandbox just before the decision; anything unexpected means
  "keep it". So a sandbox running a command, and every other profile's sandbox, is spared.

Modal counts that exec as activity, so it restarts the sandbox's ``idle_timeout``. The SDK
gives no last-activity time for a sandbox (``Sandbox.list`` objects carry neither it nor
the idle timeout), so the probe is skipped where the tags already decide
(:func:`needs_probe`): a sandbox younger than ``max_age`` cannot have been unused that long,
and one whose own idle timeout is at most ``max_age`` is left to Modal, which ends it once
it is idle that long.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.execution.shell_script import SESSION_VAR
from envlayer.sandbox.idle_check import idle_check_script, parse_idle_check
from envlayer.sandbox.owner import owner_is_dead
from envlayer_modal import sdk
from envlayer_modal import tags as T
from envlayer_modal.client import Connection, control

log = logging.getLogger("envlayer.modal.reaper")
LEASE_PATH = "/tmp/.envlayer-lease"
_WORKERS = 8

IDLE_CHECK = idle_check_script(LEASE_PATH, SESSION_VAR)
"""Prints ``<now> <lease mtime or -> <busy 0|1>`` from inside the sandbox."""


def list_managed(conn: Connection, *, profile: str | None, task: str | None = None) -> list[tuple[Any, dict[str, str]]]:
    """(sandbox, tags) of the running envlayer sandboxes in the App (of ``profile`` /
    ``task`` when given). A sandbox that ends while being listed is left out."""
    listed = control(
        lambda: list(
            sdk.modal.Sandbox.list(app_id=conn.app_id, tags=T.selector(profile=profile, task=task), client=conn.client)
        ),
        "listing sandboxes",
    )
    found = []
    for sb in listed:
        try:
            found.append((sb, control(sb.get_tags, f"reading the tags of {sb.object_id}")))
        except sdk.exception.NotFoundError:
            continue
    return found


def info_from(sb: Any, tags: dict[str, str], status: str = "running") -> SandboxInfo:
    """A :class:`SandboxInfo` for a listed sandbox."""
    created = T.created_at(tags)
    return SandboxInfo(
        backend="modal",
        id=str(sb.object_id),
        task=tags.get(T.TASK, ""),
        profile=tags.get(T.PROFILE, ""),
        status=status,
        created=datetime.fromtimestamp(created).astimezone().isoformat(timespec="seconds") if created else "",
        detail={
            "sandbox_id": str(sb.object_id),
            "fingerprint": tags.get(T.FINGERPRINT, ""),
            "persist": tags.get(T.PERSIST, ""),
        },
    )


def idle_output(sb: Any, shell: str) -> bytes:
    """Run :data:`IDLE_CHECK` in ``sb``; its output (empty when it failed)."""
    proc = sb.exec(shell, "-c", IDLE_CHECK, text=False, timeout=60)
    out = proc.stdout.read()
    return out if proc.wait() == 0 else b""


def needs_probe(tags: Mapping[str, str], max_age: float, *, now: float | None = None) -> bool:
    """Whether the reaper must look inside a sandbox with these tags (module docstring);
    unknown or malformed tags mean "probe"."""
    created = T.created_at(tags)
    if created is not None and (time.time() if now is None else now) - created < max_age:
        return False
    idle = T.idle_timeout(tags)
    return not (idle is not None and 0 < idle <= max_age)


def reap(conn: Connection, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
    """Terminate this profile's orphaned sandboxes (module rules). Returns what was (or,
    with ``dry_run``, would be) terminated. Raises only when listing fails."""
    shell = conn.options.shell

    def one(item: tuple[Any, dict[str, str]]) -> SandboxInfo | None:
        sb, tags = item
        try:
            owner = tags.get(T.OWNER)
            orphan = tags.get(T.PERSIST) == "0" and bool(owner) and owner_is_dead(owner or "")
            if not orphan and not needs_probe(tags, max_age):
                return None
            if not orphan and not parse_idle_check(idle_output(sb, shell), T.created_at(tags), max_age):
                return None
            info = info_from(sb, tags, "terminated" if not dry_run else "running")
            if not dry_run:
                control(sb.terminate, f"terminating {sb.object_id}")
            return info
        except Exception as exc:
            log.warning("reaper: skipping %s: %r", getattr(sb, "object_id", "?"), exc)
            return None

    return _parallel(one, list_managed(conn, profile=profile))


def _parallel(fn: Callable[[Any], SandboxInfo | None], items: list[Any]) -> list[SandboxInfo]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items)), thread_name_prefix="envlayer-modal-reap") as pool:
        return [r for r in pool.map(fn, items) if r is not None]
