"""Workspace retention: the reaper removes the durable data of tasks unused for
``workspace_retention`` seconds (default 14 days; unset or 0: never).

A task's *last use* is the latest of:

* the finish time of each of its stopped containers (``created`` ones: their creation time);
* the last-use records envlayer leaves whenever it removes a container of the task and
  keeps the data (:func:`note_last_use`: the orphan reaper, idle reclaim, ``envlayer rm``
  without ``--purge``, ``cleanup(force_remove=True)``). Docker cannot change a volume's
  labels, so a record is an empty volume ``<container name>-used-<epoch>`` labelled
  ``envlayer.data=record`` and ``envlayer.last_used=<epoch>`` (the newest one is kept);
  host-directory data keeps it as ``last_used`` in its ``envlayer.json``;
* the data's own creation time.

A task with any container that is not stopped (running, paused, restarting) is in use:
its data is never touched. A time that cannot be parsed means "leave it". A task unused
for the whole period loses its stopped containers, then its workspace, home and records.
Scoped like every sweep: this profile only. A volume the daemon refuses to remove (a
container outside envlayer's labels uses it) is logged and kept; one failure never stops
the sweep.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.sandbox.retry import RetryPolicy, Transient, call_with_retries
from envlayer_docker import labels as L
from envlayer_docker import sdk, workspace
from envlayer_docker.listing import STALE_STATES, list_managed, parse_docker_time
from envlayer_docker.naming import container_name
from envlayer_docker.options import DockerOptions

log = logging.getLogger("envlayer.docker.retention")

IN_USE = float("inf")
"""The last use of a task that has a container which is not stopped."""


def _container_last_use(summary: dict[str, Any], api: Any) -> float | None:
    """When a container was last used: :data:`IN_USE` unless it is stopped; else its
    finish time (creation time when it never started); None when unknown; 0 for one
    removed meanwhile (it does not count: the record its remover left does)."""
    if summary.get("State") not in STALE_STATES:
        return IN_USE
    try:
        info = api.inspect_container(summary["Id"])
    except sdk.errors.NotFound:
        return 0.0
    state = info.get("State") or {}
    if state.get("Status") not in STALE_STATES:
        return IN_USE
    stamp = info.get("Created") if state.get("Status") == "created" else state.get("FinishedAt")
    return parse_docker_time(stamp)


def _data_last_use(info: SandboxInfo) -> float | None:
    """When a piece of data says it was last used (a record: its time; data: the later
    of its creation and its recorded last use); None when unknown."""
    recorded = _float_or_none(info.detail.get("last_used", ""))
    if info.detail["data"] == workspace.RECORD:
        return recorded
    created = parse_docker_time(info.created) if info.detail["storage"] == "volume" else _iso_time(info.created)
    known = [t for t in (created, recorded) if t is not None]
    return max(known) if known else None


def _iso_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def last_uses(
    api: Any, options: DockerOptions, *, profile: str | None
) -> tuple[dict[str, float | None], dict[str, list[SandboxInfo]]]:
    """Per sanitized task id of ``profile`` (None: every profile) that has durable data: its
    last use (epoch seconds, :data:`IN_USE`, or None when a time is unknown), and its data
    with records."""
    data: dict[str, list[SandboxInfo]] = defaultdict(list)
    for info in workspace.list_data(api, options, profile=profile, records=True):
        data[f"{info.profile}\0{L.sanitize(info.task)}"].append(info)
    uses: dict[str, list[float | None]] = {key: [_data_last_use(i) for i in infos] for key, infos in data.items()}
    for summary in list_managed(api, profile=profile):
        labels = summary.get("Labels") or {}
        key = f"{labels.get(L.PROFILE, '')}\0{labels.get(L.TASK, '')}"
        if key in uses:
            uses[key].append(_container_last_use(summary, api))
    return {key: None if None in times else max(times) for key, times in uses.items()}, data  # type: ignore[type-var]


def annotate(
    api: Any,
    options: DockerOptions,
    infos: list[SandboxInfo],
    *,
    profile: str | None,
    uses: dict[str, float | None] | None = None,
) -> None:
    """Add ``last_used`` (epoch seconds; ``in use`` or empty when unknown) and
    ``size_bytes`` (empty when the daemon cannot tell) to the ``detail`` of each data row
    of ``infos`` (``envlayer ls``, ``reap --dry-run``); ``uses``: :func:`last_uses` when
    the caller has it. Never raises: a failure leaves the rows as they are."""
    try:
        if uses is None:
            uses, _ = last_uses(api, options, profile=profile)
    except Exception as exc:
        log.warning("cannot tell the workspaces' last use: %r", exc)
        return
    try:
        sizes = _volume_sizes(api)
    except Exception as exc:
        log.warning("cannot tell the workspaces' sizes: %r", exc)
        sizes = {}
    for info in infos:
        if info.status != "data":
            continue
        use = uses.get(f"{info.profile}\0{L.sanitize(info.task)}")
        info.detail["last_used"] = "in use" if use == IN_USE else "" if use is None else f"{use:.0f}"
        size = sizes.get(info.id) if info.detail["storage"] == "volume" else _tree_size(info.detail["name"])
        info.detail["size_bytes"] = "" if size is None else str(size)


DISK_USAGE_BUSY = "a disk usage operation is already running"
"""What a daemon before Engine 23 (API 1.42) answers, as a 500, to ``GET /system/df``
while another caller's is still running (moby 20.10 ``daemon/disk_usage.go``: a
compare-and-swap guard; API 1.42's changelog: later daemons share the running result)."""

DISK_USAGE_POLICY = RetryPolicy(attempts=8, base_delay=0.2, max_delay=2.0, budget=10.0)


def _disk_usage_busy(exc: BaseException) -> Transient | None:
    if DISK_USAGE_BUSY in str(exc):
        return Transient("another caller's disk usage count is running")
    return None


def _volume_sizes(api: Any) -> dict[str, int]:
    """Sizes the daemon reports for volumes (``docker system df -v``); -1 (unknown) left out.
    Waits out another caller's count on daemons that refuse concurrent ones."""
    usage = call_with_retries(
        api.df, _disk_usage_busy, doing="counting volume sizes", policy=DISK_USAGE_POLICY, logger=log
    )
    volumes = (usage or {}).get("Volumes") or []
    sizes = {}
    for volume in volumes:
        size = (volume.get("UsageData") or {}).get("Size", -1)
        if isinstance(size, int) and size >= 0:
            sizes[volume["Name"]] = size
    return sizes


def _tree_size(path: str) -> int | None:
    total = 0
    try:
        for root, dirs, files in os.walk(path):
            for name in files + dirs:
                total += os.lstat(os.path.join(root, name)).st_size
    except OSError:
        return None
    return total


def reap_workspaces(
    api: Any, options: DockerOptions, *, profile: str, retention: float, dry_run: bool, now: float | None = None
) -> list[SandboxInfo]:
    """Remove the data of this profile's tasks unused for ``retention`` seconds (module
    rules), their stopped containers first. Returns the data rows removed (or, with
    ``dry_run``, that would be), with ``last_used`` and ``size_bytes`` in ``detail``.
    Raises only when listing fails."""
    now = time.time() if now is None else now
    uses, data = last_uses(api, options, profile=profile)
    expired = [key for key, use in uses.items() if use is not None and now - use >= retention]
    rows = [i for key in expired for i in data[key] if i.detail["data"] != workspace.RECORD]
    annotate(api, options, rows, profile=profile, uses=uses)
    if dry_run:
        return rows
    removed = []
    for key in expired:
        task = data[key][0].task
        _remove_stopped_containers(api, profile=profile, task=task)
        if list_managed(api, profile=profile, task=task):
            continue  # started again meanwhile (or a container refused removal): in use
        removed += workspace.remove(api, options, profile=profile, task=task)
    removed_ids = {i.id for i in removed}
    return [r for r in rows if r.id in removed_ids]


def _remove_stopped_containers(api: Any, *, profile: str, task: str) -> None:
    for summary in list_managed(api, profile=profile, task=task, states=STALE_STATES):
        try:
            api.remove_container(summary["Id"], v=True)  # not forced: one started meanwhile is spared
        except Exception as exc:
            log.warning("retention: keeping container %s: %r", summary["Id"][:12], exc)


def note_last_use(api: Any, options: DockerOptions, *, profile: str, task: str, when: float) -> None:
    """Record that (profile, task)'s data was used at ``when`` (a container of it is being
    removed while the data stays). Never raises: a failure is logged (retention then
    counts from the data's other times)."""
    try:
        infos = workspace.list_data(api, options, profile=profile, task=task, records=True)
        for info in infos:
            if info.detail["storage"] == "host":
                _note_host(info.detail["name"], when)
        volumes = [i for i in infos if i.detail["storage"] == "volume"]
        if any(i.detail["data"] != workspace.RECORD for i in volumes):
            _note_volume(api, volumes, profile=profile, task=task, when=when)
    except Exception as exc:
        log.warning("cannot record the last use of task %r: %r", task, exc)


def _note_host(path: str, when: float) -> None:
    meta_path = os.path.join(path, workspace.META_FILE)
    with open(meta_path, encoding="utf-8") as fh:
        meta = json.load(fh)
    if (_float_or_none(str(meta.get("last_used", ""))) or 0) >= when:
        return
    meta["last_used"] = f"{when:.3f}"
    tmp = f"{meta_path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    os.replace(tmp, meta_path)


def _note_volume(api: Any, volumes: list[SandboxInfo], *, profile: str, task: str, when: float) -> None:
    """A new record unless one is as recent as ``when``; then the older records go."""
    records = [i for i in volumes if i.detail["data"] == workspace.RECORD]
    if any((_data_last_use(r) or 0) >= when for r in records):
        return
    labels = {**workspace.data_labels(profile, task, workspace.RECORD), L.LAST_USED: f"{when:.3f}"}
    api.create_volume(f"{container_name(profile, task)}-used-{when * 1000:.0f}", labels=labels)
    for record in records:
        api.remove_volume(record.id)
