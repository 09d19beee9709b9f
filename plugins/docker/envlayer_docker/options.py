"""``DockerOptions``: the Docker backend's option schema and its validation.

Importable without the Docker SDK (``envlayer doctor`` and the configuration loader read
it to validate ``[backends.docker]`` and ``ENVLAYER_DOCKER_<OPTION>`` values).

Every field is part of the container's *fingerprint* unless its doc says it is a
per-process setting (see :func:`envlayer_docker.labels.fingerprint`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from envlayer.options import OptionError, option
from envlayer.sandbox.options import ContainerOptions, DockerfileOptions, HostVariablesOptions
from envlayer.snapshot import SnapshotRetentionOptions
from envlayer_docker import gpus as gpu_request

CAPABILITY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SIZE = re.compile(r"^[0-9]+[bkmgBKMG]?$")

DEFAULT_SHM_SIZE = "1g"
DEFAULT_IDLE_RECLAIM_AFTER = 6 * 3600.0
"""Running persist-mode containers idle this long (seconds) are reclaimed by the reaper."""
DEFAULT_WORKSPACE_RETENTION = 14 * 86400.0
"""Durable workspaces of tasks unused this long (seconds) are removed by the reaper."""

SHELL_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"]
"""What a root shell needs to behave normally once every other capability is dropped."""

EXTRA_CREATE_KWARGS = frozenset(
    {
        "blkio_weight",
        "cpu_shares",
        "cpuset_cpus",
        "device_requests",
        "devices",
        "dns",
        "dns_search",
        "domainname",
        "extra_hosts",
        "group_add",
        "hostname",
        "ipc_mode",
        "mem_reservation",
        "mem_swappiness",
        "memswap_limit",
        "oom_kill_disable",
        "oom_score_adj",
        "read_only",
        "runtime",
        "security_opt",
        "stop_signal",
        "storage_opt",
        "sysctls",
        "ulimits",
    }
)
"""docker-py ``containers.create`` keywords accepted in ``extra_create_kwargs``. The ones
envlayer sets itself (image, command, labels, name, user, mounts, limits, network,
capabilities, environment) are deliberately absent: use the dedicated options."""


@dataclass(kw_only=True)
class DockerOptions(ContainerOptions, HostVariablesOptions, DockerfileOptions, SnapshotRetentionOptions):
    """Options of the Docker backend. ``cwd`` defaults to the image's ``WORKDIR``, else ``/workspace``."""

    where: ClassVar[str] = "container"

    image: str = option(
        "python:3.11-slim",
        doc="Image to run. Must be present locally unless `pull` is true. Not used when `dockerfile` is set.",
    )
    pull: bool = option(
        False, doc="Pull `image` when it is missing locally. Off by default: a missing image fails at once."
    )
    user: str | None = option(None, doc="User to run as (`name`, `uid` or `uid:gid`); the image's user when unset.")
    run_as_host_user: bool = option(
        False, doc="Run as this process's uid:gid (files in mounts stay yours). Overrides `user`."
    )
    mount_cwd: bool = option(False, doc="Bind-mount `host_cwd` (default: this process's cwd) at /workspace.")
    host_cwd: str | None = option(None, doc="Host directory that `mount_cwd` mounts; the current directory when unset.")
    volumes: list[str] = option(
        doc="Mounts as `SOURCE:TARGET[:ro|rw]`; SOURCE is an absolute host path or a named volume, TARGET absolute.",
        factory=list,
    )
    cpus: float = option(0.0, doc="CPU limit in cores (0 = unlimited).")
    memory_mb: int = option(0, doc="Memory limit in MiB (0 = unlimited).")
    pids_limit: int = option(1024, doc="Maximum number of processes in the container (0 = unlimited).")
    gpus: int | str | None = option(
        None,
        doc="GPUs, as `docker run --gpus`: `all`, a count (`2`), or `device=0,1` (indexes or UUIDs). Needs the "
        "NVIDIA Container Toolkit on the Docker host; a daemon without it is an error, never a container "
        "without the GPU. None (default) or 0: no GPU.",
    )
    network: bool = option(True, doc="False runs the container with no network (network_mode none).")
    cap_add: list[str] = option(
        doc="Linux capabilities kept after dropping ALL. Default: what a shell needs "
        "(CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID; the last two are dropped with run_as_host_user).",
        factory=lambda: list(SHELL_CAPABILITIES),
    )
    no_new_privileges: bool = option(True, doc="Set the no-new-privileges security option.")
    tmpfs: dict[str, str] = option(
        doc="tmpfs mounts, path -> mount options (sizes like size=512m). {} for none.",
        factory=lambda: {"/tmp": "rw,nosuid,size=512m", "/run": "rw,noexec,nosuid,size=64m"},
    )
    shm_size: str | None = option(
        DEFAULT_SHM_SIZE,
        doc="Size of /dev/shm (browsers and ML data loaders need more than Docker's 64m); `0` or unset: "
        "Docker's default.",
    )
    init: bool = option(
        True,
        doc="Run an init process as PID 1 (reaps zombies, forwards signals); not with an image init "
        "entrypoint kept by `image_entrypoint`, which must be PID 1 itself.",
    )
    image_entrypoint: Literal["auto", "keep", "replace"] = option(
        "auto",
        doc="`replace`: the container runs only the keep-alive command; `keep`: the image's ENTRYPOINT runs "
        "with the keep-alive command as its arguments (an init system such as s6-overlay's /init starts its "
        "services); `auto`: keep an init entrypoint (/init, tini, dumb-init, s6-svscan), replace any other.",
    )
    workspace: Literal["volume", "host", "none"] = option(
        "volume",
        doc="Where the task's working directory (`cwd`) lives so it survives its container (persist mode "
        "only): a named Docker volume per (profile, task), a host directory under `data_dir`, or `none` (the "
        "container's own layer: lost when the container is replaced). Removed by `envlayer rm --purge`, "
        "`envlayer exec --rm`, cleanup(force_remove=True, purge=True), and the reaper after `workspace_retention`.",
    )
    persist_home: bool = option(False, doc="Keep `home_dir` durable too, the same way as the workspace.")
    home_dir: str = option("/root", doc="The home directory `persist_home` keeps.")
    data_dir: str | None = option(
        None,
        doc='Host directory for `workspace = "host"` data; `$XDG_DATA_HOME/envlayer/docker` '
        "(~/.local/share/envlayer/docker) when unset.",
    )
    labels: dict[str, str] = option(doc="Extra container labels (keys must not start with `envlayer.`).", factory=dict)
    extra_create_kwargs: dict[str, Any] = option(
        doc="Extra docker-py `containers.create` keywords from a fixed allow-list (e.g. devices, ulimits, "
        "extra_hosts, security_opt, runtime). Values must be JSON-compatible.",
        factory=dict,
    )
    stop_timeout: float = option(
        5.0, doc="Seconds to wait for a graceful stop before killing, on removal. Per-process setting."
    )
    api_timeout: float = option(
        60.0,
        doc="Timeout of one Docker API request, in seconds (a snapshot's commit and copy may take an hour). "
        "Per-process setting.",
    )
    docker_host: str | None = option(
        None,
        doc="Daemon address (e.g. unix:///run/podman/podman.sock); DOCKER_HOST or the default socket "
        "when unset. Per-process setting.",
    )
    lease_interval: float = option(
        30.0, doc="How often (seconds, at most) commands refresh the container's last-used lease. Per-process setting."
    )
    idle_reclaim_after: float | None = option(
        DEFAULT_IDLE_RECLAIM_AFTER,
        doc="reap_orphans also removes RUNNING containers of the profile whose last-used lease is older than "
        "this many seconds and where no command-started process is alive (their workspace is kept). Default "
        "6 hours; 0 or unset: never. Per-process setting.",
    )
    workspace_retention: float | None = option(
        DEFAULT_WORKSPACE_RETENTION,
        doc="reap_orphans also removes the durable workspace (and home) of a task of the profile unused for this "
        "many seconds: no container of the task running, none finished, and none removed by envlayer within it "
        "(its stopped containers go with it). Default 14 days; 0 or unset: keep workspaces forever. "
        "Per-process setting.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.image.strip():
            raise OptionError("image", "must not be empty")
        self.gpus = gpu_request.normalize(self.gpus)
        if self.gpus is not None and "device_requests" in self.extra_create_kwargs:
            raise OptionError("gpus", "set either gpus or extra_create_kwargs.device_requests, not both")
        for key in ("cpus", "memory_mb", "pids_limit", "stop_timeout", "lease_interval"):
            if getattr(self, key) < 0:
                raise OptionError(key, "must be >= 0")
        if self.api_timeout <= 0:
            raise OptionError("api_timeout", "must be > 0")
        self._check_reaper_periods()
        if self.shm_size == "0":
            self.shm_size = None
        if self.workspace != "none" and self.workdir == "/":
            raise OptionError(
                "workspace", 'cannot keep / as the workspace; set cwd to a directory, or workspace = "none"'
            )
        if not self.home_dir.startswith("/") or self.home_dir == "/":
            raise OptionError("home_dir", "must be an absolute path other than /")
        if self.user is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", self.user):
            raise OptionError("user", "must be `name`, `uid` or `uid:gid`")
        for spec in self.volumes:
            parse_volume(spec)
        for path, opts in self.tmpfs.items():
            if not path.startswith("/"):
                raise OptionError("tmpfs", f"{path!r}: mount points must be absolute")
            for part in filter(None, opts.split(",")):
                if part.startswith("size=") and not _SIZE.match(part[5:]):
                    raise OptionError("tmpfs", f"{path!r}: bad size {part[5:]!r} (use e.g. size=512m)")
        if self.shm_size is not None and not _SIZE.match(self.shm_size):
            raise OptionError("shm_size", "must be a size like 64m or 1g")
        for cap in self.cap_add:
            if not CAPABILITY_NAME.match(cap) or cap == "ALL":
                raise OptionError("cap_add", f"{cap!r} is not a capability name (e.g. NET_BIND_SERVICE)")
        for key in self.labels:
            if key.startswith("envlayer.") or not key:
                raise OptionError("labels", f"{key!r}: keys starting with `envlayer.` are reserved")
        for key in self.extra_create_kwargs:
            if key not in EXTRA_CREATE_KWARGS:
                raise OptionError(
                    "extra_create_kwargs",
                    f"{key!r} is not allowed; allowed: {', '.join(sorted(EXTRA_CREATE_KWARGS))}",
                )

    def _check_reaper_periods(self) -> None:
        """``idle_reclaim_after`` and ``workspace_retention``: >= 0, and 0 means None (off)."""
        for key, off in (("idle_reclaim_after", "disables it"), ("workspace_retention", "keeps workspaces forever")):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise OptionError(key, f"must be >= 0 (0 or unset {off})")
            if value == 0:
                setattr(self, key, None)


def parse_volume(spec: str) -> tuple[str, str, bool]:
    """``SOURCE:TARGET[:ro|rw]`` -> (source, target, read_only).

    Raises :class:`OptionError` (key ``volumes``) for anything else: a relative source that is
    not a volume name, a relative target, or an unknown mode.
    """
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise OptionError("volumes", f"{spec!r}: expected SOURCE:TARGET or SOURCE:TARGET:ro")
    source, target = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise OptionError("volumes", f"{spec!r}: mode must be ro or rw, not {mode!r}")
    if not (source.startswith("/") or VOLUME_NAME.match(source)):
        raise OptionError("volumes", f"{spec!r}: source must be an absolute host path or a volume name")
    if not target.startswith("/") or target == "/":
        raise OptionError("volumes", f"{spec!r}: target must be an absolute path other than /")
    return source, target, mode == "ro"
