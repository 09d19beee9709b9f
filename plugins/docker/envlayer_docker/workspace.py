"""Durable task data: the workspace (and optionally the home) that outlives its container.

A persist-mode container keeps its working directory (``workspace``) and, with
``persist_home``, its home directory (``home_dir``) outside its writable layer, per
(profile, task):

* ``workspace = "volume"`` (default): a named Docker volume
  ``<container name>-workspace`` / ``-home``, labelled ``envlayer.managed=1``,
  ``envlayer.profile``, ``envlayer.task`` and ``envlayer.data=workspace|home``;
* ``workspace = "host"``: a host directory ``<data_dir>/<container name>/workspace`` /
  ``home`` (``data_dir`` defaults to ``$XDG_DATA_HOME/envlayer/docker``, i.e.
  ``~/.local/share/envlayer/docker``), with an ``envlayer.json`` naming the profile and
  task beside them;
* ``workspace = "none"``: nothing durable (the container's layer only).

Recreating the container (fingerprint change, ``envlayer rm`` without ``--purge``, the
reaper, idle reclaim) keeps the data. It is removed by :func:`remove` (``envlayer rm
--purge``, ``envlayer exec --rm``, ``cleanup(force_remove=True, purge=True)``) and, once
the task has been unused for ``workspace_retention``, by the reaper (see
:mod:`envlayer_docker.retention`). Private containers (``persist_across_processes =
false``) get no durable data.
A path the user already mounts (``volumes``, ``mount_cwd``, ``tmpfs``) is left to them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from envlayer.environment import SandboxInfo
from envlayer.errors import ConfigError
from envlayer_docker import cow, sdk
from envlayer_docker import labels as L
from envlayer_docker.naming import container_name
from envlayer_docker.options import DockerOptions

log = logging.getLogger("envlayer.docker.workspace")

DATA_LABEL = L.DATA
"""Label on a durable volume: ``workspace`` or ``home`` (``record``: see :mod:`envlayer_docker.retention`)."""
RECORD = "record"
META_FILE = "envlayer.json"
Kind = Literal["workspace", "home"]


@dataclass(frozen=True)
class DataMount:
    """One durable mount: ``source`` is a volume name or an absolute host directory."""

    kind: Kind
    storage: Literal["volume", "host"]
    source: str
    target: str
    lower: str = ""
    """A fork's: the snapshot volume this volume is an overlay over (see :mod:`envlayer_docker.cow`)."""


def default_data_dir() -> str:
    """``$XDG_DATA_HOME/envlayer/docker`` (``~/.local/share/envlayer/docker`` when unset)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "envlayer", "docker")


def data_dir(options: DockerOptions) -> str:
    """The host directory that holds ``workspace = "host"`` data."""
    return os.path.abspath(os.path.expanduser(options.data_dir or default_data_dir()))


def plan(options: DockerOptions, *, profile: str, task: str, persist: bool, taken: set[str]) -> list[DataMount]:
    """The durable mounts of (profile, task); none for private containers, none for a
    target in ``taken`` (paths the user mounts). Pure: creates nothing."""
    if not persist or options.workspace == "none":
        return []
    base = container_name(profile, task)
    wanted: list[tuple[Kind, str]] = [("workspace", options.workdir)]
    if options.persist_home:
        wanted.append(("home", options.home_dir))
    mounts = []
    for kind, target in wanted:
        if target in taken:
            continue
        if options.workspace == "volume":
            mounts.append(DataMount(kind, "volume", f"{base}-{kind}", target))
        else:
            mounts.append(DataMount(kind, "host", os.path.join(data_dir(options), base, kind), target))
    return mounts


def data_labels(profile: str, task: str, kind: str) -> dict[str, str]:
    """Labels of a durable volume."""
    return {L.MANAGED: "1", L.PROFILE: L.sanitize(profile), L.TASK: L.sanitize(task), L.TASK_ID: task, DATA_LABEL: kind}


def ensure(api: Any, mounts: list[DataMount], *, profile: str, task: str) -> None:
    """Create what ``mounts`` need (labelled volumes, host directories with their
    ``envlayer.json``). Idempotent; an existing volume or directory is kept as it is.
    Raises :class:`ConfigError` (key ``data_dir``) when a host directory cannot be made."""
    for mount in mounts:
        if mount.storage == "volume" and mount.lower:
            cow.create_overlay(api, mount.source, mount.lower, data_labels(profile, task, mount.kind))
            continue
        if mount.storage == "volume":
            api.create_volume(mount.source, labels=data_labels(profile, task, mount.kind))
            continue
        meta = os.path.join(os.path.dirname(mount.source), META_FILE)
        try:
            os.makedirs(mount.source, exist_ok=True)
            if not os.path.exists(meta):
                created = datetime.now().astimezone().isoformat(timespec="seconds")
                with open(meta, "w", encoding="utf-8") as fh:
                    json.dump({"profile": profile, "task": task, "created": created}, fh)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the workspace directory {mount.source}: {exc.strerror or exc}",
                source="options",
                key="data_dir",
                hint='point data_dir at a directory you may write, or use workspace = "volume"',
            ) from exc


def _volume_info(volume: dict[str, Any]) -> SandboxInfo:
    labels = volume.get("Labels") or {}
    return SandboxInfo(
        backend="docker",
        id=volume["Name"],
        task=L.task_id_of(labels),
        profile=labels.get(L.PROFILE, ""),
        status="data",
        created=str(volume.get("CreatedAt", "")),
        detail={
            "name": volume["Name"],
            "data": labels.get(DATA_LABEL, ""),
            "storage": "volume",
            "last_used": labels.get(L.LAST_USED, ""),
        },
    )


def _host_entries(options: DockerOptions) -> list[tuple[str, dict[str, str]]]:
    root = data_dir(options)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(root, name, META_FILE), encoding="utf-8") as fh:
                meta = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            found.append((os.path.join(root, name), {k: str(v) for k, v in meta.items()}))
    return found


def _host_info(path: str, meta: dict[str, str]) -> SandboxInfo:
    kinds = ",".join(k for k in ("workspace", "home") if os.path.isdir(os.path.join(path, k)))
    return SandboxInfo(
        backend="docker",
        id=os.path.basename(path),
        task=meta.get("task", ""),
        profile=L.sanitize(meta.get("profile", "")),
        status="data",
        created=meta.get("created", ""),
        detail={"name": path, "data": kinds, "storage": "host", "last_used": meta.get("last_used", "")},
    )


def _matches(info: SandboxInfo, profile: str | None, task: str | None) -> bool:
    return (profile is None or info.profile == L.sanitize(profile)) and (task is None or info.task == L.sanitize(task))


def list_data(
    api: Any, options: DockerOptions, *, profile: str | None, task: str | None = None, records: bool = False
) -> list[SandboxInfo]:
    """Durable data of ``profile`` (None: every profile), optionally of one task: every
    labelled volume on the daemon, and the host directories under ``data_dir``. Last-use
    records (``detail["data"] == "record"``) only with ``records``."""
    volumes = (api.volumes(filters={"label": [f"{DATA_LABEL}", *L.filters(profile=profile, task=task)]}) or {}).get(
        "Volumes"
    ) or []
    # A fork's upper and work volumes belong to its overlay volume: removed with it, never listed apart.
    infos = [_volume_info(v) for v in volumes if cow.LAYER not in (v.get("Labels") or {})]
    hosts = [_host_info(path, meta) for path, meta in _host_entries(options)]
    infos += [h for h in hosts if _matches(h, profile, task)]
    return [i for i in infos if records or i.detail["data"] != RECORD]


def remove(api: Any, options: DockerOptions, *, profile: str, task: str) -> list[SandboxInfo]:
    """Delete the durable data of (profile, task), with its last-use records. A volume
    still used by a container is refused by the daemon: it is logged and kept. Returns
    what was removed (records not listed)."""
    removed = []
    for info in list_data(api, options, profile=profile, task=task, records=True):
        try:
            if info.detail["storage"] == "volume":
                cow.remove_fork_volume(api, info.id)
            else:
                shutil.rmtree(info.detail["name"])
        except sdk.errors.NotFound:
            continue
        except (sdk.errors.APIError, OSError) as exc:
            log.warning("could not remove data %s: %s", info.id, getattr(exc, "explanation", None) or exc)
            continue
        if info.detail["data"] != RECORD:
            removed.append(info)
    return removed
