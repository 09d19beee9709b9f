"""The ``gpus`` option: ``docker run --gpus`` as a device request, and the daemon's
refusal when it has no GPU runtime, said as such.

A value is ``"all"``, a count (``"2"`` or ``2``) or ``"device=ID[,ID...]"`` (GPU indexes
or UUIDs). It becomes one ``DeviceRequest`` with the ``gpu`` capability and the default
driver, as the Docker CLI builds it (docker/cli ``opts/gpus.go``: ``all`` is ``Count: -1``,
capabilities default to ``[["gpu"]]``). The daemon picks the driver at container start: a
daemon without the NVIDIA Container Toolkit answers ``could not select device driver ""
with capabilities: [[gpu]]`` (moby ``daemon/devices.go`` ``handleDevice``), and the
container never runs without its GPU. Importing this module does not import the SDK.
"""

from __future__ import annotations

import re
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.options import OptionError

_DEVICE_IDS = re.compile(r"^[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*$")
NO_DRIVER = "could not select device driver"
"""The start of the daemon's message when no device driver offers the ``gpu`` capability."""


def normalize(value: int | str | None) -> str | None:
    """The option's canonical text (``"all"``, ``"2"``, ``"device=0,1"``) or ``None``.

    Raises :class:`OptionError` (key ``gpus``) for anything else, saying what to write."""
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "0"):
        return None
    if text == "all" or (text.isdigit() and int(text) > 0):
        return text
    if text.startswith("device=") and _DEVICE_IDS.match(text[len("device=") :]):
        return text
    raise OptionError("gpus", f"{value!r} is not a GPU request: use all, a count such as 2, or device=0,1")


def device_requests(spec: str | None) -> list[dict[str, Any]] | None:
    """The ``HostConfig.DeviceRequests`` for a normalized ``gpus`` value (``None``: none)."""
    if spec is None:
        return None
    request: dict[str, Any] = {"Driver": "", "Count": 0, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}
    if spec == "all":
        request["Count"] = -1
    elif spec.isdigit():
        request["Count"] = int(spec)
    else:
        request["DeviceIDs"] = spec[len("device=") :].split(",")
    return [request]


def no_gpu_runtime(exc: BaseException, spec: str | None) -> BackendUnavailable | None:
    """A clear error when the daemon refused to start a container because it has no GPU
    runtime; ``None`` for any other failure. Pure."""
    text = str(getattr(exc, "explanation", None) or exc)
    if spec is None or NO_DRIVER not in text:
        return None
    return BackendUnavailable(
        f"this Docker daemon has no GPU runtime, so a container with gpus={spec} cannot start: {text[:200]}",
        hint="install the NVIDIA Container Toolkit on the Docker host and restart dockerd "
        "(`docker info` then lists the nvidia runtime), or unset gpus",
    )
