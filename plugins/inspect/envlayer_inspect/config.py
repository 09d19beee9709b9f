"""Which envlayer backend, profile and options an Inspect sandbox spec selects.

Inspect hands the provider one of three configs:

* ``None`` (``sandbox="envlayer"``, ``--sandbox envlayer``): envlayer's own configuration
  (``./envlayer.toml``, the user file, ``ENVLAYER_*`` variables);
* a string (``sandbox=("envlayer", "envlayer.toml")``): that envlayer config file only;
* an :class:`EnvlayerSandboxConfig` (or the mapping Inspect deserializes into one):
  ``backend``, ``profile``, ``options`` and an optional ``config_file``, layered over the
  configuration files as keyword arguments are.

Defaults the adapter applies, each only where the user set nothing (file, variable or
mapping): the profile ``inspect``; ``persist_across_processes = false`` on backends that
have the option (each sample's sandbox belongs to this process, is removed at sample
cleanup, and is an orphan for the reaper if the process dies); ``timeout = 0`` (no
limit: an Inspect ``exec`` without a timeout has none); ``max_output_bytes`` and
``max_file_bytes`` at least Inspect's limits, which the adapter enforces per call.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envlayer.config import Settings, load_settings
from envlayer.environment import Environment
from envlayer.options import BaseOptions
from envlayer.registry import load_backend

DEFAULT_PROFILE = "inspect"


class EnvlayerSandboxConfig(BaseModel):
    """The mapping form of the ``envlayer`` sandbox config.

    ``SandboxEnvironmentSpec("envlayer", EnvlayerSandboxConfig(backend="docker",
    options={"image": "python:3.12-slim"}))``, or in YAML/JSON task config
    ``{"type": "envlayer", "config": {"backend": "docker", "options": {...}}}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str | None = None
    """envlayer backend name (``local``, ``docker``, ``ssh``, ...); the configured one when unset."""
    profile: str | None = None
    """envlayer profile; ``inspect`` unless configured."""
    config_file: str | None = None
    """An envlayer config file to read instead of ``./envlayer.toml`` and the user file."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Backend options, as in ``[backends.NAME]`` (highest precedence)."""

    def __hash__(self) -> int:
        return hash(self.model_dump_json())


@dataclass(frozen=True)
class Selection:
    """A resolved config: the backend class, its validated options, the profile."""

    backend: type[Environment]
    options: BaseOptions
    profile: str
    settings: Settings

    def open(self, task_id: str) -> Environment:
        """A new environment of this selection for ``task_id`` (blocking)."""
        return self.backend(self.options, task_id=task_id, profile=self.profile)


def resolve(config: BaseModel | str | None, *, exec_output_limit: int, read_file_limit: int) -> Selection:
    """Resolve Inspect's sandbox ``config`` into a :class:`Selection`.

    Raises envlayer's ``ConfigError`` (bad file, unknown option, wrong type),
    ``BackendNotFound`` / ``BackendLoadError``, and ``TypeError`` for a config of
    another provider (for example a compose file model).
    """
    if config is None or isinstance(config, str):
        spec = EnvlayerSandboxConfig(config_file=config)
    elif isinstance(config, EnvlayerSandboxConfig):
        spec = config
    else:
        raise TypeError(
            f"the envlayer sandbox takes an envlayer config file or an EnvlayerSandboxConfig, "
            f"not {type(config).__name__}; see docs/integrations.md"
        )
    settings = load_settings(config_path=spec.config_file, backend=spec.backend, profile=spec.profile)
    cls = load_backend(settings.backend)
    explicit = set(settings.option_sources(settings.backend)) | set(spec.options)
    overrides = _adapter_defaults(cls.Options, explicit, exec_output_limit, read_file_limit)
    overrides.update(spec.options)
    options = settings.options_for(settings.backend, cls.Options, overrides=overrides)
    profile = settings.profile if settings.source_of("profile") != "default" else DEFAULT_PROFILE
    return Selection(cls, options, profile, settings)


def _adapter_defaults(
    options_cls: type[BaseOptions], explicit: set[str], exec_output_limit: int, read_file_limit: int
) -> dict[str, Any]:
    declared = {f.name: f.default for f in fields(options_cls)}
    defaults: dict[str, Any] = {
        "timeout": 0,
        "max_output_bytes": max(int(declared["max_output_bytes"]), exec_output_limit),  # type: ignore[call-overload]
        "max_file_bytes": max(int(declared["max_file_bytes"]), read_file_limit),  # type: ignore[call-overload]
    }
    if "persist_across_processes" in declared:
        defaults["persist_across_processes"] = False
    return {k: v for k, v in defaults.items() if k not in explicit}
