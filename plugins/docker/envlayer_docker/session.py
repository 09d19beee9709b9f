"""A persistent shell inside the container, driven over one attached exec stream.

One ``docker exec -i <shell>`` per environment stays open; each command is sent as a
short script (see :func:`envlayer_docker.protocol.session_script`) and its end is found
by markers, so a warm call costs one write and a few reads on a local socket. ``cd`` and
``export`` persist between calls, as in a terminal.

Guarantees:

* A session is used by one command at a time (callers hold :attr:`lock`).
* After a timeout, an interrupt or EOF the session is *dead*: its shell was killed or
  exited, and :meth:`ShellSession.alive` is False. The owner starts a new one, in the
  last known working directory.
* The shell's initial environment carries ``ENVLAYER_SESSION=<id>`` so tools can tell
  session shells from command processes (the idle reclaimer does).
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from envlayer_docker.protocol import (
    SESSION_VAR,
    FrameDemux,
    Outcome,
    OutputCallback,
    Reader,
    Trailer,
    quote,
    session_script,
)


def raw_socket(attached: Any) -> socket.socket:
    """The plain socket under docker-py's ``exec_start(socket=True)`` result."""
    return getattr(attached, "_sock", attached)


class ShellSession:
    """One long-lived shell. Construct with :meth:`start`."""

    def __init__(self, api: Any, container_id: str, exec_id: str, attached: Any) -> None:
        self.api = api
        self.container_id = container_id
        self.exec_id = exec_id
        self._attached = attached
        self.sock = raw_socket(attached)
        self.demux = FrameDemux()
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.pwd: str | None = None
        self.last_used = time.monotonic()
        self._alive = True

    @classmethod
    def start(
        cls,
        api: Any,
        container_id: str,
        *,
        shell: str,
        env: Mapping[str, str],
        user: str | None,
        workdir: str,
        start_dir: str | None,
        touch_lease: bool,
        timeout: float = 30.0,
    ) -> ShellSession:
        """Start the shell and run a handshake (learns its pid and working directory).

        Raises docker-py errors from ``exec_create``/``exec_start`` (the caller maps
        them), or ``ConnectionError`` when the handshake fails.
        """
        environment = dict(env)
        environment[SESSION_VAR] = uuid.uuid4().hex
        eid = api.exec_create(
            container_id,
            [shell],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            environment=environment,
            workdir=workdir,
            user=user or "",
        )["Id"]
        attached = api.exec_start(eid, socket=True)
        session = cls(api, container_id, eid, attached)
        session.sock.setblocking(True)
        prologue = "exec 7>&1 8>&2\n"
        if start_dir and start_dir != workdir:
            prologue += f"cd -- {quote(start_dir)} 2>/dev/null\n"
        session.sock.sendall(prologue.encode("utf-8", "surrogateescape"))
        outcome, _, trailer = session.run(
            ":",
            exec_id=uuid.uuid4().hex,
            deadline=time.monotonic() + timeout,
            limit=4096,
            policy="head",
            touch_lease=touch_lease,
        )
        if outcome != Outcome.DONE or trailer is None:
            session.close()
            raise ConnectionError(f"the session shell {shell} did not start ({outcome})")
        return session

    @property
    def alive(self) -> bool:
        """False once the shell exited or was killed, or the stream broke."""
        return self._alive

    def stream_closed(self) -> bool:
        """True when the daemon already closed the stream (the shell or the container is
        gone), so a command sent now could not run. A zero-timeout poll: ~microseconds."""
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if ready and self.sock.recv(1, socket.MSG_PEEK) == b"":
                self._alive = False
        except OSError:
            self._alive = False
        return not self._alive

    def run(
        self,
        command: str | Sequence[str],
        *,
        exec_id: str,
        deadline: float | None,
        limit: int | None,
        policy: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin_path: str | None = None,
        touch_lease: bool = False,
        on_output: OutputCallback | None = None,
    ) -> tuple[str, Reader, Trailer | None]:
        """Send one command and read its output: (outcome, reader, trailer).

        On ``DONE`` the trailer gives the exit code and the new working directory. On
        ``EOF`` the shell has exited and the session is dead. On ``TIMEOUT`` the command
        is still running: the caller must kill it and :meth:`close` the session.
        An exception while reading (e.g. ``KeyboardInterrupt``) leaves the session
        marked dead and propagates.
        """
        marker = "__EL" + uuid.uuid4().hex[:20] + "__"
        script = session_script(
            command,
            exec_id=exec_id,
            marker=marker,
            env=env,
            cwd=cwd,
            stdin_path=stdin_path,
            touch_lease=touch_lease,
        )
        reader = Reader(self.sock, self.demux, marker.encode(), limit=limit, policy=policy, on_output=on_output)
        self.last_used = time.monotonic()
        try:
            self.sock.sendall(script)
            outcome = reader.read(deadline)
        except BaseException:
            self._alive = False
            raise
        if outcome == Outcome.DONE:
            trailer = reader.trailer()
            self.pid, self.pwd = trailer.pid, trailer.pwd
            return outcome, reader, trailer
        self._alive = False
        return outcome, reader, None

    def exit_code(self, wait: float = 2.0) -> int | None:
        """The shell's exit status after EOF (``None`` if the daemon does not know it)."""
        end = time.monotonic() + wait
        while True:
            try:
                info = self.api.exec_inspect(self.exec_id)
            except Exception:
                return None
            if not info.get("Running") or time.monotonic() >= end:
                code = info.get("ExitCode")
                return None if info.get("Running") else code
            time.sleep(0.01)

    def close(self) -> None:
        """Close the stream. The shell sees EOF and exits; its background jobs live on."""
        self._alive = False
        for closer in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close, self._attached.close):
            try:
                closer()
            except OSError:
                pass
