"""The environments one broker holds, and their session shells.

One :class:`~envlayer.agents.manager.EnvironmentManager` per configuration (backend, profile,
the backend's resolved options, ``lifetime_seconds``, ``orphan_reaper``): so a broker
follows exactly the manager's rules (see ``docs/lifecycle.md``, "The agent manager"):
creation at most once per task, idle release after ``lifetime_seconds`` (persist-mode
sandboxes stay), eviction on ``BackendUnavailable``, the orphan reaper once per backend
and profile, plain cleanup at close. A private sandbox's owner is the broker's process,
so the orphan reaper treats a killed broker's sandboxes as any dead process's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from dataclasses import dataclass

from envlayer.config import Settings
from envlayer.environment import Environment
from envlayer.factory import load_configured_backend
from envlayer.dispatch import wait_for_cleanup
from envlayer.agents.manager import EnvironmentManager, ManagedEnvironment

TEARDOWN_WAIT = 30.0
"""Seconds ``exec --rm`` waits for the sandbox's teardown (as in-process)."""


def configuration_key(settings: Settings, cls: type[Environment]) -> str:
    """A digest of what makes two calls share environments, for backend class ``cls``.
    Raises :class:`~envlayer.errors.ConfigError` for invalid options."""
    options = settings.options_for(settings.backend, cls.Options)
    data = {
        "backend": settings.backend,
        "profile": settings.profile,
        "lifetime_seconds": settings.lifetime_seconds,
        "orphan_reaper": settings.orphan_reaper,
        "options": dataclasses.asdict(options),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


@dataclass(frozen=True)
class HeldEnvironment:
    """One environment a broker holds, as ``envlayer broker status`` shows it."""

    backend: str
    profile: str
    task: str
    idle_seconds: float
    in_flight: int


class Sessions:
    """The broker's environments (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._managers: dict[str, EnvironmentManager] = {}
        self._classes: dict[str, type[Environment]] = {}

    def backend_class(self, settings: Settings) -> type[Environment]:
        """The class of the backend ``settings`` selects, loaded once per broker (finding
        and importing it takes tens of milliseconds; a backend installed or upgraded
        while the broker runs is seen by the next broker). Raises like
        :func:`~envlayer.factory.load_configured_backend`; a failure is not remembered."""
        with self._lock:
            cls = self._classes.get(settings.backend)
        if cls is None:
            cls = load_configured_backend(settings)
            with self._lock:
                self._classes[settings.backend] = cls
        return cls

    def _manager(self, settings: Settings) -> EnvironmentManager:
        cls = self.backend_class(settings)
        key = configuration_key(settings, cls)
        with self._lock:
            manager = self._managers.get(key)
            if manager is None or manager.closed:
                manager = self._managers[key] = EnvironmentManager(settings, backends={settings.backend: cls})
            return manager

    def environment(self, settings: Settings, task: str) -> ManagedEnvironment:
        """The environment of ``task`` under ``settings``, created on first use. Raises
        like :meth:`EnvironmentManager.get`."""
        return self._manager(settings).get(task)

    def remove(self, settings: Settings, task: str) -> list[str]:
        """Release ``task``'s environment with ``purge`` (``exec --rm``: the sandbox and its
        durable data) and wait for its teardown; returns the fallback notes. Raises what
        cleanup raises."""
        manager = self._manager(settings)
        handle = manager.get(task)
        outcome = manager.release(task, purge=True)
        notes = [outcome.note] if outcome is not None and outcome.note else []
        if not wait_for_cleanup(handle.environment, TEARDOWN_WAIT):
            notes.append("the sandbox's teardown was still running after 30s; it continues in the background")
        return notes

    def held(self) -> list[HeldEnvironment]:
        """Every environment alive now."""
        with self._lock:
            managers = list(self._managers.values())
        return [
            HeldEnvironment(key.backend, key.profile, key.task, round(idle, 1), in_flight)
            for manager in managers
            for key, (idle, in_flight) in manager.activity().items()
        ]

    def close(self, timeout: float) -> None:
        """Close every manager (plain cleanup: persist-mode sandboxes stay), within
        ``timeout`` seconds in total."""
        with self._lock:
            managers, self._managers = list(self._managers.values()), {}
        for manager in managers:
            manager.close(timeout=timeout)
