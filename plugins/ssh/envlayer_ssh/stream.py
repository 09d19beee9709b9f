"""An SSH channel as a core :class:`~envlayer.execution.streams.ByteStream`.

Reading blocks on the channel's event pipe (``select`` on ``Channel.fileno()``), so data
is handled as soon as paramiko's transport thread has it. ``exit_status`` tells a process
that ended from a connection that dropped: the latter raises
:class:`~envlayer_ssh.errors.ConnectionLost` (the command may or may not have finished).
"""

from __future__ import annotations

import logging
import select
import time
from typing import TYPE_CHECKING

from envlayer.execution.streams import Chunks, StreamEnded, WriteTimedOut
from envlayer_ssh.channel_io import send_eof
from envlayer_ssh.errors import ConnectionLost

if TYPE_CHECKING:
    from envlayer_ssh.pool import Lease

log = logging.getLogger("envlayer.ssh")

CHUNK = 262144


class ChannelStream:
    """:class:`~envlayer.execution.streams.ByteStream` over the channel of a pool ``Lease``;
    :meth:`close` releases the lease."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.channel = lease.channel

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send ``data``; ``OSError`` when the channel or the connection is gone,
        :class:`~envlayer.execution.streams.StreamEnded` when none of it went out
        (paramiko's ``Channel.send`` hands bytes to the transport only when it returns).
        With ``deadline``, each send waits for the server's window (the remote process
        reads) only until then (the channel's own timeout, restored after):
        :class:`~envlayer.execution.streams.WriteTimedOut`. Each send gets a view of what
        is left, not a copy: paramiko takes at most a packet (32 KiB) a send, and copying the
        rest each time made 50 MiB of stdin cost about 40 GB of copying."""
        channel, sent, view = self.channel, 0, memoryview(data)
        try:
            while sent < len(data):
                if deadline is not None:
                    channel.settimeout(max(deadline - time.monotonic(), 0.0))
                taken = channel.send(view[sent:])
                if taken == 0:  # paramiko: closed or EOF sent while waiting for the window
                    raise EOFError("the channel takes no more data")
                sent += taken
        except TimeoutError as exc:
            raise WriteTimedOut(f"the server took {sent} of {len(data)} bytes before the deadline") from exc
        except Exception as exc:  # paramiko: socket.error when closed; SSHException / EOFError on a dead transport
            if sent == 0:
                raise StreamEnded(f"the channel had closed: {type(exc).__name__}: {exc}") from exc
            raise OSError(f"the channel closed while sending: {type(exc).__name__}: {exc}") from exc
        finally:
            if deadline is not None:
                channel.settimeout(None)

    def end_input(self) -> None:
        """Send EOF on the process's stdin (see :func:`~envlayer_ssh.channel_io.send_eof`)."""
        try:
            send_eof(self.channel)
        except Exception:  # the connection failed meanwhile; reading the channel reports it
            log.debug("ssh: sending EOF failed", exc_info=True)

    def _available(self) -> Chunks:
        channel = self.channel
        chunks: Chunks = []
        while channel.recv_ready():
            chunks.append(("stdout", channel.recv(CHUNK)))
        while channel.recv_stderr_ready():
            chunks.append(("stderr", channel.recv_stderr(CHUNK)))
        return [c for c in chunks if c[1]]

    def read(self, deadline: float | None) -> Chunks | None:
        """See :meth:`envlayer.execution.streams.ByteStream.read`."""
        channel = self.channel
        while True:
            chunks = self._available()
            if chunks:
                return chunks
            if channel.eof_received or channel.closed:
                return self._available() or None
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                return []
            try:
                select.select([channel], [], [], wait)
            except (OSError, ValueError):
                return None

    def exit_status(self, wait: float) -> int | None:
        """The remote status (255 for a process killed by a signal, as ``ssh`` says).

        Raises :class:`ConnectionLost` when the connection dropped before the status came.
        """
        channel = self.channel
        channel.status_event.wait(wait)
        if channel.exit_status_ready() and (channel.exit_status >= 0 or self.lease.connection.alive):
            return 255 if channel.exit_status < 0 else channel.exit_status
        if not self.lease.connection.alive:
            raise ConnectionLost(
                f"the connection to {self.lease.pool.target.describe()} dropped while a command was running; "
                "it may or may not have run (and may still be running)",
                hint="check the remote state before running it again; the next call reconnects",
            )
        return None

    def close(self) -> None:
        """Close the channel and free its slot. Idempotent."""
        self.lease.release()
