"""Reading a channel for envlayer's own short helper commands: the wait loop.

The loop blocks on the channel's event pipe (``select`` on ``Channel.fileno()``), so a
reply is handled as soon as paramiko's transport thread has it: no polling delay.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.pool import TargetPool

CHUNK = 65536
DRAIN_GRACE = 0.1
"""After the exit status arrives, how long to wait for EOF before returning, so that a
background child that still holds stdout open (``server &``) never hangs the call."""


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
