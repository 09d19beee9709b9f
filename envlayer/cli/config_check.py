"""A ``[backends.NAME]`` table of the configuration files whose NAME is no backend: an
error (with the nearest installed name) for every command that reads the configuration,
so ``doctor`` reports it too. The options inside a table are checked when that backend
is used (:meth:`envlayer.config.Settings.options_for`), and by ``doctor`` for each backend."""

from __future__ import annotations

import difflib

from envlayer.config import Settings
from envlayer.discovery.backend_registry import KNOWN_PACKAGES, backend_names
from envlayer.errors import ConfigError


def check_backend_tables(settings: Settings) -> None:
    """Raise :class:`ConfigError` for a ``[backends.NAME]`` table whose NAME is neither
    installed nor one of this project's backends (an uninstalled one of those is a table
    for another machine, and is left alone)."""
    installed = backend_names()
    for name in settings.backend_options:
        if name in installed or name in KNOWN_PACKAGES:
            continue
        sources = {s for key, s in settings.sources.items() if key.startswith(f"backends.{name}.")}
        source = ", ".join(sorted(sources)) or ", ".join(settings.files) or "configuration"
        close = difflib.get_close_matches(name, [*installed, *KNOWN_PACKAGES], n=1)
        hint = (
            f"did you mean [backends.{close[0]}]?"
            if close
            else f"installed backends: {', '.join(installed)}; install the package that provides {name!r}, "
            f"or remove the table"
        )
        raise ConfigError("unknown backend", source=source, key=f"[backends.{name}]", hint=hint)
