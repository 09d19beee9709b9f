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

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envlayer.integrations.selection import Selection, framework_owned, select

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

    def defaults(declared: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **framework_owned(declared),
            "timeout": 0,
            "max_output_bytes": max(int(declared["max_output_bytes"]), exec_output_limit),
            "max_file_bytes": max(int(declared["max_file_bytes"]), read_file_limit),
        }

    return select(
        backend=spec.backend,
        profile=spec.profile,
        config_file=spec.config_file,
        options=spec.options,
        defaults=defaults,
        default_profile=DEFAULT_PROFILE,
    )
