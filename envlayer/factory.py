"""Build environments from configuration: the one call most users need.

from envlayer.factory import open_environment
with open_environment(task_id="task-1") as env:      # backend from config/env vars
    print(env.exec("uname -a").stdout_text)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envlayer.capabilities import Capability, supports
from envlayer.config import Settings, load_settings
from envlayer.discovery.backend_registry import backend_names, load_backend
from envlayer.discovery.plugin_calls import plugin_call
from envlayer.dispatch import BackendSpec, snapshot_refused
from envlayer.environment import Environment
from envlayer.errors import BackendNotFound, EnvlayerError
from envlayer.options import BaseOptions
from envlayer.snapshot import Snapshot


def backend_class(name: str, backends: Mapping[str, type[Environment]] | None = None) -> type[Environment]:
    """The class of backend ``name``: from ``backends`` (classes an application embeds
    without packaging them) when it is there, else the installed entry point.

    Raises: BackendNotFound, BackendConflict, BackendLoadError (see
    :func:`envlayer.discovery.backend_registry.load_backend`).
    """
    if backends is not None and name in backends:
        return backends[name]
    return load_backend(name)


def load_configured_backend(
    settings: Settings, backends: Mapping[str, type[Environment]] | None = None
) -> type[Environment]:
    """The class of the backend ``settings`` selects (see :func:`backend_class`). An
    unknown name raises :class:`BackendNotFound` naming where it was set: the file and key
    (``/path/envlayer.toml: backend``), the variable (``$ENVLAYER_BACKEND``) or the flag
    (``--backend``)."""
    try:
        return backend_class(settings.backend, backends)
    except BackendNotFound as exc:
        source = settings.source_of("backend")
        if source in ("default", "argument"):
            raise
        where = source if source.startswith(("$", "--")) else f"{source}: backend"
        raise BackendNotFound(exc.name, exc.installed, exc.package, source=where, install=exc.install) from None


def open_environment(
    backend: str | None = None,
    *,
    task_id: str = "default",
    profile: str | None = None,
    options: BaseOptions | Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    backends: Mapping[str, type[Environment]] | None = None,
    from_snapshot: Snapshot | None = None,
) -> Environment:
    """Create the environment for ``task_id`` on the configured (or given) backend.

    ``from_snapshot`` starts it from that :class:`~envlayer.snapshot.Snapshot` (the
    backend defaults to the snapshot's; the task must not have a sandbox yet).

    ``options`` is either a ready options object or a mapping of overrides applied on
    top of the configured options. ``settings`` defaults to :func:`load_settings`.
    ``backends`` maps extra names to classes (see :func:`backend_class`).

    Raises:
        BackendNotFound, BackendConflict, BackendLoadError: the backend cannot be loaded.
        ConfigError: its options are invalid (naming the file or variable and key).
        BackendUnavailable: its infrastructure cannot be reached.
        PluginError: its constructor raised anything but an envlayer error (a plugin bug).
        InvalidArgument: ``from_snapshot`` on a backend without snapshots (naming those
            that have them), or a snapshot of another backend.
    """
    if from_snapshot is not None and backend is None:
        backend = from_snapshot.backend
    if settings is None:
        settings = load_settings(backend=backend, profile=profile)
    name = backend or settings.backend
    cls = backend_class(name, backends) if backend else load_configured_backend(settings, backends)
    opts = options if isinstance(options, BaseOptions) else settings.options_for(name, cls.Options, overrides=options)
    extra: dict[str, Any] = {}
    if from_snapshot is not None:
        if not supports(cls, Capability.SNAPSHOT):
            raise snapshot_refused(cls, "start from a snapshot")
        extra["from_snapshot"] = from_snapshot
    with plugin_call(cls, "constructor"):
        return cls(opts, task_id=task_id, profile=profile or settings.profile, **extra)


@dataclass(frozen=True)
class LoadFailure:
    """A backend :func:`backend_specs` could not prepare, and why."""

    backend: str
    error: EnvlayerError


def backend_specs(
    settings: Settings, names: Sequence[str] | None = None
) -> tuple[list[BackendSpec], list[LoadFailure]]:
    """(class, options) for each named backend (default: every installed one), for the
    backend-level sweeps in :mod:`envlayer.dispatch`, and the backends that could not
    be loaded or configured. Never raises for one backend: a broken plugin is reported
    in the failures and the others are still returned."""
    specs: list[BackendSpec] = []
    failures: list[LoadFailure] = []
    for name in names if names is not None else backend_names():
        try:
            cls = load_backend(name)
            specs.append((cls, settings.options_for(name, cls.Options)))
        except EnvlayerError as exc:
            failures.append(LoadFailure(name, exc))
    return specs, failures
