"""The ``envlayer`` Inspect sandbox: an Inspect ``SandboxEnvironment`` over any envlayer backend.

Lifecycle (Inspect's hooks onto envlayer's):

* ``task_init``: when envlayer's ``orphan_reaper`` setting is on (the default), the
  backend's orphan reaper sweeps the profile once per process, as envlayer's manager
  does: sandboxes of Inspect processes that died (and, on Docker, stopped ones).
* ``sample_init``: a new envlayer environment per sample, task id
  ``inspect-<task>-<8 hex>``. On a backend that keeps one sandbox per task (it can
  remove a task's sandbox: Docker, and the cloud backends) that sandbox is the sample's
  own, and relative paths resolve against its working directory. On the others (local,
  SSH: one machine for every sample) the adapter makes a private directory with
  ``mktemp -d`` and resolves relative paths and ``cwd`` against it.
* ``sample_cleanup``: the sample directory is removed, then the environment is cleaned
  up with ``force_remove=True`` and its teardown joined: nothing of the sample is left.
* ``task_cleanup``: samples whose cleanup did not run are cleaned now; with
  ``--no-sandbox-cleanup`` they are kept and listed with the command that removes each.
* ``cli_cleanup`` (``inspect sandbox cleanup envlayer [ID]``): without an id, the orphan
  reaper of the configured backend and profile (it never touches a sandbox whose
  process is alive); with an id, that task's sandbox is removed, running or not.

Calls run on worker threads (``anyio.to_thread``): the event loop never waits on a
backend. A cancelled ``exec`` (a sample's time limit, Ctrl-C) returns at once and, on
backends with the ``cancel`` capability (every built-in backend), kills the command's
process tree; elsewhere the command goes on until its own timeout kills it, or until
``sample_cleanup`` removes the sandbox (on backends with a sandbox per task, which kills
it at once). ``timeout_retry`` is not honoured: a timed-out command was killed, and
running it again is the caller's decision.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, TypeVar, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel

from envlayer import dispatch as lifecycle
from envlayer.cancel_token import CancelToken
from envlayer.capabilities import Capability, supports
from envlayer.environment import Environment
from envlayer.errors import UnsupportedArgument
from envlayer.integrations.selection import Selection
from envlayer_inspect.config import EnvlayerSandboxConfig, resolve
from envlayer_inspect.results import file_limit_as_inspect, read_limit_exceeded, to_inspect, unavailable_as_inspect

log = logging.getLogger("envlayer.inspect")
T = TypeVar("T")

TEARDOWN_WAIT = 60.0
"""Seconds ``sample_cleanup`` waits for a backend's background teardown."""
ORPHAN_AGE_FLOOR = 120.0
"""``max_age`` of the task_init sweep: stopped sandboxes younger than this are left."""

_live: dict[str, dict[str, EnvlayerSandboxEnvironment]] = {}
"""Inspect task name -> envlayer task id -> sandbox not yet cleaned up."""
_reaped: set[tuple[str, str]] = set()
"""(backend, profile) pairs the orphan reaper already swept in this process."""


async def _blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))


async def _cancellable_exec(environment: Environment, /, *args: Any, **kwargs: Any) -> Any:
    """:func:`envlayer.run` on a worker thread, where a cancelled await (a sample's time
    limit, Ctrl-C) returns at once and also kills the command's process tree, on backends
    with the ``cancel`` capability (every built-in backend). The token is cancelled on a
    thread of its own, so the event loop never waits for the kill. On other backends the
    command goes on until it ends, its own timeout kills it, or ``sample_cleanup`` removes
    the sandbox."""
    token = CancelToken()
    try:
        return await anyio.to_thread.run_sync(
            partial(lifecycle.run, environment, *args, cancel=token, **kwargs), abandon_on_cancel=True
        )
    except anyio.get_cancelled_exc_class():
        threading.Thread(target=token.cancel, name="envlayer-inspect-cancel", daemon=True).start()
        raise


def _selection(config: SandboxEnvironmentConfigType | None) -> Selection:
    return resolve(
        config,
        exec_output_limit=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
        read_file_limit=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE,
    )


def _sample_task_id(task_name: str) -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in task_name)[:24].strip("-_.") or "task"
    return f"inspect-{slug}-{uuid.uuid4().hex[:8]}"


def _make_sample_dir(env: Environment) -> str:
    result = lifecycle.run(env, 'mktemp -d "${TMPDIR:-/tmp}/envlayer-inspect-XXXXXXXX"', timeout=60)
    path = result.stdout_text.strip()
    if result.exit_code != 0 or not path.startswith("/"):
        raise RuntimeError(f"could not make a sample directory in the sandbox: {result.stderr_text.strip()[:300]}")
    return path


@sandboxenv(name="envlayer")
class EnvlayerSandboxEnvironment(SandboxEnvironment):
    """One sample's sandbox. ``env`` is the envlayer environment; ``sample_dir`` the
    private directory on a shared machine (``None`` when the sandbox is the sample's own)."""

    def __init__(self, env: Environment, sample_dir: str | None, task_name: str) -> None:
        super().__init__()
        self.env = env
        self.sample_dir = sample_dir
        self.task_name = task_name
        self._identity: tuple[str, ...] | None = None

    # --- configuration ----------------------------------------------------------

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        """The mapping form of the config (``backend``, ``profile``, ``options``, ``config_file``)."""
        return EnvlayerSandboxConfig(**config)

    @classmethod
    def config_files(cls) -> list[str]:
        return ["envlayer.toml"]

    # --- lifecycle ----------------------------------------------------------------

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        selection = _selection(config)
        key = (selection.backend.name, selection.profile)
        if not selection.settings.orphan_reaper or key in _reaped:
            return
        _reaped.add(key)
        max_age = 2 * max(ORPHAN_AGE_FLOOR, selection.settings.lifetime_seconds)
        outcomes = await _blocking(
            lifecycle.reap_orphans,
            [(selection.backend, selection.options)],
            profile=selection.profile,
            max_age=max_age,
        )
        for outcome in outcomes:
            if outcome.error:
                log.warning("envlayer orphan reaper on %s: %s", outcome.backend, outcome.error)
            elif outcome.sandboxes:
                log.info("envlayer orphan reaper removed %d sandbox(es)", len(outcome.sandboxes))

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        selection = _selection(config)
        task_id = _sample_task_id(task_name)
        with unavailable_as_inspect():
            env = await _blocking(selection.open, task_id)
        try:
            sample_dir = None
            if not supports(env, Capability.REMOVE_SANDBOX):
                with unavailable_as_inspect():
                    sample_dir = await _blocking(_make_sample_dir, env)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _blocking(_release, env, None)
            raise
        sandbox = cls(env, sample_dir, task_name)
        _live.setdefault(task_name, {})[task_id] = sandbox
        log.debug("envlayer sandbox %s on %s (profile %s)", task_id, env.name, selection.profile)
        return {"default": sandbox}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await environment.as_type(EnvlayerSandboxEnvironment).release()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        remaining = _live.pop(task_name, {})
        if cleanup:
            for sandbox in remaining.values():
                await sandbox.release()
            return
        for task_id, sandbox in remaining.items():
            print(
                f"envlayer sandbox kept: {task_id} ({sandbox.env.name}, profile {sandbox.env.profile}); "
                f"remove it with: inspect sandbox cleanup envlayer {task_id}"
            )

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        selection = _selection(None)
        specs = [(selection.backend, selection.options)]
        if id is None:
            outcomes = await _blocking(lifecycle.reap_orphans, specs, profile=selection.profile, max_age=0)
            verb = "reaped"
        else:
            outcomes = await _blocking(lifecycle.remove_sandbox, specs, id, profile=selection.profile, force=True)
            verb = "removed"
        for outcome in outcomes:
            if not outcome.supported:
                print(f"{outcome.backend}: {outcome.note}")
            elif outcome.error:
                print(f"{outcome.backend}: failed: {outcome.error}")
            else:
                names = ", ".join(info.task for info in outcome.sandboxes) or "nothing"
                print(f"{outcome.backend} (profile {selection.profile}): {verb} {names}")

    async def release(self) -> None:
        """Remove the sample directory and tear the sandbox down (idempotent, never raises)."""
        _live.get(self.task_name, {}).pop(self.env.task_id, None)
        with anyio.CancelScope(shield=True):
            await _blocking(_release, self.env, self.sample_dir)

    # --- exec -------------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        run_cwd = self._resolve(cwd) if cwd is not None else self.sample_dir
        arguments: dict[str, Any] = {"cwd": run_cwd, "env": env, "timeout": timeout, "stdin": input}
        with unavailable_as_inspect():
            try:
                result = await _cancellable_exec(self.env, list(cmd), user=user, **arguments)
            except UnsupportedArgument as refused:
                if refused.argument != "user" or user is None:
                    raise
                await self._check_own_user(user, refused)  # the backend has no exec_as_user
                result = await _cancellable_exec(self.env, list(cmd), **arguments)
        return to_inspect(result, cmd, timeout)

    async def _check_own_user(self, user: str, refused: UnsupportedArgument) -> None:
        """Inspect's ``user`` on a backend that cannot switch users (:func:`envlayer.run`
        refused it): accepted when it is the sandbox's own user (by name or uid), else
        ``SandboxUserUnsupportedError``."""
        if self._identity is None:
            with unavailable_as_inspect():
                probe = await _blocking(lifecycle.run, self.env, "id -un 2>/dev/null; id -u", timeout=30)
            self._identity = tuple(probe.stdout_text.split())
        if user not in self._identity:
            raise SandboxUserUnsupportedError(
                f"the envlayer {self.env.name} sandbox runs every command as "
                f"{'/'.join(self._identity) or 'its configured user'}; the {self.env.name} backend cannot run "
                f"a command as {user!r} (set its user option instead, or use the docker backend)"
            ) from refused

    # --- files ----------------------------------------------------------------------------

    async def write_file(self, file: str, contents: str | bytes) -> None:
        with unavailable_as_inspect():
            await _blocking(self.env.write_file, self._resolve(file), contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        with unavailable_as_inspect(), file_limit_as_inspect():
            data = await _blocking(self.env.read_file, self._resolve(file))
        if len(data) > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise read_limit_exceeded()
        return data.decode("utf-8") if text else data

    def _resolve(self, path: str) -> str:
        if self.sample_dir is None or posixpath.isabs(path):
            return path
        return posixpath.join(self.sample_dir, path)


def _release(env: Environment, sample_dir: str | None) -> None:
    """Blocking teardown of one sample: its directory, then the environment. Failures
    are logged (a cleanup must not fail the sample), never raised."""
    try:
        if sample_dir is not None and not env.closed:
            lifecycle.run(env, ["rm", "-rf", "--", sample_dir], timeout=120)
    except Exception as exc:
        log.warning("envlayer sandbox %s: removing %s failed: %s", env.task_id, sample_dir, exc)
    try:
        lifecycle.cleanup(env, force_remove=True)
        lifecycle.wait_for_cleanup(env, TEARDOWN_WAIT)
    except Exception as exc:
        log.warning("envlayer sandbox %s: cleanup failed: %s", env.task_id, exc)
