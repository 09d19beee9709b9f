"""Backend discovery (entry-point group ``envlayer.backends``) and loading.

* :func:`list_backends` reads entry-point metadata only: it imports no backend module
  and no SDK, and it is always fresh (it reads ``importlib.metadata`` directly, not
  stevedore's caches, whose float32 mtimes can hide a re-install for minutes).
* :func:`load_backend` imports one backend through stevedore's ``DriverManager``, fed
  with that same fresh list, and turns every failure into an error that says what to do.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any, NamedTuple

from envlayer.errors import BackendConflict, BackendLoadError, BackendNotFound

if TYPE_CHECKING:
    from envlayer.environment import Environment

GROUP = "envlayer.backends"

KNOWN_PACKAGES: dict[str, str] = {
    "local": "envlayer",
    "docker": "envlayer-docker",
    "ssh": "envlayer-ssh",
    "modal": "envlayer-modal",
    "daytona": "envlayer-daytona",
}
"""Backends this project publishes, by name, and the distribution that provides each:
used to tell a user what to install."""

_REQUIRED_METHODS = ("exec", "read_file", "write_file", "cleanup")


class BackendInfo(NamedTuple):
    """An installed backend as its distribution registers it. Nothing is imported."""

    name: str
    distribution: str
    version: str
    target: str


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """Fresh entry points of the group, one per (name, distribution, target)."""
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        key = (ep.name, dist, ep.value)
        if key not in seen:
            seen.add(key)
            unique.append(ep)
    return unique


def _info(ep: importlib.metadata.EntryPoint) -> BackendInfo:
    dist = ep.dist
    return BackendInfo(
        name=ep.name,
        distribution=dist.name if dist is not None else "unknown",
        version=dist.version if dist is not None else "unknown",
        target=ep.value,
    )


def list_backends() -> list[BackendInfo]:
    """Every installed backend, sorted by name. A name registered twice appears twice
    (``load_backend`` refuses it with :class:`BackendConflict`)."""
    return sorted((_info(ep) for ep in _entry_points()), key=lambda i: (i.name, i.distribution))


def backend_names() -> list[str]:
    """Installed backend names, sorted, without duplicates."""
    return sorted({ep.name for ep in _entry_points()})


def _driver_manager_class() -> Any:
    from stevedore import DriverManager

    class FreshDriverManager(DriverManager):  # type: ignore[misc]
        """A DriverManager that discovers through ``importlib.metadata`` on every call."""

        def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
            return [ep for ep in _entry_points() if ep.name == self._names[0]]

        def __init__(self, name: str) -> None:
            self._names = [name]
            super().__init__(GROUP, name, on_missing_entrypoints_callback=None)

    return FreshDriverManager


def load_backend(name: str) -> type[Environment]:
    """Import and return the backend class registered as ``name``.

    Raises:
        BackendNotFound: no installed distribution registers ``name``; lists the
            installed backends and names the package that provides ``name``, if known.
        BackendConflict: two distributions register ``name``.
        BackendLoadError: the plugin failed to import, or its target is not an
            Environment class; the original exception is chained.
    """
    matches = [ep for ep in _entry_points() if ep.name == name]
    if not matches:
        raise BackendNotFound(name, backend_names(), KNOWN_PACKAGES.get(name))
    distributions = {_info(ep).distribution for ep in matches}
    if len(matches) > 1:
        raise BackendConflict(name, [f"{d}" for d in distributions] if len(distributions) > 1
                              else [f"{_info(ep).distribution} ({ep.value})" for ep in matches])
    info = _info(matches[0])
    try:
        backend = _driver_manager_class()(name).driver
    except Exception as exc:  # noqa: BLE001 - any import-time failure of a plugin
        raise BackendLoadError(name, info.distribution, info.target, exc) from exc
    missing = [m for m in _REQUIRED_METHODS if not callable(getattr(backend, m, None))]
    if not isinstance(backend, type) or missing:
        problem = f"missing {', '.join(missing)}" if missing else "not a class"
        raise BackendLoadError(
            name, info.distribution, info.target, TypeError(f"{info.target} is not an Environment ({problem})")
        )
    return backend
