"""An attached ``docker exec`` as a core :class:`~envlayer.execution.streams.ByteStream`.

``exec_start(socket=True)`` hijacks one connection to the daemon; without a tty the
daemon multiplexes stdout and stderr on it in frames (8-byte header: stream id, 3 zero
bytes, big-endian length). :class:`AttachStream` reads the socket directly (one ``recv``
of up to 1 MiB, no SDK layer in between), splits the frames and reports EOF; its
first bytes are those docker-py's HTTP reader already took off the socket with the
response headers (:func:`buffered_bytes`: a busy client reads the headers late, when a
short command's whole output, trailer included, has already arrived behind them); its
``exit_status`` asks the daemon, and tells a command that ended from a daemon or
container that went away (then it raises: the command may or may not have finished).
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.execution.streams import Chunks, WriteTimedOut
from envlayer_docker import sdk
from envlayer_docker.errors import translated
from envlayer_docker.options import DockerOptions

_NAMES = {1: "stdout", 2: "stderr"}
_RECV = 1 << 20


class FrameDemux:
    """Splits Docker's multiplexed (non-TTY) attach stream into ``(stream, payload)`` frames."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._want = 0
        self._stream = 0

    def feed(self, data: bytes) -> Chunks:
        """Add raw bytes; return the payload bytes they complete or continue, per stream.

        A frame's payload is passed on as it arrives (a large frame is not held back
        until complete), so a flood costs one copy per read. A header that arrives whole
        is read in place (the common case: a session call's few small frames)."""
        out: Chunks = []
        pos, end = 0, len(data)
        while pos < end:
            if self._want:
                take = min(self._want, end - pos)
                name = _NAMES.get(self._stream)
                if name is not None:
                    out.append((name, data[pos : pos + take]))
                self._want -= take
                pos += take
            elif not self._buf and end - pos >= 8:
                self._stream = data[pos]
                self._want = int.from_bytes(data[pos + 4 : pos + 8], "big")
                pos += 8
            else:
                need = 8 - len(self._buf)
                self._buf += data[pos : pos + need]
                pos += min(need, end - pos)
                if len(self._buf) == 8:
                    self._stream = self._buf[0]
                    self._want = int.from_bytes(self._buf[4:8], "big")
                    self._buf.clear()
        return out


def raw_socket(attached: Any) -> socket.socket:
    """The plain socket under docker-py's ``exec_start(socket=True)`` result."""
    return getattr(attached, "_sock", attached)


def _http_response(attached: Any) -> Any:
    """The ``http.client.HTTPResponse`` that docker-py hijacked the socket from, or None."""
    return getattr(getattr(getattr(attached, "_response", None), "raw", None), "_fp", None)


def buffered_bytes(attached: Any) -> bytes:
    """The stream bytes that came in with the response headers: docker-py parses them
    through a buffered reader, which may have read past them, and hands out the socket
    under it. Those bytes are the start of the stream; reading only the socket loses them.
    Takes them without waiting (``b""`` when there are none); leaves the socket
    non-blocking."""
    reader = getattr(_http_response(attached), "fp", None)
    if reader is None or not hasattr(reader, "read1"):
        return b""
    raw_socket(attached).setblocking(False)
    try:
        return reader.read1(_RECV) or b""
    except (BlockingIOError, OSError, ValueError):
        return b""


class AttachStream:
    """:class:`~envlayer.execution.streams.ByteStream` over one attached exec (see the module docstring)."""

    def __init__(self, api: Any, exec_id: str, attached: Any, *, container: Any, options: DockerOptions) -> None:
        self.api = api
        self.exec_id = exec_id
        self.container = container
        self.options = options
        self._attached = attached
        self.sock = raw_socket(attached)
        self._early = buffered_bytes(attached)
        self.sock.setblocking(True)
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self._demux = FrameDemux()
        self._closed = False

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send ``data`` to the process's stdin; ``OSError`` when the stream is gone. With
        ``deadline``, the socket's own timeout bounds the send (restored after):
        :class:`~envlayer.execution.streams.WriteTimedOut` once it passes."""
        if deadline is None:
            self.sock.sendall(data)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise WriteTimedOut("the deadline passed before the write")
        self.sock.settimeout(left)
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise WriteTimedOut(f"the daemon took too long to take the data: {exc}") from exc
        finally:
            self.sock.settimeout(None)

    def end_input(self) -> None:
        """Half-close: the process reads EOF on stdin."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def read(self, deadline: float | None) -> Chunks | None:
        """See :meth:`envlayer.execution.streams.ByteStream.read`."""
        if self._early:
            early, self._early = self._early, b""
            chunks = self._demux.feed(early)
            if chunks:
                return chunks
        while True:
            if deadline is not None:
                wait_ms = max(math.ceil((deadline - time.monotonic()) * 1000), 0)
                try:
                    ready = self._poll.poll(wait_ms)
                except (OSError, ValueError):
                    return None
                if not ready:
                    return []
            try:
                data = self.sock.recv(_RECV)
            except (OSError, ValueError):
                return None
            if not data:
                return None
            chunks = self._demux.feed(data)
            if chunks:
                return chunks

    def running(self) -> bool:
        """Whether the daemon still runs the exec (False if it cannot tell)."""
        try:
            return bool(self.api.exec_inspect(self.exec_id).get("Running"))
        except Exception:
            return False

    def exit_status(self, wait: float) -> int | None:
        """The exec's exit code once the daemon reports it ended (up to ``wait`` s).

        Raises :class:`BackendUnavailable` when the daemon cannot be reached, or when the
        container is gone or stopped (OOM, ``docker rm -f``, ``docker stop``): the command
        may have partly run; it is not re-run.
        """
        doing = "a command ran in the container"
        end = time.monotonic() + wait
        with translated(doing, self.options, during_command=True):
            while True:
                try:
                    info = self.api.exec_inspect(self.exec_id)
                except sdk.errors.NotFound:  # the exec went with its container; the state check says so
                    info = {"Running": False, "ExitCode": None}
                if not info.get("Running"):
                    code = info.get("ExitCode")
                    break
                if time.monotonic() >= end:
                    code = None
                    break
                time.sleep(0.01)
            check_container_running(self.api, self.container, settle=code is None or code >= 128)
        return code

    def close(self) -> None:
        """Close the connection (the process sees EOF on stdin; it is not killed). The
        HTTP response it was hijacked from is closed first, while its reader is still
        open: closed later by the garbage collector, it would flush a closed file (Python
        3.13 prints that as an ignored exception with a traceback)."""
        if self._closed:
            return
        self._closed = True
        close_response = getattr(_http_response(self._attached), "close", None)
        closers = [lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close, self._attached.close]
        if close_response is not None:
            closers.insert(0, close_response)
        for closer in closers:
            try:
                closer()
            except (OSError, ValueError):
                pass


def check_container_running(api: Any, container: Any, *, settle: bool) -> None:
    """Raise :class:`BackendUnavailable` unless ``container`` (an ``Attached``) is running.

    With ``settle`` (the process died from a signal), watch for up to a second: the daemon
    marks a killed container as exited only after its processes died. Daemon errors
    propagate (the caller translates them)."""
    end = time.monotonic() + (1.0 if settle else 0.0)
    while True:
        try:
            state = api.inspect_container(container.id).get("State") or {}
        except sdk.errors.NotFound:
            state = {"Status": "removed"}
        if state.get("Status") != "running" or time.monotonic() >= end:
            break
        time.sleep(0.05)
    if state.get("Status") != "running":
        detail = " (OOM-killed)" if state.get("OOMKilled") else ""
        raise BackendUnavailable(
            f"the command ended early because the container {container.name} is {state.get('Status')}{detail}; "
            "the command may have partly run and was NOT re-run",
            hint="check its effects and retry; the next call restarts or re-creates the container",
        )
