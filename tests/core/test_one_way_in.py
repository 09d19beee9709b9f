"""Every front end runs commands through ``envlayer.run`` (the one way in), never a
backend's own ``exec``/``handle_request``.

The check reads the source (``ast``): in every module of ``envlayer`` and of the framework
adapters under ``plugins/``, a use of an attribute named ``exec`` or ``handle_request``
(a call, or the method handed to a thread or ``partial``) is a bypass,
unless the module is one that is allowed to make it: the entry
itself (``envlayer/dispatch.py``), the contract's ``Environment.exec`` (which runs its own
request), the sandbox base and the built-in backends (a backend running its own requests),
and the conformance kit (which checks a backend's own methods). A spy backend then shows
the entry is what the fronts reach.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import envlayer
from envlayer.capabilities import Capability
from envlayer.environment import Environment
from envlayer.request import ExecRequest
from envlayer.result import ExecResult

REPO = Path(envlayer.__file__).parent.parent
BACKEND_METHODS = frozenset({"exec", "handle_request"})
ALLOWED = (
    "envlayer/dispatch.py",
    "envlayer/environment.py",
    "envlayer/sandbox/",
    "envlayer/backends/",
    "envlayer/testing/",
)
"""Where calling a backend's own exec methods is the job."""
FRONT_ROOTS = ("envlayer", "plugins/inspect/envlayer_inspect")


def bypasses(repo: Path) -> list[str]:
    """``path:line: use`` for every use of a backend's exec method outside
    :data:`ALLOWED`, in the modules under :data:`FRONT_ROOTS` of ``repo``."""
    found = []
    for root in FRONT_ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            relative = path.relative_to(repo).as_posix()
            if relative.startswith(ALLOWED):
                continue
            for node in ast.walk(ast.parse(path.read_text(), relative)):
                if isinstance(node, ast.Attribute) and node.attr in BACKEND_METHODS:
                    found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_front_end_calls_a_backend_directly() -> None:
    assert bypasses(REPO) == [], "call envlayer.run(env, command, ...) instead"


def test_the_check_sees_a_bypass(tmp_path: Path) -> None:
    front = tmp_path / "envlayer" / "agents"
    front.mkdir(parents=True)
    source = "def go(env, pool):\n    env.exec('true', user='root')\n    pool.submit(env.handle_request)\n"
    (front / "sneaky.py").write_text(source)
    (tmp_path / "plugins" / "inspect" / "envlayer_inspect").mkdir(parents=True)
    assert sorted(bypasses(tmp_path)) == [
        "envlayer/agents/sneaky.py:2: env.exec",
        "envlayer/agents/sneaky.py:3: env.handle_request",
    ]


class Spy(Environment):
    """A request-contract backend that records the requests it receives."""

    name = "spy"
    capabilities = frozenset({Capability.STREAMING, Capability.CANCEL})
    requests: list[ExecRequest] = []  # every instance records into the test's list

    def handle_request(self, request: ExecRequest) -> ExecResult:
        self.requests.append(request)
        if request.on_output is not None:
            request.on_output("stdout", b"spied\n")
        return ExecResult(0, b"spied\n")

    def read_file(self, path: str) -> bytes:
        return b""

    def write_file(self, path: str, data: bytes | str) -> None:
        pass

    def cleanup(self) -> None:
        self._closed = True


def _through_aio(env: Spy) -> Any:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from envlayer.aio import AsyncEnvironment

    with ThreadPoolExecutor(1) as pool:
        return asyncio.run(AsyncEnvironment(env, pool).exec("echo x", timeout=5))


def _through_tools(env: Spy) -> Any:
    from envlayer.agents.tools import ToolRegistry

    registry = ToolRegistry()
    try:
        return registry._terminal(env, {"command": "echo x", "timeout": 5})
    finally:
        registry.manager.close()


def _through_minisweagent(env: Spy) -> Any:
    from envlayer.integrations.minisweagent import EnvlayerEnvironment, EnvlayerEnvironmentConfig

    adapter = EnvlayerEnvironment.__new__(EnvlayerEnvironment)
    adapter.config, adapter.env = EnvlayerEnvironmentConfig(), env
    return adapter.execute({"command": "echo x"})


def _through_the_manager(env: Spy, tmp_path: Path) -> Any:
    from envlayer.agents.manager import EnvironmentManager
    from envlayer.config import load_settings

    empty = tmp_path / "empty.toml"
    empty.write_text("")
    settings = load_settings(config_path=empty, env={}, backend="spy", orphan_reaper=False)
    manager = EnvironmentManager(settings, backends={"spy": Spy})
    try:
        return manager.get("t1").exec("echo x", timeout=5, on_output=lambda stream, chunk: None)
    finally:
        manager.close(timeout=10)


def _through_inspect(env: Spy) -> Any:
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("envlayer_inspect")
    from envlayer_inspect.sandbox import EnvlayerSandboxEnvironment

    return anyio.run(lambda: EnvlayerSandboxEnvironment(env, None, "task").exec(["echo", "x"], timeout=5))


FRONTS = [_through_aio, _through_tools, _through_minisweagent, _through_the_manager, _through_inspect]


@pytest.mark.parametrize("front", FRONTS, ids=lambda f: f.__name__.removeprefix("_through_"))
def test_fronts_hand_the_backend_a_request_built_by_the_entry(
    front: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each front reaches the backend as one checked request (a fresh exec id, the
    timeout it asked for), and only through :func:`envlayer.run`."""
    import envlayer.dispatch

    monkeypatch.setattr(Spy, "requests", [])
    entered: list[str] = []
    real = envlayer.dispatch.prepare_call  # what run and run_with_output both start with

    def counted(environment: Any, command: Any, /, **arguments: Any) -> Any:
        entered.append(type(environment).__name__)
        return real(environment, command, **arguments)

    monkeypatch.setattr(envlayer.dispatch, "prepare_call", counted)
    args = (Spy(), tmp_path) if front is _through_the_manager else (Spy(),)
    front(*args)
    (request,) = Spy.requests
    assert request.timeout is not None and len(request.exec_id) == 32 and request.user is None
    assert entered and entered[-1] == "Spy", entered
