"""Handlers of the tools about sandboxes themselves: ``create_sandbox``,
``list_sandboxes``, ``remove_sandbox``, ``snapshot`` and ``fork``.

A registry's sandboxes are the tasks whose id starts with its ``task_prefix``
(:class:`~envlayer.agents.tools.tool_registry.ToolConfig`); these tools name them
without it ("sandbox names"), so a front end (the MCP server) can keep its sandboxes apart
from every other task of the same profile by giving them a prefix of its own. Names are
``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 63 characters, so every backend can carry them.

``create_sandbox`` lets the caller pick a backend and options for one sandbox, within a
:class:`SandboxPolicy`: anything the policy does not allow is refused
(:class:`ToolNotAllowed`, the ``not_allowed`` error) before anything is created.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envlayer import dispatch
from envlayer.agents.tools.schema import ToolArgumentError
from envlayer.capabilities import Capability, supports
from envlayer.environment import Environment, SandboxInfo
from envlayer.errors import EnvlayerError, InvalidArgument
from envlayer.factory import backend_specs

if TYPE_CHECKING:
    from envlayer.agents.manager import EnvironmentManager
    from envlayer.dispatch import BackendSpec
    from envlayer.snapshot import Snapshot

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

Result = dict[str, Any]


ANY = "*"
"""In :attr:`SandboxPolicy.options`: every value of that option is allowed."""


class ToolNotAllowed(EnvlayerError):
    """The caller asked for a backend or option value its policy does not allow."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What a ``create_sandbox`` caller may choose. ``backends``: backends it may name
    besides the configured one; ``options``: option keys it may set, each with the
    values allowed (a tuple) or :data:`ANY`. The default allows no choice at all."""

    backends: tuple[str, ...] = ()
    options: Mapping[str, tuple[Any, ...] | str] = field(default_factory=dict)

    def check(self, configured: str, backend: str | None, options: Mapping[str, Any]) -> None:
        """Raise :class:`ToolNotAllowed` for a backend or option value not allowed."""
        if backend is not None and backend != configured and backend not in self.backends:
            allowed = ", ".join([configured, *self.backends])
            raise ToolNotAllowed(f"backend {backend!r} is not allowed by this server", hint=f"use one of: {allowed}")
        for key, value in options.items():
            allowed_values = self.options.get(key)
            if allowed_values is None:
                keys = ", ".join(self.options) or "none"
                raise ToolNotAllowed(f"option {key!r} is not allowed by this server", hint=f"options allowed: {keys}")
            if allowed_values != ANY and _canonical(value) not in {_canonical(a) for a in allowed_values}:
                shown = ", ".join(map(repr, allowed_values))
                raise ToolNotAllowed(f"option {key}={value!r} is not allowed by this server", hint=f"allowed: {shown}")


def _canonical(value: Any) -> str:
    """An option value as text, so a value written as text (a flag's ``2``) matches the
    same value in JSON (a client's ``2``)."""
    return value if isinstance(value, str) else json.dumps(value)


def check_name(name: str, argument: str = "name") -> str:
    """``name`` when it is a valid sandbox name; else :class:`ToolArgumentError`."""
    if not NAME.match(name):
        raise ToolArgumentError(
            f"argument {argument!r}: {name!r} is not a sandbox name "
            "(letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63 characters)"
        )
    return name


class SandboxTools:
    """The sandbox-level tools over ``manager``'s configured backend and profile, for
    the tasks named ``prefix + name``."""

    def __init__(self, manager: EnvironmentManager, prefix: str, policy: SandboxPolicy | None = None) -> None:
        self.manager = manager
        self.prefix = prefix
        self.policy = policy if policy is not None else SandboxPolicy()

    def create_sandbox(self, args: dict[str, Any]) -> Result:
        """Check the choice against the policy, register it for the task, create the
        sandbox (or attach to the one kept from an earlier run)."""
        name = check_name(args["name"])
        backend, options = args.get("backend"), args.get("options", {})
        self.policy.check(self.manager.settings.backend, backend, options)
        task = self.prefix + name
        if backend is not None or options:
            self.manager.register_overrides(task, backend=backend, options=options)
        env = self.manager.get(task)
        return {"name": name, "task": task, "backend": env.name}

    def _spec(self) -> BackendSpec:
        specs, failures = backend_specs(self.manager.settings, [self.manager.settings.backend])
        if failures:
            raise failures[0].error
        return specs[0]

    def _name(self, task: str) -> str | None:
        return task[len(self.prefix) :] if task.startswith(self.prefix) else None

    def list_sandboxes(self, args: dict[str, Any]) -> Result:
        """The sandboxes open in this process, and those the backend lists (if it can)."""
        profile = self.manager.settings.profile
        rows: dict[str, Result] = {}
        for key in self.manager.active_keys():
            name = self._name(key.task)
            if name is not None and key.profile == profile:
                rows[key.task] = {"name": name, "task": key.task, "backend": key.backend, "status": "open"}
        res: Result = {}
        outcome = dispatch.list_sandboxes([self._spec()], profile=profile)[0]
        if outcome.error:
            res["notice"] = f"the backend could not list its sandboxes: {outcome.error}"
        for info in outcome.sandboxes:
            name = self._name(info.task)
            if name is not None and info.status != "data":
                rows.setdefault(info.task, {"name": name, "task": info.task, "backend": info.backend}).update(
                    id=info.id, status=info.status, created=info.created
                )
        sandboxes = [{**row, "in_use": row["task"] in _open_tasks(self.manager)} for row in rows.values()]
        return {"sandboxes": sorted(sandboxes, key=lambda r: r["name"]), **res}

    def remove_sandbox(self, args: dict[str, Any]) -> Result:
        """Release the task's environment here (force-removed, data purged) and remove
        what the backend still lists of it."""
        name = check_name(args["name"])
        task = self.prefix + name
        removed: list[str] = []
        outcome = self.manager.release(task, force_remove=True, purge=True)
        if outcome is not None:
            removed.append(f"the open sandbox of {name!r}")
        cls, _ = spec = self._spec()
        res: Result = {"name": name}
        if supports(cls, Capability.REMOVE_SANDBOX):
            (swept,) = dispatch.remove_sandbox(
                [spec], task, profile=self.manager.settings.profile, force=True, purge=True
            )
            if swept.error:
                raise EnvlayerError(f"could not remove sandbox {name!r}: {swept.error}", hint=swept.hint)
            removed.extend(_describe(info) for info in swept.sandboxes)
        if not removed:
            raise InvalidArgument("name", f"there is no sandbox named {name!r}", hint="list them with list_sandboxes")
        return {**res, "removed": removed}

    def snapshot(self, env: Environment, args: dict[str, Any]) -> Result:
        snap = dispatch.take_snapshot(_inner(env), args.get("name"))
        return {
            "id": snap.id,
            "name": snap.name,
            "backend": snap.backend,
            "source": snap.source_task,
            "created": snap.created,
        }

    def fork(self, env: Environment, args: dict[str, Any]) -> Result:
        names = [check_name(n, "new_sandboxes") for n in args["new_sandboxes"]]
        snapshot = self._find_snapshot(_inner(env), args["snapshot"]) if "snapshot" in args else None
        handles = self.manager.fork(env.task_id, [self.prefix + n for n in names], snapshot=snapshot)
        return {"sandboxes": [h.task_id[len(self.prefix) :] for h in handles]}

    def _find_snapshot(self, env: Environment, wanted: str) -> Snapshot:
        if not supports(env, Capability.SNAPSHOT):
            raise dispatch.snapshot_refused(env, "fork")
        found = type(env).list_snapshots(profile=env.profile, options=env.options)  # type: ignore[attr-defined]
        for snap in found:
            if wanted in (snap.id, snap.name):
                return snap  # type: ignore[no-any-return]
        raise InvalidArgument("snapshot", f"no snapshot {wanted!r} in this profile", hint="take one with snapshot")


def _inner(env: Environment) -> Environment:
    """The backend environment behind a managed handle (snapshots are the backend's)."""
    return getattr(env, "environment", env)


def _open_tasks(manager: EnvironmentManager) -> set[str]:
    return {key.task for key in manager.active_keys()}


def _describe(info: SandboxInfo) -> str:
    return f"{info.backend} {info.status} {info.id}"
