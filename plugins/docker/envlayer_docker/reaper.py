"""Sweeping managed containers: the orphan reaper, the opt-in idle reclaim, listing.

Orphan reaper (:func:`reap`): only containers labelled ``envlayer.managed=1`` AND this
profile; only states ``exited``, ``dead`` (age from ``FinishedAt``) and ``created`` (never
started; age from ``Created``); a zero, empty or unparseable time means "leave it";
removal is *not* forced, so a container that another process started in the meantime
makes the daemon refuse (409) and is spared. One failure is logged and the sweep goes on.
Inspections and removals run on a small thread pool.

Dead owners (:func:`reap_dead_owners`): RUNNING private containers (made with
``persist_across_processes = false``) whose owning process on this host is gone.

Workspace retention (durable data of tasks unused for ``workspace_retention``) is
:mod:`envlayer_docker.retention`; the removals here leave it a last-use record.

Idle reclaim (:func:`reclaim_idle`, on by default): RUNNING managed containers of the profile
whose last-used lease (the mtime of ``/tmp/.envlayer-lease``, refreshed by commands at
most every ``lease_interval`` seconds; the container's start time when there is none)
is older than ``idle_reclaim_after``, and in which no process started by a command is
alive (no process carries ``ENVLAYER_EXEC_ID``) and no session shell is running code.
Both are checked in one exec inside the container just before removal (run again, at most
twice, when its reply is lost on the way; still no whole reply means "keep").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.execution.shell_script import SESSION_VAR
from envlayer.sandbox.idle_check import idle_check_script, is_whole_verdict, parse_idle_check
from envlayer.sandbox.owner import owner_is_dead
from envlayer_docker import labels as L
from envlayer_docker import sdk
from envlayer_docker.listing import STALE_STATES, list_managed, parse_docker_time
from envlayer_docker.oneshot import LEASE_PATH
from envlayer_docker.retention import note_last_use, reap_workspaces

log = logging.getLogger("envlayer.docker.reaper")
_WORKERS = 8


def info_from(summary: dict[str, Any], status: str | None = None) -> SandboxInfo:
    """A :class:`SandboxInfo` from a ``containers()`` summary or an inspect result."""
    labels = summary.get("Labels") or (summary.get("Config") or {}).get("Labels") or {}
    names = summary.get("Names") or [summary.get("Name", "")]
    name = (names[0] if names else "").lstrip("/")
    created = summary.get("Created", "")
    if isinstance(created, int):
        created = datetime.fromtimestamp(created).astimezone().isoformat(timespec="seconds")
    state = status or summary.get("State")
    if isinstance(state, dict):
        state = state.get("Status", "")
    return SandboxInfo(
        backend="docker",
        id=summary["Id"][:12],
        task=L.task_id_of(labels),
        profile=labels.get(L.PROFILE, ""),
        status=str(state or ""),
        created=str(created),
        detail={
            "container_id": summary["Id"][:12],
            "name": name,
            "fingerprint": labels.get(L.FINGERPRINT, ""),
            "persist": labels.get(L.PERSIST, ""),
            "owner": labels.get(L.OWNER, ""),
            "image": str(summary.get("Image") or (summary.get("Config") or {}).get("Image", "")),
        },
    )


def _age_reference(info: dict[str, Any]) -> float | None:
    state = info.get("State") or {}
    if state.get("Status") == "created":
        return parse_docker_time(info.get("Created"))
    return parse_docker_time(state.get("FinishedAt"))


def _parallel(fn: Callable[[Any], SandboxInfo | None], items: list[Any]) -> list[SandboxInfo]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items)), thread_name_prefix="envlayer-reap") as pool:
        return [r for r in pool.map(fn, items) if r is not None]


def reap(
    api: Any, *, profile: str, max_age: float, dry_run: bool, now: float | None = None, options: Any = None
) -> list[SandboxInfo]:
    """Remove this profile's stale stopped containers (module rules). Returns what was
    removed (or, with ``dry_run``, what would be). With ``options``, a removed container's
    durable data gets a last-use record (its finish time; see :mod:`envlayer_docker.retention`).
    Raises only when listing fails."""
    now = time.time() if now is None else now
    candidates = list_managed(api, profile=profile, states=STALE_STATES)

    def one(summary: dict[str, Any]) -> SandboxInfo | None:
        try:
            info = api.inspect_container(summary["Id"])
            status = (info.get("State") or {}).get("Status")
            if status not in STALE_STATES:
                return None
            ref = _age_reference(info)
            if ref is None or now - ref < max_age:
                return None
            result = info_from(summary, status)
            if not dry_run:
                _note_use(api, options, summary, ref)
                api.remove_container(summary["Id"], v=True)
            return result
        except sdk.errors.NotFound:
            return None
        except sdk.errors.APIError as exc:
            log.warning("reaper: skipping %s: %s", summary["Id"][:12], exc.explanation or exc)
            return None
        except Exception as exc:
            log.warning("reaper: skipping %s: %r", summary["Id"][:12], exc)
            return None

    return _parallel(one, candidates)


def reap_dead_owners(api: Any, *, profile: str, dry_run: bool) -> list[SandboxInfo]:
    """Remove this profile's RUNNING private containers (``envlayer.persist=0``) whose
    owning process, on this host, is gone (see :mod:`envlayer.sandbox.owner`). Nobody else
    can attach to a private container, so such a container is an orphan whatever its age."""
    running = api.containers(
        all=True, filters={"label": [*L.filters(profile=profile), f"{L.PERSIST}=0"], "status": ["running"]}
    )

    def one(summary: dict[str, Any]) -> SandboxInfo | None:
        owner = (summary.get("Labels") or {}).get(L.OWNER)
        if not owner or not owner_is_dead(owner):
            return None
        return _remove_running(api, summary, dry_run, "reaper")

    return _parallel(one, running)


def _note_use(api: Any, options: Any, summary: dict[str, Any], when: float) -> None:
    """Before removing a persist-mode container whose data stays: record the data's last use."""
    labels = summary.get("Labels") or {}
    if options is None or labels.get(L.PERSIST) != "1":
        return
    note_last_use(api, options, profile=labels.get(L.PROFILE, ""), task=L.task_id_of(labels), when=when)


def _remove_running(
    api: Any, summary: dict[str, Any], dry_run: bool, who: str, options: Any = None
) -> SandboxInfo | None:
    """Force-remove one running container already judged reclaimable (unless ``dry_run``;
    with ``options``, its data's last use is recorded first); a failure is logged and the
    container skipped, so the sweep goes on."""
    try:
        result = info_from(summary, "running")
        if not dry_run:
            _note_use(api, options, summary, time.time())
            api.remove_container(summary["Id"], force=True, v=True)
        return result
    except Exception as exc:
        log.warning("%s: skipping %s: %r", who, summary["Id"][:12], exc)
        return None


IDLE_CHECK = idle_check_script(LEASE_PATH, SESSION_VAR)
CHECK_ATTEMPTS = 3
"""How many times the idle check runs in one container before an incomplete reply counts as "keep"."""


def _idle_check_output(api: Any, container_id: str, shell: str, user: str) -> bytes:
    """The idle check's stdout in the container (stderr is not part of the verdict).

    dockerd drops what an exec printed when it has not copied it within 2 s of the exec's
    exit (moby ``daemon/monitor.go``, ``Daemon.ProcessEvent``, case ``EventExit``:
    ``StreamConfig.Wait`` with a 2-second timeout, then ``CloseStreams``), which a loaded
    daemon can miss. A reply that is not a whole verdict line is therefore asked again, up
    to :data:`CHECK_ATTEMPTS` times; the last reply is returned as it is."""
    out = b""
    for _ in range(CHECK_ATTEMPTS):
        eid = api.exec_create(container_id, [shell, "-c", IDLE_CHECK], user=user)["Id"]
        out = api.exec_start(eid, demux=True)[0] or b""
        if is_whole_verdict(out):
            break
    return out


def reclaim_idle(
    api: Any, *, profile: str, idle_after: float, dry_run: bool, shell: str = "/bin/sh", options: Any = None
) -> list[SandboxInfo]:
    """Remove running managed containers of ``profile`` that are idle (module rules); with
    ``options``, their data's last use is recorded (now)."""
    running = list_managed(api, profile=profile, states=("running",))

    def one(summary: dict[str, Any]) -> SandboxInfo | None:
        try:
            info = api.inspect_container(summary["Id"])
            started = parse_docker_time((info.get("State") or {}).get("StartedAt"))
            user = (info.get("Config") or {}).get("User") or ""
            out = _idle_check_output(api, summary["Id"], shell, user)
        except Exception as exc:
            log.warning("idle reclaim: skipping %s: %r", summary["Id"][:12], exc)
            return None
        if not parse_idle_check(out, started, idle_after):
            log.debug("idle reclaim: keeping %s (check printed %r)", summary["Id"][:12], out)
            return None
        return _remove_running(api, summary, dry_run, "idle reclaim", options)

    return _parallel(one, running)


# --- the backend-wide sweeps behind DockerEnvironment's classmethods --------------------------


def sweep(api: Any, options: Any, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
    """``reap_orphans``: this profile's stopped managed containers older than ``max_age``
    seconds, running private containers whose owner process died, (with
    ``idle_reclaim_after``) idle running ones, and (with ``workspace_retention``) the durable
    data of tasks unused that long. Returns what was (or would be) removed."""
    removed = reap(api, profile=profile, max_age=max_age, dry_run=dry_run, options=options)
    removed += reap_dead_owners(api, profile=profile, dry_run=dry_run)
    if options.idle_reclaim_after is not None:
        removed += reclaim_idle(
            api,
            profile=profile,
            idle_after=options.idle_reclaim_after,
            dry_run=dry_run,
            shell=options.shell,
            options=options,
        )
    if options.workspace_retention is not None:
        removed += reap_workspaces(
            api, options, profile=profile, retention=options.workspace_retention, dry_run=dry_run
        )
    return removed


def remove_task(api: Any, *, profile: str, task: str, force: bool, options: Any = None) -> list[SandboxInfo]:
    """``remove_sandbox``: the containers of (profile, task); running ones only with
    ``force``; with ``options``, the data's last use is recorded (now) first. One that
    cannot be removed is logged and skipped. Returns what was removed."""
    removed = []
    for summary in list_managed(api, profile=profile, task=task):
        if summary.get("State") == "running" and not force:
            continue
        _note_use(api, options, summary, time.time())
        try:
            api.remove_container(summary["Id"], force=force, v=True)
        except sdk.errors.NotFound:
            continue
        except sdk.errors.APIError as exc:
            log.warning("could not remove %s: %s", summary["Id"][:12], exc.explanation or exc)
            continue
        removed.append(info_from(summary))
    return removed
