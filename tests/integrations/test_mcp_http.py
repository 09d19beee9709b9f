"""``envlayer-mcp --http``: streamable HTTP behind a bearer token, driven by the ``mcp``
SDK's streamable-HTTP client. No token or a wrong one gets 401 before the MCP app sees
the request; the server refuses to start on HTTP without a token; SIGTERM ends it with
its sandboxes' processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.integrations.mcp_harness import (
    SCRIPT,
    alive,
    http_server,
    server_env,
    settle,
    structured,
    unique_profile,
    wait_until,
    write_config,
)

TOKEN = "test-token-0123456789abcdef"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def config(tmp_path: Path) -> str:
    (tmp_path / "work").mkdir()
    return write_config(
        tmp_path, f'backend = "local"\nprofile = "{unique_profile()}"\n[backends.local]\ncwd = "{tmp_path}/work"\n'
    )


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"bearer  {TOKEN}x"])
def test_a_request_without_the_right_token_gets_401(tmp_path: Path, config: str, authorization: str | None) -> None:
    with http_server(tmp_path, config, ENVLAYER_MCP_TOKEN=TOKEN) as (_, url):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")  # loopback unless told otherwise
        headers = dict(HEADERS) if authorization is None else {**HEADERS, "authorization": authorization}
        response = httpx.post(url, json=INITIALIZE, headers=headers, timeout=30)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in response.json()["hint"]
        admitted = httpx.post(url, json=INITIALIZE, headers={**HEADERS, "authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert admitted.status_code == 200  # the same request with the token passes


def test_the_sdk_client_runs_and_cancels_tools_over_http_with_a_token_from_a_file(tmp_path: Path, config: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    pid_file = tmp_path / "work" / "pid"

    async def go(url: str) -> None:
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=60) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            assert "terminal" in names and "upload_files" in names
            out = structured(await session.call_tool("terminal", {"command": f"echo $$ > {pid_file}; echo over http"}))
            assert out["output"] == "over http\n"
            sleeper = tmp_path / "work" / "sleeper"
            with pytest.raises(MCPError):  # the client's timeout sends notifications/cancelled over HTTP too
                await session.call_tool(
                    "terminal", {"command": f"sleep 300 & echo $! > {sleeper}; wait"}, read_timeout_seconds=2
                )
            await settle(
                lambda: sleeper.exists() and not alive(int(sleeper.read_text())), "the cancelled command ended"
            )

    with http_server(tmp_path, config, "--token-file", str(token_file)) as (proc, url):
        anyio.run(go, url)
        proc.terminate()
        assert proc.wait(60) == 0
    wait_until(lambda: not alive(int(pid_file.read_text())), "the sandbox's shell ended with the server")


def test_http_without_a_token_refuses_to_start(tmp_path: Path, config: str) -> None:
    done = subprocess.run(
        [SCRIPT, "--config", config, "--http", "127.0.0.1:0"],
        env=server_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "no bearer token" in done.stderr and "ENVLAYER_MCP_TOKEN" in done.stderr


def test_a_bad_listen_address_is_a_clear_error(tmp_path: Path, config: str) -> None:
    done = subprocess.run(
        [SCRIPT, "--config", config, "--http", "localhost:http"],
        env=server_env(tmp_path, ENVLAYER_MCP_TOKEN=TOKEN),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "HOST:PORT" in done.stderr, done.stderr
