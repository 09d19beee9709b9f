"""Cancelling a running exec from another thread and from an asyncio task: the tree is
killed, the partial output comes back with a distinct status, nothing is left running."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from envlayer.aio import AsyncEnvironment, AsyncEnvironmentManager, AsyncToolRegistry
from envlayer.execution.cancel import CancelToken
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.result import INTERRUPT_EXIT_CODE
from envlayer.testing.cancelling import exec_cancelled_after_output

# a command that prints, then leaves a child and a setsid escapee behind, then blocks
SLEEP = 7000 + os.getpid() % 1000  # sleep durations no other test on this machine uses
TREE = f"echo started; sleep {SLEEP} & setsid sleep {SLEEP + 1} & sleep {SLEEP + 2}; echo never"


def _alive(pattern: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if pattern in cmdline and state != "Z":
                found.append(int(entry))
    return found


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_cancel_from_another_thread_returns_partial_output_and_kills_the_tree(tmp_path: Path, mode: str) -> None:
    env = LocalEnvironment(LocalOptions(cwd=str(tmp_path), exec_mode=mode))
    try:
        start = time.monotonic()
        result = exec_cancelled_after_output(env, TREE, timeout=120)
        assert result.cancelled and not result.timed_out and not result.ok
        assert result.exit_code == INTERRUPT_EXIT_CODE
        assert result.stdout_text == "started\n"
        assert time.monotonic() - start < 30
        assert _alive(f"sleep {SLEEP}") == _alive(f"sleep {SLEEP + 1}") == _alive(f"sleep {SLEEP + 2}") == []
        after = env.exec("echo usable")
        assert after.ok and after.stdout_text == "usable\n"
        if mode == "session":
            assert after.recovered  # the killed shell was replaced, and the result says so
    finally:
        env.cleanup()


def test_a_token_cancelled_before_the_call_kills_at_once(tmp_path: Path) -> None:
    env = LocalEnvironment(LocalOptions(cwd=str(tmp_path), exec_mode="oneshot"))
    token = CancelToken()
    token.cancel()
    result = env.exec(f"sleep {SLEEP + 3}", timeout=60, cancel=token)
    assert result.cancelled and result.duration < 10
    assert _alive(f"sleep {SLEEP + 3}") == []


def test_cancelling_the_async_task_kills_the_command(tmp_path: Path) -> None:
    async def scenario() -> None:
        env = AsyncEnvironment(LocalEnvironment(LocalOptions(cwd=str(tmp_path))), executor=_executor())
        task = asyncio.create_task(env.exec(f"echo going; sleep {SLEEP + 4}", timeout=120))
        await asyncio.sleep(1.0)
        assert _alive(f"sleep {SLEEP + 4}")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _alive(f"sleep {SLEEP + 4}") == []  # nothing left running when the cancel returns
        # with its own token the caller gets the partial output instead
        token = CancelToken()
        loop = asyncio.get_running_loop()
        loop.call_later(1.0, token.cancel)
        result = await env.exec(f"echo partial; sleep {SLEEP + 5}", timeout=120, cancel=token)
        assert result.cancelled and result.stdout_text == "partial\n"
        await env.cleanup()

    asyncio.run(scenario())


def _executor():  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=4)


def test_tools_expose_cancellation(tmp_path: Path) -> None:
    from envlayer.agents.tools import ToolConfig
    from envlayer.config import load_settings

    empty = tmp_path / "empty.toml"
    empty.write_text("")
    settings = load_settings(
        config_path=empty, env={}, backend="local", profile="cancel-test", backend_options={"cwd": str(tmp_path)}
    )

    async def scenario() -> None:
        async with AsyncEnvironmentManager(settings_manager(settings)) as manager:
            tools = AsyncToolRegistry(manager)
            sync_tools = tools.tools
            assert isinstance(sync_tools.config, ToolConfig)
            # ToolRegistry.cancel(task) from elsewhere: the call returns a `cancelled` error
            running = asyncio.create_task(tools.run_tool("terminal", {"command": f"echo a; sleep {SLEEP + 6}"}, "t1"))
            await asyncio.sleep(1.0)
            assert sync_tools.cancel("t1") == 1
            result = await running
            assert result["error"]["type"] == "cancelled" and result["exit_code"] == 130
            assert result["output"] == "a\n"
            assert _alive(f"sleep {SLEEP + 6}") == []
            # cancelling the awaiting task cancels the command too
            task = asyncio.create_task(tools.run_tool("terminal", {"command": f"sleep {SLEEP + 7}"}, "t1"))
            await asyncio.sleep(1.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert _alive(f"sleep {SLEEP + 7}") == []
            ok = await tools.run_tool("terminal", {"command": "echo fine"}, "t1")
            assert ok["exit_code"] == 0 and ok["output"] == "fine\n"

    asyncio.run(scenario())


def settings_manager(settings):  # type: ignore[no-untyped-def]
    from envlayer.agents.manager import EnvironmentManager

    return EnvironmentManager(settings)
