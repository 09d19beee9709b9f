"""Build environments from configuration: the one call most users need.

from envlayer.factory import open_environment
with open_environment(task_id="task-1") as env:      # backend from config/env vars
    print(env.exec("uname -a").stdout_text)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envlayer.config import Settings, load_settings
from envlayer.environment import Environment
from envlayer.errors import BackendNotFound
from envlayer.lifecycle import BackendSpec
from envlayer.options import BaseOptions
from envlayer.registry import backend_names, load_backend


def open_environment(
    backend: str | None = None,
    *,
    task_id: str = "default",
    profile: str | None = None,
    options: BaseOptions | Mapping[str, Any] | None = None,
    settings: Settings | None = None,
) -> Environment:
    """Create the environment for ``task_id`` on the configured (or given) backend.

    ``options`` is either a ready options object or a mapping of overrides applied on
    top of the configured options. ``settings`` defaults to :func:`load_settings`.

    Raises:
        BackendNotFound, BackendConflict, BackendLoadError: the backend cannot be loaded.
        ConfigError: its options are invalid (naming the file or variable and key).
        BackendUnavailable: its infrastructure cannot be reached.
    """
    if settings is None:
        settings = load_settings(backend=backend, profile=profile)
    name = backend or settings.backend
    cls = load_backend(name) if backend else load_configured_backend(settings)
    opts = options if isinstance(options, BaseOptions) else settings.options_for(name, cls.Options, overrides=options)
    return cls(opts, task_id=task_id, profile=profile or settings.profile)


def load_configured_backend(settings: Settings) -> type[Environment]:
    """The class of the backend ``settings`` selects. An unknown name raises
    :class:`BackendNotFound` naming where it was set: the file and key
    (``/path/envlayer.toml: backend``) or the variable (``$ENVLAYER_BACKEND``)."""
    try:
        return load_backend(settings.backend)
    except BackendNotFound as exc:
        source = settings.source_of("backend")
        if source in ("default", "argument"):
            raise
        where = source if source.startswith("$") else f"{source}: backend"
        raise BackendNotFound(exc.name, exc.installed, exc.package, source=where) from None


def backend_specs(settings: Settings, names: Sequence[str] | None = None) -> list[BackendSpec]:
    """(class, options) for each named backend (default: every installed one), for the
    backend-level sweeps in :mod:`envlayer.lifecycle`. Raises like :func:`open_environment`."""
    specs: list[BackendSpec] = []
    for name in names if names is not None else backend_names():
        cls = load_backend(name)
        specs.append((cls, settings.options_for(name, cls.Options)))
    return specs
