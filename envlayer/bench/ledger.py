"""Everything a run creates, so that all of it is removed: at the end, on an error, on
Ctrl-C and on SIGTERM (see :func:`envlayer.bench.runner.run_bench`).

Every sandbox is opened under unique task ids (``bench-LABEL-HEX``) in the run's own
profile; scratch directories are made inside the sandboxes (mode 0700), named
``envlayer-bench.<12 hex digits>``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.bench.target import BackendTarget
from envlayer.environment import Environment
from envlayer.factory import backend_class

log = logging.getLogger("envlayer.bench")

TEARDOWN_WAIT = 60.0
"""Seconds to wait for one sandbox's background teardown."""


def new_profile() -> str:
    """A profile of its own for one run: nothing of the user's is touched by it."""
    return f"envlayer-bench-{uuid.uuid4().hex[:10]}"


class Ledger:
    """The sandboxes, tasks and scratch directories of one run."""

    def __init__(self) -> None:
        self.tasks: list[tuple[BackendTarget, str]] = []
        self.environments: list[Environment] = []
        self.scratch: list[tuple[Environment, str]] = []
        """(environment, shell text of the directory's path) of each scratch directory."""
        self.removers: list[Callable[[], None]] = []

    def task(self, target: BackendTarget, label: str) -> str:
        """A new unique task id on ``target``, recorded before anything is created."""
        task_id = f"bench-{label}-{uuid.uuid4().hex[:8]}"
        self.tasks.append((target, task_id))
        return task_id

    def open(self, target: BackendTarget, task_id: str, overrides: Mapping[str, Any] | None = None) -> Environment:
        """Open the sandbox of a recorded task, and record the environment."""
        env = target.open(task_id, overrides)
        self.environments.append(env)
        return env

    def scratch_dir(self, env: Environment) -> str:
        """A new directory inside ``env``'s sandbox (in its ``$TMPDIR``, else /tmp),
        removed by :meth:`release_all`. Its name is recorded before it is made, so a
        signal that arrives between its making and the answer leaves nothing behind."""
        location = f'"${{TMPDIR:-/tmp}}"/envlayer-bench.{uuid.uuid4().hex[:12]}'
        self.scratch.append((env, location))
        result = lifecycle.run(env, f"mkdir -m 700 -- {location} && printf '%s\\n' {location}")
        path = result.stdout.decode().strip()
        if result.exit_code != 0 or "/envlayer-bench." not in path:
            raise RuntimeError(f"could not make a scratch directory in the sandbox: {result.stderr!r}")
        return path

    def on_release(self, remove: Callable[[], None]) -> None:
        """Run ``remove`` in :meth:`release_all` (for what a measurement makes outside
        the sandboxes of recorded tasks, such as the sweep's stale sandboxes)."""
        self.removers.append(remove)

    def release(self, env: Environment) -> None:
        """Remove ``env``'s sandbox now (``force_remove`` and ``purge`` where supported)."""
        if env in self.environments:
            self.environments.remove(env)
        lifecycle.cleanup(env, force_remove=True, purge=True)
        lifecycle.wait_for_cleanup(env, TEARDOWN_WAIT)

    def release_all(self) -> list[str]:
        """Remove every scratch directory and sandbox of the run, then every sandbox of
        its tasks a backend still lists (made by a child, or by a constructor that
        failed). Never raises: returns what could not be removed."""
        problems: list[str] = []
        for env, location in self.scratch:
            problems += _attempt(f"remove {location}", lambda env=env, where=location: _remove_scratch(env, where))
        self.scratch.clear()
        for env in list(self.environments):
            problems += _attempt(f"clean up {env.task_id}", lambda env=env: self.release(env))
        for target, task_id in self.tasks:
            problems += _attempt(f"remove the sandbox of {task_id}", lambda t=target, k=task_id: _remove(t, k))
        self.tasks.clear()
        for remove in self.removers:
            problems += _attempt("remove the sweep's sandboxes", remove)
        self.removers.clear()
        return problems


def _remove_scratch(env: Environment, location: str) -> None:
    """Remove a scratch directory (``location`` is shell text: the sandbox expands ``$TMPDIR``)."""
    result = lifecycle.run(env, f"rm -rf -- {location}")
    if result.exit_code != 0:
        raise RuntimeError(result.stderr.decode(errors="replace").strip())


def _remove(target: BackendTarget, task_id: str) -> None:
    cls = backend_class(target.name)
    spec = (cls, target.settings().options_for(target.name, cls.Options))
    for outcome in lifecycle.remove_sandbox([spec], task_id, profile=target.profile, force=True, purge=True):
        if outcome.error:
            raise RuntimeError(outcome.error)


def _attempt(what: str, action: Any) -> list[str]:
    try:
        action()
    except Exception as exc:  # cleanup goes on past one failure; the caller reports it
        log.warning("bench cleanup: could not %s: %s", what, exc)
        return [f"could not {what}: {exc}"]
    return []
