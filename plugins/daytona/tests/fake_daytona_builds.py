"""Images the fake Daytona server builds from a create's ``buildInfo``, as the SDK sends it
for ``CreateSandboxFromImageParams(image=daytona.Image.from_dockerfile(path))``
(daytona 0.226, ``daytona/_sync/daytona.py`` ``Daytona._create``): ``buildInfo`` holds
``dockerfileContent`` (the Dockerfile's text) and ``contextHashes`` (the ``COPY``/``ADD``
sources, which the SDK first uploads to object storage with obstore,
``daytona/_sync/snapshot.py`` ``process_image_context``).

The service builds a snapshot from it (``pending_build`` -> ``building_snapshot`` ->
started) or ends in ``build_failed`` with the reason in ``errorReason``
(``apps/api``'s sandbox states; the SDK's ``wait_for_sandbox_start`` raises with that reason).
The fake builds with the local dockerd, tagged ``fake-daytona-build:<sha256 of the
content>`` (a second create with the same Dockerfile reuses it) and labelled with its
instance, so its exit removes them. It takes no ``contextHashes``: obstore refuses a
plain-http storage URL, and the fake serves plain http; a create with them is a 400
naming that gap.
"""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any

BUILD_REPOSITORY = "fake-daytona-build"
_FROM_ONLY = re.compile(r"^\s*FROM\s+(\S+)\s*$")


def plain_image(dockerfile: str) -> str | None:
    """The image of a Dockerfile that is only ``FROM <image>`` (what ``image="name"``
    sends), else None: that one needs no build."""
    lines = [line for line in dockerfile.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    match = _FROM_ONLY.match(lines[0]) if len(lines) == 1 else None
    return match.group(1) if match else None


def build(api: Any, dockerfile: str, instance: str) -> tuple[str, str]:
    """(the built image's tag, "") or ("", the failure: the daemon's error and the last log
    lines). An image built before from the same text is reused."""
    from docker.errors import APIError, ImageNotFound

    tag = f"{BUILD_REPOSITORY}:{hashlib.sha256(dockerfile.encode()).hexdigest()[:24]}"
    try:
        api.inspect_image(tag)
        return tag, ""
    except ImageNotFound:
        pass
    tail: list[str] = []
    try:
        for entry in api.build(
            fileobj=io.BytesIO(dockerfile.encode()),
            tag=tag,
            rm=True,
            forcerm=True,
            decode=True,
            labels={"envlayer-fake-daytona": instance},
        ):
            if entry.get("error"):
                return "", "\n".join([*tail[-10:], str(entry["error"]).strip()])
            tail += [line for line in str(entry.get("stream", "")).splitlines() if line.strip()]
    except APIError as exc:
        return "", str(exc.explanation or exc)
    return tag, ""
