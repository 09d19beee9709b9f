"""From a Harbor task and ``--ek`` keywords to an envlayer backend, its options and a profile.

Importable without Harbor (it reads plain values), so its rules are tested on every
interpreter. Precedence, lowest first: envlayer's own configuration (``envlayer.toml``,
``ENVLAYER_*``), the harness defaults below (only for options the backend declares and
nobody set), what the task asks for (image or Dockerfile, working directory, resources,
network), then the ``--ek`` keywords.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlayer.integrations.selection import Selection, select

log = logging.getLogger("envlayer.harbor")

DEFAULT_PROFILE = "harbor"
RESERVED_KEYWORDS = ("backend", "profile", "config_file")
"""``--ek`` keywords that choose the backend; every other one is an option of that backend."""

DOCKER_DEFAULT_CAPABILITIES = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
]
"""The 14 capabilities ``docker run`` gives a container (moby's ``oci/caps/defaults.go``):
what a benchmark task's image is built and tested with."""

OUTPUT_CAP = 64 * 1024 * 1024
"""Bytes kept of each of stdout and stderr per command: large enough for any test log."""

HARNESS_DEFAULTS: dict[str, Any] = {
    "persist_across_processes": False,  # one private sandbox per trial, removed by stop()
    "workspace": "none",  # the trial's files live in the image's layers, as under `docker run`
    "shell": "/bin/bash",  # Harbor runs every command with `bash -c` and tasks rely on bash
    "timeout": None,  # no limit but Harbor's own timeout_sec
    "max_output_bytes": OUTPUT_CAP,
    "cap_add": DOCKER_DEFAULT_CAPABILITIES,
    "no_new_privileges": False,  # tasks use sudo and setuid tools
    "tmpfs": {},  # /tmp is the image's, not a 512 MB tmpfs
    "pids_limit": 0,
}
"""Defaults that make a sandbox behave like the container Harbor's own environment runs;
each applies only where the backend declares the option and nothing set it."""


@dataclass(frozen=True)
class TaskSpec:
    """What a Harbor task asks of its sandbox (read from its ``EnvironmentConfig``)."""

    environment_dir: Path
    docker_image: str | None = None
    workdir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()
    no_network: bool = False

    @property
    def dockerfile(self) -> Path | None:
        """``environment/Dockerfile`` when the task ships one."""
        path = self.environment_dir / "Dockerfile"
        return path if path.is_file() else None


def harness_defaults(declared: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`HARNESS_DEFAULTS` restricted to the options the backend declares."""
    return {name: value for name, value in HARNESS_DEFAULTS.items() if name in declared}


def task_options(backend: str, declared: Mapping[str, Any], task: TaskSpec) -> dict[str, Any]:
    """The options that carry out ``task`` on ``backend`` (whose option names are
    ``declared``). Raises ``ValueError`` for what the backend cannot do (a GPU, a
    Dockerfile on Kubernetes, no network) rather than run the task without it."""
    options: dict[str, Any] = {}
    if task.dockerfile is not None:
        if "dockerfile" not in declared or backend == "kubernetes":
            raise ValueError(
                f"the task builds its image from {task.dockerfile}, and the {backend} backend cannot build images: "
                "use --ek backend=docker (or modal, daytona), or push the image to a registry and set "
                "[environment] docker_image in task.toml"
            )
        options["dockerfile"] = str(task.dockerfile)
    elif task.docker_image:
        options["image"] = task.docker_image
    if task.workdir:
        options["cwd"] = task.workdir
    options.update(_resources(backend, declared, task))
    if task.no_network:
        if "network" in declared:
            options["network"] = False
        elif "block_network" in declared:
            options["block_network"] = True
        else:
            raise ValueError(f"the task asks for no network, which the {backend} backend cannot enforce")
    return options


def _resources(backend: str, declared: Mapping[str, Any], task: TaskSpec) -> dict[str, Any]:
    """cpus, memory and GPUs in the backend's own option names."""
    cpus, memory, gpus = task.cpus, task.memory_mb, task.gpus
    if "limits" in declared and "requests" in declared:  # kubernetes
        wanted = {"cpu": _number(cpus), "memory": f"{memory}Mi" if memory else None}
        wanted["nvidia.com/gpu"] = str(gpus) if gpus else None
        quantities = {k: v for k, v in wanted.items() if v}
        return {"requests": quantities, "limits": quantities} if quantities else {}
    found: dict[str, Any] = {}
    if cpus:
        found.update(_first(declared, ("cpus", "cpu"), cpus, backend))
    if memory:
        if "memory_mb" in declared or "memory" in declared:
            found.update(_first(declared, ("memory_mb", "memory"), memory, backend))
        else:
            found.update(_first(declared, ("memory_gib",), max(1, math.ceil(memory / 1024)), backend))
    if gpus:
        found.update(_gpus(backend, declared, task))
    if "cpu" in found and backend == "daytona":
        found["cpu"] = max(1, math.ceil(found["cpu"]))
    return found


def _gpus(backend: str, declared: Mapping[str, Any], task: TaskSpec) -> dict[str, Any]:
    if "extra_create_kwargs" in declared:  # docker: a device request, as `docker run --gpus N`
        request = {"Driver": "", "Count": task.gpus, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}
        return {"extra_create_kwargs": {"device_requests": [request]}}
    if "gpu" in declared and backend == "modal":
        kind = task.gpu_types[0] if task.gpu_types else "any"
        return {"gpu": f"{kind}:{task.gpus}"}
    if "gpu" in declared:
        return {"gpu": task.gpus}
    raise ValueError(f"the task needs {task.gpus} GPU(s), which the {backend} backend cannot provide")


def _first(declared: Mapping[str, Any], names: tuple[str, ...], value: Any, backend: str) -> dict[str, Any]:
    for name in names:
        if name in declared:
            return {name: value}
    log.warning("the %s backend has no option for %s; the task's request is not applied", backend, names[0])
    return {}


def _number(value: float | None) -> str | None:
    if not value:
        return None
    return str(int(value)) if float(value).is_integer() else f"{int(value * 1000)}m"


def split_keywords(keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--ek`` keywords -> (backend selection: backend, profile, config_file; backend options)."""
    chosen = {k: keywords[k] for k in RESERVED_KEYWORDS if keywords.get(k) is not None}
    options = {k: v for k, v in keywords.items() if k not in RESERVED_KEYWORDS}
    return chosen, options


def resolve(keywords: Mapping[str, Any], task: TaskSpec) -> Selection:
    """The backend, options and profile for ``task`` under the ``--ek`` ``keywords`` (see
    the module docstring; Harbor has already parsed ``--ek`` values as JSON where they
    are). Raises envlayer's ``ConfigError`` for an unknown or malformed option,
    ``ValueError`` for what the backend cannot do."""
    chosen, given = split_keywords(keywords)
    probe = select(backend=chosen.get("backend"), config_file=chosen.get("config_file"))
    declared = {f: None for f in probe.backend.Options.__dataclass_fields__}
    from_task = task_options(probe.settings.backend, declared, task)
    return select(
        backend=chosen.get("backend"),
        profile=chosen.get("profile"),
        config_file=chosen.get("config_file"),
        options={**from_task, **given},
        defaults=harness_defaults,
        default_profile=DEFAULT_PROFILE,
    )
