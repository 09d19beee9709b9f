"""PTY sessions of the fake Daytona toolbox: a Docker exec with a tty, relayed over a
WebSocket, as the daemon relays its shell's pty.

Modelled on the SDK (``daytona/_sync/process.py`` ``Process.create_pty_session`` and
``resize_pty_session``; ``daytona/handle/pty_handle.py`` ``PtyHandle``) and the daemon
(github.com/daytonaio/daytona, ``apps/daemon/pkg/toolbox/process/pty``):

* ``GET /process/pty/create-connect?id=&cols=&rows=&cwd=`` upgrades to a WebSocket. Envs
  come as the subprotocol token ``X-Daytona-Pty-Envs~<base64url JSON>``; the client also
  offers ``X-Daytona-Pty-Exit-Control`` (SDK ``create_pty_session``). Defaults: cwd the
  user's home, ``TERM=xterm-256color``, 80x24; cols or rows over 1000 answer 400, a
  session id in use 409 (``controller.go`` ``CreatePTYSession``). The shell is the user's
  (``common.GetShell()``: ``sh`` here), run with the sandbox's OS user.
* Once attached the server sends the text ``{"type":"control","status":"connected"}``
  (``websocket.go`` ``attachWebSocket``), then the pty's output as binary messages
  (``clientWriter``); every client message, text or binary, is typed into the pty
  (``clientReader``).
* When the shell ends: with the exit-control subprotocol, the text control
  ``{"status":"exited","exitCode":N}`` (what ``PtyHandle._handle_control_message`` reads),
  then a close frame, 1000 for status 0 and 1011 otherwise, whose reason is the JSON
  ``{"exitCode":N,"exitReason":...}`` (``websocket.go`` ``closeClientsWithExitCode``).
* ``POST /process/pty/{id}/resize`` ``{cols, rows}`` resizes the tty and answers the
  session's ``PtySessionInfo``; 410 for a session that has ended (``ResizePTYSession``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EXIT_CONTROL = "X-Daytona-Pty-Exit-Control"
ENVS_TOKEN = "X-Daytona-Pty-Envs~"
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA
SIZE_LIMIT = 1000


class PtyRefused(Exception):
    """A create-connect or resize the daemon answers with an HTTP error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final server frame (RFC 6455 section 5.2)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


def _read_frame(rfile: Any) -> tuple[int, bytes]:
    """One client frame (masked, as RFC 6455 requires of clients); (CLOSE, b"") at EOF."""
    head = rfile.read(2)
    if len(head) < 2:
        return CLOSE, b""
    opcode, size = head[0] & 0x0F, head[1] & 0x7F
    if size == 126:
        size = struct.unpack("!H", rfile.read(2))[0]
    elif size == 127:
        size = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(size)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _offered(header: str | None) -> tuple[bool, dict[str, str]]:
    """(exit control offered, envs) from ``Sec-WebSocket-Protocol``."""
    tokens = [t.strip() for t in (header or "").split(",") if t.strip()]
    envs: dict[str, str] = {}
    for token in tokens:
        if token.startswith(ENVS_TOKEN):
            encoded = token[len(ENVS_TOKEN) :]
            envs.update(json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))))
    return EXIT_CONTROL in tokens, envs


class _Session:
    def __init__(self, info: dict[str, Any], exec_id: str) -> None:
        self.info = info
        self.exec_id = exec_id


class PtySessions:
    """The PTY sessions of every sandbox, keyed by (sandbox id, session id)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.lock = threading.Lock()
        self.sessions: dict[tuple[str, str], _Session] = {}

    def _start(self, sb: dict[str, Any], query: dict[str, str], envs: dict[str, str]) -> _Session:
        sid = query.get("id", "")
        cols, rows = int(query.get("cols") or 80), int(query.get("rows") or 24)
        if not sid:
            raise PtyRefused(400, "session ID is required")
        if cols > SIZE_LIMIT or rows > SIZE_LIMIT:
            raise PtyRefused(400, "invalid value for cols/rows - must be less than 1000")
        user = sb.get("osUser")
        envs = {"TERM": "xterm-256color", **envs}
        cwd = query.get("cwd") or (user.home if user else "/root")
        with self.lock:
            if (sb["id"], sid) in self.sessions:
                raise PtyRefused(409, f"PTY session with ID '{sid}' already exists")
            exec_id = self.api.exec_create(
                sb["container"],
                ["sh"],
                stdin=True,
                tty=True,
                environment=envs,
                workdir=cwd,
                user=user.name if user else "",
            )["Id"]
            info = {"id": sid, "cwd": cwd, "envs": envs, "cols": cols, "rows": rows, "active": True, "lazyStart": False}
            info["createdAt"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            session = self.sessions[(sb["id"], sid)] = _Session(info, exec_id)
        return session

    def connect(self, handler: Any, sb: dict[str, Any], query: dict[str, str]) -> Callable[[], None]:
        """Start the shell of a ``create-connect`` (raises :class:`PtyRefused` for a bad
        request); the function that then serves it on ``handler``'s connection until the
        shell ends."""
        exit_control, envs = _offered(handler.headers.get("Sec-WebSocket-Protocol"))
        session = self._start(sb, query, envs)
        return lambda: self._serve(handler, session, exit_control)

    def _serve(self, handler: Any, session: _Session, exit_control: bool) -> None:
        attached = self.api.exec_start(session.exec_id, socket=True, tty=True)
        tty: socket.socket = getattr(attached, "_sock", attached)
        self.api.exec_resize(session.exec_id, height=session.info["rows"], width=session.info["cols"])
        key = handler.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        handler.send_response(101)
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        if exit_control:
            handler.send_header("Sec-WebSocket-Protocol", EXIT_CONTROL)
        handler.end_headers()
        handler.close_connection = True
        sending = threading.Lock()

        def send(opcode: int, payload: bytes) -> None:
            with sending:
                handler.wfile.write(_frame(opcode, payload))
                handler.wfile.flush()

        send(TEXT, json.dumps({"type": "control", "status": "connected"}).encode())
        writer = threading.Thread(target=self._relay_output, args=(session, tty, send, exit_control), daemon=True)
        writer.start()
        try:
            self._relay_input(handler.rfile, tty, send)
        finally:
            tty.close()
            writer.join()

    @staticmethod
    def _relay_input(rfile: Any, tty: socket.socket, send: Any) -> None:
        """Client messages into the pty until the client closes (or the connection ends)."""
        while True:
            opcode, data = _read_frame(rfile)
            if opcode == CLOSE:
                return
            if opcode == PING:
                send(PONG, data)
            elif opcode in (TEXT, BINARY, 0x0):
                try:
                    tty.sendall(data)
                except OSError:
                    return

    def _relay_output(self, session: _Session, tty: socket.socket, send: Any, exit_control: bool) -> None:
        """The pty's output as binary messages; at its end the exit status, then close."""
        try:
            while chunk := tty.recv(65536):
                send(BINARY, chunk)
        except OSError:
            pass
        session.info["active"] = False
        code = int(self.api.exec_inspect(session.exec_id).get("ExitCode") or 0)
        reason: dict[str, Any] = {"exitCode": code}
        if code:
            reason["exitReason"] = "non-zero exit"
        try:
            if exit_control:
                send(TEXT, json.dumps({"type": "control", "status": "exited", **reason}).encode())
            send(CLOSE, struct.pack("!H", 1000 if code == 0 else 1011) + json.dumps(reason).encode())
        except OSError:
            pass

    def resize(self, sb: dict[str, Any], sid: str, body: dict[str, Any]) -> dict[str, Any]:
        """Resize a running session's tty; its ``PtySessionInfo``."""
        cols, rows = int(body.get("cols") or 0), int(body.get("rows") or 0)
        if cols > SIZE_LIMIT or rows > SIZE_LIMIT:
            raise PtyRefused(400, "cols and rows must be less than 1000")
        session = self.sessions.get((sb["id"], sid))
        if session is None or not session.info["active"]:
            raise PtyRefused(410, f"PTY session {sid} not found or not active")
        self.api.exec_resize(session.exec_id, height=rows, width=cols)
        session.info.update(cols=cols, rows=rows)
        return dict(session.info)
