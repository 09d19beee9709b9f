"""Modal snapshots: a sandbox's filesystem as a Modal Image, and a record of it.

``create``: ``Sandbox.snapshot_filesystem()`` (for the V2 sandboxes envlayer makes, one
``TaskSnapshotFilesystem`` call to the task command router that answers once the Image
exists: ``snapshot_filesystem_via_tcr`` in ``modal/sandbox/_common.py``) gives an Image
``im-...``, kept by Modal for :data:`TTL_SECONDS` (the SDK's default, 30 days). A fork's
sandbox is created from ``Image.from_id`` of it. Running processes are not carried.

Modal Images carry no labels, so the profile, source task, name, creation time and owner
live in a record this backend keeps: one JSON file per snapshot in
``$XDG_STATE_HOME/envlayer/modal-snapshots/`` (default ``~/.local/state``). Listing reads
those records (of one profile, or all), so it shows the snapshots taken on this machine
by this user; records older than the Image's TTL are dropped as expired. Removing a
snapshot deletes its Image (``modal.experimental.image_delete``, the ``ImageDelete`` RPC;
sandboxes already started from it keep running) and then its record.

Retention (``snapshot_keep``, ``snapshot_max_age``; :func:`expire`) is applied to the
recorded snapshots of the profile after each snapshot is taken and by the reaper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from envlayer.errors import InvalidArgument
from envlayer.sandbox.owner import owner_label
from envlayer.snapshot import Snapshot, apply_retention
from envlayer_modal import sdk
from envlayer_modal.client import Connection, control, throttled, translate

TTL_SECONDS = 30 * 24 * 3600
"""How long Modal keeps a snapshot's Image (``snapshot_filesystem``'s default ``ttl``)."""
SNAPSHOT_TIMEOUT = 300
"""Seconds ``snapshot_filesystem`` may take before the SDK gives up (``timeout``)."""


def record_dir() -> Path:
    """Where the records live (see the module docstring)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "envlayer" / "modal-snapshots"


def _record_path(image_id: str) -> Path:
    if not image_id.startswith("im-") or "/" in image_id or len(image_id) > 80:
        raise InvalidArgument("snapshot_id", f"{image_id!r} is not a Modal snapshot id", hint="ids look like im-...")
    return record_dir() / f"{image_id}.json"


def _write_record(snapshot: Snapshot) -> None:
    path = _record_path(snapshot.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(snapshot)))
    os.replace(tmp, path)


def _read_record(path: Path) -> Snapshot | None:
    try:
        return Snapshot(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def create(conn: Connection, sandbox: Any, *, profile: str, task: str, name: str | None) -> Snapshot:
    """Snapshot ``sandbox``'s filesystem and record it, then apply the retention options
    of ``conn.options`` to the profile's snapshots (module docstring)."""
    try:
        image = control(
            lambda: sandbox.snapshot_filesystem(timeout=SNAPSHOT_TIMEOUT, ttl=TTL_SECONDS),
            "taking a snapshot",
            throttled,  # not idempotent: a retry after it ran would make a second Image
        )
    except Exception as exc:
        raise translate(exc, "taking a snapshot") from exc
    snapshot = Snapshot(
        backend="modal",
        id=str(image.object_id),
        name=name or task,
        profile=profile,
        source_task=task,
        # Microseconds: retention orders a profile's snapshots by this time.
        created=datetime.now().astimezone().isoformat(timespec="microseconds"),
        owner=owner_label() or "",
    )
    _write_record(snapshot)
    expire(conn, profile=profile, spare=snapshot.id)
    return snapshot


def expire(conn: Connection, *, profile: str, dry_run: bool = False, spare: str = "") -> list[Snapshot]:
    """Remove the recorded snapshots of ``profile`` beyond the retention options of
    ``conn.options`` (``snapshot_keep``, ``snapshot_max_age``; see
    :func:`envlayer.snapshot.apply_retention`) but ``spare``; what was (or, with
    ``dry_run``, would be) removed."""
    return apply_retention(
        list_all(profile=profile), conn.options, lambda ident: remove(conn, ident), dry_run=dry_run, spare=spare
    )


def image_of(conn: Connection, snapshot: Snapshot) -> Any:
    """The SDK Image of ``snapshot``, resolved (``ImageFromId``) when a sandbox is created
    from it: the SDK cannot hydrate an Image on demand. A snapshot Modal no longer has then
    fails the create with :class:`InvalidArgument` (``envlayer_modal.sandbox``)."""
    return sdk.modal.Image.from_id(snapshot.id, client=conn.client)


def list_all(*, profile: str | None) -> list[Snapshot]:
    """The recorded snapshots of ``profile`` (None: every profile), newest first; records
    past the Image's TTL are removed."""
    found = []
    expired = datetime.now().astimezone() - timedelta(seconds=TTL_SECONDS)
    for path in sorted(record_dir().glob("im-*.json")):
        snapshot = _read_record(path)
        if snapshot is None:
            continue
        with contextlib.suppress(ValueError):
            if datetime.fromisoformat(snapshot.created) < expired:
                path.unlink(missing_ok=True)
                continue
        if profile is None or snapshot.profile == profile:
            found.append(snapshot)
    return sorted(found, key=lambda s: s.created, reverse=True)


def remove(conn: Connection, snapshot_id: str) -> list[Snapshot]:
    """Delete snapshot ``snapshot_id``'s Image and record; [] when there is no record of
    it. An Image Modal no longer has counts as deleted."""
    if not snapshot_id.startswith("im-"):
        return []
    path = _record_path(snapshot_id)
    snapshot = _read_record(path)
    if snapshot is None:
        return []
    try:
        control(lambda: sdk.experimental.image_delete(snapshot_id, client=conn.client), f"deleting image {snapshot_id}")
    except sdk.exception.NotFoundError:
        pass
    except Exception as exc:
        raise translate(exc, f"removing snapshot {snapshot_id}") from exc
    path.unlink(missing_ok=True)
    return [snapshot]
