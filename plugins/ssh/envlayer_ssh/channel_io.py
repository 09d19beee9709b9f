"""Reading a channel: the wait loop, capped capture, and sentinel splitting.

The loop blocks on the channel's event pipe (``select`` on ``Channel.fileno()``), so a
reply is handled as soon as paramiko's transport thread has it: no polling delay.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlayer.output import CappedBuffer, TruncationPolicy

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.pool import TargetPool

OutputCallback = Callable[[str, bytes], None]

CHUNK = 65536
DRAIN_GRACE = 0.1
"""After the exit status arrives, how long to wait for EOF before returning, so that a
background child that still holds stdout open (``server &``) never hangs the call."""


class Collector:
    """Capped stdout/stderr capture plus the optional streaming callback."""

    def __init__(self, limit: int, policy: TruncationPolicy, on_output: OutputCallback | None) -> None:
        self.buffers = {"stdout": CappedBuffer(limit, policy), "stderr": CappedBuffer(limit, policy)}
        self.on_output = on_output

    def write(self, stream: str, data: bytes) -> None:
        if not data:
            return
        self.buffers[stream].write(data)
        if self.on_output is not None:
            self.on_output(stream, data)


class SentinelSplitter:
    """Passes a stream through until ``\\n<token>`` appears; keeps what follows it.

    Bytes that might be the start of the sentinel are held back until it is clear they
    are not, so the caller never sees any part of the sentinel.
    """

    def __init__(self, token: bytes, sink: Callable[[bytes], None]) -> None:
        self.marker = b"\n" + token
        self.sink = sink
        self.pending = b""
        self.trailer: bytes | None = None

    @property
    def found(self) -> bool:
        return self.trailer is not None

    def feed(self, data: bytes) -> None:
        if self.trailer is not None:
            self.trailer += data
            return
        buf = self.pending + data
        idx = buf.find(self.marker)
        if idx >= 0:
            self.sink(buf[:idx])
            self.trailer = buf[idx + len(self.marker) :]
            self.pending = b""
            return
        keep = len(self.marker) - 1
        # Hold back the longest suffix that is a prefix of the marker.
        hold = 0
        for n in range(min(keep, len(buf)), 0, -1):
            if self.marker.startswith(buf[-n:]):
                hold = n
                break
        self.sink(buf[: len(buf) - hold])
        self.pending = buf[len(buf) - hold :]

    def flush(self) -> None:
        """Release held-back bytes (the stream ended without a sentinel)."""
        if self.trailer is None and self.pending:
            self.sink(self.pending)
            self.pending = b""


def pump(
    channel: paramiko.Channel,
    on_data: Callable[[str, bytes], None],
    done: Callable[[], bool],
    deadline: float | None,
) -> str:
    """Feed channel output to ``on_data`` until ``done()``, EOF or ``deadline``.

    Returns ``"done"``, ``"eof"`` (the channel hit EOF or closed; all data delivered) or
    ``"timeout"``. Once the exit status is in, ``done`` is re-checked at least every
    ``DRAIN_GRACE`` / 2 seconds.
    """
    while True:
        while channel.recv_ready():
            on_data("stdout", channel.recv(CHUNK))
        while channel.recv_stderr_ready():
            on_data("stderr", channel.recv_stderr(CHUNK))
        if done():
            return "done"
        if channel.eof_received or channel.closed:
            while channel.recv_ready():
                on_data("stdout", channel.recv(CHUNK))
            while channel.recv_stderr_ready():
                on_data("stderr", channel.recv_stderr(CHUNK))
            return "done" if done() else "eof"
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return "timeout"
        wait = 1.0 if deadline is None else min(1.0, deadline - now)
        if channel.exit_status_ready():
            wait = min(wait, DRAIN_GRACE / 2)
        select.select([channel], [], [], wait)


def exit_code(channel: paramiko.Channel) -> int:
    """The remote exit status; 255 when the server sent none (the remote process died
    from a signal, which paramiko reports as -1; the ``ssh`` client also says 255)."""
    status = channel.exit_status if channel.exit_status_ready() else -1
    return 255 if status < 0 else status


def run_simple(pool: TargetPool, line: str, *, timeout: float) -> tuple[int, bytes, bytes]:
    """Run ``line`` on a fresh channel and return (exit code, stdout, stderr), uncapped.

    For the backend's own short helper commands. On timeout the channel is closed and
    the exit code is 124.
    """
    lease = pool.open()
    try:
        channel = lease.channel
        channel.exec_command(line)
        channel.shutdown_write()
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = time.monotonic() + timeout

        def collect(stream: str, data: bytes) -> None:
            (out if stream == "stdout" else err).append(data)

        outcome = pump(channel, collect, lambda: False, deadline)
        if outcome == "timeout":
            return 124, b"".join(out), b"".join(err)
        channel.status_event.wait(max(0.0, deadline - time.monotonic()))
        return exit_code(channel), b"".join(out), b"".join(err)
    finally:
        lease.release()
