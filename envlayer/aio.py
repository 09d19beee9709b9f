"""Awaitable envlayer for asyncio agent loops: the event loop never waits on a backend.

Every blocking call (creating an environment, ``exec``, file transfer, cleanup, a tool
call) runs on a bounded thread pool owned by the wrapper (``max_workers``, default 32;
calls beyond that queue), and the coroutine awaits it.

Cancellation: cancelling the awaiting task of an ``exec`` or a ``run_tool`` call
cancels the command too.

* A call still queued for a worker thread is dropped and never runs.
* A running ``exec`` (``AsyncEnvironment.exec``, or the ``terminal`` tool through
  ``AsyncToolRegistry.run_tool``) on a backend with the ``cancel`` capability (a
  :class:`~envlayer.cancel_token.CancelToken`; every built-in backend) is killed with its whole
  process tree in the sandbox; the task waits until the command's thread has returned
  (so nothing is left running), then ``CancelledError`` propagates as asyncio requires.
  To get the partial output instead of an exception, pass your own token,
  ``await env.exec(cmd, cancel=token)``, and call ``token.cancel()``: the call returns
  the result with ``cancelled=True``.
* Other calls (file transfer, a backend without ``cancel``) go on in their thread until
  they return; their result is discarded. The manager counts them as in flight meanwhile.
* ``close()`` waits for running calls only as long as the backends' own timeouts.

Backend-level calls: :func:`list_sandboxes` and :func:`remove_sandbox` are the awaitable
:func:`envlayer.dispatch.list_sandboxes` / :func:`~envlayer.dispatch.remove_sandbox`
(what ``envlayer ls`` and ``envlayer rm`` do), for servers that must not block their loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from envlayer import dispatch
from envlayer.agents.manager import EnvironmentManager, EnvKey
from envlayer.agents.tools import ToolRegistry
from envlayer.agents.tools.definitions import ToolDefinition
from envlayer.cancel_token import CancelToken
from envlayer.config import Settings, load_settings
from envlayer.dispatch import CleanupOutcome, SweepOutcome, run
from envlayer.environment import DEFAULT_TASK, Command, Environment
from envlayer.factory import backend_specs
from envlayer.result import ExecResult

if TYPE_CHECKING:
    from envlayer.snapshot import Snapshot

T = TypeVar("T")

DEFAULT_MAX_WORKERS = 32


async def _in_thread(executor: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def _cancellable(executor: Executor, token: CancelToken, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`_in_thread`, where cancelling the awaiting task cancels ``token`` (on a
    helper thread: killing may block) and waits for ``fn`` to return before re-raising."""
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    work = executor.submit(call)
    future = asyncio.wrap_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if work.cancel():  # still queued: it never runs
            raise
        threading.Thread(target=token.cancel, name="envlayer-aio-cancel", daemon=True).start()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await future
        raise


def _pool(max_workers: int) -> ThreadPoolExecutor:
    if max_workers < 1:
        raise ValueError("max_workers must be >= 1")
    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="envlayer-aio")


class AsyncEnvironment:
    """Awaitable methods over one :class:`~envlayer.Environment` (any backend, or a
    managed handle). Same arguments, results and exceptions as the sync methods."""

    def __init__(self, env: Environment, executor: Executor) -> None:
        self.env = env
        self._executor = executor

    @property
    def task_id(self) -> str:
        return self.env.task_id

    @property
    def closed(self) -> bool:
        return self.env.closed

    async def exec(self, command: Command, **kwargs: Any) -> ExecResult:
        """:func:`envlayer.run` in a worker thread. Cancelling the awaiting task kills
        the command (see the module docstring)."""
        token = kwargs.pop("cancel", None) or CancelToken()
        return await _cancellable(self._executor, token, run, self.env, command, cancel=token, **kwargs)

    async def read_file(self, path: str) -> bytes:
        """:meth:`Environment.read_file` in a worker thread."""
        return await _in_thread(self._executor, self.env.read_file, path)

    async def read_text(self, path: str) -> str:
        """:meth:`Environment.read_text` in a worker thread."""
        return await _in_thread(self._executor, self.env.read_text, path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        """:meth:`Environment.write_file` in a worker thread."""
        await _in_thread(self._executor, self.env.write_file, path, data)

    async def cleanup(self) -> None:
        """:meth:`Environment.cleanup` in a worker thread."""
        await _in_thread(self._executor, self.env.cleanup)

    def __repr__(self) -> str:
        return f"<AsyncEnvironment {self.env!r}>"


class AsyncEnvironmentManager:
    """Awaitable :class:`~envlayer.agents.manager.EnvironmentManager` (same rules, same keys).

    ``manager`` defaults to a new manager from the configuration. :meth:`close` closes
    the manager and the thread pool.
    """

    def __init__(self, manager: EnvironmentManager | None = None, *, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        self.manager = manager if manager is not None else EnvironmentManager()
        self.executor = _pool(max_workers)

    async def get(self, task_id: str = DEFAULT_TASK) -> AsyncEnvironment:
        """:meth:`EnvironmentManager.get`, with creation in a worker thread."""
        env = await _in_thread(self.executor, self.manager.get, task_id)
        return AsyncEnvironment(env, self.executor)

    async def register_overrides(
        self, task_id: str, *, backend: str | None = None, options: Mapping[str, Any] | None = None
    ) -> EnvKey:
        """:meth:`EnvironmentManager.register_overrides` (it may import the backend)."""
        return await _in_thread(
            self.executor, self.manager.register_overrides, task_id, backend=backend, options=options
        )

    def alias(self, child_task: str, parent_task: str) -> EnvKey:
        """:meth:`EnvironmentManager.alias` (in memory only, so not awaitable)."""
        return self.manager.alias(child_task, parent_task)

    def key_for(self, task_id: str = DEFAULT_TASK) -> EnvKey:
        """:meth:`EnvironmentManager.key_for`."""
        return self.manager.key_for(task_id)

    async def fork(
        self, task_id: str, new_task_ids: Sequence[str], *, snapshot: Snapshot | None = None
    ) -> list[AsyncEnvironment]:
        """:meth:`EnvironmentManager.fork` in a worker thread (it creates the forks
        concurrently on threads of its own)."""
        envs = await _in_thread(self.executor, self.manager.fork, task_id, new_task_ids, snapshot=snapshot)
        return [AsyncEnvironment(env, self.executor) for env in envs]

    async def release(self, task_id: str = DEFAULT_TASK, *, force_remove: bool = False) -> CleanupOutcome | None:
        """:meth:`EnvironmentManager.release` in a worker thread."""
        return await _in_thread(self.executor, self.manager.release, task_id, force_remove=force_remove)

    async def close(self, *, timeout: float | None = None, force_remove: bool = False) -> bool:
        """Close the manager (see :meth:`EnvironmentManager.close`), then the pool."""
        try:
            return await _in_thread(self.executor, self.manager.close, timeout=timeout, force_remove=force_remove)
        finally:
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> AsyncEnvironmentManager:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncToolRegistry:
    """Awaitable :meth:`ToolRegistry.run_tool`; the definitions are the same objects.

    Built over an :class:`AsyncEnvironmentManager` so tool calls and direct environment
    calls share one thread pool.
    """

    def __init__(self, manager: AsyncEnvironmentManager, tools: ToolRegistry | None = None) -> None:
        if tools is not None and tools.manager is not manager.manager:
            raise ValueError("tools must be bound to the same EnvironmentManager as manager")
        self.manager = manager
        self.tools = tools if tools is not None else ToolRegistry(manager.manager)

    @property
    def definitions(self) -> list[ToolDefinition]:
        return self.tools.definitions

    def openai_tools(self) -> list[dict[str, Any]]:
        return self.tools.openai_tools()

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return self.tools.anthropic_tools()

    async def fork(
        self, task_id: str, new_task_ids: Sequence[str], *, snapshot: Snapshot | None = None
    ) -> dict[str, Any]:
        """:meth:`ToolRegistry.fork` in a worker thread (never raises for a bad call)."""
        return await _in_thread(self.manager.executor, self.tools.fork, task_id, new_task_ids, snapshot=snapshot)

    async def run_tool(
        self, name: str, arguments: Mapping[str, Any] | str | None, task_id: str = DEFAULT_TASK
    ) -> dict[str, Any]:
        """:meth:`ToolRegistry.run_tool` in a worker thread (never raises for a tool
        call problem). Cancelling the awaiting task kills a running ``terminal`` command."""
        token = CancelToken()
        return await _cancellable(
            self.manager.executor, token, self.tools.run_tool, name, arguments, task_id, cancel=token
        )


def _specs(settings: Settings, backends: Sequence[str] | None) -> tuple[list[dispatch.BackendSpec], list[SweepOutcome]]:
    """The (class, options) of ``backends`` (default: the configured backend), and an
    outcome with the error for each that could not be loaded or configured."""
    specs, failures = backend_specs(settings, list(backends) if backends is not None else [settings.backend])
    failed = [
        SweepOutcome(
            f.backend, supported=False, error=f"{type(f.error).__name__}: {f.error.message}", hint=f.error.hint
        )
        for f in failures
    ]
    return specs, failed


async def _sweep(
    settings: Settings | None,
    backends: Sequence[str] | None,
    sweep: Callable[[list[dispatch.BackendSpec], Settings], list[SweepOutcome]],
) -> list[SweepOutcome]:
    """``sweep(specs, settings)`` in a worker thread, with the outcomes of the backends
    that could not be loaded, in the order of ``backends``."""
    settings = settings if settings is not None else await asyncio.to_thread(load_settings)
    specs, failed = await asyncio.to_thread(_specs, settings, backends)
    outcomes = failed + await asyncio.to_thread(sweep, specs, settings)
    names = list(backends) if backends is not None else [settings.backend]
    return sorted(outcomes, key=lambda o: names.index(o.backend) if o.backend in names else len(names))


async def list_sandboxes(
    backends: Sequence[str] | None = None, *, settings: Settings | None = None, all_profiles: bool = False
) -> list[SweepOutcome]:
    """The managed sandboxes of ``settings.profile`` (every profile with ``all_profiles``)
    on each of ``backends`` (names; default: the configured backend), one
    :class:`~envlayer.dispatch.SweepOutcome` per backend in that order, listed in a worker
    thread. ``settings`` defaults to :func:`envlayer.config.load_settings`. Never raises
    for one backend: a backend that cannot list, or failed, or could not be loaded has an
    outcome saying so (``supported``, ``error``, ``hint``). Runs on the event loop's
    default executor."""
    return await _sweep(
        settings,
        backends,
        lambda specs, chosen: dispatch.list_sandboxes(specs, profile=None if all_profiles else chosen.profile),
    )


async def remove_sandbox(
    task_id: str,
    backends: Sequence[str] | None = None,
    *,
    settings: Settings | None = None,
    force: bool = False,
    purge: bool = False,
) -> list[SweepOutcome]:
    """Remove the sandbox(es) of ``task_id`` in ``settings.profile`` on each of
    ``backends`` (default: the configured backend), in a worker thread, like
    ``envlayer rm``: ``force`` also removes a running sandbox, ``purge`` the task's
    durable data. Each outcome lists what was removed; failures are in the outcomes,
    never raised. A sandbox that an :class:`AsyncEnvironmentManager` of this process holds
    open is removed under it: release it there instead (``release(task, force_remove=True)``)."""
    return await _sweep(
        settings,
        backends,
        lambda specs, chosen: dispatch.remove_sandbox(specs, task_id, profile=chosen.profile, force=force, purge=purge),
    )
