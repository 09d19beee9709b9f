"""The image of a Modal sandbox built from ``dockerfile``, and its ``WORKDIR`` as ``cwd``.

:func:`prepare` runs once when an environment opens: it builds (or finds, by its
definition) ``modal.Image.from_dockerfile(dockerfile, context_dir=build_context)`` on
Modal (``Image.build(app)``) before any sandbox exists so that a failed build is an
:class:`~envlayer.errors.ImageBuildFailed` of its own, and keeps the Image on the
connection for ``Sandbox.create``. The options it returns name the image by the context's
digest (``envlayer-build:<32 hex>``, see :mod:`envlayer.sandbox.dockerfile`), which is what
the sandbox's fingerprint records, and take ``cwd`` from the Image's ``WORKDIR`` when unset
(the SDK keeps it in the Image's metadata, ``_Image._get_metadata().workdir``: a private
accessor, read defensively; without it ``cwd`` stays ``/workspace``). The SDK reads the
context's ``.dockerignore`` itself and uploads only the files the ``COPY``/``ADD`` lines
name. Importing this module does not import the SDK.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from envlayer.errors import ImageBuildFailed
from envlayer.sandbox.dockerfile import resolve_build
from envlayer_modal import sdk
from envlayer_modal.client import Connection, control
from envlayer_modal.options import ModalOptions

log = logging.getLogger("envlayer.modal")


def prepare(conn: Connection) -> ModalOptions:
    """Build the Image of ``conn.options.dockerfile`` (when set) and return the options to
    open the sandbox with (see the module docstring). Raises ``ConfigError`` for a missing
    Dockerfile or context, :class:`ImageBuildFailed` for a failed build."""
    options = conn.options
    build = resolve_build(options.dockerfile, options.build_context)
    if build is None:
        return options
    image = sdk.modal.Image.from_dockerfile(str(build.dockerfile), context_dir=str(build.context))
    log.info("building (or reusing) the Modal image of %s (context %s)", build.dockerfile, build.context)
    try:
        control(lambda: image.build(conn.app), f"building the image from {build.dockerfile}")
    except sdk.exception.ImageBuildError as exc:
        raise ImageBuildFailed(
            f"Modal could not build the image from {build.dockerfile}: {exc}",
            hint="fix the Dockerfile or the files it copies from "
            f"{build.context}; the step that failed is in the build logs (`modal image logs IMAGE_ID`)",
        ) from None
    conn.built_image = image
    options = dataclasses.replace(options, image=build.tag)
    if options.cwd is None and (workdir := _workdir(image)):
        options = dataclasses.replace(options, cwd=workdir)
    return options


def _workdir(image: Any) -> str:
    """The Image's ``WORKDIR`` from its metadata ("" when the SDK does not say)."""
    metadata = getattr(image, "_get_metadata", lambda: None)()
    return str(getattr(metadata, "workdir", "") or "")
