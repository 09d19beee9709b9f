"""The image a container runs: built from ``dockerfile`` when set, and its ``WORKDIR`` as
the default ``cwd``.

:func:`prepared_options` runs once when an environment opens, before the container spec
and its fingerprint are made, and returns the options with ``image`` set to the built
image (tagged by the context's digest, see :mod:`envlayer.sandbox.dockerfile`) and
``cwd`` set to the image's ``WORKDIR`` when the caller left ``cwd`` unset. The Docker
daemon builds (docker-py ``APIClient.build``, which sends the context with its
``.dockerignore`` applied); an image already tagged with the digest is reused without a
build. Importing this module does not import the Docker SDK.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
from datetime import datetime
from typing import Any

from envlayer.errors import ImageBuildFailed
from envlayer.sandbox.dockerfile import DockerfileBuild, resolve_build
from envlayer_docker import sdk
from envlayer_docker.container import _ensure_image
from envlayer_docker.options import DockerOptions

log = logging.getLogger("envlayer.docker")

BUILD_LABEL = "envlayer.build"
"""Label of an image envlayer built from a Dockerfile: the context's full digest."""
_LOG_LINES = 30


def prepared_options(api: Any, options: DockerOptions) -> DockerOptions:
    """``options`` with ``image`` built from ``dockerfile`` (when set) and ``cwd`` taken
    from the image's ``WORKDIR`` (when ``cwd`` is unset and the image declares one).

    Raises:
        ConfigError: the Dockerfile or the context does not exist.
        ImageBuildFailed: the build failed (the message ends with the build log's last lines).
        BackendUnavailable: the image is missing and may not be pulled.
    """
    build = resolve_build(options.dockerfile, options.build_context)
    if build is not None:
        ensure_built(api, build)
        options = dataclasses.replace(options, image=build.tag)
    if options.cwd is None:
        workdir = image_workdir(api, options)
        if workdir:
            options = dataclasses.replace(options, cwd=workdir)
    return options


def ensure_built(api: Any, build: DockerfileBuild) -> None:
    """Build ``build.tag`` on the daemon unless an image with that tag exists."""
    try:
        api.inspect_image(build.tag)
        log.debug("reusing image %s built from %s", build.tag, build.dockerfile)
        return
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        pass
    log.info("building image %s from %s (context %s)", build.tag, build.dockerfile, build.context)
    tail: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
    try:
        for chunk in api.build(
            path=str(build.context),
            dockerfile=str(build.dockerfile),
            tag=build.tag,
            rm=True,
            forcerm=True,
            decode=True,
            labels={BUILD_LABEL: build.digest},
        ):
            if "error" in chunk:
                raise _failed(build, str(chunk["error"]).strip(), tail)
            tail.extend(line for line in str(chunk.get("stream", "")).splitlines() if line.strip())
    except sdk.errors.APIError as exc:
        raise _failed(build, str(exc.explanation or exc), tail) from exc


def _failed(build: DockerfileBuild, reason: str, tail: collections.deque[str]) -> ImageBuildFailed:
    return ImageBuildFailed(
        f"building the image from {build.dockerfile} failed: {reason}",
        log="\n".join(f"  | {line}" for line in tail),
        hint="fix the Dockerfile (the build log above ends at the failing step) or the files it copies from "
        f"{build.context}",
    )


def image_workdir(api: Any, options: DockerOptions) -> str:
    """The ``WORKDIR`` that ``options.image`` declares ("" when none, or when it is ``/``
    and a durable workspace cannot live there: then ``cwd`` stays ``/workspace``, said in
    the log). A missing image is pulled first when ``pull`` is set, else
    :class:`BackendUnavailable` (the same error creating the container gives)."""
    try:
        info = api.inspect_image(options.image)
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        _ensure_image(api, options)
        info = api.inspect_image(options.image)
    workdir = str((info.get("Config") or {}).get("WorkingDir") or "")
    if workdir == "/" and options.workspace != "none":
        log.warning(
            "image %s declares WORKDIR /, which cannot hold the durable workspace; commands start in %s "
            '(set cwd, or workspace = "none" to start in /)',
            options.image,
            options.workdir,
        )
        return ""
    return workdir


def warn_if_workspace_hides_image(api: Any, workdir: str, data: list[Any], image: str) -> None:
    """Say so (WARNING) when the task's durable workspace volume sits at ``workdir`` (the
    image's ``WORKDIR``) and is older than ``image``: Docker filled the volume from an older
    image once, and it now hides what the newer image put in that directory."""
    for mount in data:
        if mount.storage != "volume" or mount.target != workdir:
            continue
        try:
            volume_created = _when(api.inspect_volume(mount.source).get("CreatedAt"))
        except sdk.errors.NotFound:
            return
        image_created = _when(api.inspect_image(image).get("Created"))
        # the daemon gives volumes whole seconds: an image of the same second is not newer
        if volume_created and image_created and volume_created < image_created.replace(microsecond=0):
            log.warning(
                "the task's workspace volume %s at the image's WORKDIR %s was filled from an older image; it hides "
                'what image %s put there (workspace = "none" follows each image; `envlayer rm --purge` the task '
                "to start from this one)",
                mount.source,
                workdir,
                image,
            )


def _when(text: Any) -> datetime | None:
    """A daemon timestamp (RFC 3339, nanoseconds allowed) as a datetime, None when unreadable."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00"))
    except ValueError:
        return None
