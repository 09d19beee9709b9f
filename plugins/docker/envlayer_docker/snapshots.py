"""Docker snapshots: a container (and its durable workspace) as one labelled image.

``create``: ``docker commit`` the container into an image tagged
``envlayer-snapshot:<name or task>-<8 hex>`` and labelled like the containers
(``envlayer.managed``, ``envlayer.profile``, the source task) plus :data:`SNAPSHOT` and the
snapshot's name, creation time and owner; when the task keeps a workspace (or home)
volume apart from the container, its files are copied once into a snapshot volume
(:func:`envlayer_docker.cow.freeze`), named on the image. Running processes and tmpfs
mounts are not carried.

A fork's container is created from that image (:func:`fork_spec`), its workspace an
overlay volume over the snapshot volume (:mod:`envlayer_docker.cow`): nothing is copied per
fork. Removing a snapshot untags it; an image still used by a fork stays
until its last fork is removed, then :func:`prune_unused` deletes it (fork teardown,
``envlayer rm``, the reaper). Retention (:func:`expire`) runs after each snapshot is taken
and in the reaper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from envlayer.errors import InvalidArgument
from envlayer.sandbox.owner import owner_label
from envlayer.sandbox.tags import slug
from envlayer.snapshot import Snapshot, apply_retention
from envlayer_docker import cow, sdk
from envlayer_docker import labels as L
from envlayer_docker.container import ContainerSpec
from envlayer_docker.options import DockerOptions
from envlayer_docker.workspace import DataMount

log = logging.getLogger("envlayer.docker.snapshots")

REPOSITORY = "envlayer-snapshot"
SNAPSHOT = "envlayer.snapshot"
"""``1`` on a snapshot image (and inherited by the containers made from it)."""
NAME = "envlayer.snapshot.name"
SOURCE_TASK = "envlayer.snapshot.source_task"
CREATED = "envlayer.snapshot.created"
SNAPSHOT_OWNER = "envlayer.snapshot.owner"
SNAPSHOT_ID = "envlayer.snapshot.id"
"""The snapshot's reference, on its image and intermediate images (kept after removal)."""
FROM_SNAPSHOT = "envlayer.from_snapshot"
"""On a fork's container: the snapshot it was made from."""


def _labels(*, ref: str, profile: str, task: str, name: str, created: str) -> dict[str, str]:
    return {
        SNAPSHOT_ID: ref,
        L.MANAGED: "1",
        L.PROFILE: L.sanitize(profile),
        L.OWNER: "",  # never inherit a private parent's owner: a fork sets its own
        SNAPSHOT: "1",
        NAME: name,
        SOURCE_TASK: task,
        CREATED: created,
        SNAPSHOT_OWNER: owner_label() or "",
    }


def from_image(info: dict[str, Any]) -> Snapshot:
    """The :class:`Snapshot` of an image summary or inspect answer."""
    labels = info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}
    tags = [t for t in info.get("RepoTags") or [] if t.startswith(f"{REPOSITORY}:")]
    return Snapshot(
        backend="docker",
        id=tags[0] if tags else info["Id"],
        name=labels.get(NAME, ""),
        profile=labels.get(L.PROFILE, ""),
        source_task=labels.get(SOURCE_TASK, ""),
        created=labels.get(CREATED, ""),
        owner=labels.get(SNAPSHOT_OWNER, ""),
    )


COMMIT_TIMEOUT = 3600.0
"""Seconds a snapshot's commit (``POST /commit``) may take, rather than ``api_timeout``
(as long as its copy may, :mod:`envlayer_docker.cow`): the daemon writes the container's
own layer (what the task wrote outside its durable volumes, such as installed packages)
into the image, so the commit grows with that layer. A commit that the client gives up on
still ends on the daemon, as a tagged snapshot image whose data volumes were never made."""


def _commit(api: Any, container_id: str, *, tag: str, labels: dict[str, str]) -> str:
    """Commit ``container_id`` (paused meanwhile) as ``REPOSITORY:tag`` with ``labels``;
    the image's id. docker-py's ``commit`` takes no timeout, so this is its request
    (docker-py 7 ``ContainerApiMixin.commit``) with :data:`COMMIT_TIMEOUT`."""
    params = {"container": container_id, "repo": REPOSITORY, "tag": tag, "pause": True}
    answer = api._post_json(api._url("/commit"), data={"Labels": labels}, params=params, timeout=COMMIT_TIMEOUT)
    return str(api._result(answer, json=True)["Id"])


def create(
    api: Any,
    options: DockerOptions,
    container_id: str,
    data: list[DataMount],
    *,
    profile: str,
    task: str,
    name: str | None,
) -> Snapshot:
    """Snapshot ``container_id`` and its durable ``data`` (see the module docstring).
    Removes its intermediate objects, also on failure. Raises
    :class:`BackendUnavailable` when the copy fails (naming its output)."""
    if any(d.storage == "host" for d in data):
        raise InvalidArgument(
            "workspace",
            'snapshots of a task with workspace = "host" are not available yet',
            hint='use workspace = "volume" (the default) or "none" for tasks you snapshot',
        )
    created = datetime.now().astimezone().isoformat(timespec="microseconds")
    label = name or task
    tag = f"{slug(label, 40)}-{secrets.token_hex(4)}"
    labels = _labels(ref=f"{REPOSITORY}:{tag}", profile=profile, task=task, name=label, created=created)
    sources = {d.kind: d.source for d in data}
    if sources:
        volumes = {kind: cow.snapshot_volume_name(tag, kind) for kind in sources}
        labels[cow.DATA_VOLUMES] = ",".join(f"{kind}={name}" for kind, name in volumes.items())
    # Tagged from the start: an untagged snapshot image is "removed" to prune_unused,
    # which another process may run at any moment.
    image = _commit(api, container_id, tag=tag, labels=labels)
    try:
        if sources:
            cow.freeze(api, image, options.shell, sources, tag=tag, ref=f"{REPOSITORY}:{tag}", labels=labels)
    except BaseException:
        with contextlib.suppress(Exception):
            api.remove_image(image, force=True)
        raise
    snapshot = from_image(api.inspect_image(f"{REPOSITORY}:{tag}"))
    expire(api, options, profile=profile, spare=snapshot.id)
    return snapshot


def expire(api: Any, options: DockerOptions, *, profile: str, dry_run: bool = False, spare: str = "") -> list[Snapshot]:
    """Remove ``profile``'s snapshots beyond the retention options (``snapshot_keep``,
    ``snapshot_max_age``; see :func:`envlayer.snapshot.apply_retention`) but ``spare``;
    what was (or, with ``dry_run``, would be) removed."""
    return apply_retention(
        list_all(api, profile=profile), options, lambda ident: remove(api, ident), dry_run=dry_run, spare=spare
    )


def fork_spec(api: Any, spec: ContainerSpec, snapshot: Snapshot) -> ContainerSpec:
    """``spec`` made from ``snapshot``'s image, refusing a task that already has a
    container or workspace (its data would not come from the snapshot). The fingerprint
    stays that of the options, so later processes attach to the fork."""

    if any(d.storage == "host" for d in spec.data):
        raise InvalidArgument(
            "workspace",
            'environments with workspace = "host" cannot start from a snapshot yet',
            hint='use workspace = "volume" (the default) or "none"',
        )
    try:
        image = api.inspect_image(snapshot.id)
        image_id = image["Id"]  # by id: a removal meanwhile cannot fail the create
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        raise InvalidArgument(
            "from_snapshot", f"snapshot {snapshot.id} no longer exists", hint="list them with `envlayer snapshots ls`"
        ) from None
    taken = _existing(api, spec)
    if taken:
        raise InvalidArgument(
            "task_id",
            f"task {spec.task!r} already has {taken}; a fork needs a new task",
            hint=f"pick a new task id, or remove it first (`envlayer rm --purge {spec.task}`)",
        )
    labels = {**spec.labels, FROM_SNAPSHOT: snapshot.id}
    return dataclasses.replace(spec, image=image_id, labels=labels, data=_over_snapshot(spec, image))


def _over_snapshot(spec: ContainerSpec, image: dict[str, Any]) -> list[DataMount]:
    """The fork's durable mounts: each one whose kind the snapshot holds in a volume
    becomes an overlay over it (:mod:`envlayer_docker.cow`). Raises
    :class:`InvalidArgument` when the snapshot holds data that the fork would not mount
    (``workspace = "none"``, ``persist_home`` unset, a private fork): it would be lost."""
    held = cow.data_volumes((image.get("Config") or {}).get("Labels") or {})
    mounted = {d.kind for d in spec.data}
    missing = sorted(set(held) - mounted)
    if missing:
        raise InvalidArgument(
            "from_snapshot",
            f"the snapshot holds the task's {' and '.join(missing)}, which this fork would not keep "
            '(it needs workspace = "volume", persist_home for the home, and persist_across_processes)',
            hint='fork with workspace = "volume" (the default), the same persist_home as the snapshot\'s task, '
            "and persist_across_processes = true",
        )
    return [dataclasses.replace(d, lower=held[d.kind]) if d.kind in held else d for d in spec.data]


def _existing(api: Any, spec: ContainerSpec) -> str:
    """What of (profile, task) already exists: "a container", "a workspace volume" or ""."""

    with contextlib.suppress(sdk.errors.NotFound):
        api.inspect_container(spec.name)
        return f"a container ({spec.name})"
    for mount in spec.data:
        with contextlib.suppress(sdk.errors.NotFound):
            api.inspect_volume(mount.source)
            return f"a {mount.kind} volume ({mount.source})"
    return ""


def list_all(api: Any, *, profile: str | None) -> list[Snapshot]:
    """The tagged snapshot images of ``profile`` (None: every profile), newest first."""
    terms = [f"{SNAPSHOT}=1", *([f"{L.PROFILE}={L.sanitize(profile)}"] if profile is not None else [])]
    images = api.images(filters={"label": terms, "dangling": False}) or []
    found = [from_image(i) for i in images if any(t.startswith(f"{REPOSITORY}:") for t in i.get("RepoTags") or [])]
    return sorted(found, key=lambda s: s.created, reverse=True)


def remove(api: Any, snapshot_id: str) -> list[Snapshot]:
    """Remove snapshot ``snapshot_id`` (its ``envlayer-snapshot:`` tag); [] when it is
    not one. Forks made from it keep running: their image is deleted with the last of
    them (:func:`prune_unused`)."""

    if not snapshot_id.startswith(f"{REPOSITORY}:"):
        return []
    try:
        image = api.inspect_image(snapshot_id)
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        return []
    snapshot = from_image(image)
    api.remove_image(snapshot_id, force=True)
    prune_unused(api, released=[image["Id"]])
    return [snapshot]


PRUNE_GRACE = 60.0
"""Seconds a dangling snapshot image is left alone by the sweep (:func:`prune_unused`):
``docker commit`` stores an image before it tags it, and a snapshot being taken leaves its
staging image untagged, so a younger dangling image may be another process's snapshot in
the making. Images a caller names as released are not subject to it."""

RELEASE_WAIT = 10.0
"""Seconds :func:`prune_unused` waits for a released image that another process is
removing at the same moment, or whose last container is still being removed."""

_KEPT_FOR = ("is being used by running container", "dependent child images")
"""Daemon refusals (moby ``daemon/image_delete.go``) that mean the image is still needed."""


def prune_unused(api: Any, *, released: Iterable[str] = ()) -> None:
    """Delete the images of removed snapshots that nothing uses any more: each of
    ``released`` (image references of containers just removed, forks' among them) at
    once, the others once older than :data:`PRUNE_GRACE`. An image that is not a removed
    snapshot's (it has a tag, or no snapshot label) is never touched; its untagged
    parents (a snapshot's staging image) go with it. Never raises."""
    for image in set(released):
        _release(api, image)
    try:
        images = api.images(filters={"label": [f"{SNAPSHOT}=1"], "dangling": True}) or []
    except Exception as exc:
        log.debug("listing removed snapshots: %r", exc)
        return
    cutoff = time.time() - PRUNE_GRACE
    for image in images:
        if int(image.get("Created") or 0) <= cutoff:
            _remove_unused(api, image["Id"])
    try:
        live = {s.id for s in list_all(api, profile=None)}
    except Exception as exc:
        log.debug("listing snapshots: %r", exc)
        return
    cow.prune_volumes(api, live_refs=live)


def _is_removed_snapshot(image: dict[str, Any]) -> bool:
    labels = (image.get("Config") or {}).get("Labels") or {}
    tags = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
    return labels.get(SNAPSHOT) == "1" and not tags


def _release(api: Any, reference: str) -> None:
    """Delete ``reference`` if it is a removed snapshot's image that no container uses,
    retrying for :data:`RELEASE_WAIT` s while the daemon is busy with it elsewhere."""

    deadline = time.monotonic() + RELEASE_WAIT
    while True:
        try:
            image = api.inspect_image(reference)
        except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
            return
        except Exception as exc:
            log.debug("inspecting %s: %r", reference[:19], exc)
            return
        if not _is_removed_snapshot(image) or _remove_unused(api, image["Id"]) or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _remove_unused(api: Any, image_id: str) -> bool:
    """Try to delete ``image_id``; True when it is gone or still needed (a container that
    is not being removed, a child image), False when worth trying again (its last
    container is still being removed, another process is deleting it)."""

    try:
        api.remove_image(image_id)
        return True
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        return True
    except sdk.errors.APIError as exc:
        text = str(exc.explanation or exc)
        log.debug("keeping %s for now: %s", image_id[:19], text)
        return any(reason in text for reason in _KEPT_FOR) or _kept_by_a_container(api, image_id)


def _kept_by_a_container(api: Any, image_id: str) -> bool:
    try:
        users = api.containers(all=True, filters={"ancestor": image_id})
    except Exception as exc:
        log.debug("listing the users of %s: %r", image_id[:19], exc)
        return True
    return any(c.get("State") not in ("removing", "dead") for c in users)
