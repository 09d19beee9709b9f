"""Drive ``envlayer-mcp`` with the ``mcp`` SDK's own clients (stdio and streamable HTTP).

Each server runs in a temporary working directory with its own config file (``--config``,
so no user or project file applies), its own ``XDG_CONFIG_HOME`` and a profile unique to
the test, as a child process the client starts and stops.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SCRIPT = str(Path(sys.executable).with_name("envlayer-mcp"))


def unique_profile() -> str:
    return f"envlayer-test-mcp-{uuid.uuid4().hex[:8]}"


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """The server's environment: this process's, less every ``ENVLAYER_*`` variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    return {**env, "XDG_CONFIG_HOME": str(home / "xdg"), **extra}


def write_config(home: Path, text: str) -> str:
    path = home / "envlayer.toml"
    path.write_text(text)
    return str(path)


@asynccontextmanager
async def stdio_session(home: Path, config: str, *args: str, **env: str) -> AsyncIterator[ClientSession]:
    """An initialized client session with a server started as ``envlayer-mcp --config
    CONFIG ARGS...`` in ``home``; the server is stopped when the block ends."""
    params = StdioServerParameters(
        command=SCRIPT, args=["--config", config, *args], env=server_env(home, **env), cwd=str(home)
    )
    with (home / "server.stderr").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def structured(result: Any) -> dict[str, Any]:
    """The structured content of a successful call (fails the test on an error result)."""
    assert not result.is_error, result.content[0].text
    return dict(result.structured_content)


def error_of(result: Any) -> dict[str, Any]:
    """The error of an error result (fails the test on success)."""
    assert result.is_error, result.structured_content
    return dict(result.structured_content["error"])


@contextmanager
def http_server(home: Path, config: str, *args: str, **env: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``envlayer-mcp --http 127.0.0.1:0`` running; yields the process and its URL (read
    from its stderr). Stopped with SIGTERM (then killed) when the block ends."""
    proc = subprocess.Popen(
        [SCRIPT, "--config", config, "--http", "0", *args],  # PORT alone: 127.0.0.1, a free port
        env=server_env(home, **env),
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        found = re.search(r"listening on (http://\S+)", line)
        assert found, f"the server did not start: {line}{proc.stderr.read() if proc.stderr else ''}"
        yield proc, found.group(1)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL of the process group after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stderr:
        proc.stderr.close()


def wait_until(check: Any, what: str, deadline: float = 30.0) -> None:
    """Poll ``check()`` until true; fail naming ``what`` after ``deadline`` seconds (a bound
    against hanging, not a speed target)."""
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"still not true after {deadline:g} s: {what}"
        time.sleep(0.1)


async def settle(check: Any, what: str, deadline: float = 30.0) -> None:
    """:func:`wait_until` for a test inside the client's event loop (which must keep
    running: the client sends its notifications from it)."""
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"still not true after {deadline:g} s: {what}"
        await anyio.sleep(0.1)


def alive(pid: int) -> bool:
    """``pid`` runs on this host (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
