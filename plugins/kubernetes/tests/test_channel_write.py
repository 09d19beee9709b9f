"""After a stdin write to the exec websocket ran out of time, nothing more is sent on it: the
write may have cut a frame short, and whatever followed (a keepalive ping, the close of
stdin, the close frame of ``WebSocket.close``) would be read by the API server as the rest
of that frame: bytes of the process's stdin. A real websocket-client ``WebSocket`` on one end
of a socket pair; the other end reads nothing until the write timed out, then everything."""

from __future__ import annotations

import os
import socket
import threading
import time
import types

import pytest

from envlayer.execution.streams import WriteTimedOut

STDIN_BYTES = 4 << 20
"""More than a socket pair holds: the write runs out of time."""


def _frames(data: bytes, chunk: int, mask_key: bytes) -> bytes:
    """The bytes of ``data`` sent as stdin frames of ``chunk`` bytes under ``mask_key``."""
    import websocket

    wire = b""
    for i in range(0, len(data), chunk):
        frame = websocket.ABNF.create_frame(b"\x00" + data[i : i + chunk], websocket.ABNF.OPCODE_BINARY)
        frame.get_mask_key = lambda n: mask_key
        wire += frame.format()
    return wire


def test_nothing_is_sent_after_a_write_ran_out_of_time() -> None:
    import websocket
    from envlayer_kubernetes.channel import STDIN_CHUNK, V5, ExecChannel

    ours, theirs = socket.socketpair()
    mask_key = os.urandom(4)
    ws = websocket.WebSocket(get_mask_key=lambda n: mask_key)  # one key: the frames' bytes are known
    ws.sock, ws.connected = ours, True
    ws.handshake_response = types.SimpleNamespace(subprotocol=V5)  # what connect() keeps
    channel = ExecChannel(ws, cluster=None, pod="p")  # type: ignore[arg-type]
    received = bytearray()

    def read_all() -> None:
        while data := theirs.recv(1 << 16):
            received.extend(data)

    reader = threading.Thread(target=read_all, daemon=True)
    data = os.urandom(STDIN_BYTES)
    try:
        with pytest.raises(WriteTimedOut):
            channel.write(data, time.monotonic() + 0.2)
        reader.start()  # from now on the other end takes whatever comes
        channel.start_keepalive()
        assert channel.keepalive is not None and not channel.keepalive.ping()
        with pytest.raises(BrokenPipeError):
            channel.close_stdin()
        channel.close()
        reader.join(10)
    finally:
        channel.close()
        theirs.close()
    sent = _frames(data, STDIN_CHUNK, mask_key)
    assert 0 < len(received) < len(sent) and sent.startswith(received), (len(received), len(sent))


def test_close_after_the_server_closed_releases_the_socket() -> None:
    """The API server ends an exec with a close frame; websocket-client answers it as it
    reads it (``recv_data_frame`` calls ``send_close``, which marks the websocket no longer
    connected), and its ``close`` then returns at once: the channel's ``close`` must still
    release the socket (before, each finished exec left one open until garbage collection)."""
    import websocket
    from envlayer_kubernetes.channel import V5, ExecChannel

    ours, theirs = socket.socketpair()
    ws = websocket.WebSocket()
    ws.sock, ws.connected = ours, True
    ws.handshake_response = types.SimpleNamespace(subprotocol=V5)
    channel = ExecChannel(ws, cluster=None, pod="p")  # type: ignore[arg-type]
    try:
        close_frame = websocket.ABNF(1, 0, 0, 0, websocket.ABNF.OPCODE_CLOSE, 0, b"\x03\xe8")  # a server's: unmasked
        theirs.sendall(close_frame.format())
        assert channel.read(time.monotonic() + 5) is None  # the server's close, answered
        channel.close()
        assert ours.fileno() == -1, "the channel's socket is still open after close()"
    finally:
        ours.close()
        theirs.close()


def test_a_write_without_a_deadline_ends_at_the_sockets_own_timeout() -> None:
    """Without a deadline the socket's own timeout (``api_timeout``) still bounds a stalled
    write, as websocket-client's did: a ``WriteTimedOut`` (the session then kills the
    command), not a broken connection, and nothing more is sent after it."""
    import websocket
    from envlayer_kubernetes.channel import V5, ExecChannel

    ours, theirs = socket.socketpair()
    ours.settimeout(0.2)
    ws = websocket.WebSocket()
    ws.sock, ws.connected = ours, True
    ws.handshake_response = types.SimpleNamespace(subprotocol=V5)
    channel = ExecChannel(ws, cluster=None, pod="p")  # type: ignore[arg-type]
    try:
        with pytest.raises(WriteTimedOut):
            channel.write(os.urandom(STDIN_BYTES))
        with pytest.raises(BrokenPipeError):
            channel.close_stdin()
    finally:
        channel.close()
        theirs.close()
