"""One-shot execution: a fresh channel and shell per command, on the core's exec parts.

Each command is isolated from the others (no shared shell state) and may run
concurrently with them, up to the connection's channel limit (further ones wait). The
output goes to an :class:`~envlayer.execution.collector.OutputCollector`; on a timeout or an
interrupt the kill runs on another channel while this one keeps being drained
(:func:`~envlayer.execution.streams.drain_while`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer.execution.cancel import killer_for
from envlayer.execution.collector import OutputCollector
from envlayer.execution.streams import drain_while
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer_ssh.channel_io import DRAIN_GRACE
from envlayer_ssh.stream import ChannelStream

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

_NO_LIMIT = 365 * 86400.0
_STATUS_POLL = 0.5


def run(
    pool: TargetPool, line: str, request: ExecRequest, collector: OutputCollector, *, kill: Callable[[], None]
) -> ExecResult:
    """Run ``line`` (the exec request sent to sshd) and return the finished result.

    Raises :class:`BackendUnavailable` when the server refuses the request (the command
    did not run), :class:`~envlayer_ssh.errors.ConnectionLost` when the connection
    dropped before the exit status arrived (it may or may not have finished).
    """
    stream = ChannelStream(pool.open())
    writer = None
    try:
        try:
            stream.channel.exec_command(line)
        except Exception as exc:
            raise BackendUnavailable(
                f"{pool.target.describe()} refused to run the command ({type(exc).__name__}: {exc}); it did not run",
                hint="check the server's log; the next call reconnects if the connection dropped",
            ) from exc
        if request.stdin is None:
            stream.end_input()
        else:
            writer = threading.Thread(
                target=_feed, args=(stream, request.stdin), daemon=True, name="envlayer-ssh-stdin"
            )
            writer.start()
        try:
            with killer_for(request.cancel, kill):
                code = _collect(stream, request.deadline, collector)
        except BaseException:
            drain_while(stream, collector, kill)
            raise
        if code is None:
            drain_while(stream, collector, kill)
            return collector.result(request, 124, timed_out=True)
        return collector.result(request, code)
    finally:
        stream.close()
        if writer is not None:
            writer.join(1.0)


def _feed(stream: ChannelStream, data: bytes) -> None:
    try:
        stream.write(data)
    except OSError:
        pass  # the command exited without reading all of it, or the channel closed
    stream.end_input()


def _collect(stream: ChannelStream, deadline: float | None, collector: OutputCollector) -> int | None:
    """Read until the exit status (plus up to ``DRAIN_GRACE`` for EOF, so a background
    child holding stdout never hangs the call); ``None`` when ``deadline`` came first."""
    channel = stream.channel
    status_at: float | None = None
    while True:
        now = time.monotonic()
        if channel.exit_status_ready():
            status_at = status_at or now
            if channel.eof_received or now - status_at >= DRAIN_GRACE:
                for name, data in stream.read(now) or []:
                    collector.write(name, data)
                return stream.exit_status(0)
        # wake up for the deadline, the end of the drain grace, or to look for the status
        wake = (status_at + DRAIN_GRACE) if status_at is not None else now + _STATUS_POLL
        if deadline is not None:
            wake = min(wake, deadline)
        chunks = stream.read(wake)
        if chunks is None:
            remaining = _NO_LIMIT if deadline is None else max(0.0, deadline - time.monotonic())
            return stream.exit_status(remaining)
        if not chunks and deadline is not None and time.monotonic() >= deadline:
            return None
        for name, data in chunks:
            collector.write(name, data)
