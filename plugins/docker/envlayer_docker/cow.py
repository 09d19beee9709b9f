"""Copy-on-write workspaces for forks: a snapshot keeps each durable volume of its task in
a volume of its own, and a fork mounts an overlay over it.

* :func:`freeze` (taking a snapshot): each durable volume of the task (workspace, home) is
  copied once, by one helper container for all of them (:data:`COPY_TREE`: ``cp -a``, in
  parallel runs where the image has the GNU tools), into a *snapshot volume*
  ``envlayer-snapshot-<tag>-<kind>`` labelled with the snapshot's reference
  (:data:`SNAPSHOT_VOLUME`). Only the copy: the container's own layer is committed as the
  snapshot image, without the data.
* :func:`create_overlay` (a fork's data volume): the fork's durable volume, under its usual
  name, is a ``local``-driver volume of type ``overlay`` whose lower directory is the
  snapshot volume and whose upper and work directories are two small volumes of the fork
  (``<name>-upper``, ``<name>-work``, labelled :data:`LAYER`). The daemon mounts it when a
  container starts (moby ``volume/local/local_unix.go``: ``mount(device, path, type,
  options)`` with the volume's driver options, in the daemon's mount namespace, so the
  snapshot volume's ``Mountpoint`` is the right path). Nothing is copied: a fork is ready
  once its container starts; what it writes goes to its upper volume, so it reaches neither
  the snapshot, the parent nor a sibling, and it outlives the fork's container like any
  workspace volume.
* The snapshot volume outlives the snapshot while a fork's overlay still names it
  (:data:`LOWER`): :func:`prune_volumes` deletes it once the snapshot image is gone and no
  overlay uses it (fork teardown, ``envlayer rm``, the reaper).

A daemon whose volumes cannot be overlaid (a volume root on overlayfs itself, a kernel
without overlay in a user namespace) refuses at container create or start; the fork then falls back
to a copy (:func:`fill_by_copy`) and says so in a warning.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer_docker import labels as L
from envlayer_docker import sdk

log = logging.getLogger("envlayer.docker.cow")

SNAPSHOT_VOLUME = "envlayer.snapshot.volume"
"""On a snapshot volume: the reference of the snapshot whose data it holds."""
LAYER = "envlayer.layer"
"""On a fork's upper or work volume: ``upper`` or ``work``."""
LOWER = "envlayer.lower"
"""On a fork's overlay volume: the snapshot volume it lies over."""
DATA_VOLUMES = "envlayer.snapshot.data"
"""On a snapshot image: its snapshot volumes, ``kind=volume`` joined by commas."""
_SOURCE, _TARGET = "/envlayer-cow-source", "/envlayer-cow-target"
_COPY_TIMEOUT = 3600


def snapshot_volume_name(tag: str, kind: str) -> str:
    """The name of snapshot ``tag``'s volume for ``kind`` (``workspace`` or ``home``)."""
    return f"envlayer-snapshot-{tag}-{kind}"


def data_volumes(image_labels: dict[str, str]) -> dict[str, str]:
    """kind -> snapshot volume, as recorded on a snapshot image (empty: a snapshot made
    before copy-on-write, whose data is in the image itself)."""
    pairs = [item.split("=", 1) for item in (image_labels.get(DATA_VOLUMES) or "").split(",") if "=" in item]
    return dict(pairs)


COPY_TREE = r"""
copy_tree() (
  cd "$1" || exit 1
  gnu() { "$1" --version 2>/dev/null | grep -q GNU; }
  if gnu cp && gnu tar && gnu find && gnu xargs && [ -z "$(find . ! -type d -links +1 -print -quit)" ]; then
    entries() { find . -mindepth 1 -maxdepth 2 \( -path './*/*' -o ! -type d \) "$@"; }
    batch=$(($(entries -printf x | wc -c) / 32 + 1))
    find . -mindepth 1 -maxdepth 1 -type d -print0 | (cd "$2" && xargs -0 -r mkdir -m 700 --) &&
      entries -print0 | xargs -0 -r -n "$batch" -P 8 cp -a --reflink=auto --parents -t "$2" -- &&
      find . -maxdepth 1 -type d -print0 | tar --null --no-recursion --xattrs --acls -T - -cf - |
      tar -C "$2" --xattrs --xattrs-include='*' --acls -xpf -
  else
    cp -a ./. "$2/"
  fi
)
while [ "$#" -gt 1 ]; do copy_tree "$1" "$2" || exit; shift 2; done
"""
"""The copy of a durable volume, as root in a helper container: ``sh -c COPY_TREE name
SOURCE TARGET [SOURCE TARGET ...]`` makes each TARGET (an empty directory) what ``cp -a
SOURCE/. TARGET/`` would. With GNU cp, tar, find and xargs and no hard-linked file
(``cp -a`` keeps links only within one run), the entries two levels down are copied in
about 32 batches by 8 ``cp -a`` runs at a time (a copy of many small files waits on the
filesystem per file more than on the processor, so 8 runs go faster than one even on 2
cores; GNU cp clones each file where the filesystem can), into the directories above them,
made private first (so nothing inherits their set-group-ID bit); tar then gives those
directories their owner, mode, times and extended attributes (as ``cp -a`` does after
their contents); otherwise one ``cp -a``."""


def _run_copy(api: Any, image: str, shell: str, pairs: list[tuple[str, str]], labels: dict[str, str]) -> None:
    """Copy each (source volume, target volume) of ``pairs`` (:data:`COPY_TREE`) in one
    helper container made from ``image``, the copy its only process, run as root by
    ``shell``; remove the helper. Raises :class:`BackendUnavailable` naming the output on
    failure."""

    mounts, paths = [], []
    for index, (source, target) in enumerate(pairs):
        mounts += [
            sdk.types.Mount(f"{_SOURCE}/{index}", source, type="volume", read_only=True),
            sdk.types.Mount(f"{_TARGET}/{index}", target, type="volume"),
        ]
        paths += [f"{_SOURCE}/{index}", f"{_TARGET}/{index}"]
    host_config = api.create_host_config(mounts=mounts, network_mode="none")
    helper = api.create_container(
        image,
        entrypoint=[shell],
        command=["-c", COPY_TREE, "envlayer-copy", *paths],
        user="0",
        labels=labels,
        host_config=host_config,
        detach=True,
    )["Id"]
    try:
        api.start(helper)
        code = api.wait(helper, timeout=_COPY_TIMEOUT).get("StatusCode")
        if code != 0:
            said = api.logs(helper, tail=20).decode(errors="replace")[-500:]
            raise BackendUnavailable(
                f"copying a durable volume failed (exit {code}): {said}",
                hint="the image needs `cp` in its shell's PATH; check free disk space",
            )
    finally:
        with contextlib.suppress(Exception):
            api.remove_container(helper, force=True, v=True)


def freeze(
    api: Any, image: str, shell: str, sources: dict[str, str], *, tag: str, ref: str, labels: dict[str, str]
) -> dict[str, str]:
    """Copy each of ``sources`` (kind -> durable volume) into a new snapshot volume, in one
    helper made from ``image``; kind -> snapshot volume. Removes what it made on failure."""
    made = {kind: snapshot_volume_name(tag, kind) for kind in sources}
    volume_labels = {L.MANAGED: "1", L.PROFILE: labels.get(L.PROFILE, ""), SNAPSHOT_VOLUME: ref}
    try:
        for name in made.values():
            api.create_volume(name, labels=volume_labels)
        _run_copy(api, image, shell, [(sources[kind], made[kind]) for kind in sources], labels)
    except BaseException:
        for name in made.values():
            with contextlib.suppress(Exception):
                api.remove_volume(name, force=True)
        raise
    return made


def create_overlay(api: Any, name: str, lower: str, labels: dict[str, str]) -> None:
    """Create the fork's durable volume ``name`` as an overlay over snapshot volume
    ``lower``, with its upper and work volumes; an existing ``name`` is kept as it is.
    Raises :class:`BackendUnavailable` when ``lower`` is gone."""

    with contextlib.suppress(sdk.errors.NotFound):
        api.inspect_volume(name)
        return
    try:
        lower_dir = api.inspect_volume(lower)["Mountpoint"]
    except sdk.errors.NotFound:
        raise BackendUnavailable(
            f"the snapshot's volume {lower} is gone", hint="take the snapshot again (`envlayer snapshot`)"
        ) from None
    dirs = {}
    for layer in ("upper", "work"):
        made = api.create_volume(f"{name}-{layer}", labels={**labels, LAYER: layer})
        dirs[layer] = made["Mountpoint"]
    options = {
        "type": "overlay",
        "device": "overlay",
        "o": f"lowerdir={lower_dir},upperdir={dirs['upper']},workdir={dirs['work']}",
    }
    api.create_volume(name, driver="local", driver_opts=options, labels={**labels, LOWER: lower})


MOUNT_REFUSALS = ("failed to mount local volume", "error while mounting volume")
"""The daemon's words when a local volume will not mount: moby ``volume/local/local_unix.go``
wraps the mount error as ``failed to mount local volume`` (at container create, where an
empty volume is filled from the image, or at start); ``daemon/volumes_unix.go`` as
``error while mounting volume``."""


def is_overlay_refusal(exc: BaseException) -> bool:
    """Whether the daemon refused a container because a volume would not mount."""
    text = str(getattr(exc, "explanation", None) or exc)
    return any(words in text for words in MOUNT_REFUSALS)


def fill_by_copy(api: Any, image: str, shell: str, name: str, lower: str, labels: dict[str, str]) -> None:
    """Replace the overlay volume ``name`` (and its layers) by a plain volume holding a
    copy of ``lower``: the fallback when overlays do not mount on this daemon."""
    remove_fork_volume(api, name)
    api.create_volume(name, labels=labels)
    _run_copy(api, image, shell, [(lower, name)], labels)


def remove_fork_volume(api: Any, name: str) -> None:
    """Remove volume ``name`` and, after it, its upper and work volumes (the overlay
    first: its layers must not go while it could still be mounted). Never raises for a
    volume that is already gone."""

    for volume in (name, f"{name}-upper", f"{name}-work"):
        with contextlib.suppress(sdk.errors.NotFound):
            api.remove_volume(volume)


def prune_volumes(api: Any, *, live_refs: set[str]) -> None:
    """Delete snapshot volumes whose snapshot is not in ``live_refs`` (tagged snapshot
    images) and that no overlay volume names as its lower. Never raises."""
    try:
        volumes = (api.volumes(filters={"label": [SNAPSHOT_VOLUME]}) or {}).get("Volumes") or []
        overlays = (api.volumes(filters={"label": [LOWER]}) or {}).get("Volumes") or []
    except Exception as exc:
        log.debug("listing snapshot volumes: %r", exc)
        return
    in_use = {(v.get("Labels") or {}).get(LOWER) for v in overlays}
    for volume in volumes:
        ref = (volume.get("Labels") or {}).get(SNAPSHOT_VOLUME, "")
        if ref in live_refs or volume["Name"] in in_use:
            continue
        try:
            api.remove_volume(volume["Name"])
        except Exception as exc:
            log.debug("keeping snapshot volume %s for now: %r", volume["Name"], exc)
