"""From a framework's config to one envlayer backend, its options and a profile.

Both adapters select a backend the same way: envlayer's own configuration (a config
file, or ``./envlayer.toml`` and the user file, then ``ENVLAYER_*`` variables), then the
framework config's ``backend`` / ``profile`` / ``options`` on top (highest precedence).
An adapter's defaults (for example ``persist_across_processes = false``: the framework
owns each sandbox) apply only to options the backend declares and nobody set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from envlayer.config import Settings, load_settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.environment import Environment
from envlayer.options import BaseOptions

AdapterDefaults = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""Given the backend's declared option defaults (name -> default), the adapter's defaults."""


@dataclass(frozen=True)
class Selection:
    """A resolved choice: the backend class, its validated options, the profile."""

    backend: type[Environment]
    options: BaseOptions
    profile: str
    settings: Settings

    def open(self, task_id: str) -> Environment:
        """A new environment of this selection for ``task_id`` (blocking; raises what the
        backend's constructor raises, e.g. ``BackendUnavailable``)."""
        return self.backend(self.options, task_id=task_id, profile=self.profile)


def select(
    *,
    backend: str | None = None,
    profile: str | None = None,
    config_file: str | None = None,
    options: Mapping[str, Any] | None = None,
    defaults: AdapterDefaults | None = None,
    default_profile: str = "default",
) -> Selection:
    """Resolve a framework's envlayer config into a :class:`Selection`.

    ``default_profile`` is used when no file, variable or argument names a profile.

    Raises:
        ConfigError: a bad or missing config file, an unknown option, a wrong type.
        BackendNotFound, BackendLoadError: the backend cannot be loaded.
    """
    settings = load_settings(config_path=config_file, backend=backend, profile=profile)
    cls = load_backend(settings.backend)
    given = dict(options or {})
    explicit = set(settings.option_sources(settings.backend)) | set(given)
    declared = {f.name: f.default for f in fields(cls.Options)}
    overrides = {
        name: value
        for name, value in (defaults(declared) if defaults else {}).items()
        if name in declared and name not in explicit
    }
    overrides.update(given)
    chosen = settings.options_for(settings.backend, cls.Options, overrides=overrides)
    chosen_profile = settings.profile if settings.source_of("profile") != "default" else default_profile
    return Selection(cls, chosen, chosen_profile, settings)


def framework_owned(declared: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults for sandboxes a framework creates and removes itself: one private sandbox
    per environment object (``persist_across_processes = false`` where declared), removed
    by cleanup and reaped as an orphan if the process dies."""
    return {"persist_across_processes": False} if "persist_across_processes" in declared else {}
