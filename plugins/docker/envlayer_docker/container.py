"""Creating, attaching to and reusing the container of an environment.

Rules (see docs/backends/docker.md, "Reuse"):

* Persist mode: the container is named ``naming.container_name(profile, task)``. Creating
  it is the atomic step: a 409 name conflict means another process won, and we attach to
  its container. Found running with our fingerprint -> attach (no start). Found stopped
  (exited / created) -> start it; if that fails, remove it and create a fresh one.
  Found with a different fingerprint -> ``recreate`` (remove it, create ours) or
  ``error``, per ``on_fingerprint_mismatch``. Found ``dead`` -> remove and create.
* Opt-out mode: a private, uniquely named container per environment, handled by the same
  rules (so a stopped private container is restarted, not duplicated).
* A create that fails after the container exists (start failed) removes what it made.
* Ctrl-C during a create waits for the daemon's answer, removes the container it made,
  then propagates (:mod:`envlayer_docker.uninterrupted`): an abandoned request would
  land after the caller's cleanup had listed what exists.
* A created container's working directory and durable volumes are handed to its
  ``user`` before any command runs (:mod:`envlayer_docker.ownership`).
* A name held by a container envlayer did not label is never touched.
* The image is never pulled unless ``pull`` is set; a missing image fails at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from envlayer.errors import BackendUnavailable, ConfigError
from envlayer.sandbox import recorded_options
from envlayer.sandbox.owner import owner_label
from envlayer_docker import gpus as gpu_request
from envlayer_docker import labels as L
from envlayer_docker import ownership, sdk, workspace
from envlayer_docker.keepalive import KEEPALIVE
from envlayer_docker.naming import container_name, private_name
from envlayer_docker.options import DockerOptions, parse_volume
from envlayer_docker.uninterrupted import finish_then_interrupt

log = logging.getLogger("envlayer.docker")
_MAX_ATTEMPTS = 12
_CONFIG_KWARGS = {"hostname", "domainname", "stop_signal"}
SHAPING_OPTIONS = (
    "image",
    "user",
    "run_as_host_user",
    "mount_cwd",
    "host_cwd",
    "volumes",
    "cpus",
    "memory_mb",
    "pids_limit",
    "network",
    "cap_add",
    "no_new_privileges",
    "tmpfs",
    "shm_size",
    "init",
    "image_entrypoint",
    "workspace",
    "persist_home",
    "home_dir",
    "data_dir",
    "labels",
    "extra_create_kwargs",
    "cwd",
    "env",
    "forward_env",
)
"""The options that shape the container (its fingerprint's inputs), recorded in its
:data:`~envlayer_docker.labels.OPTIONS` label (see :mod:`envlayer.sandbox.recorded_options`)."""


@dataclass
class ContainerSpec:
    """Everything needed to create the container, plus its identity."""

    name: str
    image: str
    user: str | None
    labels: dict[str, str]
    fingerprint: str
    config: dict[str, Any]
    host_config: dict[str, Any]
    persist: bool
    data: list[workspace.DataMount] = field(default_factory=list)
    profile: str = ""
    task: str = ""
    owned_dirs: list[str] = field(default_factory=list)
    """Directories handed to ``user`` when the container is created (see :mod:`envlayer_docker.ownership`)."""
    record: dict[str, Any] = field(default_factory=dict)
    """The options it is created with, as recorded in its labels (:data:`SHAPING_OPTIONS`)."""


@dataclass
class Attached:
    """A container ready for commands."""

    id: str
    name: str
    created: bool
    tmpfs_paths: list[str] = field(default_factory=list)
    image_user: str = ""
    replaced: str = ""
    """When a container with other options was replaced to make this one: the notice saying so."""


def effective_user(options: DockerOptions) -> str | None:
    """The ``user`` the container and every exec run as (None: the image's)."""
    if options.run_as_host_user and hasattr(os, "getuid"):
        return f"{os.getuid()}:{os.getgid()}"
    return options.user


INIT_ENTRYPOINTS = frozenset({"init", "tini", "tini-static", "dumb-init", "s6-svscan", "docker-init", "catatonit"})
"""Basenames of image entrypoints that are init systems (PID 1 that starts services)."""


def entrypoint_kept(api: Any, options: DockerOptions) -> tuple[bool, bool]:
    """(keep the image's entrypoint, it is an init system) under ``image_entrypoint``.

    ``auto`` inspects the image (pulling it first when ``pull`` is set). Raises
    :class:`BackendUnavailable` when the image is missing and may not be pulled."""
    if options.image_entrypoint == "replace":
        return False, False
    try:
        info = api.inspect_image(options.image)
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        _ensure_image(api, options)
        info = api.inspect_image(options.image)
    entry = (info.get("Config") or {}).get("Entrypoint") or []
    is_init = bool(entry) and os.path.basename(entry[0]) in INIT_ENTRYPOINTS
    keep = options.image_entrypoint == "keep" or is_init
    return keep and bool(entry), is_init


def _mount(source: str, target: str, *, read_only: bool = False) -> dict[str, Any]:
    """A ``Mounts`` entry: a bind for an absolute ``source`` (the daemon refuses a missing
    one instead of creating it), else a named volume."""
    kind = "bind" if source.startswith("/") else "volume"
    return sdk.types.Mount(target, source, type=kind, read_only=read_only)


def owned_dirs(options: DockerOptions, data: list[workspace.DataMount], *, user_mounts: set[str]) -> list[str]:
    """The directories the container's user must own: the durable volumes, and the
    working directory unless the user mounts something at or above it (their bind mounts
    and tmpfs are theirs to arrange; a ``workspace = "host"`` directory lives on the host).
    Pure."""
    owned = [d.target for d in data if d.storage == "volume"]
    workdir = options.workdir
    under_user_mount = any(workdir == m or workdir.startswith(m.rstrip("/") + "/") for m in user_mounts)
    if workdir != "/" and workdir not in {d.target for d in data} and not under_user_mount:
        owned.insert(0, workdir)
    return owned


def _user_mounts(options: DockerOptions) -> list[dict[str, Any]]:
    """The ``volumes`` the user asked for, plus the host's directory at ``/workspace``
    under ``mount_cwd`` (unless a volume already takes ``/workspace``)."""
    mounts = []
    for spec in options.volumes:
        source, target, read_only = parse_volume(spec)
        mounts.append(_mount(source, target, read_only=read_only))
    if options.mount_cwd and "/workspace" not in {m["Target"] for m in mounts}:
        host_cwd = os.path.abspath(os.path.expanduser(options.host_cwd or os.getcwd()))
        mounts.append(_mount(host_cwd, "/workspace"))
    return mounts


def _host_config(
    api: Any, options: DockerOptions, mounts: list[dict[str, Any]], *, init_entrypoint: bool, extra: dict[str, Any]
) -> dict[str, Any]:
    """The daemon's ``HostConfig``: mounts, the hardening defaults and limits, then
    ``extra`` (the host-config part of ``extra_create_kwargs``), checked by docker-py.

    Raises :class:`ConfigError` when the Docker API rejects a value."""
    caps = list(options.cap_add)
    if options.run_as_host_user:
        caps = [c for c in caps if c not in ("SETUID", "SETGID")]
    extra = dict(extra)
    security_opt = list(extra.pop("security_opt", []) or [])
    if options.no_new_privileges and "no-new-privileges" not in security_opt:
        security_opt.append("no-new-privileges")
    host_kwargs: dict[str, Any] = {
        "mounts": mounts or None,
        "tmpfs": dict(options.tmpfs) or None,
        "cap_drop": ["ALL"],
        "cap_add": caps or None,
        "security_opt": security_opt or None,
        "pids_limit": options.pids_limit or None,
        "mem_limit": f"{options.memory_mb}m" if options.memory_mb else None,
        "nano_cpus": int(options.cpus * 1e9) or None,
        "network_mode": None if options.network else "none",
        "init": options.init and not init_entrypoint,
        "shm_size": options.shm_size,
        "device_requests": gpu_request.device_requests(options.gpus),
        **extra,
    }
    try:
        return api.create_host_config(**{k: v for k, v in host_kwargs.items() if v is not None})
    except Exception as exc:
        raise ConfigError(
            f"the Docker API rejects these container options: {exc}",
            source="options",
            key="extra_create_kwargs",
            hint="fix or remove the offending option",
        ) from exc


def build_spec(api: Any, options: DockerOptions, *, profile: str, task: str, persist: bool) -> ContainerSpec:
    """Translate ``options`` into create arguments and the fingerprint.

    Raises :class:`ConfigError` for values the daemon API rejects (``extra_create_kwargs``),
    :class:`BackendUnavailable` when ``image_entrypoint = "auto"`` needs a missing image.
    """
    user = effective_user(options)
    mounts = _user_mounts(options)
    targets = {m["Target"] for m in mounts}
    data = workspace.plan(options, profile=profile, task=task, persist=persist, taken=targets | set(options.tmpfs))
    owned = owned_dirs(options, data, user_mounts=targets | set(options.tmpfs))
    mounts += [_mount(d.source, d.target) for d in data]
    keep_entrypoint, init_entrypoint = entrypoint_kept(api, options)
    extra = dict(options.extra_create_kwargs)
    config_extra = {k: extra.pop(k) for k in list(extra) if k in _CONFIG_KWARGS}
    host_config = _host_config(api, options, mounts, init_entrypoint=init_entrypoint, extra=extra)
    config: dict[str, Any] = {
        "entrypoint": None if keep_entrypoint else KEEPALIVE[:1],
        "command": KEEPALIVE if keep_entrypoint else KEEPALIVE[1:],
        "working_dir": options.workdir,
        "user": user,
        "network_disabled": not options.network,
        **config_extra,
    }
    env_names = sorted(set(options.env) | set(options.forward_env))
    fp = L.fingerprint(
        {
            "image": options.image,
            "config": config,
            "host_config": host_config,
            "env_names": env_names,
            "labels": options.labels,
        }
    )
    name = container_name(profile, task) if persist else private_name(profile, task)
    record = recorded_options.record_of(options, SHAPING_OPTIONS)
    labels = L.managed_labels(
        profile=profile,
        task=task,
        fingerprint_value=fp,
        persist=persist,
        extra=options.labels,
        owner=None if persist else owner_label(),
    )
    return ContainerSpec(
        name=name,
        image=options.image,
        user=user,
        labels={**labels, L.OPTIONS: recorded_options.encode(record)},
        fingerprint=fp,
        config=config,
        host_config=host_config,
        persist=persist,
        data=data,
        profile=profile,
        task=task,
        owned_dirs=owned,
        record=record,
    )


def _attached(info: dict[str, Any], created: bool, replaced: str = "") -> Attached:
    tmpfs = list((info.get("HostConfig") or {}).get("Tmpfs") or {})
    tmpfs += [m["Destination"] for m in info.get("Mounts") or [] if m.get("Type") == "tmpfs"]
    return Attached(
        id=info["Id"],
        name=info.get("Name", "").lstrip("/"),
        created=created,
        tmpfs_paths=sorted(set(tmpfs)),
        image_user=(info.get("Config") or {}).get("User") or "",
        replaced=replaced,
    )


def _remove(api: Any, ident: str) -> None:
    """Force-remove, treating "already gone" and "removal in progress" as success."""
    try:
        api.remove_container(ident, force=True)
    except sdk.errors.NotFound:
        pass
    except sdk.errors.APIError as exc:
        if exc.status_code != 409:
            raise


def _ensure_image(api: Any, options: DockerOptions) -> None:
    try:
        api.inspect_image(options.image)
        return
    except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
        if not options.pull:
            raise BackendUnavailable(
                f"image {options.image!r} is not present on the Docker daemon (envlayer never pulls unless asked)",
                hint=f"build or load it (`docker build`, `docker load`), run `docker pull {options.image}`, "
                "or set pull = true in [backends.docker]",
            ) from None
    try:
        api.pull(options.image)
    except sdk.errors.APIError as exc:
        raise BackendUnavailable(
            f"pulling image {options.image!r} failed: {exc.explanation or exc}",
            hint="check the image name and that the registry is reachable, or build the image locally",
        ) from exc


def _refuse_missing_bind_source(exc: Any) -> None:
    """Raise a :class:`ConfigError` for the daemon's "bind source path does not exist"."""
    text = str(exc.explanation or exc)
    marker = "bind source path does not exist"
    if marker in text:
        path = text.split(marker, 1)[1].strip(" :")
        raise ConfigError(
            f"the host path {path} mounted into the container does not exist (envlayer does not create it)",
            source="options",
            key="volumes",
            hint="create the directory, or fix `volumes` / `host_cwd`",
        ) from exc


_LIMIT_WORDS = ("cgroup", "pids.max", "memory.max", "memory.limit", "cpu.max", "cpu.cfs", "cpuset", "nano_cpus")


def limit_failure(exc: Any, options: DockerOptions) -> BackendUnavailable | None:
    """A :class:`BackendUnavailable` with a hint when the daemon could not apply resource
    limits (rootless Docker without delegated cgroup controllers, unprivileged LXC);
    ``None`` for any other failure. Pure."""
    text = str(getattr(exc, "explanation", None) or exc)
    limited = options.memory_mb or options.cpus or options.pids_limit
    if not limited or not any(word in text.lower() for word in _LIMIT_WORDS):
        return None
    return BackendUnavailable(
        f"this Docker host could not apply the container's resource limits: {text[:300]}",
        hint="rootless Docker needs delegated cgroup v2 controllers and unprivileged LXC often has none: "
        "enable delegation, or set memory_mb = 0, cpus = 0 and pids_limit = 0 in [backends.docker] on this host",
    )


def _create(api: Any, spec: ContainerSpec, options: DockerOptions) -> dict[str, Any] | None:
    """Create and start a container named ``spec.name`` and hand its directories to its
    user (``user``, else the image's). Returns its inspection, or ``None`` when the name
    is already taken (another process won the race). A container that was created but
    cannot start, or whose user the image lacks, is removed before the error propagates."""
    workspace.ensure(api, spec.data, profile=spec.profile, task=spec.task)
    try:
        cid = api.create_container(
            spec.image, name=spec.name, labels=spec.labels, host_config=spec.host_config, detach=True, **spec.config
        )["Id"]
    except sdk.errors.ImageNotFound:
        _ensure_image(api, options)
        return _create(api, spec, options)
    except sdk.errors.APIError as exc:
        if exc.status_code == 409:
            return None
        _refuse_missing_bind_source(exc)
        hinted = limit_failure(exc, options)
        if hinted is not None:
            raise hinted from exc
        if exc.status_code == 404 and "image" in str(exc.explanation or "").lower():
            _ensure_image(api, options)
            return _create(api, spec, options)
        raise
    try:
        api.start(cid)
        info = api.inspect_container(cid)
        user = spec.user or (info.get("Config") or {}).get("User") or None
        ownership.hand_over(api, cid, user=user, image=spec.image, directories=spec.owned_dirs)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            _remove(api, cid)
        hinted = None
        if isinstance(exc, sdk.errors.APIError):
            hinted = (
                limit_failure(exc, options)
                or gpu_request.no_gpu_runtime(exc, options.gpus)
                or ownership.unknown_user(exc, spec.image)
            )
        if hinted is not None:
            raise hinted from exc
        raise
    return info


def _replacement(info: dict[str, Any], spec: ContainerSpec, options: DockerOptions) -> str:
    """ "" when the container found under ``spec``'s name is envlayer's with ``spec``'s
    fingerprint; else the notice of its replacement (other options, to be recreated,
    see :func:`envlayer.sandbox.recorded_options.settle_mismatch`). Raises
    :class:`BackendUnavailable` for a container envlayer does not manage, and
    :class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer` for other options
    under ``on_fingerprint_mismatch = "error"``."""
    found = (info.get("Config") or {}).get("Labels") or {}
    if found.get(L.MANAGED) != "1":
        raise BackendUnavailable(
            f"a container named {spec.name} exists but is not managed by envlayer",
            hint=f"remove or rename it (`docker rm -f {spec.name}`)",
        )
    if found.get(L.FINGERPRINT) == spec.fingerprint:
        return ""
    return recorded_options.settle_mismatch(
        what=f"container {spec.name} of task {spec.task!r}",
        mode=options.on_fingerprint_mismatch,
        found=found.get(L.OPTIONS),
        requested=spec.record,
        logger=log,
    )


def refuse_other_options(api: Any, options: DockerOptions, *, profile: str, task: str) -> None:
    """Under ``on_fingerprint_mismatch = "error"``, raise
    :class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer` when the task's
    persist-mode container exists with other recorded options: called when its spec
    cannot be built (its image is missing), so a call whose defaults differ from the
    task's options learns them instead of failing on an image it would not use."""
    if options.on_fingerprint_mismatch != "error" or not options.persist_across_processes:
        return
    name = container_name(profile, task)
    try:
        found = (api.inspect_container(name).get("Config") or {}).get("Labels") or {}
    except sdk.errors.NotFound:
        return
    stored = found.get(L.OPTIONS)
    requested = recorded_options.record_of(options, SHAPING_OPTIONS)
    differs = recorded_options.option_changes(recorded_options.decode(stored) or {}, requested)
    if found.get(L.MANAGED) == "1" and differs:
        what = f"container {name} of task {task!r}"
        recorded_options.settle_mismatch(what=what, mode="error", found=stored, requested=requested, logger=log)


def ensure(api: Any, spec: ContainerSpec, options: DockerOptions) -> Attached:
    """Attach to, start, recreate or create the container of ``spec`` (module rules).

    Raises :class:`BackendUnavailable` (start failures, an unmanaged container holding
    the name, a fingerprint mismatch with ``on_fingerprint_mismatch = "error"``, or a
    race that does not settle) and docker-py errors for unexpected API failures.
    """
    restarted_once = False
    replaced = ""
    for _ in range(_MAX_ATTEMPTS):
        try:
            info = api.inspect_container(spec.name)
        except sdk.errors.NotFound:
            created = finish_then_interrupt(
                lambda: _create(api, spec, options),
                undo=lambda made: made and _remove(api, made["Id"]),
                name=f"envlayer-docker-create-{spec.name}",
            )
            if created is None:
                continue  # lost the race: attach to the winner on the next round
            return _attached(created, created=True, replaced=replaced)
        notice = _replacement(info, spec, options)
        if notice:
            replaced = notice
            _remove(api, info["Id"])  # created with other options: recreate it
            continue
        state = info.get("State") or {}
        status = state.get("Status")
        if status in ("running", "restarting"):
            return _attached(info, created=False)
        if status == "paused":
            api.unpause(info["Id"])
            return _attached(info, created=False)
        if status in ("created", "exited") and not restarted_once:
            restarted_once = True
            try:
                api.start(info["Id"])
                return _attached(api.inspect_container(info["Id"]), created=False)
            except sdk.errors.NotFound:
                continue
            except sdk.errors.APIError:
                _remove(api, info["Id"])  # cannot start: replace it with a fresh one
                continue
        if status == "removing":
            time.sleep(0.05)
            continue
        _remove(api, info["Id"])  # dead, or a second failed start
    raise BackendUnavailable(
        f"could not settle on one container named {spec.name} after {_MAX_ATTEMPTS} attempts",
        hint="another process may be recreating it with different options; make their options agree",
    )
