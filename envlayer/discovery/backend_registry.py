"""Backend discovery (entry-point group ``envlayer.backends``) and loading.

* :func:`list_backends` reads entry-point metadata only (:mod:`envlayer.discovery.entrypoints`):
  it imports no backend module and no SDK, and it is always fresh (stevedore's caches,
  whose float32 mtimes can hide a re-install for minutes, are never consulted).
* :func:`load_backend` imports one backend through stevedore's ``DriverManager``, fed
  with that same fresh list, and turns every failure into an error that says what to do.
"""

from __future__ import annotations

from collections import namedtuple

from envlayer.discovery.entrypoints import EntryPointRecord, read_group
from envlayer.discovery.install_hints import install_hint
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
    "kubernetes": "envlayer-kubernetes",
}
"""Backends this project publishes, by name, and the distribution that provides each:
used to tell a user what to install."""

BUILTIN: dict[str, str] = {"local": "envlayer.local.backend:LocalEnvironment"}
"""Names that belong to backends built into envlayer, and their targets. A plugin that
registers one of these names is ignored (``envlayer backends`` says so): it cannot
change what a plain ``envlayer exec`` runs."""

BUILTIN_DISTRIBUTION = "envlayer"

_origins: dict[type, str] = {}
"""Distribution of each backend class :func:`load_backend` returned."""


BackendInfo = namedtuple("BackendInfo", "name distribution version target")
"""An installed backend as its distribution registers it (all strings; ``target`` is
"module:attr"). Nothing is imported to build it."""


def shadows_builtin(info: BackendInfo | EntryPointRecord) -> bool:
    """True for a plugin's entry point that registers a built-in backend's name (it is
    ignored)."""
    return info.name in BUILTIN and info.distribution != BUILTIN_DISTRIBUTION


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


def _load_builtin(name: str) -> type[Environment]:
    import importlib

    module, _, attr = BUILTIN[name].partition(":")
    backend: type[Environment] = getattr(importlib.import_module(module), attr)
    _origins[backend] = BUILTIN_DISTRIBUTION
    return backend


def load_backend(name: str) -> type[Environment]:
    """Import and return the backend class registered as ``name``.

    A built-in name (:data:`BUILTIN`, i.e. ``local``) always loads the built-in backend;
    plugins registering it are ignored.

    Raises:
        BackendNotFound: no installed distribution registers ``name``; lists the
            installed backends and names the package that provides ``name``, if known.
        BackendConflict: two distributions register ``name``.
        BackendLoadError: the plugin failed to import (``reason="import"``), or its
            target is not an Environment subclass (``reason="not_environment"``); the
            original exception is chained.
    """
    if name in BUILTIN:
        return _load_builtin(name)
    matches = [r for r in _entry_points() if r.name == name]
    if not matches:
        package = KNOWN_PACKAGES.get(name)
        raise BackendNotFound(name, backend_names(), package, install=install_hint(package) if package else "")
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
    from envlayer.environment import Environment

    if not (isinstance(backend, type) and issubclass(backend, Environment)):
        what = "a class not derived from it" if isinstance(backend, type) else f"a {type(backend).__name__}"
        raise BackendLoadError(
            name,
            info.distribution,
            info.target,
            TypeError(f"{info.target} is not an Environment subclass (it is {what})"),
            reason="not_environment",
        )
    _origins[backend] = info.distribution
    import logging  # already imported by stevedore: free here, and kept off the listing path

    logging.getLogger("envlayer.registry").debug("loaded backend %r from %s (%s)", name, info.distribution, info.target)
    return backend


def distribution_of(backend: Any) -> str:
    """The distribution that provides ``backend`` (a class or an instance), for error
    messages: as recorded by :func:`load_backend`, else found among the installed entry
    points, else ``"module <name> (not an installed plugin)"``."""
    cls = backend if isinstance(backend, type) else type(backend)
    if cls in _origins:
        return _origins[cls]
    target = f"{cls.__module__}:{cls.__qualname__}"
    for record in _entry_points():
        if record.value == target:
            return str(record.distribution)
    return f"module {cls.__module__} (not an installed plugin)"
