"""Snapshots and forks: many sandboxes started from one prepared state.

A :class:`Snapshot` is a backend's managed, labelled copy of one sandbox's filesystem
(and of its workspace, where the backend keeps one apart) at one moment. It is made by
``env.snapshot(name)`` and used by ``open_environment(backend, task_id=...,
from_snapshot=snap)`` and ``env.fork(task_ids)``. Which backends have it, and what is
carried, is in docs/snapshots.md. Running processes are never carried: a fork starts
with a fresh shell.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal  # noqa: F401 - pdoc evaluates the inherited options annotations (Literal) here

from envlayer.environment import SandboxInfo
from envlayer.errors import InvalidArgument
from envlayer.options import BaseOptions, OptionError, option

if TYPE_CHECKING:
    from envlayer.environment import Environment

log = logging.getLogger("envlayer.snapshot")

MAX_FORKS = 64
"""Most environments one :func:`create_forks` call makes."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Snapshot:
    """A snapshot as its backend stores it.

    ``id`` is the backend's reference (Docker: the image ``envlayer-snapshot:<tag>``);
    ``created`` is an ISO 8601 time; ``owner`` the process that made it (see
    :mod:`envlayer.sandbox.owner`, "" where unknown)."""

    backend: str
    id: str
    name: str
    profile: str
    source_task: str
    created: str
    owner: str = ""

    def info(self) -> SandboxInfo:
        """The snapshot as a listing row (status ``snapshot``), for ``envlayer snapshots ls``."""
        return SandboxInfo(
            backend=self.backend,
            id=self.id,
            task=self.source_task,
            profile=self.profile,
            status="snapshot",
            created=self.created,
            detail={"name": self.name, "owner": self.owner},
        )


def check_snapshot_name(name: str | None) -> None:
    """Raise :class:`InvalidArgument` unless ``name`` is None or 1-64 characters of
    ``[A-Za-z0-9_.-]`` starting with a letter or digit."""
    if name is not None and not _NAME.match(name):
        raise InvalidArgument(
            "name",
            f"{name!r} is not a valid snapshot name",
            hint="use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )


def check_fork_tasks(task_ids: Sequence[str], source_task: str) -> list[str]:
    """The task ids of a fork, checked: a non-empty list of distinct strings, at most
    :data:`MAX_FORKS`, none equal to the source task. Raises :class:`InvalidArgument`."""
    if isinstance(task_ids, str) or not task_ids:
        raise InvalidArgument("task_ids", "must be a non-empty list of task ids", hint='e.g. env.fork(["a", "b"])')
    tasks = list(task_ids)
    if len(tasks) > MAX_FORKS:
        raise InvalidArgument("task_ids", f"at most {MAX_FORKS} forks per call, got {len(tasks)}")
    if len(set(tasks)) != len(tasks) or source_task in tasks:
        raise InvalidArgument(
            "task_ids", "must be distinct and differ from the source task", hint="give each fork a new task id"
        )
    return tasks


def create_forks(
    make: Callable[[str], Environment], task_ids: Sequence[str], discard: Callable[[Environment], None]
) -> list[Environment]:
    """``make(task_id)`` for every task, concurrently; the environments in the order of
    ``task_ids``. When one fails, ``discard(env)`` removes each one already made (the
    dispatcher passes a purging cleanup that waits for the teardown) and the first error
    is raised."""
    made: dict[str, Environment] = {}
    error: BaseException | None = None
    with ThreadPoolExecutor(max_workers=min(8, len(task_ids)), thread_name_prefix="envlayer-fork") as pool:
        futures = {pool.submit(make, task): task for task in task_ids}
        for future in as_completed(futures):
            try:
                made[futures[future]] = future.result()
            except BaseException as exc:
                error = error or exc
    if error is not None:
        for env in made.values():
            discard(env)
        raise error
    return [made[task] for task in task_ids]


# --- retention ---------------------------------------------------------------------------

DEFAULT_SNAPSHOT_MAX_AGE = 14 * 86400.0
"""Snapshots older than this (seconds) are removed, unless ``snapshot_max_age`` says otherwise."""


@dataclass(kw_only=True)
class SnapshotRetentionOptions(BaseOptions):
    """The retention options of a backend with ``snapshot`` (a mixin of its options class).

    Applied to the snapshots of one profile on the backend, when a snapshot is taken and
    (on backends with a reaper) by ``reap_orphans``: :func:`apply_retention`."""

    snapshot_keep: int | None = option(
        None,
        doc="Keep at most this many snapshots per profile: taking a snapshot (and the reaper) removes the oldest "
        "beyond it. Unset or 0: no limit. Forks made from a removed snapshot keep working.",
    )
    snapshot_max_age: float | None = option(
        DEFAULT_SNAPSHOT_MAX_AGE,
        doc="Remove the profile's snapshots older than this many seconds, when a snapshot is taken and by the "
        "reaper. Default 14 days; 0 or unset: no age limit.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("snapshot_keep", "snapshot_max_age"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise OptionError(key, "must be >= 0 (0 or unset: no limit)")
            if value == 0:
                setattr(self, key, None)


def expired(snapshots: Sequence[Snapshot], options: BaseOptions, *, now: datetime) -> list[Snapshot]:
    """The snapshots (of one profile) that ``options``' retention removes: beyond the
    ``snapshot_keep`` newest, or created more than ``snapshot_max_age`` seconds before
    ``now`` (an aware time). A snapshot whose creation time cannot be read is only
    counted. Options without the retention fields remove nothing. Pure."""
    keep = getattr(options, "snapshot_keep", None)
    max_age = getattr(options, "snapshot_max_age", None)
    newest_first = sorted(snapshots, key=lambda s: s.created, reverse=True)
    out = newest_first[keep:] if keep else []
    for snap in newest_first[: keep or len(newest_first)]:
        try:
            age = (now - datetime.fromisoformat(snap.created)).total_seconds()
        except (ValueError, TypeError):
            continue
        if max_age is not None and age > max_age:
            out.append(snap)
    return out


def apply_retention(
    snapshots: Sequence[Snapshot],
    options: BaseOptions,
    remove: Callable[[str], object],
    *,
    dry_run: bool = False,
    spare: str = "",
) -> list[Snapshot]:
    """Remove (``remove(snapshot_id)``, unless ``dry_run``) the :func:`expired` ones of
    ``snapshots`` but ``spare`` (the snapshot just taken); what was (or would be)
    removed. A failed removal is logged and skipped (another process may have removed it)."""
    gone = [s for s in expired(snapshots, options, now=datetime.now().astimezone()) if s.id != spare]
    for snap in [] if dry_run else gone:
        try:
            remove(snap.id)
        except Exception:
            log.warning("retention: could not remove snapshot %s", snap.id, exc_info=True)
    return gone
