"""Kubernetes snapshots: a pod's working directory as a labelled tar kept on the client.

Where a snapshot lives: no cluster object can hold a workspace portably (a ConfigMap or
Secret holds 1 MiB; a CSI ``VolumeSnapshot`` needs a snapshot class and a
PersistentVolumeClaim, and the pod's workspace is an ``emptyDir`` or the container's own
filesystem). So :func:`create` packs the working directory (``workdir``) in the pod with
``tar`` over exec and keeps it in ``snapshot_dir`` on the machine that took it:
``<id>.tar`` and ``<id>.json``, the labels (backend, profile, namespace, API server,
source task, name, creation time, owner). The ``.json`` is written last: a snapshot
exists once it is there. Listing and removal see only the snapshots of the options'
namespace and API server (and of a profile, when given).

A fork's pod is created as usual; the tar is unpacked into its working directory before
the environment is returned (:func:`restore`). Carried: the working directory. Not
carried: the rest of the container's filesystem (it comes from the image) and running
processes. Removing a snapshot deletes its two files; forks already made hold their own
copy and keep working. Retention (``snapshot_keep``, ``snapshot_max_age``; :func:`expire`)
is applied to the profile's snapshots of the namespace and API server after each snapshot
is taken and by the reaper.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any

from envlayer.errors import BackendUnavailable, FileTooLarge, InvalidArgument
from envlayer.sandbox.owner import owner_label
from envlayer.sandbox.tags import slug
from envlayer.snapshot import Snapshot, apply_retention
from envlayer_kubernetes.files import PACK, UNPACK, Runner
from envlayer_kubernetes.options import KubernetesOptions

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}-[0-9a-f]{8}$")
"""A snapshot id: the slug of its name (or source task) and 8 hex digits."""


def directory(opts: KubernetesOptions) -> Path:
    """Where snapshots are kept: ``snapshot_dir``, else
    ``$XDG_STATE_HOME/envlayer/kubernetes-snapshots`` (``~/.local/state`` by default)."""
    if opts.snapshot_dir:
        return Path(opts.snapshot_dir).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "envlayer" / "kubernetes-snapshots"


def _scope(namespace: str, server: str) -> dict[str, str]:
    return {"namespace": namespace, "server": server}


def _from_record(record: dict[str, Any]) -> Snapshot:
    return Snapshot(
        backend="kubernetes",
        id=record["id"],
        name=record["name"],
        profile=record["profile"],
        source_task=record["source_task"],
        created=record["created"],
        owner=record.get("owner", ""),
    )


def create(
    run: Runner, opts: KubernetesOptions, *, namespace: str, server: str, profile: str, task: str, name: str | None
) -> Snapshot:
    """Pack the pod's working directory (at most ``max_transfer_bytes``) into a new
    snapshot (see the module docstring), then apply the retention options to the
    profile's snapshots of ``namespace`` on ``server`` (:func:`expire`). Raises :class:`FileTooLarge` or
    :class:`BackendUnavailable` (the pack failed, or the directory cannot be written)."""
    workdir = opts.workdir
    code, data, err = run([opts.shell, "-c", PACK, "envlayer-pack", workdir, str(opts.max_transfer_bytes + 1)], None)
    if len(data) > opts.max_transfer_bytes:
        raise FileTooLarge(workdir, len(data), opts.max_transfer_bytes)
    if code != 0:
        said = err.decode(errors="replace").strip()[:300]
        raise BackendUnavailable(
            f"packing {workdir!r} in the pod for a snapshot failed (exit {code}): {said}",
            hint="the image needs `tar` and `head`; check the directory's permissions",
        )
    label = name or task
    snapshot_id = f"{slug(label, 40)}-{secrets.token_hex(4)}"
    record = {
        "id": snapshot_id,
        "backend": "kubernetes",
        "name": label,
        "profile": profile,
        "source_task": task,
        # Microseconds: retention orders a profile's snapshots by this time.
        "created": datetime.now().astimezone().isoformat(timespec="microseconds"),
        "owner": owner_label() or "",
        "workdir": workdir,
        **_scope(namespace, server),
    }
    _store(directory(opts), snapshot_id, data, record)
    expire(opts, namespace=namespace, server=server, profile=profile, spare=snapshot_id)
    return _from_record(record)


def _store(where: Path, snapshot_id: str, data: bytes, record: dict[str, Any]) -> None:
    """Write ``<id>.tar`` then ``<id>.json`` (each through a temporary name)."""
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        for suffix, content in ((".tar", data), (".json", json.dumps(record, indent=1).encode())):
            part = where / f"{snapshot_id}{suffix}.part"
            part.write_bytes(content)
            part.replace(where / f"{snapshot_id}{suffix}")
    except OSError as exc:
        for suffix in (".tar", ".tar.part", ".json.part"):
            with contextlib.suppress(OSError):
                (where / f"{snapshot_id}{suffix}").unlink()
        raise BackendUnavailable(
            f"cannot store the snapshot in {where}: {exc}", hint="set snapshot_dir to a writable directory"
        ) from exc


def _records(opts: KubernetesOptions) -> list[dict[str, Any]]:
    """Every complete snapshot record in the snapshot directory (unreadable ones skipped)."""
    where = directory(opts)
    found = []
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            record = json.loads(path.read_text())
            if record["id"] == path.stem and (where / f"{path.stem}.tar").is_file():
                found.append(record)
    return found


def list_all(opts: KubernetesOptions, *, namespace: str, server: str, profile: str | None) -> list[Snapshot]:
    """The snapshots of ``namespace`` on ``server`` (of ``profile``; None: every
    profile), newest first."""
    scope = _scope(namespace, server)
    found = [
        _from_record(r)
        for r in _records(opts)
        if all(r.get(k) == v for k, v in scope.items()) and (profile is None or r["profile"] == profile)
    ]
    return sorted(found, key=lambda s: s.created, reverse=True)


def remove(opts: KubernetesOptions, snapshot_id: str, *, namespace: str, server: str) -> list[Snapshot]:
    """Delete snapshot ``snapshot_id`` of ``namespace`` on ``server``; [] when there is no
    such snapshot. Forks made from it keep their own copy."""
    if not _ID.match(snapshot_id):
        return []
    hit = [s for s in list_all(opts, namespace=namespace, server=server, profile=None) if s.id == snapshot_id]
    where = directory(opts)
    for snapshot in hit:
        (where / f"{snapshot.id}.json").unlink(missing_ok=True)
        (where / f"{snapshot.id}.tar").unlink(missing_ok=True)
    return hit


def expire(
    opts: KubernetesOptions, *, namespace: str, server: str, profile: str, dry_run: bool = False, spare: str = ""
) -> list[Snapshot]:
    """Remove ``profile``'s snapshots of ``namespace`` on ``server`` beyond the retention
    options (``snapshot_keep``, ``snapshot_max_age``; see
    :func:`envlayer.snapshot.apply_retention`) but ``spare``; what was (or, with
    ``dry_run``, would be) removed."""
    return apply_retention(
        list_all(opts, namespace=namespace, server=server, profile=profile),
        opts,
        lambda ident: remove(opts, ident, namespace=namespace, server=server),
        dry_run=dry_run,
        spare=spare,
    )


def archive(opts: KubernetesOptions, snapshot: Snapshot, *, namespace: str, server: str) -> bytes:
    """The tar of ``snapshot``. Raises :class:`InvalidArgument` when it is not (or no
    longer) in the snapshot directory for this namespace and API server."""
    scoped = list_all(opts, namespace=namespace, server=server, profile=None)
    if snapshot.id in {s.id for s in scoped}:
        with contextlib.suppress(OSError):
            return (directory(opts) / f"{snapshot.id}.tar").read_bytes()
    raise InvalidArgument(
        "from_snapshot",
        f"snapshot {snapshot.id} does not exist in {directory(opts)} for namespace {namespace!r} on {server}",
        hint="list them with `envlayer snapshots ls`; snapshots are kept on the machine that took them",
    )


def restore(run: Runner, opts: KubernetesOptions, data: bytes) -> None:
    """Unpack a snapshot's tar into the pod's working directory. Raises
    :class:`BackendUnavailable` when the unpack fails."""
    code, _, err = run([opts.shell, "-c", UNPACK, "envlayer-unpack", opts.workdir], data)
    if code != 0:
        said = err.decode(errors="replace").strip()[:300]
        raise BackendUnavailable(
            f"unpacking the snapshot into {opts.workdir!r} in the new pod failed (exit {code}): {said}",
            hint="the image needs `tar`; the working directory must be writable by the pod's user",
        )
