"""Local snapshots: a copy of the task's directory, and forks that each get their own copy.

The local backend has no sandbox of its own: a task runs in the ``cwd`` directory. A
snapshot is a copy of the task's own directory, the ``cwd`` option (or a fork's copy),
never the directory the calling process stands in (only it: the rest of the machine,
running processes and the environment are not carried) in the snapshot store,
``snapshot_dir`` (default ``${XDG_STATE_HOME:-~/.local/state}/envlayer/snapshots``)::

    <store>/<id>/files/        the copy
    <store>/<id>/snapshot.json the Snapshot's fields

A fork gets a private copy of ``files`` in ``<store>/forks/<id>-<task>-<hex>/`` and runs
there; its ``cleanup()`` deletes that copy (local keeps nothing after cleanup). Removing a
snapshot deletes its directory; forks keep their own copies.

Copies are made with GNU ``cp -a --reflink=auto`` where that ``cp`` is on PATH: a
copy-on-write clone (FICLONE) on filesystems that have it (Btrfs, XFS with reflink,
bcachefs, ZFS 2.2+), a full copy elsewhere (ext4); without GNU ``cp`` it is
:func:`shutil.copytree` (a full copy, symlinks kept as links).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import asdict
from datetime import datetime

from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.sandbox.owner import owner_label
from envlayer.sandbox.tags import slug
from envlayer.sandbox.tar_stream import tree_size
from envlayer.snapshot import Snapshot

FILES = "files"
META = "snapshot.json"
FORKS = "forks"
_GNU_CP: bool | None = None
log = logging.getLogger("envlayer.snapshots")


def default_store() -> str:
    """``${XDG_STATE_HOME:-~/.local/state}/envlayer/snapshots``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "envlayer", "snapshots")


def store_path(configured: str) -> str:
    """The snapshot store: ``configured`` (``~`` expanded) or :func:`default_store`."""
    return os.path.abspath(os.path.expanduser(configured)) if configured else default_store()


def _gnu_cp() -> bool:
    """Whether ``cp`` on PATH is GNU's (it has ``--reflink``); asked once."""
    global _GNU_CP
    if _GNU_CP is None:
        try:
            out = subprocess.run(["cp", "--version"], capture_output=True, check=False, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = b""
        _GNU_CP = b"GNU coreutils" in out
    return _GNU_CP


def copy_tree(source: str, target: str) -> None:
    """Copy directory ``source`` to the new directory ``target`` (see the module
    docstring for how). Raises :class:`BackendUnavailable` naming ``cp``'s error."""
    if not _gnu_cp():
        try:
            shutil.copytree(source, target, symlinks=True)
        except (OSError, shutil.Error) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise BackendUnavailable(
                f"copying {source} failed: {exc}",
                hint="check the directory's permissions and the free space of the snapshot store",
            ) from exc
        return
    os.makedirs(target)
    done = subprocess.run(["cp", "-a", "--reflink=auto", "--", f"{source}/.", target], capture_output=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise BackendUnavailable(
            f"copying {source} failed: {done.stderr.decode(errors='replace').strip()}",
            hint="check the directory's permissions and the free space of the snapshot store",
        )


def human_bytes(size: int) -> str:
    """``size`` in the largest binary unit that keeps it at least 1 (``2.0 GiB``)."""
    value, unit = float(size), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def check_size(cwd: str, limit: int, task: str) -> None:
    """Log the size of ``cwd``; raise :class:`InvalidArgument` (nothing copied) when it is
    over ``limit`` bytes (0: no limit)."""
    files, size = tree_size(cwd)
    shown = f"{human_bytes(size)} in {files} files"
    log.info("snapshot of task %s: copying %s (%s)", task, cwd, shown)
    if limit and size > limit:
        raise InvalidArgument(
            "snapshot_max_bytes",
            f"the directory of task {task!r}, {cwd}, holds {shown}, over the local snapshot limit of "
            f"{human_bytes(limit)}; nothing was copied",
            hint=f"raise the limit: -o snapshot_max_bytes={size} (0: no limit), or point the cwd option "
            "at a smaller directory",
        )


def create(store: str, cwd: str, *, profile: str, task: str, name: str | None, limit: int) -> Snapshot:
    """Copy ``cwd`` into a new snapshot in ``store`` after :func:`check_size` against
    ``limit``; removed again on failure."""
    if not os.path.isdir(cwd):
        raise InvalidArgument("cwd", f"working directory {cwd} does not exist", hint="create it, or set cwd")
    root, kept = os.path.realpath(cwd), os.path.realpath(store)
    if root == "/" or kept == root or kept.startswith(root.rstrip("/") + "/"):
        raise InvalidArgument(
            "cwd",
            f"task {task!r} works in {cwd}, which holds the snapshot store {store} (or is the root "
            "directory); a snapshot would copy the store into itself; nothing was copied",
            hint="give the task a directory of its own (-o cwd=DIR), or move the store (-o snapshot_dir=DIR)",
        )
    check_size(cwd, limit, task)
    label = name or task
    ident = f"{slug(label, 40)}-{secrets.token_hex(4)}"
    created = datetime.now().astimezone().isoformat(timespec="microseconds")
    snap = Snapshot("local", ident, label, profile, task, created, owner_label() or "")
    home = os.path.join(store, ident)
    os.makedirs(home)
    try:
        copy_tree(cwd, os.path.join(home, FILES))
        with open(os.path.join(home, META), "w", encoding="utf-8") as f:
            json.dump(asdict(snap), f)
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return snap


def list_all(store: str, *, profile: str | None) -> list[Snapshot]:
    """The complete snapshots in ``store`` of ``profile`` (None: all), newest first."""
    found = []
    for entry in os.listdir(store) if os.path.isdir(store) else []:
        try:
            with open(os.path.join(store, entry, META), encoding="utf-8") as f:
                snap = Snapshot(**json.load(f))
        except (OSError, ValueError, TypeError):
            continue  # the forks directory, or a snapshot still being written
        if profile is None or snap.profile == profile:
            found.append(snap)
    return sorted(found, key=lambda s: s.created, reverse=True)


def remove(store: str, snapshot_id: str) -> list[Snapshot]:
    """Delete snapshot ``snapshot_id``; what was removed ([] when there is none)."""
    match = [s for s in list_all(store, profile=None) if s.id == snapshot_id]
    for snap in match:
        shutil.rmtree(os.path.join(store, snap.id), ignore_errors=True)
    return match


def make_fork_directory(store: str, snapshot: Snapshot, task: str) -> str:
    """A private copy of ``snapshot``'s files for a fork running as ``task``; its path.
    Raises :class:`InvalidArgument` when the snapshot is not in ``store``."""
    files = os.path.join(store, snapshot.id, FILES)
    if not os.path.isfile(os.path.join(store, snapshot.id, META)):
        raise InvalidArgument(
            "from_snapshot",
            f"no local snapshot {snapshot.id!r} in {store}",
            hint="list them with `envlayer snapshots ls`; the store is the snapshot_dir option",
        )
    target = os.path.join(store, FORKS, f"{snapshot.id}-{slug(task, 40)}-{secrets.token_hex(4)}")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    copy_tree(files, target)
    return target
