"""``envlayer.aio.list_sandboxes`` / ``remove_sandbox`` against the real daemon: the
awaitable ``envlayer ls`` / ``envlayer rm`` an asyncio server uses without blocking its loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from envlayer import aio
from envlayer.config import load_settings


def test_list_and_remove_a_task_sandbox_from_the_event_loop(make_env: Any, profile: str, tmp_path: Path) -> None:
    prof = f"{profile}-aio"
    env = make_env(task="aio-task", prof=prof)
    env.exec("true")
    env.cleanup()  # persist mode: the container stays for the listing
    (tmp_path / "empty.toml").write_text("")
    settings = load_settings(config_path=tmp_path / "empty.toml", backend="docker", profile=prof)

    async def go() -> tuple[Any, ...]:
        listed = await aio.list_sandboxes(settings=settings)
        unknown = await aio.list_sandboxes(["docker", "no-such-backend"], settings=settings)
        removed = await aio.remove_sandbox("aio-task", settings=settings, force=True, purge=True)
        after = await aio.list_sandboxes(settings=settings)
        return listed, unknown, removed, after

    listed, unknown, removed, after = asyncio.run(go())
    assert [(o.backend, [s.task for s in o.sandboxes if s.status != "data"]) for o in listed] == [
        ("docker", ["aio-task"])
    ]
    assert [o.backend for o in unknown] == ["docker", "no-such-backend"]  # in the order asked
    assert unknown[1].error and "no-such-backend" in unknown[1].error and unknown[1].hint
    assert [s.task for o in removed for s in o.sandboxes if s.status != "data"] == ["aio-task"]
    assert [s for o in after for s in o.sandboxes] == []
