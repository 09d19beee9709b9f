"""The few Docker Engine API calls the fake Modal server makes, spoken over the daemon's
unix socket with asyncio: no ``docker`` CLI process per call (a Go binary start costs tens
of milliseconds of CPU, and the fake made one per exec, per file operation and four times
a second per sandbox to see whether its container still ran).

Endpoints and bodies follow the Engine API reference (https://docs.docker.com/reference/api/engine/,
v1.41+): ``POST /containers/create``, ``POST /containers/{id}/start``, ``DELETE
/containers/{id}?force=1``, ``GET /containers/json``, ``GET /images/{name}/json``,
``GET /events`` (a stream of JSON objects), ``POST /build`` (a tar context; a stream of
JSON objects, a failed step an ``error`` entry), ``POST /containers/{id}/exec``,
``POST /exec/{id}/start`` (hijacked: ``Upgrade: tcp``, then the multiplexed stdout/stderr
frames of a non-TTY exec, each an 8-byte header ``[stream, 0, 0, 0, size u32 BE]``) and
``POST /exec/{id}/resize`` (a tty's size; with a tty the stream after the hijack is raw,
not framed) and ``GET /exec/{id}/json``. The daemon's socket is ``$DOCKER_HOST`` when it is ``unix://...``,
else ``/var/run/docker.sock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any

EXEC_STATUS_DEADLINE = 10.0
"""Seconds to wait for an exec the daemon still reports running after its streams ended."""


class DockerError(RuntimeError):
    """The daemon answered a status >= 400; ``status`` is that status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"docker API {status}: {message}")
        self.status = status


def socket_path() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    return host.removeprefix("unix://") if host.startswith("unix://") else "/var/run/docker.sock"


def _head(method: str, path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The response body as it arrives (chunked transfer-encoding decoded)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while size := int((await reader.readline()).split(b";")[0], 16):
            yield await reader.readexactly(size)
            await reader.readline()
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        yield await reader.read()


def _target(path: str, query: dict[str, Any] | None) -> str:
    return path + ("?" + urllib.parse.urlencode(query) if query else "")


async def call(method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
    """One request; the decoded JSON answer (None for an empty one). Raises DockerError."""
    reader, writer = await asyncio.open_unix_connection(socket_path())
    try:
        payload = b"" if body is None else json.dumps(body).encode()
        writer.write(_head(method, _target(path, query), payload, "Connection: close\r\n"))
        status, headers = await _read_head(reader)
        data = b"".join([chunk async for chunk in _body_chunks(reader, headers)])
    finally:
        writer.close()
    if status >= 400:
        message = data.decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(data)["message"]
        raise DockerError(status, message)
    return json.loads(data) if data.strip() else None


async def build(context: bytes, tag: str, labels: dict[str, str]) -> tuple[list[str], str]:
    """``POST /build`` of a tar ``context`` (its ``Dockerfile`` at the root), tagged ``tag``
    with ``labels``: (the build's log lines, the error the daemon reported or ""). The
    answer is a stream of JSON objects; a failed step is an ``error`` entry in it, not an
    HTTP status (the Engine API's ``/build``)."""
    reader, writer = await asyncio.open_unix_connection(socket_path())
    query = {"t": tag, "labels": json.dumps(labels), "rm": "1", "forcerm": "1"}
    try:
        head = (
            f"POST {_target('/build', query)} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/x-tar\r\n"
            f"Content-Length: {len(context)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + context)
        status, headers = await _read_head(reader)
        data = b"".join([chunk async for chunk in _body_chunks(reader, headers)])
    finally:
        writer.close()
    if status >= 400:
        return [], data.decode(errors="replace")
    lines: list[str] = []
    error = ""
    decoder = json.JSONDecoder()
    text = data.decode(errors="replace")
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        entry, pos = decoder.raw_decode(text, pos)
        if entry.get("error"):
            error = str(entry["error"]).strip()
        lines += [line for line in str(entry.get("stream", "")).splitlines() if line.strip()]
    return lines, error


async def events(
    filters: dict[str, list[str]], on_event: Callable[[dict[str, Any]], Any], subscribed: asyncio.Event
) -> None:
    """Await ``on_event`` with each event the daemon reports matching ``filters`` until the
    connection ends (cancel the task to stop); ``subscribed`` is set once the daemon has
    accepted the subscription (events from then on are reported)."""
    reader, writer = await asyncio.open_unix_connection(socket_path())
    try:
        query = _target("/events", {"filters": json.dumps(filters)})
        writer.write(_head("GET", query, b""))
        status, headers = await _read_head(reader)
        if status >= 400:
            raise DockerError(status, "events")
        subscribed.set()
        pending = b""
        async for chunk in _body_chunks(reader, headers):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    await on_event(json.loads(line))
    finally:
        writer.close()


class ExecSession:
    """One exec attached over a hijacked connection: stdin to write, the demultiplexed
    stdout/stderr handed to ``sink(fd, chunk)`` (``chunk`` b"" at the end of both)."""

    def __init__(self, exec_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tty: bool) -> None:
        self.exec_id = exec_id
        self._reader = reader
        self.stdin = writer
        self._tty = tty

    @classmethod
    async def start(
        cls,
        container: str,
        argv: list[str],
        *,
        workdir: str | None,
        env: dict[str, str],
        console: tuple[int, int] | None = None,
    ) -> ExecSession:
        """Create and attach an exec; with ``console`` (rows, cols) it gets a tty of that
        size and its output is one raw stream. The size is set as ``docker exec -t`` does:
        ``ConsoleSize`` at create (API v1.42+; older daemons ignore it) and ``POST
        /exec/{id}/resize`` once started (a tty starts at 0x0 before that)."""
        spec: dict[str, Any] = {"AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Cmd": argv}
        spec["Env"] = [f"{k}={v}" for k, v in env.items()]
        if workdir is not None:
            spec["WorkingDir"] = workdir
        if console is not None:
            spec.update(Tty=True, ConsoleSize=list(console))
        exec_id = (await call("POST", f"/containers/{container}/exec", spec))["Id"]
        reader, writer = await asyncio.open_unix_connection(socket_path())
        body = json.dumps({"Detach": False, "Tty": console is not None}).encode()
        writer.write(_head("POST", f"/exec/{exec_id}/start", body, "Connection: Upgrade\r\nUpgrade: tcp\r\n"))
        status, _ = await _read_head(reader)
        if status not in (101, 200):
            writer.close()
            raise DockerError(status, f"exec start {exec_id}")
        if console is not None:
            await call("POST", f"/exec/{exec_id}/resize", query={"h": console[0], "w": console[1]})
        return cls(exec_id, reader, writer, console is not None)

    async def pump(self, sink: Callable[[int, bytes], Any]) -> None:
        """Hand every frame to ``sink`` until the daemon ends the stream (a tty's raw
        stream as stdout, fd 1)."""
        try:
            while self._tty:
                try:
                    raw = await self._reader.read(65536)
                except ConnectionError:
                    return
                if not raw:
                    return
                await sink(1, raw)
            while True:
                try:
                    header = await self._reader.readexactly(8)
                    fd, size = header[0], struct.unpack(">I", header[4:])[0]
                    chunk = await self._reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if chunk and fd in (1, 2):
                    await sink(fd, chunk)
        finally:
            self.stdin.close()

    async def exit_code(self) -> int:
        """The exec's exit code once the daemon has it (as ``docker exec`` reports it:
        128+n for a signal); 137 when the exec is gone with its container."""
        loop = asyncio.get_running_loop()
        end = loop.time() + EXEC_STATUS_DEADLINE
        while True:
            try:
                info = await call("GET", f"/exec/{self.exec_id}/json")
            except DockerError:
                return 137
            if not info.get("Running") or loop.time() > end:
                return int(info.get("ExitCode") or 0) if not info.get("Running") else 137
            await asyncio.sleep(0.02)

    def kill(self) -> None:
        """Drop the connection (what killing a ``docker exec`` client did)."""
        self.stdin.close()
