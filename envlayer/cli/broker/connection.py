"""Reaching a broker's Unix socket, for every module that talks to a broker (the
client, the starter in :mod:`envlayer.cli.broker.spawn`, ``broker status/stop`` in
:mod:`envlayer.cli.broker.control`), and the one-line notes they print when they cannot.

Standard library built-ins only (the client imports this on every call).
"""

from __future__ import annotations

import _socket
import errno
import os

UNREACHABLE = (errno.ENOENT, errno.ECONNREFUSED)
"""connect() errors that mean "no broker listens there"."""


def note(text: str) -> None:
    """``envlayer: note: TEXT`` on stderr."""
    os.write(2, f"envlayer: note: {text}\n".encode())


def connect(path: str) -> _socket.socket:
    """A connection to the broker listening at ``path``. Raises ``OSError``."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def reach(path: str) -> _socket.socket | None:
    """A connection to the broker at ``path``, or None when none listens there (no
    socket, or a dead broker's). Raises ``OSError`` for any other failure."""
    try:
        return connect(path)
    except OSError as exc:
        if exc.errno in UNREACHABLE:
            return None
        raise


def unreachable(path: str, exc: OSError) -> None:
    """Say that the broker at ``path`` cannot be reached (the command runs in-process)."""
    note(f"cannot reach the broker at {path}: {exc.strerror or exc}; running in-process")
