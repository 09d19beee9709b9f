"""The MCP server over envlayer's tool registry, on the official ``mcp`` SDK (low-level
``Server``): stdio by default, streamable HTTP behind a bearer token.

One :class:`Runtime` per server process holds the environment manager and the tool
registry; every tool call goes through :meth:`AsyncToolRegistry.run_tool`, so a call the
client cancels (``notifications/cancelled``, or its own timeout) kills the command with
its process tree in the sandbox. When the server ends (the client closed stdin, SIGTERM,
SIGINT), the runtime stops its background jobs and closes the manager (force-removing the
sandboxes unless ``keep_sandboxes``), then removes what the backends still list of its own
sandboxes (:func:`envlayer.aio.list_sandboxes` / :func:`~envlayer.aio.remove_sandbox`),
saying on stderr what it removed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from envlayer import __version__, aio
from envlayer.agents.manager import EnvironmentManager
from envlayer.agents.tools import ToolConfig, ToolRegistry
from envlayer.agents.tools.schema import ToolArgumentError
from envlayer.capabilities import Capability, supports
from envlayer.config import Settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.environment import SandboxInfo
from envlayer.errors import EnvlayerError
from envlayer.integrations.mcp import mapping
from envlayer.integrations.mcp.config import ServerConfig
from envlayer.integrations.mcp.http_auth import BearerTokenGate
from envlayer.sandbox.owner import owner_label

log = logging.getLogger("envlayer.mcp")

SERVER_NAME = "envlayer"
NEEDS_SNAPSHOT = ("snapshot", "fork")
INSTRUCTIONS = (
    "Run commands and manage files in sandboxes. Every tool takes an optional `sandbox` name (default "
    "'default'); a sandbox is created on first use with the server's backend and options."
)


class Runtime:
    """The server's manager and tool registry, for one process."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        manager = EnvironmentManager(config.settings)
        offered = offered_tools(config)
        tools = ToolRegistry(manager, ToolConfig(task_prefix=config.task_prefix, policy=config.policy), tools=offered)
        self.manager = aio.AsyncEnvironmentManager(manager)
        self.registry = aio.AsyncToolRegistry(self.manager, tools)
        self.listing = mapping.mcp_tools(tools.definitions)
        self.tasks_used: set[str] = set()

    async def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Run one tool call; every failure is a tool error result, never an exception
        (cancellation excepted: it propagates after the command was killed)."""
        try:
            task, args = mapping.split_arguments(name, arguments, self.config.task_prefix)
        except ToolArgumentError as exc:
            return mapping.call_result(mapping.bad_arguments(exc, name))
        self.tasks_used.add(task)
        result = await self.registry.run_tool(name, args, task)
        if name == "fork" and "sandboxes" in result:
            self.tasks_used.update(self.config.task_prefix + n for n in result["sandboxes"])
        if name == "create_sandbox" and "task" in result:
            self.tasks_used.add(result["task"])
        return mapping.call_result(result)

    async def close(self) -> None:
        """Unless ``keep_sandboxes``: stop the background jobs started here (deleting their
        files), close the manager removing the sandboxes, then sweep (:meth:`_sweep`).
        With it: close the manager only (sandboxes and jobs stay)."""
        keep = self.config.keep_sandboxes
        if not keep:
            stopped = await anyio.to_thread.run_sync(self.registry.tools.stop_jobs)
            if stopped:
                print(f"envlayer mcp: stopped {stopped} background job(s) at exit", file=sys.stderr)
        await self.manager.close(force_remove=not keep)
        if not keep and self.tasks_used:
            await self._sweep()

    async def _sweep(self) -> None:
        """Remove what the backends still list of this process's own sandboxes (owner label:
        :mod:`envlayer.sandbox.owner`): a task is removed only when every sandbox listed for
        it is this process's, so another server or the CLI using the same task id in the
        profile loses nothing; a task shared so is named on stderr instead."""
        settings, mine = self.config.settings, owner_label()
        if mine is None:
            return
        backends = [settings.backend, *self.config.policy.backends]
        for outcome in await aio.list_sandboxes(backends, settings=settings):
            by_task: dict[str, list[SandboxInfo]] = {}
            for info in outcome.sandboxes:
                if info.task in self.tasks_used and info.status != "data":
                    by_task.setdefault(info.task, []).append(info)
            for task, infos in sorted(by_task.items()):
                owners = {info.detail.get("owner", "") for info in infos}
                if owners == {mine}:
                    await self._remove(task, outcome.backend, settings)
                elif mine in owners:
                    print(f"envlayer mcp: task {task!r} is shared with another owner; not removing it", file=sys.stderr)

    async def _remove(self, task: str, backend: str, settings: Settings) -> None:
        swept = await aio.remove_sandbox(task, [backend], settings=settings, force=True, purge=True)
        for outcome in swept:
            for gone in outcome.sandboxes:
                print(f"envlayer mcp: removed leftover {gone.status} {gone.id} of task {task!r}", file=sys.stderr)
            if outcome.error:
                print(f"envlayer mcp: could not remove task {task!r}: {outcome.error}", file=sys.stderr)


def offered_tools(config: ServerConfig) -> list[str]:
    """The configured tools, less ``snapshot`` and ``fork`` when the backend cannot snapshot
    (said on stderr when they were asked for by name)."""
    if supports(load_backend(config.settings.backend), Capability.SNAPSHOT):
        return list(config.tools)
    dropped = [t for t in config.tools if t in NEEDS_SNAPSHOT]
    if dropped:
        log.warning(
            "backend %r has no snapshot capability: not offering %s", config.settings.backend, ", ".join(dropped)
        )
    return [t for t in config.tools if t not in NEEDS_SNAPSHOT]


def build_server(runtime: Runtime) -> Server[Any]:
    """The low-level MCP server whose tools are the runtime's registry."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=runtime.listing)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await runtime.call(params.name, params.arguments)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _until_signalled(stop: Callable[[], Any]) -> None:
    """Call ``stop()`` at the first SIGTERM or SIGINT (said on stderr)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(f"envlayer mcp: {signal.Signals(signum).name} received, shutting down", file=sys.stderr)
            stop()
            return


async def serve_stdio(config: ServerConfig) -> None:
    """Serve one client on stdin/stdout until it closes them or a signal arrives."""
    runtime = Runtime(config)
    server = build_server(runtime)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_until_signalled, group.cancel_scope.cancel)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await runtime.close()


async def serve_http(config: ServerConfig, host: str, port: int, token: str) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` (every request needs the bearer
    token) until SIGTERM/SIGINT. Prints the address on stderr once it listens."""
    import uvicorn

    class Uvicorn(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Ours instead (:func:`_until_signalled`): uvicorn's would re-raise the signal
            once it stopped, killing the process before the runtime is closed."""
            yield

    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise EnvlayerError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint="choose a free port and a local address"
        ) from None
    runtime = Runtime(config)
    app = BearerTokenGate(build_server(runtime).streamable_http_app(host=host), token)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    server = Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(f"envlayer mcp: listening on http://{shown}:{bound[1]}/mcp", file=sys.stderr, flush=True)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_until_signalled, lambda: setattr(server, "should_exit", True))
            await server.serve(sockets=[sock])
            group.cancel_scope.cancel()
    finally:
        sock.close()
        with anyio.CancelScope(shield=True):
            await runtime.close()
