"""One-shot execution: a fresh channel and shell per command.

Each command is isolated from the others (no shared shell state) and may run
concurrently with them, up to the connection's channel limit (further ones wait).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer_ssh.channel_io import DRAIN_GRACE, Collector, exit_code, pump
from envlayer_ssh.errors import ConnectionLost
from envlayer_ssh.session import Outcome

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.pool import Lease


def start(lease: Lease, line: str, stdin: bytes | None) -> threading.Thread | None:
    """Send ``line`` as the channel's exec request and feed ``stdin`` (then EOF).

    Returns the stdin writer thread, if any. Raises :class:`BackendUnavailable` when the
    server refuses the request (the command did not run).
    """
    channel = lease.channel
    try:
        channel.exec_command(line)
    except Exception as exc:
        raise BackendUnavailable(
            f"{lease.pool.target.describe()} refused to run the command ({type(exc).__name__}: {exc}); it did not run",
            hint="check the server's log; the next call reconnects if the connection dropped",
        ) from exc
    if stdin is None:
        channel.shutdown_write()
        return None
    writer = threading.Thread(target=_feed, args=(channel, stdin), daemon=True, name="envlayer-ssh-stdin")
    writer.start()
    return writer


def _feed(channel: paramiko.Channel, data: bytes) -> None:
    try:
        channel.sendall(data)
        channel.shutdown_write()
    except Exception:  # the command exited without reading all of it, or the channel closed
        pass


def wait(lease: Lease, deadline: float | None, collector: Collector) -> Outcome:
    """Collect output until the command exits (plus a short drain) or ``deadline``.

    A background child that keeps stdout open does not hold the call beyond
    ``DRAIN_GRACE`` after the exit status. Raises :class:`ConnectionLost` when the
    connection dropped before the exit status arrived.
    """
    channel = lease.channel
    status_at: list[float] = []

    def done() -> bool:
        if not channel.exit_status_ready():
            return False
        if channel.eof_received:
            return True
        if not status_at:
            status_at.append(time.monotonic())
        return time.monotonic() - status_at[0] >= DRAIN_GRACE

    outcome = pump(channel, collector.write, done, deadline)
    if outcome == "timeout":
        return Outcome(124, timed_out=True)
    if outcome == "eof" and not channel.exit_status_ready():
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        channel.status_event.wait(remaining)
    if channel.exit_status_ready() and (channel.exit_status >= 0 or lease.connection.alive):
        return Outcome(exit_code(channel))
    if not lease.connection.alive:
        raise ConnectionLost(
            f"the connection to {lease.pool.target.describe()} dropped while a command was running; "
            "it may or may not have run (and may still be running)",
            hint="check the remote state before running it again; the next call reconnects",
        )
    return Outcome(124, timed_out=True)
