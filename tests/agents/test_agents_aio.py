"""The async API: the event loop keeps running while backends work."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envlayer.agents.tools import ToolRegistry
from envlayer.aio import AsyncEnvironmentManager, AsyncToolRegistry


def test_exec_does_not_block_the_loop(make_manager, local_settings) -> None:  # type: ignore[no-untyped-def]
    async def main() -> tuple[str, int]:
        async with AsyncEnvironmentManager(make_manager(local_settings)) as manager:
            env = await manager.get("t")
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            ticking = asyncio.create_task(ticker())
            result = await env.exec("sleep 1; echo done")
            ticking.cancel()
            return result.stdout_text, ticks

    out, ticks = asyncio.run(main())
    assert out == "done\n"
    assert ticks > 5  # the loop ran while the command did (progress, not a timing bound)


def test_concurrent_gets_share_one_environment_and_files_roundtrip(make_manager, local_settings) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        manager = AsyncEnvironmentManager(make_manager(local_settings), max_workers=8)
        try:
            envs = await asyncio.gather(*(manager.get("t") for _ in range(16)))
            assert len({id(e.env) for e in envs}) == 1
            await envs[0].write_file("a.txt", "async")
            assert await envs[1].read_text("a.txt") == "async"
            assert await envs[2].read_file("a.txt") == b"async"
            manager.alias("sub", "t")
            assert (await manager.get("sub")).env is envs[0].env
            assert await manager.release("sub") is not None
            assert envs[0].closed
        finally:
            assert await manager.close() is True
        assert manager.manager.closed

    asyncio.run(main())


def test_async_tools(make_manager, local_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with AsyncEnvironmentManager(make_manager(local_settings)) as manager:
            tools = AsyncToolRegistry(manager)
            assert next(t["name"] for t in tools.anthropic_tools()) == "terminal"
            results = await asyncio.gather(
                *(tools.run_tool("terminal", {"command": f"echo {i}"}, f"task-{i}") for i in range(4))
            )
            assert [r["output"] for r in results] == [f"{i}\n" for i in range(4)]
            assert (await tools.run_tool("nope", {}, "t"))["error"]["type"] == "unknown_tool"
            await manager.register_overrides("other", options={"cwd": str(tmp_path)})
            assert (await tools.run_tool("terminal", {"command": "pwd"}, "other"))["output"].strip() == str(tmp_path)

    asyncio.run(main())


def test_async_tools_refuse_a_registry_of_another_manager(make_manager, local_settings) -> None:  # type: ignore[no-untyped-def]
    manager = AsyncEnvironmentManager(make_manager(local_settings))
    with pytest.raises(ValueError):
        AsyncToolRegistry(manager, ToolRegistry(make_manager(local_settings)))
    asyncio.run(manager.close())


def test_cancelled_exec_kills_the_command_and_leaves_nothing_running(
    make_manager, local_settings, tmp_path: Path, wait_until
) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "finished"

    async def main() -> None:
        async with AsyncEnvironmentManager(make_manager(local_settings)) as manager:
            env = await manager.get("t")
            task = asyncio.create_task(env.exec(f"sleep 1; touch {marker}"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the command was killed with its tree: it never gets to its second step
            assert not await asyncio.to_thread(wait_until, marker.exists, timeout=2.0)
            assert (await env.exec("echo next")).stdout_text == "next\n"

    asyncio.run(main())
