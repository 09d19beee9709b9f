"""Backend discovery (entry-point group ``envlayer.backends``) and loading.

* :func:`list_backends` reads entry-point metadata only (:mod:`envlayer.entrypoints`):
  it imports no backend module and no SDK, and it is always fresh (stevedore's caches,
  whose float32 mtimes can hide a re-install for minutes, are never consulted).
* :func:`load_backend` imports one backend through stevedore's ``DriverManager``, fed
  with that same fresh list, and turns every failure into an error that says what to do.
"""

from __future__ import annotations

from collections import namedtuple

from envlayer.entrypoints import EntryPointRecord, read_group
from envlayer.errors import BackendConflict, BackendLoadError, BackendNotFound

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~17 ms here)
if TYPE_CHECKING:
    from typing import Any

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


BackendInfo = namedtuple("BackendInfo", "name distribution version target")
"""An installed backend as its distribution registers it (all strings; ``target`` is
"module:attr"). Nothing is imported to build it."""


def _entry_points() -> list[EntryPointRecord]:
    """Fresh entry points of the group, one per (name, distribution, target)."""
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for record in read_group(GROUP):
        key = (record.name, record.distribution, record.value)
        if key not in seen:
            seen.add(key)
            unique.append(record)
    return unique


def _info(record: EntryPointRecord) -> BackendInfo:
    return BackendInfo(record.name, record.distribution, record.version, record.value)


def list_backends() -> list[BackendInfo]:
    """Every installed backend, sorted by name. A name registered twice appears twice
    (``load_backend`` refuses it with :class:`BackendConflict`)."""
    return sorted((_info(r) for r in _entry_points()), key=lambda i: (i.name, i.distribution))


def backend_names() -> list[str]:
    """Installed backend names, sorted, without duplicates."""
    return sorted({r.name for r in _entry_points()})


def _driver_manager_class() -> Any:
    import importlib.metadata

    from stevedore import DriverManager

    class FreshDriverManager(DriverManager):  # type: ignore[misc]
        """A DriverManager that discovers through :func:`read_group` on every call."""

        def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
            return [
                importlib.metadata.EntryPoint(r.name, r.value, GROUP)
                for r in _entry_points()
                if r.name == self._names[0]
            ]

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
    matches = [r for r in _entry_points() if r.name == name]
    if not matches:
        raise BackendNotFound(name, backend_names(), KNOWN_PACKAGES.get(name))
    distributions = {r.distribution for r in matches}
    if len(matches) > 1:
        raise BackendConflict(
            name, distributions if len(distributions) > 1 else [f"{r.distribution} ({r.value})" for r in matches]
        )
    info = _info(matches[0])
    try:
        backend = _driver_manager_class()(name).driver
    except Exception as exc:
        raise BackendLoadError(name, info.distribution, info.target, exc) from exc
    missing = [m for m in _REQUIRED_METHODS if not callable(getattr(backend, m, None))]
    if not isinstance(backend, type) or missing:
        problem = f"missing {', '.join(missing)}" if missing else "not a class"
        raise BackendLoadError(
            name, info.distribution, info.target, TypeError(f"{info.target} is not an Environment ({problem})")
        )
    return backend
