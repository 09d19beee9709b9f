"""Frames on a broker's socket: 1 byte kind, 4 bytes big-endian payload length, payload.

Client to broker: :data:`REQUEST` (first frame: NUL-separated ``version``, ``verb``
(``exec``, ``status``, ``stop``), ``cwd``, the argv count, the argv words, then the
caller's ``NAME=VALUE`` environment entries), :data:`STDIN` chunks and :data:`STDIN_EOF`
(only after the broker asked with :data:`NEED_STDIN`), :data:`CANCEL` (Ctrl-C: kill the
command's tree), :data:`HANGUP` (the client's stdout reader went away: the broker's next
write of the command's output fails as a broken pipe does in-process).

Broker to client: :data:`NEED_STDIN`; :data:`STARTED` (payload: the broker's pid) right
before the command runs: if the connection drops after it, the command may have run and
is never run again; :data:`STDOUT`/:data:`STDERR` chunks as they arrive (everything the
in-process CLI would print, ``--json`` output and notes included); :data:`EXIT` (payload:
the exit code in ASCII); :data:`IN_PROCESS` (payload: a note, possibly empty: run the
command in-process instead; nothing ran); :data:`STATUS` (payload: JSON).

Standard library only, and nothing but ``os`` (the client imports this on every call).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs milliseconds to import; type checkers read this as True
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Protocol

VERSION = "1"

REQUEST = b"Q"
STDIN = b"I"
STDIN_EOF = b"E"
CANCEL = b"C"
HANGUP = b"H"
NEED_STDIN = b"N"
STARTED = b"S"
STDOUT = b"O"
STDERR = b"R"
EXIT = b"X"
IN_PROCESS = b"P"
STATUS = b"T"

HEADER = 5
MAX_PAYLOAD = 64 * 1024 * 1024
"""Largest frame accepted; a bigger length means a broken or hostile peer."""


if TYPE_CHECKING:

    class Connection(Protocol):
        """What the frame functions need from a socket."""

        def sendall(self, data: bytes, /) -> None: ...
        def recv(self, size: int, /) -> bytes: ...


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One encoded frame."""
    return kind + len(payload).to_bytes(4, "big") + payload


def send(conn: Connection, kind: bytes, payload: bytes = b"") -> None:
    """Send one frame (raises ``OSError`` when the peer is gone)."""
    conn.sendall(frame(kind, payload))


def _exactly(conn: Connection, size: int) -> bytes | None:
    parts, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def receive(conn: Connection) -> tuple[bytes, bytes] | None:
    """The next ``(kind, payload)``, or None when the peer closed the connection at a
    frame boundary. Raises ``ValueError`` for a truncated or oversized frame."""
    header = _exactly(conn, HEADER)
    if header is None:
        return None
    size = int.from_bytes(header[1:], "big")
    if size > MAX_PAYLOAD:
        raise ValueError(f"frame of {size} bytes refused")
    payload = _exactly(conn, size) if size else b""
    if payload is None:
        raise ValueError("connection closed inside a frame")
    return header[:1], payload


def encode_request(verb: str, cwd: str, argv: Sequence[str], environ: Mapping[str, str]) -> bytes:
    """The payload of a :data:`REQUEST`."""
    words = [VERSION, verb, cwd, str(len(argv)), *argv, *(f"{k}={v}" for k, v in environ.items())]
    return b"\0".join(os.fsencode(w) for w in words)


def decode_request(payload: bytes) -> tuple[str, str, list[str], dict[str, str]]:
    """``(verb, cwd, argv, environ)`` of a :data:`REQUEST`. Raises ``ValueError`` for a
    payload that is not a request of this protocol version."""
    words = [os.fsdecode(w) for w in payload.split(b"\0")]
    if len(words) < 4 or words[0] != VERSION or not words[3].isdigit():
        raise ValueError("not a request of protocol version " + VERSION)
    count = int(words[3])
    argv, entries = words[4 : 4 + count], words[4 + count :]
    if len(argv) != count:
        raise ValueError("request with a truncated argv")
    environ = dict(entry.partition("=")[::2] for entry in entries)
    return words[1], words[2], argv, environ
