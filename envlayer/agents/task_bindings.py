"""Which environment a task id maps to: cache keys, subagent aliases, per-task overrides.

A task id resolves to an :class:`EnvKey` by following aliases (:meth:`TaskBindings.alias`,
a subagent sharing its parent's environment) until the first task with registered
overrides (:meth:`TaskBindings.register_overrides`, which always gets an environment of
its own) or the end of the chain. Rebinding a task whose environment is alive is refused
with :class:`TaskBindingConflict`, as is an alias that would form a cycle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envlayer.config import Settings
from envlayer.errors import EnvlayerError


class TaskBindingConflict(EnvlayerError, ValueError):
    """An alias or overrides registration that would change the key of a task that
    already has a live environment, or an alias that would form a cycle."""


@dataclass(frozen=True)
class EnvKey:
    """The cache key of one managed environment."""

    profile: str
    backend: str
    task: str
    overrides: str = ""
    """Digest of the task's registered overrides; "" when it has none."""


@dataclass(frozen=True)
class TaskOverrides:
    """What :meth:`TaskBindings.register_overrides` stored for one task."""

    backend: str | None
    options: Mapping[str, Any]
    digest: str

    @classmethod
    def make(cls, backend: str | None, options: Mapping[str, Any] | None) -> TaskOverrides:
        """Overrides with their digest (stable across processes for equal values)."""
        opts = dict(options or {})
        text = json.dumps({"backend": backend, "options": opts}, sort_keys=True, default=repr)
        return cls(backend, opts, hashlib.sha256(text.encode()).hexdigest()[:16])


IsLive = Callable[[EnvKey], bool]
"""``is_live(key)``: True when an environment exists (or is being created) for ``key``."""


class TaskBindings:
    """Aliases and overrides of one manager's tasks. Not thread-safe: the manager calls
    it under its own lock, and passes ``is_live`` to say which keys have environments."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._aliases: dict[str, str] = {}
        self._overrides: dict[str, TaskOverrides] = {}

    def resolve(self, task_id: str) -> tuple[EnvKey, TaskOverrides | None]:
        """The key ``task_id`` maps to now, and the overrides that apply to it."""
        task, seen = task_id, {task_id}
        while task not in self._overrides and task in self._aliases:
            task = self._aliases[task]
            if task in seen:  # refused by alias(); kept as a guard
                break
            seen.add(task)
        ov = self._overrides.get(task)
        backend = (ov.backend if ov is not None else None) or self.settings.backend
        return EnvKey(self.settings.profile, backend, task, ov.digest if ov is not None else ""), ov

    def _check_rebind(self, task_id: str, new_key: EnvKey, is_live: IsLive) -> None:
        old_key = self.resolve(task_id)[0]
        if old_key != new_key and is_live(old_key):
            raise TaskBindingConflict(
                f"task {task_id!r} already has a live environment ({old_key.backend}, task {old_key.task!r})",
                hint="register aliases and overrides before the task's first call, or release(task_id) first",
            )

    def register_overrides(self, task_id: str, overrides: TaskOverrides, is_live: IsLive) -> EnvKey:
        """Bind ``task_id`` to its own environment with ``overrides``; returns its key.
        Raises :class:`TaskBindingConflict` when the task is alive under another key."""
        name = overrides.backend or self.settings.backend
        new_key = EnvKey(self.settings.profile, name, task_id, overrides.digest)
        self._check_rebind(task_id, new_key, is_live)
        self._overrides[task_id] = overrides
        return new_key

    def alias(self, child_task: str, parent_task: str, is_live: IsLive) -> EnvKey:
        """Make ``child_task`` share ``parent_task``'s environment; returns the shared key.
        Raises :class:`TaskBindingConflict` for a cycle, or when the child is alive under
        another key."""
        task, seen = parent_task, {parent_task}
        while task in self._aliases and task != child_task:
            task = self._aliases[task]
            if task in seen:
                break
            seen.add(task)
        if task == child_task:
            raise TaskBindingConflict(
                f"aliasing {child_task!r} to {parent_task!r} would form a cycle",
                hint="alias a subagent to its parent, never the other way round",
            )
        owner = child_task if child_task in self._overrides else parent_task
        new_key = self.resolve(owner)[0]
        self._check_rebind(child_task, new_key, is_live)
        self._aliases[child_task] = parent_task
        return new_key

    def forget(self, task_id: str) -> None:
        """Drop ``task_id``'s alias and overrides."""
        self._aliases.pop(task_id, None)
        self._overrides.pop(task_id, None)
