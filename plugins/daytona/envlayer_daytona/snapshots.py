"""Daytona snapshots: a sandbox's filesystem as a Daytona snapshot, and sandboxes created
from it.

``create``: the SDK's ``Sandbox.create_snapshot(name)`` (the sandbox is ``snapshotting``
until its filesystem is captured; the SDK waits for that), then the snapshot is polled
(``daytona.snapshot.get``) until it is ``active``: only an active snapshot can be created
from. A fork is an ordinary create with ``snapshot`` set to it (the task's own name and
labels, see :func:`envlayer_daytona.sandbox.ensure`). Running processes are not carried.

Daytona snapshots carry no labels, so the name says whose it is:
``envlayer-s-<10 hex of sha256(profile)>-<name or task, slugged>-<8 hex>``. Listing
filters on that prefix; a listing row knows the profile only when it was asked for one,
and its source task only through the snapshot made in this process. Removing a snapshot
deletes it in Daytona; sandboxes already created from it keep running.

Retention (``snapshot_keep``, ``snapshot_max_age``; :func:`expire`) runs after each
snapshot is taken and in ``reap_orphans``, over the snapshots with the profile's name
prefix; a snapshot's age is its API record's ``createdAt``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from envlayer.errors import BackendUnavailable
from envlayer.sandbox.tags import slug
from envlayer.snapshot import Snapshot, apply_retention
from envlayer_daytona import sdk

if TYPE_CHECKING:
    from envlayer_daytona.options import DaytonaOptions

PREFIX = "envlayer-s-"
_PAGE = 100
_POLL = 0.2


def profile_prefix(profile: str) -> str:
    """The name prefix of ``profile``'s snapshots."""
    return f"{PREFIX}{hashlib.sha256(profile.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}-"


def _state(snapshot: Any) -> str:
    return str(getattr(snapshot.state, "value", snapshot.state))


def _from(snapshot: Any, *, profile: str, source_task: str = "") -> Snapshot:
    label = snapshot.name[len(PREFIX) + 11 :].rsplit("-", 1)[0]
    created = snapshot.created_at
    return Snapshot(
        backend="daytona",
        id=snapshot.name,
        name=label,
        profile=profile,
        source_task=source_task,
        created=created.isoformat(timespec="microseconds") if hasattr(created, "isoformat") else str(created),
    )


def create(
    client: Any, sandbox: Any, *, profile: str, task: str, name: str | None, options: DaytonaOptions
) -> Snapshot:
    """Snapshot ``sandbox`` (see the module docstring); waits up to ``options.create_timeout``
    seconds for it to be active, then removes the profile's snapshots beyond the retention
    options (:func:`expire`; the new one is kept). Raises :class:`BackendUnavailable` when
    it fails or does not become active in time; the SDK's errors otherwise."""
    snapshot_name = f"{profile_prefix(profile)}{slug(name or task, 40)}-{secrets.token_hex(4)}"
    snapshot = _wait_active(client, sandbox, snapshot_name, profile=profile, task=task, timeout=options.create_timeout)
    expire(client, options, profile=profile, spare=snapshot.id)
    return snapshot


def _wait_active(client: Any, sandbox: Any, snapshot_name: str, *, profile: str, task: str, timeout: float) -> Snapshot:
    """Ask Daytona for snapshot ``snapshot_name`` of ``sandbox`` and poll it until active."""
    sandbox.create_snapshot(snapshot_name, timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        found = client.snapshot.get(snapshot_name)
        state = _state(found)
        if state == "active":
            return _from(found, profile=profile, source_task=task)
        if state in ("error", "build_failed"):
            raise BackendUnavailable(
                f"Daytona could not make snapshot {snapshot_name} ({state}): {found.error_reason or 'no reason given'}",
                hint="check the sandbox's disk usage and the snapshot in the Daytona dashboard",
            )
        if time.monotonic() > deadline:
            raise BackendUnavailable(
                f"snapshot {snapshot_name} was not active within {timeout:g} s (state: {state})",
                hint="raise create_timeout; a large filesystem takes longer to capture",
            )
        time.sleep(_POLL)


def expire(
    client: Any, options: DaytonaOptions, *, profile: str, dry_run: bool = False, spare: str = ""
) -> list[Snapshot]:
    """Remove ``profile``'s snapshots beyond the retention options (``snapshot_keep``,
    ``snapshot_max_age``; see :func:`envlayer.snapshot.apply_retention`) but ``spare``;
    what was (or, with ``dry_run``, would be) removed."""
    return apply_retention(
        list_all(client, profile=profile), options, lambda ident: remove(client, ident), dry_run=dry_run, spare=spare
    )


def list_all(client: Any, *, profile: str | None) -> list[Snapshot]:
    """envlayer's snapshots (of ``profile``; None: of every profile), newest first."""
    prefix = PREFIX if profile is None else profile_prefix(profile)
    found: list[Snapshot] = []
    page = 1
    while True:
        answer = client.snapshot.list(page=page, limit=_PAGE)
        found += [_from(s, profile=profile or "") for s in answer.items if s.name.startswith(prefix)]
        if page >= answer.total_pages:
            return sorted(found, key=lambda s: s.created, reverse=True)
        page += 1


def remove(client: Any, snapshot_id: str) -> list[Snapshot]:
    """Delete snapshot ``snapshot_id``; [] when it is not one of envlayer's or is gone."""
    if not snapshot_id.startswith(PREFIX):
        return []
    try:
        found = client.snapshot.get(snapshot_id)
        client.snapshot.delete(found)
    except sdk.errors.DaytonaNotFoundError:
        return []
    return [_from(found, profile="")]
