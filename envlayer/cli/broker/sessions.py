"""The environments one broker holds, and their session shells.

One :class:`~envlayer.manager.EnvironmentManager` per configuration (backend, profile,
the backend's resolved options, ``lifetime_seconds``, ``orphan_reaper``) and the values of
the environment variables that backend reads (its ``environment_variables``: names or
``fnmatch`` patterns, such as ``("DOCKER_*",)``; a backend that declares none is taken to
read every variable but those a shell changes by itself), those its ``forward_env``
option names, and the backend's client identity (its ``client_identity(options, environ,
cwd)``, :mod:`envlayer.sandbox.client_identity`: the server, and a digest of the token,
key or kubeconfig content behind it), so two callers with different credentials never
share an environment. The caller's directory (but for what the identity reads there) and
any other variable do not select an environment: a task's session (``cd``, ``export``)
holds across calls from any directory. So a broker
follows exactly the manager's rules (see ``docs/lifecycle.md``, "The agent manager"):
creation at most once per task, idle release after ``lifetime_seconds`` (persist-mode
sandboxes stay), eviction on ``BackendUnavailable``, the orphan reaper once per backend
and profile, plain cleanup at close. A private sandbox's owner is the broker's process,
so the orphan reaper treats a killed broker's sandboxes as any dead process's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from envlayer.agents.manager import EnvironmentManager, ManagedEnvironment
from envlayer.config import Settings, env_prefix
from envlayer.dispatch import wait_for_cleanup
from envlayer.environment import Environment
from envlayer.errors import EnvlayerError
from envlayer.factory import load_configured_backend
from envlayer.sandbox.client_identity import ClientIdentity, digest

log = logging.getLogger("envlayer.broker")

TEARDOWN_WAIT = 30.0
"""Seconds ``exec --rm`` waits for the sandbox's teardown (as in-process)."""
SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
"""Variables a shell changes by itself: never part of a key."""


def variables_read(cls: type[Environment], environ: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``environ`` that backend class ``cls`` reads (see the module docstring)."""
    patterns = getattr(cls, "environment_variables", None)
    if patterns is None:
        return {k: v for k, v in environ.items() if k not in SHELL_VARIABLES}
    return {k: v for k, v in environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def _key_variables(cls: type[Environment], options: object, environ: Mapping[str, str]) -> dict[str, str]:
    """:func:`variables_read`, plus those the ``forward_env`` option names (passed into
    the sandbox from the caller's environment)."""
    forwarded = set(getattr(options, "forward_env", None) or ())
    return {**variables_read(cls, environ), **{k: v for k, v in environ.items() if k in forwarded}}


def client_identity(
    cls: type[Environment], options: object, environ: Mapping[str, str], cwd: str
) -> ClientIdentity | None:
    """The backend's ``client_identity`` for this caller, or None when it offers none or
    cannot tell (no configuration found: creating the environment reports that)."""
    method = getattr(cls, "client_identity", None)
    if method is None:
        return None
    try:
        identity: ClientIdentity = method(options, environ, cwd)
    except EnvlayerError:
        return None
    return identity


@dataclass(frozen=True)
class Configuration:
    """What makes two calls share environments (see the module docstring)."""

    key: str
    """A digest of all of it."""
    identity: ClientIdentity | None
    selectors: dict[str, str]
    """Option and variable names, ``identity``, each with a short digest of its value:
    how ``broker status`` says what tells two environments of one task apart."""


def configuration(
    settings: Settings, cls: type[Environment], environ: Mapping[str, str], cwd: str = "/"
) -> Configuration:
    """The :class:`Configuration` of a call with ``settings`` on backend class ``cls``,
    from the caller's ``environ`` and ``cwd``. Raises
    :class:`~envlayer.errors.ConfigError` for invalid options."""
    options = settings.options_for(settings.backend, cls.Options, env=environ)
    identity = client_identity(cls, options, environ, cwd)
    data = {
        "backend": settings.backend,
        "profile": settings.profile,
        "lifetime_seconds": settings.lifetime_seconds,
        "orphan_reaper": settings.orphan_reaper,
        "options": dataclasses.asdict(options),
        "variables": _key_variables(cls, options, environ),
        "identity": dataclasses.asdict(identity) if identity is not None else None,
    }
    selectors = {name: digest(value)[:8] for name, value in data["options"].items()}
    selectors.update({name: digest(value)[:8] for name, value in data["variables"].items()})
    if identity is not None:
        selectors["identity"] = identity.short
    return Configuration(digest(data), identity, selectors)


@dataclass(frozen=True)
class HeldEnvironment:
    """One environment a broker holds, as ``envlayer broker status`` shows it."""

    backend: str
    profile: str
    task: str
    idle_seconds: float
    in_flight: int
    server: str = ""
    """Where the backend's client goes (empty: the backend names none)."""
    identity: str = ""
    """8 hex digits of the client identity's digest (empty: the backend offers none)."""
    selectors: dict[str, str] = field(default_factory=dict)
    """See :attr:`Configuration.selectors`."""


def _held(configuration: Configuration, key: Any, idle: float, in_flight: int) -> HeldEnvironment:
    identity = configuration.identity
    return HeldEnvironment(
        key.backend,
        key.profile,
        key.task,
        round(idle, 1),
        in_flight,
        identity.server if identity else "",
        identity.short if identity else "",
        configuration.selectors,
    )


class Sessions:
    """The broker's environments (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._managers: dict[str, tuple[Configuration, EnvironmentManager]] = {}
        self._classes: dict[str, type[Environment]] = {}
        self.remembered: dict[str, Settings] = {}
        """The settings a task's calls open it with: its recorded options as defaults
        (see :func:`envlayer.cli.task_sandbox.open_task`), by :meth:`task_key`."""

    def task_key(self, settings: Settings, task: str, environ: Mapping[str, str]) -> str:
        """What selects the remembered settings of ``task``'s calls: the raw inputs of the
        backend's options (files, ``ENVLAYER_<BACKEND>_*`` variables, arguments) and the
        variables it reads, not the validated options (:func:`configuration_key` costs
        milliseconds; a stale entry only costs one more open, see ``open_task``)."""
        backend, prefix = settings.backend, env_prefix(settings.backend)
        data = [
            backend,
            settings.profile,
            settings.backend_options.get(backend, {}),
            settings.argument_options.get(backend, {}),
            {k: v for k, v in environ.items() if k.startswith(prefix)},
            variables_read(self.backend_class(settings), environ),
        ]
        return json.dumps(data, sort_keys=True, default=repr) + "\0" + task

    def backend_class(self, settings: Settings) -> type[Environment]:
        """The class of the backend ``settings`` selects, loaded once per broker (finding
        and importing it takes tens of milliseconds; a backend installed or upgraded
        while the broker runs is seen by the next broker, which the changed installation
        starts: :mod:`envlayer.cli.broker.installation`). Raises like
        :func:`~envlayer.factory.load_configured_backend`; a failure is not remembered."""
        with self._lock:
            cls = self._classes.get(settings.backend)
        if cls is None:
            cls = load_configured_backend(settings)
            with self._lock:
                self._classes[settings.backend] = cls
        return cls

    def _manager(self, settings: Settings, environ: Mapping[str, str], cwd: str) -> EnvironmentManager:
        cls = self.backend_class(settings)
        config = configuration(settings, cls, environ, cwd)
        with self._lock:
            held = self._managers.get(config.key)
            if held is None or held[1].closed:
                manager = EnvironmentManager(settings, backends={settings.backend: cls})
                held = self._managers[config.key] = (config, manager)
            return held[1]

    def environment(
        self,
        settings: Settings,
        task: str,
        environ: Mapping[str, str],
        creating: Callable[[], AbstractContextManager[Any]],
        cwd: str = "/",
    ) -> ManagedEnvironment:
        """The environment of ``task`` under ``settings`` and the caller's ``environ``;
        created on first use inside ``creating()`` (the caller's directory and
        environment, one creation at a time), while a live one is returned at once.
        Raises like :meth:`EnvironmentManager.get`."""
        manager = self._manager(settings, environ, cwd)
        if manager.key_for(task) in manager.active_keys():
            return manager.get(task)
        with creating():
            return manager.get(task)

    def remove(self, settings: Settings, task: str, environ: Mapping[str, str], cwd: str = "/") -> list[str]:
        """Release ``task``'s environment with ``purge`` (``exec --rm``: the sandbox and its
        durable data) and wait for its teardown; returns the fallback notes. Raises what
        cleanup raises."""
        manager = self._manager(settings, environ, cwd)
        handle = manager.get(task)
        outcome = manager.release(task, purge=True)
        notes = [outcome.note] if outcome is not None and outcome.note else []
        if not wait_for_cleanup(handle.environment, TEARDOWN_WAIT):
            notes.append("the sandbox's teardown was still running after 30s; it continues in the background")
        return notes

    def drop(self, task: str, profile: str, backend: str | None) -> list[HeldEnvironment]:
        """Release (plain cleanup) every environment of ``task`` in ``profile`` (on
        ``backend``, or on any), whatever its configuration: ``envlayer rm`` and an
        in-process ``exec --rm`` remove the sandbox, so no session may outlive it here.
        Returns those released; a cleanup failure is logged and the others still go."""
        with self._lock:
            managers = list(self._managers.values())
        dropped = []
        for config, manager in managers:
            for key, (idle, in_flight) in manager.activity().items():
                if key.task != task or key.profile != profile or backend not in (None, key.backend):
                    continue
                try:
                    manager.release(task)
                except EnvlayerError as exc:
                    log.warning("releasing task %r on %s failed: %s", task, key.backend, exc)
                    continue
                dropped.append(_held(config, key, idle, in_flight))
        return dropped

    def forget(self, task: str, profile: str, backend: str) -> None:
        """Before ``task``'s sandbox is replaced (``exec --replace``) or its options change
        in place: :meth:`drop` its environments and the settings remembered for it."""
        self.drop(task, profile, backend)
        for key in [key for key in self.remembered if key.endswith("\0" + task)]:
            self.remembered.pop(key, None)

    def held(self) -> list[HeldEnvironment]:
        """Every environment alive now."""
        with self._lock:
            managers = list(self._managers.values())
        return [
            _held(config, key, idle, in_flight)
            for config, manager in managers
            for key, (idle, in_flight) in manager.activity().items()
        ]

    def close(self, timeout: float) -> None:
        """Close every manager (plain cleanup: persist-mode sandboxes stay), within
        ``timeout`` seconds in total."""
        with self._lock:
            managers, self._managers = list(self._managers.values()), {}
        for _, manager in managers:
            manager.close(timeout=timeout)
