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


def send_eof(channel: paramiko.Channel) -> None:
    """Send EOF on the remote process's stdin, never after the channel's CLOSE.

    paramiko's ``Channel.shutdown_write`` marks the EOF sent under the channel's lock but
    sends it after releasing it (``Channel.shutdown`` / ``_send_eof`` in paramiko's
    channel.py). A CLOSE built in between (by the transport thread answering the server's
    CLOSE in ``Channel._handle_close``, or by another thread's ``close``) then carries no
    EOF and can go out first; sshd has freed the channel by the time the late EOF comes and
    drops the whole connection, every other command on it included ("ieof packet referred
    to nonexistent channel", OpenSSH channels.c ``channel_from_packet_id``). Here the EOF is
    built and sent while holding the transport's send lock, in the way
    ``Transport._send_user_message`` takes it (waiting out a key exchange), so a CLOSE built
    after it is sent after it, and none is sent once the channel is closed (its CLOSE
    carried the EOF). The channel lock is taken inside the send lock only, never the other
    way round, as paramiko does. Does nothing when the connection is gone.
    """
    transport = channel.transport
    give_up = time.monotonic() + transport.clear_to_send_timeout
    while transport.active:
        transport.clear_to_send.wait(0.1)
        with transport.clear_to_send_lock:
            if transport.clear_to_send.is_set():
                with channel.lock:
                    message = None if channel.closed else channel._send_eof()
                if message is not None:
                    transport._send_message(message)
                return
        if time.monotonic() > give_up:
            return  # a key exchange that never ends: the connection is failing anyway


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
        send_eof(channel)
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
